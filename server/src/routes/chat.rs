//! `POST /v1/chat/completions`: the messages rendered by the model's own chat template, one
//! generation per choice (`n`), tools (the model family's call syntax or bare JSON, parsed into
//! `tool_calls`), `response_format` under a grammar, logprobs; a JSON response or an SSE stream
//! (role in the first chunk only, content deltas, a final chunk with `finish_reason`, the usage
//! chunk when asked, `[DONE]`).

use std::sync::Arc;
use std::time::Instant;

use engine::chat::{parse_tool_calls, tokenize_rendered, ChatInput};
use engine::generate::{common_prefix, FinishReason, GenerateParams, Generator, Usage};
use engine::grammar::{Constraint, ToolSpec};
use engine::logprobs::TokenLogprob;
use engine::tokenizer::Tokenizer;
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body, SseSender};
use crate::routes::tool_stream::ContentGate;
use crate::params::{boolean, common, integer, model_id, CommonParams};
use crate::worker::{Cancel, EngineState};
use crate::AppState;

/// Tokens a draft model proposes per speculative round.
const DRAFT_TOKENS: usize = 8;

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
    let request = parse(&body, entry.model.tokenizer().n_vocab())?;
    let created = unix_now();
    let completion_id = format!("chatcmpl-{}", random_id());
    let metrics = state.clone();
    let start = Instant::now();
    if request.common.stream {
        let (response, sse) = sse_response(state.metrics.requests_cancelled.clone());
        entry.worker.spawn(move |engine| {
            let ctx = StreamCtx { id: &completion_id, created, model: &id, sse: &sse };
            let outcome = stream(engine, &request, &ctx, start, &metrics);
            if let Err(e) = outcome {
                sse.send_json(&e.body());
            }
            sse.done();
        })?;
        return Ok(response);
    }
    let choices = entry.worker.run(move |engine, cancel| generate_all(engine, &request, cancel)).await??;
    let mut usage = Usage::default();
    let mut out = Vec::new();
    for (index, choice) in choices.into_iter().enumerate() {
        add_usage(&mut usage, &choice.usage);
        out.push(choice.to_json(index));
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    let mut completion = completion_object(&completion_id, "chat.completion", created, &id, json!(out));
    completion["usage"] = usage_json(&usage);
    Ok(ok_json(&completion))
}

/// The fields a chat or text completion object, and each of its stream chunks, starts with.
pub fn completion_object(id: &str, object: &str, created: u64, model: &str, choices: Value) -> Value {
    json!({"id": id, "object": object, "created": created, "model": model, "system_fingerprint": crate::FINGERPRINT, "choices": choices})
}

/// Adds one choice's usage to the request's: the choices share one prompt, so its counts are
/// taken once, and the completion tokens are summed.
fn add_usage(total: &mut Usage, choice: &Usage) {
    total.prompt_tokens = choice.prompt_tokens;
    total.cached_tokens = choice.cached_tokens;
    total.completion_tokens += choice.completion_tokens;
}

pub fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// 24 random-looking hex digits for response and tool-call ids.
pub fn random_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ N.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    format!("{:016x}{:08x}", x, (x >> 17) as u32)
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
        (Some(_), Some(_)) => return Err(ApiError::invalid_param("response_format", "response_format cannot be combined with a forced tool_choice")),
        (format, forced) => format.or(forced),
    };
    Ok(ChatRequest { messages, tools, tool_choice, response_format, common: common(body, n_vocab)?, logprobs })
}

/// The messages, each with a role and its content as text (text parts joined); image parts are
/// refused, as no loaded model has a vision projector.
fn messages(body: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
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
        // the templates know `developer` as nothing: it is the system role of newer APIs
        if role == "developer" {
            m.insert("role".into(), "system".into());
        }
        m.insert("content".into(), content);
        out.push(Value::Object(m));
    }
    Ok(out)
}

fn text_of_parts(parts: &[Value], i: usize) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, p) in parts.iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(p.get("text").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid_param("messages", format!("messages[{i}].content[{j}].text must be a string"))
            })?),
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

fn tools(body: &Map<String, Value>) -> Result<Option<Vec<Value>>, ApiError> {
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
            None => return Err(bad("tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}".into())),
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
    usage: Usage,
    /// The token texts of `logprobs`, rendered while the tokenizer was at hand.
    logprobs_json: Option<Value>,
}

impl Choice {
    fn to_json(&self, index: usize) -> Value {
        let finish = if self.tool_calls.is_empty() { self.finish.as_str() } else { "tool_calls" };
        let mut message = json!({
            "role": "assistant",
            "content": if self.tool_calls.is_empty() || !self.content.is_empty() { Value::String(self.content.clone()) } else { Value::Null },
            "refusal": null,
        });
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(self.tool_calls.clone());
        }
        json!({"index": index, "message": message, "finish_reason": finish, "logprobs": self.logprobs_json.clone()})
    }
}

/// The prompt of a request, rendered and tokenized.
fn prompt(engine: &EngineState, request: &ChatRequest) -> Result<Vec<u32>, ApiError> {
    let input = ChatInput { tools: request.tools.clone(), add_generation_prompt: true, ..ChatInput::new(request.messages.clone()) };
    let text = engine.template.render(&input).map_err(|e| ApiError::invalid_param("messages", format!("the chat template failed: {e}")))?;
    Ok(tokenize_rendered(engine.model.tokenizer(), &text))
}

fn generate_params(engine: &mut EngineState, request: &ChatRequest, prompt_len: usize, choice: usize) -> Result<GenerateParams, ApiError> {
    params_for(engine, &request.common, request.logprobs, request.response_format.as_ref(), prompt_len, choice)
}

/// The generation parameters of choice `choice` of a request whose prompt has `prompt_len`
/// tokens: the output fits the context, each choice has its own seed.
pub(crate) fn params_for(
    engine: &mut EngineState,
    common: &CommonParams,
    logprobs: Option<usize>,
    format: Option<&Constraint>,
    prompt_len: usize,
    choice: usize,
) -> Result<GenerateParams, ApiError> {
    let n_ctx = engine.kv.n_ctx();
    if prompt_len >= n_ctx {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid_param("messages", format!("the prompt has {prompt_len} tokens but the context holds {n_ctx}"))
        });
    }
    let room = n_ctx - prompt_len;
    let constraint = match format {
        Some(c) => {
            let param = if matches!(c, Constraint::ToolCall(_)) { "tools" } else { "response_format" };
            Some(Box::new(engine.grammar()?.compile(c).map_err(|e| ApiError::invalid_param(param, e.to_string()))?) as _)
        }
        None => None,
    };
    let mut sampling = common.sampling.clone();
    // every choice of one request draws its own sample
    sampling.seed = sampling.seed.wrapping_add(choice as u64);
    Ok(GenerateParams {
        sampling,
        max_tokens: common.max_tokens.unwrap_or(room).min(room),
        stop: common.stop.clone(),
        logprobs,
        constraint,
        ..GenerateParams::default()
    })
}

/// Runs a generation for sequence 0, reusing what the cache holds of the prompt.
pub(crate) fn run_generation(
    engine: &mut EngineState,
    prompt: &[u32],
    params: GenerateParams,
    mut on_event: impl FnMut(&engine::generate::TokenEvent) -> bool,
) -> Result<engine::generate::Completion, ApiError> {
    let keep = common_prefix(&engine.cached, prompt);
    engine.kv.truncate(0, keep);
    engine.cached.truncate(keep);
    if let Some((_, draft_kv)) = engine.draft.as_mut() {
        // the draft's cache always holds a prefix of what the target's holds
        let draft_keep = keep.min(draft_kv.seq_len(0));
        draft_kv.truncate(0, draft_keep);
    }
    let model = engine.model.clone();
    let constrained = params.constraint.is_some();
    let mut generator = Generator::new(&model, &mut engine.kv, 0, prompt, params)?;
    if let (Some((draft, draft_kv)), false) = (engine.draft.as_mut(), constrained) {
        generator = generator.with_draft(draft, draft_kv, DRAFT_TOKENS)?;
    }
    let mut stopped = false;
    for event in generator.by_ref() {
        let event = event?;
        if !on_event(&event) {
            stopped = true;
            break;
        }
    }
    let completion = generator.complete()?;
    let mut all = prompt.to_vec();
    all.extend_from_slice(&completion.tokens);
    all.truncate(engine.kv.seq_len(0));
    engine.cached = all;
    if stopped {
        return Err(ApiError::server("the client disconnected"));
    }
    Ok(completion)
}

fn generate_all(engine: &mut EngineState, request: &ChatRequest, cancel: &Cancel) -> Result<Vec<Choice>, ApiError> {
    let prompt = prompt(engine, request)?;
    let mut choices = Vec::with_capacity(request.common.n);
    for i in 0..request.common.n {
        let params = generate_params(engine, request, prompt.len(), i)?;
        let completion = run_generation(engine, &prompt, params, |_| !cancel.is_set())?;
        let tokenizer = engine.model.tokenizer();
        let (content, tool_calls) = split_tool_calls(&completion.text, &request.tool_choice);
        let logprobs_json = request.logprobs.map(|_| logprobs_json(tokenizer, &completion.logprobs));
        choices.push(Choice {
            content,
            tool_calls,
            finish: completion.finish,
            usage: completion.usage,
            logprobs_json,
        });
    }
    Ok(choices)
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

struct StreamCtx<'a> {
    id: &'a str,
    created: u64,
    model: &'a str,
    sse: &'a SseSender,
}

impl StreamCtx<'_> {
    fn chunk(&self, choices: Value, usage: Option<Value>, include_usage: bool) -> Value {
        let mut c = completion_object(self.id, "chat.completion.chunk", self.created, self.model, choices);
        if include_usage {
            c["usage"] = usage.unwrap_or(Value::Null);
        }
        c
    }
}

/// The SSE stream of a request: each choice in turn, its text as it is decoded. When tool calls
/// may follow, the text that could be a call is held back (see [`ContentGate`]) and a call is
/// sent as `tool_calls` deltas once it parses, never as text; logprobs travel with the content
/// delta that releases their tokens.
fn stream(engine: &mut EngineState, request: &ChatRequest, ctx: &StreamCtx, start: Instant, state: &AppState) -> Result<(), ApiError> {
    let include_usage = request.common.include_usage;
    let prompt = prompt(engine, request)?;
    let mut usage = Usage::default();
    for index in 0..request.common.n {
        let params = generate_params(engine, request, prompt.len(), index)?;
        let first = json!([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]);
        if !ctx.sse.send_json(&ctx.chunk(first, None, include_usage)) {
            return Ok(());
        }
        let model = engine.model.clone();
        let tokenizer = model.tokenizer();
        let mut gate = (request.tool_choice != ToolChoice::None).then(ContentGate::default);
        let mut pending: Vec<TokenLogprob> = Vec::new();
        let content_delta = |content: String, pending: &mut Vec<TokenLogprob>| {
            let logprobs = if pending.is_empty() { Value::Null } else { logprobs_json(tokenizer, pending) };
            pending.clear();
            ctx.chunk(json!([{"index": index, "delta": {"content": content}, "logprobs": logprobs, "finish_reason": null}]), None, include_usage)
        };
        let mut first_token = true;
        let completion = run_generation(engine, &prompt, params, |event| {
            if first_token {
                first_token = false;
                state.metrics.time_to_first_token_ms.observe(start.elapsed().as_secs_f64() * 1e3);
            }
            pending.extend(event.logprob.clone());
            let content = match gate.as_mut() {
                Some(gate) => gate.push(&event.text),
                None => event.text.clone(),
            };
            if content.is_empty() && (gate.is_some() || pending.is_empty()) {
                return true;
            }
            ctx.sse.send_json(&content_delta(content, &mut pending))
        })?;
        let mut finish = completion.finish.as_str();
        if let Some(gate) = &gate {
            let (content, calls) = split_tool_calls(&completion.text, &request.tool_choice);
            let rest = gate.finish(&content, !calls.is_empty());
            if !rest.is_empty() || !pending.is_empty() {
                ctx.sse.send_json(&content_delta(rest, &mut pending));
            }
            for (i, call) in calls.iter().enumerate() {
                // the first delta of a call names it; its arguments (parsed, so never a broken
                // call) follow in a second one
                let head = json!({"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"], "arguments": ""}});
                let args = json!({"index": i, "function": {"arguments": call["function"]["arguments"]}});
                for part in [head, args] {
                    let delta = json!([{"index": index, "delta": {"tool_calls": [part]}, "logprobs": null, "finish_reason": null}]);
                    ctx.sse.send_json(&ctx.chunk(delta, None, include_usage));
                }
            }
            if !calls.is_empty() {
                finish = "tool_calls";
            }
        }
        let last = json!([{"index": index, "delta": {}, "logprobs": null, "finish_reason": finish}]);
        ctx.sse.send_json(&ctx.chunk(last, None, include_usage));
        add_usage(&mut usage, &completion.usage);
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    if include_usage {
        ctx.sse.send_json(&ctx.chunk(json!([]), Some(usage_json(&usage)), true));
    }
    Ok(())
}
