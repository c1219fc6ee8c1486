//! Reading and range-checking the request fields chat and text completions share: sampling,
//! length, stop strings, `n`, `seed`, streaming options. Every violation is a 400 naming the
//! field; unknown fields are ignored (and logged at debug level).

use engine::sampling::{SamplingError, SamplingParams};
use engine::tokenizer::TokenId;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The largest `n` accepted (OpenAI's bound).
pub const MAX_N: usize = 128;

/// The fields shared by `/v1/chat/completions` and `/v1/completions`, checked.
#[derive(Debug, Clone)]
pub struct CommonParams {
    pub sampling: SamplingParams,
    /// `max_completion_tokens`, else `max_tokens`; `None` = until the context is full.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
}

/// The optional end-user id (`user`): accepted and unused, but it must be a string.
pub fn check_user(body: &Map<String, Value>) -> Result<(), ApiError> {
    match body.get("user") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(ApiError::invalid_param("user", "user must be a string")),
    }
}

pub fn model_id(body: &Map<String, Value>) -> Result<String, ApiError> {
    check_user(body)?;
    match body.get("model") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        None | Some(Value::Null) => Err(ApiError::missing("model")),
        Some(_) => Err(ApiError::invalid_param("model", "model must be a non-empty string")),
    }
}

fn number(body: &Map<String, Value>, name: &str) -> Result<Option<f64>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(ApiError::invalid_param(name, format!("{name} must be a number"))),
    }
}

fn in_range(body: &Map<String, Value>, name: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match number(body, name)? {
        None => Ok(None),
        Some(v) if (lo..=hi).contains(&v) => Ok(Some(v as f32)),
        Some(v) => Err(ApiError::invalid_param(name, format!("{name} must be between {lo} and {hi}, got {v}"))),
    }
}

/// A non-negative integer field at most `max`.
pub fn integer(body: &Map<String, Value>, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
            _ => Err(ApiError::invalid_param(name, format!("{name} must be an integer between {min} and {max}, got {n}"))),
        },
        Some(_) => Err(ApiError::invalid_param(name, format!("{name} must be an integer"))),
    }
}

pub fn boolean(body: &Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid_param(name, format!("{name} must be a boolean"))),
    }
}

fn seed(body: &Map<String, Value>) -> Result<u64, ApiError> {
    match body.get("seed") {
        None | Some(Value::Null) => Ok(rand_seed()),
        // the full int64 range: negative seeds are as good as positive ones
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|v| v as u64))
            .ok_or_else(|| ApiError::invalid_param("seed", format!("seed must be a 64-bit integer, got {n}"))),
        Some(_) => Err(ApiError::invalid_param("seed", "seed must be an integer")),
    }
}

/// A seed for requests without one: different every time.
fn rand_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed)
}

fn stop(body: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let bad = || ApiError::invalid_param("stop", "stop must be a string or an array of at most 4 non-empty strings");
    match body.get("stop") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if items.len() <= 4 => {
            items.iter().map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string).ok_or_else(bad)).collect()
        }
        Some(_) => Err(bad()),
    }
}

fn logit_bias(body: &Map<String, Value>, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("logit_bias", m);
    match body.get("logit_bias") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                let id: u32 = k.trim().parse().map_err(|_| bad(format!("logit_bias keys must be token ids, got {k:?}")))?;
                if id as usize >= n_vocab {
                    return Err(bad(format!("logit_bias token {id} is outside the vocabulary of {n_vocab}")));
                }
                match v.as_f64() {
                    Some(b) if (-100.0..=100.0).contains(&b) => Ok((id, b as f32)),
                    _ => Err(bad(format!("logit_bias values must be numbers between -100 and 100, got {v}"))),
                }
            })
            .collect(),
        Some(_) => Err(bad("logit_bias must be an object of token id -> bias".into())),
    }
}

/// Reads the shared fields. `max_tokens_default` applies when neither length field is given.
pub fn common(body: &Map<String, Value>, n_vocab: usize) -> Result<CommonParams, ApiError> {
    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: in_range(body, "temperature", 0.0, 2.0)?.unwrap_or(defaults.temperature),
        top_p: in_range(body, "top_p", 0.0, 1.0)?.unwrap_or(defaults.top_p),
        top_k: integer(body, "top_k", 0, n_vocab as u64)?.map_or(defaults.top_k, |v| v as usize),
        min_p: in_range(body, "min_p", 0.0, 1.0)?.unwrap_or(defaults.min_p),
        repetition_penalty: match in_range(body, "repetition_penalty", 0.0, 10.0)? {
            Some(v) if v <= 0.0 => return Err(ApiError::invalid_param("repetition_penalty", "repetition_penalty must be greater than 0")),
            v => v.unwrap_or(defaults.repetition_penalty),
        },
        presence_penalty: in_range(body, "presence_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        frequency_penalty: in_range(body, "frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        logit_bias: logit_bias(body, n_vocab)?,
        seed: seed(body)?,
    };
    sampling.validate(n_vocab).map_err(|e| match e {
        SamplingError::OutOfRange { name, .. } => ApiError::invalid_param(name, e.to_string()),
        other => ApiError::invalid(other.to_string()),
    })?;
    let max_tokens = match integer(body, "max_completion_tokens", 1, u32::MAX as u64)? {
        Some(v) => Some(v as usize),
        None => integer(body, "max_tokens", 1, u32::MAX as u64)?.map(|v| v as usize),
    };
    let stream = boolean(body, "stream")?.unwrap_or(false);
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(_) if !stream => return Err(ApiError::invalid_param("stream_options", "stream_options is only allowed when stream is true")),
        Some(Value::Object(o)) => boolean(o, "include_usage")
            .map_err(|_| ApiError::invalid_param("stream_options", "stream_options.include_usage must be a boolean"))?
            .unwrap_or(false),
        Some(_) => return Err(ApiError::invalid_param("stream_options", "stream_options must be an object")),
    };
    Ok(CommonParams {
        sampling,
        max_tokens,
        stop: stop(body)?,
        n: integer(body, "n", 1, MAX_N as u64)?.map_or(1, |v| v as usize),
        stream,
        include_usage,
    })
}

/// The inputs of `/v1/completions` (`prompt`) or `/v1/embeddings` (`input`): texts, or token
/// ids (OpenAI's shapes never mix the two).
#[derive(Clone, Debug, PartialEq)]
pub enum Inputs {
    Texts(Vec<String>),
    Tokens(Vec<Vec<TokenId>>),
}

impl Inputs {
    pub fn len(&self) -> usize {
        match self {
            Inputs::Texts(t) => t.len(),
            Inputs::Tokens(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Field `name` in any of OpenAI's four shapes: a string, strings, token ids, or arrays of token
/// ids. Missing, empty or mixed: 400 naming the field; every token array is non-empty.
pub fn inputs(body: &Map<String, Value>, name: &str) -> Result<Inputs, ApiError> {
    let bad = |m: String| ApiError::invalid_param(name, m);
    let tokens = |v: &Value| -> Result<Vec<TokenId>, ApiError> {
        let ids: Option<Vec<TokenId>> =
            v.as_array().and_then(|a| a.iter().map(|t| t.as_u64().and_then(|t| TokenId::try_from(t).ok())).collect());
        ids.filter(|i| !i.is_empty()).ok_or_else(|| bad(format!("token ids in {name} must be non-empty arrays of non-negative integers")))
    };
    match body.get(name) {
        None | Some(Value::Null) => Err(ApiError::missing(name)),
        Some(Value::String(s)) => Ok(Inputs::Texts(vec![s.clone()])),
        Some(Value::Array(items)) if items.is_empty() => Err(bad(format!("{name} must not be empty"))),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            Ok(Inputs::Texts(items.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect()))
        }
        Some(v @ Value::Array(items)) if items.iter().all(Value::is_number) => Ok(Inputs::Tokens(vec![tokens(v)?])),
        Some(Value::Array(items)) if items.iter().all(Value::is_array) => {
            Ok(Inputs::Tokens(items.iter().map(tokens).collect::<Result<_, _>>()?))
        }
        Some(_) => Err(bad(format!("{name} must be a string, an array of strings, an array of token ids or an array of such arrays"))),
    }
}
