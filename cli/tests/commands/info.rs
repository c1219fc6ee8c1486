//! `engine-cli info` run as a program: JSON output on a fixture and on the real gemma-3-270m
//! file (checked against the repository's info fixture), and a clean error on a corrupt file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn info(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("info").args(args).output().expect("run engine-cli")
}

fn info_json(path: &Path) -> Value {
    let out = info(&[path.as_os_str(), "--json".as_ref()]);
    assert!(out.status.success(), "engine-cli info failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("info --json prints one JSON object")
}

#[test]
fn tiny_fixture_json() {
    let path = repo().join("tests/fixtures/models/tiny-llama-Q4_K.gguf");
    let j = info_json(&path);
    assert_eq!(j["gguf_version"], 3);
    assert_eq!(j["architecture"], "llama");
    assert_eq!(j["tensor_count"], 21);
    assert_eq!(j["context_length"], 512);
    assert_eq!(j["tokenizer"]["model"], "llama");
    assert_eq!(j["tokenizer"]["n_vocab"], 512);
    assert_eq!(j["tokenizer"]["chat_template_present"], false);
    let types = j["tensor_types"].as_object().unwrap();
    assert_eq!(types.values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 21);
    assert!(types["Q4_K"].as_u64().unwrap() > 0 && types["F32"].as_u64().unwrap() > 0);
    // Long arrays are summarised, short values kept.
    let tokens = &j["metadata"]["tokenizer.ggml.tokens"];
    assert_eq!((tokens["type"].as_str(), tokens["len"].as_u64()), (Some("string"), Some(512)));
    assert_eq!(tokens["head"].as_array().map(Vec::len), Some(8));
    assert_eq!(j["metadata"]["general.architecture"], "llama");

    // The text output carries the same facts.
    let out = info(&[path.as_os_str()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in ["architecture:", "llama", "Q4_K", "tokenizer.ggml.tokens = [string; 512]"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

/// Path of the real gemma-3-270m file from the repository's fetch script (cached after the
/// first download).
fn gemma() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("tools/fetch-models.sh"))
        .arg("gemma")
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run tools/fetch-models.sh");
    assert!(out.status.success(), "tools/fetch-models.sh gemma failed");
    let stdout = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("fetch-models.sh printed no path").trim())
}

#[test]
fn real_gemma_json_matches_fixture() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("tests/fixtures/real/gemma-3-270m.info.json")).unwrap()).unwrap();
    let j = info_json(&gemma());
    assert_eq!(j["architecture"], "gemma3");
    assert_eq!(j["architecture"], expected["architecture"]);
    assert_eq!(j["name"], expected["name"]);
    assert_eq!(j["gguf_version"], expected["gguf_version"]);
    assert_eq!(j["tensor_count"], 236);
    assert_eq!(j["tensor_count"], expected["tensor_count"]);
    assert_eq!(j["parameters"], 268_098_176);
    assert_eq!(j["parameters"], expected["parameters"]);
    assert_eq!(j["tensor_data_bytes"], 246_587_904);
    assert_eq!(j["tensor_data_bytes"], expected["tensor_data_bytes"]);
    assert_eq!(j["bytes"], expected["bytes"]);
    assert_eq!(j["context_length"], 32768);
    assert_eq!(j["context_length"], expected["hyperparameters"]["context_length"]);
    let want_types = serde_json::json!({"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9, "Q8_0": 10});
    assert_eq!(j["tensor_types"], want_types);
    assert_eq!(j["tensor_types"], expected["tensor_type_counts"]);
    assert_eq!(j["tokenizer"]["n_vocab"], 262_144);
    assert_eq!(j["tokenizer"]["n_vocab"], expected["tokenizer"]["n_vocab"]);
    assert_eq!(j["tokenizer"]["model"], expected["tokenizer"]["tokenizer.ggml.model"]);
    assert_eq!(j["tokenizer"]["pre"], expected["tokenizer"]["tokenizer.ggml.pre"]);
    assert_eq!(j["tokenizer"]["chat_template_present"], expected["tokenizer"]["chat_template_present"]);
    // Every hyperparameter of the fixture appears with the same value in the metadata.
    for (k, v) in expected["hyperparameters"].as_object().unwrap() {
        assert_eq!(&j["metadata"][format!("gemma3.{k}")], v, "gemma3.{k}");
    }
    for (k, v) in expected["tokenizer"].as_object().unwrap() {
        if k.starts_with("tokenizer.") {
            assert_eq!(&j["metadata"][k], v, "{k}");
        }
    }
    assert_eq!(j["metadata"]["general.file_type"], expected["general.file_type"]);
}

#[test]
fn corrupt_file_is_one_line_error_with_exit_code_2() {
    let dir = std::env::temp_dir().join(format!("engine-cli-info-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = std::fs::read(repo().join("tests/fixtures/models/tiny-llama-Q4_K.gguf")).unwrap();
    for (name, bytes) in [
        ("truncated.gguf", &source[..5000]),
        ("data-cut.gguf", &source[..source.len() - 100]),
        ("not-gguf.gguf", &b"hello world, not a model"[..]),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        for json in [false, true] {
            let mut args = vec![path.as_os_str()];
            if json {
                args.push("--json".as_ref());
            }
            let out = info(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
            assert!(out.stdout.is_empty(), "{name}: printed to stdout");
            assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
            assert!(stderr.starts_with(&format!("error: {}: ", path.display())), "{name}: {stderr}");
            assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        }
    }
    let missing = dir.join("missing.gguf");
    let out = info(&[missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A weight matrix of a type the engine reads but does not compute (I8): `info` lists it with
/// the note, and `logits` ends in a one-line error naming the tensor and the type.
#[test]
fn a_type_the_engine_does_not_compute_is_named() {
    use engine::gguf::{GgmlType, GgufFile, GgufWriter};
    let source = GgufFile::open(repo().join("tests/fixtures/models/tiny-llama-Q4_K.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in source.metadata() {
        w.add(key.clone(), value.clone()).unwrap();
    }
    let retyped = "blk.0.ffn_down.weight";
    for t in source.tensors() {
        if t.name == retyped {
            w.add_tensor(t.name.clone(), &t.dims, GgmlType::I8, vec![1u8; t.n_elements as usize]).unwrap();
        } else {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, source.tensor_data(t)).unwrap();
        }
    }
    let dir = std::env::temp_dir().join(format!("engine-cli-info-i8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("i8.gguf");
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();

    let out = info(&[path.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().any(|l| l.contains("I8") && l.contains("(not computed by this engine)")), "{text}");

    let out = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
        .args(["logits", "-m", path.to_str().unwrap(), "-p", "The quick"])
        .output()
        .expect("run engine-cli");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(retyped) && stderr.contains("I8") && !stderr.contains("panicked"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}
