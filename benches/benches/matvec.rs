//! Matrix-vector products at real model shapes (gemma-3-270m, granite-3.0-2b), one and two
//! threads, on the active ISA tier. Throughput is weight bytes per second; the weights rotate
//! over copies totalling more than the last-level cache, so the numbers are what decode sees
//! (memory bound), comparable with the machine's read bandwidth.
//!
//! `cargo bench -p benches --bench matvec -- granite-2b/ffn_up` filters.

use benches::{pool, random_floats, random_matrix};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::matmul;
use engine::quant::GgmlType;
use engine::quant::WeightMatrix;

/// (model, matrix, rows, cols, types): the types the real Q4_K_M file stores for that matrix
/// (gemma-3-270m's 640-wide rows cannot hold 256-value K-quant blocks, so they are Q5_0), plus
/// Q8_0 / F16 for the other common file types.
const SHAPES: [(&str, &str, usize, usize, &[GgmlType]); 7] = [
    ("gemma-3-270m", "attn_q", 1024, 640, &[GgmlType::Q5_0, GgmlType::Q8_0]),
    ("gemma-3-270m", "ffn_up", 2048, 640, &[GgmlType::Q5_0, GgmlType::Q8_0]),
    ("gemma-3-270m", "ffn_down", 640, 2048, &[GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0]),
    ("gemma-3-270m", "token_embd", 262144, 640, &[GgmlType::Q8_0]),
    ("granite-2b", "attn_q", 2048, 2048, &[GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16]),
    ("granite-2b", "ffn_up", 8192, 2048, &[GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16]),
    ("granite-2b", "ffn_down", 2048, 8192, &[GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0]),
];

/// Bytes of weights to rotate over: well past any last-level cache.
const WORKING_SET: usize = 256 << 20;

fn matvec(c: &mut Criterion) {
    for (model, name, rows, cols, types) in SHAPES {
        let x = random_floats(cols, 3);
        for &ty in types {
            let bytes = ty.row_bytes(cols).unwrap() * rows;
            let copies = WORKING_SET.div_ceil(bytes).clamp(2, 64);
            // Identical copies at distinct addresses: quantizing is slow, and the caches only
            // care about addresses.
            let one = random_matrix(ty, rows, cols, 5);
            let mats: Vec<Vec<u8>> = vec![one; copies];
            let mut group = c.benchmark_group(format!("matvec/{model}/{name}"));
            group.throughput(Throughput::Bytes(bytes as u64));
            for threads in [1, 2] {
                let pool = pool(threads);
                let mut y = vec![0.0f32; rows];
                let mut i = 0;
                group.bench_function(BenchmarkId::new(format!("{ty}"), format!("{threads}t")), |b| {
                    pool.install(|| {
                        b.iter(|| {
                            i = (i + 1) % copies;
                            let w = WeightMatrix::new(ty, rows, cols, &mats[i]).unwrap();
                            matmul(&w, black_box(&x), 1, &mut y).unwrap();
                            black_box(y[0])
                        })
                    })
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = matvec
}
criterion_main!(benches);
