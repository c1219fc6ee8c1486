//! llama-server's own completion answer, which `/infill` and `/completion` give: `content`,
//! `stop`, `stop_type` (`eos`, `word` with its `stopping_word`, `limit`), `tokens_predicted`,
//! `tokens_evaluated`, `tokens_cached`, `prompt`, `has_new_line`, `truncated`,
//! `generation_settings.n_ctx` (the sequence's context, which llama.vim shows), `timings`, the
//! token ids with `return_tokens`, `completion_probabilities` with `n_probs`; or only the
//! `response_fields` asked for; and the stream of it: a piece has `stop: false`, the counts so
//! far, its token's probabilities and (`timings_per_token`) the timings so far; with
//! `return_progress`, `prompt_progress` events as the prompt is read; each output ends with its
//! answer's fields, `content` empty.

use std::sync::Arc;
use std::time::Instant;

use engine::generate::{Completion, FinishReason, TokenEvent};
use engine::logprobs::TokenLogprob;
use engine::tokenizer::{TokenId, Tokenizer};
use hyper::Response;
use serde_json::{json, Value};

use super::generation::{next_event, stop_string_met};
use super::timings::{mark_progress, of_completion, StreamCounts};
use crate::http::{sse_response, Body};
use crate::registry::ModelEntry;
use crate::requests::llama::LlamaLimits;
use crate::worker::{Generation, PromptProgress, SeqEvent};
use crate::AppState;

/// The whole answer of the completion `c` of `prompt`, the `index`th of its request: with its
/// `completion_probabilities` under `n_probs`, those of a stop string's tokens left out as
/// llama-server leaves them (as many as the stop string has tokens on its own).
pub fn whole(entry: &ModelEntry, index: usize, prompt: &[TokenId], c: &Completion, stops: &[String], limits: &LlamaLimits) -> Value {
    let mut a = answer(entry, index, prompt, c, stops, limits.return_tokens);
    if limits.n_probs.is_some() {
        let tokenizer = entry.model.tokenizer();
        let stop_tokens = a["stop_type"].as_str().filter(|&t| t == "word").map_or(0, |_| {
            let word = a["stopping_word"].as_str().unwrap_or_default();
            tokenizer.encode(word, false, false).len()
        });
        let kept = c.logprobs.len() - stop_tokens.min(c.logprobs.len());
        a["completion_probabilities"] = probabilities(tokenizer, &c.logprobs[..kept], limits.post_sampling);
    }
    only(a, &limits.response_fields)
}

/// The SSE stream of a llama-server route's outputs (`generation`, one per prompt of
/// `prompts`): each piece as it decodes, each output's answer as it ends, without `[DONE]`; an
/// error ends it with the error's body.
pub fn stream(
    state: &Arc<AppState>,
    entry: &Arc<ModelEntry>,
    mut generation: Generation,
    prompts: Vec<Vec<TokenId>>,
    stops: Vec<String>,
    limits: LlamaLimits,
    start: Instant,
) -> Response<Body> {
    let (response, sse) = sse_response();
    let (state, entry) = (state.clone(), entry.clone());
    tokio::spawn(async move {
        let mut counts = StreamCounts::new(prompts.iter().map(Vec::len).collect());
        while let Some(event) = next_event(&mut generation, &sse).await {
            let sent = match event {
                SeqEvent::Progress { index, progress } => {
                    counts.progress(index, &progress);
                    !limits.return_progress || sse.send_json(&progress_event(index, &progress, &limits)).await
                }
                SeqEvent::Token { index, event, timings } => {
                    counts.token(index, &event);
                    let times = limits.timings_per_token.then(|| counts.timings(index, timings));
                    match piece(entry.model.tokenizer(), index, &event, &counts, times, &limits) {
                        Some(p) => sse.send_json(&p).await,
                        None => true,
                    }
                }
                SeqEvent::Done { index, result: Ok(c) } => {
                    state.metrics.record_generation(c.usage.completion_tokens, start);
                    sse.send_json(&stream_end(&entry, index, &prompts[index], &c, &stops, &limits)).await
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
    response
}

/// A stream's last event for the completion `c`: the answer's fields, `content` empty (the
/// pieces carried it, and its probabilities).
fn stream_end(entry: &ModelEntry, index: usize, prompt: &[TokenId], c: &Completion, stops: &[String], limits: &LlamaLimits) -> Value {
    let mut last = answer(entry, index, prompt, c, stops, limits.return_tokens);
    last["content"] = json!("");
    only(last, &limits.response_fields)
}

/// A streamed piece of the `index`th completion, its text and the counts so far, with the
/// token's id under `return_tokens`, its probabilities under `n_probs` and the output's
/// `timings` so far (`times`, under `timings_per_token`); `None` when it has nothing to tell.
fn piece(
    tokenizer: &Tokenizer,
    index: usize,
    event: &TokenEvent,
    counts: &StreamCounts,
    times: Option<Value>,
    limits: &LlamaLimits,
) -> Option<Value> {
    let token = event.token.filter(|_| limits.return_tokens);
    let probs = event.logprob.as_ref().filter(|_| limits.n_probs.is_some());
    if event.text.is_empty() && token.is_none() && probs.is_none() {
        return None;
    }
    let mut p = json!({"index": index, "content": event.text, "tokens": token.into_iter().collect::<Vec<_>>(), "stop": false,
                       "id_slot": -1, "tokens_predicted": counts.predicted(index), "tokens_evaluated": counts.prompt(index)});
    if let Some(lp) = probs {
        p["completion_probabilities"] = probabilities(tokenizer, std::slice::from_ref(lp), limits.post_sampling);
    }
    if let Some(t) = times {
        p["timings"] = t;
    }
    Some(p)
}

/// A `prompt_progress` event of the `index`th completion, with the timings so far under
/// `timings_per_token` (only the prompt's).
fn progress_event(index: usize, progress: &PromptProgress, limits: &LlamaLimits) -> Value {
    let mut p = json!({"index": index, "content": "", "tokens": [], "stop": false, "id_slot": -1, "tokens_predicted": 0,
                       "tokens_evaluated": progress.total});
    mark_progress(&mut p, progress, limits.timings_per_token);
    p
}

/// The finished answer's fields.
fn answer(entry: &ModelEntry, index: usize, prompt: &[TokenId], c: &Completion, stops: &[String], return_tokens: bool) -> Value {
    let tokenizer = entry.model.tokenizer();
    let generated = tokenizer.decode(&c.tokens);
    let text_ids: Vec<TokenId> = prompt.iter().copied().filter(|&t| (t as usize) < tokenizer.n_vocab()).collect();
    let (stop_type, stopping_word) = match (c.finish, stop_string_met(&generated, stops)) {
        (FinishReason::Length, _) => ("limit", String::new()),
        (_, Some(word)) => ("word", word.clone()),
        _ => ("eos", String::new()),
    };
    json!({
        "index": index,
        "content": c.text,
        "tokens": if return_tokens { c.tokens.clone() } else { Vec::new() },
        "id_slot": -1,
        "stop": true,
        "model": entry.id,
        "tokens_predicted": c.usage.completion_tokens,
        "tokens_evaluated": prompt.len(),
        "tokens_cached": c.usage.cached_tokens,
        // the prompt as text, special tokens spelled out (an image's rows, ids past the
        // vocabulary, left out as llama-server leaves them)
        "prompt": String::from_utf8_lossy(&tokenizer.detokenize(&text_ids, false, true)),
        "has_new_line": c.text.contains('\n'),
        "truncated": false,
        "stop_type": stop_type,
        "stopping_word": stopping_word,
        "generation_settings": {"n_ctx": entry.n_ctx},
        "timings": of_completion(c),
    })
}

/// `completion_probabilities`: per token its id, text, bytes and log-probability, and the same
/// of the best `n_probs` tokens (`top_logprobs`); after sampling (`post_sampling`), the
/// probabilities themselves (`prob`, `top_probs`), as llama-server names them. A text cut inside
/// a UTF-8 character loses the cut character, as llama-server's does; `bytes` keep it.
fn probabilities(tokenizer: &Tokenizer, logprobs: &[TokenLogprob], post_sampling: bool) -> Value {
    let (value, top) = if post_sampling { ("prob", "top_probs") } else { ("logprob", "top_logprobs") };
    let entry = |id: TokenId, logprob: f32| {
        let bytes = tokenizer.token_to_piece(id, false);
        let v = if post_sampling { logprob.exp() } else { logprob };
        json!({"id": id, "token": whole_characters(bytes), "bytes": bytes, value: v})
    };
    let steps = logprobs.iter().map(|l| {
        let mut step = entry(l.token, l.logprob);
        step[top] = l.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
        step
    });
    Value::Array(steps.collect())
}

/// The text of `bytes` without an unfinished UTF-8 character at the end (llama-server's
/// `validate_utf8`); other invalid bytes replaced.
fn whole_characters(bytes: &[u8]) -> String {
    let cut = (1..=bytes.len().min(4)).find_map(|back| {
        let lead = bytes[bytes.len() - back];
        let needs = match lead {
            b if b & 0xE0 == 0xC0 => 2,
            b if b & 0xF0 == 0xE0 => 3,
            b if b & 0xF8 == 0xF0 => 4,
            _ => return None,
        };
        (back < needs).then_some(bytes.len() - back)
    });
    String::from_utf8_lossy(&bytes[..cut.unwrap_or(bytes.len())]).into_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_at_the_end_is_left_out() {
        let euro = "€".as_bytes(); // e2 82 ac
        assert_eq!(whole_characters(euro), "€");
        assert_eq!(whole_characters(&euro[..2]), "");
        assert_eq!(whole_characters(&[b'a', euro[0]]), "a");
        assert_eq!(whole_characters(b"ab"), "ab");
        assert_eq!(whole_characters(&euro[1..]), "\u{fffd}\u{fffd}");
        assert_eq!(whole_characters(&[]), "");
    }

    #[test]
    fn only_keeps_the_paths_named() {
        let a = json!({"content": "x", "timings": {"prompt_n": 3}});
        assert_eq!(only(a.clone(), &[]), a);
        assert_eq!(only(a, &["timings/prompt_n".into(), "nope".into(), "content".into()]), json!({"timings/prompt_n": 3, "content": "x"}));
    }
}
