//! `engine-cli logits` on the tiny fixture models against llama.cpp's goldens: the prompt's
//! tokens, and the top 10 ids and logits at every position.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models").join(rel)
}

fn logits(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("logits").args(args).output().expect("run engine-cli")
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(&format!("golden/{name}.logits.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Runs `logits --json` on `prompt` and checks it against the golden 7-token sequence.
fn check_against_golden(name: &str, prompt: &str) {
    let model = fixture(&format!("{name}.gguf"));
    let out = logits(&["--model", model.to_str().unwrap(), "--prompt", prompt, "--top", "10", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let seq = &golden(name)["sequences"][1];
    assert_eq!(j["tokens"], seq["tokens"], "{name}");
    let top = j["top"].as_array().unwrap();
    let want = seq["prompt_top"].as_array().unwrap();
    assert_eq!(top.len(), want.len());
    for (pos, (got, want)) in top.iter().zip(want).enumerate() {
        let got = got.as_array().unwrap();
        assert_eq!(got.len(), 10);
        for (i, pair) in got.iter().enumerate() {
            let (id, logit) = (&pair[0], pair[1].as_f64().unwrap());
            assert_eq!(id, &want["ids"][i], "{name} position {pos} rank {i}");
            let expected = want["logits"][i].as_f64().unwrap();
            assert!((logit - expected).abs() <= 1e-5, "{name} position {pos} rank {i}: {logit} vs {expected}");
        }
    }
}

#[test]
fn json_top_10_matches_llama_cpp() {
    // tiny-llama adds BOS and a SentencePiece space prefix; tiny-granite adds nothing
    check_against_golden("tiny-llama-F32", "The quick");
    check_against_golden("tiny-granite-F32", "The quick b");
}

#[test]
fn table_has_a_row_per_position() {
    let model = fixture("tiny-llama-F32.gguf");
    let out = logits(&["-m", model.to_str().unwrap(), "-p", "The quick", "--top", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    // position 0 is BOS; its best token is 150 (llama.cpp's golden)
    assert!(lines[1].contains("\"<s>\"") && lines[1].contains(" 150: 0.95168"), "{text}");
}

#[test]
fn errors_are_one_line() {
    let out = logits(&["-m", "/no/such/model.gguf", "-p", "x", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.lines().count() == 1 && err.contains("/no/such/model.gguf"), "{err}");
    assert!(out.stdout.is_empty());
}

/// `--tokens` runs the given ids as they are (no BOS, no tokenizer): on a file whose vocabulary
/// is ids only (llama.cpp's `test` model), llama.cpp's logits for the same ids; an id outside the
/// vocabulary, or `--tokens` beside `--prompt`, is a one-line error.
#[test]
fn token_ids_run_as_given_on_an_id_only_vocabulary() {
    let archs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/archs");
    let model = archs.join("qwen3-s1.gguf");
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(archs.join("golden/qwen3-s1.logits.json")).unwrap()).unwrap();
    let seq = &golden["sequences"][0];
    let ids: Vec<String> = seq["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    let out = logits(&["-m", model.to_str().unwrap(), "--tokens", &ids.join(","), "--top", "5", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["tokens"], seq["tokens"]);
    for (pos, (got, want)) in j["top"].as_array().unwrap().iter().zip(seq["prompt_top"].as_array().unwrap()).enumerate() {
        for (i, pair) in got.as_array().unwrap().iter().enumerate() {
            assert_eq!(pair[0], want["ids"][i], "position {pos} rank {i}");
            assert!((pair[1].as_f64().unwrap() - want["logits"][i].as_f64().unwrap()).abs() <= 1e-4, "position {pos} rank {i}");
        }
    }
    // the id-only vocabulary shows an id as its hex number
    let out = logits(&["-m", model.to_str().unwrap(), "--tokens", "10,127", "--top", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("\"a\"") && table.contains("\"7f\""), "{table}");
    let err = logits(&["-m", model.to_str().unwrap(), "--tokens", "1,128"]);
    let text = String::from_utf8(err.stderr).unwrap();
    assert_ne!(err.status.code(), Some(0));
    assert!(text.lines().count() == 1 && text.contains("id 128 is outside the vocabulary of 128"), "{text}");
    let both = logits(&["-m", model.to_str().unwrap(), "--tokens", "1", "--prompt", "x"]);
    assert_eq!(both.status.code(), Some(2));
}
