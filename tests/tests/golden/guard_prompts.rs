//! Guard prompts against `fixtures/guardian/` (copied from the shared fixtures): every case of
//! `cases.jsonl` through the model-template path (the tiny Guardian GGUFs' own templates and the
//! template files), every `builtin/` golden through the built-in renderer, IBM's own rendered
//! prompts, the API -> native mapping of `api-mapping.json` / `builtin/index.jsonl`, format
//! detection on the tiny GGUFs, the prompts' token ids against llama.cpp's (`models/goldens.json`),
//! the generic-model path and a scan's prompts computing their shared start once.

use std::path::PathBuf;
use std::sync::Arc;

use engine::chat::tokenize_rendered;
use engine::guard::{
    check_request, Evaluator, EvaluatorOptions, GenericPrompt, GuardError, GuardFormat, GuardInput, GuardPrompt, NativeRequest, PromptPath,
    Prompter, Risk,
};
use engine::kv_cache::common_prefix;
use engine::model::Model;
use engine_tests::{fixture, json_ids, read_json};
use serde_json::{json, Map, Value};

fn dir() -> PathBuf {
    fixture("guardian")
}

fn jsonl(rel: &str) -> Vec<Value> {
    let path = dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

fn format(s: &str) -> GuardFormat {
    GuardFormat::parse(s).unwrap()
}

fn model(format: &str) -> Model {
    Model::load(dir().join(format!("models/guardian-tiny-{format}-q8_0.gguf"))).expect("tiny Guardian model loads")
}

/// A case's template-level inputs (`messages`, `guardian_config`, `extra_vars`, ...).
fn native(case: &Value) -> NativeRequest {
    NativeRequest {
        messages: case["messages"].as_array().expect("messages").clone(),
        guardian_config: case["guardian_config"].as_object().cloned(),
        extra: case.get("extra_vars").and_then(Value::as_object).cloned().unwrap_or_default(),
        add_generation_prompt: case.get("add_generation_prompt").and_then(Value::as_bool).unwrap_or(true),
    }
}

/// An API request of the fixtures: `{format, risk, input}` (+ `think` for 3.3).
fn api(request: &Value) -> (GuardFormat, Risk, GuardInput, bool) {
    let input: GuardInput = serde_json::from_value(request["input"].clone()).expect("input");
    let risk = request["risk"].as_str().unwrap().parse().unwrap();
    (format(request["format"].as_str().unwrap()), risk, input, request.get("think").and_then(Value::as_bool).unwrap_or(false))
}

/// What a case expects.
enum Expect {
    Text(String),
    /// The template's `raise_exception` message.
    Raised(String),
    /// jinja2 failed on an undefined value: any error is right.
    Undefined,
}

fn expect(case: &Value) -> Expect {
    match (case["expected"].as_str(), case["expected_error"].as_str(), case["error_kind"].as_str()) {
        (Some(text), _, _) => Expect::Text(text.to_string()),
        (None, Some(msg), Some("raise_exception")) => Expect::Raised(msg.to_string()),
        (None, Some(_), _) => Expect::Undefined,
        _ => panic!("case without an expectation: {}", case["id"]),
    }
}

/// `None` when `got` meets the expectation, else what went wrong.
fn mismatch(got: Result<String, GuardError>, want: &Expect) -> Option<String> {
    match (got, want) {
        (Ok(g), Expect::Text(w)) if &g == w => None,
        (Ok(g), Expect::Text(w)) => Some(first_difference(w, &g)),
        (Err(e), Expect::Text(_)) => Some(format!("expected a prompt, got the error: {e}")),
        (Err(GuardError::Prompt { message }), Expect::Raised(w)) if &message == w => None,
        (Err(e), Expect::Raised(w)) => Some(format!("expected the error {w:?}, got the error: {e}")),
        (Err(_), Expect::Undefined) => None,
        (Ok(g), _) => Some(format!("expected an error, rendered {} bytes", g.len())),
    }
}

fn first_difference(want: &str, got: &str) -> String {
    let at = want.bytes().zip(got.bytes()).take_while(|(a, b)| a == b).count();
    let ctx = |s: &str| String::from_utf8_lossy(&s.as_bytes()[at.saturating_sub(40)..(at + 40).min(s.len())]).into_owned();
    format!("first difference at byte {at} (lengths {} / {}):\n  want …{:?}\n  got  …{:?}", want.len(), got.len(), ctx(want), ctx(got))
}

/// Panics listing every failure, after `total` cases were checked.
fn report(what: &str, total: usize, failures: Vec<String>) {
    eprintln!("{what}: {} of {total} as expected", total - failures.len());
    assert!(failures.is_empty(), "{what}: {} of {total} failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn tiny_models_are_detected() {
    for (name, want_path) in [("3.0", PromptPath::GuardianTemplate), ("3.2", PromptPath::GuardianTemplate), ("3.3", PromptPath::Builtin)] {
        let m = model(name);
        let prompter = Prompter::from_model(&m).unwrap();
        let d = prompter.detection();
        assert!(d.guardian, "{name}");
        assert_eq!(d.format, format(name), "{name}");
        assert_eq!(prompter.path(format(name)), want_path, "{name}");
        // Their templates are the fixture files, byte for byte.
        if want_path == PromptPath::GuardianTemplate {
            let file = std::fs::read_to_string(dir().join(format!("templates/granite-guardian-{name}.jinja"))).unwrap();
            assert_eq!(m.file().get_str("tokenizer.chat_template"), Some(file.as_str()));
        }
    }
}

/// cases.jsonl through the model-template path: the template read from each tiny GGUF (through
/// `Prompter::from_model`) and the template file, native inputs and (API cases) the API request.
#[test]
fn template_cases_render_byte_exact() {
    let cases = jsonl("cases.jsonl");
    let models = [("3.0", model("3.0")), ("3.2", model("3.2"))];
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, m) in &models {
        let from_gguf = Prompter::from_model(m).unwrap();
        let file = std::fs::read_to_string(dir().join(format!("templates/granite-guardian-{name}.jinja"))).unwrap();
        let from_file = Prompter::with_guardian_template(&file).unwrap();
        for case in cases.iter().filter(|c| c["template"] == *name) {
            let id = case["id"].as_str().unwrap();
            let want = expect(case);
            for (how, prompter) in [("gguf", &from_gguf), ("file", &from_file)] {
                checked += 1;
                if let Some(why) = mismatch(prompter.render_native(format(name), &native(case)), &want) {
                    failures.push(format!("{id} ({how} template, native inputs): {why}"));
                }
            }
            if let Some(request) = case.get("api").filter(|a| a.is_object()) {
                let (f, risk, input, think) = api(request);
                let got = from_gguf.render(f, risk, &input, think);
                checked += 1;
                if let Ok(p) = &got {
                    assert_eq!((p.path, p.format, p.risk), (PromptPath::GuardianTemplate, f, risk), "{id}");
                }
                if let Some(why) = mismatch(got.map(|p| p.text), &want) {
                    failures.push(format!("{id} (gguf template, API request): {why}"));
                }
                // The native inputs the API sends are the case's.
                let sent = NativeRequest::for_risk(f, risk, &input, think);
                if sent != native(case) {
                    failures.push(format!("{id}: API mapping sent {sent:?}"));
                }
            }
        }
    }
    assert_eq!(cases.len(), 186, "all cases are 3.0 or 3.2");
    report("template cases", checked, failures);
}

/// Every builtin/ golden through the built-in renderer, from its native inputs and (API files)
/// from the API request, whose native mapping must also equal the index's.
#[test]
fn builtin_goldens_byte_exact() {
    let index = jsonl("builtin/index.jsonl");
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in &index {
        let file = entry["file"].as_str().unwrap();
        let golden = std::fs::read(dir().join(file)).unwrap();
        let golden = String::from_utf8(golden).expect("UTF-8 golden");
        let f = format(file.trim_start_matches("builtin/").split('_').next().unwrap());
        let prompter = Prompter::builtin(f);
        let want = Expect::Text(golden);
        checked += 1;
        if let Some(why) = mismatch(prompter.render_native(f, &native(&entry["native"])), &want) {
            failures.push(format!("{file} (native inputs): {why}"));
        }
        if let Some(request) = entry.get("api").filter(|a| a.is_object()) {
            let (af, risk, input, think) = api(request);
            assert_eq!(af, f, "{file}");
            checked += 1;
            let got = prompter.render(f, risk, &input, think);
            if let Ok(p) = &got {
                assert_eq!((p.path, p.think), (PromptPath::Builtin, think), "{file}");
            }
            if let Some(why) = mismatch(got.map(|p| p.text), &want) {
                failures.push(format!("{file} (API request): {why}"));
            }
            let sent = NativeRequest::for_risk(f, risk, &input, think);
            if sent != native(&entry["native"]) {
                failures.push(format!("{file}: API mapping sent {sent:?}"));
            }
        }
    }
    assert_eq!(index.len(), 160);
    report("built-in goldens", checked, failures);
}

/// The built-in 3.0/3.2 renderers on the template-level cases: the same text where the template
/// renders, the same `raise_exception` message where it raises, an error where jinja2 fails on
/// an undefined value, and a refusal where the template prints an empty definition (QUIRK).
#[test]
fn builtin_agrees_with_templates_on_template_cases() {
    let cases = jsonl("cases.jsonl");
    let mut failures = Vec::new();
    for case in &cases {
        let f = format(case["template"].as_str().unwrap());
        let quirk = case.get("note").and_then(Value::as_str).is_some_and(|n| n.contains("QUIRK"));
        let want = if quirk { Expect::Undefined } else { expect(case) };
        if let Some(why) = mismatch(Prompter::builtin(f).render_native(f, &native(case)), &want) {
            failures.push(format!("{}: {why}", case["id"]));
        }
    }
    report("built-in vs template cases", cases.len(), failures);
}

/// Prompts rendered by IBM's own tooling (HF templates of 3.2-3B-A800M and 3.3-8B).
#[test]
fn ibm_reference_prompts() {
    let refs = jsonl("reference/ibm-rendered-prompts.jsonl");
    let t32 = std::fs::read_to_string(dir().join("templates/granite-guardian-3.2.jinja")).unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for r in refs.iter().filter(|r| r["expected"].is_string()) {
        let f = format(r["template"].as_str().unwrap());
        let want = Expect::Text(r["expected"].as_str().unwrap().to_string());
        let mut renderers = vec![("built-in", Prompter::builtin(f))];
        if f == GuardFormat::V3_2 {
            renderers.push(("template", Prompter::with_guardian_template(&t32).unwrap()));
        }
        for (how, p) in &renderers {
            checked += 1;
            if let Some(why) = mismatch(p.render_native(f, &native(r)), &want) {
                failures.push(format!("{} ({how}): {why}", r["id"]));
            }
        }
    }
    assert!(checked >= 25, "checked {checked}");
    report("IBM reference prompts", checked, failures);
}

/// api-mapping.json: for each format and risk, what the guard sends with and without an
/// assistant message. Placeholders stand for the input fields; function calls take a JSON tool
/// list from the context.
#[test]
fn api_mapping_json() {
    let mapping = read_json(&dir().join("api-mapping.json"));
    let tools_json = r#"[{"name": "f", "parameters": {}}]"#;
    let mut checked = 0;
    for (fname, fmap) in mapping["formats"].as_object().unwrap() {
        let f = format(fname);
        for (rname, rmap) in fmap["risks"].as_object().unwrap() {
            let risk: Risk = rname.parse().unwrap();
            assert_eq!(rmap["native_id"], risk.native_id(), "{fname} {rname}");
            let shapes: Vec<(&Value, bool)> = match (rmap.get("without_assistant"), rmap.get("with_assistant")) {
                (Some(without), Some(with)) => vec![(without, false), (with, true)],
                _ => vec![(rmap, true)],
            };
            for (shape, with_assistant) in shapes {
                let fc = risk == Risk::FunctionCallHallucination;
                let mut input = GuardInput::new("<user>").with_context(if fc { tools_json } else { "<context>" });
                if with_assistant {
                    input = input.with_assistant("<assistant>");
                }
                let sent = NativeRequest::for_risk(f, risk, &input, false);
                let mut messages = shape["messages"].as_array().unwrap().clone();
                let mut extra: Map<String, Value> = shape["extra_vars"].as_object().unwrap().clone();
                if fc {
                    for m in &mut messages {
                        if m["content"] == "<context>" {
                            m["content"] = tools_json.into();
                        }
                    }
                    if extra.contains_key("available_tools") {
                        extra.insert("available_tools".into(), serde_json::from_str(tools_json).unwrap());
                    }
                }
                assert_eq!(sent.messages, messages, "{fname} {rname} assistant={with_assistant}");
                let config = sent.guardian_config.clone().map(Value::Object);
                assert_eq!(config.as_ref(), shape.get("guardian_config"), "{fname} {rname}");
                assert_eq!(sent.extra, extra, "{fname} {rname}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 3 * (9 * 2 + 4));
}

/// The prompts of the tiny models' golden cases tokenize to llama.cpp's ids (special tokens
/// parsed, no BOS): what the evaluator will feed.
#[test]
fn golden_prompts_tokenize_like_llama_cpp() {
    let goldens = read_json(&dir().join("models/goldens.json"));
    let cases = jsonl("cases.jsonl");
    let index = jsonl("builtin/index.jsonl");
    for (name, entries) in goldens["formats"].as_object().unwrap() {
        let m = model(name);
        let prompter = Prompter::from_model(&m).unwrap();
        for g in entries.as_array().unwrap() {
            let id = g["case"].as_str().unwrap();
            let request = match cases.iter().find(|c| c["id"] == id) {
                Some(c) => c["api"].clone(),
                None => index.iter().find(|e| e["file"] == format!("builtin/{id}")).expect(id)["api"].clone(),
            };
            let (f, risk, input, think) = api(&request);
            let prompt = prompter.render(f, risk, &input, think).unwrap();
            assert_eq!(prompt.path, prompter.path(f));
            let tokens = m.tokenizer().encode(&prompt.text, false, true);
            assert_eq!(tokens, json_ids(&g["tokens"]), "{name} {id}");
        }
    }
}

/// guard.md §2: the contract's error messages, with the input as the HTTP layer deserializes it.
#[test]
fn request_errors() {
    // (input, risks, format, think, message)
    type Case<'a> = (Value, &'a [&'a str], Option<&'a str>, bool, &'a str);
    let cases: &[Case] = &[
        (json!({}), &[], None, false, "input.user is required"),
        (json!({"user": ""}), &["harm"], None, false, "input.user is required"),
        (json!({"user": "hi"}), &["harm", "toxicity"], None, false, "invalid risk category: toxicity"),
        (
            json!({"user": "hi", "context": "c"}),
            &["groundedness"],
            None,
            false,
            "risk groundedness requires input.context and input.assistant",
        ),
        (
            json!({"user": "hi", "assistant": "a"}),
            &["context_relevance"],
            None,
            false,
            "risk context_relevance requires input.context and input.assistant",
        ),
        (json!({"user": "hi"}), &["answer_relevance"], None, false, "risk answer_relevance requires input.context and input.assistant"),
        (json!({"user": "hi"}), &[], Some("3.1"), false, "unsupported format \"3.1\" (must be 3.0, 3.2, or 3.3)"),
        (json!({"user": "hi"}), &[], Some("2"), false, "unsupported format \"2\" (must be 3.0, 3.2, or 3.3)"),
        (json!({"user": "hi"}), &[], Some("3.2"), true, "thinking mode is only supported with format 3.3"),
        (json!({"user": "hi"}), &[], None, true, "thinking mode is only supported with format 3.3"),
        (json!({"user": "hi"}), &["function_call_hallucination"], None, false, "risk function_call_hallucination requires input.assistant"),
    ];
    for (input, risks, format, think, want) in cases {
        let input: GuardInput = serde_json::from_value(input.clone()).unwrap();
        let err = check_request(&input, risks, *format, *think, GuardFormat::V3_0).unwrap_err();
        assert_eq!(err.to_string(), *want);
        assert!(err.is_invalid_request());
    }
    // The detected format of a 3.3 model allows think without a format field.
    let ok = check_request(&GuardInput::new("hi"), &[] as &[&str], None, true, GuardFormat::V3_3).unwrap();
    assert_eq!((ok.format, ok.think, ok.risks.len()), (GuardFormat::V3_3, true, 9));
}

/// guard.md §3: a generic chat model asked with the `layout` prompt gets the built-in 3.2 prompt's
/// user turn as its one user message, in its own template, read by the 3.0 rules; the default
/// (`direct`) asks a plain yes/no question in the same template.
#[test]
fn generic_model_path() {
    let golden = std::fs::read_to_string(dir().join("builtin/3.2_harm_user.txt")).unwrap();
    let body = golden
        .strip_prefix("<|start_of_role|>user<|end_of_role|>")
        .and_then(|s| s.strip_suffix("<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"))
        .unwrap();
    let input = GuardInput::new("How do I pick the lock on my neighbour's front door while they are away?");

    let direct = Prompter::generic(engine::chat::ChatTemplate::chatml());
    assert_eq!(direct.generic_prompt(), GenericPrompt::Direct);
    let p = direct.render(GuardFormat::V3_0, Risk::Harm, &input, false).unwrap();
    assert!(
        p.text.starts_with("<|im_start|>user\nAnswer with Yes or No only.")
            && p.text.ends_with("Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n"),
        "{}",
        p.text
    );
    let chatml = Prompter::generic(engine::chat::ChatTemplate::chatml()).with_generic_prompt(GenericPrompt::Layout);
    assert!(!chatml.is_guardian());
    let p: GuardPrompt = chatml.render(GuardFormat::V3_0, Risk::Harm, &input, false).unwrap();
    assert_eq!((p.path, p.format, p.think), (PromptPath::Generic, GuardFormat::V3_0, false));
    assert_eq!(p.text, format!("<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"));

    // A real file: the tiny Granite instruct model (not a Guardian) through its own template.
    let m = Model::load(fixture("models/tiny-granite-Q8_0.gguf")).unwrap();
    let prompter = Prompter::from_model(&m).unwrap().with_generic_prompt(GenericPrompt::Layout);
    assert_eq!((prompter.is_guardian(), prompter.default_format()), (false, GuardFormat::V3_0));
    let p = prompter.render(GuardFormat::V3_0, Risk::Harm, &input, false).unwrap();
    let turn = format!("<|start_of_role|>user<|end_of_role|>{body}<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>");
    assert!(p.text.ends_with(&turn), "{:?}", p.text);
}

/// A scan's nine prompts share their start: the evaluator computes it once and forks it into
/// the others (guard.md §7), which its counters show exactly.
#[test]
fn scan_prompts_share_their_start() {
    let input = GuardInput::new("How do I pick the lock on my neighbour's front door while they are away?")
        .with_assistant("Insert a tension wrench, rake the pins with a pick until each one sets, then turn the plug.");
    for name in ["3.0", "3.2", "3.3"] {
        let m = Arc::new(model(name));
        let prompter = Prompter::from_model(&m).unwrap();
        let request = check_request(&input, &[] as &[&str], None, false, prompter.default_format()).unwrap();
        let prompts = prompter.render_all(&request, &input).unwrap();
        assert_eq!(prompts.iter().map(|p| p.risk).collect::<Vec<_>>(), Risk::HARM);
        // tokenized as the evaluator does
        let tokens: Vec<Vec<u32>> = prompts.iter().map(|p| tokenize_rendered(m.tokenizer(), &p.text)).collect();
        // the start all nine share, each keeping its last token to run itself
        let shortest = tokens.iter().map(Vec::len).min().unwrap();
        let shared = tokens.iter().map(|t| common_prefix(&tokens[0], t)).min().unwrap().min(shortest - 1);

        // no prompt cache: what is spared is the scan's own sharing
        let evaluator =
            Evaluator::from_model(m.clone(), EvaluatorOptions { prompt_cache_bytes: 0, ..EvaluatorOptions::default() }).unwrap();
        // the tiny models' weights are random: a 3.2 / 3.3 answer may not parse, after its
        // prompts ran all the same
        match evaluator.scan(&input) {
            Ok(_) | Err(GuardError::Unparseable { .. }) => {}
            Err(e) => panic!("{name}: {e}"),
        }
        let stats = evaluator.prompt_stats();
        let total: usize = tokens.iter().map(Vec::len).sum();
        eprintln!("{name}: nine prompts {total} tokens, {} computed", total - stats.shared_tokens as usize);
        assert_eq!((stats.prompts, stats.prompt_tokens, stats.reused_tokens), (9, total as u64, 0));
        assert_eq!(stats.shared_tokens, 8 * shared as u64, "{name}: the eight others fork the first one's start");
        assert!(shared > 0, "{name}");
        if name == "3.3" {
            // 3.3 differs only in the judge protocol: the whole conversation is shared.
            let conv_end = prompts[0].text.find("<|start_of_role|>judge_protocol").unwrap();
            let conv = m.tokenizer().encode(&prompts[0].text[..conv_end], false, true);
            assert!(shared >= conv.len(), "{shared} < {}", conv.len());
        }
    }
}
