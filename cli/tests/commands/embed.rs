//! `engine-cli embed` run as a program on the all-MiniLM-L6-v2 fixture: JSON and plain output,
//! unit norm, the pooling and normalisation switches, and one-line errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn minilm() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real/all-MiniLM-L6-v2-Q8_0.gguf")
}

fn embed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("embed").args(args).output().expect("run engine-cli")
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn json_has_dim_384_and_unit_vectors() {
    let m = minilm();
    let out = embed(&["-m", m.to_str().unwrap(), "--json", "The cat sits on the mat.", "A man is playing a guitar."]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(j["dim"], 384);
    assert_eq!(j["pooling"], "mean");
    assert_eq!(j["normalized"], true);
    let e = j["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 2);
    for v in e {
        let v = floats(v);
        assert_eq!(v.len(), 384);
        assert!((norm(&v) - 1.0).abs() < 1e-5, "{}", norm(&v));
    }
}

#[test]
fn plain_output_is_one_line_per_text_and_equals_the_json() {
    let m = minilm();
    let m = m.to_str().unwrap();
    let texts = ["hello world", ""];
    let plain = embed(&[&["-m", m, "--pooling", "cls", "--no-normalize"][..], &texts[..]].concat());
    assert!(plain.status.success(), "{}", String::from_utf8_lossy(&plain.stderr));
    let text = String::from_utf8(plain.stdout).unwrap();
    let lines: Vec<Vec<f32>> = text.lines().map(|l| l.split(' ').map(|x| x.parse().unwrap()).collect()).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l.len() == 384));
    // not normalised: a [CLS] state is far from unit length
    assert!((norm(&lines[0].iter().map(|&x| f64::from(x)).collect::<Vec<_>>()) - 1.0).abs() > 0.1);

    let j = embed(&[&["-m", m, "--pooling", "cls", "--no-normalize", "--json"][..], &texts[..]].concat());
    let j: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(j["pooling"], "cls");
    for (line, v) in lines.iter().zip(j["embeddings"].as_array().unwrap()) {
        let v: Vec<f32> = floats(v).into_iter().map(|x| x as f32).collect();
        assert_eq!(line, &v, "both formats print the f32 values exactly");
    }
}

#[test]
fn errors_are_one_line_with_exit_code_2() {
    let out = embed(&["-m", "/nonexistent/model.gguf", "text"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error:") && err.contains("/nonexistent/model.gguf"), "{err}");
    assert!(out.stdout.is_empty());

    let m = minilm();
    let long = "word ".repeat(600);
    let out = embed(&["-m", m.to_str().unwrap(), &long]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("context"), "{err}");

    // a vocab-only file has a tokenizer but no model
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer/ggml-vocab-bert-bge.gguf");
    let out = embed(&["-m", vocab.to_str().unwrap(), "text"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
}
