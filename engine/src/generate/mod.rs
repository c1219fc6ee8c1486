//! Generation: a prompt in, a stream of token events out, ending with a finish reason and usage.
//!
//! [`SequenceDecoder`] is one output's state (sampling, constraint, stop rules, streaming text);
//! [`Generator`] drives one sequence through a model (prefill, then one token per forward pass,
//! or a few per pass with a draft model: `speculative.rs`); [`generate_batch`] drives several
//! sequences in lockstep through shared forward passes. Servers and the guard use these; none of
//! them knows about HTTP or terminals.

mod batch;
mod draft_model;
pub mod line_limits;
mod ngram;
mod sequence;
mod speculative;
pub mod stop;

use std::collections::VecDeque;
use std::time::Duration;

pub use batch::{decode_lockstep, generate_batch, prefill_shared_prefixes, LockstepSeq};
pub use sequence::{SequenceDecoder, TokenConstraint, MAX_TOP_LOGPROBS};

use crate::kv_cache::{KvCache, SeqId};
use crate::logprobs::TokenLogprob;
use crate::model::{BatchEntry, LoraSchedule, Model, ModelError};
use crate::sampling::{SamplingError, SamplingParams};
use crate::tokenizer::TokenId;
pub use draft_model::{propose_batch, DraftBackoff, DraftRequest, DraftSettings};
pub use ngram::{lookups_quiet, NgramDraft, DRAFT_AFTER_QUIET_STEPS};
pub(crate) use speculative::{accept_proposals, proposal_budget};
pub use speculative::{check_draft, speculative_round, Draft, SpeculativeRound};

/// What to generate and when to stop.
pub struct GenerateParams {
    pub sampling: SamplingParams,
    /// The most output tokens (0 produces none: `generate` runs nothing, the serving loop reads
    /// the prompt into its cache for later requests).
    pub max_tokens: usize,
    /// Stop strings: the output ends before the first occurrence of any of them.
    pub stop: Vec<String>,
    /// End at the vocabulary's end-of-generation tokens (false: they are ordinary tokens).
    pub stop_at_eog: bool,
    /// Report each output token's log-probability with this many alternatives (at most 20).
    pub logprobs: Option<usize>,
    /// Report them from the distribution the token was drawn from (after the logit bias,
    /// penalties, constraint, cuts and temperature; llama-server's `post_sampling_probs`)
    /// instead of the model's raw softmax: only the tokens that could be drawn, at most
    /// `logprobs` of them. A token chosen by speculative verification reports the raw softmax.
    pub post_sampling_logprobs: bool,
    /// Restrict the output (structured output); applied before sampling.
    pub constraint: Option<Box<dyn TokenConstraint>>,
    /// From the second line on, a line indented by fewer spaces or tabs ends the output where
    /// its text starts (llama-server's `n_indent`; 0: no limit). Ends with `Length`.
    pub min_indent: usize,
    /// Once this long has passed since the first token, the output ends at its next line end
    /// (llama-server's `t_max_predict_ms`). Ends with `Length`.
    pub line_time_limit: Option<Duration>,
}

impl Default for GenerateParams {
    fn default() -> GenerateParams {
        GenerateParams {
            sampling: SamplingParams::default(),
            max_tokens: 256,
            stop: Vec::new(),
            stop_at_eog: true,
            logprobs: None,
            post_sampling_logprobs: false,
            constraint: None,
            min_indent: 0,
            line_time_limit: None,
        }
    }
}

impl GenerateParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> GenerateParams {
        GenerateParams { sampling: SamplingParams::greedy(), max_tokens, ..GenerateParams::default() }
    }
}

/// Why an output ended (the OpenAI names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-generation token, a stop string, or a completed constraint.
    Stop,
    /// The token budget or the context ran out.
    Length,
    /// The output is a call of tools (decided by the chat layer that parses it).
    ToolCalls,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// One step of the stream.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// The output token, or `None` for an event that only ends the output (the
    /// end-of-generation token the model chose, or the context running out).
    pub token: Option<TokenId>,
    /// Text that became final with this step (possibly empty: half a character or a possible
    /// stop string is held back). The texts of all events concatenate to the output text.
    pub text: String,
    pub logprob: Option<TokenLogprob>,
    /// Set on the last event.
    pub finish: Option<FinishReason>,
}

/// Token counts of one generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Of the prompt, how many were already in the cache (not recomputed).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// Speculative decoding: tokens the draft proposed, and how many of them the target kept.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

/// A finished generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub text: String,
    pub tokens: Vec<TokenId>,
    pub finish: FinishReason,
    pub usage: Usage,
    /// One entry per output token when log-probabilities were asked for.
    pub logprobs: Vec<TokenLogprob>,
    /// How long it took, where the serving loop ran it.
    pub timings: Option<Timings>,
}

/// The time a served sequence took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// From its admission to its first output token: reading the prompt (and the other
    /// sequences' rows of the same passes).
    pub prompt: Duration,
    /// From its first output token to its end.
    pub output: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens but the context holds {n_ctx}")]
    PromptTooLong { prompt: usize, n_ctx: usize },
    #[error("top logprobs must be at most {MAX_TOP_LOGPROBS}, got {0}")]
    TooManyLogprobs(usize),
    #[error("output constraint: {0}")]
    Constraint(String),
    #[error("draft model: {0}")]
    Draft(String),
    /// The caller's cancel flag was set.
    #[error("generation was cancelled")]
    Cancelled,
}

/// A generator's draft model: what [`Draft::Model`] borrows each round.
struct ModelDraft<'a> {
    model: &'a Model,
    kv: &'a mut KvCache,
    settings: DraftSettings,
    backoff: DraftBackoff,
}

/// Generates one output for one sequence, as an iterator of [`TokenEvent`]s. Each call to
/// `next` runs one forward pass (one token, or a speculative round of several).
pub struct Generator<'a> {
    model: &'a Model,
    kv: &'a mut KvCache,
    seq: SeqId,
    decoder: SequenceDecoder,
    /// The prompt, then every output token: what the cache holds, or will after the next pass.
    history: Vec<TokenId>,
    usage: Usage,
    /// Where proposals come from, tried in this order each pass: the n-gram lookup (free), then
    /// the draft model.
    ngram: Option<(NgramDraft, DraftBackoff)>,
    draft: Option<ModelDraft<'a>>,
    /// The pass whose round the lookup last proposed.
    looked_up_at: u64,
    queue: VecDeque<TokenEvent>,
    failed: bool,
    /// Forward passes so far: the clock of the draft's back-off.
    passes: u64,
    /// The model's default adapters as this prompt runs them.
    lora: LoraSchedule,
}

impl<'a> Generator<'a> {
    /// Starts generating after `prompt` in sequence `seq` of `kv`. The cache may already hold
    /// the start of the prompt (a previous turn of a conversation): its first
    /// `kv.seq_len(seq)` tokens must equal the prompt's first tokens, computed with the same
    /// adapters (truncate the sequence to [`crate::kv_cache::common_prefix`] first, and with an
    /// activated adapter to where the last turn's [`Generator::lora`] agrees with this one's);
    /// those are reused, not recomputed. The model's default adapters run as
    /// [`Model::default_schedule`] of the prompt says.
    pub fn new(
        model: &'a Model,
        kv: &'a mut KvCache,
        seq: SeqId,
        prompt: &[TokenId],
        params: GenerateParams,
    ) -> Result<Generator<'a>, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        if prompt.len() > kv.n_ctx() {
            return Err(GenerateError::PromptTooLong { prompt: prompt.len(), n_ctx: kv.n_ctx() });
        }
        let decoder = SequenceDecoder::new(model.tokenizer(), prompt, params)?;
        // at least the last prompt token is run again: its logits start the output
        // (a hybrid model's cache may resume from an earlier position only)
        let cached = kv.truncate(seq, kv.seq_len(seq).min(prompt.len() - 1));
        let usage = Usage { prompt_tokens: prompt.len(), cached_tokens: cached, ..Usage::default() };
        Ok(Generator {
            model,
            kv,
            seq,
            decoder,
            history: prompt.to_vec(),
            usage,
            ngram: None,
            draft: None,
            looked_up_at: 0,
            queue: VecDeque::new(),
            failed: false,
            passes: 0,
            lora: model.default_schedule(prompt),
        })
    }

    /// Speculative decoding: `draft` (a smaller model with the same vocabulary) proposes up to
    /// tokens per round as `settings` say, in `draft_kv` (sequence `seq`, reused like the target's
    /// cache), and the target checks them in one batched pass. The output is the target's alone,
    /// token for token, greedy or seeded (`speculative.rs`). Constrained outputs decode without
    /// the draft.
    pub fn with_draft(mut self, draft: &'a Model, draft_kv: &'a mut KvCache, settings: DraftSettings) -> Result<Self, GenerateError> {
        check_draft(self.model, draft, settings)?;
        // the draft's cache holds a prefix of the prompt, and at least its last token is run again
        let cached = draft_kv.seq_len(self.seq).min(self.history.len() - 1);
        draft_kv.truncate(self.seq, cached);
        self.draft = Some(ModelDraft { model: draft, kv: draft_kv, settings, backoff: DraftBackoff::default() });
        Ok(self)
    }

    /// Speculative decoding from the sequence's own tokens: `ngram` proposes the tokens that
    /// followed the latest earlier occurrence of its last few tokens ([`NgramDraft`]), checked as
    /// a draft model's are. The output is identical; constrained outputs decode without it.
    /// With a draft model too ([`Generator::with_draft`]), the draft model proposes once the
    /// lookups have proposed nothing for [`DRAFT_AFTER_QUIET_STEPS`] passes.
    pub fn with_ngram(mut self, ngram: NgramDraft) -> Result<Self, GenerateError> {
        if ngram.n_draft == 0 || ngram.min_ngram == 0 || ngram.min_ngram > ngram.max_ngram {
            return Err(GenerateError::Draft(format!("n-gram drafting needs 1 <= min <= max n-gram and a draft of at least 1: {ngram:?}")));
        }
        self.ngram = Some((ngram, DraftBackoff::default()));
        Ok(self)
    }

    /// The adapters each position runs with.
    pub fn lora(&self) -> &LoraSchedule {
        &self.lora
    }

    /// Counts so far (final once the iterator is done).
    pub fn usage(&self) -> Usage {
        Usage { completion_tokens: self.decoder.tokens().len(), ..self.usage }
    }

    /// The text released so far.
    pub fn text(&self) -> &str {
        self.decoder.text()
    }

    /// Runs to the end and returns the whole output.
    pub fn complete(mut self) -> Result<Completion, GenerateError> {
        for event in self.by_ref() {
            event?;
        }
        let usage = self.usage();
        let (text, tokens, logprobs, finish) = self.decoder.into_parts();
        Ok(Completion { text, tokens, finish, usage, logprobs, timings: None })
    }

    /// One forward pass; its events go to the queue.
    fn advance(&mut self) -> Result<(), GenerateError> {
        self.passes += 1;
        let fed = self.kv.seq_len(self.seq);
        let pending = self.history.len() - fed;
        if pending == 1 && !self.decoder.is_constrained() {
            if let Some(round) = self.speculate()? {
                self.usage.drafted_tokens += round.drafted;
                self.usage.accepted_tokens += round.accepted;
                self.queue.extend(round.events);
                return Ok(());
            }
        }
        if fed + pending > self.kv.n_ctx() {
            self.queue.push_back(self.decoder.end(FinishReason::Length));
            return Ok(());
        }
        let batch = BatchEntry::sequence(self.seq, &self.history[fed..], fed as u32, false);
        let logits = self.model.forward_scheduled(self.kv, &batch, &self.lora)?;
        let event = self.decoder.step(self.model.tokenizer(), logits.row(0))?;
        self.record(event);
        Ok(())
    }

    /// A speculative round, if one proposes this pass: the n-gram lookup's when it is due and
    /// finds something, else the draft model's when it is due (with the lookup too, once the
    /// lookups have been quiet for [`DRAFT_AFTER_QUIET_STEPS`] passes). `None`: a plain step.
    fn speculate(&mut self) -> Result<Option<SpeculativeRound>, GenerateError> {
        let Generator { model, kv, seq, decoder, history, ngram, draft, passes, lora, looked_up_at, .. } = self;
        if let Some((ngram, backoff)) = ngram.as_mut().filter(|(_, b)| b.due(*passes)) {
            let round = speculative_round(model, kv, *seq, decoder, history, Draft::Ngram(*ngram), lora)?;
            // a lookup that found nothing is free
            if let Some(round) = round {
                backoff.record(round.accepted);
                *looked_up_at = *passes;
                return Ok(Some(round));
            }
        }
        let quiet = ngram.is_none() || lookups_quiet(*passes, *looked_up_at);
        if let Some(ModelDraft { model: d, kv: dkv, settings, backoff }) = draft.as_mut().filter(|d| quiet && d.backoff.due(*passes)) {
            let round =
                speculative_round(model, kv, *seq, decoder, history, Draft::Model { model: d, kv: dkv, settings: *settings }, lora)?;
            // a draft model's passes that proposed nothing count as a round that kept nothing
            backoff.record(round.as_ref().map_or(0, |r| r.accepted));
            return Ok(round);
        }
        Ok(None)
    }

    fn record(&mut self, event: TokenEvent) {
        if let Some(t) = event.token {
            self.history.push(t);
        }
        self.queue.push_back(event);
    }
}

impl Iterator for Generator<'_> {
    type Item = Result<TokenEvent, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(event) = self.queue.pop_front() {
            return Some(Ok(event));
        }
        if self.failed || self.decoder.is_finished() {
            return None;
        }
        if let Err(e) = self.advance() {
            self.failed = true;
            return Some(Err(e));
        }
        self.queue.pop_front().map(Ok)
    }
}

/// Generates a whole output for `prompt` in a fresh sequence 0 of `kv`.
pub fn generate(model: &Model, kv: &mut KvCache, prompt: &[TokenId], params: GenerateParams) -> Result<Completion, GenerateError> {
    kv.remove(0);
    Generator::new(model, kv, 0, prompt, params)?.complete()
}
