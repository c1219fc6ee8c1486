//! Tokenizers on bad vocabularies and hostile text: a broken `tokenizer.ggml.*` gives an error
//! naming what is wrong, random text never panics and (for the lossless algorithms) comes back
//! byte for byte, and a streamed detokenization never splits a UTF-8 character.

use engine::gguf::{Array, GgufFile, GgufWriter, Value};
use engine::tokenizer::{StreamDecoder, Tokenizer, TokenizerError, TokenizerKind};
use engine_tests::{vocab_file, vocab_tokenizer, VOCABS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The metadata of a fixture vocab with `edit` applied, as a new in-memory GGUF.
fn edited(name: &str, edit: impl Fn(&str, &Value) -> Option<Value>) -> Result<Tokenizer, TokenizerError> {
    let file = vocab_file(name);
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        if let Some(v) = edit(key, value) {
            w.add(key.clone(), v).unwrap();
        }
    }
    Tokenizer::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn replace(target: &'static str, with: Value) -> impl Fn(&str, &Value) -> Option<Value> {
    move |k, v| Some(if k == target { with.clone() } else { v.clone() })
}

fn remove(target: &'static str) -> impl Fn(&str, &Value) -> Option<Value> {
    move |k, v| (k != target).then(|| v.clone())
}

#[test]
fn unknown_pre_tokenizer_is_an_error_naming_it() {
    let err = edited("llama-bpe", replace("tokenizer.ggml.pre", Value::String(b"frobnicate-7".to_vec()))).unwrap_err();
    assert_eq!(err, TokenizerError::UnknownPreTokenizer("frobnicate-7".into()));
    assert!(err.to_string().contains("\"frobnicate-7\""), "{err}");
}

#[test]
fn broken_vocabularies_give_errors_naming_the_key() {
    let err = edited("llama-spm", replace("tokenizer.ggml.model", Value::String(b"t5".to_vec()))).unwrap_err();
    assert_eq!(err, TokenizerError::UnknownModel("t5".into()));

    let err = edited("llama-spm", remove("tokenizer.ggml.tokens")).unwrap_err();
    assert_eq!(err, TokenizerError::MissingKey("tokenizer.ggml.tokens"));

    let err = edited("gpt-2", remove("tokenizer.ggml.merges")).unwrap_err();
    assert_eq!(err, TokenizerError::MissingKey("tokenizer.ggml.merges"));

    let err = edited("llama-spm", remove("tokenizer.ggml.model")).unwrap_err();
    assert_eq!(err, TokenizerError::MissingKey("tokenizer.ggml.model"));

    let err = edited("llama-spm", replace("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 10])))).unwrap_err();
    assert!(matches!(err, TokenizerError::ShortArray { key: "tokenizer.ggml.token_type", len: 10, n_tokens: 32000 }), "{err}");

    let err = edited("llama-spm", replace("tokenizer.ggml.scores", Value::Array(Array::String(vec![b"x".to_vec()])))).unwrap_err();
    assert!(matches!(err, TokenizerError::WrongType { key: "tokenizer.ggml.scores", .. }), "{err}");

    let err = edited("llama-spm", replace("tokenizer.ggml.tokens", Value::U32(7))).unwrap_err();
    assert!(matches!(err, TokenizerError::WrongType { key: "tokenizer.ggml.tokens", .. }), "{err}");

    let dup = |k: &str, v: &Value| {
        if k != "tokenizer.ggml.tokens" {
            return Some(v.clone());
        }
        let mut t = v.as_array().unwrap().as_strings().unwrap().to_vec();
        t[500] = t[400].clone();
        Some(Value::Array(Array::String(t)))
    };
    let err = edited("llama-spm", dup).unwrap_err();
    assert!(matches!(err, TokenizerError::DuplicateToken { first: 400, second: 500, .. }), "{err}");

    // an id past the vocabulary is ignored, as llama.cpp does, and the default stays
    let tok = edited("llama-spm", replace("tokenizer.ggml.bos_token_id", Value::U32(1 << 30))).unwrap();
    assert_eq!(tok.bos(), Some(1));
}

/// Random text from a mix of ASCII, whitespace, accents, CJK, emoji and control characters.
fn random_text(rng: &mut StdRng, specials: &[&str]) -> String {
    const PIECES: &[&str] = &[
        "a",
        "Z",
        "hello",
        " world",
        "'s",
        "'LL",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u{A0}",
        "\u{3000}",
        "1",
        "2024",
        "٣",
        "é",
        "e\u{301}",
        "ß",
        "İ",
        "中文",
        "日本",
        "한국어",
        "🦙",
        "😶\u{200D}🌫\u{FE0F}",
        "👍🏽",
        ".",
        ",",
        "!?",
        "…",
        "«",
        "$",
        "€",
        "\0",
        "\u{7F}",
        "\u{FFFD}",
        "\u{10FFFF}",
        "\u{E000}",
        "<",
        ">",
        "[",
        "]",
        "|",
        "<0x41>",
        "▁",
        "Ġ",
        "##",
    ];
    let n = rng.random_range(0..24);
    let mut s = String::new();
    for _ in 0..n {
        if !specials.is_empty() && rng.random_bool(0.1) {
            s.push_str(specials[rng.random_range(0..specials.len())]);
        } else {
            s.push_str(PIECES[rng.random_range(0..PIECES.len())]);
        }
    }
    s
}

#[test]
fn random_text_never_panics_and_round_trips() {
    let specials = ["<s>", "</s>", "<|endoftext|>", "<|im_start|>", "[CLS]", "<|begin_of_text|>", "<unk>"];
    let mut rng = StdRng::seed_from_u64(0x70c0);
    for name in VOCABS {
        let tok = vocab_tokenizer(name);
        for i in 0..300 {
            let text = random_text(&mut rng, &specials);
            for (add, parse) in [(false, false), (true, false), (false, true), (true, true)] {
                let ids = tok.encode(&text, add, parse);
                assert!(ids.iter().all(|&id| (id as usize) < tok.n_vocab()), "{name}: {text:?}");
                let _ = tok.detokenize(&ids, add, parse);
            }
            // Byte-level BPE and SentencePiece with byte fallback lose nothing: the pieces of plain
            // text (no special-token texts, which Phi-3 strips spaces after) spell it exactly.
            if tok.kind() == TokenizerKind::Wpm || i % 2 == 1 {
                continue;
            }
            // a literal `▁` is how SentencePiece writes a space, so it cannot come back as itself
            let plain = random_text(&mut rng, &[]).replace('▁', "_");
            let ids = tok.encode(&plain, false, false);
            let mut spelled: Vec<u8> = ids.iter().flat_map(|&id| tok.token_to_piece(id, false).to_vec()).collect();
            if tok.add_space_prefix() && !plain.is_empty() {
                assert_eq!(spelled.first(), Some(&b' '), "{name}: {plain:?}");
                spelled.remove(0);
            }
            assert_eq!(String::from_utf8_lossy(&spelled), plain, "{name}: {ids:?}");
        }
    }
}

#[test]
fn long_runs_tokenize_without_blowing_up() {
    // one 200 KB "word" per vocabulary and 200 KB of whitespace: the merge loops are
    // O(n log n), so this finishes in well under a second each
    let texts = ["a".repeat(200_000), " ".repeat(200_000), "🦙".repeat(50_000), "\n".repeat(100_000)];
    for name in VOCABS {
        let tok = vocab_tokenizer(name);
        for t in &texts {
            let ids = tok.encode(t, false, false);
            let whitespace_only = t.trim().is_empty();
            // WordPiece drops whitespace; everything else keeps some token for it
            assert_eq!(ids.is_empty(), whitespace_only && tok.kind() == TokenizerKind::Wpm, "{name}");
        }
    }
}

#[test]
fn streaming_never_splits_a_character() {
    // Llama 2's vocabulary has no piece for most emoji and many CJK characters: they come out as
    // byte tokens, one byte each.
    let tok = vocab_tokenizer("llama-spm");
    let text = "Hi 🦙🚀 中文 カタカナ 😶\u{200D}🌫\u{FE0F}!";
    let ids = tok.encode(text, true, false);
    let byte_tokens = ids.iter().filter(|&&id| tok.token_bytes(id).len() == 1 && tok.token_bytes(id)[0] >= 0x80).count();
    assert!(byte_tokens >= 8, "the text should need byte fallback: {ids:?}");
    let mut stream = StreamDecoder::new(false);
    let mut out = String::new();
    let mut empty_pushes = 0;
    for &id in &ids {
        let piece = stream.push(&tok, id);
        if piece.is_empty() {
            empty_pushes += 1;
        }
        out.push_str(&piece);
    }
    out.push_str(&stream.finish());
    assert!(empty_pushes >= 6, "partial characters must be held back");
    // the stream shows what detokenize shows, BOS dropped and the SentencePiece prefix space kept
    assert_eq!(out, format!(" {text}"));
    assert_eq!(tok.decode(&ids), text);
}

#[test]
fn a_table_derived_from_the_vocabulary_is_made_once_per_key() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tok = vocab_tokenizer(VOCABS[0]);
    let made = AtomicUsize::new(0);
    let make = |t: &Tokenizer| {
        made.fetch_add(1, Ordering::Relaxed);
        t.n_vocab()
    };
    let (a, b) = (tok.derived("count", make), tok.derived("count", make));
    assert_eq!((*a, *b, made.load(Ordering::Relaxed)), (tok.n_vocab(), tok.n_vocab(), 1));
    // another key, or the same key asked for another type, is made anew
    tok.derived("other", make);
    assert_eq!(*tok.derived("count", |_| "text"), "text");
    assert_eq!(made.load(Ordering::Relaxed), 2);
}
