//! The fields llama-server's native routes (`/infill`, `/completion`) share beside the sampling
//! fields: `n_predict` (the most tokens to write; -1: until the context is full; 0: read the
//! prompt into the cache and write nothing), the line limits an editor sets (`n_indent`,
//! `t_max_predict_ms`), `response_fields` (the answer's fields to keep), `return_tokens`, and
//! `n_probs` with `post_sampling_probs` (each token's probabilities).

use std::time::Duration;

use engine::generate::MAX_TOP_LOGPROBS;
use serde::Deserialize;

use super::sampling::{int_in, CommonParams};
use crate::error::ApiError;

#[derive(Debug, Default, Deserialize)]
pub struct LlamaFields {
    #[serde(default)]
    n_predict: Option<i64>,
    /// The least indentation of the lines after the first (0: any).
    #[serde(default)]
    n_indent: u32,
    /// Milliseconds after the first token from which a line end ends the output (0 or less:
    /// none).
    #[serde(default)]
    t_max_predict_ms: i64,
    /// The answer's fields to keep, each a path such as `timings/prompt_ms` (empty: all).
    #[serde(default)]
    response_fields: Vec<String>,
    /// The generated token ids in the answer (`tokens`).
    #[serde(default)]
    return_tokens: bool,
    /// How many of the likeliest tokens' probabilities to give with each token (0: none).
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    n_probs: Option<u64>,
    /// Those of the distribution each token was drawn from, instead of the model's.
    #[serde(default)]
    post_sampling_probs: bool,
}

/// The fields, checked.
#[derive(Debug, Clone, Default)]
pub struct LlamaLimits {
    pub min_indent: usize,
    pub line_time_limit: Option<Duration>,
    pub response_fields: Vec<String>,
    pub return_tokens: bool,
    /// `n_probs`, when above 0.
    pub n_probs: Option<usize>,
    /// `post_sampling_probs`: the probabilities of the distribution drawn from.
    pub post_sampling: bool,
    /// The stream's extras (from the common fields): each piece's `timings`, and
    /// `prompt_progress` events.
    pub timings_per_token: bool,
    pub return_progress: bool,
}

impl LlamaFields {
    /// The fields checked, `n_predict` (-1, 0, or more) set as `common`'s most tokens to write
    /// (left as `max_tokens` made it when absent).
    pub fn check(self, common: &mut CommonParams) -> Result<LlamaLimits, ApiError> {
        match self.n_predict {
            Some(n) if n < -1 => {
                return Err(ApiError::invalid_param("n_predict", format!("n_predict must be -1 (no limit) or at least 0, got {n}")))
            }
            Some(-1) => common.max_tokens = None,
            Some(n) => common.max_tokens = Some(n as usize),
            None => {}
        }
        Ok(LlamaLimits {
            min_indent: self.n_indent as usize,
            line_time_limit: (self.t_max_predict_ms > 0).then(|| Duration::from_millis(self.t_max_predict_ms as u64)),
            response_fields: self.response_fields,
            return_tokens: self.return_tokens,
            n_probs: int_in("n_probs", self.n_probs, 0, MAX_TOP_LOGPROBS as u64)?.filter(|&n| n > 0).map(|n| n as usize),
            post_sampling: self.post_sampling_probs,
            timings_per_token: common.timings_per_token,
            return_progress: common.return_progress,
        })
    }
}
