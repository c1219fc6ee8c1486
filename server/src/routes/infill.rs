//! llama-server's `POST /infill`: fill-in-the-middle as the editor plugins (llama.vim,
//! llama.vscode) ask for it, answered in llama-server's own completion shape: `content`,
//! `stop`, `stop_type` (`eos`, `word` with its `stopping_word`, `limit`), `tokens_predicted`,
//! `tokens_evaluated`, `tokens_cached`, `has_new_line`, `truncated`, `generation_settings.n_ctx`
//! (the sequence's context, which llama.vim shows); streamed, one `data:` event
//! per piece of text (`stop: false`), then the whole answer's fields with `stop: true`.

use std::sync::Arc;
use std::time::Instant;

use engine::generate::{Completion, FinishReason};
use engine::tokenizer::fim::{infill_prompt, Infill, InfillBudget};
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
    let e = entry.clone();
    let seq = blocking(move || infill_output(&e, &request)).await?;
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
                        sse.send_json(&last).await
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
    Ok(ok_json(&answer(&entry, &c, &stops, evaluated)))
}

/// The request's one output: its FIM prompt within llama-server's budget.
fn infill_output(entry: &ModelEntry, request: &CheckedInfill) -> Result<SeqSpec, ApiError> {
    let tokenizer = entry.model.tokenizer();
    let infill = Infill { prefix: &request.prefix, suffix: &request.suffix, middle_start: &request.middle_start, extra: &request.extra };
    let budget = InfillBudget { n_batch: N_BATCH, n_ctx: entry.n_ctx, n_predict: request.common.max_tokens };
    let prompt =
        infill_prompt(tokenizer, &infill, budget).map_err(|e| ApiError::invalid_param("model", format!("{e}: it cannot fill a gap")))?;
    let params = params_for(&entry.worker, &request.common, None, None, prompt.len(), 0)?;
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
    })
}
