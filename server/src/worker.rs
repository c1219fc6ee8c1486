//! The handle the routes hold on a model's engine thread (`engine::serving::EngineLoop`): submit
//! generations (continuous batching) or exclusive jobs (guard, embeddings), with admission control
//! (a full queue answers 503 at once) and cancellation (a dropped handle stops its sequences at
//! the next step). Prompt rendering and grammar compilation happen on the caller's thread, so
//! the engine thread only runs forward passes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::chat::ChatTemplate;
use engine::generate::{Completion, Timings};
use engine::grammar::GrammarCompiler;
use engine::guard::Evaluator;
use engine::model::Model;
use tokio::sync::{mpsc, oneshot};

use engine::generate::TokenEvent;
use engine::serving::{self, EngineLoop, EventSink, Job, Msg, Ticket};
pub use engine::serving::{Cancel, CancelOnDrop, EngineState, LoopConfig, LoopMetrics, PromptProgress, SeqSpec};

use crate::error::ApiError;

/// What a generation reports to the routes, for output `index` of its request: the engine
/// thread's events, its errors as the API's.
#[derive(Debug)]
pub enum SeqEvent {
    /// A streamed token, with the output's times up to it.
    Token {
        index: usize,
        event: TokenEvent,
        timings: Timings,
    },
    /// How far the prompt has been read (outputs that asked for it).
    Progress {
        index: usize,
        progress: PromptProgress,
    },
    Done {
        index: usize,
        result: Result<Completion, ApiError>,
    },
}

/// The async side of a request, as the engine thread's sink of its events.
struct Events(mpsc::UnboundedSender<SeqEvent>);

impl EventSink for Events {
    fn send(&self, event: serving::SeqEvent) -> bool {
        let event = match event {
            serving::SeqEvent::Token { index, event, timings } => SeqEvent::Token { index, event, timings },
            serving::SeqEvent::Progress { index, progress } => SeqEvent::Progress { index, progress },
            serving::SeqEvent::Done { index, result } => SeqEvent::Done { index, result: result.map_err(ApiError::from) },
        };
        self.0.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// The outputs of one submitted request, as they come. Dropping it cancels what is left.
pub struct Generation {
    events: mpsc::UnboundedReceiver<SeqEvent>,
    n: usize,
    stopped: Arc<AtomicBool>,
}

impl Generation {
    /// The next event (`None` once every output is done).
    pub async fn next(&mut self) -> Option<SeqEvent> {
        self.events.recv().await
    }

    /// Ends every output now, on purpose (a guardrail cut the reply): the engine thread frees
    /// their sequences at its next step, without counting a cancelled request.
    pub fn stop(self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Outputs that were submitted.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Waits for every output; the first error fails the request.
    pub async fn collect(mut self) -> Result<Vec<Completion>, ApiError> {
        let mut done: Vec<Option<Completion>> = (0..self.n).map(|_| None).collect();
        while let Some(event) = self.next().await {
            if let SeqEvent::Done { index, result } = event {
                done[index] = Some(result?);
            }
        }
        done.into_iter().map(|c| c.ok_or_else(|| ApiError::server("the engine thread stopped"))).collect()
    }
}

pub struct Worker {
    tx: Sender<Msg>,
    /// Requests submitted and not finished (running or waiting).
    outstanding: Arc<AtomicUsize>,
    /// When the worker started, and when it was last given work (milliseconds after that).
    started: Instant,
    last_used_ms: AtomicU64,
    limit: usize,
    config: LoopConfig,
    template: Arc<ChatTemplate>,
    /// Built on the first request that needs it (about a second for a 150k vocabulary).
    grammar: Mutex<Option<GrammarCompiler>>,
    model: Arc<Model>,
}

impl Worker {
    /// Starts the engine thread of `model`.
    pub fn start(
        id: &str,
        model: Arc<Model>,
        config: LoopConfig,
        guard: Option<Arc<Evaluator>>,
        draft: Option<Arc<Model>>,
        metrics: impl LoopMetrics + 'static,
    ) -> Result<Worker, String> {
        if config.parallel == 0 || config.prefill_chunk == 0 {
            return Err(format!("{id}: --parallel and the prefill chunk must be at least 1"));
        }
        let template = Arc::new(ChatTemplate::from_model(&model).map_err(|e| format!("{id}: chat template: {e}"))?);
        let (tx, rx) = channel::<Msg>();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let engine_loop = EngineLoop::new(model.clone(), guard, draft, config.clone(), rx, outstanding.clone(), Box::new(metrics));
        std::thread::Builder::new()
            .name(format!("engine-{id}"))
            .spawn(move || engine_loop.run())
            .map_err(|e| format!("{id}: cannot start the engine thread: {e}"))?;
        let limit = config.parallel + config.queue;
        Ok(Worker {
            tx,
            outstanding,
            started: Instant::now(),
            last_used_ms: AtomicU64::new(0),
            limit,
            config,
            template,
            grammar: Mutex::new(None),
            model,
        })
    }

    /// How long the model has had no work, or `None` while it has some. Work counts as use
    /// when it is given and whenever this finds it still running (so a long request ends its
    /// model's idle time at most one look late).
    pub fn idle_for(&self) -> Option<Duration> {
        if self.outstanding.load(Ordering::Relaxed) > 0 {
            self.touch();
            return None;
        }
        let last = Duration::from_millis(self.last_used_ms.load(Ordering::Relaxed));
        Some(self.started.elapsed().saturating_sub(last))
    }

    fn touch(&self) {
        self.last_used_ms.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Whether the model has as much work as it accepts (`parallel` running and a full queue):
    /// a new request would get 503.
    pub fn saturated(&self) -> bool {
        self.outstanding.load(Ordering::Relaxed) >= self.limit
    }

    pub fn config(&self) -> &LoopConfig {
        &self.config
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The model's grammar compiler, for `response_format`, `grammar` and forced tool calls (blocking:
    /// call it off the async threads).
    pub fn grammar(&self) -> Result<GrammarCompiler, ApiError> {
        let mut slot = self.grammar.lock().expect("grammar lock");
        if slot.is_none() {
            let compiler = GrammarCompiler::new(self.model.tokenizer()).map_err(|e| ApiError::server(format!("grammar compiler: {e}")))?;
            *slot = Some(compiler);
        }
        Ok(slot.clone().expect("just built"))
    }

    /// A place in the system, or 503 when `parallel + queue` requests are already in it.
    pub(crate) fn admit(&self) -> Result<Ticket, ApiError> {
        self.ticket()
    }

    /// Queues an exclusive job nobody waits on (it reports through channels of its own, to
    /// requests that hold their own places: the job itself is never refused).
    pub(crate) fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.touch();
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        let ticket = Ticket::held(self.outstanding.clone());
        let job: Job = Box::new(move |state: &mut EngineState| {
            job(state);
            drop(ticket);
        });
        self.tx.send(Msg::Job { job, cancel: Cancel::default() }).map_err(|_| ApiError::server("the engine thread stopped"))
    }

    fn ticket(&self) -> Result<Ticket, ApiError> {
        self.touch();
        let before = self.outstanding.fetch_add(1, Ordering::Relaxed);
        let ticket = Ticket::held(self.outstanding.clone());
        if before >= self.limit {
            return Err(ApiError::overloaded());
        }
        Ok(ticket)
    }

    /// Submits the outputs of one request; they are decoded in the continuous batch.
    pub fn generate(&self, seqs: Vec<SeqSpec>) -> Result<Generation, ApiError> {
        let ticket = self.ticket()?;
        let (events, rx) = mpsc::unbounded_channel();
        let n = seqs.len();
        let stopped = Arc::new(AtomicBool::new(false));
        self.tx
            .send(Msg::Generate { seqs, events: Box::new(Events(events)), ticket, stopped: stopped.clone() })
            .map_err(|_| ApiError::server("the engine thread stopped"))?;
        Ok(Generation { events: rx, n, stopped })
    }

    /// Queues an exclusive job (run between two steps of the batch) and waits for its result;
    /// 503 when the queue is full. If the caller stops waiting (its request was dropped), `job`
    /// sees its [`Cancel`] set, and is skipped when it had not started yet.
    pub async fn run<R: Send + 'static>(&self, job: impl FnOnce(&mut EngineState, &Cancel) -> R + Send + 'static) -> Result<R, ApiError> {
        let ticket = self.ticket()?;
        let cancel = Cancel::default();
        let guard = cancel.on_drop();
        let (done, result) = oneshot::channel();
        let flag = cancel.clone();
        let job: Job = Box::new(move |state: &mut EngineState| {
            let result = job(state, &flag);
            drop(ticket); // the place is free before the caller has its answer
            let _ = done.send(result);
        });
        self.tx.send(Msg::Job { job, cancel }).map_err(|_| ApiError::server("the engine thread stopped"))?;
        let out = result.await.map_err(|_| ApiError::server("the request was cancelled"));
        guard.disarm();
        out
    }
}
