//! `POST /v1/guard`, `/v1/guard/scan`, `/v1/guard/batch` (guard.md §6): the request checked
//! with the contract's messages, evaluated on the guard model's engine thread, answered with
//! `flagged`, `verdicts` (and `highest_risk`, or `results`), `latency_ms` and the audit fields
//! (`audit`: model, its sha256, format, policy, thresholds).

use std::sync::Arc;
use std::time::Instant;

use engine::guard::{conversation, CustomRisk, GuardInput, GuardRequest, Thresholds, MAX_BATCH};
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::audit::{self, Applied};
use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::registry::ModelEntry;
use crate::requests::guard::{GuardBody, PolicyFields, ThresholdMap};
use crate::AppState;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardRoute {
    Evaluate,
    Scan,
    Batch,
}

pub async fn handle(state: &Arc<AppState>, route: GuardRoute, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let start = Instant::now();
    state.metrics.guard_requests.inc();
    let result = evaluate(state, route, body, start).await;
    state.metrics.guard_latency_ms.observe(start.elapsed().as_secs_f64() * 1e3);
    result
}

async fn evaluate(state: &Arc<AppState>, route: GuardRoute, body: Map<String, Value>, start: Instant) -> Result<Response<Body>, ApiError> {
    let body = GuardBody::from_body(&Value::Object(body))?;
    let id = body.model_id()?;
    let entry = state.registry.guard(Some(&id), "model")?;
    let customs = custom_risks(&body, route)?;
    let applied = applied(state, &body.policy, &customs)?;
    let template = GuardRequest {
        input: GuardInput::default(),
        risks: risks(&body, route)?,
        customs,
        format: body.format.clone(),
        think: body.think.unwrap_or(false),
        thresholds: applied.thresholds.clone(),
        lora: entry.adapters.resolve_chosen(body.lora.as_deref())?,
    };
    let (out, verdicts) = match route {
        GuardRoute::Batch => {
            let inputs: Vec<GuardInput> =
                body.inputs.iter().flatten().enumerate().map(|(i, v)| input(v, &format!("inputs[{i}]"))).collect::<Result<_, _>>()?;
            if inputs.len() > MAX_BATCH {
                return Err(engine::guard::GuardError::BatchTooLarge { max: MAX_BATCH }.into());
            }
            let requests = inputs.into_iter().map(|i| template.with_input(i)).collect();
            let results = entry.guard_queue.evaluate(&entry.worker, requests).await?;
            let items: Vec<Value> = results
                .iter()
                .enumerate()
                .map(|(index, r)| json!({"index": index, "flagged": r.flagged, "verdicts": r.verdicts}))
                .collect();
            (json!({"results": items}), results.into_iter().flat_map(|r| r.verdicts).collect())
        }
        GuardRoute::Evaluate | GuardRoute::Scan => {
            let request = template.with_input(input(body.input.as_ref().unwrap_or(&Value::Null), "input")?);
            let scan = route == GuardRoute::Scan;
            entry
                .worker
                .run(move |engine, cancel| {
                    let ev = engine.guard.clone().expect("guard entries have an evaluator");
                    if scan {
                        let r = ev.scan_cancellable(&request, cancel.flag())?;
                        Ok((json!(r), r.verdicts))
                    } else {
                        let r = ev.evaluate_cancellable(&request, cancel.flag())?;
                        Ok::<_, engine::guard::GuardError>((json!(r), r.verdicts))
                    }
                })
                .await??
        }
    };
    let latency_ms = start.elapsed().as_secs_f64() * 1e3;
    state.metrics.record_verdicts(&verdicts, latency_ms);
    let mut response = audit::fields(&id, entry.digest.as_ref(), &format_label(&entry, body.format.as_deref()), &applied);
    response.extend(out.as_object().cloned().unwrap_or_default());
    response.insert("latency_ms".into(), json!(latency_ms));
    Ok(ok_json(&Value::Object(response)))
}

/// `risk_definitions: {name: definition}` (`/v1/guard` only): risks of the caller's own, judged
/// where `risks` names them (the evaluator refuses one that `risks` leaves out).
fn custom_risks(body: &GuardBody, route: GuardRoute) -> Result<Vec<CustomRisk>, ApiError> {
    let Some(defs) = &body.risk_definitions else { return Ok(Vec::new()) };
    if route != GuardRoute::Evaluate {
        return Err(ApiError::invalid_param("risk_definitions", "custom risks are judged by POST /v1/guard"));
    }
    defs.0
        .iter()
        .map(|(name, def)| {
            let def = def
                .as_str()
                .ok_or_else(|| ApiError::invalid_param("risk_definitions", format!("the definition of {name} must be a string")))?;
            Ok(CustomRisk::new(name, def)?)
        })
        .collect()
}

/// The prompt format a request was judged in, as the evaluator names it
/// (`Evaluator::format_label`).
pub fn format_label(entry: &ModelEntry, requested: Option<&str>) -> String {
    entry.evaluator.as_ref().map_or_else(String::new, |ev| ev.format_label(requested))
}

/// The policy (`policy: "name"`, else the server's default policy) and thresholds
/// (`thresholds`, over the policy's) a guard request is judged by.
pub fn applied(state: &AppState, fields: &PolicyFields, customs: &[CustomRisk]) -> Result<Applied, ApiError> {
    let requested = fields.policy.as_ref().map(|p| p.0.as_str());
    let policy = state.policies.select(requested).map_err(|m| ApiError::invalid_param("policy", m))?;
    Ok(Applied::new(policy, thresholds(fields, customs)?))
}

/// `thresholds: {risk: p}` (each a risk of the contract or one of the request's custom risks,
/// p from 0 to 1): a risk with one is unsafe exactly when its `risk_probability` reaches it
/// (`engine::guard::policy`, applied by the evaluator).
pub fn thresholds(fields: &PolicyFields, customs: &[CustomRisk]) -> Result<Thresholds, ApiError> {
    let bad = |m: String| ApiError::invalid_param("thresholds", m);
    let Some(ThresholdMap(map)) = &fields.thresholds else { return Ok(Thresholds::default()) };
    let mut pairs = Vec::with_capacity(map.len());
    for (risk, t) in map {
        let t = t.as_f64().ok_or_else(|| bad(format!("the threshold of {risk} must be a number from 0 to 1")))?;
        pairs.push((risk.as_str(), t));
    }
    Thresholds::parse_with_custom(pairs, customs).map_err(|e| bad(e.0))
}

fn risks(body: &GuardBody, route: GuardRoute) -> Result<Vec<String>, ApiError> {
    match &body.risks {
        None => Ok(Vec::new()),
        Some(_) if route == GuardRoute::Scan => Err(ApiError::invalid_param("risks", "a scan judges the 9 harm risks: leave risks out")),
        Some(risks) => Ok(risks.clone()),
    }
}

/// `{user, assistant?, context?}`, or `{messages, context?}` (an OpenAI chat conversation,
/// `engine::guard::conversation`); an absent or empty `user` is left for the evaluator to
/// refuse with the contract's message.
fn input(v: &Value, name: &str) -> Result<GuardInput, ApiError> {
    let field = |key: &str| -> Result<Option<String>, ApiError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::invalid_param(name, format!("{name}.{key} must be a string"))),
        }
    };
    match v {
        Value::Object(_) => {}
        Value::Null => return Err(ApiError::invalid_param(name, "input.user is required")),
        _ => return Err(ApiError::invalid_param(name, format!("{name} must be an object with user, assistant, context"))),
    }
    let mut input = match v.get("messages") {
        None | Some(Value::Null) => {
            let mut input = GuardInput::new(field("user")?.unwrap_or_default());
            input.assistant = field("assistant")?;
            input
        }
        Some(Value::Array(messages)) => {
            if field("user")?.is_some() || field("assistant")?.is_some() {
                return Err(ApiError::invalid_param(
                    name,
                    format!("{name}.messages replaces {name}.user and {name}.assistant: give one or the other"),
                ));
            }
            conversation::from_messages(messages).map_err(|e| {
                ApiError::invalid_param(&format!("{name}.messages"), e.to_string().replacen("input.", &format!("{name}."), 1))
            })?
        }
        Some(_) => {
            return Err(ApiError::invalid_param(&format!("{name}.messages"), format!("{name}.messages must be an array of chat messages")))
        }
    };
    input.context = field("context")?;
    Ok(input)
}

/// `GET /v1/guard/policies`: the server's policy presets (`--guard-policy FILE`), each with its
/// thresholds, and the one a request that names none is judged by.
pub fn policies(state: &AppState) -> Response<Body> {
    let p = &state.policies;
    let data: Vec<Value> = p
        .iter()
        .map(|p| json!({"object": "guard.policy", "name": p.name, "description": p.description, "thresholds": p.thresholds}))
        .collect();
    ok_json(&json!({"object": "list", "default": p.default_policy().map(|d| &d.name), "data": data}))
}
