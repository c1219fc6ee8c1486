//! `POST /v1/chat/completions`: the messages rendered by the model's own chat template, one
//! generation per choice (`n`), tools (the model family's call syntax or bare JSON, parsed into
//! `tool_calls`), `response_format` under a grammar, logprobs; a JSON response or an SSE stream
//! (role in the first chunk only, content deltas, a final chunk with `finish_reason`, the usage
//! chunk when asked, `[DONE]`).

use std::sync::Arc;
use std::time::Instant;

use engine::chat::{parse_tool_calls, tokenize_rendered, ChatInput};
use engine::generate::{FinishReason, Usage};
use engine::grammar::{Constraint, ToolSpec};
use engine::logprobs::TokenLogprob;
use engine::model::Model;
use engine::tokenizer::Tokenizer;
use hyper::Response;
use serde_json::{json, Map, Value};

use super::generation::{add_usage, blocking, completion_object, next_event, output, params_for, random_id, submit, unix_now, usage_json};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body, SseSender};
use crate::params::{boolean, common, integer, model_id, CommonParams};
use crate::registry::ModelEntry;
use crate::routes::guardrails::{self, Judgement, OutputWatch};
use crate::routes::tool_stream::ContentGate;
use crate::worker::{Generation, SeqEvent, SeqSpec};
use crate::AppState;

/// Everything a chat request asks for, checked.
struct ChatRequest {
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    /// `none`: never parse calls; `auto` / `required` / a named function: parse them.
    tool_choice: ToolChoice,
    response_format: Option<Constraint>,
    common: CommonParams,
    logprobs: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let id = model_id(&body)?;
    let entry = state.registry.generator(&id)?;
    let request = Arc::new(parse(&body, entry.model.tokenizer().n_vocab())?);
    let rails = guardrails::parse(state, &body)?;
    if let Some(r) = &rails {
        // before anything is generated: a flagged input is refused with the verdicts
        r.check_input(state, &request.messages).await?;
    }
    let watch = match &rails {
        Some(r) if r.output => Some((r.clone(), guardrails::user_turn(&request.messages)?)),
        _ => None,
    };
    let created = unix_now();
    let completion_id = format!("chatcmpl-{}", random_id());
    let start = Instant::now();
    let streaming = request.common.stream;
    let (e, r) = (entry.clone(), request.clone());
    let seqs = blocking(move || outputs(&e, &r, streaming)).await?;
    if streaming {
        let prompt_tokens = seqs.first().map_or(0, |s| s.prompt.len());
        let generation = entry.worker.generate(seqs)?;
        let (response, sse) = sse_response();
        let ctx = StreamCtx { id: completion_id, created, model: id, sse, prompt_tokens };
        let (state, model) = (state.clone(), entry.model.clone());
        let watches = (0..request.common.n).map(|_| watch.as_ref().map(|(r, turn)| OutputWatch::new(r.clone(), turn.clone()))).collect();
        tokio::spawn(async move { stream(generation, &request, &ctx, &model, start, &state, watches).await });
        return Ok(response);
    }
    let generation = submit(state, &entry, seqs).await?;
    let n = generation.len();
    let completions = generation.collect().await?;
    let tokenizer = entry.model.tokenizer();
    let mut usage = Usage::default();
    let mut out = Vec::new();
    for (index, completion) in completions.into_iter().enumerate() {
        add_usage(&mut usage, index, n, &completion.usage);
        let (content, tool_calls) = split_tool_calls(&completion.text, &request.tool_choice);
        let logprobs_json = request.logprobs.map(|_| logprobs_json(tokenizer, &completion.logprobs));
        let guard = match &watch {
            Some((r, turn)) => Some(OutputWatch::new(r.clone(), turn.clone()).judge_text(state, completion.text.clone()).await?),
            None => None,
        };
        let choice = Choice { content, tool_calls, finish: completion.finish, logprobs_json, guard };
        out.push(choice.to_json(index));
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    let mut completion = completion_object(&completion_id, "chat.completion", created, &id, json!(out));
    completion["usage"] = usage_json(&usage);
    Ok(ok_json(&completion))
}

/// One choice of a chat request answered whole, without guardrails: for the routes that convert
/// into a chat request (`/v1/messages`).
pub(crate) struct Reply {
    /// The text outside tool calls, and the calls as OpenAI objects.
    pub content: String,
    pub tool_calls: Vec<Value>,
    pub finish: FinishReason,
    /// Everything generated (a stop string included), to tell which stop string ended it.
    pub generated: String,
}

/// Runs the chat request `body` (checked as `/v1/chat/completions` checks it, not streamed) on
/// its model: the choices, the usage, and the model's id.
pub(crate) async fn complete(state: &Arc<AppState>, body: &Map<String, Value>) -> Result<(Vec<Reply>, Usage, String), ApiError> {
    let id = model_id(body)?;
    let entry = state.registry.generator(&id)?;
    let request = Arc::new(parse(body, entry.model.tokenizer().n_vocab())?);
    let (e, r) = (entry.clone(), request.clone());
    let seqs = blocking(move || outputs(&e, &r, false)).await?;
    let start = Instant::now();
    let generation = submit(state, &entry, seqs).await?;
    let n = generation.len();
    let mut usage = Usage::default();
    let mut replies = Vec::with_capacity(n);
    for (index, c) in generation.collect().await?.into_iter().enumerate() {
        add_usage(&mut usage, index, n, &c.usage);
        let (content, tool_calls) = split_tool_calls(&c.text, &request.tool_choice);
        let finish = if tool_calls.is_empty() { c.finish } else { FinishReason::ToolCalls };
        replies.push(Reply { content, tool_calls, finish, generated: entry.model.tokenizer().decode(&c.tokens) });
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    Ok((replies, usage, id))
}

/// The prompt tokens of the chat request `body` on its model (its messages and tools rendered
/// by the model's template, with the generation prompt).
pub(crate) fn prompt_tokens(state: &AppState, body: &Map<String, Value>) -> Result<usize, ApiError> {
    let entry = state.registry.generator(&model_id(body)?)?;
    let input = ChatInput { tools: tools(body)?, add_generation_prompt: true, ..ChatInput::new(messages(body)?) };
    let text = render(&entry, &input)?;
    Ok(tokenize_rendered(entry.model.tokenizer(), &text).len())
}

fn parse(body: &Map<String, Value>, n_vocab: usize) -> Result<ChatRequest, ApiError> {
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
    Ok(ChatRequest { messages, tools, tool_choice, response_format, common: common(body, n_vocab)?, logprobs })
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
        if let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) {
            check_tool_calls(calls, i)?;
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

/// One finished choice.
struct Choice {
    content: String,
    tool_calls: Vec<Value>,
    finish: FinishReason,
    /// The token texts of `logprobs`, rendered while the tokenizer was at hand.
    logprobs_json: Option<Value>,
    /// The output guard's judgement of the reply, when the request has one.
    guard: Option<Judgement>,
}

impl Choice {
    fn to_json(&self, index: usize) -> Value {
        if let Some(j) = self.guard.as_ref().filter(|j| j.flagged) {
            // the reply is withheld: only the verdicts say what it was
            let message = json!({"role": "assistant", "content": null, "refusal": null});
            return json!({"index": index, "message": message, "finish_reason": "content_filter", "logprobs": null, "guard": j.report});
        }
        let finish = if self.tool_calls.is_empty() { self.finish.as_str() } else { "tool_calls" };
        let mut message = json!({
            "role": "assistant",
            "content": if self.tool_calls.is_empty() || !self.content.is_empty() { Value::String(self.content.clone()) } else { Value::Null },
            "refusal": null,
        });
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(self.tool_calls.clone());
        }
        let mut choice = json!({"index": index, "message": message, "finish_reason": finish, "logprobs": self.logprobs_json.clone()});
        if let Some(j) = &self.guard {
            choice["guard"] = j.report.clone();
        }
        choice
    }
}

/// `input` rendered by the model's chat template (its failure is a 400 on `messages`).
pub(crate) fn render(entry: &ModelEntry, input: &ChatInput) -> Result<String, ApiError> {
    entry.worker.template().render(input).map_err(|e| ApiError::invalid_param("messages", format!("the chat template failed: {e}")))
}

/// The outputs of a request: its prompt (the messages rendered by the model's template and
/// tokenized) and one output per choice, each with its own parameters (and grammar).
fn outputs(entry: &ModelEntry, request: &ChatRequest, stream: bool) -> Result<Vec<SeqSpec>, ApiError> {
    let input = ChatInput { tools: request.tools.clone(), add_generation_prompt: true, ..ChatInput::new(request.messages.clone()) };
    let text = render(entry, &input)?;
    let prompt = tokenize_rendered(entry.model.tokenizer(), &text);
    (0..request.common.n)
        .map(|i| {
            let params = params_for(&entry.worker, &request.common, request.logprobs, request.response_format.as_ref(), prompt.len(), i)?;
            Ok(output(prompt.clone(), params, stream))
        })
        .collect()
}

/// The reply's text and its tool calls as OpenAI objects (none when tools are off).
fn split_tool_calls(text: &str, choice: &ToolChoice) -> (String, Vec<Value>) {
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

/// The chat logprobs object: `{content: [{token, logprob, bytes, top_logprobs}], refusal: null}`.
pub fn logprobs_json(tokenizer: &Tokenizer, logprobs: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f32| {
        let bytes = tokenizer.token_bytes(id).to_vec();
        json!({"token": String::from_utf8_lossy(&bytes), "logprob": lp, "bytes": bytes})
    };
    let content: Vec<Value> = logprobs
        .iter()
        .map(|l| {
            let mut e = entry(l.token, l.logprob);
            e["top_logprobs"] = Value::Array(l.top.iter().map(|&(id, lp)| entry(id, lp)).collect());
            e
        })
        .collect();
    json!({"content": content, "refusal": null})
}

struct StreamCtx {
    id: String,
    created: u64,
    model: String,
    sse: SseSender,
    /// The prompt's length (the usage of a reply a guardrail cut).
    prompt_tokens: usize,
}

impl StreamCtx {
    fn chunk(&self, choices: Value, usage: Option<Value>, include_usage: bool) -> Value {
        let mut c = completion_object(&self.id, "chat.completion.chunk", self.created, &self.model, choices);
        if include_usage {
            c["usage"] = usage.unwrap_or(Value::Null);
        }
        c
    }
}

/// A streamed choice's state: text that may still turn out to be a tool call, log-probabilities
/// not yet sent, and its output guard (the text it holds back, whether it cut the reply, its last
/// judgement).
struct ChoiceStream {
    gate: Option<ContentGate>,
    pending: Vec<TokenLogprob>,
    watch: Option<OutputWatch>,
    held: String,
    cut: bool,
    report: Option<Value>,
}

/// The SSE stream of a request: the choices decode together, their chunks interleaved as their
/// tokens come. When tool calls may follow, the text that could be a call is held back (see
/// [`ContentGate`]) and a call is sent as `tool_calls` deltas once it parses, never as text;
/// logprobs travel with the content delta that releases their tokens. An output guardrail
/// (`guardrails`) judges each window of tokens as it completes (the chat model decoding on
/// meanwhile) and the reply's tail at its end; a flagged choice ends at once with
/// `finish_reason: "content_filter"` and the verdicts (`guard`), and once every choice has
/// ended the generation is stopped.
async fn stream(
    mut generation: Generation,
    request: &ChatRequest,
    ctx: &StreamCtx,
    model: &Model,
    start: Instant,
    state: &AppState,
    watches: Vec<Option<OutputWatch>>,
) {
    let include_usage = request.common.include_usage;
    let tokenizer = model.tokenizer();
    let n = generation.len();
    for index in 0..n {
        let first = json!([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]);
        if !ctx.sse.send_json(&ctx.chunk(first, None, include_usage)).await {
            return;
        }
    }
    let mut choices: Vec<ChoiceStream> = watches
        .into_iter()
        .map(|watch| ChoiceStream {
            gate: (request.tool_choice != ToolChoice::None).then(ContentGate::default),
            pending: Vec::new(),
            watch,
            held: String::new(),
            cut: false,
            report: None,
        })
        .collect();
    let content_delta = |index: usize, content: String, pending: &mut Vec<TokenLogprob>| {
        let logprobs = if pending.is_empty() { Value::Null } else { logprobs_json(tokenizer, pending) };
        pending.clear();
        ctx.chunk(
            json!([{"index": index, "delta": {"content": content}, "logprobs": logprobs, "finish_reason": null}]),
            None,
            include_usage,
        )
    };
    // a choice the guard flagged: its last chunk, with the verdicts
    let cut_chunk = |index: usize, report: Value| {
        let last = json!([{"index": index, "delta": {}, "logprobs": null, "finish_reason": "content_filter", "guard": report}]);
        ctx.chunk(last, None, include_usage)
    };
    let mut usage = Usage::default();
    let mut first_token = true;
    let mut ended = 0;
    while let Some(event) = next_event(&mut generation, &ctx.sse).await {
        match event {
            SeqEvent::Token { index, event } => {
                if first_token {
                    first_token = false;
                    state.metrics.time_to_first_token_ms.observe(start.elapsed().as_secs_f64() * 1e3);
                }
                let c = &mut choices[index];
                if c.cut {
                    continue;
                }
                c.pending.extend(event.logprob.clone());
                let mut content = match c.gate.as_mut() {
                    Some(gate) => gate.push(&event.text),
                    None => event.text.clone(),
                };
                let due = c.watch.as_mut().is_some_and(|w| w.push(&event.text));
                let hold = c.watch.as_ref().is_some_and(|w| !w.stream_first());
                if hold {
                    c.held.push_str(&content);
                    content.clear();
                }
                if !(content.is_empty() && (c.gate.is_some() || c.pending.is_empty() || hold))
                    && !ctx.sse.send_json(&content_delta(index, content, &mut c.pending)).await
                {
                    return;
                }
                if due {
                    let Some(judgement) = judge_window(c, state, ctx).await else { return };
                    if judgement.flagged {
                        c.cut = true;
                        usage.completion_tokens += c.watch.as_ref().map_or(0, OutputWatch::generated);
                        if index.is_multiple_of(n) {
                            usage.prompt_tokens += ctx.prompt_tokens;
                        }
                        ended += 1;
                        if !ctx.sse.send_json(&cut_chunk(index, judgement.report)).await {
                            return;
                        }
                        if ended == n {
                            break;
                        }
                    } else if hold && !(c.held.is_empty() && c.pending.is_empty()) {
                        let held = std::mem::take(&mut c.held);
                        if !ctx.sse.send_json(&content_delta(index, held, &mut c.pending)).await {
                            return;
                        }
                    }
                }
            }
            SeqEvent::Done { result: Err(e), .. } => {
                ctx.sse.send_json(&e.body()).await;
                ctx.sse.done().await;
                return;
            }
            SeqEvent::Done { index, result: Ok(completion) } => {
                let c = &mut choices[index];
                if c.cut {
                    continue;
                }
                ended += 1;
                if c.watch.as_ref().is_some_and(|w| w.unjudged() > 0 || c.report.is_none()) {
                    // the reply's tail (or a reply shorter than one window)
                    let Some(judgement) = judge_window(c, state, ctx).await else { return };
                    if judgement.flagged {
                        c.cut = true;
                        add_usage(&mut usage, index, n, &completion.usage);
                        if !ctx.sse.send_json(&cut_chunk(index, judgement.report)).await {
                            return;
                        }
                        if ended == n {
                            break;
                        }
                        continue;
                    }
                }
                let mut finish = completion.finish.as_str();
                let held = std::mem::take(&mut c.held);
                if let Some(gate) = &c.gate {
                    let (content, calls) = split_tool_calls(&completion.text, &request.tool_choice);
                    let rest = held + &gate.finish(&content, !calls.is_empty());
                    if !rest.is_empty() || !c.pending.is_empty() {
                        ctx.sse.send_json(&content_delta(index, rest, &mut c.pending)).await;
                    }
                    for (i, call) in calls.iter().enumerate() {
                        // the first delta of a call names it; its arguments (parsed, so never a
                        // broken call) follow in a second one
                        let head = json!({"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"], "arguments": ""}});
                        let args = json!({"index": i, "function": {"arguments": call["function"]["arguments"]}});
                        for part in [head, args] {
                            let delta = json!([{"index": index, "delta": {"tool_calls": [part]}, "logprobs": null, "finish_reason": null}]);
                            ctx.sse.send_json(&ctx.chunk(delta, None, include_usage)).await;
                        }
                    }
                    if !calls.is_empty() {
                        finish = "tool_calls";
                    }
                } else if !held.is_empty() || !c.pending.is_empty() {
                    ctx.sse.send_json(&content_delta(index, held, &mut c.pending)).await;
                }
                let mut last = json!([{"index": index, "delta": {}, "logprobs": null, "finish_reason": finish}]);
                if let Some(report) = c.report.take() {
                    last[0]["guard"] = report;
                }
                if !ctx.sse.send_json(&ctx.chunk(last, None, include_usage)).await {
                    return;
                }
                add_usage(&mut usage, index, n, &completion.usage);
                if ended == n {
                    // a choice a guardrail cut may still be decoding: not waited for
                    break;
                }
            }
        }
    }
    if ctx.sse.is_closed() {
        return;
    }
    // every choice has ended; the ones a guardrail cut are still decoding: stop them
    generation.stop();
    state.metrics.record_generation(usage.completion_tokens, start);
    if include_usage {
        ctx.sse.send_json(&ctx.chunk(json!([]), Some(usage_json(&usage)), true)).await;
    }
    ctx.sse.done().await;
}

/// Runs the choice's output check; a guard failure ends the stream with its error (the reply is
/// not let through unjudged) and gives `None`.
async fn judge_window(c: &mut ChoiceStream, state: &AppState, ctx: &StreamCtx) -> Option<Judgement> {
    let watch = c.watch.as_mut()?;
    match watch.judge_window(state).await {
        Ok(j) => {
            c.report = Some(j.report.clone());
            Some(j)
        }
        Err(e) => {
            ctx.sse.send_json(&e.body()).await;
            ctx.sse.done().await;
            None
        }
    }
}
