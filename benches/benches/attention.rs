//! One decoding step's attention for one sequence: every query head of Qwen2.5-0.5B's shape
//! (14 heads sharing 2 key/value heads of 64) over an f16 cache of 100, 500 and 2,000
//! positions, as the engine runs it (one call per key/value head).
//!
//! `cargo bench -p benches --bench attention -- 500` filters.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::backend::cpu::attention::{attend_group, with_scratch};
use engine::backend::cpu::kv_rows::{KvRow, KvRows};
use engine::backend::AttentionShape;
use half::f16;

const SHAPE: AttentionShape = AttentionShape { n_head: 14, n_head_kv: 2, head_dim_k: 64, head_dim_v: 64, scale: 0.125, softcap: 0.0 };

/// A cache of `n` positions, keys and values of both key/value heads per row.
struct Cache {
    keys: Vec<Vec<f16>>,
    values: Vec<Vec<f16>>,
}

impl KvRows for Cache {
    fn key(&self, pos: usize) -> KvRow<'_> {
        KvRow::F16(&self.keys[pos])
    }
    fn value(&self, pos: usize) -> KvRow<'_> {
        KvRow::F16(&self.values[pos])
    }
}

fn values(n: usize, salt: u32) -> Vec<f32> {
    let mut s = salt.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32 * 2.0 - 1.0
        })
        .collect()
}

fn attention(c: &mut Criterion) {
    let mut group = c.benchmark_group("attention-decode-14x64");
    let row = SHAPE.n_head_kv * SHAPE.head_dim_k;
    for n in [100, 500, 2000] {
        let cache = Cache {
            keys: (0..n).map(|p| values(row, p as u32 + 1).into_iter().map(f16::from_f32).collect()).collect(),
            values: (0..n).map(|p| values(row, p as u32 + 9_999).into_iter().map(f16::from_f32).collect()).collect(),
        };
        let q = values(SHAPE.n_head * SHAPE.head_dim_k, 7);
        let per_group = SHAPE.n_head / SHAPE.n_head_kv * SHAPE.head_dim_v;
        let mut out = vec![0.0f32; SHAPE.n_head * SHAPE.head_dim_v];
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                for (g, out) in out.chunks_exact_mut(per_group).enumerate() {
                    with_scratch(|s| attend_group(black_box(&q), g, &SHAPE, 0..n, &cache, out, s));
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, attention);
criterion_main!(benches);
