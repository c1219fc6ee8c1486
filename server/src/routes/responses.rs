//! OpenAI's Responses API: `POST /v1/responses` (answered whole, or streamed as the Responses
//! event stream, `responses_stream.rs`), `GET` and `DELETE /v1/responses/{id}`, and
//! `POST /v1/responses/input_tokens` (the prompt's token count). A request parses
//! into a typed [`ResponsesRequest`] and is converted into the chat request it means
//! (`instructions` as the system prompt, input items as chat turns: messages, `function_call`
//! items as an assistant turn's tool calls, `function_call_output` items as tool results; function
//! tools, `tool_choice`, `text.format` as `response_format`), which the chat route's checks and
//! generation run. Its reply comes back as output items: a reasoning item (a thinking block), a
//! message, function calls. Unless `store: false`, the response is kept with its conversation
//! (`response_store.rs`) for `previous_response_id`, `GET` and `DELETE`.

use std::sync::Arc;

use engine::generate::FinishReason;
use engine::grammar::Constraint;
use hyper::Response;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat_turn::{self, Call, Reply, Turn, TurnEnd};
use super::generation::{blocking, random_id, unix_now};
use super::responses_stream;
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, typed, typed_at, Body, Tagged};
use crate::requests::chat::{
    self, function_tools, CallMade, ChatCompletionRequest, ChatMessage, ConvertedChat, ReasoningEffort, Role as ChatRole,
};
use crate::requests::sampling::SamplingRequest;
use crate::response_store::Stored;
use crate::AppState;

#[derive(Debug, Deserialize)]
pub(crate) struct ResponsesRequest {
    model: String,
    input: Input,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Tagged<Tool>>>,
    #[serde(default)]
    tool_choice: Option<ToolChoice>,
    #[serde(default)]
    text: Option<TextConfig>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    user: Option<String>,
    /// `{effort, summary}`: the effort goes to the template as `reasoning_effort` (gpt-oss's
    /// reasoning level; whether a model thinks at all is its template's choice), the summary is
    /// accepted without effect; a thinking block the model writes is returned as a reasoning item.
    #[serde(default)]
    reasoning: Option<ReasoningConfig>,
    #[serde(default)]
    truncation: Option<Truncation>,
}

/// `input`: a user message's text, or a list of items.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// The input items, each read by its `type` (so that an error names the field by its path).
#[derive(Debug, Deserialize)]
struct MessageItem {
    role: Role,
    content: MessageContent,
}

#[derive(Debug, Deserialize)]
struct FunctionCallItem {
    call_id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct FunctionCallOutputItem {
    call_id: String,
    output: CallOutput,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
    System,
    Developer,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum MessageContent {
    Text(String),
    Parts(Vec<Tagged<Part>>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    InputText { text: String },
    OutputText { text: String },
    Refusal { refusal: String },
    InputImage {},
    InputFile {},
    InputAudio {},
}

/// A function call's result: text, or a list of `input_text` parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CallOutput {
    Text(String),
    Parts(Vec<Tagged<Part>>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tool {
    Function {
        name: String,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        parameters: Option<Map<String, Value>>,
        #[serde(default)]
        strict: Option<bool>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ToolChoice {
    Mode(ToolMode),
    Function(Tagged<NamedFunction>),
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum ToolMode {
    None,
    Auto,
    Required,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum NamedFunction {
    Function { name: String },
}

#[derive(Debug, Deserialize)]
struct TextConfig {
    #[serde(default)]
    format: Option<Tagged<Format>>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Format {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Map<String, Value>,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        strict: Option<bool>,
    },
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct ReasoningConfig {
    #[serde(default)]
    effort: Option<ReasoningEffort>,
    #[serde(default)]
    summary: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Truncation {
    Auto,
    Disabled,
}

fn chat_role(role: Role) -> ChatRole {
    match role {
        Role::User => ChatRole::User,
        Role::Assistant => ChatRole::Assistant,
        // the chat route reads `developer` as `system`
        Role::System => ChatRole::System,
        Role::Developer => ChatRole::Developer,
    }
}

/// The text of message parts (or a call's output parts), at `at` for errors.
fn parts_text(parts: &[Tagged<Part>], at: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, Tagged(part)) in parts.iter().enumerate() {
        match part {
            Part::InputText { text: t } | Part::OutputText { text: t } => text.push_str(t),
            Part::Refusal { refusal } => text.push_str(refusal),
            Part::InputImage {} | Part::InputFile {} | Part::InputAudio {} => {
                let at = format!("{at}[{j}]");
                return Err(ApiError::invalid_param(&at, format!("{at} is an image, file or audio part, but this model reads text only")));
            }
        }
    }
    Ok(text)
}

impl ResponsesRequest {
    fn check(&self) -> Result<(), ApiError> {
        if self.max_output_tokens == Some(0) {
            return Err(ApiError::invalid_param("max_output_tokens", "max_output_tokens must be at least 1"));
        }
        if let Some(m) = &self.metadata {
            if m.len() > 16 || m.iter().any(|(k, v)| k.len() > 64 || v.as_str().is_none_or(|v| v.len() > 512)) {
                return Err(ApiError::invalid_param(
                    "metadata",
                    "metadata holds at most 16 keys of at most 64 characters, each with a string of at most 512",
                ));
            }
        }
        Ok(())
    }

    /// The input as chat messages, in order: an assistant message and the function calls after
    /// it are one assistant turn; each call's output is a tool message.
    fn input_messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let items = match &self.input {
            Input::Text(text) => return Ok(vec![ChatMessage::text(ChatRole::User, text.clone())]),
            Input::Items(items) if items.is_empty() => return Err(ApiError::invalid_param("input", "input must not be empty")),
            Input::Items(items) => items,
        };
        let mut out: Vec<ChatMessage> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("input[{i}]");
            // a message may leave out its type (an "easy input message")
            let mut item = item.clone();
            if let Value::Object(m) = &mut item {
                if !m.contains_key("type") && m.contains_key("role") {
                    m.insert("type".into(), json!("message"));
                }
            }
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    let MessageItem { role, content } = typed_at(item, &at)?;
                    let text = match content {
                        MessageContent::Text(t) => t,
                        MessageContent::Parts(parts) => parts_text(&parts, &format!("{at}.content"))?,
                    };
                    out.push(ChatMessage::text(chat_role(role), text));
                }
                Some("function_call") => {
                    let FunctionCallItem { call_id, name, arguments } = typed_at(item, &at)?;
                    let call = CallMade { id: call_id, name, arguments: Value::String(arguments) };
                    // calls right after an assistant message (or other calls) join its turn
                    match out.last_mut() {
                        Some(last) if last.role() == ChatRole::Assistant => last.add_call(call),
                        _ => out.push(ChatMessage::assistant(String::new(), vec![call])),
                    }
                }
                Some("function_call_output") => {
                    let FunctionCallOutputItem { call_id, output } = typed_at(item, &at)?;
                    let text = match output {
                        CallOutput::Text(t) => t,
                        CallOutput::Parts(parts) => parts_text(&parts, &format!("{at}.output"))?,
                    };
                    out.push(ChatMessage::tool_result(call_id, text));
                }
                // an earlier reply's reasoning: left out of the prompt, as the chat templates
                // leave earlier thinking out
                Some("reasoning") => {}
                _ => {
                    return Err(ApiError::invalid_param(
                        &format!("{at}.type"),
                        format!("{at}.type must be message, function_call, function_call_output or reasoning"),
                    ))
                }
            }
        }
        if out.is_empty() {
            return Err(ApiError::invalid_param("input", "input has no message, function call or function call output"));
        }
        Ok(out)
    }

    /// The chat request this one means over the conversation `history` (earlier turns and this
    /// input).
    fn to_chat(&self, history: &[ChatMessage]) -> Result<ChatCompletionRequest, ApiError> {
        let mut messages = Vec::with_capacity(history.len() + 1);
        if let Some(instructions) = &self.instructions {
            messages.push(ChatMessage::text(ChatRole::System, instructions.clone()));
        }
        messages.extend(history.iter().cloned());
        let sampling = SamplingRequest {
            max_tokens: self.max_output_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            user: self.user.clone(),
            ..SamplingRequest::default()
        };
        let tools = self
            .tools
            .as_ref()
            .map(|t| {
                function_tools(t.iter().map(|Tagged(Tool::Function { name, description, parameters, .. })| {
                    (name.as_str(), description.as_deref(), parameters.as_ref())
                }))
            })
            .transpose()?;
        let tool_choice = match &self.tool_choice {
            None => None,
            Some(ToolChoice::Mode(ToolMode::None)) => Some(chat::ToolChoice::None),
            Some(ToolChoice::Mode(ToolMode::Auto)) => Some(chat::ToolChoice::Auto),
            Some(ToolChoice::Mode(ToolMode::Required)) => Some(chat::ToolChoice::Required),
            Some(ToolChoice::Function(Tagged(NamedFunction::Function { name }))) => Some(chat::ToolChoice::Named(name.clone())),
        };
        let response_format = match self.text.as_ref().and_then(|t| t.format.as_ref()).map(|Tagged(f)| f) {
            None | Some(Format::Text) => None,
            Some(Format::JsonObject) => Some(Constraint::JsonObject),
            Some(Format::JsonSchema { schema, .. }) => Some(Constraint::JsonSchema(Value::Object(schema.clone()))),
        };
        let reasoning_effort = self.reasoning.as_ref().and_then(|r| r.effort);
        // OpenAI's API answers a conversation that ends with the assistant with a new turn
        let continue_final_message = false;
        Ok(ConvertedChat {
            model: self.model.clone(),
            messages,
            tools,
            tool_choice,
            response_format,
            reasoning_effort,
            continue_final_message,
            sampling,
        }
        .into())
    }

    /// The request's settings as the response object repeats them.
    fn echo(&self, id: String, model: String, store: bool) -> ResponseShell {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .flatten()
            .map(|Tagged(Tool::Function { name, description, parameters, strict })| {
                json!({"type": "function", "name": name, "description": description, "parameters": parameters, "strict": strict.unwrap_or(true)})
            })
            .collect();
        let tool_choice = match &self.tool_choice {
            None => json!("auto"),
            Some(ToolChoice::Mode(mode)) => json!(mode_name(*mode)),
            Some(ToolChoice::Function(Tagged(NamedFunction::Function { name }))) => json!({"type": "function", "name": name}),
        };
        let format = match self.text.as_ref().and_then(|t| t.format.as_ref()).map(|Tagged(f)| f) {
            None | Some(Format::Text) => json!({"type": "text"}),
            Some(Format::JsonObject) => json!({"type": "json_object"}),
            Some(Format::JsonSchema { name, schema, description, strict }) => {
                json!({"type": "json_schema", "name": name, "schema": schema, "description": description, "strict": strict})
            }
        };
        let template = json!({
            "id": id,
            "object": "response",
            "created_at": unix_now(),
            "status": "in_progress",
            "error": null,
            "incomplete_details": null,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "model": model,
            "output": [],
            "parallel_tool_calls": self.parallel_tool_calls.unwrap_or(true),
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": self.reasoning.as_ref().and_then(|r| r.effort).map(ReasoningEffort::as_str), "summary": null},
            "store": store,
            "temperature": self.temperature.unwrap_or(1.0),
            "text": {"format": format},
            "tool_choice": tool_choice,
            "tools": tools,
            "top_p": self.top_p.unwrap_or(1.0),
            "truncation": match self.truncation { Some(Truncation::Auto) => "auto", _ => "disabled" },
            "usage": null,
            "user": self.user,
            "metadata": self.metadata.clone().unwrap_or_default(),
        });
        ResponseShell { template }
    }
}

fn mode_name(mode: ToolMode) -> &'static str {
    match mode {
        ToolMode::None => "none",
        ToolMode::Auto => "auto",
        ToolMode::Required => "required",
    }
}

/// A response object before its output: the request's settings repeated.
pub(crate) struct ResponseShell {
    template: Value,
}

impl ResponseShell {
    /// The response while it is being generated (`response.created`, `response.in_progress`).
    pub fn in_progress(&self) -> Value {
        self.template.clone()
    }

    /// The finished response: its output items, status and usage.
    pub fn finished(&self, output: Vec<Value>, end: &TurnEnd) -> Value {
        let mut r = self.template.clone();
        let incomplete = end.finish == FinishReason::Length;
        r["status"] = json!(if incomplete { "incomplete" } else { "completed" });
        if incomplete {
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        r["output"] = Value::Array(output);
        let u = &end.usage;
        r["usage"] = json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": end.reasoning_tokens},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        });
        r
    }
}

/// Output item ids: a prefix naming the kind, then random hex.
pub(crate) fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_id())
}

pub(crate) fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() && status == "in_progress" { json!([]) } else { json!([{"type": "reasoning_text", "text": text}]) };
    json!({"type": "reasoning", "id": id, "summary": [], "content": content, "status": status})
}

pub(crate) fn message_item(id: &str, text: Option<&str>, status: &str) -> Value {
    let content = match text {
        Some(t) => json!([{"type": "output_text", "text": t, "annotations": [], "logprobs": []}]),
        None => json!([]),
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

pub(crate) fn call_item(id: &str, call: &Call, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call.id, "name": call.name, "arguments": arguments, "status": status})
}

/// The assistant turn a reply adds to the conversation (its text and calls).
pub(crate) fn assistant_turn(content: &str, calls: &[Call]) -> ChatMessage {
    let calls = calls.iter().map(|c| CallMade { id: c.id.clone(), name: c.name.clone(), arguments: Value::String(c.arguments.clone()) });
    ChatMessage::assistant(content.to_string(), calls.collect())
}

/// What a finished response leaves behind: kept when the request asked (`store`).
pub(crate) struct Keep {
    pub store: bool,
    /// The conversation up to and with this request's input.
    pub history: Vec<ChatMessage>,
}

impl Keep {
    pub fn save(self, state: &AppState, response: &Value, turn: ChatMessage) {
        if !self.store {
            return;
        }
        let mut history = self.history;
        history.push(turn);
        let id = response["id"].as_str().unwrap_or_default().to_string();
        state.responses.insert(id, Stored { response: response.clone(), history });
    }
}

pub async fn create(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: ResponsesRequest = typed(body)?;
    request.check()?;
    if request.store == Some(true) && !state.responses.enabled() {
        return Err(ApiError::invalid_param("store", "this server keeps no responses (--responses-store 0): send store false"));
    }
    let store = request.store.unwrap_or(true) && state.responses.enabled();
    let history = conversation(state, &request)?;
    let chat = request.to_chat(&history)?;
    let keep = Keep { store, history };
    if request.stream == Some(true) {
        let turn = Turn::start(state, chat).await?;
        let shell = request.echo(item_id("resp"), turn.model.clone(), store);
        let (response, sse) = sse_response();
        let state = state.clone();
        tokio::spawn(async move { responses_stream::run(turn, shell, keep, &state, &sse).await });
        return Ok(response);
    }
    let reply = chat_turn::complete(state, chat).await?;
    let shell = request.echo(item_id("resp"), reply.model.clone(), store);
    let response = shell.finished(output_items(&reply), &reply.end);
    keep.save(state, &response, assistant_turn(&reply.content, &reply.calls));
    Ok(ok_json(&response))
}

/// The conversation a request continues (its `previous_response_id`'s, 404 when that is not
/// stored) with the request's input after it.
fn conversation(state: &AppState, request: &ResponsesRequest) -> Result<Vec<ChatMessage>, ApiError> {
    let mut history = match &request.previous_response_id {
        Some(id) => {
            let earlier = state.responses.get(id).ok_or_else(|| {
                ApiError::not_found("previous_response_id", format!("no stored response has the id {id:?} (it may have been evicted)"))
            })?;
            earlier.history
        }
        None => Vec::new(),
    };
    history.extend(request.input_messages()?);
    Ok(history)
}

/// `POST /v1/responses/input_tokens` (OpenAI's): the prompt tokens the request would give its
/// model (instructions, tools and the conversation rendered by the model's template).
pub async fn input_tokens(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: ResponsesRequest = typed(body)?;
    request.check()?;
    let (state, chat) = (state.clone(), request.to_chat(&conversation(state, &request)?)?);
    let tokens = blocking(move || chat_turn::prompt_tokens(&state, chat)).await?;
    Ok(ok_json(&json!({"object": "response.input_tokens", "input_tokens": tokens})))
}

/// The output items of a reply answered whole.
fn output_items(reply: &Reply) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = &reply.reasoning {
        out.push(reasoning_item(&item_id("rs"), r, "completed"));
    }
    // a reply that is nothing at all is still one (empty) message
    if !reply.content.is_empty() || (reply.calls.is_empty() && reply.reasoning.is_none()) {
        let status = if reply.end.finish == FinishReason::Length { "incomplete" } else { "completed" };
        out.push(message_item(&item_id("msg"), Some(&reply.content), status));
    }
    out.extend(reply.calls.iter().map(|c| call_item(&item_id("fc"), c, &c.arguments, "completed")));
    out
}

fn stored_id(id: &str) -> Result<&str, ApiError> {
    if id.is_empty() || id.contains('/') {
        return Err(ApiError::not_found("response_id", format!("no stored response has the id {id:?}")));
    }
    Ok(id)
}

/// `GET /v1/responses/{id}`.
pub fn get(state: &AppState, id: &str) -> Result<Response<Body>, ApiError> {
    let id = stored_id(id)?;
    match state.responses.get(id) {
        Some(stored) => Ok(ok_json(&stored.response)),
        None => Err(ApiError::not_found("response_id", format!("no stored response has the id {id:?}"))),
    }
}

/// `DELETE /v1/responses/{id}`.
pub fn delete(state: &AppState, id: &str) -> Result<Response<Body>, ApiError> {
    let id = stored_id(id)?;
    match state.responses.remove(id) {
        true => Ok(ok_json(&json!({"id": id, "object": "response", "deleted": true}))),
        false => Err(ApiError::not_found("response_id", format!("no stored response has the id {id:?}"))),
    }
}
