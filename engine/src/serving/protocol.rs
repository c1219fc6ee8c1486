//! What a model's engine thread (`engine_loop.rs`) and the side that feeds it (a server's
//! handle, a test) say to each other: the loop's configuration, the messages it takes
//! (generations, exclusive jobs), what a sequence reports and how it can fail, where its events
//! go, the request's place in the system and its cancellation flag, and the metrics the loop
//! reports: traits, so that the loop knows no async runtime, protocol or metrics library.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::spec_cost::{Source, SpecPolicy};
use crate::backend::BLOCK_POSITIONS;
use crate::generate::{Completion, DraftSettings, GenerateError, GenerateParams, NgramDraft, Timings, TokenEvent};
use crate::guard::Evaluator;
use crate::kv_cache::{KvType, KvTypes};
use crate::model::vision::PromptImages;
use crate::model::{LoraScale, Model};
use crate::tokenizer::TokenId;

/// How a model's engine thread schedules its work.
#[derive(Clone, Debug)]
pub struct LoopConfig {
    /// Positions one sequence may hold (prompt and output).
    pub n_ctx: usize,
    /// Sequences decoded together (in flight at once).
    pub parallel: usize,
    /// Requests that may wait for a free sequence; beyond `parallel + queue` requests in the
    /// system, new ones get 503 with `Retry-After`.
    pub queue: usize,
    /// Prompt tokens prefilled per step, shared by the prompts being prefilled: a long prompt
    /// advances in chunks, between which the running sequences keep decoding.
    pub prefill_chunk: usize,
    /// KV-cache capacity in positions for all sequences and the prefix cache together
    /// (`None`: `n_ctx * parallel`).
    pub kv_positions: Option<usize>,
    /// Finished sequences kept for prefix reuse.
    pub cache_entries: usize,
    /// How the draft model drafts (with one loaded).
    pub draft: DraftSettings,
    /// Speculation from each sequence's own tokens (`--spec ngram`): alone, or tried before the
    /// draft model (which then drafts for the sequences whose lookup finds nothing).
    pub ngram: Option<NgramDraft>,
    /// Whether a sequence's proposals are weighed against what their rows cost.
    pub speculation: SpecPolicy,
    /// The element types of the KV cache's keys and values (the draft model's too).
    pub kv_types: KvTypes,
}

impl LoopConfig {
    pub fn new(n_ctx: usize) -> LoopConfig {
        LoopConfig {
            n_ctx,
            parallel: 8,
            queue: 64,
            prefill_chunk: 256,
            kv_positions: None,
            cache_entries: 16,
            draft: DraftSettings::DEFAULT,
            ngram: None,
            speculation: SpecPolicy::WhenItPays,
            kv_types: KvType::F16.into(),
        }
    }

    /// Positions the KV cache holds for all sequences and the prefix cache together.
    pub fn kv_capacity(&self) -> usize {
        self.kv_positions.unwrap_or(self.n_ctx * self.parallel)
    }

    /// Positions the cache's pool of blocks holds: [`kv_capacity`](Self::kv_capacity) in whole
    /// blocks, and one block more per slot, which a sequence writing into a block it shares (with
    /// a cached prefix, or a prefix forked from it) copies first. So a sequence may fill the
    /// whole capacity even while that copy is pending.
    pub fn kv_pool_positions(&self) -> usize {
        self.kv_capacity().next_multiple_of(BLOCK_POSITIONS) + Self::copy_positions(self.parallel)
    }

    /// The copy-on-write room beside the capacity for `parallel` slots.
    pub fn copy_positions(parallel: usize) -> usize {
        parallel * BLOCK_POSITIONS
    }
}

/// What an exclusive job sees.
pub struct EngineState {
    pub model: Arc<Model>,
    pub guard: Option<Arc<Evaluator>>,
}

/// Work that has the model to itself, between two steps.
pub type Job = Box<dyn FnOnce(&mut EngineState) + Send>;

/// One output to generate.
pub struct SeqSpec {
    pub prompt: Vec<TokenId>,
    pub params: GenerateParams,
    /// Send each token's event (a streaming response); otherwise only the end.
    pub stream: bool,
    /// The draft model (when it decodes alone) or the n-gram lookup may propose tokens for it.
    pub speculative: bool,
    /// When the request's time is up (`timeout`): a sequence without an output token by then
    /// fails with 408, one with some ends as if its token budget ran out.
    pub deadline: Option<std::time::Instant>,
    /// The rows of the prompt's images (its ids past the vocabulary).
    pub images: PromptImages,
    /// The LoRA adapters it runs with (empty: none; an activated one from its invocation in
    /// the prompt on, [`crate::model::LoraSchedule`]). Sequences with different adapters share
    /// the steps; the prefix cache reuses only positions computed with the same ones.
    pub lora: Vec<LoraScale>,
    /// Report the reading of the prompt ([`SeqEvent::Progress`]): at admission, then after each
    /// pass that read some of it.
    pub progress: bool,
}

/// What a generation reports, for output `index` of its request.
#[derive(Debug)]
pub enum SeqEvent {
    /// A streamed token's event, with the output's times up to it: its prompt's (admission to
    /// first token) and its output's (first token to this one).
    Token {
        index: usize,
        event: TokenEvent,
        timings: Timings,
    },
    /// How much of the prompt is in the cache (sequences that asked, [`SeqSpec::progress`]).
    Progress {
        index: usize,
        progress: PromptProgress,
    },
    Done {
        index: usize,
        result: Result<Completion, SeqError>,
    },
}

/// The reading of a sequence's prompt, as llama-server's `prompt_progress` tells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptProgress {
    /// The prompt's positions.
    pub total: usize,
    /// Of those, the ones found in the prefix cache at admission.
    pub cached: usize,
    /// The ones in the cache now (the cached ones included).
    pub processed: usize,
    /// Since admission (0 in the report made at admission).
    pub elapsed: Duration,
}

/// Why a sequence ended without its completion.
#[derive(Debug, thiserror::Error)]
pub enum SeqError {
    /// The request's deadline passed before its first output token.
    #[error("the request's timeout passed before its first token")]
    Timeout,
    /// The prompt, or the positions the request may reach, do not fit.
    #[error("{0}")]
    ContextLength(String),
    /// The decoder refused the request or failed (sampling settings, a constraint, the model).
    #[error(transparent)]
    Generate(#[from] GenerateError),
    /// The loop could not run it (a failed forward pass, a prompt id it cannot read).
    #[error("{0}")]
    Internal(String),
}

/// Where a request's events go: the loop sends each as it comes and drops the sink when the
/// request is done; a sink whose receiver is gone marks the request cancelled.
pub trait EventSink: Send {
    /// Sends `event`; false when nobody receives any more.
    fn send(&self, event: SeqEvent) -> bool;
    /// Nobody receives any more (the client went away).
    fn is_closed(&self) -> bool;
}

/// What the loop takes.
pub enum Msg {
    Generate {
        seqs: Vec<SeqSpec>,
        events: Box<dyn EventSink>,
        ticket: Ticket,
        stopped: Arc<AtomicBool>,
    },
    /// The job owns its request's [`Ticket`] and drops it before it answers, so that a client
    /// sending its next request on the answer finds the place free.
    Job {
        job: Job,
        cancel: Cancel,
    },
}

/// A request's place in the system: a count of the requests in it, taken back when the ticket
/// is dropped (the request is done).
pub struct Ticket(Arc<AtomicUsize>);

impl Ticket {
    /// A place counted in `outstanding` (already incremented by the caller's admission check).
    pub fn held(outstanding: Arc<AtomicUsize>) -> Ticket {
        Ticket(outstanding)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

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

/// What the engine loop of one model reports (a server keeps it as Prometheus families labelled
/// by model).
pub trait LoopMetrics: Send {
    /// Requests accepted and waiting for a sequence slot.
    fn queue_depth(&self, waiting: usize);
    /// Sequences in the batch.
    fn running(&self, sequences: usize);
    /// KV-cache blocks in use, and the most there may be.
    fn kv_blocks(&self, used: usize);
    fn kv_capacity(&self, blocks: usize);
    /// One forward step over `sequences` sequences.
    fn step(&self, sequences: usize);
    /// A new sequence looked for a cached prefix (`hit`: and shares one).
    fn prefix_lookup(&self, hit: bool);
    /// A new sequence's prompt, of which `cached` tokens were already in the cache.
    fn prompt(&self, tokens: usize, cached: usize);
    /// A speculative round: where its proposals came from, tokens proposed and accepted.
    fn drafted(&self, source: Source, proposed: usize, accepted: usize);
    /// Work skipped or stopped because its client went away.
    fn cancelled(&self);
}
