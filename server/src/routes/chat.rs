//! `POST /v1/chat/completions`: the messages rendered by the model's own chat template, one
//! generation per choice (`n`), tools (the model family's call syntax or bare JSON, parsed into
//! `tool_calls`), `response_format` or llama-server's GBNF `grammar` decoded under it, logprobs, a thinking block returned apart as
//! `reasoning_content` (unless `reasoning_format: "none"`); a JSON response or an SSE stream
//! (role in the first chunk only, reasoning and content deltas, a final chunk with
//! `finish_reason`, the usage chunk when asked, `[DONE]`), with llama-server's `timings` (of the
//! one output, or per chunk with `timings_per_token`) and `prompt_progress` chunks
//! (`return_progress`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use engine::generate::{FinishReason, Usage};
use engine::logprobs::TokenLogprob;
use engine::model::Model;
use engine::tokenizer::Tokenizer;
use hyper::Response;
use serde_json::{json, Map, Value};

use super::chat_request::{outputs, Call, ChatRequest, Outputs, ToolChoice};
use super::chat_turn::prompt_tokens;
use super::generation::{add_usage, blocking, completion_object, next_event, random_id, submit, unix_now, usage_json};
use super::reasoning::Split;
use super::reply::{self, ReadReply, ReplyReader, ReplySyntax};
use super::timings::{mark_progress, of_completion, StreamCounts};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body, SseSender};
use crate::requests::chat::ChatCompletionRequest;
use crate::routes::guardrails::{self, Judgement, OutputWatch};
use crate::worker::{Generation, SeqEvent};
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = ChatCompletionRequest::from_body(&Value::Object(body))?;
    let id = typed.model_id()?;
    let entry = state.registry.generator(&id)?;
    let request = Arc::new(typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts, &state.chat_defaults)?);
    let rails = guardrails::parse(state, typed.guard.as_ref())?;
    if let Some(r) = &rails {
        // before anything is generated: a flagged input is refused with the verdicts
        r.check_input(state, &request.text_messages()).await?;
    }
    let watch = match &rails {
        Some(r) if r.output => Some((r.clone(), guardrails::user_turn(&request.text_messages())?, request.continued_text().to_string())),
        _ => None,
    };
    let created = unix_now();
    let completion_id = format!("chatcmpl-{}", random_id());
    let start = Instant::now();
    let streaming = request.common.stream;
    let (e, r) = (entry.clone(), request.clone());
    let Outputs { seqs, syntax } = blocking(move || outputs(&e, &r, streaming)).await?;
    if streaming {
        let prompt_tokens = seqs.first().map_or(0, |s| s.prompt.len());
        let generation = entry.worker.generate(seqs)?;
        let (response, sse) = sse_response();
        let ctx = StreamCtx { id: completion_id, created, model: id, sse, prompt_tokens, syntax };
        let (state, model) = (state.clone(), entry.model.clone());
        let watches = (0..request.common.n)
            .map(|_| watch.as_ref().map(|(r, turn, continued)| OutputWatch::new(r.clone(), turn.clone(), continued.clone())))
            .collect();
        tokio::spawn(async move { stream(generation, &request, &ctx, &model, start, &state, watches).await });
        return Ok(response);
    }
    let generation = submit(state, &entry, seqs).await?;
    let n = generation.len();
    let completions = generation.collect().await?;
    // llama-server's `timings` of the one output
    let times = match &completions[..] {
        [one] => Some(of_completion(one)),
        _ => None,
    };
    let tokenizer = entry.model.tokenizer();
    let mut usage = Usage::default();
    let mut reasoning_tokens = 0;
    let mut out = Vec::new();
    for (index, completion) in completions.into_iter().enumerate() {
        add_usage(&mut usage, index, n, &completion.usage);
        let read = reply::read(&request, &completion.text, syntax);
        reasoning_tokens += reply::reasoning_tokens(&read, tokenizer, &completion.tokens, syntax);
        let ReadReply { reasoning, content, calls: tool_calls } = read;
        let logprobs_json = request.logprobs.map(|_| logprobs_json(tokenizer, &completion.logprobs));
        let guard = match &watch {
            Some((r, turn, continued)) => {
                Some(OutputWatch::new(r.clone(), turn.clone(), continued.clone()).judge_text(state, completion.text.clone()).await?)
            }
            None => None,
        };
        let choice = Choice { reasoning, content, tool_calls, finish: completion.finish, logprobs_json, guard };
        out.push(choice.to_json(index));
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    let mut completion = completion_object(&completion_id, "chat.completion", created, &id, json!(out));
    completion["usage"] = chat_usage(&usage, reasoning_tokens);
    if let Some(t) = times {
        completion["timings"] = t;
    }
    Ok(ok_json(&completion))
}

/// llama-server's `POST /v1/chat/completions/input_tokens`: the prompt tokens the request's
/// messages, tools and images give its model, answered as OpenAI's Responses count is.
pub async fn input_tokens(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = ChatCompletionRequest::from_body(&Value::Object(body))?;
    let state = state.clone();
    let tokens = blocking(move || prompt_tokens(&state, typed)).await?;
    Ok(ok_json(&json!({"object": "response.input_tokens", "input_tokens": tokens})))
}

/// The usage object, with the tokens spent in thinking blocks.
fn chat_usage(usage: &Usage, reasoning_tokens: usize) -> Value {
    let mut u = usage_json(usage);
    u["completion_tokens_details"]["reasoning_tokens"] = json!(reasoning_tokens);
    u
}

/// One finished choice.
struct Choice {
    /// The thinking block's text, when the reply had one and it is returned apart.
    reasoning: Option<String>,
    content: String,
    tool_calls: Vec<Call>,
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
            message["tool_calls"] = self.tool_calls.iter().map(Call::to_openai).collect();
        }
        if let Some(r) = &self.reasoning {
            // llama-server's and DeepSeek's name, and vLLM's
            message["reasoning_content"] = json!(r);
            message["reasoning"] = json!(r);
        }
        let mut choice = json!({"index": index, "message": message, "finish_reason": finish, "logprobs": self.logprobs_json.clone()});
        if let Some(j) = &self.guard {
            choice["guard"] = j.report.clone();
        }
        choice
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
    /// The syntax the prompt asks the reply in.
    syntax: ReplySyntax,
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

/// A streamed choice's state: its reply's reader, log-probabilities
/// not yet sent, and its output guard (the text it holds back, whether it cut the reply, its last
/// judgement).
struct ChoiceStream {
    /// Its reasoning apart, and what of its content may go out while a tool call can follow.
    reader: ReplyReader,
    pending: Vec<TokenLogprob>,
    watch: Option<OutputWatch>,
    held: String,
    held_reasoning: String,
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
    let syntax = ctx.syntax;
    // with tools, text that could be a call is held back: a token may release no content
    let gated = request.tool_choice != ToolChoice::None;
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
            reader: ReplyReader::new(request, syntax),
            pending: Vec::new(),
            watch,
            held: String::new(),
            held_reasoning: String::new(),
            cut: false,
            report: None,
        })
        .collect();
    // llama-server's `timings_per_token`: each choice's timings so far, which its chunks carry
    // (behind a lock only so that the chunk builders below read what the loop writes)
    let with_times = request.common.timings_per_token;
    let mut counts = StreamCounts::new(vec![ctx.prompt_tokens; n]);
    let stamps: Mutex<Vec<Option<Value>>> = Mutex::new(vec![None; n]);
    let delta_chunk = |index: usize, delta: Value, pending: &mut Vec<TokenLogprob>| {
        let logprobs = if pending.is_empty() { Value::Null } else { logprobs_json(tokenizer, pending) };
        pending.clear();
        let mut c = ctx.chunk(json!([{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": null}]), None, include_usage);
        if let Some(t) = &stamps.lock().unwrap_or_else(|e| e.into_inner())[index] {
            c["timings"] = t.clone();
        }
        c
    };
    let content_delta =
        |index: usize, content: String, pending: &mut Vec<TokenLogprob>| delta_chunk(index, json!({"content": content}), pending);
    let reasoning_delta = |index: usize, r: String, pending: &mut Vec<TokenLogprob>| {
        delta_chunk(index, json!({"reasoning_content": r, "reasoning": r}), pending)
    };
    // a choice the guard flagged: its last chunk, with the verdicts
    let cut_chunk = |index: usize, report: Value| {
        let last = json!([{"index": index, "delta": {}, "logprobs": null, "finish_reason": "content_filter", "guard": report}]);
        ctx.chunk(last, None, include_usage)
    };
    let mut reasoning_tokens = 0;
    let mut usage = Usage::default();
    let mut first_token = true;
    let mut ended = 0;
    // the last choice's final timings, which the usage chunk of one choice carries
    let mut last_times = None;
    while let Some(event) = next_event(&mut generation, &ctx.sse).await {
        match event {
            SeqEvent::Progress { index, progress } => {
                counts.progress(index, &progress);
                if request.common.return_progress {
                    let role =
                        json!([{"index": index, "delta": {"role": "assistant", "content": null}, "logprobs": null, "finish_reason": null}]);
                    let mut c = ctx.chunk(role, None, include_usage);
                    mark_progress(&mut c, &progress, with_times);
                    if !ctx.sse.send_json(&c).await {
                        return;
                    }
                }
            }
            SeqEvent::Token { index, event, timings } => {
                counts.token(index, &event);
                if with_times {
                    stamps.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(counts.timings(index, timings));
                }
                if first_token {
                    first_token = false;
                    state.metrics.time_to_first_token_ms.observe(start.elapsed().as_secs_f64() * 1e3);
                }
                let c = &mut choices[index];
                if c.cut {
                    continue;
                }
                c.pending.extend(event.logprob.clone());
                let Split { mut reasoning, mut content } = c.reader.push(&event.text);
                let due = c.watch.as_mut().is_some_and(|w| w.push(&event.text));
                let hold = c.watch.as_ref().is_some_and(|w| !w.stream_first());
                if hold {
                    c.held.push_str(&content);
                    c.held_reasoning.push_str(&reasoning);
                    content.clear();
                    reasoning.clear();
                }
                if !reasoning.is_empty() && !ctx.sse.send_json(&reasoning_delta(index, reasoning, &mut c.pending)).await {
                    return;
                }
                if !(content.is_empty() && (gated || c.pending.is_empty() || hold))
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
                    } else if hold && !(c.held.is_empty() && c.held_reasoning.is_empty() && c.pending.is_empty()) {
                        let held_reasoning = std::mem::take(&mut c.held_reasoning);
                        if !held_reasoning.is_empty() && !ctx.sse.send_json(&reasoning_delta(index, held_reasoning, &mut c.pending)).await {
                            return;
                        }
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
                let times = of_completion(&completion);
                if with_times {
                    stamps.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(times.clone());
                }
                let mut finish = completion.finish.as_str();
                let (tail, calls) = c.reader.finish(request, &completion.text);
                let held_reasoning = std::mem::take(&mut c.held_reasoning) + &tail.reasoning;
                if !held_reasoning.is_empty() {
                    ctx.sse.send_json(&reasoning_delta(index, held_reasoning, &mut c.pending)).await;
                }
                reasoning_tokens += c.reader.reasoning_tokens;
                let rest = std::mem::take(&mut c.held) + &tail.content;
                if !rest.is_empty() || !c.pending.is_empty() {
                    ctx.sse.send_json(&content_delta(index, rest, &mut c.pending)).await;
                }
                for (i, call) in calls.iter().enumerate() {
                    // the first delta of a call names it; its arguments (parsed, so never a
                    // broken call) follow in a second one
                    let head = json!({"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}});
                    let args = json!({"index": i, "function": {"arguments": call.arguments}});
                    for part in [head, args] {
                        let delta = json!([{"index": index, "delta": {"tool_calls": [part]}, "logprobs": null, "finish_reason": null}]);
                        ctx.sse.send_json(&ctx.chunk(delta, None, include_usage)).await;
                    }
                }
                if !calls.is_empty() {
                    finish = "tool_calls";
                }
                let mut last = json!([{"index": index, "delta": {}, "logprobs": null, "finish_reason": finish}]);
                if let Some(report) = c.report.take() {
                    last[0]["guard"] = report;
                }
                // a choice's last chunk carries its timings, as llama-server's does
                let mut last = ctx.chunk(last, None, include_usage);
                last["timings"] = times.clone();
                last_times = Some(times);
                if !ctx.sse.send_json(&last).await {
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
        let mut u = ctx.chunk(json!([]), Some(chat_usage(&usage, reasoning_tokens)), true);
        if let Some(t) = last_times.filter(|_| n == 1) {
            u["timings"] = t;
        }
        ctx.sse.send_json(&u).await;
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
