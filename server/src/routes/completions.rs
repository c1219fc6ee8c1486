//! `POST /v1/completions` (legacy text completions): prompts as text or token ids (one or many),
//! `max_tokens` defaulting to 16 as in OpenAI's spec, `echo` (the prompt first, with its token
//! log-probabilities when `logprobs` is set: the first token's are null), legacy `logprobs`
//! (parallel `tokens` / `token_logprobs` / `top_logprobs` / `text_offset` arrays, up to 5
//! alternatives), JSON or SSE (`text_completion` chunks, usage chunk, `[DONE]`), with
//! llama-server's `timings` (of the one output, or per chunk with `timings_per_token`) and
//! `prompt_progress` chunks (`return_progress`).

use std::sync::Arc;
use std::time::Instant;

use engine::generate::{Completion, Usage};
use engine::kv_cache::KvType;
use engine::logprobs::{token_logprob, TokenLogprob};
use engine::model::{BatchEntry, LoraScale, Model};
use engine::tokenizer::fim::{fim_prompt, FimOrder};
use engine::tokenizer::{TokenId, Tokenizer};
use hyper::Response;
use serde_json::{json, Map, Value};

use super::generation::{add_usage, blocking, completion_object, next_event, output, params_for, random_id, submit, unix_now, usage_json};
use super::timings::{mark_progress, of_completion, StreamCounts};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body, SseSender};
use crate::registry::ModelEntry;
use crate::requests::completion::{CheckedCompletion, CompletionRequest};
use crate::requests::inputs::Inputs;
use crate::worker::{EngineState, Generation, SeqEvent, SeqSpec};
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let typed = CompletionRequest::from_body(&Value::Object(body))?;
    let id = typed.model_id()?;
    let entry = state.registry.generator(&id)?;
    let request = Arc::new(typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts)?);
    let (created, cmpl_id, start) = (unix_now(), format!("cmpl-{}", random_id()), Instant::now());
    let streaming = request.common.stream;
    let (e, r) = (entry.clone(), request.clone());
    let order = state.fim_order;
    let (prompts, seqs) = blocking(move || outputs(&e, &r, streaming, order)).await?;
    if streaming {
        let generation = entry.worker.generate(seqs)?;
        let (response, sse) = sse_response();
        let (state, model) = (state.clone(), entry.model.clone());
        tokio::spawn(async move {
            let chunk = |choices: Value, usage: Option<Value>| {
                let mut c = completion_object(&cmpl_id, "text_completion", created, &id, choices);
                if request.common.include_usage {
                    c["usage"] = usage.unwrap_or(Value::Null);
                }
                c
            };
            stream(generation, &request, &prompts, &model, &sse, chunk, start, &state).await
        });
        return Ok(response);
    }
    let generation = submit(state, &entry, seqs).await?;
    let completions = generation.collect().await?;
    // the prompts' own log-probabilities, when echoed with them
    let prompt_lps = match (request.echo, request.logprobs) {
        (true, Some(n_top)) => {
            let (prompts, lora) = (prompts.clone(), entry.adapters.resolve(request.common.lora.as_deref())?);
            entry
                .worker
                .run(move |engine, _| prompts.iter().map(|p| prompt_logprobs(engine, p, &lora, n_top)).collect::<Result<Vec<_>, _>>())
                .await??
        }
        _ => Vec::new(),
    };
    let n = request.common.n;
    let tokenizer = entry.model.tokenizer();
    let mut usage = Usage::default();
    let mut choices = Vec::new();
    for (index, completion) in completions.iter().enumerate() {
        add_usage(&mut usage, index, n, &completion.usage);
        choices.push(choice_json(tokenizer, &request, index, &prompts[index / n], prompt_lps.get(index / n), completion));
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    let mut completion = completion_object(&cmpl_id, "text_completion", created, &id, json!(choices));
    completion["usage"] = usage_json(&usage);
    if let [one] = &completions[..] {
        // llama-server's `timings` of the one output
        completion["timings"] = of_completion(one);
    }
    Ok(ok_json(&completion))
}

/// The SSE stream of a request: the echoed prompts first, then every output's text as it
/// decodes (interleaved), each output's last chunk with its finish reason, usage, `[DONE]`.
#[allow(clippy::too_many_arguments)]
async fn stream(
    mut generation: Generation,
    request: &CheckedCompletion,
    prompts: &[Vec<TokenId>],
    model: &Model,
    sse: &SseSender,
    chunk: impl Fn(Value, Option<Value>) -> Value,
    start: Instant,
    state: &AppState,
) {
    let tokenizer = model.tokenizer();
    let n = request.common.n;
    if request.echo {
        for index in 0..generation.len() {
            let text = tokenizer.decode(&prompts[index / n]);
            if !sse.send_json(&chunk(json!([{"index": index, "text": text, "logprobs": null, "finish_reason": null}]), None)).await {
                return;
            }
        }
    }
    let mut usage = Usage::default();
    let mut first_token = true;
    let with_times = request.common.timings_per_token;
    let n_outputs = generation.len();
    let mut counts = StreamCounts::new((0..n_outputs).map(|i| prompts[i / n].len()).collect());
    // the last output's final timings, which the usage chunk of one output carries
    let mut last_times = None;
    while let Some(event) = next_event(&mut generation, sse).await {
        let sent = match event {
            SeqEvent::Progress { index, progress } => {
                counts.progress(index, &progress);
                if !request.common.return_progress {
                    continue;
                }
                let mut c = chunk(json!([{"index": index, "text": "", "logprobs": null, "finish_reason": null}]), None);
                mark_progress(&mut c, &progress, with_times);
                sse.send_json(&c).await
            }
            SeqEvent::Token { index, event, timings } => {
                counts.token(index, &event);
                if first_token {
                    first_token = false;
                    state.metrics.time_to_first_token_ms.observe(start.elapsed().as_secs_f64() * 1e3);
                }
                if event.text.is_empty() && event.logprob.is_none() {
                    continue;
                }
                let lp = event
                    .logprob
                    .as_ref()
                    .map_or(Value::Null, |l| legacy_arrays(tokenizer, &[Some(l.clone())], std::slice::from_ref(&event.text)));
                let mut c = chunk(json!([{"index": index, "text": event.text, "logprobs": lp, "finish_reason": null}]), None);
                if with_times {
                    c["timings"] = counts.timings(index, timings);
                }
                sse.send_json(&c).await
            }
            SeqEvent::Done { index, result: Ok(completion) } => {
                add_usage(&mut usage, index, n, &completion.usage);
                let mut c =
                    chunk(json!([{"index": index, "text": "", "logprobs": null, "finish_reason": completion.finish.as_str()}]), None);
                let times = of_completion(&completion);
                c["timings"] = times.clone();
                last_times = Some(times);
                sse.send_json(&c).await
            }
            SeqEvent::Done { result: Err(e), .. } => {
                sse.send_json(&e.body()).await;
                sse.done().await;
                return;
            }
        };
        if !sent {
            return;
        }
    }
    if sse.is_closed() {
        return;
    }
    state.metrics.record_generation(usage.completion_tokens, start);
    if request.common.include_usage {
        let mut u = chunk(json!([]), Some(usage_json(&usage)));
        if let Some(t) = last_times.filter(|_| n_outputs == 1) {
            u["timings"] = t;
        }
        sse.send_json(&u).await;
    }
    sse.done().await;
}

/// The prompts of a request, tokenized and checked, and its outputs: `n` per prompt,
/// prompt-major.
fn outputs(
    entry: &ModelEntry,
    request: &CheckedCompletion,
    stream: bool,
    order: FimOrder,
) -> Result<(Vec<Vec<TokenId>>, Vec<SeqSpec>), ApiError> {
    let tokenizer = entry.model.tokenizer();
    let n_vocab = tokenizer.n_vocab();
    let prompts: Vec<Vec<TokenId>> = match (&request.prompts, &request.suffix) {
        (Inputs::Texts(texts), None) => texts.iter().map(|t| tokenizer.encode(t, true, true)).collect(),
        (Inputs::Texts(texts), Some(suffix)) => texts
            .iter()
            .map(|t| fim_prompt(tokenizer, t, suffix, order))
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::invalid_param("suffix", format!("{e}: it cannot fill a gap")))?,
        (Inputs::Tokens(ids), _) => ids.clone(),
    };
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    let mut seqs = Vec::new();
    for (p, tokens) in prompts.iter().enumerate() {
        if tokens.is_empty() {
            return Err(ApiError::invalid_param("prompt", format!("prompt {p} gives no tokens")));
        }
        if let Some(bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ApiError::invalid_param("prompt", format!("prompt {p}: token {bad} is outside the vocabulary of {n_vocab}")));
        }
        for j in 0..request.common.n {
            let params = params_for(
                &entry.worker,
                &request.common,
                request.logprobs,
                request.grammar.as_ref(),
                tokens.len(),
                p * request.common.n + j,
            )?;
            seqs.push(output(tokens.clone(), params, &request.common, stream, lora.clone()));
        }
    }
    Ok((prompts, seqs))
}

fn choice_json(
    tokenizer: &Tokenizer,
    request: &CheckedCompletion,
    index: usize,
    prompt: &[TokenId],
    prompt_lps: Option<&Vec<Option<TokenLogprob>>>,
    completion: &Completion,
) -> Value {
    let prompt_text = if request.echo { tokenizer.decode(prompt) } else { String::new() };
    let logprobs = match request.logprobs {
        None => Value::Null,
        Some(_) => {
            let mut lps: Vec<Option<TokenLogprob>> = Vec::new();
            let mut texts: Vec<String> = Vec::new();
            if let Some(prompt_lps) = prompt_lps {
                lps.extend(prompt_lps.iter().cloned());
                texts.extend(prompt.iter().map(|&t| String::from_utf8_lossy(tokenizer.token_bytes(t)).into_owned()));
            }
            for l in &completion.logprobs {
                texts.push(String::from_utf8_lossy(tokenizer.token_bytes(l.token)).into_owned());
                lps.push(Some(l.clone()));
            }
            legacy_arrays(tokenizer, &lps, &texts)
        }
    };
    json!({"index": index, "text": prompt_text + &completion.text, "logprobs": logprobs, "finish_reason": completion.finish.as_str()})
}

/// The log-probability of each prompt token given the ones before it (none for the first),
/// from one extra pass over the prompt in a scratch cache, with the adapters `lora` (an
/// activated one from its invocation in the prompt on).
fn prompt_logprobs(
    engine: &EngineState,
    prompt: &[TokenId],
    lora: &[LoraScale],
    n_top: usize,
) -> Result<Vec<Option<TokenLogprob>>, ApiError> {
    let model = &engine.model;
    let mut kv = model.new_kv_cache(KvType::F16, prompt.len());
    let lora = model.lora_schedule(lora, prompt);
    let logits =
        model.forward_scheduled(&mut kv, &BatchEntry::sequence(0, prompt, 0, true), &lora).map_err(|e| ApiError::server(e.to_string()))?;
    let mut out = vec![None];
    for (i, &token) in prompt.iter().enumerate().skip(1) {
        out.push(Some(token_logprob(logits.row(i - 1), token, n_top)));
    }
    Ok(out)
}

/// `{tokens, token_logprobs, top_logprobs, text_offset}`: the offsets count characters of the
/// returned text from 0.
fn legacy_arrays(tokenizer: &Tokenizer, lps: &[Option<TokenLogprob>], texts: &[String]) -> Value {
    let mut offset = 0usize;
    let mut offsets = Vec::with_capacity(texts.len());
    for t in texts {
        offsets.push(offset);
        offset += t.chars().count();
    }
    let token_logprobs: Vec<Value> = lps.iter().map(|l| l.as_ref().map_or(Value::Null, |l| json!(l.logprob))).collect();
    let top: Vec<Value> = lps
        .iter()
        .map(|l| match l {
            None => Value::Null,
            Some(l) => {
                let mut m = Map::new();
                for &(id, lp) in &l.top {
                    m.insert(String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned(), json!(lp));
                }
                Value::Object(m)
            }
        })
        .collect();
    json!({"tokens": texts, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets})
}
