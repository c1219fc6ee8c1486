//! Greedy generation on the tiny fixture models: llama.cpp's greedy tokens, and each way
//! generation stops (end-of-generation token, token budget, callback, full context).

use engine::generate::{generate, generate_greedy, GenerateOptions, StopReason};
use engine::kv_cache::{KvError, KvType};
use engine::logprobs::argmax;
use engine::model::{BatchEntry, Model, ModelError};
use engine::tokenizer::TokenId;
use engine_tests::{fixture, json_ids, read_json};

/// The model and its golden 7-token sequence with its 16 greedy tokens.
fn setup(name: &str) -> (Model, Vec<TokenId>, Vec<TokenId>) {
    let model = Model::load(fixture(&format!("models/{name}.gguf"))).unwrap();
    let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
    let seq = &golden["sequences"][1];
    (model, json_ids(&seq["tokens"]), json_ids(&seq["greedy"]))
}

fn opts(max_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_tokens, stop_at_eog: true }
}

#[test]
fn greedy_equals_llama_cpp_and_streams_every_token() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let mut streamed = Vec::new();
    let out = generate_greedy(&model, &mut kv, 0, &prompt, opts(16), |t| {
        streamed.push(t);
        true
    })
    .unwrap();
    assert_eq!(out, greedy);
    assert_eq!(streamed, greedy);
    // the last token is not fed back
    assert_eq!(kv.seq_len(0), prompt.len() + 15);
}

#[test]
fn stops_at_max_tokens() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let g = generate(&model, &mut kv, 0, &prompt, opts(5), argmax, |_| true).unwrap();
    assert_eq!(g, engine::generate::Generation { tokens: greedy[..5].to_vec(), stop: StopReason::MaxTokens });

    // no tokens wanted: nothing runs
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    assert!(generate_greedy(&model, &mut kv, 0, &prompt, opts(0), |_| true).unwrap().is_empty());
    assert_eq!(kv.seq_len(0), 0);
}

#[test]
fn stops_at_end_of_generation_without_returning_it() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let eos = model.tokenizer().eos().unwrap();
    assert!(model.tokenizer().is_eog(eos));
    // a picker that chooses EOS at the fourth step, greedy before
    let picker = || {
        let mut step = 0;
        move |row: &[f32]| {
            step += 1;
            if step == 4 { eos } else { argmax(row) }
        }
    };
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let mut streamed = Vec::new();
    let g = generate(&model, &mut kv, 0, &prompt, opts(16), picker(), |t| {
        streamed.push(t);
        true
    })
    .unwrap();
    assert_eq!(g.tokens, greedy[..3]);
    assert_eq!(g.stop, StopReason::Eog(eos));
    assert_eq!(streamed, greedy[..3]);

    // not stopping at EOG: the token is generated like any other
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let o = GenerateOptions { max_tokens: 5, stop_at_eog: false };
    let g = generate(&model, &mut kv, 0, &prompt, o, picker(), |_| true).unwrap();
    assert_eq!(g.tokens[..4], [greedy[0], greedy[1], greedy[2], eos]);
    assert_eq!(g.stop, StopReason::MaxTokens);

    // tiny-granite repeats its last token: after <|end_of_text|> it stops at once
    let (model, prompt, _) = setup("tiny-granite-F32");
    let end = model.tokenizer().eos().unwrap();
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let prompt = [&prompt[..], &[end]].concat();
    let g = generate(&model, &mut kv, 0, &prompt, opts(16), argmax, |_| panic!("nothing to stream")).unwrap();
    assert_eq!(g, engine::generate::Generation { tokens: vec![], stop: StopReason::Eog(end) });
}

#[test]
fn the_callback_can_stop_generation() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let mut n = 0;
    let g = generate(&model, &mut kv, 0, &prompt, opts(16), argmax, |_| {
        n += 1;
        n < 2
    })
    .unwrap();
    assert_eq!(g.tokens, greedy[..2]);
    assert_eq!(g.stop, StopReason::Callback);
}

#[test]
fn a_full_context_is_an_error() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 10);
    let mut streamed = Vec::new();
    let err = generate_greedy(&model, &mut kv, 0, &prompt, opts(16), |t| {
        streamed.push(t);
        true
    })
    .unwrap_err();
    assert!(matches!(err, ModelError::Kv(KvError::ContextFull { needed: 11, n_ctx: 10, .. })), "{err}");
    // positions 7, 8 and 9 were fed; the fourth token had no room
    assert_eq!(streamed, greedy[..4]);

    let mut kv = model.new_kv_cache(KvType::F32, 6);
    assert!(generate_greedy(&model, &mut kv, 0, &prompt, opts(1), |_| true).is_err());
    assert!(generate_greedy(&model, &mut kv, 0, &[], opts(1), |_| true).is_err());
}

#[test]
fn continues_a_sequence_already_in_the_cache() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    model.forward(&mut kv, &BatchEntry::sequence(3, &prompt[..4], 0, false)).unwrap();
    let out = generate_greedy(&model, &mut kv, 3, &prompt[4..], opts(8), |_| true).unwrap();
    assert_eq!(out, greedy[..8]);
}
