//! A chat request read and checked: its messages (text parts joined, `developer` as `system`),
//! tools and `tool_choice` (a forced call decoded under the tool-call grammar), `response_format`,
//! logprobs, the reasoning format and the shared sampling fields; then its prompt rendered by the
//! model's template and one output per choice, and a reply's tool calls parsed back out.

use engine::chat::{parse_tool_calls, tokenize_rendered, ChatInput};
use engine::grammar::{Constraint, ToolSpec};
use serde_json::{json, Map, Value};

use super::generation::{output, params_for, random_id};
use super::reasoning::prompt_opens_thinking;
use crate::error::ApiError;
use crate::params::{boolean, common, integer, CommonParams};
use crate::registry::ModelEntry;
use crate::worker::SeqSpec;

/// Everything a chat request asks for, checked.
pub(crate) struct ChatRequest {
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    /// `none`: never parse calls; `auto` / `required` / a named function: parse them.
    pub tool_choice: ToolChoice,
    pub response_format: Option<Constraint>,
    pub common: CommonParams,
    pub logprobs: Option<usize>,
    /// `reasoning_format: "none"` keeps a thinking block inline in the content; by default it is
    /// returned apart (`reasoning_content`).
    pub inline_reasoning: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

pub(crate) fn parse(body: &Map<String, Value>, n_vocab: usize) -> Result<ChatRequest, ApiError> {
    let messages = messages(body)?;
    let tools = tools(body)?;
    let tool_choice = tool_choice(body, tools.as_deref())?;
    let logprobs = match (boolean(body, "logprobs")?.unwrap_or(false), integer(body, "top_logprobs", 0, 20)?) {
        (true, top) => Some(top.unwrap_or(0) as usize),
        (false, Some(_)) => return Err(ApiError::invalid_param("top_logprobs", "top_logprobs requires logprobs to be true")),
        (false, None) => None,
    };
    // a forced call (`required`, or a named function) is decoded under the tool-call grammar
    let forced = match &tool_choice {
        ToolChoice::Required => Some(tool_specs(tools.as_deref().unwrap_or_default(), None)),
        ToolChoice::Named(name) => Some(tool_specs(tools.as_deref().unwrap_or_default(), Some(name))),
        ToolChoice::None | ToolChoice::Auto => None,
    };
    let response_format = match (response_format(body)?, forced) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_param("response_format", "response_format cannot be combined with a forced tool_choice"))
        }
        (format, forced) => format.or(forced),
    };
    let inline_reasoning = match body.get("reasoning_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "auto" || s == "separate" => false,
        Some(Value::String(s)) if s == "none" => true,
        Some(_) => return Err(ApiError::invalid_param("reasoning_format", "reasoning_format must be auto, separate or none")),
    };
    Ok(ChatRequest { messages, tools, tool_choice, response_format, common: common(body, n_vocab)?, logprobs, inline_reasoning })
}

/// The messages, each with a role and its content as text (text parts joined); image parts are
/// refused, as no loaded model has a vision projector.
pub(crate) fn messages(body: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("messages", m);
    let list = match body.get("messages") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        None | Some(Value::Null) => return Err(ApiError::missing("messages")),
        Some(_) => return Err(bad("messages must be a non-empty array".into())),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let Value::Object(m) = m else { return Err(bad(format!("messages[{i}] must be an object"))) };
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| bad(format!("messages[{i}].role is required")))?;
        if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
            return Err(bad(format!("messages[{i}].role must be system, developer, user, assistant or tool, got {role:?}")));
        }
        let mut m = m.clone();
        let content = match m.get("content") {
            // an assistant turn may be only tool calls; other roles read a missing text as empty
            None | Some(Value::Null) if role == "assistant" => Value::Null,
            None | Some(Value::Null) => Value::String(String::new()),
            Some(Value::String(s)) => Value::String(s.clone()),
            Some(Value::Array(parts)) => Value::String(text_of_parts(parts, i)?),
            _ => return Err(bad(format!("messages[{i}].content must be a string or an array of content parts"))),
        };
        if let Some(calls) = m.get_mut("tool_calls").filter(|c| !c.is_null()) {
            check_tool_calls(calls, i)?;
            arguments_as_objects(calls);
        }
        for key in ["name", "tool_call_id"] {
            if !matches!(m.get(key), None | Some(Value::Null) | Some(Value::String(_))) {
                return Err(bad(format!("messages[{i}].{key} must be a string")));
            }
        }
        // the templates know `developer` as nothing: it is the system role of newer APIs
        if role == "developer" {
            m.insert("role".into(), "system".into());
        }
        m.insert("content".into(), content);
        out.push(Value::Object(m));
    }
    Ok(out)
}

/// An assistant turn's earlier tool calls, as the templates read them: each with its `id`, type
/// `function`, and a function with a `name` and its `arguments` (JSON text, or the object).
fn check_tool_calls(calls: &Value, i: usize) -> Result<(), ApiError> {
    let bad = |m: String| ApiError::invalid_param("messages", m);
    let Value::Array(calls) = calls else { return Err(bad(format!("messages[{i}].tool_calls must be an array"))) };
    for (j, c) in calls.iter().enumerate() {
        let at = format!("messages[{i}].tool_calls[{j}]");
        let function = c.get("function").filter(|f| f.is_object());
        let ok = c.get("id").is_some_and(Value::is_string)
            && c.get("type").and_then(Value::as_str) == Some("function")
            && function.and_then(|f| f.get("name")).is_some_and(Value::is_string)
            && function.and_then(|f| f.get("arguments")).is_some_and(|a| a.is_string() || a.is_object());
        if !ok {
            return Err(bad(format!(
                "{at} must be {{\"id\": string, \"type\": \"function\", \"function\": {{\"name\": string, \"arguments\": JSON text or object}}}}"
            )));
        }
    }
    Ok(())
}

/// Earlier calls' arguments as the objects the templates expect (`tool_call.arguments | tojson`
/// would otherwise write the JSON text as one quoted string, which the model then imitates);
/// arguments that are not a JSON object stay as they were sent.
fn arguments_as_objects(calls: &mut Value) {
    for call in calls.as_array_mut().into_iter().flatten() {
        let arguments = &mut call["function"]["arguments"];
        if let Some(Ok(object @ Value::Object(_))) = arguments.as_str().map(serde_json::from_str::<Value>) {
            *arguments = object;
        }
    }
}

fn text_of_parts(parts: &[Value], i: usize) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, p) in parts.iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(
                p.get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ApiError::invalid_param("messages", format!("messages[{i}].content[{j}].text must be a string")))?,
            ),
            Some("image_url") | Some("input_image") | Some("input_audio") => {
                return Err(ApiError::invalid_param(
                    "messages",
                    format!("messages[{i}].content[{j}] is an image or audio part, but this model has no vision or audio support"),
                ))
            }
            _ => return Err(ApiError::invalid_param("messages", format!("messages[{i}].content[{j}] has an unknown type"))),
        }
    }
    Ok(text)
}

pub(crate) fn tools(body: &Map<String, Value>) -> Result<Option<Vec<Value>>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tools", m);
    let list = match body.get("tools") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) if list.is_empty() => return Ok(None),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad("tools must be an array".into())),
    };
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(format!("tools[{i}].type must be \"function\"")));
        }
        let f = t.get("function").ok_or_else(|| bad(format!("tools[{i}].function is required")))?;
        match f.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') => {}
            _ => return Err(bad(format!("tools[{i}].function.name must be a non-empty name of letters, digits, _ or -"))),
        }
        match f.get("parameters") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(_) => return Err(bad(format!("tools[{i}].function.parameters must be a JSON schema object"))),
        }
        if !matches!(f.get("description"), None | Some(Value::Null) | Some(Value::String(_))) {
            return Err(bad(format!("tools[{i}].function.description must be a string")));
        }
    }
    Ok(Some(list.clone()))
}

fn tool_choice(body: &Map<String, Value>, tools: Option<&[Value]>) -> Result<ToolChoice, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tool_choice", m);
    let choice = match body.get("tool_choice") {
        None | Some(Value::Null) => return Ok(if tools.is_some() { ToolChoice::Auto } else { ToolChoice::None }),
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => return Err(bad(format!("tool_choice must be none, auto, required or a function, got {other:?}"))),
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Named(name.to_string()),
            None => {
                return Err(bad(
                    "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}".into()
                ))
            }
        },
    };
    if choice != ToolChoice::None && tools.is_none() {
        return Err(bad("tool_choice needs tools".into()));
    }
    if let ToolChoice::Named(name) = &choice {
        let known = tools.unwrap_or_default().iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name));
        if !known {
            return Err(bad(format!("tool_choice names {name:?}, which is not in tools")));
        }
    }
    Ok(choice)
}

/// The tool-call constraint over `tools` (or only the one named).
fn tool_specs(tools: &[Value], only: Option<&str>) -> Constraint {
    let specs = tools
        .iter()
        .filter_map(|t| {
            let name = t.pointer("/function/name")?.as_str()?;
            (only.is_none() || only == Some(name))
                .then(|| ToolSpec { name: name.to_string(), parameters: t.pointer("/function/parameters").cloned().unwrap_or(Value::Null) })
        })
        .collect();
    Constraint::ToolCall(specs)
}

fn response_format(body: &Map<String, Value>) -> Result<Option<Constraint>, ApiError> {
    let bad = |m: &str| ApiError::invalid_param("response_format", m.to_string());
    let Some(rf) = body.get("response_format").filter(|v| !v.is_null()) else { return Ok(None) };
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonObject)),
        Some("json_schema") => match rf.pointer("/json_schema/schema") {
            Some(schema @ Value::Object(_)) => Ok(Some(Constraint::JsonSchema(schema.clone()))),
            _ => Err(bad("response_format.json_schema.schema must be a JSON schema object")),
        },
        _ => Err(bad("response_format.type must be text, json_object or json_schema")),
    }
}

/// `input` rendered by the model's chat template (its failure is a 400 on `messages`).
pub(crate) fn render(entry: &ModelEntry, input: &ChatInput) -> Result<String, ApiError> {
    entry.worker.template().render(input).map_err(|e| ApiError::invalid_param("messages", format!("the chat template failed: {e}")))
}

/// A request's outputs, ready to submit.
pub(crate) struct Outputs {
    pub seqs: Vec<SeqSpec>,
    /// The prompt leaves a thinking block open for the reply (and no grammar decides the reply).
    pub opens_thinking: bool,
}

/// The outputs of a request: its prompt (the messages rendered by the model's template and
/// tokenized) and one output per choice, each with its own parameters (and grammar).
pub(crate) fn outputs(entry: &ModelEntry, request: &ChatRequest, stream: bool) -> Result<Outputs, ApiError> {
    let input = ChatInput { tools: request.tools.clone(), add_generation_prompt: true, ..ChatInput::new(request.messages.clone()) };
    let text = render(entry, &input)?;
    let prompt = tokenize_rendered(entry.model.tokenizer(), &text);
    let seqs = (0..request.common.n)
        .map(|i| {
            let params = params_for(&entry.worker, &request.common, request.logprobs, request.response_format.as_ref(), prompt.len(), i)?;
            Ok(output(prompt.clone(), params, stream))
        })
        .collect::<Result<_, ApiError>>()?;
    // under a grammar the reply is what the grammar says from its first token: never reasoning
    let opens_thinking = prompt_opens_thinking(&text) && request.response_format.is_none();
    Ok(Outputs { seqs, opens_thinking })
}

/// The reply's text and its tool calls as OpenAI objects (none when tools are off).
pub(crate) fn split_tool_calls(text: &str, choice: &ToolChoice) -> (String, Vec<Value>) {
    if *choice == ToolChoice::None {
        return (text.to_string(), Vec::new());
    }
    let parsed = parse_tool_calls(text);
    let calls: Vec<Value> = parsed
        .tool_calls
        .iter()
        .filter(|c| match choice {
            ToolChoice::Named(name) => &c.name == name,
            _ => true,
        })
        .map(|c| {
            json!({
                "id": format!("call_{}", &random_id()[..22]),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })
        })
        .collect();
    if calls.is_empty() {
        (text.to_string(), Vec::new())
    } else {
        (parsed.content, calls)
    }
}
