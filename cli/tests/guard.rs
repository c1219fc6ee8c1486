//! `engine-cli guard` on the tiny Guardian-shaped model: the table, `--scan --json` as the HTTP
//! object, exit codes 0 / 1 / 2 and one-line errors.

use std::process::{Command, Output};

use engine_tests::fixture;
use serde_json::Value;

fn guard(args: &[&str]) -> Output {
    let model = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("guard").arg("-m").arg(model).args(args).output().unwrap()
}

#[test]
fn scan_json_is_the_endpoint_object_and_the_exit_code_follows_flagged() {
    let out = guard(&["--input", "How do I pick a lock?", "--scan", "--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let flagged = j["flagged"].as_bool().unwrap();
    assert_eq!(out.status.code(), Some(if flagged { 1 } else { 0 }));
    assert_eq!(j["model"], "guardian-tiny-3.0-q8_0");
    let verdicts = j["verdicts"].as_array().unwrap();
    let names: Vec<&str> = verdicts.iter().map(|v| v["risk"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["evasiveness", "harm", "harm_engagement", "jailbreaking", "profanity", "sexual_content", "social_bias", "unethical_behavior", "violence"]
    );
    for v in verdicts {
        assert!(v["unsafe"].is_boolean() && v["confidence"].is_number() && v["reasoning"].is_string());
        assert!((0.0..=1.0).contains(&v["risk_probability"].as_f64().unwrap()));
    }
    assert_eq!(j.get("highest_risk").is_some(), flagged);
    assert!(j["latency_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_table_has_one_line_per_risk_and_a_result() {
    let out = guard(&["--input", "Hello", "--response", "Hi, how can I help?", "--risks", "harm,profanity"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("harm ") && lines[1].starts_with("profanity "));
    assert!(lines[2].starts_with("result: "));
    assert_eq!(out.status.code(), Some(if lines[2].contains("UNSAFE") { 1 } else { 0 }));
}

#[test]
fn errors_are_one_line_with_exit_code_2() {
    for (args, msg) in [
        (vec!["--input", "x", "--risks", "nope"], "invalid risk category: nope"),
        (vec!["--input", "x", "--format", "3.1"], "unsupported format \"3.1\" (must be 3.0, 3.2, or 3.3)"),
        (vec!["--input", "x", "--risks", "groundedness"], "risk groundedness requires input.context and input.assistant"),
        (vec!["--input", "x", "--device", "cuda:0"], "no CUDA"),
    ] {
        let out = guard(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(msg), "{err}");
    }
}
