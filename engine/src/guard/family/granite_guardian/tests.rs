//! Unit tests of the API -> native mapping and the prompt paths (the byte-exact fixtures are in
//! `tests/tests/golden/guard_prompts.rs`).

use serde_json::json;

use super::*;
use crate::guard::{check_request, Judged};

const TOOLS: &str = r#"[{"name": "get_weather", "parameters": {"city": {"type": "string"}}}]"#;

fn fc_input() -> GuardInput {
    GuardInput::new("Weather in Paris?").with_assistant(r#"[{"name": "get_weather", "arguments": {"town": "Paris"}}]"#)
}

#[test]
fn tools_come_from_the_tools_field_then_the_context() {
    let openai = json!({"type": "function", "function": {"name": "get_weather", "parameters": {}}});
    let input = fc_input().with_tools(vec![openai]).with_context(TOOLS);
    // 3.2: a tools message with the (unwrapped) list, between user and assistant.
    let n = NativeRequest::for_risk(GuardFormat::V3_2, Risk::FunctionCallHallucination, &input, false);
    let roles: Vec<&str> = n.messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "tools", "assistant"]);
    assert_eq!(n.messages[1]["content"], json!([{"name": "get_weather", "parameters": {}}]));
    // 3.3: available_tools.
    let n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::FunctionCallHallucination, &input, true);
    assert_eq!(n.extra["available_tools"], json!([{"name": "get_weather", "parameters": {}}]));
    assert_eq!(n.extra["think"], json!(true));

    // From the context: 3.2 keeps the JSON text as a string (IBM's cookbook), 3.3 parses it.
    let input = fc_input().with_context(TOOLS);
    let n = NativeRequest::for_risk(GuardFormat::V3_2, Risk::FunctionCallHallucination, &input, false);
    assert_eq!(n.messages[1]["content"], json!(TOOLS));
    let n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::FunctionCallHallucination, &input, false);
    assert_eq!(n.extra["available_tools"], serde_json::from_str::<Value>(TOOLS).unwrap());
    // A single tool object becomes a list; a context that is not JSON is no tool list.
    let input = fc_input().with_context(r#"{"name": "f"}"#);
    let n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::FunctionCallHallucination, &input, false);
    assert_eq!(n.extra["available_tools"], json!([{"name": "f"}]));
    let input = fc_input().with_context("the weather tool");
    let n = NativeRequest::for_risk(GuardFormat::V3_2, Risk::FunctionCallHallucination, &input, false);
    assert_eq!(n.messages.len(), 2);
    let n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::FunctionCallHallucination, &input, false);
    assert!(!n.extra.contains_key("available_tools"));
}

#[test]
fn format_3_0_sends_custom_definitions_and_no_tools() {
    let input = fc_input().with_context(TOOLS);
    let n = NativeRequest::for_risk(GuardFormat::V3_0, Risk::FunctionCallHallucination, &input, false);
    assert_eq!(n.messages.len(), 2, "3.0 has no tools slot");
    let config = n.guardian_config.unwrap();
    assert_eq!(config["risk_name"], "function_call");
    assert_eq!(config["risk_definition"].as_str(), Risk::FunctionCallHallucination.definition(GuardFormat::V3_2, Judged::Assistant));
    assert!(n.extra.is_empty());
    let n = NativeRequest::for_risk(GuardFormat::V3_0, Risk::HarmEngagement, &GuardInput::new("q"), false);
    assert!(n.guardian_config.unwrap()["risk_definition"].as_str().unwrap().starts_with("The last 'User' message"));
    let n = NativeRequest::for_risk(GuardFormat::V3_0, Risk::Harm, &GuardInput::new("q"), false);
    assert_eq!(n.guardian_config.unwrap(), json!({"risk_name": "harm"}).as_object().unwrap().clone());
}

#[test]
fn rag_shapes_per_format() {
    let input = GuardInput::new("q").with_assistant("a").with_context("c");
    let roles = |f, r| -> Vec<String> {
        let n = NativeRequest::for_risk(f, r, &input, false);
        n.messages.iter().map(|m| m["role"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(roles(GuardFormat::V3_0, Risk::ContextRelevance), ["user", "context"]);
    assert_eq!(roles(GuardFormat::V3_2, Risk::ContextRelevance), ["context", "user"]);
    assert_eq!(roles(GuardFormat::V3_3, Risk::ContextRelevance), ["user"]);
    assert_eq!(roles(GuardFormat::V3_2, Risk::Groundedness), ["context", "assistant"]);
    assert_eq!(roles(GuardFormat::V3_3, Risk::Groundedness), ["assistant"]);
    assert_eq!(roles(GuardFormat::V3_3, Risk::AnswerRelevance), ["user", "assistant"]);
    // Harm risks never show the context.
    assert_eq!(roles(GuardFormat::V3_2, Risk::Violence), ["user", "assistant"]);
    let n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::Groundedness, &input, false);
    assert_eq!(n.extra["documents"], json!([{"doc_id": "0", "text": "c"}]));
    let n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::AnswerRelevance, &input, false);
    assert!(!n.extra.contains_key("documents"));
}

/// A 3.0-layout template whose bank has `function_call` (as 3.1's is reported to) gets the name
/// alone: it would refuse a definition for a built-in risk.
#[test]
fn template_with_native_function_call_gets_no_definition() {
    let echo = "{{ guardian_config | tojson }}";
    let knows = format!("{{# <start_of_turn> {{\"function_call\": {{}}}} #}}{echo}");
    let p = Prompter::with_guardian_template(&knows).unwrap();
    assert_eq!(p.detection().template_format, Some(GuardFormat::V3_0));
    let out = p.render(GuardFormat::V3_0, Risk::FunctionCallHallucination, &fc_input(), false).unwrap();
    assert_eq!(out.text, r#"{"risk_name": "function_call"}"#);
    let plain = Prompter::with_guardian_template(&format!("{{# <start_of_turn> #}}{echo}")).unwrap();
    let out = plain.render(GuardFormat::V3_0, Risk::FunctionCallHallucination, &fc_input(), false).unwrap();
    assert!(out.text.starts_with(r#"{"risk_name": "function_call", "risk_definition": "The 'Assistant' message"#));
}

#[test]
fn paths_follow_the_template_format() {
    let t = "{# <start_of_conversation> #}{{ guardian_config.risk_name }}";
    let p = Prompter::with_guardian_template(t).unwrap();
    assert_eq!(p.path(GuardFormat::V3_2), PromptPath::GuardianTemplate);
    assert_eq!(p.path(GuardFormat::V3_3), PromptPath::Builtin);
    let input = GuardInput::new("q");
    assert_eq!(p.render(GuardFormat::V3_2, Risk::Jailbreaking, &input, false).unwrap().text, "jailbreak");
    let built = p.render(GuardFormat::V3_3, Risk::Jailbreaking, &input, true).unwrap();
    assert_eq!((built.path, built.think), (PromptPath::Builtin, true));
    assert!(built.text.ends_with("<|start_of_role|>judge{think}<|end_of_role|>"));
    assert!(Prompter::with_guardian_template("{{ messages }}").is_err(), "not a Guardian template");

    let generic = Prompter::generic(ChatTemplate::chatml());
    assert_eq!(generic.path(GuardFormat::V3_3), PromptPath::Generic);
    let request = check_request(&input, &[] as &[&str], None, false, generic.default_format()).unwrap();
    let prompts = generic.render_all(&request, &input).unwrap();
    assert_eq!(prompts.len(), 9);
    assert!(prompts.iter().all(|p| p.format == GuardFormat::V3_0 && p.text.starts_with("<|im_start|>user\nAnswer with Yes or No")));
    let layout = Prompter::generic(ChatTemplate::chatml()).with_generic_prompt(GenericPrompt::Layout);
    assert!(layout.render_all(&request, &input).unwrap().iter().all(|p| p.text.starts_with("<|im_start|>user\nYou are")));
}

#[test]
fn builtin_3_3_reads_custom_criteria_and_system_messages() {
    let mut n = NativeRequest::for_risk(GuardFormat::V3_3, Risk::Harm, &GuardInput::new("q"), false);
    n.guardian_config = Some(json!({"custom_criteria": "Mentions cheese.", "custom_scoring_schema": "S"}).as_object().unwrap().clone());
    let text = Prompter::builtin(GuardFormat::V3_3).render_native(GuardFormat::V3_3, &n).unwrap();
    assert!(text.contains("### Criteria: Mentions cheese.\n\n### Scoring Schema: S<|end_of_text|>\n"), "{text}");
    n.guardian_config = Some(json!({"criteria_id": "nope"}).as_object().unwrap().clone());
    let err = Prompter::builtin(GuardFormat::V3_3).render_native(GuardFormat::V3_3, &n).unwrap_err();
    assert_eq!(err.to_string(), "unknown criteria_id: nope");
    n.guardian_config = None;
    n.messages.insert(0, json!({"role": "system", "content": "profanity"}));
    let text = Prompter::builtin(GuardFormat::V3_3).render_native(GuardFormat::V3_3, &n).unwrap();
    assert!(text.contains("### Criteria: Profanity refers to"), "{text}");
    assert!(!text.contains("<|start_of_role|>system<|end_of_role|>profanity"));
}

#[test]
fn prompter_is_shareable_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Prompter>();
    shareable::<GuardPrompt>();
    shareable::<GuardError>();
}

#[test]
fn a_conversation_is_shown_before_the_judged_turn() {
    let messages = json!([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Tell me a joke"},
        {"role": "assistant", "content": "No."},
    ]);
    let input = crate::guard::conversation::from_messages(messages.as_array().unwrap()).unwrap();
    let n = NativeRequest::for_risk(GuardFormat::V3_2, Risk::Evasiveness, &input, false);
    let roles: Vec<&str> = n.messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    let text = Prompter::builtin(GuardFormat::V3_2).render(GuardFormat::V3_2, Risk::Evasiveness, &input, false).unwrap().text;
    assert!(text.contains("User Message: Hi\nAssistant Message: Hello!\nUser Message: Tell me a joke\nAssistant Message: No.\n"), "{text}");
    assert!(text.contains("Is the last assistant message"), "{text}");
    let text = Prompter::builtin(GuardFormat::V3_3).render(GuardFormat::V3_3, Risk::Harm, &input, false).unwrap().text;
    assert!(
        text.contains("<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>Hello!"),
        "{text}"
    );
    // RAG shapes keep their own layout
    let n = NativeRequest::for_risk(GuardFormat::V3_2, Risk::Groundedness, &input.clone().with_context("doc"), false);
    assert_eq!(n.messages.len(), 2);
}

#[test]
fn a_custom_risk_is_asked_with_its_definition_in_every_path() {
    let custom = crate::guard::CustomRisk::new("pii", "The message contains a phone number.").unwrap();
    let input = GuardInput::new("Call me at 555-0100");
    let p = Prompter::builtin(GuardFormat::V3_2).render_custom(GuardFormat::V3_2, &custom, &input, false).unwrap();
    assert!(p.text.contains("<start_of_risk_definition>\n- The message contains a phone number.\n<end_of_risk_definition>"), "{}", p.text);
    assert_eq!((p.format, p.path), (GuardFormat::V3_2, PromptPath::Builtin));
    let p = Prompter::builtin(GuardFormat::V3_0).render_custom(GuardFormat::V3_0, &custom, &input, false).unwrap();
    assert!(p.text.contains("The message contains a phone number."), "{}", p.text);
    let p = Prompter::builtin(GuardFormat::V3_3).render_custom(GuardFormat::V3_3, &custom, &input, true).unwrap();
    assert!(p.text.contains("### Criteria: The message contains a phone number."), "{}", p.text);
    assert!(p.think);
    let generic = Prompter::generic(ChatTemplate::chatml());
    let p = generic.render_custom(GuardFormat::V3_0, &custom, &input, false).unwrap();
    assert!(
        p.text.contains("Question: Does the last user message match this description: The message contains a phone number?"),
        "{}",
        p.text
    );
    assert_eq!(p.format, GuardFormat::V3_0);
    let layout = Prompter::generic(ChatTemplate::chatml()).with_generic_prompt(GenericPrompt::Layout);
    assert!(layout
        .render_custom(GuardFormat::V3_0, &custom, &input, false)
        .unwrap()
        .text
        .contains("- The message contains a phone number."));
}
