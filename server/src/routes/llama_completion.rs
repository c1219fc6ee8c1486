//! llama-server's native `POST /completion` (and `/completions`), which older web pages and
//! editor plugins (Continue's llama.cpp provider) call: each prompt continued as it is (no chat
//! template), `n_cmpl` times each, answered in llama-server's own shape
//! ([`llama_answer`](super::llama_answer)), one answer for one output and an array of them
//! for several (each prompt's outputs in turn); streamed, one `data:` event per piece
//! (`stop: false`, with its token's `completion_probabilities` under `n_probs`), then each
//! output's answer with `stop: true`, without `[DONE]`.

use std::sync::Arc;
use std::time::Instant;

use engine::grammar::Constraint;
use engine::model::vision::PromptImages;
use engine::tokenizer::TokenId;
use hyper::Response;
use serde_json::{Map, Value};

use super::generation::{blocking, llama_output, params_for, submit};
use super::llama_answer::{self, whole};
use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::registry::ModelEntry;
use crate::requests::llama_completion::{CheckedLlamaCompletion, LlamaCompletionRequest, Prompt, PromptPart, MEDIA_MARKER};
use crate::vision::media_marker;
use crate::worker::SeqSpec;
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = LlamaCompletionRequest::from_body(&Value::Object(body))?;
    let entry = state.registry.named_or_only(typed.model(), true)?;
    let request = Arc::new(typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts, entry.worker.config().parallel)?);
    let start = Instant::now();
    let (e, r) = (entry.clone(), request.clone());
    let seqs = blocking(move || outputs(&e, &r)).await?;
    let prompts: Vec<Vec<TokenId>> = seqs.iter().map(|s| s.prompt.clone()).collect();
    let (stops, limits) = (&request.common.stop, &request.limits);
    if request.common.stream {
        let generation = entry.worker.generate(seqs)?;
        return Ok(llama_answer::stream(state, &entry, generation, prompts, stops.clone(), limits.clone(), start));
    }
    let completions = submit(state, &entry, seqs).await?.collect().await?;
    let generated = completions.iter().map(|c| c.usage.completion_tokens).sum();
    state.metrics.record_generation(generated, start);
    let mut answers: Vec<Value> = completions.iter().enumerate().map(|(i, c)| whole(&entry, i, &prompts[i], c, stops, limits)).collect();
    Ok(ok_json(&if answers.len() == 1 { answers.remove(0) } else { Value::Array(answers) }))
}

/// Each prompt tokenized (its text with BOS when it starts with text, special tokens read in
/// it; its ids as they are) and made `n_cmpl` outputs, output `j` of each drawing with the
/// request's seed plus `j` (as llama-server seeds a prompt's extra completions).
fn outputs(entry: &ModelEntry, request: &CheckedLlamaCompletion) -> Result<Vec<SeqSpec>, ApiError> {
    let tokenizer = entry.model.tokenizer();
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    let limits = &request.limits;
    let mut seqs = Vec::new();
    for (p, prompt) in request.prompts.iter().enumerate() {
        let (tokens, images) = match prompt {
            Prompt::Parts(parts) => {
                let mut tokens: Vec<TokenId> = Vec::new();
                for (i, part) in parts.iter().enumerate() {
                    match part {
                        PromptPart::Text(text) => tokens.extend(tokenizer.encode(text, i == 0, true)),
                        PromptPart::Token(id) => tokens.push(*id),
                    }
                }
                (tokens, PromptImages::default())
            }
            Prompt::Media { text, images } => with_images(entry, text, images)?,
        };
        if tokens.is_empty() {
            return Err(ApiError::invalid_param("prompt", format!("prompt {p} gives no tokens")));
        }
        for j in 0..request.n_cmpl {
            let params =
                params_for(&entry.worker, &request.common, limits.n_probs, request.constraint.as_ref(), tokens.len(), j).map_err(|e| {
                    match request.constraint {
                        Some(Constraint::JsonSchema(_)) if e.param.as_deref() == Some("response_format") => {
                            ApiError { param: Some("json_schema".into()), ..e }
                        }
                        _ => e,
                    }
                })?;
            let mut seq = llama_output(limits, tokens.clone(), params, &request.common, lora.clone());
            seq.images = images.clone();
            seqs.push(seq);
        }
    }
    Ok(seqs)
}

/// A prompt's text (BOS first, special tokens read) with the rows of its base64 images where
/// its markers are, through the model's projector.
fn with_images(entry: &ModelEntry, text: &str, images: &[String]) -> Result<(Vec<TokenId>, PromptImages), ApiError> {
    let Some(projector) = &entry.vision else {
        let why = format!("the model `{}` has no vision projector for multimodal_data: start the server with --mmproj for it", entry.id);
        return Err(ApiError::invalid_param("prompt", why));
    };
    let files = images.iter().map(|data| Ok((projector.base64(data, "prompt")?, "prompt"))).collect::<Result<_, ApiError>>()?;
    let prompt = projector.prompt_of(&entry.model, &text.replace(MEDIA_MARKER, media_marker()), files, "prompt")?;
    Ok((prompt.ids, prompt.images))
}
