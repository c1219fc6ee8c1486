//! Batch entries whose input is an embedding row (what a vision projector feeds a language
//! model): a token's own embedding row (`Model::token_embedding`) must give exactly that token's
//! logits, bit for bit, in every model family (Granite scales given rows as it scales tokens';
//! Gemma scales only tokens' rows, as llama.cpp does, so its `token_embedding` is pre-scaled).

use engine::backend::RowInput;
use engine::kv_cache::KvType;
use engine::model::{BatchEntry, InputEntry, Model, ModelError};
use engine_tests::{fixture, shared_model};

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The logits of `tokens` as tokens, and with the tokens at `swap` given as their embedding
/// rows, in two sequences of one batch.
fn check(model: &Model, tokens: &[u32], swap: &[usize]) {
    let mut kv = model.new_kv_cache(KvType::F16, 64);
    let by_token = model.forward(&mut kv, &BatchEntry::sequence(0, tokens, 0, true)).unwrap();

    let rows: Vec<Vec<f32>> = tokens.iter().map(|&t| model.token_embedding(t).unwrap()).collect();
    assert_eq!(rows[0].len(), model.config().n_embd);
    let mut kv = model.new_kv_cache(KvType::F16, 64);
    // sequence 1 is the same text, all tokens; sequence 0 has the swapped rows
    let mut batch: Vec<InputEntry> = Vec::new();
    for seq in [0u32, 1] {
        for (i, &t) in tokens.iter().enumerate() {
            let input = if seq == 0 && swap.contains(&i) { RowInput::Embedding(&rows[i]) } else { RowInput::Token(t) };
            batch.push(InputEntry { seq, input, pos: i as u32, logits: true, non_causal: false, lora: None, hidden: false });
        }
    }
    let mixed = model.forward_inputs(&mut kv, &batch).unwrap();
    let n = tokens.len();
    for p in 0..n {
        assert_eq!(bits(mixed.row(p)), bits(by_token.row(p)), "{}: position {p} with embedding rows at {swap:?}", model.config().arch);
        assert_eq!(bits(mixed.row(n + p)), bits(by_token.row(p)), "{}: position {p} of the all-token sequence", model.config().arch);
    }
    // the continuation after an embedding row reads the cache it wrote
    let next = [BatchEntry { seq: 0, token: tokens[0], pos: n as u32, logits: true }];
    let mut kv_tokens = model.new_kv_cache(KvType::F16, 64);
    model.forward(&mut kv_tokens, &BatchEntry::sequence(0, tokens, 0, false)).unwrap();
    let want = model.forward(&mut kv_tokens, &next).unwrap();
    let got = model.forward(&mut kv, &next).unwrap();
    assert_eq!(bits(got.row(0)), bits(want.row(0)));
}

#[test]
fn a_tokens_own_embedding_row_gives_its_logits_bit_for_bit() {
    for name in ["models/tiny-llama-Q8_0.gguf", "models/tiny-granite-Q4_K.gguf", "guardian/models/guardian-tiny-3.3-q8_0.gguf"] {
        let model = Model::load(fixture(name)).unwrap();
        check(&model, &[1, 17, 300, 42, 9, 250], &[1, 3, 5]);
        check(&model, &[5, 6], &[0, 1]);
    }
}

#[test]
fn gemma_reads_given_rows_unscaled() {
    let model = shared_model("gemma");
    let scale = model.config().embedding_scale;
    assert_ne!(scale, 1.0);
    check(model, &[2, 818, 5279, 529, 7001, 563], &[0, 2, 3]);
}

#[test]
fn an_embedding_row_of_the_wrong_size_is_refused() {
    let model = Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    let mut kv = model.new_kv_cache(KvType::F32, 16);
    let short = vec![0.5f32; model.config().n_embd - 1];
    let batch =
        [InputEntry { seq: 0, input: RowInput::Embedding(&short), pos: 0, logits: true, non_causal: false, lora: None, hidden: false }];
    let e = model.forward_inputs(&mut kv, &batch).unwrap_err();
    assert!(matches!(e, ModelError::BadBatch(_)), "{e}");
    assert!(e.to_string().contains("embedding row"), "{e}");
    assert_eq!(kv.seq_len(0), 0);
    assert!(model.token_embedding(model.config().n_vocab as u32).is_err());
}
