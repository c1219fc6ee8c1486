//! The fields chat and text completions share (sampling, length, stop strings, `n`, `seed`,
//! streaming options, `user`), typed, and their checks into [`CommonParams`]. Unknown fields are
//! ignored.

use std::time::{Duration, Instant};

use engine::sampling::{DrySettings, SamplerStep, SamplingParams};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::adapters::LoraChoice;
use crate::error::ApiError;

/// The largest `n` accepted (OpenAI's bound).
pub const MAX_N: usize = 128;

/// The shared fields, checked.
#[derive(Debug, Clone)]
pub struct CommonParams {
    pub sampling: SamplingParams,
    /// `max_completion_tokens`, else `max_tokens`; `None` = until the context is full.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    /// When the request's time is up (its `timeout`, else the server's default).
    pub deadline: Option<Instant>,
    /// llama-server's `lora`: the adapters and scales this request runs with (the others
    /// off); `None`: the global scales.
    pub lora: Option<Vec<LoraChoice>>,
    /// llama-server's `timings_per_token`: each streamed piece carries its output's `timings`.
    pub timings_per_token: bool,
    /// llama-server's `return_progress`: a stream reports the reading of the prompt
    /// (`prompt_progress`).
    pub return_progress: bool,
}

/// The server's request timeouts: the default of a request that names none, and the most a
/// request may ask for (`--request-timeout`, `--max-request-timeout`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Timeouts {
    pub default: Option<Duration>,
    pub max: Option<Duration>,
}

/// The shared fields as sent.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct SamplingRequest {
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    pub top_k: Option<u64>,
    #[serde(default)]
    pub min_p: Option<f64>,
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Token id (as a string) -> bias; ids and values are checked against the vocabulary.
    #[serde(default)]
    pub logit_bias: Option<Map<String, Value>>,
    #[serde(default)]
    pub seed: Option<Seed>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    pub n: Option<u64>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    pub max_tokens: Option<u64>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// The end user: accepted and unused.
    #[serde(default)]
    pub user: Option<String>,
    /// Seconds the request may take: past them its generation ends (`length`), or it fails
    /// with 408 when no token came yet.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// llama-server's per-request adapters: `[{"id": 0, "scale": 0.5}]`.
    #[serde(default)]
    pub lora: Option<Vec<LoraChoice>>,
    /// llama-server's sampler order: names (`["top_k", "top_p", "infill"]`) or one letter
    /// each (`"kpi"`).
    #[serde(default)]
    pub samplers: Option<Samplers>,
    /// llama-server's other samplers: locally typical sampling, top-n-sigma, XTC, the dynamic
    /// temperature.
    #[serde(default)]
    pub typical_p: Option<f64>,
    #[serde(default)]
    pub top_n_sigma: Option<f64>,
    #[serde(default)]
    pub xtc_probability: Option<f64>,
    #[serde(default)]
    pub xtc_threshold: Option<f64>,
    #[serde(default)]
    pub dynatemp_range: Option<f64>,
    #[serde(default)]
    pub dynatemp_exponent: Option<f64>,
    /// llama-server's DRY penalty.
    #[serde(default)]
    pub dry_multiplier: Option<f64>,
    #[serde(default)]
    pub dry_base: Option<f64>,
    #[serde(default)]
    pub dry_allowed_length: Option<i64>,
    #[serde(default)]
    pub dry_penalty_last_n: Option<i64>,
    #[serde(default)]
    pub dry_sequence_breakers: Option<Vec<String>>,
    /// llama-server's mirostat, which this server does not have: refused unless off (0),
    /// never ignored.
    #[serde(default)]
    pub mirostat: Option<f64>,
    #[serde(default)]
    pub timings_per_token: Option<bool>,
    #[serde(default)]
    pub return_progress: Option<bool>,
    /// The API whose ranges apply (set by the route, never sent).
    #[serde(skip)]
    pub api: Api,
}

/// The API a request came in by, where the ranges of the same setting differ.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    #[default]
    OpenAi,
    /// `/v1/messages`: temperature at most 1.
    Anthropic,
}

impl Api {
    fn max_temperature(self) -> f64 {
        match self {
            Api::OpenAi => 2.0,
            Api::Anthropic => 1.0,
        }
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// `seed`: any 64-bit integer, signed or not (a negative seed is as good as a positive one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed(pub u64);

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seed, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_u64()
                .or_else(|| n.as_i64().map(|v| v as u64))
                .map(Seed)
                .ok_or_else(|| D::Error::custom(format!("must be a 64-bit integer, got {n}"))),
            _ => Err(D::Error::custom("must be an integer")),
        }
    }
}

/// `samplers`: llama-server's sampler names in order, or a string of their letters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samplers(Vec<SamplerStep>);

impl<'de> Deserialize<'de> for Samplers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Samplers, D::Error> {
        use serde::de::Error;
        let steps: Result<Vec<SamplerStep>, String> = match Value::deserialize(d)? {
            Value::String(letters) => {
                letters.chars().map(|c| SamplerStep::from_char(c).ok_or_else(|| format!("{c:?} is no sampler's letter"))).collect()
            }
            Value::Array(names) => names
                .iter()
                .map(|v| {
                    let name = v.as_str().ok_or_else(|| format!("{v} is not a sampler's name"))?;
                    SamplerStep::from_name(name).ok_or_else(|| format!("{name:?} is not a sampler of llama-server's"))
                })
                .collect(),
            _ => Err("must be an array of sampler names or a string of their letters".into()),
        };
        steps.map(Samplers).map_err(D::Error::custom)
    }
}

/// `stop`: a string or up to 4 strings, none empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stop(Vec<String>);

impl Stop {
    /// What a list of stop strings must be (the rest of a sentence about the field).
    pub const RULE: &str = "must be a string or an array of at most 4 non-empty strings";

    /// The list, when it keeps to [`Stop::RULE`].
    pub fn new(list: Vec<String>) -> Option<Stop> {
        (list.len() <= 4 && list.iter().all(|s| !s.is_empty())).then_some(Stop(list))
    }
}

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stop, D::Error> {
        use serde::de::Error;
        let list = match Value::deserialize(d)? {
            Value::String(s) => Some(vec![s]),
            Value::Array(items) => items.into_iter().map(|v| v.as_str().map(str::to_string)).collect(),
            _ => None,
        };
        list.and_then(Stop::new).ok_or_else(|| D::Error::custom(Stop::RULE))
    }
}

/// `Some(v)` when `v` is within `lo..=hi`, else the range error naming `name`.
fn in_range(name: &str, value: Option<f64>, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) if (lo..=hi).contains(&v) => Ok(Some(v as f32)),
        Some(v) => Err(ApiError::invalid_param(name, format!("{name} must be between {lo} and {hi}, got {v}"))),
    }
}

/// An integer field within `min..=max`.
pub fn int_in(name: &str, value: Option<u64>, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
    match value {
        Some(v) if !(min..=max).contains(&v) => {
            Err(ApiError::invalid_param(name, format!("{name} must be an integer between {min} and {max}, got {v}")))
        }
        v => Ok(v),
    }
}

impl SamplingRequest {
    /// The checked parameters for a model of `n_vocab` tokens, under the server's timeouts: each
    /// field checked here once, against its range in the request's API (within the engine's,
    /// which `SamplingParams::validate` keeps for its other callers).
    pub fn params(&self, n_vocab: usize, timeouts: &Timeouts) -> Result<CommonParams, ApiError> {
        let defaults = SamplingParams::default();
        let sampling = SamplingParams {
            temperature: in_range("temperature", self.temperature, 0.0, self.api.max_temperature())?.unwrap_or(defaults.temperature),
            top_p: in_range("top_p", self.top_p, 0.0, 1.0)?.unwrap_or(defaults.top_p),
            top_k: int_in("top_k", self.top_k, 0, n_vocab as u64)?.map_or(defaults.top_k, |v| v as usize),
            min_p: in_range("min_p", self.min_p, 0.0, 1.0)?.unwrap_or(defaults.min_p),
            repetition_penalty: match in_range("repetition_penalty", self.repetition_penalty, 0.0, 10.0)? {
                Some(v) if v <= 0.0 => {
                    return Err(ApiError::invalid_param("repetition_penalty", "repetition_penalty must be greater than 0"))
                }
                v => v.unwrap_or(defaults.repetition_penalty),
            },
            presence_penalty: in_range("presence_penalty", self.presence_penalty, -2.0, 2.0)?.unwrap_or(0.0),
            frequency_penalty: in_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?.unwrap_or(0.0),
            logit_bias: self.logit_bias(n_vocab)?,
            seed: self.seed.map_or_else(rand_seed, |s| s.0),
            typical_p: in_range("typical_p", self.typical_p, 0.0, 1.0)?.unwrap_or(defaults.typical_p),
            top_n_sigma: in_range("top_n_sigma", self.top_n_sigma, -100.0, 100.0)?.unwrap_or(defaults.top_n_sigma),
            xtc_probability: in_range("xtc_probability", self.xtc_probability, 0.0, 1.0)?.unwrap_or(defaults.xtc_probability),
            xtc_threshold: in_range("xtc_threshold", self.xtc_threshold, 0.0, 1.0)?.unwrap_or(defaults.xtc_threshold),
            dynatemp_range: in_range("dynatemp_range", self.dynatemp_range, 0.0, 100.0)?.unwrap_or(defaults.dynatemp_range),
            dynatemp_exponent: in_range("dynatemp_exponent", self.dynatemp_exponent, 0.0, 100.0)?.unwrap_or(defaults.dynatemp_exponent),
            dry: self.dry()?,
            order: self.samplers.as_ref().map(|s| s.0.clone()),
        };
        if self.mirostat.is_some_and(|v| v != 0.0) {
            return Err(ApiError::invalid_param("mirostat", "this server has no mirostat sampler: send mirostat 0 or leave it out"));
        }
        let max_tokens = match int_in("max_completion_tokens", self.max_completion_tokens, 1, u32::MAX as u64)? {
            Some(v) => Some(v as usize),
            None => int_in("max_tokens", self.max_tokens, 1, u32::MAX as u64)?.map(|v| v as usize),
        };
        let stream = self.stream.unwrap_or(false);
        if self.stream_options.is_some() && !stream {
            return Err(ApiError::invalid_param("stream_options", "stream_options is only allowed when stream is true"));
        }
        Ok(CommonParams {
            sampling,
            max_tokens,
            stop: self.stop.clone().unwrap_or_default().0,
            n: int_in("n", self.n, 1, MAX_N as u64)?.map_or(1, |v| v as usize),
            stream,
            include_usage: self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
            // a deadline too far to represent is no deadline
            deadline: self.timeout(timeouts)?.and_then(|t| Instant::now().checked_add(t)),
            lora: self.lora.clone(),
            timings_per_token: self.timings_per_token.unwrap_or(false),
            return_progress: self.return_progress.unwrap_or(false),
        })
    }

    /// The DRY settings, as llama-server reads them: a base below 1 is the default base, a
    /// `dry_penalty_last_n` of -1 the whole context, and the breakers a non-empty list.
    fn dry(&self) -> Result<DrySettings, ApiError> {
        let d = DrySettings::default();
        let count = |name: &str, v: Option<i64>, min: i64| match v {
            Some(v) if v < min => Err(ApiError::invalid_param(name, format!("{name} must be at least {min}, got {v}"))),
            v => Ok(v),
        };
        let breakers = match &self.dry_sequence_breakers {
            Some(b) if b.is_empty() || b.iter().any(String::is_empty) => {
                return Err(ApiError::invalid_param("dry_sequence_breakers", "dry_sequence_breakers must be a non-empty list of texts"))
            }
            Some(b) => b.clone(),
            None => d.sequence_breakers,
        };
        Ok(DrySettings {
            multiplier: in_range("dry_multiplier", self.dry_multiplier, 0.0, 100.0)?.unwrap_or(d.multiplier),
            base: in_range("dry_base", self.dry_base, f64::MIN, 100.0)?.filter(|&b| b >= 1.0).unwrap_or(d.base),
            allowed_length: count("dry_allowed_length", self.dry_allowed_length, 0)?.map_or(d.allowed_length, |v| v as usize),
            penalty_last_n: match count("dry_penalty_last_n", self.dry_penalty_last_n, -1)? {
                Some(-1) => usize::MAX,
                Some(v) => v as usize,
                None => d.penalty_last_n,
            },
            sequence_breakers: breakers,
        })
    }

    /// The request's time: its `timeout` (more than 0, at most the server's maximum), else the
    /// server's default.
    fn timeout(&self, timeouts: &Timeouts) -> Result<Option<Duration>, ApiError> {
        let Some(seconds) = self.timeout else { return Ok(timeouts.default) };
        let max = timeouts.max.map_or(f64::MAX, |m| m.as_secs_f64());
        if !(seconds > 0.0 && seconds <= max && seconds.is_finite()) {
            let bound = timeouts.max.map_or(String::new(), |m| format!(" and at most {}", m.as_secs_f64()));
            return Err(ApiError::invalid_param("timeout", format!("timeout must be a number of seconds above 0{bound}, got {seconds}")));
        }
        Duration::try_from_secs_f64(seconds)
            .map(Some)
            .map_err(|_| ApiError::invalid_param("timeout", format!("timeout must be a number of seconds above 0, got {seconds}")))
    }

    fn logit_bias(&self, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
        let bad = |m: String| ApiError::invalid_param("logit_bias", m);
        self.logit_bias
            .iter()
            .flatten()
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
            .collect()
    }
}

/// A seed for requests without one: different every time.
fn rand_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed)
}
