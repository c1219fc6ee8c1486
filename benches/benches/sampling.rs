//! Drawing one token from a row of Qwen2.5's vocabulary (151,936 logits): the path every
//! generated token of a sampled (temperature > 0) request takes, once per sequence and step.
//! `whole-vocabulary` is OpenAI's default (a temperature alone, nothing cut); `top-k-40` and
//! `top-p-0.95` are the cuts llama-server applies by default.
//!
//! `cargo bench -p benches --bench sampling -- whole` filters.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use engine::sampling::{distribution, Sampler, SamplingParams};
use rand::{Rng, SeedableRng};

const N_VOCAB: usize = 151_936;

/// Logits shaped like a language model's: most tokens far below a few likely ones.
fn logits() -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    (0..N_VOCAB)
        .map(|_| {
            let x: f32 = rng.random_range(-1.0..1.0);
            let tail: f32 = rng.random_range(0.0..1.0);
            4.0 * x - 12.0 * tail * tail + if rng.random_range(0..1000) == 0 { 10.0 } else { 0.0 }
        })
        .collect()
}

fn sampling(c: &mut Criterion) {
    let row = logits();
    let mut group = c.benchmark_group("sample-151936");
    group.throughput(Throughput::Elements(1));
    let cases = [
        ("whole-vocabulary", SamplingParams { temperature: 0.8, ..SamplingParams::default() }),
        ("top-k-40", SamplingParams { temperature: 0.8, top_k: 40, ..SamplingParams::default() }),
        ("top-p-0.95", SamplingParams { temperature: 0.8, top_p: 0.95, ..SamplingParams::default() }),
        ("greedy", SamplingParams::greedy()),
    ];
    for (name, params) in cases {
        let mut sampler = Sampler::new(params, &[]);
        group.bench_function(name, |b| {
            b.iter(|| {
                // the fixed order's path (`Sampler::distribution` without a named order)
                let dist = distribution(sampler.params(), black_box(&row)).expect("finite logits");
                black_box(sampler.sample(&dist))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sampling);
criterion_main!(benches);
