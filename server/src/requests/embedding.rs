//! The `/v1/embeddings` request: inputs (at most [`MAX_INPUTS`], no text empty), the encoding
//! and the dimensions to cut the vectors to.

use serde::Deserialize;

use super::inputs::Inputs;
use super::sampling::int_in;
use super::ModelName;
use crate::error::ApiError;

/// The most inputs one request may carry (OpenAI's bound).
pub const MAX_INPUTS: usize = 2048;

#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    input: Option<Inputs>,
    #[serde(default)]
    encoding_format: Option<EncodingFormat>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    dimensions: Option<u64>,
    /// The end user: accepted and unused.
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum EncodingFormat {
    Float,
    Base64,
}

impl EmbeddingRequest {
    /// The model the request names (null or left out: `model is required`).
    pub fn model_id(&self) -> Result<String, ApiError> {
        self.model.as_ref().map(|m| m.0.clone()).ok_or_else(|| ApiError::missing("model"))
    }

    /// The inputs, checked.
    pub fn inputs(&self) -> Result<Inputs, ApiError> {
        let inputs = self.input.clone().ok_or_else(|| ApiError::missing("input"))?;
        if inputs.len() > MAX_INPUTS {
            return Err(ApiError::invalid_param("input", format!("input has {} items; at most {MAX_INPUTS}", inputs.len())));
        }
        if matches!(&inputs, Inputs::Texts(t) if t.iter().any(String::is_empty)) {
            return Err(ApiError::invalid_param("input", "input items must not be empty"));
        }
        Ok(inputs)
    }

    /// Whether the vectors go out as base64 (little-endian f32) rather than float arrays.
    pub fn base64(&self) -> bool {
        self.encoding_format == Some(EncodingFormat::Base64)
    }

    /// The dimensions to cut each vector to, for a model of `n_embd`.
    pub fn dimensions(&self, n_embd: usize) -> Result<Option<usize>, ApiError> {
        Ok(int_in("dimensions", self.dimensions, 1, n_embd as u64)?.map(|d| d as usize))
    }
}
