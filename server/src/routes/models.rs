//! `GET /v1/models`, `GET /v1/models/{id}`, `DELETE /v1/models/{id}` (unloads the model: requests
//! already running finish, later ones get 404), `POST /v1/models` (loads a model of the models
//! directory, `model_loader.rs`). Models unloaded for idleness are listed with status
//! `unloaded`. The transcription backend, when there is one, is listed too; it belongs to the
//! application that built the server and is not unloaded here.

use std::sync::Arc;

use hyper::Response;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::http::{ok_json, typed, Body};
use crate::model_loader::{self, LoadRequest};
use crate::AppState;

pub fn list(state: &Arc<AppState>) -> Result<Response<Body>, ApiError> {
    let mut data: Vec<_> = state.registry.list().iter().map(|m| m.describe()).collect();
    data.extend(state.loader.parked_models());
    data.extend(state.transcription_model());
    Ok(ok_json(&json!({"object": "list", "data": data})))
}

pub fn get(state: &Arc<AppState>, id: &str) -> Result<Response<Body>, ApiError> {
    if let Some(model) = state.transcription_model().filter(|m| m["id"] == id) {
        return Ok(ok_json(&model));
    }
    if let Some(parked) = state.loader.parked_models().into_iter().find(|m| m["id"] == id) {
        return Ok(ok_json(&parked));
    }
    Ok(ok_json(&state.registry.get(id)?.describe()))
}

pub async fn load(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: LoadRequest = typed(body)?;
    Ok(ok_json(&model_loader::load(state, request).await?))
}

pub fn delete(state: &Arc<AppState>, id: &str) -> Result<Response<Body>, ApiError> {
    if state.transcription_model_id() == Some(id) {
        return Err(ApiError::invalid_param("model", format!("`{id}` is the transcription backend, which cannot be unloaded")));
    }
    if state.loader.forget(id) {
        tracing::info!("forgot unloaded model {id}");
        return Ok(ok_json(&json!({"id": id, "object": "model", "deleted": true})));
    }
    let entry = state.registry.remove(id)?;
    tracing::info!("unloaded model {}", entry.id);
    Ok(ok_json(&json!({"id": entry.id, "object": "model", "deleted": true})))
}
