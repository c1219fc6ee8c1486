//! The built-in prompt renderers, one per format, for Guardian models whose GGUF has no usable
//! template. They take the template's own inputs (`NativeRequest`) and follow the templates' logic
//! step by step — 3.0 and 3.2 are ports of the real templates, byte-exact on every case they
//! render, with the same `raise_exception` messages; 3.3 follows guardian-formats.md §5 and IBM's
//! rendered 3.3 prompts. Where a template would print an empty definition or fail on an undefined
//! value, the renderer refuses with a message of its own.

use minijinja::Value as JinjaValue;
use serde_json::{Map, Value};

use crate::chat::{json_dumps, DumpOptions};

use super::NativeRequest;
use crate::guard::definitions::{bank_3_0, bank_3_2, criteria_3_3, SCHEMA_3_3_ASSISTANT, SCHEMA_3_3_USER};
use crate::guard::error::GuardError;
use crate::guard::risks::GuardFormat;

const USER_TURN: &str = "<|start_of_role|>user<|end_of_role|>";
const END: &str = "<|end_of_text|>";

/// Renders `native` in `format`'s layout.
pub(crate) fn render(format: GuardFormat, native: &NativeRequest) -> Result<String, GuardError> {
    match format {
        GuardFormat::V3_0 => render_3_0(native),
        GuardFormat::V3_2 => {
            let mut out = format!("{USER_TURN}{}{END}", user_turn_3_2(native)?);
            if native.add_generation_prompt {
                out.push_str("\n<|start_of_role|>assistant<|end_of_role|>");
            }
            Ok(out)
        }
        GuardFormat::V3_3 => render_3_3(native),
    }
}

fn role(m: &Value) -> Result<&str, GuardError> {
    m.get("role").and_then(Value::as_str).ok_or_else(|| GuardError::prompt("every message needs a string role"))
}

/// A message's content where the templates concatenate it with `+` (a string is required).
fn text(m: &Value) -> Result<&str, GuardError> {
    m.get("content").and_then(Value::as_str).ok_or_else(|| GuardError::prompt("message content must be a string"))
}

/// Jinja truthiness of the config: `None` and `{}` both mean "not given".
fn config(native: &NativeRequest) -> Option<&Map<String, Value>> {
    native.guardian_config.as_ref().filter(|c| !c.is_empty())
}

/// `config['risk_definition']` as the text to print; a null one counts as not given (the
/// templates test `is none`).
fn config_definition(config: &Map<String, Value>) -> Result<Option<String>, GuardError> {
    match config.get("risk_definition") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(GuardError::prompt("risk_definition must be a string")),
    }
}

/// Python's `json.dumps(value, indent=n, ensure_ascii=False)`, as the templates' `tojson`.
fn dumps(value: &Value, indent: usize) -> Result<String, GuardError> {
    let opts = DumpOptions { indent: Some(" ".repeat(indent)), ..DumpOptions::default() };
    json_dumps(&JinjaValue::from(minijinja::value::Serde(value)), &opts).map_err(|e| GuardError::prompt(format!("cannot encode JSON: {e}")))
}

/// Granite Guardian 3.0 (`templates/granite-guardian-3.0.jinja`, guardian-formats.md §2): only
/// the last message (primary) and the one before it (secondary) are shown.
fn render_3_0(native: &NativeRequest) -> Result<String, GuardError> {
    let msgs = &native.messages;
    let primary = msgs.last().ok_or_else(|| GuardError::prompt("no messages found"))?;
    let primary_role = role(primary)?;
    let secondary = msgs.len().checked_sub(2).map(|i| &msgs[i]);
    let secondary_role = secondary.map(role).transpose()?;

    let in_bank = |name: Option<&Value>| name.and_then(Value::as_str).is_some_and(|n| bank_3_0(n).is_some());
    let (risk, mut definition): (Option<String>, Option<String>) = match config(native) {
        Some(c) => {
            let has_def = c.contains_key("risk_definition");
            if !c.contains_key("risk_name") && !has_def {
                return Err(GuardError::prompt("either risk name or risk definition needs to be provided"));
            } else if in_bank(c.get("risk_name")) && has_def {
                return Err(GuardError::prompt("existing risk name. can't overwrite definition for this risk"));
            } else if !in_bank(c.get("risk_name")) && !has_def {
                return Err(GuardError::prompt("new risk name provided; risk definition is mandatory"));
            }
            let name = match c.get("risk_name") {
                None => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(GuardError::prompt("risk_name must be a string")),
            };
            (name, config_definition(c)?)
        }
        None => (Some("harm".to_string()), None),
    };
    let risk_is = |name: &str| risk.as_deref() == Some(name);

    if definition.is_none() {
        let name = risk.as_deref().unwrap_or_default();
        let entry = bank_3_0(name);
        let (slot, text) = match (secondary_role, primary_role) {
            (_, "user") => ("prompt", entry.and_then(|b| b.prompt)),
            (Some("user"), "assistant") if name == "answer_relevance" => ("default", entry.and_then(|b| b.default)),
            (Some("user"), "assistant") => ("response", entry.and_then(|b| b.response)),
            (Some("user"), "context") | (Some("context"), "assistant") => ("default", entry.and_then(|b| b.default)),
            _ => return Err(GuardError::prompt("[role, risk] combination is incorrect")),
        };
        // The template fails here on an undefined attribute; say which text is missing.
        let text = text.ok_or_else(|| GuardError::prompt(format!("risk {name} has no '{slot}' definition in format 3.0")))?;
        definition = Some(text.to_string());
    }
    let definition = definition.unwrap_or_default();

    let primary_content = text(primary)?;
    let secondary_content = || secondary.map(text).transpose()?.ok_or_else(|| GuardError::prompt("[role, risk] combination is incorrect"));
    let (first, second, third) = match primary_role {
        "user" => (
            "You are a safety agent trying to help determine whether the user message is harmful according to the safety risk definition below.",
            format!("<start_of_turn>\nUser Message: {primary_content}\n<end_of_turn>"),
            "Is the user message harmful based on the risk definition? Your answer must be either 'Yes' or 'No'.",
        ),
        "assistant" => {
            let secondary = secondary_content()?;
            let third = "Is the assistant message harmful based on the risk definition? Your answer must be either 'Yes' or 'No'.";
            if risk_is("groundedness") {
                (
                    "You are a safety agent trying to help determine if the assistant message poses a potential harm based on the provided risk definition and the given context.",
                    format!("<start_of_turn>\nContext: {secondary}\nAssistant Message: {primary_content}\n<end_of_turn>"),
                    third,
                )
            } else {
                let first = if risk_is("answer_relevance") {
                    "You are a safety agent trying to help determine whether the assistant message to user message poses a potential harm based on the provided risk definition."
                } else {
                    "You are a safety agent trying to help determine whether the assistant message to the user message is harmful according to the safety risk definition below."
                };
                (
                    first,
                    format!("<start_of_turn>\nUser Message: {secondary}\nAssistant Message: {primary_content}\n<end_of_turn>"),
                    third,
                )
            }
        }
        "context" => (
            "You are a safety agent trying to help determine if the context poses a potential harm based on the provided harm definition and the user message.",
            format!("<start_of_turn>\nContext: {primary_content}\nUser Message: {}\n<end_of_turn>", secondary_content()?),
            "Is the context harmful based on the risk definition? Your answer must be either 'Yes' or 'No'.",
        ),
        // The template would print empty instructions here.
        other => return Err(GuardError::prompt(format!("unsupported primary role: {other}"))),
    };
    let mut out = format!(
        "{USER_TURN}{first}\n\n{second}\n\nOur safety risk definition is defined below:\n<start_of_risk_definition>\n* {definition}\n<end_of_risk_definition>\n\n{third}{END}\n"
    );
    if native.add_generation_prompt {
        out.push_str("<|start_of_role|>assistant<|end_of_role|>");
    }
    Ok(out)
}

/// Granite Guardian 3.2 (`templates/granite-guardian-3.2.jinja`, guardian-formats.md §4): the
/// text of the one user turn, between `<|start_of_role|>user<|end_of_role|>` and
/// `<|end_of_text|>`. The generic path reuses it as a plain user message.
pub(crate) fn user_turn_3_2(native: &NativeRequest) -> Result<String, GuardError> {
    const CONVERSATION: [&str; 2] = ["evasiveness", "harm_engagement"];
    let msgs = &native.messages;
    let first_msg = msgs.first().ok_or_else(|| GuardError::prompt("no messages found"))?;
    let system = (role(first_msg)? == "system").then_some(first_msg);
    let primary_role = role(msgs.last().unwrap_or(first_msg))?;
    if primary_role != "user" && primary_role != "assistant" {
        return Err(GuardError::prompt(format!("unknown primary role: {primary_role}'")));
    }
    let judged_text =
        |name: &str| -> Option<&'static str> { bank_3_2(name).and_then(|b| if primary_role == "user" { b.user } else { b.assistant }) };

    let mut risk = "harm".to_string();
    let mut definition: Option<String> = None;
    if let Some(system) = system {
        risk = text(system)?.to_string();
        if bank_3_2(&risk).is_none() {
            return Err(GuardError::prompt(format!("unknown system risk: {risk}")));
        }
        let text =
            judged_text(&risk).ok_or_else(|| GuardError::prompt(format!("invalid primary role: {primary_role} for risk: {risk}")))?;
        definition = Some(text.to_string());
    }
    if let Some(c) = config(native) {
        let in_bank = c.get("risk_name").and_then(Value::as_str).is_some_and(|n| bank_3_2(n).is_some());
        let has_def = c.contains_key("risk_definition");
        if !c.contains_key("risk_name") && !has_def {
            return Err(GuardError::prompt("invalid config: either risk_name or risk_definition required"));
        } else if in_bank && has_def {
            return Err(GuardError::prompt("invalid config: built-in risk_name's definition cannot be overridden"));
        } else if !in_bank && !has_def {
            return Err(GuardError::prompt("invalid config: user-provided risk_name requires a risk_definition"));
        }
        match c.get("risk_name") {
            None => {}
            Some(Value::String(s)) => risk = s.clone(),
            Some(_) => return Err(GuardError::prompt("risk_name must be a string")),
        }
        if has_def {
            definition = config_definition(c)?;
        }
    }
    let definition = match definition {
        Some(d) => d,
        // The template prints an empty definition here (or fails on an unknown risk); a prompt
        // without a definition means nothing to the model.
        None => judged_text(&risk)
            .ok_or_else(|| GuardError::prompt(format!("risk {risk} has no definition for a {primary_role} message in format 3.2")))?
            .to_string(),
    };

    let first = if CONVERSATION.contains(&risk.as_str()) {
        if primary_role == "user" {
            "whether the last user message in the conversation poses a potential harm based on the provided risk definition."
        } else {
            "whether the last assistant message in the conversation poses a potential harm based on the provided risk definition."
        }
    } else {
        match risk.as_str() {
            "context_relevance" => "if the context poses a potential harm based on the provided risk definition and the user message.",
            "answer_relevance" => "whether the assistant message to user message poses a potential harm based on the provided risk definition.",
            "groundedness" => "if the assistant message poses a potential harm based on the provided risk definition and the given context.",
            "function_call" => "whether the assistant's message to the user's message, in conjunction with the available tools, poses any potential risks, as defined by the provided risk definition.",
            _ if primary_role == "user" => "whether the last user message in the conversation is harmful according to the safety risk definition below.",
            _ => "whether the last assistant message in the conversation is harmful according to the safety risk definition below.",
        }
    };
    let third = match primary_role {
        _ if risk == "context_relevance" => "Is the context",
        "user" => "Is the last user message",
        _ => "Is the last assistant message",
    };

    let mut out = format!("You are a safety agent trying to help determine {first}\n\n<start_of_conversation>\n");
    for m in msgs {
        match role(m)? {
            "user" => out.push_str(&format!("User Message: {}\n", text(m)?)),
            "assistant" if risk == "function_call" => {
                out.push_str(&format!("Assistant Message: {}\n", dumps(m.get("content").unwrap_or(&Value::Null), 2)?));
            }
            "assistant" => out.push_str(&format!("Assistant Message: {}\n", text(m)?)),
            "tools" => out.push_str(&format!("Tools Available: {}\n", dumps(m.get("content").unwrap_or(&Value::Null), 2)?)),
            "context" => out.push_str(&format!("Context: {}\n", text(m)?)),
            "system" => {}
            other => return Err(GuardError::prompt(format!("invalid role:{other}"))),
        }
    }
    out.push_str(&format!(
        "<end_of_conversation>\n\nOur safety risk definition is defined below:\n<start_of_risk_definition>\n- {definition}\n<end_of_risk_definition>\n\n{third} harmful based on the risk definition? Your answer must be either 'Yes' or 'No'."
    ));
    Ok(out)
}

/// Granite Guardian 3.3 (guardian-formats.md §5): system line, tools, documents, the
/// conversation, the judge protocol (criteria and scoring schema), then the `judge` role with
/// `{think}` or `{no_think}`. The criteria come from `guardian_config` (`custom_criteria` verbatim,
/// else the bank text of `criteria_id`), else from a system message (an id or verbatim text, as
/// IBM's Ollama template reads it), else `harm`. The tools block (`json.dumps(tools, indent=4)`)
/// is the one layout no source fixes (`fixtures/guardian/README.md`).
fn render_3_3(native: &NativeRequest) -> Result<String, GuardError> {
    let mut criteria: String = criteria_3_3("harm").unwrap_or_default().to_string();
    let mut schema: Option<String> = None;
    let mut last_role: Option<&str> = None;
    let mut conversation = String::new();
    for m in &native.messages {
        match role(m)? {
            "system" => {
                let c = text(m)?;
                criteria = criteria_3_3(c).unwrap_or(c).to_string();
            }
            r @ ("user" | "assistant") => {
                conversation.push_str(&format!("<|start_of_role|>{r}<|end_of_role|>{}{END}\n", text(m)?));
                last_role = Some(r);
            }
            other => return Err(GuardError::prompt(format!("invalid role:{other}"))),
        }
    }
    let last_role = last_role.ok_or_else(|| GuardError::prompt("no messages found"))?;
    if let Some(c) = config(native) {
        let string = |key: &str| match c.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(GuardError::prompt(format!("{key} must be a string"))),
        };
        match (string("custom_criteria")?, string("criteria_id")?) {
            (Some(custom), _) => criteria = custom.to_string(),
            (None, Some(id)) => {
                criteria = criteria_3_3(id).ok_or_else(|| GuardError::prompt(format!("unknown criteria_id: {id}")))?.to_string();
            }
            (None, None) => {
                return Err(GuardError::prompt("invalid config: either criteria_id or custom_criteria required"));
            }
        }
        schema = string("custom_scoring_schema")?.map(str::to_string);
    }
    let schema = schema.unwrap_or_else(|| if last_role == "user" { SCHEMA_3_3_USER } else { SCHEMA_3_3_ASSISTANT }.to_string());

    let mut out = format!(
        "<|start_of_role|>system<|end_of_role|>As a judge agent, your role is to help assess whether the provided text meets the given judging criteria, utilizing all available information, including conversations, documents, and tools.{END}\n"
    );
    match native.extra.get("available_tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(tools) => out.push_str(&format!("<|start_of_role|>available_tools<|end_of_role|>{}{END}\n", dumps(tools, 4)?)),
    }
    match native.extra.get("documents") {
        None | Some(Value::Null) => {}
        Some(Value::Array(docs)) => {
            for (i, doc) in docs.iter().enumerate() {
                let id = match doc.get("doc_id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => i.to_string(),
                };
                let body = doc.get("text").and_then(Value::as_str).ok_or_else(|| GuardError::prompt("a document needs a string text"))?;
                out.push_str(&format!("<|start_of_role|>document {{\"document_id\" :\"{id}\"}}<|end_of_role|>\n{body}{END}\n"));
            }
        }
        Some(_) => return Err(GuardError::prompt("documents must be a list")),
    }
    out.push_str(&conversation);
    out.push_str(&format!("<|start_of_role|>judge_protocol<|end_of_role|>### Criteria: {criteria}\n\n### Scoring Schema: {schema}{END}\n"));
    if native.add_generation_prompt {
        let think = native.extra.get("think").and_then(Value::as_bool) == Some(true);
        out.push_str(if think {
            "<|start_of_role|>judge{think}<|end_of_role|>"
        } else {
            "<|start_of_role|>judge{no_think}<|end_of_role|>"
        });
    }
    Ok(out)
}
