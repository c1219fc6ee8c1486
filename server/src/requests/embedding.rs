//! The `/v1/embeddings` request: inputs (at most [`MAX_INPUTS`], no text empty), the encoding
//! and the dimensions to cut the vectors to; llama-server's `/embedding` request: `content` or
//! `input`, and `embd_normalize`.

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

/// llama-server's `/embedding` request.
#[derive(Debug, Deserialize)]
pub struct NativeEmbeddingRequest {
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    content: Option<Inputs>,
    #[serde(default)]
    input: Option<Inputs>,
    /// -1: none; 0: the largest magnitude scaled to 32760 (int16's range); 1: taxicab; 2:
    /// Euclidean (the default); p > 2: the p-norm.
    #[serde(default)]
    embd_normalize: Option<i64>,
}

/// How a vector is scaled (llama.cpp's `common_embd_normalize`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EmbdNorm {
    None,
    /// The largest magnitude becomes 32760.
    MaxAbs,
    /// To unit p-norm.
    P(i32),
}

impl EmbdNorm {
    /// Scales `v` (a zero vector stays zero), the sums in f64 as llama.cpp takes them.
    pub fn apply(self, v: &mut [f32]) {
        let sum = match self {
            EmbdNorm::None => return,
            EmbdNorm::MaxAbs => v.iter().fold(0.0f64, |m, &x| m.max(f64::from(x.abs()))) / 32760.0,
            EmbdNorm::P(2) => v.iter().map(|&x| f64::from(x * x)).sum::<f64>().sqrt(),
            EmbdNorm::P(p) => v.iter().map(|&x| f64::from(x.abs()).powi(p)).sum::<f64>().powf(1.0 / f64::from(p)),
        };
        let norm = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
        v.iter_mut().for_each(|x| *x *= norm);
    }
}

impl NativeEmbeddingRequest {
    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.0.as_str())
    }

    /// The inputs (`input` before `content`, as llama-server reads them) and the field they
    /// came in, checked as `/v1/embeddings` checks them.
    pub fn inputs(&self) -> Result<(Inputs, &'static str), ApiError> {
        let (inputs, param) = match (&self.input, &self.content) {
            (Some(i), _) => (i.clone(), "input"),
            (None, Some(c)) => (c.clone(), "content"),
            (None, None) => return Err(ApiError::missing("content")),
        };
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return Err(ApiError::invalid_param(param, format!("{param} must hold 1 to {MAX_INPUTS} inputs, got {}", inputs.len())));
        }
        if matches!(&inputs, Inputs::Texts(t) if t.iter().any(String::is_empty)) {
            return Err(ApiError::invalid_param(param, format!("{param} items must not be empty")));
        }
        Ok((inputs, param))
    }

    pub fn norm(&self) -> Result<EmbdNorm, ApiError> {
        match self.embd_normalize.unwrap_or(2) {
            -1 => Ok(EmbdNorm::None),
            0 => Ok(EmbdNorm::MaxAbs),
            p @ 1..=64 => Ok(EmbdNorm::P(p as i32)),
            p => Err(ApiError::invalid_param(
                "embd_normalize",
                format!("embd_normalize must be -1 (none), 0 (int16 range) or a p-norm's p from 1 to 64, got {p}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_scale_as_llama_cpp_normalises_them() {
        let scaled = |norm: EmbdNorm| {
            let mut v = vec![3.0f32, -4.0];
            norm.apply(&mut v);
            v
        };
        assert_eq!(scaled(EmbdNorm::None), [3.0, -4.0]);
        assert_eq!(scaled(EmbdNorm::P(2)), [0.6, -0.8]);
        // one factor, 1 / sum rounded to f32, times each value (as llama.cpp scales)
        let seventh = (1.0f64 / 7.0) as f32;
        assert_eq!(scaled(EmbdNorm::P(1)), [3.0 * seventh, -4.0 * seventh]);
        assert_eq!(scaled(EmbdNorm::MaxAbs), [24570.0, -32760.0]);
        let p3 = scaled(EmbdNorm::P(3));
        assert!((p3[0].abs().powi(3) + p3[1].abs().powi(3) - 1.0).abs() < 1e-6, "{p3:?}");
        let mut zero = vec![0.0f32; 3];
        EmbdNorm::P(2).apply(&mut zero);
        assert_eq!(zero, [0.0; 3]);
    }
}
