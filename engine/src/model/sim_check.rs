//! Whole models on the kernel backend, run by the CPU execution harness (`--features sim`):
//! the tiny random-weight fixtures against llama.cpp's logits within the same bounds as the CPU
//! backend, a greedy continuation, and batch invariance bit for bit — the forward pass, the
//! KV pool, the launch choices (matrix-vector for single rows, tiled for prompts) exactly as a
//! GPU runs them, without a GPU.

use std::path::PathBuf;

use crate::kv_cache::KvType;
use crate::logprobs::argmax;
use crate::model::{BatchEntry, Model};

pub(crate) fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(rel)
}

pub(crate) fn json(rel: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixture(rel)).expect("fixture")).expect("json")
}

fn f32s(rel: &str) -> Vec<f32> {
    std::fs::read(fixture(rel)).expect("fixture").chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("ids").iter().map(|t| t.as_u64().expect("id") as u32).collect()
}

/// One file per weight-type family (a legacy quant with and without an offset, every K-quant
/// layout, a float type), both architectures.
const FILES: &[&str] = &[
    "tiny-llama-Q4_K",
    "tiny-llama-Q8_0",
    "tiny-llama-Q2_K",
    "tiny-llama-BF16",
    "tiny-granite-Q5_1",
    "tiny-granite-Q6_K",
    "tiny-granite-Q3_K",
];

#[test]
fn tiny_models_on_the_simulated_gpu_match_llama_cpp() {
    let tolerance = json("models/tolerance.json");
    let mut report = Vec::new();
    for &name in FILES {
        let model = Model::load_simulated(fixture(&format!("models/{name}.gguf"))).expect("load");
        let golden = json(&format!("models/golden/{name}.logits.json"));
        let bin = f32s(&format!("models/golden/{name}.logits.bin"));
        let bound = tolerance["files"][name]["recommended"]["f32_attention"]["max_abs"].as_f64().expect("bound") as f32;
        // the longest sequence (64 positions: two KV blocks, the tiled matrix kernels)
        let seq = &golden["sequences"][2];
        let tokens = ids(&seq["tokens"]);
        let offset = seq["logits"]["offset"].as_u64().expect("offset") as usize / 4;
        let mut kv = model.new_kv_cache(KvType::F32, 512);
        let out = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).expect("forward");
        let mut worst = 0.0f32;
        for p in 0..tokens.len() {
            for (a, b) in out.row(p).iter().zip(&bin[offset + p * 512..offset + (p + 1) * 512]) {
                worst = worst.max((a - b).abs());
            }
        }
        // greedy decoding (the matrix-vector kernels) while llama.cpp's choice is clear
        let margins: Vec<f64> = seq["greedy_margins"].as_array().expect("margins").iter().map(|v| v.as_f64().expect("margin")).collect();
        let greedy = ids(&seq["greedy"]);
        let mut next = argmax(out.row(tokens.len() - 1));
        for (j, &want) in greedy.iter().enumerate().take(4) {
            if margins[j] < 2.0 * f64::from(bound) {
                break;
            }
            assert_eq!(next, want, "{name}: greedy token {j}");
            let o =
                model.forward(&mut kv, &[BatchEntry { seq: 0, token: next, pos: (tokens.len() + j) as u32, logits: true }]).expect("step");
            next = argmax(o.row(0));
        }
        report.push(format!("sim {name}: max |sim - llama.cpp| = {worst:.3e} (bound {bound:.1e})"));
        assert!(worst <= bound, "{}", report.join("\n"));
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn batch_invariance_on_the_simulated_gpu_is_bitwise() {
    let name = "tiny-llama-Q4_K";
    let model = Model::load_simulated(fixture(&format!("models/{name}.gguf"))).expect("load");
    let golden = json(&format!("models/golden/{name}.logits.json"));
    let tokens = ids(&golden["sequences"][2]["tokens"]);
    let other = ids(&golden["sequences"][1]["tokens"]);
    for ty in KvType::ALL {
        let mut kv = model.new_kv_cache(ty, 512);
        let full = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens[..40], 0, true)).expect("prefill");
        // one token at a time (matrix-vector kernels, decode attention rows)
        let mut kv1 = model.new_kv_cache(ty, 512);
        for (p, &t) in tokens[..40].iter().enumerate() {
            let o = model.forward(&mut kv1, &[BatchEntry { seq: 0, token: t, pos: p as u32, logits: true }]).expect("step");
            assert_eq!(o.row(0), full.row(p), "{ty:?}: position {p} alone vs in a prefill batch");
        }
        // uneven chunks interleaved with another sequence
        let mut kv2 = model.new_kv_cache(ty, 512);
        let (mut p, mut q) = (0, 0);
        for chunk in [3usize, 1, 20, 16] {
            let mut batch = BatchEntry::sequence(1, &tokens[p..p + chunk], p as u32, true);
            batch.extend(BatchEntry::sequence(7, &other[q..q + 1], q as u32, true));
            q += 1;
            let o = model.forward(&mut kv2, &batch).expect("mixed batch");
            for i in 0..chunk {
                assert_eq!(o.row(i), full.row(p + i), "{ty:?}: position {} in a mixed batch", p + i);
            }
            p += chunk;
        }
        // a fork of a shared prefix (a copy-on-write of a pool block) equals the sequence
        kv.fork(0, 1).expect("fork");
        kv.truncate(1, 33);
        let o = model.forward(&mut kv, &BatchEntry::sequence(1, &tokens[33..40], 33, true)).expect("forked");
        for i in 0..7 {
            assert_eq!(o.row(i), full.row(33 + i), "{ty:?}: forked sequence at {}", 33 + i);
        }
    }
}

pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    dot / (na.sqrt() * nb.sqrt())
}

/// A quantized cache on the simulated GPU (its quantizing writes, rotation and dequantizing
/// attention) gives the logits the CPU gives with the same cache: the rows going in differ only
/// in rounding, so a quant may land one level apart, nothing more.
#[test]
fn quantized_caches_on_the_simulated_gpu_match_the_cpu() {
    let name = "tiny-llama-Q8_0";
    let path = fixture(&format!("models/{name}.gguf"));
    let (sim, cpu) = (Model::load_simulated(&path).expect("load"), Model::load(&path).expect("load"));
    let golden = json(&format!("models/golden/{name}.logits.json"));
    let tokens = ids(&golden["sequences"][2]["tokens"]);
    for ty in [KvType::Q8_0, KvType::Q4_0] {
        let run = |m: &Model| {
            let mut kv = m.new_kv_cache(ty, 512);
            m.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).expect("forward").values
        };
        let (got, want) = (run(&sim), run(&cpu));
        let worst = got.iter().zip(&want).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        eprintln!("sim vs cpu, {ty:?} cache: max |diff| {worst:.3e} of logits up to {scale:.2}");
        // measured: 1.3e-2 (q8_0) and 7.1e-3 (q4_0) of logits up to 1.44
        assert!(worst <= 0.05 * scale, "{ty:?}: max |sim - cpu| = {worst} against logits up to {scale}");
    }
}

/// A decoding step's index arrays (the token, its position, its KV slot, the block table, the
/// sequence lengths) go up once each, whatever the layers, as on a GPU: every layer's launches
/// read the same buffers, and the logits come back once. Uploaded per launch instead, these two
/// layers alone made 25 transfers a step. The first step is recorded (its fills and uploads, 11
/// transfers); the next ones replay it as one graph that carries the arrays from staging itself
/// (in one copy), so that only the logits' download is left (`kernels/src/steps.rs`).
#[test]
fn a_decoding_step_sends_its_index_arrays_once_whatever_the_layers() {
    for name in ["tiny-llama-Q4_K", "tiny-granite-Q6_K"] {
        let model = Model::load_simulated(fixture(&format!("models/{name}.gguf"))).expect("load");
        assert_eq!(model.config().n_layer, 2, "{name}");
        let mut kv = model.new_kv_cache(KvType::F16, 512);
        let prompt: Vec<u32> = (1..20).collect();
        model.forward(&mut kv, &BatchEntry::sequence(0, &prompt, 0, false)).expect("prompt");
        for pos in 19..23 {
            let before = kernels::Issued::on_this_thread();
            model.forward(&mut kv, &[BatchEntry { seq: 0, token: 5, pos, logits: true }]).expect("step");
            let after = kernels::Issued::on_this_thread();
            let transfers = after.transfers - before.transfers;
            let most = if pos == 19 { 11 } else { 1 };
            assert!(transfers <= most, "{name} at {pos}: {transfers} transfers in a decoding step");
        }
    }
}

/// `name` on the simulated GPU, its decoding steps replayed as graphs or not.
fn simulated(name: &str, graphs: bool) -> Model {
    use crate::backend::kernel::KernelBackend;
    use kernels::host::{HostDevice, HostRuntime};
    let file = std::sync::Arc::new(crate::gguf::GgufFile::open(fixture(&format!("models/{name}.gguf"))).expect("open"));
    let backend = KernelBackend::with_runtime(HostRuntime::with_graphs(HostDevice, graphs), crate::backend::Device::Cuda(0));
    Model::on_simulated(file, backend).expect("load")
}

/// Decoding steps replayed as graphs (`kernels/src/steps.rs`) give the bits of the same steps
/// issued launch by launch, and a replayed step is one launch: here one sequence, then three
/// side by side, over 70 positions (across two KV block boundaries of each sequence), the
/// tokens fed back greedily.
#[test]
fn decoding_steps_replayed_as_graphs_give_the_same_bits_in_one_launch() {
    for name in ["tiny-llama-Q4_K", "tiny-granite-Q6_K"] {
        let [graphs, eager] = [true, false].map(|g| simulated(name, g));
        let mut caches = [&graphs, &eager].map(|m| m.new_kv_cache(KvType::F16, 512));
        for seqs in [1u32, 3] {
            for (m, kv) in [&graphs, &eager].into_iter().zip(caches.iter_mut()) {
                for s in 0..seqs {
                    kv.remove(s);
                    let prompt: Vec<u32> = (1..20 + s).collect();
                    m.forward(kv, &BatchEntry::sequence(s, &prompt, 0, false)).expect("prompt");
                }
            }
            let (mut replayed, mut steps, mut eager_launches) = (0, 0, 0);
            let mut tokens: Vec<u32> = (0..seqs).map(|s| 5 + s).collect();
            for step in 0..70u32 {
                let batch: Vec<BatchEntry> =
                    (0..seqs).map(|s| BatchEntry { seq: s, token: tokens[s as usize], pos: 19 + s + step, logits: true }).collect();
                let before = kernels::Issued::on_this_thread();
                let got = graphs.forward(&mut caches[0], &batch).expect("step");
                let launches = kernels::Issued::on_this_thread().launches - before.launches;
                let before = kernels::Issued::on_this_thread().launches;
                let want = eager.forward(&mut caches[1], &batch).expect("step");
                eager_launches = kernels::Issued::on_this_thread().launches - before;
                assert!(
                    got.values.iter().zip(&want.values).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name}, {seqs} sequence(s), step {step}: a replayed step's logits differ"
                );
                steps += 1;
                replayed += usize::from(launches == 1);
                tokens = (0..seqs as usize).map(|r| argmax(got.row(r)) as u32).collect();
            }
            eprintln!(
                "{name}, {seqs} sequence(s): {replayed} of {steps} steps replayed as one launch ({eager_launches} launches unreplayed)"
            );
            // the first step records; the others replay, across the sequences' KV block
            // boundaries too (their tables are uploaded padded)
            assert_eq!(replayed, steps - 1, "{name}, {seqs} sequence(s): steps replayed");
        }
    }
}

/// Two threads decoding at once on one model give each the bits of decoding alone: the
/// runtime records and replays one thread's steps while the other's are issued as they come,
/// its downloads and buffers beside the first's recordings.
#[test]
fn two_threads_decoding_at_once_give_the_bits_of_one() {
    let model = simulated("tiny-llama-Q4_K", true);
    let tokens: Vec<u32> = (0..40).map(|i| 3 + i * 7 % 120).collect();
    // [position][n_vocab] of one sequence decoded step by step
    let decode = || {
        let mut kv = model.new_kv_cache(KvType::F16, 512);
        let before = kernels::Issued::on_this_thread().launches;
        let mut replayed = 0;
        let rows: Vec<Vec<f32>> = tokens
            .iter()
            .enumerate()
            .map(|(p, &token)| {
                let launches = kernels::Issued::on_this_thread().launches;
                let row =
                    model.forward(&mut kv, &[BatchEntry { seq: 0, token, pos: p as u32, logits: true }]).expect("step").row(0).to_vec();
                replayed += usize::from(kernels::Issued::on_this_thread().launches - launches == 1);
                row
            })
            .collect();
        (rows, replayed, kernels::Issued::on_this_thread().launches - before)
    };
    let (alone, ..) = decode();
    let together: Vec<_> = std::thread::scope(|s| {
        let running = [s.spawn(decode), s.spawn(decode)];
        running.map(|t| t.join().expect("a decoding thread panicked")).into_iter().collect()
    });
    for (thread, (rows, replayed, launches)) in together.iter().enumerate() {
        eprintln!("thread {thread}: {replayed} of {} steps replayed as one launch, {launches} launches", tokens.len());
        for (p, (got, want)) in rows.iter().zip(&alone).enumerate() {
            assert!(got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()), "thread {thread}, position {p}: the logits differ");
        }
    }
}
