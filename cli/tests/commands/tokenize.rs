//! `engine-cli tokenize` run as a program on fixture vocabularies: the output formats, the
//! special-token and BOS switches, and one-line errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn vocab(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/tokenizer/ggml-vocab-{name}.gguf"))
}

fn tokenize(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("tokenize").args(args).output().expect("run engine-cli")
}

fn json(args: &[&str]) -> Value {
    let out = tokenize(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn json_ids_and_pieces_with_special_tokens_parsed_or_not() {
    let m = vocab("qwen2");
    let m = m.to_str().unwrap();
    let text = "<|im_start|>user\nHello world<|im_end|>";
    let j = json(&["-m", m, "--json", text]);
    assert_eq!(j["ids"], serde_json::json!([151644, 872, 198, 9707, 1879, 151645]));
    assert_eq!(j["pieces"], serde_json::json!(["<|im_start|>", "user", "\n", "Hello", " world", "<|im_end|>"]));

    let plain = json(&["-m", m, "--json", "--no-special", text]);
    let ids = plain["ids"].as_array().unwrap();
    assert!(ids.len() > 10 && !ids.contains(&151644.into()), "{plain}");
    let pieces: String = plain["pieces"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(pieces, text);
}

#[test]
fn bos_is_added_unless_no_bos() {
    let m = vocab("llama-bpe");
    let m = m.to_str().unwrap();
    let out = tokenize(&["-m", m, "--ids", "Hello world"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[128000, 9906, 1917]");
    let out = tokenize(&["-m", m, "--ids", "--no-bos", "Hello world"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[9906, 1917]");
    let out = tokenize(&["-m", m, "--count", "Hello world"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "3");
}

#[test]
fn default_output_and_byte_pieces() {
    let m = vocab("llama-spm");
    let out = tokenize(&["-m", m.to_str().unwrap(), "--no-bos", "🦙"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Llama 2 has no piece for the llama emoji: four byte tokens, shown in SentencePiece notation
    assert!(text.contains("-> '<0xF0>'") && text.contains("-> '<0x99>'"), "{text}");
    assert_eq!(text.lines().count(), 5, "{text}");
}

#[test]
fn errors_are_one_line_with_a_nonzero_exit() {
    let out = tokenize(&["-m", "/no/such/model.gguf", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/no/such/model.gguf"), "{err}");

    // a valid GGUF with no tokenizer: magic, version 3, no tensors, no metadata
    let dir = std::env::temp_dir().join(format!("engine-cli-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.gguf");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let out = tokenize(&["-m", path.to_str().unwrap(), "x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("tokenizer.ggml.model") && err.lines().count() == 1, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
