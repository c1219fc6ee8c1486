//! llama-server's `POST /infill` request: the code around a gap (`input_prefix`,
//! `input_suffix`), other files for context (`input_extra`), the start of the middle (`prompt`),
//! `n_predict` (llama-server's name for the most tokens to write; -1: until the context is
//! full; 0: read the prompt into the cache and write nothing), the line limits an editor sets
//! (`n_indent`, `t_max_predict_ms`), `response_fields` and the shared sampling fields.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::sampling::{CommonParams, SamplingRequest, Timeouts};
use super::{parse, ModelName};
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
pub struct InfillRequest {
    /// Needed when several models generate.
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    input_prefix: String,
    #[serde(default)]
    input_suffix: String,
    #[serde(default)]
    input_extra: Vec<ExtraFile>,
    #[serde(default)]
    prompt: String,
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
    #[serde(skip)]
    sampling: SamplingRequest,
}

/// Another file given for context.
#[derive(Debug, Deserialize)]
struct ExtraFile {
    /// llama-server's default when left out.
    #[serde(default = "default_filename")]
    filename: String,
    text: String,
}

fn default_filename() -> String {
    "tmp".into()
}

/// An infill request, checked.
pub struct CheckedInfill {
    pub prefix: String,
    pub suffix: String,
    pub middle_start: String,
    /// `(filename, text)` of each other file, in order.
    pub extra: Vec<(String, String)>,
    pub common: CommonParams,
    pub min_indent: usize,
    pub line_time_limit: Option<Duration>,
    pub response_fields: Vec<String>,
}

impl InfillRequest {
    pub fn from_body(body: &Value) -> Result<InfillRequest, ApiError> {
        let mut request: InfillRequest = parse(body)?;
        request.sampling = parse(body)?;
        Ok(request)
    }

    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.0.as_str())
    }

    /// The request checked for a model of `n_vocab` tokens: `n_predict` (-1, 0, or more) is the
    /// most tokens to write, else `max_tokens`.
    pub fn check(self, n_vocab: usize, timeouts: &Timeouts) -> Result<CheckedInfill, ApiError> {
        let mut common = self.sampling.params(n_vocab, timeouts)?;
        if common.n != 1 {
            return Err(ApiError::invalid_param("n", "infill gives one completion: n must be 1"));
        }
        match self.n_predict {
            Some(n) if n < -1 => {
                return Err(ApiError::invalid_param("n_predict", format!("n_predict must be -1 (no limit) or at least 0, got {n}")))
            }
            Some(-1) => common.max_tokens = None,
            Some(n) => common.max_tokens = Some(n as usize),
            None => {}
        }
        let extra = self.input_extra.into_iter().map(|f| (f.filename, f.text)).collect();
        Ok(CheckedInfill {
            prefix: self.input_prefix,
            suffix: self.input_suffix,
            middle_start: self.prompt,
            extra,
            common,
            min_indent: self.n_indent as usize,
            line_time_limit: (self.t_max_predict_ms > 0).then(|| Duration::from_millis(self.t_max_predict_ms as u64)),
            response_fields: self.response_fields,
        })
    }
}
