//! `engine-cli perplexity` on a tiny fixture model: llama-perplexity's chunks and scored half,
//! a KV cache type compared with itself (no divergence) and with a quantized one, and the
//! one-line errors of a text too short and an unknown cache type.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn perplexity(args: &[&str]) -> Output {
    let model = root().join("tests/fixtures/models/tiny-llama-Q8_0.gguf");
    let text = root().join("tests/fixtures/text/gpl-3.txt");
    Command::new(env!("CARGO_BIN_EXE_engine-cli"))
        .arg("perplexity")
        .args(["-m", model.to_str().unwrap(), "-f", text.to_str().unwrap()])
        .args(args)
        .output()
        .expect("run engine-cli")
}

fn json(args: &[&str]) -> Value {
    let out = perplexity(&[args, &["--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn chunks_score_their_second_half_and_a_cache_type_against_itself_does_not_diverge() {
    let same = json(&["-c", "64", "--chunks", "3", "--kv-type", "f16", "--kl-against", "f16"]);
    // 3 chunks of 64: positions 32..62 predict tokens 33..63, 31 per chunk
    assert_eq!((same["chunks"].as_u64(), same["tokens_scored"].as_u64()), (Some(3), Some(93)), "{same}");
    let ppl = same["perplexity"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{same}");
    assert_eq!((same["mean_kl"].as_f64(), same["same_top"].as_f64()), (Some(0.0), Some(1.0)), "{same}");
    // a 4-bit cache moves the distributions a little: a divergence, and a perplexity not far off
    let q4 = json(&["-c", "64", "--chunks", "3", "--kv-type", "q4_0", "--kl-against", "f16"]);
    let kl = q4["mean_kl"].as_f64().unwrap();
    assert!(kl > 0.0 && kl < 0.1, "{q4}");
    assert!((q4["perplexity"].as_f64().unwrap() / ppl - 1.0).abs() < 0.2, "{q4} against {same}");
    assert_eq!(q4["kv_types"], "q4_0");
    // keys and values apart: the divergence of q8_0 keys alone is its own
    let keys = json(&["-c", "64", "--chunks", "3", "--cache-type-k", "q8_0", "--kl-against", "f16"]);
    assert_eq!(keys["kv_types"], "q8_0 keys, f16 values", "{keys}");
    let kl_keys = keys["mean_kl"].as_f64().unwrap();
    assert!(kl_keys > 0.0 && kl_keys < kl, "q8_0 keys {kl_keys} against a q4_0 cache {kl}");
}

#[test]
fn the_text_report_names_the_comparison() {
    let out = perplexity(&["-c", "32", "--chunks", "2", "--kv-type", "q8_0", "--kl-against", "f16"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("KV cache q8_0: 2 chunks of 32 tokens, 30 tokens scored"), "{text}");
    assert!(text.contains("perplexity: ") && text.contains("mean KL divergence from the f16 cache: "), "{text}");
    assert!(text.contains("same most likely token as the f16 cache: "), "{text}");
}

#[test]
fn a_text_shorter_than_a_chunk_and_an_unknown_cache_type_are_one_line_errors() {
    let out = perplexity(&["-c", "100000"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("less than one chunk of 100000"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = perplexity(&["--kv-type", "q9_0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown KV cache type \"q9_0\" (f32, f16, q8_0, q4_0)"), "{err}");
}
