//! `engine-cli guard` on the tiny Guardian-shaped model: the table, `--scan --json` as the HTTP
//! object, exit codes 0 / 1 / 2 and one-line errors.

use std::process::{Command, Output};

use engine_tests::{fetch_model, fixture};
use serde_json::Value;

fn guard(args: &[&str]) -> Output {
    guard_with("3.0", args)
}

fn guard_with(format: &str, args: &[&str]) -> Output {
    let model = fixture(&format!("guardian/models/guardian-tiny-{format}-q8_0.gguf"));
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
        [
            "evasiveness",
            "harm",
            "harm_engagement",
            "jailbreaking",
            "profanity",
            "sexual_content",
            "social_bias",
            "unethical_behavior",
            "violence"
        ]
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

#[test]
fn json_errors_are_the_endpoint_error_body() {
    let out = guard(&["--input", "x", "--risks", "nope", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["error"]["message"], "invalid risk category: nope");
    assert_eq!(j["error"]["type"], "invalid_request_error");
    assert_eq!(j["error"]["param"], "risks");
    assert!(j["error"]["code"].is_null());
}

#[test]
fn scans_of_the_3_2_and_3_3_tiny_models_print_well_formed_json() {
    // Random weights write noise instead of "Yes <confidence> High </confidence>" / "<score>",
    // and an unreadable answer is never taken as safe: the scan ends in the endpoint's error
    // body (500 server_error) naming the risk and quoting the model's output, exit code 2.
    for format in ["3.2", "3.3"] {
        let out = guard_with(format, &["--input", "How do I pick a lock?", "--scan", "--json"]);
        let j: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{format}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(out.status.code(), Some(2), "{format}: {j}");
        let e = &j["error"];
        assert_eq!((e["type"].as_str(), e["code"].as_str()), (Some("model_error"), Some("unparseable_model_output")), "{format}");
        let message = e["message"].as_str().unwrap();
        assert!(message.starts_with("cannot read the verdict for risk "), "{format}: {message}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// The generic path on a real chat model (Qwen2.5-Coder-0.5B-Instruct): nine verdicts with
/// probabilities, and a harmful request scores above a harmless one on most risks. (The margins
/// are small — a 0.5B coder model is a weak guard — but far above numeric noise.)
#[test]
fn a_chat_model_guards_through_the_generic_path() {
    let model = fetch_model("qwen2.5-coder");
    let scan = |text: &str| -> Vec<f64> {
        let out = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
            .args(["guard", "--scan", "--json", "--input", text, "-m"])
            .arg(&model)
            .output()
            .unwrap();
        let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let verdicts = j["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 9, "{j}");
        verdicts.iter().map(|v| v["risk_probability"].as_f64().unwrap()).collect()
    };
    let harmful = scan("How do I build a bomb?");
    let harmless = scan("How do I bake sourdough bread?");
    let higher = harmful.iter().zip(&harmless).filter(|(a, b)| a > b).count();
    assert!(higher >= 5, "harmful {harmful:?} vs harmless {harmless:?}");
}

/// `--print-prompts` prints the nine scan prompts (the 3.0 template with the message and each
/// risk's definition) as JSON lines, and judges nothing.
#[test]
fn print_prompts_prints_one_prompt_per_risk() {
    let out = guard_with("3.0", &["--input", "How do I pick a lock?", "--scan", "--print-prompts"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let risks: Vec<&str> = lines.iter().map(|l| l["risk"].as_str().unwrap()).collect();
    assert_eq!(risks.len(), 9, "{risks:?}");
    assert!(risks.contains(&"harm") && risks.contains(&"violence"), "{risks:?}");
    for l in &lines {
        let prompt = l["prompt"].as_str().unwrap();
        assert!(prompt.contains("How do I pick a lock?"), "{prompt}");
    }
    assert_ne!(lines[0]["prompt"], lines[1]["prompt"]);
}

/// `--threshold RISK=P` decides a risk by its probability on both sides of it (echoed in the
/// JSON, the exit code following); a bad one is a one-line error, exit 2.
#[test]
fn thresholds_decide_by_the_probability() {
    let scan = |extra: &[&str]| -> (Value, Option<i32>) {
        let mut args = vec!["--input", "I love sunny days", "--scan", "--json"];
        args.extend_from_slice(extra);
        let out = guard(&args);
        (serde_json::from_slice(&out.stdout).unwrap(), out.status.code())
    };
    let (plain, _) = scan(&[]);
    let verdict = |j: &Value, risk: &str| j["verdicts"].as_array().unwrap().iter().find(|v| v["risk"] == risk).unwrap().clone();
    let p = verdict(&plain, "harm")["risk_probability"].as_f64().unwrap();
    let at = format!("harm={p}");
    let (j, code) = scan(&["--threshold", &at]);
    assert_eq!(verdict(&j, "harm")["unsafe"], true);
    assert_eq!((j["flagged"].as_bool(), code), (Some(true), Some(1)));
    assert_eq!(j["thresholds"]["harm"].as_f64(), Some(p));
    let all_above: Vec<String> = plain["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("{}={}", v["risk"].as_str().unwrap(), (v["risk_probability"].as_f64().unwrap() + 1.0) / 2.0))
        .collect();
    let args: Vec<&str> = all_above.iter().flat_map(|a| ["--threshold", a.as_str()]).collect();
    let (j, code) = scan(&args);
    assert_eq!((j["flagged"].as_bool(), code), (Some(false), Some(0)), "{j}");
    assert!(j.get("highest_risk").is_none());
    for bad in ["harm", "harm=2", "nope=0.5", "harm=x"] {
        let out = guard(&["--input", "x", "--threshold", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("--threshold") && err.trim().lines().count() == 1, "{bad}: {err}");
    }
}
