//! The tiny random-weight llama and granite models in all 13 weight types against llama.cpp's
//! logits (`fixtures/models/golden/`): every position of the three fixture sequences within the
//! file's recommended tolerance (`tolerance.json`, f32 attention); greedy continuations equal
//! while llama.cpp's margins are clear; and batch invariance, bit for bit.

use engine::kv_cache::KvType;
use engine::model::{BatchEntry, Model};
use engine_tests::fixture;
use engine_tests::tiny::{
    heads_limited_at_load_give_the_bits_of_heads_limited_after, limited_heads_give_the_leading_logits, tiny_models_are_batch_invariant,
    tiny_models_match_llama_cpp,
};

#[test]
fn logits_match_llama_cpp_in_every_weight_type() {
    tiny_models_match_llama_cpp("cpu", |path| Model::load(path).unwrap());
}

#[test]
fn batch_invariance_is_bitwise() {
    tiny_models_are_batch_invariant(|path| Model::load(path).unwrap());
}

#[test]
fn a_head_of_the_first_token_ids_gives_their_logits_bit_for_bit() {
    limited_heads_give_the_leading_logits(|path| Model::load(path).unwrap());
}

#[test]
fn a_head_limited_at_load_gives_the_bits_of_one_limited_after() {
    heads_limited_at_load_give_the_bits_of_heads_limited_after(engine::backend::Device::Cpu);
}

/// The same on the kernel backend (run by the CPU execution harness): the head a view of the
/// uploaded output's leading rows.
#[cfg(feature = "sim")]
#[test]
fn a_head_of_the_first_token_ids_on_the_simulated_gpu_gives_their_logits_bit_for_bit() {
    limited_heads_give_the_leading_logits(|path| Model::load_simulated(path).unwrap());
}

#[test]
fn thread_count_does_not_change_logits() {
    let model = Model::load(fixture("models/tiny-llama-Q5_K.gguf")).unwrap();
    let tokens: Vec<u32> = (0..48).map(|i| 3 + (i * 37) % 500).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut kv = model.new_kv_cache(KvType::F16, 64);
            model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap().values
        })
    };
    assert_eq!(run(1), run(2));
    assert_eq!(run(1), run(3));
}

#[test]
fn bad_batches_and_context_overflow_are_errors() {
    let model = Model::load(fixture("models/tiny-llama-F32.gguf")).unwrap();
    let mut kv = model.new_kv_cache(KvType::F32, 8);
    let err = model.forward(&mut kv, &BatchEntry::sequence(0, &[1; 9], 0, false)).unwrap_err();
    assert!(err.to_string().contains("needs 9 positions but the context holds 8"), "{err}");
    let err = model.forward(&mut kv, &BatchEntry::sequence(0, &[1, 2], 3, false)).unwrap_err();
    assert!(err.to_string().contains("continues at position 0, not 3"), "{err}");
    let err = model.forward(&mut kv, &BatchEntry::sequence(0, &[600], 0, false)).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    assert!(model.forward(&mut kv, &[]).is_err());
    // nothing was stored by the failed calls
    assert_eq!(kv.seq_len(0), 0);
}
