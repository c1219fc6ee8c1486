//! `POST /v1/completions` (legacy text completions): prompts as text or token ids (one or many),
//! `max_tokens` defaulting to 16 as in OpenAI's spec, `echo` (the prompt first, with its token
//! log-probabilities when `logprobs` is set: the first token's are null), legacy `logprobs`
//! (parallel `tokens` / `token_logprobs` / `top_logprobs` / `text_offset` arrays, up to 5
//! alternatives), JSON or SSE (`text_completion` chunks, usage chunk, `[DONE]`).

use std::sync::Arc;
use std::time::Instant;

use engine::generate::{Completion, Usage};
use engine::kv_cache::KvType;
use engine::logprobs::{token_logprob, TokenLogprob};
use engine::model::BatchEntry;
use engine::tokenizer::{TokenId, Tokenizer};
use hyper::Response;
use serde_json::{json, Map, Value};

use super::chat::{completion_object, params_for, random_id, run_generation, unix_now, usage_json};
use crate::error::ApiError;
use crate::http::{ok_json, sse_response, Body};
use crate::params::{boolean, common, inputs, integer, model_id, CommonParams, Inputs};
use crate::worker::EngineState;
use crate::AppState;

/// OpenAI's default `max_tokens` for this endpoint.
pub const DEFAULT_MAX_TOKENS: usize = 16;

struct CompletionRequest {
    prompts: Inputs,
    common: CommonParams,
    echo: bool,
    /// Legacy `logprobs`: how many alternatives (0..=5) per token; `None` = no log-probs.
    logprobs: Option<usize>,
}

fn parse(body: &Map<String, Value>, n_vocab: usize) -> Result<CompletionRequest, ApiError> {
    for unsupported in ["suffix"] {
        if body.get(unsupported).is_some_and(|v| !v.is_null()) {
            return Err(ApiError::invalid_param(unsupported, format!("{unsupported} is not supported")));
        }
    }
    if let Some(b) = integer(body, "best_of", 1, 20)? {
        if b != 1 {
            return Err(ApiError::invalid_param("best_of", "best_of other than 1 is not supported"));
        }
    }
    let mut common = common(body, n_vocab)?;
    common.max_tokens = Some(common.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
    Ok(CompletionRequest {
        prompts: inputs(body, "prompt")?,
        common,
        echo: boolean(body, "echo")?.unwrap_or(false),
        logprobs: integer(body, "logprobs", 0, 5)?.map(|v| v as usize),
    })
}

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let id = model_id(&body)?;
    let entry = state.registry.generator(&id)?;
    let request = parse(&body, entry.model.tokenizer().n_vocab())?;
    let (created, cmpl_id, start) = (unix_now(), format!("cmpl-{}", random_id()), Instant::now());
    let state2 = state.clone();
    if request.common.stream {
        let (response, sse) = sse_response(state.metrics.requests_cancelled.clone());
        let model_name = id.clone();
        entry.worker.spawn(move |engine| {
            let chunk = |choices: Value, usage: Option<Value>| {
                let mut c = completion_object(&cmpl_id, "text_completion", created, &model_name, choices);
                if request.common.include_usage {
                    c["usage"] = usage.unwrap_or(Value::Null);
                }
                c
            };
            let mut usage = Usage::default();
            let result = each_choice(engine, &request, |engine, index, prompt| {
                let model = engine.model.clone();
                let tokenizer = model.tokenizer();
                if request.echo {
                    let text = tokenizer.decode(prompt);
                    sse.send_json(&chunk(json!([{"index": index, "text": text, "logprobs": null, "finish_reason": null}]), None));
                }
                let params = params_for(engine, &request.common, request.logprobs, None, prompt.len(), index)?;
                let completion = run_generation(engine, prompt, params, |event| {
                    if event.text.is_empty() && event.logprob.is_none() {
                        return true;
                    }
                    let lp = event.logprob.as_ref().map_or(Value::Null, |l| legacy_arrays(tokenizer, &[Some(l.clone())], &[event.text.clone()]));
                    sse.send_json(&chunk(json!([{"index": index, "text": event.text, "logprobs": lp, "finish_reason": null}]), None))
                })?;
                sse.send_json(&chunk(json!([{"index": index, "text": "", "logprobs": null, "finish_reason": completion.finish.as_str()}]), None));
                add_usage(&mut usage, index, request.common.n, &completion.usage);
                Ok(())
            });
            match result {
                Ok(()) => {
                    state2.metrics.record_generation(usage.completion_tokens, start);
                    if request.common.include_usage {
                        sse.send_json(&chunk(json!([]), Some(usage_json(&usage))));
                    }
                }
                Err(e) => {
                    sse.send_json(&e.body());
                }
            }
            sse.done();
        })?;
        return Ok(response);
    }
    let (choices, usage) = entry
        .worker
        .run(move |engine, cancel| -> Result<(Vec<Value>, Usage), ApiError> {
            let mut choices = Vec::new();
            let mut usage = Usage::default();
            each_choice(engine, &request, |engine, index, prompt| {
                let params = params_for(engine, &request.common, request.logprobs, None, prompt.len(), index)?;
                let completion = run_generation(engine, prompt, params, |_| !cancel.is_set())?;
                add_usage(&mut usage, index, request.common.n, &completion.usage);
                choices.push(choice_json(engine, &request, index, prompt, &completion)?);
                Ok(())
            })?;
            Ok((choices, usage))
        })
        .await??;
    state.metrics.record_generation(usage.completion_tokens, start);
    let mut completion = completion_object(&cmpl_id, "text_completion", created, &id, json!(choices));
    completion["usage"] = usage_json(&usage);
    Ok(ok_json(&completion))
}

/// Runs `f(engine, choice index, prompt tokens)` for every prompt x `n`, prompt-major.
/// Adds the usage of choice `index` (of `n` per prompt) to `total`: a prompt's tokens count
/// once, however many choices it has.
fn add_usage(total: &mut Usage, index: usize, n: usize, choice: &Usage) {
    if index % n == 0 {
        total.prompt_tokens += choice.prompt_tokens;
    }
    total.completion_tokens += choice.completion_tokens;
}

fn each_choice(
    engine: &mut EngineState,
    request: &CompletionRequest,
    mut f: impl FnMut(&mut EngineState, usize, &[TokenId]) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let n_vocab = engine.model.tokenizer().n_vocab();
    let prompts = match &request.prompts {
        Inputs::Texts(texts) => texts.iter().map(|t| engine.model.tokenizer().encode(t, true, true)).collect(),
        Inputs::Tokens(ids) => ids.clone(),
    };
    for (p, tokens) in prompts.into_iter().enumerate() {
        if tokens.is_empty() {
            return Err(ApiError::invalid_param("prompt", format!("prompt {p} gives no tokens")));
        }
        if let Some(bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ApiError::invalid_param("prompt", format!("prompt {p}: token {bad} is outside the vocabulary of {n_vocab}")));
        }
        for j in 0..request.common.n {
            f(engine, p * request.common.n + j, &tokens)?;
        }
    }
    Ok(())
}

fn choice_json(engine: &mut EngineState, request: &CompletionRequest, index: usize, prompt: &[TokenId], completion: &Completion) -> Result<Value, ApiError> {
    let model = engine.model.clone();
    let tokenizer = model.tokenizer();
    let prompt_text = if request.echo { tokenizer.decode(prompt) } else { String::new() };
    let logprobs = match request.logprobs {
        None => Value::Null,
        Some(n_top) => {
            let mut lps: Vec<Option<TokenLogprob>> = Vec::new();
            let mut texts: Vec<String> = Vec::new();
            if request.echo {
                lps.extend(prompt_logprobs(engine, prompt, n_top)?);
                texts.extend(prompt.iter().map(|&t| String::from_utf8_lossy(tokenizer.token_bytes(t)).into_owned()));
            }
            for l in &completion.logprobs {
                texts.push(String::from_utf8_lossy(tokenizer.token_bytes(l.token)).into_owned());
                lps.push(Some(l.clone()));
            }
            legacy_arrays(tokenizer, &lps, &texts)
        }
    };
    Ok(json!({"index": index, "text": prompt_text + &completion.text, "logprobs": logprobs, "finish_reason": completion.finish.as_str()}))
}

/// The log-probability of each prompt token given the ones before it (none for the first),
/// from one extra pass over the prompt in a scratch cache.
fn prompt_logprobs(engine: &EngineState, prompt: &[TokenId], n_top: usize) -> Result<Vec<Option<TokenLogprob>>, ApiError> {
    let model = &engine.model;
    let mut kv = model.new_kv_cache(KvType::F16, prompt.len());
    let logits = model.forward(&mut kv, &BatchEntry::sequence(0, prompt, 0, true)).map_err(|e| ApiError::server(e.to_string()))?;
    let mut out = vec![None];
    for i in 1..prompt.len() {
        out.push(Some(token_logprob(logits.row(i - 1), prompt[i], n_top)));
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
