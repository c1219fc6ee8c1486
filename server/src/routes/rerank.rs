//! `POST /v1/rerank` (and llama-server's `/rerank`, `/v1/reranking`, `/reranking`): a
//! cross-encoder scores each document against the query; the results come best first, cut to
//! `top_n`, each with its `index` in the request and its `relevance_score` (the head's raw
//! value, as llama-server gives it), and the document's text when `return_documents`. A
//! request in TEI's shape (`texts`) gets TEI's answer: the bare list of `{index, score, text?}`.

use std::sync::Arc;

use engine::rerank::{is_reranker, rerank};
use hyper::Response;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::requests;
use crate::requests::rerank::RerankRequest;
use crate::AppState;

pub async fn handle(state: &Arc<AppState>, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: RerankRequest = requests::parse(&Value::Object(body))?;
    let id = request.model_id()?;
    let request = request.check()?;
    let entry = state.registry.get(&id)?;
    if !is_reranker(&entry.model) {
        return Err(ApiError::invalid_param(
            "model",
            format!("{id} is not a reranker: /v1/rerank needs a cross-encoder (a BERT-family GGUF with a classification head and pooling type rank)"),
        ));
    }
    let field = if request.tei { "texts" } else { "documents" };
    // the request goes to the engine thread and comes back with the scores (its documents
    // are answered with, when asked)
    let (ranked, request) = entry
        .worker
        .run(move |engine, _cancel| {
            let docs: Vec<&str> = request.documents.iter().map(String::as_str).collect();
            let ranked = rerank(&engine.model, &request.query, &docs).map_err(|e| ApiError::invalid_param(field, e.to_string()))?;
            Ok::<_, ApiError>((ranked, request))
        })
        .await??;
    let tokens: usize = ranked.iter().map(|r| r.n_tokens).sum();
    let mut order: Vec<usize> = (0..ranked.len()).collect();
    // best first; equal scores keep the request's order
    order.sort_by(|&a, &b| ranked[b].score.total_cmp(&ranked[a].score));
    let results: Vec<Value> = order
        .into_iter()
        .take(request.top_n)
        .map(|i| match (request.tei, request.return_documents) {
            (false, false) => json!({"index": i, "relevance_score": ranked[i].score}),
            (false, true) => json!({"index": i, "relevance_score": ranked[i].score, "document": {"text": request.documents[i]}}),
            (true, false) => json!({"index": i, "score": ranked[i].score}),
            (true, true) => json!({"index": i, "score": ranked[i].score, "text": request.documents[i]}),
        })
        .collect();
    if request.tei {
        return Ok(ok_json(&Value::Array(results)));
    }
    Ok(ok_json(&json!({
        "object": "list",
        "model": id,
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
