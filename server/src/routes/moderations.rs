//! `POST /v1/moderations`, OpenAI's moderation API on the guard: each input judged for the 9
//! harm risks (in one batch with the other clients' waiting requests, `guard_queue`), answered as OpenAI answers,
//! `{id, model, results: [{flagged, categories, category_scores, category_applied_input_types}]}`,
//! the categories under the risks' names and OpenAI's (`engine::guard::moderation`), the scores
//! the risks' `risk_probability`; `policy` and `thresholds: {risk: p}` decide `unsafe` by the
//! probability (the evaluator applies them, `engine::guard::policy`) and are echoed with the other audit fields (`audit`).

use std::sync::Arc;
use std::time::Instant;

use engine::guard::moderation::{categories, ModerationCategory};
use engine::guard::{GuardFamily, GuardInput, GuardRequest, MAX_BATCH};
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::audit;
use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::requests::guard::ModerationBody;
use crate::routes::generation::random_id;
use crate::routes::guard::{applied, format_label};
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let start = Instant::now();
    state.metrics.guard_requests.inc();
    let result = moderate(state, body, start).await;
    state.metrics.guard_latency_ms.observe(start.elapsed().as_secs_f64() * 1e3);
    result
}

async fn moderate(state: &Arc<AppState>, body: Map<String, Value>, start: Instant) -> Result<Response<Body>, ApiError> {
    let body = ModerationBody::from_body(&Value::Object(body))?;
    let entry = match &body.model {
        Some(id) => state.registry.guard(Some(&id.0), "model")?,
        None => state.registry.guard(None, "model")?,
    };
    let inputs = inputs(body.input.as_ref())?;
    let applied = applied(state, &body.policy, &[])?;
    let lora = entry.adapters.resolve_chosen(body.lora.as_deref())?;
    let requests = inputs.into_iter().map(|input| GuardRequest {
        input,
        thresholds: applied.thresholds.clone(),
        lora: lora.clone(),
        ..Default::default()
    });
    let items = entry.guard_queue.evaluate(&entry.worker, requests.collect()).await?;
    let family = entry.evaluator.as_ref().map_or(GuardFamily::GraniteGuardian, |ev| ev.family());
    let results: Vec<Value> = items
        .iter()
        .map(|item| {
            let cats = categories(family, &item.verdicts);
            let pick = |f: &dyn Fn(&ModerationCategory) -> Value| -> Map<String, Value> {
                cats.iter().map(|c| (c.name.to_string(), f(c))).collect()
            };
            json!({
                "flagged": item.flagged,
                "categories": pick(&|c| json!(c.flagged)),
                "category_scores": pick(&|c| json!(c.score)),
                "category_applied_input_types": pick(&|c| if c.applied { json!(["text"]) } else { json!([]) }),
            })
        })
        .collect();
    state.metrics.record_verdicts(items.iter().flat_map(|i| &i.verdicts), start.elapsed().as_secs_f64() * 1e3);
    let mut out = Map::new();
    out.insert("id".into(), json!(format!("modr-{}", random_id())));
    out.extend(audit::fields(&entry.id, entry.digest.as_ref(), &format_label(&entry, None), &applied));
    out.insert("results".into(), Value::Array(results));
    Ok(ok_json(&Value::Object(out)))
}

/// `input`: a string, an array of strings (one result each), or an array of content parts
/// (one input: its text parts joined by newlines; an image part needs a vision projector, which
/// no guard model has).
fn inputs(input: Option<&Value>) -> Result<Vec<GuardInput>, ApiError> {
    let bad = || ApiError::invalid_param("input", "input must be a string, an array of strings, or an array of content parts");
    let texts: Vec<String> = match input {
        None | Some(Value::Null) => return Err(ApiError::missing("input")),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.is_empty() => return Err(ApiError::invalid_param("input", "input must not be empty")),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => vec![content_parts(items)?],
        Some(_) => return Err(bad()),
    };
    if texts.iter().any(|t| t.trim().is_empty()) {
        return Err(ApiError::invalid_param("input", "every input must have some text"));
    }
    if texts.len() > MAX_BATCH {
        return Err(engine::guard::GuardError::BatchTooLarge { max: MAX_BATCH }.into());
    }
    Ok(texts.into_iter().map(GuardInput::new).collect())
}

fn content_parts(parts: &[Value]) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let param = format!("input[{i}]");
        match part.get("type").and_then(Value::as_str) {
            Some("text") => match part.get("text") {
                Some(Value::String(t)) => texts.push(t.as_str()),
                _ => return Err(ApiError::invalid_param(&param, format!("{param}.text must be a string"))),
            },
            Some("image_url") => {
                return Err(ApiError::invalid_param(&param, "image inputs need a vision projector for the guard model; none is loaded"))
            }
            _ => return Err(ApiError::invalid_param(&param, format!("{param}.type must be \"text\" or \"image_url\""))),
        }
    }
    Ok(texts.join("\n"))
}
