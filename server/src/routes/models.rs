//! `GET /v1/models`, `GET /v1/models/{id}`, `DELETE /v1/models/{id}` (unloads the model: requests
//! already running finish, later ones get 404). The transcription backend, when there is one, is
//! listed too; it belongs to the application that built the server and is not unloaded here.

use std::sync::Arc;

use hyper::Response;
use serde_json::json;

use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::AppState;

pub fn list(state: &Arc<AppState>) -> Result<Response<Body>, ApiError> {
    let mut data: Vec<_> = state.registry.list().iter().map(|m| m.describe()).collect();
    data.extend(state.transcription_model());
    Ok(ok_json(&json!({"object": "list", "data": data})))
}

pub fn get(state: &Arc<AppState>, id: &str) -> Result<Response<Body>, ApiError> {
    if let Some(model) = state.transcription_model().filter(|m| m["id"] == id) {
        return Ok(ok_json(&model));
    }
    Ok(ok_json(&state.registry.get(id)?.describe()))
}

pub fn delete(state: &Arc<AppState>, id: &str) -> Result<Response<Body>, ApiError> {
    if state.transcription_model_id() == Some(id) {
        return Err(ApiError::invalid_param("model", format!("`{id}` is the transcription backend, which cannot be unloaded")));
    }
    let entry = state.registry.remove(id)?;
    tracing::info!("unloaded model {}", entry.id);
    Ok(ok_json(&json!({"id": entry.id, "object": "model", "deleted": true})))
}
