//! The router: each request's key check, method check and route, its body read under the size
//! limit, and its error answered in the shape of its API (Anthropic's on `/v1/messages*`,
//! OpenAI's elsewhere).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::http::{anthropic_error_response, error_response, ok_json, read_body, sse_response, text_response, Body, SseSender};
use crate::model_loader;
use crate::routes::guard::GuardRoute;
use crate::{http, openapi, routes, webui, AppState};

pub(crate) async fn handle(state: Arc<AppState>, req: Request<Incoming>) -> Response<Body> {
    let start = Instant::now();
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    // the body stays in the request until a route takes it
    let mut req = req.map(Some);
    let outcome = route(&state, &mut req).await;
    if let Some(unread) = req.body_mut().take() {
        // Answered without reading the body (401, 404, 405, ...): read it anyway, within the size
        // limit, so that the connection stays in step and a client still sending it gets the
        // answer rather than a broken pipe.
        let _ = read_body(unread, state.max_body, state.limits.body_timeout).await;
    }
    let response = match outcome {
        Ok(r) => r,
        Err(e) => {
            if e.status.is_server_error() {
                tracing::warn!("{method} {path}: {} {}", e.status, e.message);
            }
            match path.starts_with("/v1/messages") {
                true => anthropic_error_response(&e),
                false => error_response(&e),
            }
        }
    };
    tracing::debug!("{method} {path} -> {} in {:.1} ms", response.status(), start.elapsed().as_secs_f64() * 1e3);
    state.metrics.requests.inc();
    state.metrics.request_latency_ms.observe(start.elapsed().as_secs_f64() * 1e3);
    response
}

fn allow(method: &Method, path: &str, allowed: &[Method]) -> Result<(), ApiError> {
    if allowed.contains(method) {
        Ok(())
    } else {
        let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
        Err(ApiError::method_not_allowed(method, path, &names.join(", ")))
    }
}

fn check_key(state: &AppState, headers: &hyper::HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.api_key else { return Ok(()) };
    // OpenAI's `Authorization: Bearer KEY`, or Anthropic's `x-api-key: KEY`
    let bearer = headers.get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let given = bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()));
    if given.map(str::trim) == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

/// The request's body as a JSON object, under the size limit.
async fn json_body(state: &AppState, req: &mut Request<Option<Incoming>>) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    http::parse_object(&take_body(state, req).await?)
}

/// Reads the request's body, under the size limit (once: the request keeps no copy).
async fn take_body(state: &AppState, req: &mut Request<Option<Incoming>>) -> Result<bytes::Bytes, ApiError> {
    let body = req.body_mut().take().ok_or_else(|| ApiError::server("the request body was already read"))?;
    read_body(body, state.max_body, state.limits.body_timeout).await
}

/// llama-server's routes outside `/v1` (its token utilities, its own completion and embedding
/// routes, its properties and the other names of `/v1/rerank`), keyed like `/v1`.
const ROOT_API_ROUTES: [&str; 12] = [
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/infill",
    "/completion",
    "/completions",
    "/rerank",
    "/reranking",
    "/lora-adapters",
    "/props",
    "/embedding",
    "/embeddings",
];

/// llama-server's other names of routes: the `/v1` routes it also serves without the prefix, and
/// `/v1/health`.
const ALIASES: [(&str, &str); 7] = [
    ("/chat/completions", "/v1/chat/completions"),
    ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"),
    ("/responses", "/v1/responses"),
    ("/responses/input_tokens", "/v1/responses/input_tokens"),
    ("/audio/transcriptions", "/v1/audio/transcriptions"),
    ("/models", "/v1/models"),
    ("/v1/health", "/health"),
];

async fn route(state: &Arc<AppState>, req: &mut Request<Option<Incoming>>) -> Result<Response<Body>, ApiError> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/');
    let path = ALIASES.iter().find(|(alias, _)| *alias == path).map_or(path, |(_, to)| to).to_string();
    if path.starts_with("/v1/") || ROOT_API_ROUTES.contains(&path.as_str()) {
        check_key(state, req.headers())?;
    }
    let guard_route = match path.as_str() {
        "/v1/guard" => Some(GuardRoute::Evaluate),
        "/v1/guard/scan" => Some(GuardRoute::Scan),
        "/v1/guard/batch" => Some(GuardRoute::Batch),
        _ => None,
    };
    match path.as_str() {
        // the playground page: served without the key (it asks for one when the API does)
        "" | "/index.html" if state.webui => {
            allow(&method, &path, &[Method::GET])?;
            Ok(webui::page())
        }
        "/health" => {
            allow(&method, &path, &[Method::GET])?;
            Ok(ok_json(&serde_json::json!({"status": "ok"})))
        }
        "/ready" => {
            allow(&method, &path, &[Method::GET])?;
            Ok(readiness(state))
        }
        "/metrics" => {
            allow(&method, &path, &[Method::GET])?;
            Ok(text_response("application/openmetrics-text; version=1.0.0; charset=utf-8", state.metrics.render()))
        }
        "/openapi.yaml" => {
            allow(&method, &path, &[Method::GET])?;
            Ok(text_response("application/yaml", openapi::document(state)))
        }
        "/v1/models" => {
            // loading at run time is on with --models-dir
            let methods: &[Method] = if state.loader.loads() { &[Method::GET, Method::POST] } else { &[Method::GET] };
            allow(&method, &path, methods)?;
            match method {
                Method::GET => routes::models::list(state),
                _ => routes::models::load(state, json_body(state, req).await?).await,
            }
        }
        p if p.starts_with("/v1/models/") => {
            let id = &p["/v1/models/".len()..];
            allow(&method, &path, &[Method::GET, Method::DELETE])?;
            if method == Method::GET {
                routes::models::get(state, id)
            } else {
                routes::models::delete(state, id)
            }
        }
        "/tokenize" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::tokens::tokenize(&s, b) }).await
        }
        "/detokenize" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::tokens::detokenize(&s, b) }).await
        }
        "/apply-template" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::tokens::apply_template(&s, b) }).await
        }
        "/infill" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::infill::handle(&s, b).await }).await
        }
        "/completion" | "/completions" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::llama_completion::handle(&s, b).await }).await
        }
        "/lora-adapters" => {
            // setting scales is on where a model has adapters (as the served document says)
            let any = state.registry.list().iter().any(|m| !m.adapters.is_empty());
            let methods: &[Method] = if any { &[Method::GET, Method::POST] } else { &[Method::GET] };
            allow(&method, &path, methods)?;
            let model = routes::lora_adapters::model_in_query(req.uri().query());
            if method == Method::GET {
                routes::lora_adapters::list(state, model.as_deref())
            } else {
                let body = crate::strict_json::from_slice(&take_body(state, req).await?)
                    .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
                routes::lora_adapters::set(state, model.as_deref(), body)
            }
        }
        "/v1/responses" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::responses::create(&s, b).await }).await
        }
        "/v1/responses/input_tokens" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::responses::input_tokens(&s, b).await }).await
        }
        "/v1/chat/completions/input_tokens" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::chat::input_tokens(&s, b).await }).await
        }
        "/props" => {
            allow(&method, &path, &[Method::GET])?;
            routes::props::props(state, routes::lora_adapters::model_in_query(req.uri().query()).as_deref())
        }
        "/embedding" | "/embeddings" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::embeddings::native(&s, b).await }).await
        }
        p if p.starts_with("/v1/responses/") => {
            let id = &p["/v1/responses/".len()..];
            allow(&method, &path, &[Method::GET, Method::DELETE])?;
            if method == Method::GET {
                routes::responses::get(state, id)
            } else {
                routes::responses::delete(state, id)
            }
        }
        "/v1/messages" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::messages::create(&s, b).await }).await
        }
        "/v1/messages/count_tokens" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::messages::count_tokens(&s, b).await }).await
        }
        "/v1/chat/completions" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::chat::handle(&s, b).await }).await
        }
        "/v1/completions" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::completions::handle(&s, b).await }).await
        }
        "/v1/embeddings" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::embeddings::handle(&s, b).await }).await
        }
        // llama-server's four names of one route
        "/v1/rerank" | "/rerank" | "/v1/reranking" | "/reranking" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            with_model(state, &path, body, |s, b| async move { routes::rerank::handle(&s, b).await }).await
        }
        "/v1/audio/transcriptions" if state.transcriber.is_some() => {
            allow(&method, &path, &[Method::POST])?;
            let backend = state.transcriber.clone().expect("matched");
            let boundary = routes::transcriptions::boundary(req.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()))?;
            let body = req.body_mut().take().ok_or_else(|| ApiError::server("the request body was already read"))?;
            let body = read_body(body, routes::transcriptions::MAX_UPLOAD_BYTES, state.limits.body_timeout).await?;
            routes::transcriptions::handle(backend, boundary, body).await
        }
        "/v1/moderations" if state.registry.has_guard() => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::moderations::handle(state, body).await
        }
        "/v1/guard/policies" if state.registry.has_guard() => {
            allow(&method, &path, &[Method::GET])?;
            Ok(routes::guard::policies(state))
        }
        _ if guard_route.is_some() && state.registry.has_guard() => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::guard::handle(state, guard_route.expect("matched"), body).await
        }
        "/v1/audio/transcriptions" => {
            Err(ApiError::route_off(&method, &path, "this server has no transcription model (start it with --transcribe FILE)"))
        }
        _ if guard_route.is_some() || path == "/v1/moderations" || path == "/v1/guard/policies" => {
            Err(ApiError::route_off(&method, &path, "this server has no guard model loaded (start it with --guard FILE)"))
        }
        _ => Err(ApiError::route_not_found(&method, &path)),
    }
}

/// `GET /ready`: 200 while the server accepts work (not draining, a model loaded, and every
/// model with room in its queue), else 503 with the reason, so that a load balancer sends the
/// request to another replica. `GET /health` stays the liveness probe.
fn readiness(state: &AppState) -> Response<Body> {
    let models = state.registry.list();
    let saturated: Vec<&str> = models.iter().filter(|m| m.worker.saturated()).map(|m| m.id.as_str()).collect();
    let reason = if state.draining.load(std::sync::atomic::Ordering::Relaxed) {
        Some("the server is shutting down".to_string())
    } else if models.is_empty() {
        Some("no model is loaded".to_string())
    } else if !saturated.is_empty() {
        Some(format!("the queue of {} is full", saturated.join(", ")))
    } else {
        None
    };
    let body = serde_json::json!({
        "status": if reason.is_some() { "unavailable" } else { "ready" },
        "reason": reason,
        "models": models.iter().map(|m| serde_json::json!({"id": m.id, "saturated": m.worker.saturated()})).collect::<Vec<_>>(),
    });
    let status = if reason.is_some() { hyper::StatusCode::SERVICE_UNAVAILABLE } else { hyper::StatusCode::OK };
    http::json_response(status, &body)
}

/// Runs a route whose body names its `model`, holding that model meanwhile (the idle sweep
/// never unloads a model a request holds). A model unloaded for idleness is loaded again first:
/// the request waits, and a stream (`stream: true`) is answered at once with comment lines
/// (`: loading <id> (N s)`, which clients skip) until the route's own stream follows.
async fn with_model<F, Fut>(state: &Arc<AppState>, path: &str, body: Map<String, Value>, run: F) -> Result<Response<Body>, ApiError>
where
    F: FnOnce(Arc<AppState>, Map<String, Value>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Body>, ApiError>> + Send + 'static,
{
    let Some(id) = body.get("model").and_then(Value::as_str).map(str::to_string) else { return run(state.clone(), body).await };
    if !state.loader.is_parked(&id) {
        let _held = state.registry.get(&id).ok();
        return run(state.clone(), body).await;
    }
    if body.get("stream") != Some(&Value::Bool(true)) {
        let _held = model_loader::pin(state, &id, |_| {}).await?;
        return run(state.clone(), body).await;
    }
    let (response, sse) = sse_response();
    let (state, path) = (state.clone(), path.to_string());
    tokio::spawn(async move {
        let progress = |waited: Duration| sse.try_comment(&format!("loading {id} ({} s)", waited.as_secs()));
        let _held = match model_loader::pin(&state, &id, progress).await {
            Ok(held) => held,
            Err(e) => return stream_error(&sse, &path, &e).await,
        };
        match run(state.clone(), body).await {
            Ok(r) => {
                let mut body = r.into_body();
                while let Some(Ok(frame)) = body.frame().await {
                    if let Ok(data) = frame.into_data() {
                        if !sse.send_raw(data).await {
                            return;
                        }
                    }
                }
            }
            Err(e) => stream_error(&sse, &path, &e).await,
        }
    });
    Ok(response)
}

/// A refusal sent on a stream already answered: as the route's API writes errors in a stream.
async fn stream_error(sse: &SseSender, path: &str, e: &ApiError) {
    match path {
        "/v1/messages" => _ = sse.send_event("error", &e.anthropic_body()).await,
        "/v1/responses" => {
            // the stream's first event
            let mut event = routes::responses_stream::error_event(e);
            event["sequence_number"] = serde_json::json!(0);
            sse.send_event("error", &event).await;
        }
        _ => {
            sse.send_json(&e.body()).await;
            sse.done().await;
        }
    }
}
