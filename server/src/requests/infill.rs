//! llama-server's `POST /infill` request: the code around a gap (`input_prefix`,
//! `input_suffix`), other files for context (`input_extra`), the start of the middle (`prompt`),
//! llama-server's own fields (`n_predict`, `n_indent`, ...: [`LlamaFields`]) and the shared
//! sampling fields.

use serde::Deserialize;
use serde_json::Value;

use super::llama::{LlamaFields, LlamaLimits};
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
    #[serde(skip)]
    llama: LlamaFields,
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
    pub limits: LlamaLimits,
}

impl InfillRequest {
    pub fn from_body(body: &Value) -> Result<InfillRequest, ApiError> {
        let mut request: InfillRequest = parse(body)?;
        request.llama = parse(body)?;
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
        let limits = self.llama.check(&mut common)?;
        let extra = self.input_extra.into_iter().map(|f| (f.filename, f.text)).collect();
        Ok(CheckedInfill { prefix: self.input_prefix, suffix: self.input_suffix, middle_start: self.prompt, extra, common, limits })
    }
}
