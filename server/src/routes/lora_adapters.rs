//! llama-server's `GET /lora-adapters` (a model's LoRA adapters with their global scales) and
//! `POST /lora-adapters` (new global scales: the listed adapters at theirs, the others at 0),
//! for the model named by the `model` query parameter, or the only generating model. The body
//! of a POST is llama-server's array of `{"id", "scale"}`, or an object with `model` and
//! `adapters`.

use std::sync::Arc;

use hyper::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::adapters::LoraChoice;
use crate::error::ApiError;
use crate::http::{ok_json, typed_at, Body};
use crate::registry::ModelEntry;
use crate::AppState;

/// The `model` query parameter of `query` (percent-decoded), if any.
pub fn model_in_query(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "model").map(|(_, v)| v.into_owned())
}

fn entry(state: &AppState, model: Option<&str>) -> Result<Arc<ModelEntry>, ApiError> {
    state.registry.named_or_only(model, true)
}

/// A named model's adapters (a guard model's too, whose prompts a request's `lora` may choose
/// them for), or the only generating model's.
pub fn list(state: &AppState, model: Option<&str>) -> Result<Response<Body>, ApiError> {
    let entry = match model {
        Some(id) => state.registry.get(id)?,
        None => entry(state, None)?,
    };
    Ok(ok_json(&entry.adapters.describe()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetRequest {
    #[serde(default)]
    model: Option<String>,
    adapters: Vec<LoraChoice>,
}

pub fn set(state: &AppState, model: Option<&str>, body: Value) -> Result<Response<Body>, ApiError> {
    let (model, choices) = match body {
        Value::Array(_) => (model.map(str::to_string), typed_at::<Vec<LoraChoice>>(body, "adapters")?),
        Value::Object(_) => {
            let r: SetRequest = typed_at(body, "")?;
            (r.model.or(model.map(str::to_string)), r.adapters)
        }
        _ => return Err(ApiError::invalid("the request body must be an array of {\"id\", \"scale\"} or an object with `adapters`")),
    };
    let entry = entry(state, model.as_deref())?;
    if entry.adapters.is_empty() {
        return Err(ApiError::invalid_param("model", format!("the model `{}` has no LoRA adapters (start it with --lora FILE)", entry.id)));
    }
    entry.adapters.set(&choices)?;
    Ok(ok_json(&json!({"success": true})))
}
