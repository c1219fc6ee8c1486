//! The OpenAI-style HTTP server (hyper + tokio) over the engine: chat completions (JSON and
//! SSE), embeddings, the guard routes, models (list, get, delete = unload), health and Prometheus metrics.
//!
//! Every model runs on its own engine thread, which decodes all its active requests together
//! (continuous batching, `engine::serving`); the async side parses, validates, renders prompts and
//! formats answers, and talks to it through a `worker::Worker`. Non-streaming requests may go
//! through a `batch_scheduler` first. `Server::builder()` takes the models;
//! `Server::handler()` is the hyper service (mountable in another app); `Server::serve` runs
//! it on a listener until `Server::close()`, then drains open connections and the batch
//! scheduler.

pub mod adapters;
pub mod audit;
pub mod batch_scheduler;
pub mod error;
pub mod guard_queue;
pub mod http;
pub mod metrics;
pub mod model_loader;
pub mod openapi;
pub mod registry;
pub mod requests;
pub mod response_store;
mod router;
mod routes;
mod strict_json;
pub mod vision;
mod webui;
pub mod worker;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use engine::backend::Device;
use engine::generate::{DraftSettings, NgramDraft};
use engine::guard::{GenericPrompt, GuardFamily, Policies};
use engine::kv_cache::KvTypes;
use engine::model::Model;
use engine::serving::SpecPolicy;
use engine::tokenizer::fim::FimOrder;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::batch_scheduler::{BatchConfig, BatchScheduler};
use crate::error::ApiError;
use crate::http::Body;
use crate::metrics::{Metrics, DEFAULT_LATENCY_BUCKETS};
use crate::model_loader::{start_entry, EntrySettings, LoadSpec, Loader, Role};
pub use crate::registry::ModelEntry;
use crate::registry::Registry;
use crate::requests::chat::ChatDefaults;
use crate::requests::sampling::Timeouts;
use crate::response_store::ResponseStore;
use crate::worker::{Generation, LoopConfig, SeqSpec};

pub use crate::error::ApiError as Error;
pub use crate::routes::guardrails::ServerGuardrails;
pub use engine::transcribe::{Segment, TranscribeError, TranscribeOptions, Transcriber, Transcription};

/// Sent as `system_fingerprint`.
pub const FINGERPRINT: &str = concat!("fp_engine_", env!("CARGO_PKG_VERSION"));

/// Request bodies larger than this are refused with 413 unless the builder says otherwise.
pub const DEFAULT_MAX_BODY: usize = 16 << 20;

/// What the routes share.
pub struct AppState {
    pub registry: Registry,
    pub metrics: Metrics,
    api_key: Option<String>,
    /// Whether `/` serves the playground page.
    webui: bool,
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
    /// Models loaded and unloaded at run time.
    pub loader: Loader,
    /// The default and the most time a generation request may take.
    pub timeouts: Timeouts,
    /// What a chat request leaves unsaid (whether a last assistant message is continued).
    pub chat_defaults: ChatDefaults,
    /// The order of a fill-in-the-middle prompt (`/infill`, a completion's `suffix`).
    pub fim_order: FimOrder,
    /// Set once the server stops accepting connections (`GET /ready` then answers 503).
    pub draining: std::sync::atomic::AtomicBool,
    /// What a connection may hold and how long it may take to send a request.
    pub limits: ConnectionLimits,
}

/// What one client may hold of the server: connections at once (more are answered 503 and
/// closed), and the time to send a request's headers (the connection is closed after it) and
/// its body (408 after it).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits { max_connections: 1024, header_timeout: Duration::from_secs(30), body_timeout: Duration::from_secs(60) }
    }
}

/// Connections the kernel may hold before the server accepts them.
const LISTEN_BACKLOG: u32 = 4096;

/// Connections kept beyond `max_connections` for the operations routes (`/health`, `/ready`,
/// `/metrics`): a client holding every connection slot (idle or slow) does not lock the
/// orchestrator's probes and the metrics scraper out. One request per connection, its head
/// within [`RESERVE_HEADER_TIMEOUT`]; any other route is answered 503 there.
const OPERATIONS_RESERVE: usize = 32;

/// How long a reserve connection may take to send its request's head: short, so that a flood
/// that spills into the reserve is cut before the next probe.
const RESERVE_HEADER_TIMEOUT: Duration = Duration::from_secs(1);

/// The routes a reserve connection serves.
const OPERATIONS_ROUTES: [&str; 3] = ["/health", "/ready", "/metrics"];

/// The read buffer of a connection, which bounds a request's head (larger: 431).
const MAX_HEAD_BYTES: usize = 64 << 10;

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
    /// KV-cache positions per model (`None`: context x parallel, or what `kv_bytes` holds).
    pub kv_positions: Option<usize>,
    /// Bytes of KV cache per generating model: its capacity in positions is what they hold in
    /// the cache's element types (at least one whole context).
    pub kv_bytes: Option<usize>,
    /// The element types of the generating models' KV caches (a guard's own cache stays f16:
    /// its scores are what policies' thresholds were set against).
    pub kv_types: KvTypes,
    /// Speculation from each sequence's own tokens for chat models (before the draft model's,
    /// for a chat model with one).
    pub ngram: Option<NgramDraft>,
    /// Whether a sequence's proposals are weighed against what their rows cost.
    pub speculation: SpecPolicy,
    /// How a draft model drafts, for chat models with one.
    pub draft: DraftSettings,
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
            kv_bytes: None,
            kv_types: d.kv_types,
            ngram: None,
            speculation: d.speculation,
            draft: d.draft,
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
    /// Each model with its file, when known (it can then be unloaded when idle and loaded again).
    models: Vec<(ModelSpec, Option<PathBuf>)>,
    /// The vision projector of a model, by model id.
    projectors: Vec<(String, Arc<vision::Projector>)>,
    models_dir: Option<PathBuf>,
    idle_unload: Option<Duration>,
    runtime_ctx: Option<usize>,
    device: Device,
    api_key: Option<String>,
    /// The playground page at `/` is off (`--no-webui`).
    no_webui: bool,
    latency_buckets: Option<Vec<f64>>,
    max_body: Option<usize>,
    transcriber: Option<Arc<dyn Transcriber>>,
    scheduling: Scheduling,
    batch: Option<BatchConfig>,
    policies: Policies,
    guardrails: ServerGuardrails,
    generic_prompt: GenericPrompt,
    guard_family: Option<GuardFamily>,
    guard_prompt_cache_bytes: Option<usize>,
    responses_store: Option<usize>,
    timeouts: Timeouts,
    chat_defaults: ChatDefaults,
    fim_order: FimOrder,
    limits: ConnectionLimits,
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

    /// The guard models' family, instead of the one their files say (`family::detect`).
    pub fn guard_family(mut self, family: Option<GuardFamily>) -> Self {
        self.guard_family = family;
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
        self.models.push((spec, None));
        self
    }

    /// A model read from `path`: with [`ServerBuilder::idle_unload`] it is unloaded when idle
    /// and read again when a request names it.
    /// A vision projector (`--mmproj`) for the model `id`: its chat requests may carry images.
    pub fn projector(mut self, id: impl Into<String>, projector: Arc<vision::Projector>) -> Self {
        self.projectors.push((id.into(), projector));
        self
    }

    pub fn model_file(mut self, spec: ModelSpec, path: PathBuf) -> Self {
        self.models.push((spec, Some(path)));
        self
    }

    /// `POST /v1/models` loads GGUF files of this directory (named by file name only), on
    /// `device`, with context `n_ctx` unless the request names one (`None`: the model's, at
    /// most 4096).
    pub fn models_dir(mut self, dir: PathBuf, device: Device, n_ctx: Option<usize>) -> Self {
        self.models_dir = Some(dir);
        self.device = device;
        self.runtime_ctx = n_ctx;
        self
    }

    /// The time a generation request gets when it names no `timeout`, and the most it may
    /// name (`None`: no default, no bound).
    pub fn request_timeouts(mut self, default: Option<Duration>, max: Option<Duration>) -> Self {
        self.timeouts = Timeouts { default, max };
        self
    }

    /// Whether a chat request whose last message is an assistant's text continues that text
    /// when the request does not say (`continue_final_message`); default true, as llama-server
    /// (`--no-prefill-assistant` sets false). `/v1/messages` always continues it, as Anthropic's
    /// API does, and `/v1/responses` never does, as OpenAI's does not.
    pub fn prefill_assistant(mut self, on: bool) -> Self {
        self.chat_defaults = ChatDefaults { prefill_assistant: on };
        self
    }

    /// The order of fill-in-the-middle prompts: prefix first (the default), or suffix first
    /// for the models trained that way (llama-server's `--spm-infill`).
    pub fn fim_order(mut self, order: FimOrder) -> Self {
        self.fim_order = order;
        self
    }

    /// Connections at once and the time to send a request (default [`ConnectionLimits::default`]).
    pub fn connection_limits(mut self, limits: ConnectionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Unloads a model nobody used for `after` (models with a known file that do not guard);
    /// the next request that names it loads it again and waits for it.
    pub fn idle_unload(mut self, after: Duration) -> Self {
        self.idle_unload = Some(after);
        self
    }

    /// Requests to `/v1/*` must carry `Authorization: Bearer <key>`.
    pub fn api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key;
        self
    }

    /// Whether `/` serves the playground page (it does unless this turns it off).
    pub fn webui(mut self, on: bool) -> Self {
        self.no_webui = !on;
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
        if let (Some(default), Some(max)) = (self.timeouts.default, self.timeouts.max) {
            if default > max {
                return Err(format!(
                    "the default request timeout ({} s) is above the maximum ({} s)",
                    default.as_secs_f64(),
                    max.as_secs_f64()
                ));
            }
        }
        if self.models.is_empty() && self.models_dir.is_none() && self.transcriber.is_none() {
            return Err("no model to serve".into());
        }
        if (self.guardrails.input || self.guardrails.output) && !self.models.iter().any(|(m, _)| m.guard) {
            return Err("--guardrails needs a guard model (--guard)".into());
        }
        let registry = Registry::default();
        let buckets = self.latency_buckets.unwrap_or_else(|| DEFAULT_LATENCY_BUCKETS.to_vec());
        let metrics = Metrics::new(&buckets, self.models.iter().any(|(m, _)| m.guard));
        let created = routes::generation::unix_now();
        let settings = EntrySettings {
            scheduling: self.scheduling,
            generic_prompt: self.generic_prompt,
            guard_family: self.guard_family,
            guard_prompt_cache_bytes: self.guard_prompt_cache_bytes.unwrap_or(engine::guard::DEFAULT_PROMPT_CACHE_BYTES),
            n_ctx: self.runtime_ctx,
            device: self.device,
        };
        let mut projectors = self.projectors;
        for (spec, path) in self.models {
            if registry.get(&spec.id).is_ok() {
                return Err(format!("two models have the id `{}`: name one with --alias", spec.id));
            }
            let projector = projectors.iter().position(|(id, _)| *id == spec.id).map(|i| projectors.remove(i).1);
            if projector.is_some() && !spec.chat {
                return Err(format!("the model `{}` has a vision projector but does not chat", spec.id));
            }
            let source = path.map(|path| LoadSpec {
                id: spec.id.clone(),
                path,
                role: if spec.guard {
                    Role::Guard
                } else if spec.chat {
                    Role::Chat
                } else {
                    Role::Embedding
                },
                n_ctx: spec.n_ctx,
                draft: spec.draft.clone(),
                vision: projector.clone(),
                lora: model_loader::adapter_files(&spec.model),
            });
            let mut entry = start_entry(spec, &settings, &metrics, created)?;
            entry.source = source;
            entry.vision = projector;
            registry.insert(entry);
        }
        if let Some((id, _)) = projectors.first() {
            return Err(format!("a vision projector names the model `{id}`, which is not served"));
        }
        let loader = Loader::new(self.models_dir, self.idle_unload, settings)?;
        let state = Arc::new(AppState {
            registry,
            metrics,
            api_key: self.api_key,
            webui: !self.no_webui,
            max_body: self.max_body.unwrap_or(DEFAULT_MAX_BODY),
            transcriber: self.transcriber,
            created,
            policies: self.policies,
            guardrails: self.guardrails,
            loader,
            timeouts: self.timeouts,
            chat_defaults: self.chat_defaults,
            fim_order: self.fim_order,
            draining: std::sync::atomic::AtomicBool::new(false),
            limits: self.limits,
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

/// A connection past the limit: a 503 with an OpenAI-shaped body, then closed (within a second,
/// whatever the client does).
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::to_vec(&ApiError::too_many_connections().body()).expect("a JSON value serialises");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
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
    /// A connection of the operations reserve: only [`OPERATIONS_ROUTES`] are served.
    operations_only: bool,
}

impl hyper::service::Service<Request<Incoming>> for Handler {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let state = self.state.clone();
        if self.operations_only && !OPERATIONS_ROUTES.contains(&req.uri().path().trim_end_matches('/')) {
            return Box::pin(async { Ok(http::error_response(&ApiError::too_many_connections())) });
        }
        Box::pin(async move { Ok(router::handle(state, req).await) })
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
        Handler { state: self.state.clone(), operations_only: false }
    }

    /// Serves connections from `listener` until [`Server::close`], then waits for the open
    /// ones to finish their current requests.
    pub async fn serve(&self, listener: TcpListener) -> std::io::Result<()> {
        self.serve_draining(listener, None).await
    }

    /// [`Server::serve`], waiting at most `drain` for open requests after [`Server::close`]:
    /// those still running then are cut (their connections close, their generations are
    /// cancelled at the next step).
    pub async fn serve_draining(&self, listener: TcpListener, drain: Option<Duration>) -> std::io::Result<()> {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut closed = self.shutdown.subscribe();
        let sweeper = self.state.loader.idle_unload().map(|idle| {
            let state = self.state.clone();
            // a model is unloaded at most a quarter of its idle time late
            let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let s = state.clone();
                    // unloading frees the model's memory: off the async threads
                    let _ = tokio::task::spawn_blocking(move || model_loader::sweep(&s)).await;
                }
            })
        });
        let limits = self.state.limits;
        let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        let reserve = Arc::new(tokio::sync::Semaphore::new(OPERATIONS_RESERVE));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_timeout).max_buf_size(MAX_HEAD_BYTES);
        let mut reserve_http = http.clone();
        reserve_http.header_read_timeout(RESERVE_HEADER_TIMEOUT.min(limits.header_timeout)).keep_alive(false);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // out of file descriptors, most likely: let connections close first
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let (slot, conn) = match slots.clone().try_acquire_owned() {
                        Ok(slot) => (slot, http.serve_connection(TokioIo::new(stream), self.handler())),
                        Err(_) => match reserve.clone().try_acquire_owned() {
                            Ok(slot) => {
                                let handler = Handler { state: self.state.clone(), operations_only: true };
                                (slot, reserve_http.serve_connection(TokioIo::new(stream), handler))
                            }
                            Err(_) => {
                                tokio::spawn(refuse(stream));
                                continue;
                            }
                        },
                    };
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!("connection {peer}: {e}");
                        }
                        drop(slot);
                    });
                }
                _ = closed.changed() => break,
            }
        }
        if let Some(sweeper) = sweeper {
            sweeper.abort();
        }
        tracing::info!("shutting down: waiting for open requests");
        self.state.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        match drain {
            None => graceful.shutdown().await,
            Some(limit) => {
                if tokio::time::timeout(limit, graceful.shutdown()).await.is_err() {
                    tracing::warn!("requests still open after the drain timeout ({} s): cut", limit.as_secs_f64());
                }
            }
        }
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
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        // a deep accept queue: a burst of connections waits there instead of having its SYNs
        // dropped (and retried a second later) while the accept loop catches up
        let listener = socket.listen(LISTEN_BACKLOG)?;
        let local = listener.local_addr()?;
        Ok((listener, local))
    }
}
