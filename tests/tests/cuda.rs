//! The GPU checks of the CUDA backend (`--features cuda`), ignored by default since they need
//! a GPU (and its driver, and NVRTC: `tools/fetch-nvrtc.sh`):
//!
//! `cargo test -p engine-tests --features cuda --test cuda -- --ignored --nocapture`
//!
//! The tiny models in all 13 weight types against llama.cpp's logits within the CPU's bounds
//! and batch invariance bit for bit (the CPU's checks, `engine_tests::tiny`, on the GPU); and the real models (gemma-3-270m, Qwen2.5-0.5B)
//! agreeing with the CPU backend on the top token wherever the CPU's choice is clear.
#![cfg(feature = "cuda")]

use engine::backend::Device;
use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::model::{BatchEntry, Model};
use engine_tests::fetch_model;
use engine_tests::tiny::{
    heads_limited_at_load_give_the_bits_of_heads_limited_after, limited_heads_give_the_leading_logits, tiny_models_are_batch_invariant,
    tiny_models_match_llama_cpp,
};

const GPU: Device = Device::Cuda(0);

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiny_models_on_the_gpu_match_llama_cpp_in_every_weight_type() {
    tiny_models_match_llama_cpp("cuda:0", |path| Model::load_on(path, GPU).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batch_invariance_on_the_gpu_is_bitwise() {
    tiny_models_are_batch_invariant(|path| Model::load_on(path, GPU).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_head_of_the_first_token_ids_on_the_gpu_gives_their_logits_bit_for_bit() {
    limited_heads_give_the_leading_logits(|path| Model::load_on(path, GPU).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_head_limited_at_load_on_the_gpu_gives_the_bits_of_one_limited_after() {
    heads_limited_at_load_give_the_bits_of_heads_limited_after(GPU);
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
