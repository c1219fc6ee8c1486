//! llama-server's native `POST /completion` (and `/completions`), which older web pages and
//! editor plugins (Continue's llama.cpp provider) call: each prompt continued as it is (no chat
//! template), answered in llama-server's own shape ([`llama_answer`](super::llama_answer)),
//! one answer for one prompt and an array of them for several; streamed, one `data:` event per
//! piece (`stop: false`, with the piece's `completion_probabilities` under `n_probs`), then each
//! prompt's whole answer with `stop: true`, without `[DONE]`.

use std::sync::Arc;
use std::time::Instant;

use engine::generate::Completion;
use engine::grammar::Constraint;
use engine::tokenizer::TokenId;
use hyper::Response;
use serde_json::{json, Map, Value};

use super::generation::{blocking, next_event, output, params_for, submit};
use super::llama_answer::{answer, only, piece, probabilities};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body};
use crate::registry::ModelEntry;
use crate::requests::llama_completion::{CheckedLlamaCompletion, LlamaCompletionRequest, PromptPart};
use crate::worker::{SeqEvent, SeqSpec};
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = LlamaCompletionRequest::from_body(&Value::Object(body))?;
    let entry = state.registry.named_or_only(typed.model(), true)?;
    let request = Arc::new(typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts)?);
    let start = Instant::now();
    let (e, r) = (entry.clone(), request.clone());
    let seqs = blocking(move || outputs(&e, &r)).await?;
    let prompts: Vec<Vec<TokenId>> = seqs.iter().map(|s| s.prompt.clone()).collect();
    if request.common.stream {
        let mut generation = entry.worker.generate(seqs)?;
        let (response, sse) = sse_response();
        let (state, entry) = (state.clone(), entry.clone());
        tokio::spawn(async move {
            let (tokenizer, limits) = (entry.model.tokenizer(), &request.limits);
            let mut predicted = vec![0; prompts.len()];
            while let Some(event) = next_event(&mut generation, &sse).await {
                let sent = match event {
                    SeqEvent::Token { index, event } => {
                        predicted[index] += usize::from(event.token.is_some());
                        let token = event.token.filter(|_| limits.return_tokens);
                        let mut p = piece(index, &event.text, token, predicted[index], prompts[index].len());
                        let probs = event.logprob.as_ref().filter(|_| request.n_probs.is_some());
                        if let Some(lp) = probs {
                            p["completion_probabilities"] = probabilities(tokenizer, std::slice::from_ref(lp));
                        }
                        (event.text.is_empty() && token.is_none() && probs.is_none()) || sse.send_json(&p).await
                    }
                    SeqEvent::Done { index, result: Ok(c) } => {
                        state.metrics.record_generation(c.usage.completion_tokens, start);
                        let mut last = answer(&entry, index, &prompts[index], &c, &request.common.stop, limits.return_tokens);
                        last["content"] = json!("");
                        sse.send_json(&only(last, &limits.response_fields)).await
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
    let completions = submit(state, &entry, seqs).await?.collect().await?;
    let generated = completions.iter().map(|c| c.usage.completion_tokens).sum();
    state.metrics.record_generation(generated, start);
    let mut answers: Vec<Value> = completions.iter().enumerate().map(|(i, c)| whole_answer(&entry, &request, i, &prompts[i], c)).collect();
    Ok(ok_json(&if answers.len() == 1 { answers.remove(0) } else { Value::Array(answers) }))
}

/// The answer of a request that is not streamed, with its `completion_probabilities` under
/// `n_probs`: those of a stop string's tokens left out, as llama-server leaves them (as many
/// as the stop string has tokens on its own).
fn whole_answer(entry: &ModelEntry, request: &CheckedLlamaCompletion, index: usize, prompt: &[TokenId], c: &Completion) -> Value {
    let mut a = answer(entry, index, prompt, c, &request.common.stop, request.limits.return_tokens);
    if request.n_probs.is_some() {
        let tokenizer = entry.model.tokenizer();
        let stop_tokens = a["stop_type"].as_str().filter(|&t| t == "word").map_or(0, |_| {
            let word = a["stopping_word"].as_str().unwrap_or_default();
            tokenizer.encode(word, false, false).len()
        });
        let kept = c.logprobs.len() - stop_tokens.min(c.logprobs.len());
        a["completion_probabilities"] = probabilities(tokenizer, &c.logprobs[..kept]);
    }
    only(a, &request.limits.response_fields)
}

/// Each prompt tokenized (its text with BOS when it starts with text, special tokens read in
/// it; its ids as they are) and made an output. Every prompt draws with the request's seed.
fn outputs(entry: &ModelEntry, request: &CheckedLlamaCompletion) -> Result<Vec<SeqSpec>, ApiError> {
    let tokenizer = entry.model.tokenizer();
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    let mut seqs = Vec::new();
    for (p, parts) in request.prompts.iter().enumerate() {
        let mut tokens: Vec<TokenId> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            match part {
                PromptPart::Text(text) => tokens.extend(tokenizer.encode(text, i == 0, true)),
                PromptPart::Token(id) => tokens.push(*id),
            }
        }
        if tokens.is_empty() {
            return Err(ApiError::invalid_param("prompt", format!("prompt {p} gives no tokens")));
        }
        let mut params = params_for(&entry.worker, &request.common, request.n_probs, request.constraint.as_ref(), tokens.len(), 0)
            .map_err(|e| match request.constraint {
                Some(Constraint::JsonSchema(_)) if e.param.as_deref() == Some("response_format") => {
                    ApiError { param: Some("json_schema".into()), ..e }
                }
                _ => e,
            })?;
        params.min_indent = request.limits.min_indent;
        params.line_time_limit = request.limits.line_time_limit;
        seqs.push(output(tokens, params, request.common.stream, request.common.deadline, lora.clone()));
    }
    Ok(seqs)
}
