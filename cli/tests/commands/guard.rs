//! `engine-cli guard` on the tiny Guardian-shaped model: the table, `--scan --json` as the HTTP
//! object, exit codes 0 / 1 / 2 and one-line errors.

use std::path::Path;
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

/// A temporary file with `text`, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!("guard-cli-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

#[test]
fn a_policy_preset_decides_and_a_threshold_overrides_it() {
    let policies = TempFile::new(
        "p.toml",
        "default = \"all\"\n[policies.all]\nthresholds = { harm = 0.0, violence = 0.0 }\n[policies.none]\nthresholds = { harm = 1.0 }\n",
    );
    let run = |extra: &[&str]| -> (Value, Option<i32>) {
        let mut args = vec!["--input", "I love sunny days", "--json", "--risks", "harm,violence"];
        args.extend_from_slice(extra);
        let out = guard(&args);
        (serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))), out.status.code())
    };
    let (j, code) = run(&["--policy", policies.path()]);
    assert_eq!((j["policy"].as_str(), j["flagged"].as_bool(), code), (Some("all"), Some(true), Some(1)), "{j}");
    assert!(j["verdicts"].as_array().unwrap().iter().all(|v| v["unsafe"] == true));
    assert_eq!((j["format"].as_str(), j["thresholds"]["violence"].as_f64()), (Some("3.0"), Some(0.0)));
    let (j, _) = run(&["--policy", &format!("{}:all", policies.path()), "--threshold", "harm=1", "--threshold", "violence=1"]);
    assert_eq!((j["flagged"].as_bool(), j["thresholds"]["harm"].as_f64()), (Some(false), Some(1.0)), "{j}");
    let (j, _) = run(&["--policy", &format!("{}:none", policies.path())]);
    assert_eq!(j["policy"], "none");
    let bad = TempFile::new("bad.toml", "[policies.a]\n\nthresholds = { harm = 0.3, hate = 0.1 }\n");
    for (arg, expected) in [
        (format!("{}:nope", policies.path()), "unknown policy `nope`: the file has all, none".to_string()),
        (bad.path().to_string(), format!("{} line 3: policy `a`: invalid risk category: hate", bad.path())),
    ] {
        let out = guard(&["--input", "x", "--policy", &arg]);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(err.contains(&expected) && err.trim().lines().count() == 1, "{err}");
    }
}

#[test]
fn a_conversation_file_judges_its_last_turn() {
    let conversation = TempFile::new(
        "c.json",
        r#"[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "How do I pick a lock?"}]"#,
    );
    let out = guard(&["--messages", conversation.path(), "--json", "--risks", "harm"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(j["verdicts"][0]["risk"], "harm");
    // 3.2 shows the whole conversation (3.0 only the judged turns); the system message is no part
    // of it
    let prompts = guard_with("3.2", &["--messages", conversation.path(), "--risks", "harm", "--print-prompts"]);
    let prompt: Value = serde_json::from_slice(&prompts.stdout).unwrap();
    let text = prompt["prompt"].as_str().unwrap();
    assert!(text.contains("User Message: Hi\nAssistant Message: Hello\nUser Message: How do I pick a lock?\n"), "{text}");
    assert!(!text.contains("Be brief"), "{text}");
    let bad = TempFile::new("bad.json", r#"[{"role": "assistant", "content": "Hi"}]"#);
    let out = guard(&["--messages", bad.path()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("input.messages must contain a user message"));
}

#[test]
fn jsonl_judges_one_input_per_line() {
    let data = TempFile::new(
        "d.jsonl",
        "\"I love sunny days\"\n\n{\"user\": \"How do I pick a lock?\", \"assistant\": \"Use a pick.\"}\n[{\"role\": \"user\", \"content\": \"Hi\"}]\n",
    );
    let out = guard(&["--file", data.path(), "--jsonl", "--scan"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.iter().map(|l| l["line"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 3, 4]);
    let any = lines.iter().any(|l| l["flagged"] == true);
    assert_eq!(out.status.code(), Some(if any { 1 } else { 0 }));
    for l in &lines {
        assert_eq!(l["verdicts"].as_array().unwrap().len(), 9);
        assert_eq!(l["highest_risk"].is_string(), l["flagged"] == true);
    }
    // the same verdicts as one input at a time
    let single = guard(&["--input", "I love sunny days", "--scan", "--json"]);
    let single: Value = serde_json::from_slice(&single.stdout).unwrap();
    assert_eq!(single["verdicts"], lines[0]["verdicts"]);
    // every line is flagged by a threshold of 0: exit 1
    let out = guard(&["--file", data.path(), "--jsonl", "--risks", "harm", "--threshold", "harm=0"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().filter(|l| l.contains("\"flagged\":true")).count(), 3);
    // a line may name its own risks
    let mixed = TempFile::new(
        "m.jsonl",
        "{\"user\": \"Hi\", \"risks\": [\"harm\", \"violence\"]}\n\"Hello\"\n{\"user\": \"Hey\", \"risks\": [\"profanity\"]}\n",
    );
    let out = guard(&["--file", mixed.path(), "--jsonl", "--risks", "jailbreaking"]);
    let risks: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let j: Value = serde_json::from_str(l).unwrap();
            j["verdicts"].as_array().unwrap().iter().map(|v| v["risk"].as_str().unwrap().to_string()).collect()
        })
        .collect();
    assert_eq!(risks, [vec!["harm", "violence"], vec!["jailbreaking"], vec!["profanity"]]);
    // a bad line: nothing judged, the line named
    let bad = TempFile::new("bad.jsonl", "\"ok\"\n{\"user\": 3}\n");
    let out = guard(&["--file", bad.path(), "--jsonl"]);
    assert_eq!((out.status.code(), out.stdout.is_empty()), (Some(2), true));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.jsonl line 2: user must be a string"), "{err}");
}

#[test]
fn serve_refuses_a_bad_policy_file_naming_its_line() {
    let bad = TempFile::new("bad.toml", "default = \"a\"\n[policies.a]\nthresholds = { harm = 0.5,\n  violence = 7 }\n");
    let model = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
        .args(["serve", "--port", "0", "--guard-policy", bad.path(), "-m"])
        .arg(model)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        err.contains(&format!("{} line 4: policy `a`: the threshold of violence must be a number from 0 to 1, not 7", bad.path())),
        "{err}"
    );
}

/// The quick start's example with the default guard (`tools/fetch-models.sh guard-default`, the
/// `direct` prompt, `policies/default-guard.toml`): the bomb question is flagged for harm, a
/// bread question is not.
#[test]
fn the_default_guard_flags_the_quick_start_bomb_and_not_bread() {
    let model = fetch_model("guard-default");
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default-guard.toml");
    let judge = |text: &str| -> (Value, Option<i32>) {
        let out = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
            .args(["guard", "--json", "--generic-prompt", "direct", "--risks", "harm,violence", "--input", text, "--policy"])
            .arg(&policy)
            .arg("-m")
            .arg(&model)
            .output()
            .unwrap();
        (serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))), out.status.code())
    };
    let (bomb, code) = judge("How do I build a bomb?");
    assert_eq!((bomb["flagged"].as_bool(), code, bomb["policy"].as_str()), (Some(true), Some(1), Some("default-guard")), "{bomb}");
    assert_eq!(bomb["verdicts"][0]["unsafe"], true, "harm: {bomb}");
    assert_eq!(bomb["format"], "generic/direct");
    let (bread, code) = judge("How do I bake sourdough bread?");
    assert_eq!((bread["flagged"].as_bool(), code), (Some(false), Some(0)), "{bread}");
}

#[test]
fn a_custom_risk_is_judged_from_its_definition_and_decided_by_its_threshold() {
    let def = "pii=The message contains a phone number.";
    let out = guard(&["--input", "Call me at 555-0100", "--json", "--risks", "harm", "--risk-definition", def]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let names: Vec<&str> = j["verdicts"].as_array().unwrap().iter().map(|v| v["risk"].as_str().unwrap()).collect();
    assert_eq!(names, ["harm", "pii"]);
    let p = j["verdicts"][1]["risk_probability"].as_f64().unwrap();
    let at = format!("pii={p}");
    let out = guard(&["--input", "Call me at 555-0100", "--json", "--risk-definition", def, "--threshold", &at]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (j["verdicts"].as_array().unwrap().len(), j["verdicts"][0]["unsafe"].as_bool(), out.status.code()),
        (1, Some(true), Some(1)),
        "{j}"
    );
    assert_eq!(j["thresholds"]["pii"].as_f64(), Some(p));
    let table = guard(&["--input", "Call me at 555-0100", "--risk-definition", def]);
    assert!(String::from_utf8(table.stdout).unwrap().lines().next().unwrap().starts_with("pii  "));
    for bad in ["harm=x", "Bad=x", "pii"] {
        let out = guard(&["--input", "x", "--risk-definition", bad]);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(err.contains("--risk-definition") && err.trim().lines().count() == 1, "{bad}: {err}");
    }
}

#[test]
fn guard_family_names_the_family_a_file_does_not_say() {
    // a scripted llama (no guard template, a neutral name) that answers as Qwen3Guard does
    let script = ["Safety:", " Unsafe", "\nCategories:", " Violent", "<|im_end|>"];
    let file = engine_tests::scripted::make(&["<|im_end|>"], &script, "").unwrap();
    let path = std::env::temp_dir().join(format!("guard-family-{}.gguf", std::process::id()));
    std::fs::write(&path, file.bytes()).unwrap();
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("guard").arg("-m").arg(&path).args(args).output().unwrap();
    let out = run(&["--input", "How do I hurt someone?", "--json", "--guard-family", "qwen3guard", "--risks", "violence,profanity"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((j["format"].as_str(), j["flagged"].as_bool(), out.status.code()), (Some("qwen3guard"), Some(true), Some(1)), "{j}");
    assert_eq!((j["verdicts"][0]["unsafe"].as_bool(), j["verdicts"][1]["unsafe"].as_bool()), (Some(true), Some(false)), "{j}");
    let out = run(&["--input", "x", "--guard-family", "nope"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("expected granite-guardian, llama-guard, shieldgemma, qwen3guard, gpt-oss-safeguard or generic"), "{err}");
    let _ = std::fs::remove_file(&path);
}
