//! llama-server's `timings` and `prompt_progress`, which its own routes carry and, as it extends
//! them, the OpenAI ones: a finished output's timings, a streamed piece's so far
//! (`timings_per_token`), and the reading of the prompt as it goes (`return_progress`).

use engine::generate::{Completion, Timings, TokenEvent};
use serde_json::{json, Value};

use crate::worker::PromptProgress;

/// `timings`: `prompt_n` prompt tokens read (beside `cache_n` found cached) in the time
/// `t.prompt` (the output's start to its first token); `predicted_n` tokens written in
/// `t.output` (the first to the last), whose rates count the steps after the first token (which
/// the prompt's pass gives).
pub fn timings_json(t: Timings, cache_n: usize, prompt_n: usize, predicted_n: usize) -> Value {
    let (prompt_ms, predicted_ms) = (t.prompt.as_secs_f64() * 1e3, t.output.as_secs_f64() * 1e3);
    let steps = predicted_n.saturating_sub(1);
    let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let rate = |ms: f64, n: usize| if ms > 0.0 { 1e3 / ms * n as f64 } else { 0.0 };
    json!({
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per(prompt_ms, prompt_n),
        "prompt_per_second": rate(prompt_ms, prompt_n),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per(predicted_ms, steps),
        "predicted_per_second": rate(predicted_ms, steps),
    })
}

/// A finished output's `timings`.
pub fn of_completion(c: &Completion) -> Value {
    let u = &c.usage;
    timings_json(c.timings.unwrap_or_default(), u.cached_tokens, u.prompt_tokens - u.cached_tokens, u.completion_tokens)
}

/// `prompt_progress`: the prompt's tokens, those found in the cache, those read so far (the
/// cached ones included) and the milliseconds since the output started.
pub fn progress_json(p: &PromptProgress) -> Value {
    json!({"total": p.total, "cache": p.cached, "processed": p.processed, "time_ms": p.elapsed.as_millis() as u64})
}

/// Puts a progress report on a stream's `event`: its `prompt_progress`, and with
/// `with_times` the prompt's timings so far.
pub fn mark_progress(event: &mut Value, p: &PromptProgress, with_times: bool) {
    event["prompt_progress"] = progress_json(p);
    if with_times {
        event["timings"] = of_progress(p);
    }
}

/// The `timings` of an output still reading its prompt: the prompt's part so far.
pub fn of_progress(p: &PromptProgress) -> Value {
    timings_json(Timings { prompt: p.elapsed, output: Default::default() }, p.cached, p.processed - p.cached, 0)
}

/// A stream's outputs' token counts, for the timings of their pieces: each prompt's length, the
/// part of it found in the cache (its first progress report tells it) and the tokens written.
pub struct StreamCounts {
    prompt: Vec<usize>,
    cached: Vec<usize>,
    predicted: Vec<usize>,
}

impl StreamCounts {
    pub fn new(prompt_lens: Vec<usize>) -> StreamCounts {
        let n = prompt_lens.len();
        StreamCounts { prompt: prompt_lens, cached: vec![0; n], predicted: vec![0; n] }
    }

    pub fn progress(&mut self, index: usize, p: &PromptProgress) {
        self.cached[index] = p.cached;
    }

    /// Counts output `index`'s `event` (a token, or only its end).
    pub fn token(&mut self, index: usize, event: &TokenEvent) {
        self.predicted[index] += usize::from(event.token.is_some());
    }

    /// Output `index`'s timings so far (`t`, with the counts).
    pub fn timings(&self, index: usize, t: Timings) -> Value {
        timings_json(t, self.cached[index], self.prompt[index] - self.cached[index], self.predicted[index])
    }

    pub fn predicted(&self, index: usize) -> usize {
        self.predicted[index]
    }

    pub fn prompt(&self, index: usize) -> usize {
        self.prompt[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_count_the_steps_after_the_first_token() {
        let t = Timings { prompt: Duration::from_millis(200), output: Duration::from_millis(90) };
        let j = timings_json(t, 4, 100, 10);
        assert_eq!((j["cache_n"].as_u64(), j["prompt_n"].as_u64(), j["predicted_n"].as_u64()), (Some(4), Some(100), Some(10)));
        assert!((j["prompt_per_second"].as_f64().unwrap() - 500.0).abs() < 1e-9);
        assert!((j["prompt_per_token_ms"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        // 9 steps after the first token in 90 ms
        assert!((j["predicted_per_second"].as_f64().unwrap() - 100.0).abs() < 1e-9);
        assert!((j["predicted_per_token_ms"].as_f64().unwrap() - 10.0).abs() < 1e-9);
        // nothing yet: zeros, never NaN or infinity
        let none = timings_json(Timings::default(), 0, 0, 0);
        assert!(none.as_object().unwrap().values().all(|v| v.as_f64() == Some(0.0)), "{none}");
    }

    #[test]
    fn a_stream_counts_each_outputs_tokens_and_cached_prompt() {
        let mut counts = StreamCounts::new(vec![10, 20]);
        let p = PromptProgress { total: 20, cached: 16, processed: 16, elapsed: Duration::ZERO };
        counts.progress(1, &p);
        assert_eq!(of_progress(&p)["prompt_n"], 0);
        assert_eq!(progress_json(&p), json!({"total": 20, "cache": 16, "processed": 16, "time_ms": 0}));
        let token = TokenEvent { token: Some(3), text: "a".into(), logprob: None, finish: None };
        let end = TokenEvent { token: None, ..token.clone() };
        counts.token(1, &token);
        counts.token(1, &end);
        counts.token(0, &token);
        let t = counts.timings(1, Timings::default());
        assert_eq!((t["cache_n"].as_u64(), t["prompt_n"].as_u64(), t["predicted_n"].as_u64()), (Some(16), Some(4), Some(1)));
        assert_eq!((counts.predicted(0), counts.prompt(0), counts.timings(0, Timings::default())["cache_n"].as_u64()), (1, 10, Some(0)));
    }
}
