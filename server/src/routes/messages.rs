//! Anthropic's Messages API: `POST /v1/messages` (answered whole, or streamed as Anthropic's
//! typed events) and `POST /v1/messages/count_tokens`. A request parses into a typed [`MessagesRequest`] and is
//! converted into the chat request it means (system prompt, turns with text, `tool_use` and
//! `tool_result` blocks as OpenAI messages and tool calls, tools and `tool_choice`), which the
//! chat route's checks and generation run; its reply comes back as content blocks (a thinking
//! block, text, tool uses) with Anthropic's stop reasons and usage. Errors on these routes have Anthropic's shape (`http::anthropic_error`).

use std::sync::Arc;

use engine::generate::FinishReason;
use hyper::Response;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat_turn::{self, Call, Turn, TurnEnd, TurnEvent};
use super::generation::{blocking, random_id, stop_string_met};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, typed, Body, SseSender, Tagged};
use crate::requests::chat::{self, function_tools, CallMade, ChatCompletionRequest, ChatMessage, ConvertedChat, Role as ChatRole};
use crate::requests::sampling::{Api, SamplingRequest, Stop};
use crate::AppState;

#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: String,
    /// Required by `/v1/messages`, unused by `count_tokens`.
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    max_tokens: Option<u64>,
    messages: Vec<InputMessage>,
    #[serde(default)]
    system: Option<Text>,
    #[serde(default)]
    tools: Option<Vec<Tool>>,
    #[serde(default)]
    tool_choice: Option<Tagged<ToolChoice>>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    top_k: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
    /// Accepted and checked, without effect: whether a model thinks is its chat template's
    /// choice, and a thinking block it writes is returned as a `thinking` content block.
    #[serde(default)]
    #[allow(dead_code)]
    thinking: Option<Tagged<Thinking>>,
    /// Accepted and unused (`user_id` is for Anthropic's abuse tracking).
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<Map<String, Value>>,
}

/// A string, or a list of text blocks (the system prompt, a tool result's content).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Text {
    Plain(String),
    Blocks(Vec<Tagged<TextBlock>>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TextBlock {
    Text { text: String },
}

impl Text {
    fn joined(&self) -> String {
        match self {
            Text::Plain(s) => s.clone(),
            Text::Blocks(blocks) => blocks.iter().map(|Tagged(TextBlock::Text { text })| text.as_str()).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct InputMessage {
    role: Role,
    content: Content,
}

#[derive(Debug, Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Plain(String),
    Blocks(Vec<Tagged<Block>>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    Image {
        #[allow(dead_code)]
        source: Value,
    },
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Text>,
        #[serde(default)]
        is_error: Option<bool>,
    },
}

#[derive(Debug, Deserialize)]
struct Tool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    input_schema: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
enum Thinking {
    Enabled { budget_tokens: u64 },
    Disabled,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToolChoice {
    Auto,
    Any,
    None,
    Tool { name: String },
}

impl MessagesRequest {
    /// The chat request this one means.
    fn to_chat(&self) -> Result<ChatCompletionRequest, ApiError> {
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(ChatMessage::text(ChatRole::System, system.joined()));
        }
        for (i, m) in self.messages.iter().enumerate() {
            messages.extend(turn(m, i)?);
        }
        if let Some(last) = self.messages.last().filter(|m| m.role == Role::Assistant) {
            // as Anthropic refuses it: a prefill that ends in white space leaves the reply to
            // start inside a word boundary the tokenizer would have joined to the next word
            let ends_in_space = match &last.content {
                Content::Plain(text) => text.ends_with(char::is_whitespace),
                Content::Blocks(blocks) => {
                    matches!(blocks.last(), Some(Tagged(Block::Text { text })) if text.ends_with(char::is_whitespace))
                }
            };
            if ends_in_space {
                return Err(ApiError::invalid_param("messages", "messages: final assistant content cannot end with trailing whitespace"));
            }
        }
        let stop = match &self.stop_sequences {
            None => None,
            Some(list) => Some(
                Stop::new(list.clone())
                    .ok_or_else(|| ApiError::invalid_param("stop_sequences", format!("stop_sequences {}", Stop::RULE)))?,
            ),
        };
        let sampling = SamplingRequest {
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            stop,
            api: Api::Anthropic,
            ..SamplingRequest::default()
        };
        let tools = self
            .tools
            .as_ref()
            .map(|t| function_tools(t.iter().map(|t| (t.name.as_str(), t.description.as_deref(), Some(&t.input_schema)))));
        let tool_choice = match self.tool_choice.as_ref().map(|Tagged(c)| c) {
            None | Some(ToolChoice::Auto) => None,
            Some(ToolChoice::Any) => Some(chat::ToolChoice::Required),
            Some(ToolChoice::None) => Some(chat::ToolChoice::None),
            Some(ToolChoice::Tool { name }) => Some(chat::ToolChoice::Named(name.clone())),
        };
        Ok(ConvertedChat {
            model: self.model.clone(),
            messages,
            tools: tools.transpose()?,
            tool_choice,
            response_format: None,
            reasoning_effort: None,
            // Anthropic's API: a last assistant turn is the start of the reply (a prefill)
            continue_final_message: true,
            sampling,
        }
        .into())
    }
}

/// One Messages turn as chat messages: a user turn's tool results become `tool` messages (before
/// its text), an assistant turn's `tool_use` blocks its `tool_calls`.
fn turn(m: &InputMessage, i: usize) -> Result<Vec<ChatMessage>, ApiError> {
    let blocks = match &m.content {
        Content::Plain(text) => return Ok(vec![ChatMessage::text(chat_role(m.role), text.clone())]),
        Content::Blocks(blocks) => blocks,
    };
    let (mut out, mut text, mut calls) = (Vec::new(), String::new(), Vec::new());
    for (j, Tagged(block)) in blocks.iter().enumerate() {
        let misplaced =
            |what: &str| ApiError::invalid_param(&format!("messages[{i}].content[{j}]"), format!("messages[{i}].content[{j}]: {what}"));
        match block {
            Block::Text { text: t } => text.push_str(t),
            Block::Image { .. } => return Err(misplaced("an image block, but this model has no vision support")),
            Block::ToolUse { id, name, input } if m.role == Role::Assistant => {
                calls.push(CallMade { id: id.clone(), name: name.clone(), arguments: Value::Object(input.clone()) })
            }
            Block::ToolUse { .. } => return Err(misplaced("a tool_use block belongs to an assistant turn")),
            Block::ToolResult { tool_use_id, content, is_error } if m.role == Role::User => {
                let mut result = content.as_ref().map(Text::joined).unwrap_or_default();
                if *is_error == Some(true) {
                    result = format!("Error: {result}");
                }
                out.push(ChatMessage::tool_result(tool_use_id.clone(), result));
            }
            Block::ToolResult { .. } => return Err(misplaced("a tool_result block belongs to a user turn")),
        }
    }
    if !calls.is_empty() {
        out.push(ChatMessage::assistant(text, calls));
    } else if !text.is_empty() || out.is_empty() {
        out.push(ChatMessage::text(chat_role(m.role), text));
    }
    Ok(out)
}

fn chat_role(role: Role) -> ChatRole {
    match role {
        Role::User => ChatRole::User,
        Role::Assistant => ChatRole::Assistant,
    }
}

pub async fn create(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: MessagesRequest = typed(body)?;
    if request.max_tokens.is_none() {
        return Err(ApiError::missing("max_tokens"));
    }
    let chat = request.to_chat()?;
    if request.stream == Some(true) {
        let turn = Turn::start(state, chat).await?;
        let (response, sse) = sse_response();
        let state = state.clone();
        tokio::spawn(async move { stream(turn, &request, &state, &sse).await });
        return Ok(response);
    }
    let reply = chat_turn::complete(state, chat).await?;
    let mut content = Vec::new();
    if let Some(thinking) = &reply.reasoning {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
    }
    if !reply.content.is_empty() {
        content.push(json!({"type": "text", "text": reply.content}));
    }
    for call in &reply.calls {
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call_input(call)}));
    }
    let (stop_reason, stop_sequence) = stop_reason(&request, &reply.end);
    Ok(ok_json(&json!({
        "id": format!("msg_{}", random_id()),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": reply.end.usage.prompt_tokens, "output_tokens": reply.end.usage.completion_tokens},
    })))
}

/// A call's arguments as the object Anthropic's `input` is (they parsed as JSON already).
fn call_input(call: &Call) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}))
}

/// Anthropic's stop reason of a turn, with the stop sequence that ended it.
fn stop_reason(request: &MessagesRequest, end: &TurnEnd) -> (&'static str, Option<String>) {
    let stop_sequence = match end.finish {
        FinishReason::Stop => stop_string_met(&end.generated, request.stop_sequences.iter().flatten()).cloned(),
        _ => None,
    };
    let reason = match (end.finish, &stop_sequence) {
        (FinishReason::ToolCalls, _) => "tool_use",
        (FinishReason::Length, _) => "max_tokens",
        (FinishReason::Stop, Some(_)) => "stop_sequence",
        (FinishReason::Stop, None) => "end_turn",
    };
    (reason, stop_sequence)
}

/// The content block being streamed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
}

/// The event stream of a turn: `message_start`, then each content block (thinking, text, each
/// tool use) as `content_block_start`, its deltas and `content_block_stop`, then `message_delta`
/// with the stop reason and usage, and `message_stop`. A failure after the start is an `error`
/// event.
async fn stream(mut turn: Turn, request: &MessagesRequest, state: &AppState, sse: &SseSender) {
    let start = json!({"type": "message_start", "message": {
        "id": format!("msg_{}", random_id()),
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": 0},
    }});
    if !sse.send_event("message_start", &start).await || !sse.send_event("ping", &json!({"type": "ping"})).await {
        return;
    }
    // the index of the next block, and the block now open
    let mut index = 0;
    let mut open: Option<Open> = None;
    while let Some(events) = turn.next(state, sse).await {
        let events = match events {
            Ok(events) => events,
            Err(e) => {
                sse.send_event("error", &e.anthropic_body()).await;
                return;
            }
        };
        for event in events {
            let mut out: Vec<(&str, Value)> = Vec::new();
            let mut begin = |kind: Open, block: Value, out: &mut Vec<(&str, Value)>| {
                if open != Some(kind) {
                    if open.take().is_some() {
                        out.push(("content_block_stop", json!({"type": "content_block_stop", "index": index})));
                        index += 1;
                    }
                    out.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": block})));
                    open = Some(kind);
                }
            };
            match event {
                TurnEvent::Reasoning(r) => {
                    begin(Open::Thinking, json!({"type": "thinking", "thinking": "", "signature": ""}), &mut out);
                    out.push((
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": r}}),
                    ));
                }
                TurnEvent::ReasoningDone => {}
                TurnEvent::Text(t) => {
                    begin(Open::Text, json!({"type": "text", "text": ""}), &mut out);
                    out.push((
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
                    ));
                }
                TurnEvent::Call(call) => {
                    if open.take().is_some() {
                        out.push(("content_block_stop", json!({"type": "content_block_stop", "index": index})));
                        index += 1;
                    }
                    let block = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
                    out.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": block})));
                    let delta = json!({"type": "input_json_delta", "partial_json": call.arguments});
                    out.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta})));
                    out.push(("content_block_stop", json!({"type": "content_block_stop", "index": index})));
                    index += 1;
                }
                TurnEvent::Done(end) => {
                    if open.take().is_some() {
                        out.push(("content_block_stop", json!({"type": "content_block_stop", "index": index})));
                    }
                    let (reason, sequence) = stop_reason(request, &end);
                    let usage = json!({"input_tokens": end.usage.prompt_tokens, "output_tokens": end.usage.completion_tokens});
                    out.push((
                        "message_delta",
                        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage}),
                    ));
                    out.push(("message_stop", json!({"type": "message_stop"})));
                }
            }
            for (name, value) in out {
                if !sse.send_event(name, &value).await {
                    return;
                }
            }
        }
    }
}

pub async fn count_tokens(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: MessagesRequest = typed(body)?;
    let (state, chat) = (state.clone(), request.to_chat()?);
    let tokens = blocking(move || chat_turn::prompt_tokens(&state, chat)).await?;
    Ok(ok_json(&json!({"input_tokens": tokens})))
}
