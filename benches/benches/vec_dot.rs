//! `vec_dot` of one weight row with one activation row, per type x ISA tier x cache level.
//! Throughput is weight bytes per second.
//!
//! `cargo bench -p benches --bench vec_dot -- Q4_K` filters by type name.

use benches::{random_floats, random_matrix, WEIGHT_TYPES};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::quant::{ops_for, Isa};

/// Row length (the granite-2b FFN input) and the working sets: one row (L1), 1 MiB (L2),
/// 64 MiB (beyond the caches: memory bandwidth).
const N: usize = 8192;
const LEVELS: [(&str, usize); 3] = [("L1", 0), ("L2", 1 << 20), ("DRAM", 64 << 20)];

fn vec_dot(c: &mut Criterion) {
    let x = random_floats(N, 7);
    for ty in WEIGHT_TYPES {
        let scalar = ops_for(ty, Isa::Scalar).unwrap();
        let act_ty = scalar.vec_dot_type;
        let mut act = vec![0u8; act_ty.row_bytes(N).unwrap()];
        (ops_for(act_ty, Isa::Scalar).unwrap().quantize.expect("a type with a quantizer"))(&x, &mut act);
        let row_bytes = ty.row_bytes(N).unwrap();
        let mut group = c.benchmark_group(format!("vec_dot/{ty}"));
        group.throughput(Throughput::Bytes(row_bytes as u64));
        for (level, set) in LEVELS {
            let rows = (set / row_bytes).max(1);
            let w = random_matrix(ty, rows, N, 11);
            for isa in Isa::available() {
                let f = ops_for(ty, isa).unwrap().vec_dot;
                let mut r = 0;
                group.bench_function(BenchmarkId::new(isa.name(), level), |b| {
                    b.iter(|| {
                        r = (r + 1) % rows;
                        black_box(f(&w[r * row_bytes..(r + 1) * row_bytes], black_box(&act)))
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(800));
    targets = vec_dot
}
criterion_main!(benches);
