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

/// The adapter `name` of the tests (`engine_tests::lora`) in a file of its own.
fn adapter_file(name: &str) -> PathBuf {
    let spec = engine_tests::lora::spec(name);
    let base = engine::gguf::GgufFile::open(engine_tests::fixture(spec.base)).unwrap();
    let path = std::env::temp_dir().join(format!("engine-cli-logits-{}-{name}.gguf", std::process::id()));
    std::fs::write(&path, engine_tests::lora::make(&base, spec).unwrap()).unwrap();
    path
}

/// `--lora FILE[:SCALE]` (repeated) runs the adapters as llama.cpp does: every position's best
/// logit within 1e-4 of llama.cpp's with the same adapters and scales (the LoRA goldens; the
/// bound is the F16 case's, whose inputs ggml rounds to f16), an activated adapter from its
/// invocation in the ids on. A command without a prompt of its own refuses an activated one.
#[test]
fn lora_adapters_give_llama_cpp_logits() {
    let (all, qv, alora) = (adapter_file("llama-all"), adapter_file("llama-qv"), adapter_file("llama-alora"));
    let model = engine_tests::fixture("archs/llama-s1.gguf");
    let ids: Vec<String> = engine_tests::lora::IDS.iter().map(u32::to_string).collect();
    for (case, loras, bound) in [
        ("llama-all", vec![all.display().to_string()], 1e-4),
        ("llama-two", vec![format!("{}:0.5", all.display()), format!("{}:2", qv.display())], 1e-2),
        ("llama-alora", vec![alora.display().to_string()], 1e-4),
    ] {
        let mut args = vec![
            "-m".to_string(),
            model.display().to_string(),
            "--tokens".into(),
            ids.join(","),
            "--top".into(),
            "1".into(),
            "--json".into(),
        ];
        for l in loras {
            args.extend(["--lora".to_string(), l]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = logits(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        let want = engine_tests::read_f32s(&engine_tests::fixture(&format!("lora/{case}.logits.bin")));
        for (pos, top) in j["top"].as_array().unwrap().iter().enumerate() {
            let row = &want[pos * 128..(pos + 1) * 128];
            let (id, logit) = (top[0][0].as_u64().unwrap() as usize, top[0][1].as_f64().unwrap() as f32);
            assert!((logit - row[id]).abs() <= bound, "{case} position {pos}: {logit} vs llama.cpp's {}", row[id]);
            let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert!((row[id] - best).abs() <= bound, "{case} position {pos}: token {id} is not llama.cpp's best");
        }
    }
    // a file that is no adapter: one line naming it, a non-zero exit
    let out = logits(&["-m", model.to_str().unwrap(), "--tokens", "1,2", "--lora", model.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--lora") && err.contains("general.type"), "{err}");
    let out = logits(&["-m", model.to_str().unwrap(), "--tokens", "1,2", "--lora", &format!("{}:x", all.display())]);
    assert!(!out.status.success(), "a scale that is no number: the whole argument is a missing file");
    let out = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
        .args(["bench", "-m", model.to_str().unwrap(), "-p", "8", "-n", "0", "-r", "1", "--lora", alora.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("activated LoRA") && err.contains("`bench`") && err.trim().lines().count() == 1, "{err}");
    for p in [all, qv, alora] {
        std::fs::remove_file(p).unwrap();
    }
}
