//! The chat-template renderer on arbitrary conversations: every template of
//! `tests/fixtures/templates/` (compiled once), chosen by the first byte, renders the rest of
//! the input read as `{"messages": [...], "tools": [...], "add_generation_prompt": bool,
//! "kwargs": {...}}`. Rendering returns a prompt or an error, never panics or hangs.
#![no_main]

use std::sync::OnceLock;

use engine::chat::{ChatInput, ChatTemplate, NaiveDateTime};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Every fixture template, in file-name order, with the BOS/EOS texts of its first case.
fn templates() -> Vec<ChatTemplate> {
    let dir = engine_fuzz::fixture("templates");
    let mut names: Vec<_> = std::fs::read_dir(&dir).expect("the templates fixture").filter_map(|e| e.ok()).map(|e| e.path()).collect();
    names.retain(|p| p.extension().is_some_and(|x| x == "jinja"));
    names.sort();
    names
        .iter()
        .map(|path| {
            let source = std::fs::read_to_string(path).expect("a template");
            let case = path.with_extension("case1.json");
            let case: Value = std::fs::read(&case).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
            ChatTemplate::new(&source, case["bos_token"].as_str(), case["eos_token"].as_str())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    static TEMPLATES: OnceLock<Vec<ChatTemplate>> = OnceLock::new();
    let templates = TEMPLATES.get_or_init(templates);
    let Some((&which, json)) = data.split_first() else { return };
    let Ok(Value::Object(mut input)) = serde_json::from_slice::<Value>(json) else { return };
    let Some(Value::Array(messages)) = input.remove("messages") else { return };
    let tools = match input.remove("tools") {
        Some(Value::Array(tools)) => Some(tools),
        _ => None,
    };
    let extra = match input.remove("kwargs") {
        Some(Value::Object(extra)) => extra,
        _ => Default::default(),
    };
    let chat = ChatInput {
        messages,
        tools,
        add_generation_prompt: input.get("add_generation_prompt").and_then(Value::as_bool).unwrap_or(true),
        now: NaiveDateTime::parse_from_str("2026-01-02 03:04:05", "%Y-%m-%d %H:%M:%S").ok(),
        extra,
    };
    let template = &templates[which as usize % templates.len()];
    let _ = template.render(&chat);
});
