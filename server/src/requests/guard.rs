//! The guard requests, typed: `/v1/guard`, `/scan` and `/batch` ([`GuardBody`]),
//! `/v1/moderations` ([`ModerationBody`]), and a chat completion's `guard` field
//! ([`GuardrailsField`]); the `policy` and `thresholds` all three take ([`PolicyFields`]). The
//! inputs keep the contract's shapes (`{user, assistant, context}` or `{messages}`, texts or
//! content parts) and messages (`input.user is required`), read by the routes.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{nested_error, parse, present_model, ModelName};
use crate::adapters::LoraChoice;
use crate::error::ApiError;

/// `policy` (the name of a preset) and `thresholds` (risk name -> probability from 0 to 1).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct PolicyFields {
    #[serde(default)]
    pub policy: Option<PolicyName>,
    #[serde(default)]
    pub thresholds: Option<ThresholdMap>,
}

#[derive(Debug, Clone)]
pub struct PolicyName(pub String);

impl<'de> Deserialize<'de> for PolicyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PolicyName, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(PolicyName(s)),
            _ => Err(D::Error::custom("must be the name of a policy")),
        }
    }
}

/// `thresholds` as sent: each value is checked with the risk it names (`routes::guard`).
#[derive(Debug, Default, Clone)]
pub struct ThresholdMap(pub Map<String, Value>);

impl<'de> Deserialize<'de> for ThresholdMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ThresholdMap, D::Error> {
        match Value::deserialize(d)? {
            Value::Object(m) => Ok(ThresholdMap(m)),
            _ => Err(D::Error::custom("must be an object of risk names to numbers from 0 to 1")),
        }
    }
}

/// The body of `/v1/guard`, `/v1/guard/scan` and `/v1/guard/batch`.
#[derive(Debug, Deserialize)]
pub struct GuardBody {
    #[serde(default)]
    model: Option<ModelName>,
    /// `{user, assistant?, context?}` or `{messages, context?}` (`/v1/guard`, `/scan`).
    #[serde(default)]
    pub input: Option<Value>,
    /// The batch's inputs, each shaped as `input`.
    #[serde(default)]
    pub inputs: Option<Vec<Value>>,
    #[serde(default)]
    pub risks: Option<Vec<String>>,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub think: Option<bool>,
    /// Custom risks: name -> definition (`/v1/guard` only).
    #[serde(default)]
    pub risk_definitions: Option<RiskDefinitions>,
    /// The guard model's adapters its prompts run with (`None`: their start scales).
    #[serde(default)]
    pub lora: Option<Vec<LoraChoice>>,
    /// The end user: accepted and unused.
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
    #[serde(skip)]
    pub policy: PolicyFields,
}

#[derive(Debug, Clone)]
pub struct RiskDefinitions(pub Map<String, Value>);

impl<'de> Deserialize<'de> for RiskDefinitions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RiskDefinitions, D::Error> {
        match Value::deserialize(d)? {
            Value::Object(m) => Ok(RiskDefinitions(m)),
            _ => Err(D::Error::custom("must be an object of risk names to definitions")),
        }
    }
}

impl GuardBody {
    pub fn from_body(body: &Value) -> Result<GuardBody, ApiError> {
        let mut request: GuardBody = parse(body)?;
        request.policy = parse(body)?;
        Ok(request)
    }

    pub fn model_id(&self) -> Result<String, ApiError> {
        self.model.as_ref().map(|m| m.0.clone()).ok_or_else(|| ApiError::missing("model"))
    }
}

/// The body of `/v1/moderations`.
#[derive(Debug, Deserialize)]
pub struct ModerationBody {
    /// A guard model's id (default, when left out: the first guard the server loaded).
    #[serde(default, deserialize_with = "present_model")]
    pub model: Option<ModelName>,
    /// A string, strings, or content parts (read by the route).
    #[serde(default)]
    pub input: Option<Value>,
    /// The guard model's adapters its prompts run with (`None`: their start scales).
    #[serde(default)]
    pub lora: Option<Vec<LoraChoice>>,
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
    #[serde(skip)]
    pub policy: PolicyFields,
}

impl ModerationBody {
    pub fn from_body(body: &Value) -> Result<ModerationBody, ApiError> {
        let mut request: ModerationBody = parse(body)?;
        request.policy = parse(body)?;
        Ok(request)
    }
}

/// A chat completion's `guard` field: which sides to guard, with which guard model, risks,
/// policy and windows.
#[derive(Debug, Default, Clone)]
pub struct GuardrailsField {
    pub model: Option<String>,
    pub input: Option<bool>,
    pub output: Option<bool>,
    pub risks: Option<Vec<String>>,
    pub every: Option<u64>,
    pub context: Option<u64>,
    pub stream_first: Option<bool>,
    pub policy: PolicyFields,
}

#[derive(Deserialize)]
struct GuardrailsShape {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input: Option<bool>,
    #[serde(default)]
    output: Option<bool>,
    #[serde(default)]
    risks: Option<Vec<String>>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    every: Option<u64>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    context: Option<u64>,
    #[serde(default)]
    stream_first: Option<bool>,
}

const GUARDRAIL_FIELDS: [&str; 9] = ["model", "input", "output", "risks", "thresholds", "policy", "every", "context", "stream_first"];

impl<'de> Deserialize<'de> for GuardrailsField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GuardrailsField, D::Error> {
        let value = Value::deserialize(d)?;
        let Value::Object(map) = &value else {
            return Err(D::Error::custom("must be an object: {input, output, risks, thresholds, policy, every, context, stream_first}"));
        };
        if let Some(k) = map.keys().find(|k| !GUARDRAIL_FIELDS.contains(&k.as_str())) {
            return Err(D::Error::custom(format!("unknown field guard.{k} (known: {})", GUARDRAIL_FIELDS.join(", "))));
        }
        let shape: GuardrailsShape = serde_path_to_error::deserialize(&value).map_err(|e| D::Error::custom(nested_error(e)))?;
        let policy: PolicyFields = serde_path_to_error::deserialize(&value).map_err(|e| D::Error::custom(nested_error(e)))?;
        Ok(GuardrailsField {
            model: shape.model,
            input: shape.input,
            output: shape.output,
            risks: shape.risks,
            every: shape.every,
            context: shape.context,
            stream_first: shape.stream_first,
            policy,
        })
    }
}
