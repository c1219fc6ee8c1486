//! `POST /v1/embeddings`: one L2-normalised vector per input (text, or token ids), pooled as the
//! model's file says (the last token for decoders whose file names no pooling), optionally cut
//! to `dimensions` and renormalised, as float arrays or base64 little-endian f32 (the SDK default);
//! and llama-server's own `POST /embedding` (and `/embeddings`): the same vectors, normalised as
//! `embd_normalize` says, in its shape.

use std::sync::Arc;

use base64::Engine as _;
use engine::embed::{embed_ids, l2_normalize, tokenize, Pooling};
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::registry::ModelEntry;
use crate::requests;
use crate::requests::embedding::{EmbeddingRequest, NativeEmbeddingRequest};
use crate::requests::inputs::Inputs;
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: EmbeddingRequest = requests::parse(&Value::Object(body))?;
    let id = request.model_id()?;
    let entry = state.registry.get(&id)?;
    let inputs = request.inputs()?;
    let base64 = request.base64();
    let n_embd = entry.model.config().n_embd;
    let dimensions = request.dimensions(n_embd)?;
    let (vectors, tokens) = embed(&entry, inputs, true, "input").await?;
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

/// One vector per input (texts tokenized with their special tokens, ids as they are), pooled
/// as the model's file says (the last token when it names none), L2-normalised when
/// `normalize`; and the tokens read. `param` names the inputs in errors.
async fn embed(entry: &ModelEntry, inputs: Inputs, normalize: bool, param: &'static str) -> Result<(Vec<Vec<f32>>, usize), ApiError> {
    entry
        .worker
        .run(move |engine, _cancel| -> Result<_, ApiError> {
            let model = &engine.model;
            let seqs = match inputs {
                Inputs::Texts(texts) => {
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    tokenize(model, &refs).map_err(|e| ApiError::invalid_param(param, e.to_string()))?
                }
                Inputs::Tokens(ids) => ids,
            };
            let pooling = match Pooling::of_model(model) {
                Ok(Pooling::None) | Err(_) => Pooling::Last,
                Ok(p) => p,
            };
            let tokens: usize = seqs.iter().map(Vec::len).sum();
            let vectors = embed_ids(model, &seqs, Some(pooling), normalize).map_err(|e| ApiError::invalid_param(param, e.to_string()))?;
            Ok((vectors, tokens))
        })
        .await?
}

/// llama-server's `POST /embedding`: `content` (or `input`) as a text, token ids or a list of
/// them, one vector each, normalised by `embd_normalize` and answered as
/// `[{"index", "embedding": [vector]}]`.
pub async fn native(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: NativeEmbeddingRequest = requests::parse(&Value::Object(body))?;
    let entry = state.registry.named_or_only(request.model(), false)?;
    let (inputs, param) = request.inputs()?;
    let norm = request.norm()?;
    let (vectors, _) = embed(&entry, inputs, false, param).await?;
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            norm.apply(&mut v);
            json!({"index": index, "embedding": [v]})
        })
        .collect();
    Ok(ok_json(&Value::Array(data)))
}
