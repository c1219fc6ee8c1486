//! llama-server's `POST /infill`: fill-in-the-middle as the editor plugins (llama.vim,
//! llama.vscode) ask for it, answered in llama-server's own completion shape
//! ([`llama_answer`](super::llama_answer)); streamed, one `data:` event per piece of text
//! (`stop: false`), then the whole answer's fields with `stop: true`.

use std::sync::Arc;
use std::time::Instant;

use engine::tokenizer::fim::{infill_prompt, FimOrder, Infill, InfillBudget};
use hyper::Response;
use serde_json::{Map, Value};

use super::generation::{blocking, llama_output, params_for, submit};
use super::llama_answer::{self, whole};
use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::registry::ModelEntry;
use crate::requests::infill::{CheckedInfill, InfillRequest};
use crate::worker::SeqSpec;
use crate::AppState;

/// llama-server's default batch size, which its infill budget is counted in.
const N_BATCH: usize = 2048;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = InfillRequest::from_body(&Value::Object(body))?;
    let entry = state.registry.named_or_only(typed.model(), true)?;
    let request = typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts)?;
    let start = Instant::now();
    let stream = request.common.stream;
    let limits = request.limits.clone();
    let e = entry.clone();
    let order = state.fim_order;
    let seq = blocking(move || infill_output(&e, &request, order)).await?;
    let (stops, prompt) = (seq.params.stop.clone(), seq.prompt.clone());
    if stream {
        let generation = entry.worker.generate(vec![seq])?;
        return Ok(llama_answer::stream(state, &entry, generation, vec![prompt], stops, limits, start));
    }
    let c = submit(state, &entry, vec![seq])
        .await?
        .collect()
        .await?
        .pop()
        .ok_or_else(|| ApiError::server("the model returned no completion"))?;
    state.metrics.record_generation(c.usage.completion_tokens, start);
    Ok(ok_json(&whole(&entry, 0, &prompt, &c, &stops, &limits)))
}

/// The request's one output: its FIM prompt within llama-server's budget.
fn infill_output(entry: &ModelEntry, request: &CheckedInfill, order: FimOrder) -> Result<SeqSpec, ApiError> {
    let tokenizer = entry.model.tokenizer();
    let infill = Infill { prefix: &request.prefix, suffix: &request.suffix, middle_start: &request.middle_start, extra: &request.extra };
    let budget = InfillBudget { n_batch: N_BATCH, n_ctx: entry.n_ctx, n_predict: request.common.max_tokens };
    let prompt = infill_prompt(tokenizer, &infill, budget, order)
        .map_err(|e| ApiError::invalid_param("model", format!("{e}: it cannot fill a gap")))?;
    let params = params_for(&entry.worker, &request.common, request.limits.n_probs, None, prompt.len(), 0)?;
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    Ok(llama_output(&request.limits, prompt, params, &request.common, lora))
}
