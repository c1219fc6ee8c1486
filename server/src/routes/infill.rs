//! llama-server's `POST /infill`: fill-in-the-middle as the editor plugins (llama.vim,
//! llama.vscode) ask for it, answered in llama-server's own completion shape: `content`,
//! `stop`, `stop_type` (`eos`, `word` with its `stopping_word`, `limit`), `tokens_predicted`,
//! `tokens_evaluated`, `tokens_cached`, `has_new_line`, `truncated`, `generation_settings.n_ctx`
//! (the sequence's context, which llama.vim shows) and `timings`, or only the
//! `response_fields` asked for; streamed, one `data:` event per piece of text (`stop: false`),
//! then the whole answer's fields with `stop: true`.

use std::sync::Arc;
use std::time::Instant;

use engine::generate::{Completion, FinishReason};
use engine::tokenizer::fim::{infill_prompt, FimOrder, Infill, InfillBudget};
use hyper::Response;
use serde_json::{json, Map, Value};

use super::generation::{blocking, next_event, output, params_for, stop_string_met, submit};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body};
use crate::registry::ModelEntry;
use crate::requests::infill::{CheckedInfill, InfillRequest};
use crate::worker::{SeqEvent, SeqSpec};
use crate::AppState;

/// llama-server's default batch size, which its infill budget is counted in.
const N_BATCH: usize = 2048;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = InfillRequest::from_body(&Value::Object(body))?;
    let entry = state.registry.named_or_only(typed.model(), true)?;
    let request = typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts)?;
    let start = Instant::now();
    let stream = request.common.stream;
    let fields = request.response_fields.clone();
    let e = entry.clone();
    let order = state.fim_order;
    let seq = blocking(move || infill_output(&e, &request, order)).await?;
    let stops = seq.params.stop.clone();
    let evaluated = seq.prompt.len();
    if stream {
        let mut generation = entry.worker.generate(vec![seq])?;
        let (response, sse) = sse_response();
        let (state, entry) = (state.clone(), entry.clone());
        tokio::spawn(async move {
            let mut predicted = 0;
            while let Some(event) = next_event(&mut generation, &sse).await {
                let sent = match event {
                    SeqEvent::Token { event, .. } => {
                        predicted += usize::from(event.token.is_some());
                        let piece = json!({"index": 0, "content": event.text, "tokens": [], "stop": false, "id_slot": -1,
                                           "tokens_predicted": predicted, "tokens_evaluated": evaluated});
                        event.text.is_empty() || sse.send_json(&piece).await
                    }
                    SeqEvent::Done { result: Ok(c), .. } => {
                        state.metrics.record_generation(c.usage.completion_tokens, start);
                        let mut last = answer(&entry, &c, &stops, evaluated);
                        last["content"] = json!("");
                        sse.send_json(&only(last, &fields)).await
                    }
                    SeqEvent::Done { result: Err(e), .. } => {
                        sse.send_json(&e.body()).await;
                        return;
                    }
                };
                if !sent {
                    return;
                }
            }
        });
        return Ok(response);
    }
    let c = submit(state, &entry, vec![seq])
        .await?
        .collect()
        .await?
        .pop()
        .ok_or_else(|| ApiError::server("the model returned no completion"))?;
    state.metrics.record_generation(c.usage.completion_tokens, start);
    Ok(ok_json(&only(answer(&entry, &c, &stops, evaluated), &fields)))
}

/// The request's one output: its FIM prompt within llama-server's budget.
fn infill_output(entry: &ModelEntry, request: &CheckedInfill, order: FimOrder) -> Result<SeqSpec, ApiError> {
    let tokenizer = entry.model.tokenizer();
    let infill = Infill { prefix: &request.prefix, suffix: &request.suffix, middle_start: &request.middle_start, extra: &request.extra };
    let budget = InfillBudget { n_batch: N_BATCH, n_ctx: entry.n_ctx, n_predict: request.common.max_tokens };
    let prompt = infill_prompt(tokenizer, &infill, budget, order)
        .map_err(|e| ApiError::invalid_param("model", format!("{e}: it cannot fill a gap")))?;
    let mut params = params_for(&entry.worker, &request.common, None, None, prompt.len(), 0)?;
    params.min_indent = request.min_indent;
    params.line_time_limit = request.line_time_limit;
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    Ok(output(prompt, params, request.common.stream, request.common.deadline, lora))
}

/// llama-server's completion fields for a finished completion.
fn answer(entry: &ModelEntry, c: &Completion, stops: &[String], evaluated: usize) -> Value {
    let generated = entry.model.tokenizer().decode(&c.tokens);
    let (stop_type, stopping_word) = match (c.finish, stop_string_met(&generated, stops)) {
        (FinishReason::Length, _) => ("limit", String::new()),
        (_, Some(word)) => ("word", word.clone()),
        _ => ("eos", String::new()),
    };
    json!({
        "index": 0,
        "content": c.text,
        "tokens": [],
        "id_slot": -1,
        "stop": true,
        "model": entry.id,
        "tokens_predicted": c.usage.completion_tokens,
        "tokens_evaluated": evaluated,
        "tokens_cached": c.usage.cached_tokens,
        "has_new_line": c.text.contains('\n'),
        "truncated": false,
        "stop_type": stop_type,
        "stopping_word": stopping_word,
        "generation_settings": {"n_ctx": entry.n_ctx},
        "timings": timings(c),
    })
}

/// llama-server's `timings`: the prompt tokens read (those not cached) and the time from the
/// sequence's start to its first token; the tokens written and the time from the first to the
/// last, whose rates count the steps after the first token (which the prompt's pass gives).
fn timings(c: &Completion) -> Value {
    let t = c.timings.unwrap_or_default();
    let (prompt_ms, predicted_ms) = (t.prompt.as_secs_f64() * 1e3, t.output.as_secs_f64() * 1e3);
    let prompt_n = c.usage.prompt_tokens - c.usage.cached_tokens;
    let steps = c.usage.completion_tokens.saturating_sub(1);
    let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let rate = |ms: f64, n: usize| if ms > 0.0 { 1e3 / ms * n as f64 } else { 0.0 };
    json!({
        "cache_n": c.usage.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per(prompt_ms, prompt_n),
        "prompt_per_second": rate(prompt_ms, prompt_n),
        "predicted_n": c.usage.completion_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per(predicted_ms, steps),
        "predicted_per_second": rate(predicted_ms, steps),
    })
}

/// The fields of `answer` named by `paths` (each `a/b` for `answer.a.b`), keyed by their paths
/// as llama-server answers `response_fields` (a path not found is left out); all of `answer`
/// when none are named.
fn only(answer: Value, paths: &[String]) -> Value {
    if paths.is_empty() {
        return answer;
    }
    let found = paths.iter().filter_map(|path| {
        let value = path.split('/').try_fold(&answer, |v, key| v.as_object()?.get(key))?;
        Some((path.clone(), value.clone()))
    });
    Value::Object(found.collect())
}
