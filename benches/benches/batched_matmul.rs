//! Batched matrix products at the shapes of Qwen2.5-0.5B (the server's continuous batching:
//! every running sequence contributes one activation row per step), for batches of 1, 4 and 8
//! on two threads, on the active ISA tier. Throughput is multiply-adds per second (weight
//! elements times batch), so a kernel that reuses each weight row across the batch shows it as
//! a rate that grows with the batch. Matrices are repacked into panels, as models run them.
//!
//! `cargo bench -p benches --bench batched_matmul -- lm_head` filters.

use benches::{pool, random_floats, random_matrix};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::matmul;
use engine::quant::panel::repack;
use engine::quant::GgmlType;
use engine::quant::WeightMatrix;

/// (matrix, rows, cols, type): what the Q4_K_M file of Qwen2.5-0.5B stores (its 896-wide rows
/// cannot hold 256-value K-quant blocks, so most matrices are Q5_0; the tied output matrix
/// is Q8_0).
const SHAPES: [(&str, usize, usize, GgmlType); 4] = [
    ("ffn_up", 4864, 896, GgmlType::Q5_0),
    ("ffn_down_q4_k", 896, 4864, GgmlType::Q4_K),
    ("ffn_down_q6_k", 896, 4864, GgmlType::Q6_K),
    ("lm_head", 151936, 896, GgmlType::Q8_0),
];

fn batched(c: &mut Criterion) {
    let pool = pool(2);
    for (name, rows, cols, ty) in SHAPES {
        let w_bytes = random_matrix(ty, rows, cols, 5);
        let panels = repack(ty, rows, cols, &w_bytes);
        let w = WeightMatrix::new(ty, rows, cols, &w_bytes).unwrap();
        let w = panels.as_ref().map_or(w, |p| w.with_panels(p));
        let mut group = c.benchmark_group(format!("batched_matmul/qwen2.5-0.5b/{name}"));
        for batch in [1usize, 4, 8] {
            let x = random_floats(cols * batch, 3);
            let mut y = vec![0.0f32; rows * batch];
            group.throughput(Throughput::Elements((rows * cols * batch) as u64));
            group.bench_function(BenchmarkId::new(format!("{ty}"), format!("batch{batch}")), |b| {
                pool.install(|| {
                    b.iter(|| {
                        matmul(&w, black_box(&x), batch, &mut y).unwrap();
                        black_box(y[0])
                    })
                })
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = batched
}
criterion_main!(benches);
