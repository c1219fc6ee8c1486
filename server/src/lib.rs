//! The OpenAI-style HTTP server (hyper + tokio) over the engine: chat completions (JSON and
//! SSE), embeddings, the guard routes, models (list, get, delete = unload), health and Prometheus metrics.
//!
//! Every model runs on its own engine thread, which decodes all its active requests together
//! (continuous batching, `engine_loop`); the async side parses, validates, renders prompts and
//! formats answers, and talks to it through a `worker::Worker`. Non-streaming requests may go
//! through a `batch_scheduler` first. `Server::builder()` takes the models;
//! `Server::handler()` is the hyper service (mountable in another app); `Server::serve` runs
//! it on a listener until `Server::close()`, then drains open connections and the batch
//! scheduler.

pub mod audit;
pub mod batch_scheduler;
pub mod engine_loop;
pub mod error;
pub mod guard_queue;
pub mod http;
pub mod metrics;
pub mod openapi;
pub mod params;
pub mod protocol;
pub mod registry;
pub mod response_store;
mod routes;
pub mod worker;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use engine::guard::{Evaluator, EvaluatorOptions, GenericPrompt, Policies};
use engine::model::Model;
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::batch_scheduler::{BatchConfig, BatchScheduler};
use crate::error::ApiError;
use crate::http::{anthropic_error_response, error_response, ok_json, read_body, text_response, Body};
use crate::metrics::{Metrics, DEFAULT_LATENCY_BUCKETS};
pub use crate::registry::ModelEntry;
use crate::registry::Registry;
use crate::response_store::ResponseStore;
use crate::routes::guard::GuardRoute;
use crate::worker::{Generation, LoopConfig, SeqSpec, Worker};

pub use crate::error::ApiError as Error;
pub use crate::routes::guardrails::ServerGuardrails;
pub use engine::transcribe::{Segment, TranscribeOptions, Transcriber, Transcription};

/// Sent as `system_fingerprint`.
pub const FINGERPRINT: &str = concat!("fp_engine_", env!("CARGO_PKG_VERSION"));

/// Request bodies larger than this are refused with 413 unless the builder says otherwise.
pub const DEFAULT_MAX_BODY: usize = 16 << 20;

/// What the routes share.
pub struct AppState {
    pub registry: Registry,
    pub metrics: Metrics,
    api_key: Option<String>,
    max_body: usize,
    transcriber: Option<Arc<dyn Transcriber>>,
    /// When the server was built (the `created` of the transcription backend's model entry).
    created: u64,
    /// Non-streaming generations go through it when attached.
    pub batcher: Option<Arc<Batcher>>,
    /// The guard policy presets (`--guard-policy FILE`) requests select with `policy`.
    pub policies: Policies,
    /// The guardrails of every chat completion (`--guardrails`).
    pub guardrails: ServerGuardrails,
    /// The Responses API's stored responses.
    pub responses: ResponseStore,
}

/// The batch scheduler of non-streaming generations: a batch's requests are submitted to their
/// model together.
pub type Batcher = BatchScheduler<(Arc<ModelEntry>, Vec<SeqSpec>), Generation, ApiError>;

/// How every model's engine thread schedules its sequences (see [`LoopConfig`]).
#[derive(Clone, Copy, Debug)]
pub struct Scheduling {
    pub parallel: usize,
    pub queue: usize,
    pub prefill_chunk: usize,
    pub cache_entries: usize,
    /// KV-cache positions per model (`None`: context x parallel).
    pub kv_positions: Option<usize>,
}

impl Default for Scheduling {
    fn default() -> Scheduling {
        let d = LoopConfig::new(0);
        Scheduling {
            parallel: d.parallel,
            queue: d.queue,
            prefill_chunk: d.prefill_chunk,
            cache_entries: d.cache_entries,
            kv_positions: None,
        }
    }
}

impl AppState {
    pub fn has_transcriber(&self) -> bool {
        self.transcriber.is_some()
    }

    /// The model id of the transcription backend, when there is one.
    pub fn transcription_model_id(&self) -> Option<&str> {
        self.transcriber.as_ref().map(|t| t.model_id())
    }

    /// The `/v1/models` entry of the transcription backend, when there is one.
    pub fn transcription_model(&self) -> Option<serde_json::Value> {
        let id = self.transcription_model_id()?;
        Some(
            serde_json::json!({"id": id, "object": "model", "created": self.created, "owned_by": "local", "capabilities": ["transcription"]}),
        )
    }
}

/// One model to serve.
pub struct ModelSpec {
    /// The id requests name (`model` field).
    pub id: String,
    pub model: Arc<Model>,
    /// Serve chat and text completions.
    pub chat: bool,
    /// Serve the guard routes (a Granite Guardian model, or a chat model as generic guard).
    pub guard: bool,
    /// Context size of its cache; `None`: the trained context, at most 4096.
    pub n_ctx: Option<usize>,
    /// A draft model (same vocabulary) for speculative decoding of this model's completions.
    pub draft: Option<Arc<Model>>,
}

#[derive(Default)]
pub struct ServerBuilder {
    models: Vec<ModelSpec>,
    api_key: Option<String>,
    latency_buckets: Option<Vec<f64>>,
    max_body: Option<usize>,
    transcriber: Option<Arc<dyn Transcriber>>,
    scheduling: Scheduling,
    batch: Option<BatchConfig>,
    policies: Policies,
    guardrails: ServerGuardrails,
    generic_prompt: GenericPrompt,
    guard_prompt_cache_bytes: Option<usize>,
    responses_store: Option<usize>,
}

impl ServerBuilder {
    /// Sequences in flight, queue length, prefill chunk and prefix cache of every model.
    pub fn scheduling(mut self, scheduling: Scheduling) -> Self {
        self.scheduling = scheduling;
        self
    }

    /// Non-streaming chat and text completions go through a batch scheduler with this
    /// configuration (requests arriving within the timeout are admitted together).
    pub fn batch_scheduler(mut self, config: BatchConfig) -> Self {
        self.batch = Some(config);
        self
    }

    /// The guard policy presets requests select with `policy` (and the default one).
    pub fn guard_policies(mut self, policies: Policies) -> Self {
        self.policies = policies;
        self
    }

    /// How a chat model serving as guard is asked (no effect on Granite Guardian models).
    pub fn generic_prompt(mut self, variant: GenericPrompt) -> Self {
        self.generic_prompt = variant;
        self
    }

    /// Bytes of keys and values each guard model keeps of earlier prompts for later ones to
    /// start from (default [`engine::guard::DEFAULT_PROMPT_CACHE_BYTES`]; 0 turns it off).
    pub fn guard_prompt_cache_bytes(mut self, bytes: usize) -> Self {
        self.guard_prompt_cache_bytes = Some(bytes);
        self
    }

    /// Guard the input and / or the output of every chat completion with the guard model (a
    /// request's `guard` field may add a side, and sets the risks, policy and windows).
    pub fn guardrails(mut self, sides: ServerGuardrails) -> Self {
        self.guardrails = sides;
        self
    }

    /// Responses the Responses API keeps for `previous_response_id` and `GET`
    /// (default [`response_store::DEFAULT_CAPACITY`]; 0 keeps none).
    pub fn responses_store(mut self, capacity: usize) -> Self {
        self.responses_store = Some(capacity);
        self
    }

    pub fn model(mut self, spec: ModelSpec) -> Self {
        self.models.push(spec);
        self
    }

    /// Requests to `/v1/*` must carry `Authorization: Bearer <key>`.
    pub fn api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key;
        self
    }

    /// Bucket bounds (milliseconds) of the latency histograms.
    pub fn latency_buckets(mut self, buckets: Vec<f64>) -> Self {
        self.latency_buckets = Some(buckets);
        self
    }

    /// Serves `POST /v1/audio/transcriptions` with this backend (404 without one).
    pub fn transcriber(mut self, backend: Arc<dyn Transcriber>) -> Self {
        self.transcriber = Some(backend);
        self
    }

    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body = Some(limit);
        self
    }

    /// Starts an engine thread per model.
    pub fn build(self) -> Result<Server, String> {
        if self.models.is_empty() {
            return Err("no model to serve".into());
        }
        if (self.guardrails.input || self.guardrails.output) && !self.models.iter().any(|m| m.guard) {
            return Err("--guardrails needs a guard model (--guard)".into());
        }
        let registry = Registry::default();
        let buckets = self.latency_buckets.unwrap_or_else(|| DEFAULT_LATENCY_BUCKETS.to_vec());
        let metrics = Metrics::new(&buckets, self.models.iter().any(|m| m.guard));
        let created = routes::generation::unix_now();
        for spec in self.models {
            if registry.get(&spec.id).is_ok() {
                return Err(format!("two models have the id `{}`: name one with --alias", spec.id));
            }
            let evaluator = if spec.guard {
                Some(Arc::new(
                    Evaluator::from_model(
                        spec.model.clone(),
                        EvaluatorOptions {
                            device: spec.model.device(),
                            generic_prompt: self.generic_prompt,
                            prompt_cache_bytes: self.guard_prompt_cache_bytes.unwrap_or(engine::guard::DEFAULT_PROMPT_CACHE_BYTES),
                            ..EvaluatorOptions::default()
                        },
                    )
                    .map_err(|e| format!("{}: {e}", spec.id))?,
                ))
            } else {
                None
            };
            if let Some(d) = &spec.draft {
                engine::generate::check_same_vocabulary(&spec.model, d).map_err(|e| format!("{}: {e}", spec.id))?;
            }
            let n_ctx = spec.n_ctx.unwrap_or_else(|| default_ctx(&spec.model));
            let sc = self.scheduling;
            let config = LoopConfig {
                parallel: sc.parallel,
                queue: sc.queue,
                prefill_chunk: sc.prefill_chunk,
                cache_entries: sc.cache_entries,
                kv_positions: sc.kv_positions,
                ..LoopConfig::new(n_ctx)
            };
            let guard_format = evaluator.as_ref().map(|ev| {
                if ev.prompter().is_guardian() {
                    ev.default_format().to_string()
                } else {
                    format!("generic/{}", ev.prompter().generic_prompt().name())
                }
            });
            let digest = spec.guard.then(|| audit::ModelDigest::start(&spec.model));
            let worker = Worker::start(&spec.id, spec.model.clone(), config, evaluator, spec.draft, metrics.for_model(&spec.id))?;
            registry.insert(ModelEntry {
                id: spec.id,
                created,
                model: spec.model,
                worker,
                guard: spec.guard,
                generates: spec.chat,
                n_ctx,
                digest,
                guard_format,
                guard_queue: Arc::new(guard_queue::GuardQueue::new(
                    metrics.requests_cancelled.clone(),
                    metrics.guard_batch_requests.clone(),
                )),
            });
        }
        let state = Arc::new(AppState {
            registry,
            metrics,
            api_key: self.api_key,
            max_body: self.max_body.unwrap_or(DEFAULT_MAX_BODY),
            transcriber: self.transcriber,
            created,
            policies: self.policies,
            guardrails: self.guardrails,
            responses: ResponseStore::new(self.responses_store.unwrap_or(response_store::DEFAULT_CAPACITY)),
            batcher: self.batch.map(|config| {
                let b = BatchScheduler::new(config, routes::generation::submit_batch);
                b.start();
                Arc::new(b)
            }),
        });
        let (shutdown, _) = watch::channel(false);
        Ok(Server { state, shutdown })
    }
}

/// The context a model is served with when none is named: its trained context, capped so that
/// the f16 cache of a small machine stays small.
pub fn default_ctx(model: &Model) -> usize {
    match model.config().n_ctx_train {
        0 => 4096,
        trained => trained.min(4096),
    }
}

pub struct Server {
    state: Arc<AppState>,
    shutdown: watch::Sender<bool>,
}

/// The server as a hyper service: clone it per connection.
#[derive(Clone)]
pub struct Handler {
    state: Arc<AppState>,
}

impl hyper::service::Service<Request<Incoming>> for Handler {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let state = self.state.clone();
        Box::pin(async move { Ok(handle(state, req).await) })
    }
}

impl Server {
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    pub fn handler(&self) -> Handler {
        Handler { state: self.state.clone() }
    }

    /// Serves connections from `listener` until [`Server::close`], then waits for the open
    /// ones to finish their current requests.
    pub async fn serve(&self, listener: TcpListener) -> std::io::Result<()> {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut closed = self.shutdown.subscribe();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!("accept failed: {e}");
                            continue;
                        }
                    };
                    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), self.handler());
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!("connection {peer}: {e}");
                        }
                    });
                }
                _ = closed.changed() => break,
            }
        }
        tracing::info!("shutting down: waiting for open requests");
        graceful.shutdown().await;
        if let Some(batcher) = self.state.batcher.clone() {
            let _ = tokio::task::spawn_blocking(move || batcher.stop()).await;
        }
        Ok(())
    }

    /// Stops accepting connections; `serve` returns once open requests are done.
    pub fn close(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Binds `addr` (port 0 picks a free one) and returns the listener and its address.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        Ok((listener, local))
    }
}

async fn handle(state: Arc<AppState>, req: Request<Incoming>) -> Response<Body> {
    let start = Instant::now();
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    // the body stays in the request until a route takes it
    let mut req = req.map(Some);
    let outcome = route(&state, &mut req).await;
    if let Some(unread) = req.body_mut().take() {
        // Answered without reading the body (401, 404, 405, ...): read it anyway, within the size
        // limit, so that the connection stays in step and a client still sending it gets the
        // answer rather than a broken pipe.
        let _ = read_body(unread, state.max_body).await;
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
    read_body(body, state.max_body).await
}

/// llama-server's token utilities (outside `/v1`, as there, and keyed like `/v1`).
const TOKEN_ROUTES: [&str; 3] = ["/tokenize", "/detokenize", "/apply-template"];

async fn route(state: &Arc<AppState>, req: &mut Request<Option<Incoming>>) -> Result<Response<Body>, ApiError> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_string();
    if path.starts_with("/v1/") || TOKEN_ROUTES.contains(&path.as_str()) {
        check_key(state, req.headers())?;
    }
    let guard_route = match path.as_str() {
        "/v1/guard" => Some(GuardRoute::Evaluate),
        "/v1/guard/scan" => Some(GuardRoute::Scan),
        "/v1/guard/batch" => Some(GuardRoute::Batch),
        _ => None,
    };
    match path.as_str() {
        "/health" => {
            allow(&method, &path, &[Method::GET])?;
            Ok(ok_json(&serde_json::json!({"status": "ok"})))
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
            allow(&method, &path, &[Method::GET])?;
            routes::models::list(state)
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
            routes::tokens::tokenize(state, json_body(state, req).await?)
        }
        "/detokenize" => {
            allow(&method, &path, &[Method::POST])?;
            routes::tokens::detokenize(state, json_body(state, req).await?)
        }
        "/apply-template" => {
            allow(&method, &path, &[Method::POST])?;
            routes::tokens::apply_template(state, json_body(state, req).await?)
        }
        "/v1/responses" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::responses::create(state, body).await
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
            routes::messages::create(state, body).await
        }
        "/v1/messages/count_tokens" => {
            allow(&method, &path, &[Method::POST])?;
            routes::messages::count_tokens(state, json_body(state, req).await?)
        }
        "/v1/chat/completions" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::chat::handle(state, body).await
        }
        "/v1/completions" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::completions::handle(state, body).await
        }
        "/v1/embeddings" => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::embeddings::handle(state, body).await
        }
        "/v1/audio/transcriptions" if state.transcriber.is_some() => {
            allow(&method, &path, &[Method::POST])?;
            let backend = state.transcriber.clone().expect("matched");
            let boundary = routes::transcriptions::boundary(req.headers().get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()))?;
            let body = take_body(state, req).await?;
            routes::transcriptions::handle(backend, boundary, body).await
        }
        "/v1/moderations" if state.registry.has_guard() => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::moderations::handle(state, body).await
        }
        _ if guard_route.is_some() && state.registry.has_guard() => {
            allow(&method, &path, &[Method::POST])?;
            let body = json_body(state, req).await?;
            routes::guard::handle(state, guard_route.expect("matched"), body).await
        }
        _ => Err(ApiError::route_not_found(&method, &path)),
    }
}
