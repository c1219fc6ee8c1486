//! Chat templates rendered by `engine::chat` against Hugging Face transformers' own output: the
//! 34-template corpus in `fixtures/templates/` (132 cases) and the Qwen2.5-Coder GGUF's template
//! (`fixtures/templates/qwen2.5-coder-0.5b/`). Bytes must be identical; where Python raised, we
//! must fail too (with the same message when it was the template's `raise_exception`).

use std::path::{Path, PathBuf};

use engine::chat::{ChatError, ChatInput, ChatTemplate, NaiveDateTime};
use engine::model::Model;
use engine_tests::{fixture, read_json, shared_model};

/// Cases that cannot pass for a known reason, as (case name, why). The corpus test checks that
/// each one still fails, so a fix forces its removal from this list.
const KNOWN_FAILURES: &[(&str, &str)] = &[];

/// A case's inputs as `ChatInput`, with the template compiled for its special tokens.
fn load_case(template_src: &str, case: &serde_json::Value, now: Option<NaiveDateTime>) -> (ChatTemplate, ChatInput) {
    let text = |k: &str| case.get(k).and_then(|v| v.as_str());
    let template =
        ChatTemplate::new(template_src, text("bos_token"), text("eos_token")).unwrap_or_else(|e| panic!("template does not compile: {e}"));
    let input = ChatInput {
        messages: case["messages"].as_array().expect("messages").clone(),
        tools: case.get("tools").and_then(|t| t.as_array()).cloned(),
        add_generation_prompt: case.get("add_generation_prompt").and_then(|v| v.as_bool()).unwrap_or(false),
        now,
        extra: Default::default(),
    };
    (template, input)
}

/// What Python did for a case: the rendered text, or the `Type: message` it raised.
enum Golden {
    Text(String),
    Error(String),
}

/// `stem` + `.ext` (case stems contain dots, so `with_extension` would cut them).
fn with_suffix(stem: &Path, ext: &str) -> PathBuf {
    let mut s = stem.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn golden(stem: &Path) -> Golden {
    let expected = with_suffix(stem, "expected");
    let error = with_suffix(stem, "error");
    if expected.exists() {
        Golden::Text(std::fs::read_to_string(&expected).unwrap())
    } else {
        Golden::Error(std::fs::read_to_string(&error).unwrap_or_else(|e| panic!("{}: {e}", error.display())))
    }
}

/// `None` when the render agrees with Python, else a readable account of the difference.
fn check(result: Result<String, ChatError>, golden: &Golden) -> Option<String> {
    match (result, golden) {
        (Ok(got), Golden::Text(want)) if &got == want => None,
        (Ok(got), Golden::Text(want)) => Some(first_difference(want, &got)),
        (Err(e), Golden::Text(_)) => Some(format!("Python rendered it, we failed: {e}")),
        (Ok(got), Golden::Error(py)) => Some(format!("Python raised `{py}`, we rendered {} bytes: {:?}", got.len(), head(&got, 300))),
        (Err(e), Golden::Error(py)) => match (py.strip_prefix("TemplateError: "), &e) {
            // raise_exception: the message must be the template's own.
            (Some(want), ChatError::Raised(got)) if got == want => None,
            (Some(want), _) => Some(format!("Python's raise_exception said {want:?}, we gave: {e}")),
            // A Python TypeError / UndefinedError: any render error is the right outcome.
            (None, ChatError::Render { .. } | ChatError::Raised(_)) => None,
            (None, ChatError::Syntax { .. }) => Some(format!("Python raised `{py}` at render time, we failed to compile: {e}")),
        },
    }
}

fn head(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The first line where `got` departs from `want`, both lines shown escaped.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.split('\n').collect(), got.split('\n').collect());
    let i = w.iter().zip(&g).position(|(a, b)| a != b).unwrap_or(w.len().min(g.len()));
    format!(
        "first difference at line {} (want {} bytes / {} lines, got {} bytes / {} lines)\n    want: {:?}\n    got:  {:?}",
        i + 1,
        want.len(),
        w.len(),
        got.len(),
        g.len(),
        w.get(i).copied().unwrap_or("<end of text>"),
        g.get(i).copied().unwrap_or("<end of text>"),
    )
}

#[test]
fn corpus_renders_like_transformers() {
    let dir = fixture("templates");
    let index = read_json(&dir.join("index.json"));
    let now: NaiveDateTime = index["fixed_now"].as_str().unwrap().parse().expect("fixed_now");
    let templates = index["templates"].as_object().unwrap();

    let (mut checked, mut passed) = (0, 0);
    let mut failures: Vec<(String, String)> = Vec::new();
    for (name, info) in templates {
        let source = std::fs::read_to_string(dir.join(format!("{name}.jinja"))).unwrap();
        for (case, status) in info["cases"].as_object().unwrap() {
            let status = status.as_str().unwrap();
            if status.starts_with("skipped") {
                continue;
            }
            let id = format!("{name}.{case}");
            let stem = dir.join(&id);
            let case_json = read_json(&with_suffix(&stem, "json"));
            let (template, input) = load_case(&source, &case_json, Some(now));
            let golden = golden(&stem);
            assert_eq!(matches!(golden, Golden::Text(_)), status == "expected", "{id}: index.json says {status}");
            checked += 1;
            match check(template.render(&input), &golden) {
                None => passed += 1,
                Some(why) => failures.push((id, why)),
            }
        }
    }
    assert_eq!(checked, 132, "the corpus has 132 rendered cases");

    let known = |id: &str| KNOWN_FAILURES.iter().any(|(k, _)| *k == id);
    let unexpected: Vec<_> = failures.iter().filter(|(id, _)| !known(id)).collect();
    let fixed: Vec<_> = KNOWN_FAILURES.iter().filter(|(k, _)| !failures.iter().any(|(id, _)| id == k)).collect();
    eprintln!("chat template corpus: {passed}/{checked} cases agree with transformers");
    for (id, why) in &failures {
        let tag = if known(id) { "known failure" } else { "MISMATCH" };
        eprintln!("{tag} {id}: {why}");
    }
    for (id, why) in &fixed {
        eprintln!("FIXED {id} (listed as a known failure: {why}); remove it from KNOWN_FAILURES");
    }
    assert!(unexpected.is_empty() && fixed.is_empty(), "{} mismatches, {} stale known failures", unexpected.len(), fixed.len());
}

#[test]
fn qwen_coder_gguf_template_renders_like_transformers() {
    let dir = fixture("templates/qwen2.5-coder-0.5b");
    let model = shared_model("qwen2.5-coder");
    let template = ChatTemplate::from_model(model).unwrap();
    assert!(!template.is_fallback());
    let extracted = std::fs::read_to_string(dir.join("template.jinja")).unwrap();
    assert_eq!(template.source(), extracted, "the GGUF's template differs from the extracted copy");
    assert_eq!(template.bos_token(), Some("<|endoftext|>"));
    assert_eq!(template.eos_token(), Some("<|im_end|>"));

    let mut failures = Vec::new();
    for i in 1..=5 {
        let stem = dir.join(format!("case{i}"));
        let case = read_json(&with_suffix(&stem, "json"));
        // The goldens were rendered with the GGUF tokenizer's texts; check the inputs agree.
        assert_eq!(case["bos_token"].as_str(), template.bos_token(), "case{i}");
        assert_eq!(case["eos_token"].as_str(), template.eos_token(), "case{i}");
        let (_, input) = load_case(&extracted, &case, None);
        if let Some(why) = check(template.render(&input), &golden(&stem)) {
            failures.push(format!("case{i}: {why}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn model_without_template_gets_chatml() {
    // The tiny fixture models carry no chat template.
    let model = Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    if model.file().get_str("tokenizer.chat_template").is_some() {
        return;
    }
    let template = ChatTemplate::from_model(&model).unwrap();
    assert!(template.is_fallback());
    let input = ChatInput { add_generation_prompt: true, ..ChatInput::new(vec![serde_json::json!({"role": "user", "content": "hi"})]) };
    assert_eq!(template.render(&input).unwrap(), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

/// Probes where minijinja cannot follow Python, as (index in probes.json, template, why); the
/// probe test checks each still differs, so a fix forces its removal. None occurs in the corpus.
const KNOWN_PROBE_DIVERGENCES: &[(usize, &str, &str)] = &[
    (
        6,
        "{{ 'a' ~ x }}",
        "`~` formats floats with minijinja's own Display (1e16 -> 10000000000000000.0); only `{{ }}` and `|string` are ours",
    ),
    (50, "{{ 'a' ~ x }}", "same as probe 6, for 1e-07"),
    (178, "{{ 1 < 'a' }}", "minijinja orders values of different types where Python raises TypeError"),
    (283, "{{ 'x' is callable }}", "minijinja has no `callable` test and cannot tell macros from other objects"),
    (284, "{{ raise_exception is callable }}", "same as probe 283"),
];

/// Small templates that pin Python-isms one at a time (printing, `tojson` options, string and
/// dict methods, filters, tests, arithmetic, loops, whitespace, undefined values), each rendered
/// by transformers' environment (`probes.json`; see `probes.md` beside it).
#[test]
fn probes_render_like_transformers() {
    let probes = read_json(&fixture("templates/probes.json"));
    let probes = probes.as_array().unwrap();
    let now: NaiveDateTime = "2025-01-15T09:30:00".parse().unwrap();
    let (mut failures, mut known_failed) = (Vec::new(), Vec::new());
    for (i, probe) in probes.iter().enumerate() {
        let src = probe["template"].as_str().unwrap();
        let mut vars = probe["vars"].as_object().unwrap().clone();
        let messages = vars.remove("messages").and_then(|m| m.as_array().cloned()).unwrap_or_default();
        let golden = match (probe.get("expected"), probe.get("error")) {
            (Some(t), _) => Golden::Text(t.as_str().unwrap().to_string()),
            (None, Some(e)) => Golden::Error(e.as_str().unwrap().to_string()),
            _ => panic!("probe {i} has no result"),
        };
        let result = ChatTemplate::new(src, None, None)
            .and_then(|t| t.render(&ChatInput { messages, tools: None, add_generation_prompt: false, now: Some(now), extra: vars }));
        let known = KNOWN_PROBE_DIVERGENCES.iter().find(|(k, _, _)| *k == i);
        if let Some((_, template, _)) = known {
            assert_eq!(*template, src, "KNOWN_PROBE_DIVERGENCES names probe {i} with another template");
        }
        match (check(result, &golden), known) {
            (Some(_), Some(_)) => known_failed.push(i),
            (Some(why), None) => failures.push(format!("probe {i} {src:?}: {why}")),
            (None, Some((_, _, why))) => {
                failures.push(format!("probe {i} {src:?} now agrees (listed as diverging: {why}); remove it from KNOWN_PROBE_DIVERGENCES"))
            }
            (None, None) => {}
        }
    }
    eprintln!(
        "{}/{} probes agree with transformers ({} known divergences)",
        probes.len() - failures.len() - known_failed.len(),
        probes.len(),
        known_failed.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
