//! One engine thread per model, fed by a bounded channel of jobs. The thread owns the model's
//! KV cache and chat template; a job is a closure run on it with that state, one at a time.
//! (Continuous batching will replace the one-at-a-time loop behind this same interface.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use engine::chat::ChatTemplate;
use engine::grammar::GrammarCompiler;
use engine::guard::Evaluator;
use engine::kv_cache::{KvCache, KvType};
use engine::model::Model;
use engine::tokenizer::TokenId;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::oneshot;

use crate::error::ApiError;

/// Jobs a model may have waiting before new requests are refused with 503.
pub const QUEUE_DEPTH: usize = 64;

/// What a job sees: the model and the state the engine thread keeps between requests.
pub struct EngineState {
    pub model: Arc<Model>,
    /// The model's chat template (ChatML when the file has none).
    pub template: ChatTemplate,
    /// Sequence 0 of this cache holds `cached` (the last prompt and reply), reused by the next
    /// request that starts the same way.
    pub kv: KvCache,
    pub cached: Vec<TokenId>,
    pub guard: Option<Arc<Evaluator>>,
    /// A smaller model of the same vocabulary for speculative decoding, with its own cache
    /// (kept in step with `kv`).
    pub draft: Option<(Arc<Model>, KvCache)>,
    /// Built on the first request that needs it (about a second for a 150k vocabulary).
    grammar: Option<GrammarCompiler>,
}

impl EngineState {
    /// The model's grammar compiler, for `response_format` and forced tool calls.
    pub fn grammar(&mut self) -> Result<&GrammarCompiler, ApiError> {
        if self.grammar.is_none() {
            let compiler = GrammarCompiler::new(self.model.tokenizer()).map_err(|e| ApiError::server(format!("grammar compiler: {e}")))?;
            self.grammar = Some(compiler);
        }
        Ok(self.grammar.as_ref().expect("just built"))
    }
}

type Job = Box<dyn FnOnce(&mut EngineState) + Send>;

/// Set when the request that queued a job goes away (the client disconnected and hyper dropped
/// the handler): the job stops at its next step instead of computing an answer nobody reads.
#[derive(Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }

    /// A guard that sets the flag when dropped; keep it alive in the handler while it waits.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone(), true)
    }
}

pub struct CancelOnDrop(Cancel, bool);

impl CancelOnDrop {
    /// The handler finished normally: nothing to cancel.
    pub fn disarm(mut self) {
        self.1 = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.1 {
            self.0 .0.store(true, Ordering::Relaxed);
        }
    }
}

pub struct Worker {
    tx: SyncSender<Job>,
    /// `requests_cancelled`: jobs skipped or stopped early because their request went away.
    cancelled: Counter,
}

impl Worker {
    /// Starts the engine thread of `model` with a cache of `n_ctx` positions; `cancelled` counts
    /// the jobs whose request went away.
    pub fn start(
        id: &str,
        model: Arc<Model>,
        n_ctx: usize,
        guard: Option<Arc<Evaluator>>,
        draft: Option<Arc<Model>>,
        cancelled: Counter,
    ) -> Result<Worker, String> {
        let template = ChatTemplate::from_model(&model).map_err(|e| format!("{id}: chat template: {e}"))?;
        let kv = model.new_kv_cache(KvType::F16, n_ctx);
        let draft = draft.map(|d| {
            let kv = d.new_kv_cache(KvType::F16, n_ctx);
            (d, kv)
        });
        let mut state = EngineState { model, template, kv, cached: Vec::new(), guard, draft, grammar: None };
        let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name(format!("engine-{id}"))
            .spawn(move || {
                // ends when every sender (the registry entry and in-flight requests) is gone
                while let Ok(job) = rx.recv() {
                    job(&mut state);
                }
            })
            .map_err(|e| format!("{id}: cannot start the engine thread: {e}"))?;
        Ok(Worker { tx, cancelled })
    }

    /// Queues `job` and waits for its result; 503 when the queue is full. If the caller stops
    /// waiting (its request was dropped), `job` sees its [`Cancel`] set, and is skipped when it
    /// had not started yet.
    pub async fn run<R: Send + 'static>(&self, job: impl FnOnce(&mut EngineState, &Cancel) -> R + Send + 'static) -> Result<R, ApiError> {
        let cancel = Cancel::default();
        let guard = cancel.on_drop();
        let (done, result) = oneshot::channel();
        let flag = cancel.clone();
        let cancelled = self.cancelled.clone();
        self.spawn(move |state| {
            if flag.is_set() {
                cancelled.inc(); // gone while queued: never started
                return;
            }
            let out = job(state, &flag);
            if flag.is_set() {
                cancelled.inc(); // gone while running: the job stopped at its next step
            }
            let _ = done.send(out);
        })?;
        let out = result.await.map_err(|_| ApiError::server("the engine thread stopped"));
        guard.disarm();
        out
    }

    /// Queues `job` without waiting (streaming responses report through their own channel).
    pub fn spawn(&self, job: impl FnOnce(&mut EngineState) + Send + 'static) -> Result<(), ApiError> {
        match self.tx.try_send(Box::new(job)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(ApiError::overloaded()),
            Err(TrySendError::Disconnected(_)) => Err(ApiError::server("the engine thread stopped")),
        }
    }
}
