//! The `/v1/completions` request: prompts, `suffix` (the prompt then the text before a gap the
//! model fills), `echo`, legacy `logprobs` (0 to 5 alternatives), llama-server's `grammar`
//! (GBNF), the shared sampling fields, and the OpenAI field it refuses (`best_of` other than 1).

use engine::grammar::Constraint;
use serde::Deserialize;
use serde_json::Value;

use super::inputs::Inputs;
use super::sampling::{int_in, CommonParams, SamplingRequest, Timeouts};
use super::{parse, ModelName};
use crate::error::ApiError;

/// OpenAI's default `max_tokens` for this endpoint.
pub const DEFAULT_MAX_TOKENS: usize = 16;

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    prompt: Option<Inputs>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    logprobs: Option<u64>,
    #[serde(default)]
    suffix: Option<String>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    best_of: Option<u64>,
    /// A GBNF grammar every completion follows (empty: none).
    #[serde(default)]
    grammar: Option<String>,
    #[serde(skip)]
    sampling: SamplingRequest,
}

/// A completion request, checked.
pub struct CheckedCompletion {
    pub prompts: Inputs,
    pub common: CommonParams,
    pub echo: bool,
    /// Legacy `logprobs`: how many alternatives (0..=5) per token; `None` = no log-probs.
    pub logprobs: Option<usize>,
    /// `grammar`, to decode under.
    pub grammar: Option<Constraint>,
    /// The text after the gap each prompt ends before (fill-in-the-middle); `None`: plain
    /// continuations.
    pub suffix: Option<String>,
}

impl CompletionRequest {
    /// The model the request names (null or left out: `model is required`).
    pub fn model_id(&self) -> Result<String, ApiError> {
        self.model.as_ref().map(|m| m.0.clone()).ok_or_else(|| ApiError::missing("model"))
    }

    pub fn from_body(body: &Value) -> Result<CompletionRequest, ApiError> {
        let mut request: CompletionRequest = parse(body)?;
        request.sampling = parse(body)?;
        Ok(request)
    }

    /// The request checked for a model of `n_vocab` tokens.
    pub fn check(&self, n_vocab: usize, timeouts: &Timeouts) -> Result<CheckedCompletion, ApiError> {
        if int_in("best_of", self.best_of, 1, 20)?.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid_param("best_of", "best_of other than 1 is not supported"));
        }
        let mut common = self.sampling.params(n_vocab, timeouts)?;
        common.max_tokens = Some(common.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
        let prompts = self.prompt.clone().ok_or_else(|| ApiError::missing("prompt"))?;
        let echo = self.echo.unwrap_or(false);
        if self.suffix.is_some() {
            if !matches!(prompts, Inputs::Texts(_)) {
                return Err(ApiError::invalid_param("suffix", "suffix needs a text prompt, the code before the gap"));
            }
            if echo {
                return Err(ApiError::invalid_param("suffix", "suffix cannot be combined with echo"));
            }
        }
        Ok(CheckedCompletion {
            prompts,
            common,
            echo,
            logprobs: int_in("logprobs", self.logprobs, 0, 5)?.map(|v| v as usize),
            grammar: self.grammar.as_ref().filter(|g| !g.is_empty()).map(|g| Constraint::Grammar(g.clone())),
            suffix: self.suffix.clone(),
        })
    }
}
