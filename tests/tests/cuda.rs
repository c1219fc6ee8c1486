//! The GPU checks of the CUDA backend (`--features cuda`), ignored by default since they need
//! a GPU (and its driver, and NVRTC: `tools/fetch-nvrtc.sh`):
//!
//! `cargo test -p engine-tests --features cuda --test cuda -- --ignored --nocapture`
//!
//! The tiny models in all 13 weight types against llama.cpp's logits within the CPU's bounds;
//! batch invariance bit for bit on the GPU; and the real models (gemma-3-270m, Qwen2.5-0.5B)
//! agreeing with the CPU backend on the top token wherever the CPU's choice is clear.
#![cfg(feature = "cuda")]

use engine::backend::Device;
use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::model::{BatchEntry, Model};
use engine_tests::{fetch_model, fixture, json_ids, read_f32s, read_json};

const TYPES: &[&str] = &["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"];
const GPU: Device = Device::Cuda(0);

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiny_models_on_the_gpu_match_llama_cpp_in_every_weight_type() {
    let tolerance = read_json(&fixture("models/tolerance.json"));
    let mut report = Vec::new();
    for model_name in ["tiny-llama", "tiny-granite"] {
        for ty in TYPES {
            let name = format!("{model_name}-{ty}");
            let model = Model::load_on(fixture(&format!("models/{name}.gguf")), GPU).unwrap();
            let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
            let bin = read_f32s(&fixture(&format!("models/golden/{name}.logits.bin")));
            let bound = tolerance["files"][&name]["recommended"]["f32_attention"]["max_abs"].as_f64().unwrap() as f32;
            let mut worst = 0.0f32;
            for seq in golden["sequences"].as_array().unwrap() {
                let tokens = json_ids(&seq["tokens"]);
                let offset = seq["logits"]["offset"].as_u64().unwrap() as usize / 4;
                let mut kv = model.new_kv_cache(KvType::F32, 512);
                let out = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
                for p in 0..tokens.len() {
                    for (a, b) in out.row(p).iter().zip(&bin[offset + p * 512..offset + (p + 1) * 512]) {
                        worst = worst.max((a - b).abs());
                    }
                }
            }
            report.push(format!("cuda:0 {name}: max |gpu - llama.cpp| = {worst:.3e} (bound {bound:.1e})"));
            assert!(worst <= bound, "{}", report.join("\n"));
        }
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batch_invariance_on_the_gpu_is_bitwise() {
    for name in ["tiny-llama-Q4_K", "tiny-granite-Q8_0", "tiny-llama-F16"] {
        let model = Model::load_on(fixture(&format!("models/{name}.gguf")), GPU).unwrap();
        let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
        let tokens = json_ids(&golden["sequences"][2]["tokens"]);
        let other = json_ids(&golden["sequences"][1]["tokens"]);
        for ty in [KvType::F32, KvType::F16] {
            let mut kv = model.new_kv_cache(ty, 512);
            let full = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
            let mut kv1 = model.new_kv_cache(ty, 512);
            for (p, &t) in tokens.iter().enumerate() {
                let o = model.forward(&mut kv1, &[BatchEntry { seq: 0, token: t, pos: p as u32, logits: true }]).unwrap();
                assert_eq!(o.row(0), full.row(p), "{name} {ty:?}: position {p} alone vs in a prefill batch");
            }
            let mut kv2 = model.new_kv_cache(ty, 512);
            let (mut p, mut q) = (0, 0);
            for chunk in [5usize, 1, 17, 3, 38] {
                let mut batch = BatchEntry::sequence(1, &tokens[p..p + chunk], p as u32, true);
                if q < other.len() {
                    batch.extend(BatchEntry::sequence(7, &other[q..q + 1], q as u32, true));
                    q += 1;
                }
                let o = model.forward(&mut kv2, &batch).unwrap();
                for i in 0..chunk {
                    assert_eq!(o.row(i), full.row(p + i), "{name} {ty:?}: position {} in a mixed batch", p + i);
                }
                p += chunk;
            }
        }
    }
}

/// Top-1 agreement between the GPU and the CPU over a real model's prompt, at the positions
/// where the CPU's top two logits are at least `margin` apart.
fn real_model_agrees(target: &str, margin: f32) {
    let path = fetch_model(target);
    let cpu = Model::load(&path).unwrap();
    let gpu = Model::load_on(&path, GPU).unwrap();
    let text = "The quick brown fox jumps over the lazy dog. In 1969, Neil Armstrong became the first person to walk on the Moon; \
                the mission was Apollo 11, and its command module pilot was Michael Collins.";
    let tokens = cpu.tokenizer().encode(text, true, true);
    let run = |m: &Model| {
        let mut kv = m.new_kv_cache(KvType::F16, 1024);
        m.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap()
    };
    let (a, b) = (run(&cpu), run(&gpu));
    let (mut confident, mut agree, mut worst) = (0, 0, 0.0f32);
    for p in 0..tokens.len() {
        let (ca, cb) = (a.row(p), b.row(p));
        let mut sorted = ca.to_vec();
        sorted.sort_by(|x, y| y.total_cmp(x));
        for (x, y) in ca.iter().zip(cb) {
            worst = worst.max((x - y).abs());
        }
        if sorted[0] - sorted[1] >= margin {
            confident += 1;
            agree += usize::from(argmax(ca) == argmax(cb));
        }
    }
    eprintln!("{target}: top-1 agrees at {agree}/{confident} confident positions; max |gpu - cpu| {worst:.3}");
    assert!(confident > 0);
    assert_eq!(agree, confident, "{target}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemma_3_270m_on_the_gpu_agrees_with_the_cpu() {
    real_model_agrees("gemma", 1.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn qwen2_5_coder_0_5b_on_the_gpu_agrees_with_the_cpu() {
    real_model_agrees("qwen2.5-coder", 1.0);
}
