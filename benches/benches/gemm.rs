//! The prompt GEMM: every repacked weight type (8-row panels, `quant::panel`) on every tier
//! the machine has, at the shapes of Qwen2.5-0.5B and granite-guardian-3.0-2b, for batches of
//! 1 (decode), 8 (parallel sequences), 64 and 512 (prompts), on two threads. Throughput is
//! multiply-adds per second (weight elements times batch), next to the machine's int8 peak on
//! the same two threads (`int8_peak/*`: register-only `vpmaddubsw` / `vpdpbusd` / `tdpbsud` loops).
//!
//! `cargo bench -p benches --bench gemm -- Q4_K` filters (by type, tier, shape or batch).

use benches::{pool, random_floats, random_matrix};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::matmul_each_on;
use engine::quant::panel::{repack, PanelLayout};
use engine::quant::x86::peak::{int8_peak, macs_per_round};
use engine::quant::WeightMatrix;
use engine::quant::{GgmlType, Isa};
use rayon::prelude::*;

/// (model, matrix, rows, cols): a wide and a tall matrix of each model; K-quants need rows of
/// whole 256-value blocks, so Qwen's 896-wide matrices are given to the 32-value types only.
const SHAPES: [(&str, &str, usize, usize); 4] = [
    ("qwen2.5-0.5b", "ffn_up", 4864, 896),
    ("qwen2.5-0.5b", "ffn_down", 896, 4864),
    ("granite-2b", "ffn_up", 8192, 2048),
    ("granite-2b", "ffn_down", 2048, 8192),
];

const TYPES: [GgmlType; 6] = [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

fn peak(c: &mut Criterion) {
    let pool = pool(2);
    let mut group = c.benchmark_group("int8_peak");
    let rounds = 1 << 16;
    for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
        let rounds = if isa == Isa::Amx { rounds / 64 } else { rounds };
        group.throughput(Throughput::Elements((2 * rounds * macs_per_round(isa)) as u64));
        group.bench_function(isa.name(), |b| {
            b.iter(|| pool.install(|| (0..2).into_par_iter().map(|_| int8_peak(isa, black_box(rounds)).unwrap()).sum::<i32>()))
        });
    }
    group.finish();
}

fn gemm(c: &mut Criterion) {
    let pool = pool(2);
    for ty in TYPES {
        let block = PanelLayout::of(ty).unwrap().block_values;
        for (model, name, rows, cols) in SHAPES.into_iter().filter(|s| s.3 % block == 0) {
            let bytes = random_matrix(ty, rows, cols, 5);
            let panels = repack(ty, rows, cols, &bytes).unwrap();
            let w = WeightMatrix::new(ty, rows, cols, &bytes).unwrap().with_panels(&panels);
            let mut group = c.benchmark_group(format!("gemm/{ty}/{model}/{name}"));
            for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
                for batch in [1usize, 8, 64, 512] {
                    let x = random_floats(cols * batch, 3);
                    let mut y = vec![0.0f32; rows * batch];
                    group.throughput(Throughput::Elements((rows * cols * batch) as u64));
                    group.bench_function(BenchmarkId::new(isa.name(), format!("batch{batch}")), |b| {
                        pool.install(|| {
                            b.iter(|| {
                                matmul_each_on(isa, &[w], black_box(&x), batch, &mut [&mut y]).unwrap();
                                black_box(y[0])
                            })
                        })
                    });
                }
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = peak, gemm
}
criterion_main!(benches);
