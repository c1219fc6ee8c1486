//! A 9-risk guard scan (shared prompt prefix computed once, the nine suffixes as one batch)
//! against nine independent single-risk evaluations of the same prompts, on the synthetic
//! granite-guardian-3.0-2b-shaped model (`../shared/tools/make-synthetic-granite.sh`; another
//! model with `GUARD_BENCH_MODEL=path`). The user message is 150 tokens. On 2 cores one scan
//! takes about a minute and the nine evaluations almost three: the whole bench runs ~40 min.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use engine::guard::{Evaluator, EvaluatorOptions, GuardInput, GuardRequest, Risk};
use engine::model::Model;

fn model_path() -> PathBuf {
    std::env::var_os("GUARD_BENCH_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("ENGINE_ASSETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/engine-assets"));
        cache.join("models/synthetic/granite-2b-q4_k_m.gguf")
    })
}

/// A user message of exactly `n` tokens under the model's tokenizer.
fn message_of(model: &Model, n: usize) -> String {
    let sentence = "Could you explain how the old mill by the river worked, and why the village kept it running for so long? ";
    let text = sentence.repeat(n / 10 + 2);
    let ids = model.tokenizer().encode(&text, false, false);
    model.tokenizer().decode(&ids[..n])
}

fn guard_scan(c: &mut Criterion) {
    // `cargo test --all-targets` runs every bench once as a test: this one takes minutes on a
    // 2B model, so it only runs under `cargo bench` (which passes --bench)
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("guard_scan: runs under `cargo bench` only");
        return;
    }
    let path = model_path();
    if !path.exists() {
        eprintln!("guard_scan: {} not found (run ../shared/tools/make-synthetic-granite.sh); skipped", path.display());
        return;
    }
    let model = Arc::new(Model::load(&path).expect("model"));
    let input = GuardInput::new(message_of(&model, 150));
    let ev = Evaluator::from_model(model, EvaluatorOptions::default()).expect("evaluator");
    let mut group = c.benchmark_group("guard_scan");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(20));
    group.bench_function("scan_9_risks_shared_prefix", |b| b.iter(|| ev.scan(&input).expect("scan")));
    group.bench_function("nine_independent_evaluations", |b| {
        b.iter(|| {
            for risk in Risk::HARM {
                let request = GuardRequest { input: input.clone(), risks: vec![risk.name().into()], ..Default::default() };
                ev.evaluate(&request).expect("evaluate");
            }
        })
    });
    group.finish();
}

criterion_group!(benches, guard_scan);
criterion_main!(benches);
