//! `POST /v1/embeddings`: one L2-normalised vector per input (text, or token ids), pooled as the
//! model's file says (the last token for decoders whose file names no pooling), optionally cut
//! to `dimensions` and renormalised, as float arrays or base64 little-endian f32 (the SDK default).

use std::sync::Arc;

use base64::Engine as _;
use engine::embed::{embed_ids, l2_normalize, tokenize, Pooling};
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::params::{inputs, integer, model_id, Inputs};
use crate::AppState;

/// The most inputs one request may carry (OpenAI's bound).
pub const MAX_INPUTS: usize = 2048;

/// The inputs, at most [`MAX_INPUTS`], no text empty.
fn checked_inputs(body: &Map<String, Value>) -> Result<Inputs, ApiError> {
    let inputs = inputs(body, "input")?;
    if inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid_param("input", format!("input has {} items; at most {MAX_INPUTS}", inputs.len())));
    }
    if matches!(&inputs, Inputs::Texts(t) if t.iter().any(String::is_empty)) {
        return Err(ApiError::invalid_param("input", "input items must not be empty"));
    }
    Ok(inputs)
}

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let id = model_id(&body)?;
    let entry = state.registry.get(&id)?;
    let inputs = checked_inputs(&body)?;
    let base64 = match body.get("encoding_format").and_then(|v| if v.is_null() { None } else { Some(v) }) {
        None => false,
        Some(v) if v == "float" => false,
        Some(v) if v == "base64" => true,
        Some(_) => return Err(ApiError::invalid_param("encoding_format", "encoding_format must be float or base64")),
    };
    let n_embd = entry.model.config().n_embd;
    let dimensions = integer(&body, "dimensions", 1, n_embd as u64)?.map(|d| d as usize);
    let (vectors, tokens) = entry
        .worker
        .run(move |engine, _cancel| -> Result<_, ApiError> {
            let model = &engine.model;
            let seqs = match inputs {
                Inputs::Texts(texts) => {
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    tokenize(model, &refs).map_err(|e| ApiError::invalid_param("input", e.to_string()))?
                }
                Inputs::Tokens(ids) => ids,
            };
            let pooling = match Pooling::of_model(model) {
                Ok(Pooling::None) | Err(_) => Pooling::Last,
                Ok(p) => p,
            };
            let tokens: usize = seqs.iter().map(Vec::len).sum();
            let vectors = embed_ids(model, &seqs, Some(pooling), true).map_err(|e| ApiError::invalid_param("input", e.to_string()))?;
            Ok((vectors, tokens))
        })
        .await??;
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            if let Some(d) = dimensions {
                v.truncate(d);
                l2_normalize(&mut v);
            }
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(ok_json(&json!({
        "object": "list",
        "data": data,
        "model": id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
