//! What chat and text completions share: the generation parameters of each output, submission
//! to the model's continuous batch (through the batch scheduler when one is attached), reading a
//! stream's events while watching its client, the completion object and its usage, ids and
//! timestamps.

use std::sync::Arc;
use std::time::Duration;

use engine::generate::{GenerateParams, Usage};
use engine::grammar::Constraint;
use engine::model::LoraScale;
use engine::tokenizer::TokenId;
use serde_json::{json, Value};

use crate::batch_scheduler::{BatchError, BatchRequest, Phase};
use crate::error::ApiError;
use crate::http::SseSender;
use crate::registry::ModelEntry;
use crate::requests::llama::LlamaLimits;
use crate::requests::sampling::CommonParams;
use crate::worker::{Generation, SeqEvent, SeqSpec, Worker};
use crate::AppState;

/// The generation parameters of output `choice` of a request whose prompt has `prompt_len`
/// tokens: the output fits the context, each choice has its own seed. Compiling a grammar
/// blocks: call it off the async threads.
pub fn params_for(
    worker: &Worker,
    common: &CommonParams,
    logprobs: Option<usize>,
    format: Option<&Constraint>,
    prompt_len: usize,
    choice: usize,
) -> Result<GenerateParams, ApiError> {
    let n_ctx = worker.config().n_ctx;
    if prompt_len >= n_ctx {
        return Err(ApiError::context_length_exceeded(
            Some("messages"),
            format!("the prompt has {prompt_len} tokens but the context holds {n_ctx}"),
        ));
    }
    let room = n_ctx - prompt_len;
    let constraint = match format {
        Some(c) => {
            let param = match c {
                Constraint::ToolCall(_) => "tools",
                Constraint::Grammar(_) => "grammar",
                Constraint::JsonObject | Constraint::JsonSchema(_) => "response_format",
            };
            Some(Box::new(worker.grammar()?.compile(c).map_err(|e| ApiError::invalid_param(param, e.to_string()))?) as _)
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

/// One output of a request, streamed or not, run with the adapters `lora` (the draft model,
/// when loaded, may propose its tokens) until the request's deadline; a stream that carries
/// timings or progress gets the prompt's progress reports (the first tells the cached tokens,
/// which the timings count).
pub fn output(prompt: Vec<TokenId>, params: GenerateParams, common: &CommonParams, stream: bool, lora: Vec<LoraScale>) -> SeqSpec {
    let progress = stream && (common.return_progress || common.timings_per_token);
    SeqSpec { prompt, params, stream, speculative: true, deadline: common.deadline, images: Default::default(), lora, progress }
}

/// The output of a llama-server route (`/infill`, `/completion`): `output` with the request's
/// line limits, and the probabilities after sampling when asked for (then without speculation,
/// whose verified tokens have only the model's own).
pub fn llama_output(
    limits: &LlamaLimits,
    prompt: Vec<TokenId>,
    mut params: GenerateParams,
    common: &CommonParams,
    lora: Vec<LoraScale>,
) -> SeqSpec {
    params.min_indent = limits.min_indent;
    params.line_time_limit = limits.line_time_limit;
    params.post_sampling_logprobs = limits.post_sampling;
    let mut seq = output(prompt, params, common, common.stream, lora);
    seq.speculative &= !limits.post_sampling;
    seq
}

/// Submits a non-streaming request: through the batch scheduler when one is attached (requests
/// arriving together are admitted in the same step), else straight to the model's batch.
pub async fn submit(state: &AppState, entry: &Arc<ModelEntry>, seqs: Vec<SeqSpec>) -> Result<Generation, ApiError> {
    let Some(batcher) = state.batcher.as_ref() else { return entry.worker.generate(seqs) };
    let prompt = seqs.first().map(|s| s.prompt.clone()).unwrap_or_default();
    let request = BatchRequest { prompt, phase: Phase::Prefill, payload: (entry.clone(), seqs) };
    batcher.submit(request).await.map_err(|e| match e {
        BatchError::Item(e) => e,
        BatchError::Stopped | BatchError::NotStarted => ApiError::overloaded(),
        other => ApiError::server(other.to_string()),
    })
}

/// The batch scheduler's handler: submits every request of the batch to its model's engine
/// thread back to back, so that they are admitted in the same step; each request then waits
/// for its own outputs (and cancels them if its client goes away).
pub fn submit_batch(batch: Vec<BatchRequest<(Arc<ModelEntry>, Vec<SeqSpec>)>>) -> Vec<Result<Generation, ApiError>> {
    batch.into_iter().map(|r| r.payload.0.worker.generate(r.payload.1)).collect()
}

/// How long a stream may stay silent (a long prompt being read) before a comment line keeps
/// proxies from timing out.
const PING_INTERVAL: Duration = Duration::from_secs(5);

/// The next event of `generation`, or `None` when the client has gone (dropping the generation
/// then cancels it) or every output is done. A comment line goes out after each silent
/// [`PING_INTERVAL`].
pub async fn next_event(generation: &mut Generation, sse: &SseSender) -> Option<SeqEvent> {
    loop {
        tokio::select! {
            event = generation.next() => return event,
            _ = sse.closed() => return None,
            _ = tokio::time::sleep(PING_INTERVAL) => {
                if !sse.ping().await {
                    return None;
                }
            }
        }
    }
}

/// Adds output `index`'s usage to its request's, outputs being `n` per prompt: a prompt's tokens
/// (and the part of them found in the cache) count once, with its first output.
pub fn add_usage(total: &mut Usage, index: usize, n: usize, output: &Usage) {
    if index.is_multiple_of(n) {
        total.prompt_tokens += output.prompt_tokens;
        total.cached_tokens += output.cached_tokens;
    }
    total.completion_tokens += output.completion_tokens;
    total.drafted_tokens += output.drafted_tokens;
    total.accepted_tokens += output.accepted_tokens;
}

pub fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        // speculation's proposals, in the fields OpenAI gives a prediction's tokens
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": u.accepted_tokens,
            "rejected_prediction_tokens": u.drafted_tokens - u.accepted_tokens,
        },
    })
}

/// The fields a chat or text completion object, and each of its stream chunks, starts with.
/// The stop string that ended a generation whose whole text (stop string included) is
/// `generated`: generation stops at the first one it meets, the earliest in the text (the
/// shorter where two start together).
pub fn stop_string_met<'a>(generated: &str, stops: impl IntoIterator<Item = &'a String>) -> Option<&'a String> {
    stops.into_iter().filter_map(|s| generated.find(s.as_str()).map(|at| (at, s.len(), s))).min().map(|(_, _, s)| s)
}

pub fn completion_object(id: &str, object: &str, created: u64, model: &str, choices: Value) -> Value {
    json!({"id": id, "object": object, "created": created, "model": model, "system_fingerprint": crate::FINGERPRINT, "choices": choices})
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

/// Runs `f` on a blocking thread (prompt rendering, tokenizing, grammar compilation).
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::server(format!("request preparation failed: {e}")))?
}
