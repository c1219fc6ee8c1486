//! The engine thread of one model: continuous batching. Every step admits waiting sequences
//! while there is a free slot and KV-cache room (forking the blocks of the longest cached or
//! running prefix of their prompt), then runs one forward pass for all running sequences: one
//! token for each that is decoding, and chunks of prompts being prefilled within the step's
//! prefill budget, so that a long prompt never stalls the others for long. A finished sequence
//! leaves the batch at once and its cache stays behind as a prefix-cache entry; a sequence whose
//! client went away leaves at the next step and frees its blocks. Exclusive jobs (guard,
//! embeddings) run between two steps. Speculation: every decoding sequence that may draft
//! brings its proposals into the step's one pass and keeps those that are the tokens its own
//! draws give (its caches cut back to that); a draft model proposes for all of them in shared
//! passes of its own (`propose_batch`), `--spec ngram` from each sequence's own tokens at no
//! pass at all; with both, the lookup first and the draft model for those it finds nothing for.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use super::protocol::{EngineState, EventSink, LoopConfig, LoopMetrics, Msg, PromptProgress, SeqError, SeqEvent, SeqSpec, Ticket};
use super::spec_cost::SpecCost;
use crate::generate::{accept_proposals, Completion, FinishReason, GenerateError, SequenceDecoder, Timings, TokenEvent, Usage};
use crate::guard::{Evaluator, PromptStats};
use crate::kv_cache::{common_prefix, KvCache, PrefixCache, SeqId, BLOCK_POSITIONS};
use crate::model::vision::PromptImages;
use crate::model::{BatchEntry, InputEntry, LoraSchedule, Model};
use crate::tokenizer::TokenId;

mod speculation;

use speculation::Rounds;

/// One request's outputs.
struct Group {
    events: Box<dyn EventSink>,
    /// Outputs not yet done.
    remaining: usize,
    /// One of its outputs has been admitted (it no longer counts as queued).
    started: bool,
    /// Set when the request stopped it on purpose (a guardrail cut it): not a cancellation.
    stopped: Arc<AtomicBool>,
    ticket: Ticket,
}

struct Waiting {
    group: u64,
    index: usize,
    spec: SeqSpec,
}

struct Running {
    group: u64,
    index: usize,
    seq: SeqId,
    decoder: SequenceDecoder,
    /// The prompt, then every output token; the cache holds all but the last (decoding) or a
    /// prefix of the prompt (prefilling).
    history: Vec<TokenId>,
    prompt_len: usize,
    usage: Usage,
    stream: bool,
    speculative: bool,
    /// The rows of the prompt's images (its ids past the vocabulary).
    images: PromptImages,
    /// The LoRA adapters its rows run with, each from where it starts.
    lora: LoraSchedule,
    /// Positions it may reach (its prompt and token budget), reserved at admission.
    reserved: usize,
    deadline: Option<Instant>,
    /// Its speculation rounds by where their proposals come from.
    rounds: Rounds,
    /// When it was admitted, and when its first output token came.
    admitted: Instant,
    first_token: Option<Instant>,
    /// It reports the reading of its prompt.
    progress: bool,
}

pub struct EngineLoop {
    state: EngineState,
    kv: KvCache,
    draft: Option<(Arc<Model>, KvCache)>,
    config: LoopConfig,
    rx: Receiver<Msg>,
    outstanding: Arc<AtomicUsize>,
    groups: HashMap<u64, Group>,
    next_group: u64,
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    /// Finished sequences by the adapters their cache was computed with.
    cache: PrefixCache<LoraSchedule>,
    next_seq: SeqId,
    /// A hybrid model's state slots one sequence may hold ([`state_slots_per_sequence`]).
    state_slots: usize,
    capacity_blocks: usize,
    metrics: Box<dyn LoopMetrics>,
    /// The guard's prompt counts at the last job's end.
    guard_prompts_seen: PromptStats,
    /// Steps run: the clock of the sequences' draft back-offs.
    steps: u64,
    /// What the passes have cost, for speculation under load.
    spec_cost: SpecCost,
}

/// What one sequence's rows of a step gave: the events of the tokens it committed and how many
/// of its proposals were kept.
type StepOutcome = Result<(Vec<TokenEvent>, usize), GenerateError>;

/// A sequence's times until now: admission to its first token (or to now, before it), and its
/// first token to now.
fn timings(admitted: Instant, first_token: Option<Instant>) -> Timings {
    let now = Instant::now();
    Timings { prompt: first_token.unwrap_or(now) - admitted, output: first_token.map_or(Duration::ZERO, |f| now - f) }
}

fn blocks(positions: usize) -> usize {
    positions.div_ceil(BLOCK_POSITIONS)
}

/// A hybrid model's state checkpoints in a prompt, besides the one before its last token: every
/// `STATE_CHECKPOINT_EVERY` positions, the last `STATE_CHECKPOINTS` of them (where later prompts
/// sharing a long start resume; each costs one sequence's states).
const STATE_CHECKPOINT_EVERY: usize = 512;
const STATE_CHECKPOINTS: usize = 4;

/// A hybrid model's state slots one sequence may hold: its current slot and a copy on write,
/// the checkpoints of its prompt (before its last token, where it meets a cached prompt, and
/// the periodic ones), and `rollback` lengths kept for a verification's proposals (the draft
/// length when it speculates, else 0).
pub fn state_slots_per_sequence(rollback: usize) -> usize {
    2 + 2 + STATE_CHECKPOINTS + rollback
}

/// The lengths of a prompt of `prompt_len` tokens whose recurrent states a sequence keeps.
fn state_checkpoints(prompt_len: usize) -> impl Iterator<Item = usize> {
    let last = prompt_len - 1;
    let every = (1..=last / STATE_CHECKPOINT_EVERY).rev().take(STATE_CHECKPOINTS).map(|k| k * STATE_CHECKPOINT_EVERY);
    std::iter::once(last).chain(every.filter(move |&l| l != last))
}

impl EngineLoop {
    /// The loop of `model` (with its guard and draft model), taking messages from `rx`;
    /// `outstanding` counts the requests in the system (queued ones among them).
    pub fn new(
        model: Arc<Model>,
        guard: Option<Arc<Evaluator>>,
        draft: Option<Arc<Model>>,
        config: LoopConfig,
        rx: Receiver<Msg>,
        outstanding: Arc<AtomicUsize>,
        metrics: Box<dyn LoopMetrics>,
    ) -> EngineLoop {
        let kv = model.new_kv_cache(config.kv_types, config.n_ctx);
        let draft = draft.map(|d| {
            let kv = d.new_kv_cache(config.kv_types, config.n_ctx);
            (d, kv)
        });
        // the positions asked for with every slot's copy-on-write block, and room beside them
        // for every slot's recurrent states
        let speculating = draft.is_some() || config.ngram.is_some();
        let state_slots = state_slots_per_sequence(if speculating { config.draft.n_draft } else { 0 });
        let capacity_blocks = blocks(config.kv_pool_positions()) + config.parallel * kv.state_blocks(state_slots);
        metrics.kv_capacity(capacity_blocks);
        EngineLoop {
            state: EngineState { model, guard },
            kv,
            draft,
            cache: PrefixCache::new(config.cache_entries),
            config,
            rx,
            outstanding,
            groups: HashMap::new(),
            next_group: 0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_seq: 0,
            state_slots,
            capacity_blocks,
            metrics,
            guard_prompts_seen: PromptStats::default(),
            steps: 0,
            spec_cost: SpecCost::default(),
        }
    }

    /// Runs until every handle on the model is gone and its work is done.
    pub fn run(mut self) {
        while self.receive() {
            self.drop_cancelled();
            self.expire();
            self.admit();
            if !self.running.is_empty() {
                // The step runs on a worker of the pool: its many parallel operations then
                // split among the workers directly, instead of each one waking the pool from
                // outside and putting this thread to sleep until it is done.
                rayon::scope(|_| self.step());
            } else if let Some(w) = self.waiting.pop_front() {
                // nothing runs and the head still cannot start: it never will
                self.fail(w.group, w.index, SeqError::Internal("the sequence could not be scheduled".into()));
            }
            self.update_gauges();
        }
        self.metrics.running(0);
        self.metrics.queue_depth(0);
        self.metrics.kv_blocks(0);
    }

    /// Takes what has arrived (waiting for it when idle). False when the channel is closed
    /// and nothing is left to do.
    fn receive(&mut self) -> bool {
        if self.running.is_empty() && self.waiting.is_empty() {
            match self.rx.recv() {
                Ok(msg) => self.accept(msg),
                Err(_) => return false,
            }
        }
        loop {
            match self.rx.try_recv() {
                Ok(msg) => self.accept(msg),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return !(self.running.is_empty() && self.waiting.is_empty()),
            }
        }
    }

    fn accept(&mut self, msg: Msg) {
        match msg {
            Msg::Job { job, cancel } => {
                // exclusive: the running sequences wait for it
                if cancel.is_set() {
                    self.metrics.cancelled();
                } else {
                    job(&mut self.state);
                    self.count_guard_prompts();
                    if cancel.is_set() {
                        self.metrics.cancelled();
                    }
                }
            }
            Msg::Generate { seqs, events, ticket, stopped } => {
                if seqs.is_empty() {
                    return;
                }
                let group = self.next_group;
                self.next_group += 1;
                self.groups.insert(group, Group { events, remaining: seqs.len(), started: false, stopped, ticket });
                self.waiting.extend(seqs.into_iter().enumerate().map(|(index, spec)| Waiting { group, index, spec }));
            }
        }
    }

    /// Requests whose handle was dropped (the client went away): their sequences leave and
    /// free their blocks.
    fn drop_cancelled(&mut self) {
        let gone: Vec<u64> = self.groups.iter().filter(|(_, g)| g.events.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            if let Some(g) = self.groups.remove(&id) {
                if !g.stopped.load(Ordering::Relaxed) {
                    self.metrics.cancelled();
                }
            }
            self.waiting.retain(|w| w.group != id);
            let (kv, draft) = (&mut self.kv, &mut self.draft);
            self.running.retain(|r| {
                if r.group != id {
                    return true;
                }
                kv.remove(r.seq);
                if let Some((_, dkv)) = draft.as_mut() {
                    dkv.remove(r.seq);
                }
                false
            });
        }
    }

    /// Sequences whose request's time is up: those without an output token yet fail with the
    /// timeout error, the others end as if their token budget ran out (`length`).
    fn expire(&mut self) {
        let now = Instant::now();
        let due = |d: &Option<Instant>| d.is_some_and(|d| d <= now);
        let mut i = 0;
        while i < self.waiting.len() {
            if due(&self.waiting[i].spec.deadline) {
                let w = self.waiting.remove(i).expect("in range");
                self.fail(w.group, w.index, SeqError::Timeout);
            } else {
                i += 1;
            }
        }
        for i in (0..self.running.len()).rev() {
            if !due(&self.running[i].deadline) {
                continue;
            }
            if self.running[i].history.len() <= self.running[i].prompt_len {
                let r = self.running.remove(i);
                self.finish(r, Some(SeqError::Timeout));
            } else {
                let event = self.running[i].decoder.end(FinishReason::Length);
                self.emit(i, event);
                let r = self.running.remove(i);
                self.finish(r, None);
            }
        }
    }

    /// Starts waiting sequences, in order, while there are free slots and room in the cache.
    fn admit(&mut self) {
        let n_ctx = self.config.n_ctx;
        let mut i = 0;
        while i < self.waiting.len() && self.running.len() < self.config.parallel {
            let prompt_len = self.waiting[i].spec.prompt.len();
            if prompt_len == 0 || prompt_len >= n_ctx {
                let w = self.waiting.remove(i).expect("in range");
                let e = format!("the prompt has {prompt_len} tokens but the context holds {n_ctx}");
                self.fail(w.group, w.index, SeqError::ContextLength(e));
                continue;
            }
            let total = (prompt_len + self.waiting[i].spec.params.max_tokens).min(n_ctx);
            // what it takes with the cache empty: its blocks, its copied block and its states
            let alone = 1 + self.kv.state_blocks(self.state_slots);
            if blocks(total) + alone > self.capacity_blocks {
                let w = self.waiting.remove(i).expect("in range");
                let e = format!(
                    "the request needs {total} positions of KV cache, more than the {} one sequence can have on this server",
                    (self.capacity_blocks - alone) * BLOCK_POSITIONS
                );
                self.fail(w.group, w.index, SeqError::ContextLength(e));
                continue;
            }
            let prompt = self.waiting[i].spec.prompt.clone();
            let lora = self.state.model.lora_schedule(&self.waiting[i].spec.lora, &prompt);
            let (mut source, mut shared, longest) = self.best_source(&prompt, &lora);
            if self.worth_waiting(&prompt, &lora, shared) {
                i += 1;
                continue;
            }
            // one more block: the shared block it writes into is copied first
            let need = blocks(total) + 1 - shared / BLOCK_POSITIONS + self.kv.state_blocks(self.state_slots);
            if !self.make_room(need, source) {
                // the cached prefix itself may hold the room it needs: start from scratch
                if source.is_none() || !self.make_room(blocks(total) + 1 + self.kv.state_blocks(self.state_slots), None) {
                    break; // first come, first served: later ones wait too
                }
                (source, shared) = (None, 0);
            }
            let w = self.waiting.remove(i).expect("in range");
            self.start(w, lora, source, shared, longest, total);
        }
    }

    /// The cached or running sequence from which the most of `prompt` run with the adapters
    /// `lora` can be reused (its positions computed with the same adapters), and how many
    /// tokens (at least the prompt's last token runs again: its logits start the output; a
    /// hybrid model's sequence resumes only where a state was kept); and the longest start of
    /// `prompt` any of them shares.
    fn best_source(&mut self, prompt: &[TokenId], lora: &LoraSchedule) -> (Option<SeqId>, usize, usize) {
        let (kv, last) = (&self.kv, prompt.len() - 1);
        let resume = |seq: SeqId, n: usize| kv.resumable(seq, n.min(last));
        let (cached, mut longest) = self.cache.best_match_by(lora, prompt, resume);
        let mut best = cached.map_or((None, 0), |(s, n)| (Some(s), n));
        for r in &self.running {
            let held = kv.seq_len(r.seq).min(r.history.len());
            let n = common_prefix(&r.history[..held], prompt).min(r.lora.agrees_for(lora));
            longest = longest.max(n);
            let n = resume(r.seq, n);
            if n > best.1 {
                best = (Some(r.seq), n);
            }
        }
        if best.1 == 0 {
            return (None, 0, longest);
        }
        (best.0, best.1, longest)
    }

    /// Whether a running sequence is still prefilling a prompt that shares at least a block
    /// more with `prompt` than can be reused now: starting after it reuses its work.
    fn worth_waiting(&self, prompt: &[TokenId], lora: &LoraSchedule, shared: usize) -> bool {
        self.running.iter().any(|r| {
            self.kv.seq_len(r.seq) < r.prompt_len
                && common_prefix(&r.history[..r.prompt_len], prompt).min(prompt.len() - 1).min(r.lora.agrees_for(lora))
                    >= shared + BLOCK_POSITIONS
        })
    }

    /// Blocks the running sequences may still add: each its reservation, plus one copied block,
    /// and a hybrid model's state slots it may still take (counted as blocks; the ones it holds
    /// are in use already).
    fn growth(&self) -> usize {
        let positions: usize = self.running.iter().map(|r| (blocks(r.reserved) + 1).saturating_sub(blocks(self.kv.seq_len(r.seq)))).sum();
        let states: usize = self.running.iter().map(|r| self.state_slots.saturating_sub(self.kv.state_slots(r.seq))).sum();
        positions + self.kv.state_blocks(states)
    }

    /// Blocks in use, a hybrid model's state slots among them.
    fn used_blocks(&self) -> usize {
        self.kv.live_blocks() + self.kv.state_blocks(self.kv.live_state_slots())
    }

    /// Evicts prefix-cache entries (never `keep`) until `need` more blocks fit.
    fn make_room(&mut self, need: usize, keep: Option<SeqId>) -> bool {
        loop {
            if self.used_blocks() + self.growth() + need <= self.capacity_blocks {
                return true;
            }
            match self.cache.evict_lru(keep) {
                Some(seq) => self.remove_seq(seq),
                None => return false,
            }
        }
    }

    fn remove_seq(&mut self, seq: SeqId) {
        self.kv.remove(seq);
        if let Some((_, dkv)) = self.draft.as_mut() {
            dkv.remove(seq);
        }
    }

    fn start(&mut self, w: Waiting, lora: LoraSchedule, source: Option<SeqId>, shared: usize, longest: usize, total: usize) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let mut hit = false;
        if let (Some(src), true) = (source, shared > 0) {
            if self.kv.fork(src, seq).is_ok() {
                // a hybrid model's fork resumes where a state was kept (perhaps nowhere)
                hit = self.kv.truncate(seq, shared) > 0;
            }
            if let Some((_, dkv)) = self.draft.as_mut() {
                if dkv.seq_len(src) > 0 && dkv.fork(src, seq).is_ok() {
                    dkv.truncate(seq, shared);
                }
            }
        }
        self.metrics.prefix_lookup(hit);
        let cached = self.kv.seq_len(seq);
        let prompt_len = w.spec.prompt.len();
        // a hybrid's checkpoints; one where this prompt's start meets a cached or running one's
        // (at a block boundary), so that the next prompt sharing that start (a system prompt
        // and another question) resumes there
        let meets = longest.min(prompt_len - 1) / BLOCK_POSITIONS * BLOCK_POSITIONS;
        for len in state_checkpoints(prompt_len).chain(std::iter::once(meets)).filter(|&l| l > cached) {
            self.kv.keep_state_at(seq, len);
        }
        self.metrics.prompt(prompt_len, cached);
        if let Some(g) = self.groups.get_mut(&w.group) {
            g.started = true;
        }
        let decoder = match SequenceDecoder::new(self.state.model.tokenizer(), &w.spec.prompt, w.spec.params) {
            Ok(d) => d,
            Err(e) => {
                self.remove_seq(seq);
                self.fail(w.group, w.index, e.into());
                return;
            }
        };
        let usage = Usage { prompt_tokens: prompt_len, cached_tokens: cached, ..Usage::default() };
        let r = Running {
            group: w.group,
            index: w.index,
            seq,
            decoder,
            history: w.spec.prompt,
            prompt_len,
            usage,
            stream: w.spec.stream,
            deadline: w.spec.deadline,
            speculative: w.spec.speculative && w.spec.images.is_empty(),
            images: w.spec.images,
            lora,
            reserved: total,
            rounds: self.fresh_rounds(),
            admitted: Instant::now(),
            first_token: None,
            progress: w.spec.progress,
        };
        // a budget of 0 tokens reads its prompt into the cache (to be reused) and samples nothing
        self.running.push(r);
        let progress = PromptProgress { total: prompt_len, cached, processed: cached, elapsed: Duration::ZERO };
        self.report_progress(self.running.len() - 1, progress);
    }

    /// One forward pass for every running sequence: one token for each that decodes (with its
    /// proposals, checked in the same pass), and chunks of the prompts being prefilled.
    fn step(&mut self) {
        self.steps += 1;
        let n_ctx = self.config.n_ctx;
        let mut finished: Vec<(usize, Option<SeqError>)> = Vec::new();
        let (proposals, sources) = self.propose(&mut finished);
        let mut batch = Vec::new();
        // (running sequence, its logits rows: 1, or 1 + its proposals)
        let mut owners: Vec<(usize, usize)> = Vec::new();
        let mut ended = Vec::new();
        let mut in_batch = 0;
        let mut bad = Vec::new();
        // sequences whose prompts this pass reads (the last token of one included)
        let mut reading = Vec::new();
        let n_vocab = self.state.model.tokenizer().n_vocab();
        // each sequence's adapters, for its rows
        let loras: Vec<LoraSchedule> = self.running.iter().map(|r| r.lora.clone()).collect();
        // every decoding sequence advances one token, and checks its proposals
        for (i, r) in self.running.iter_mut().enumerate() {
            let fed = self.kv.seq_len(r.seq);
            if r.history.len() - fed != 1 || finished.iter().any(|&(f, _)| f == i) {
                continue;
            }
            if r.decoder.is_finished() {
                // a budget of 0 whose prompt is read but its last token (which only samples)
                finished.push((i, None));
                continue;
            }
            if r.history.len() > n_ctx {
                ended.push((i, r.decoder.end(FinishReason::Length)));
                continue;
            }
            let entry = InputEntry::from(BatchEntry { seq: r.seq, token: r.history[fed], pos: fed as u32, logits: true });
            batch.push(entry.with_lora(loras[i].at(entry.pos)));
            for (j, &token) in proposals[i].iter().enumerate() {
                let entry = InputEntry::from(BatchEntry { seq: r.seq, token, pos: (fed + 1 + j) as u32, logits: true });
                batch.push(entry.with_lora(loras[i].at(entry.pos)));
            }
            owners.push((i, 1 + proposals[i].len()));
            in_batch += 1;
            if fed < r.prompt_len {
                reading.push(i);
            }
        }
        // prompts advance within the prefill budget, oldest first
        let mut budget = self.config.prefill_chunk;
        // sequences with a budget of 0 whose prompts this pass finishes reading
        let mut read = Vec::new();
        for (i, r) in self.running.iter().enumerate() {
            let fed = self.kv.seq_len(r.seq);
            let pending = r.history.len() - fed;
            if pending <= 1 || budget == 0 {
                continue;
            }
            // an image's rows that see each other are never cut (a chunk may pass the budget)
            let take = r.images.chunk_end(&r.history[fed..], pending.min(budget));
            budget = budget.saturating_sub(take);
            let last = take == pending;
            let samples = !r.decoder.is_finished();
            match r.images.entries(r.seq, &r.history[fed..fed + take], fed as u32, n_vocab, last && samples) {
                Ok(entries) => batch.extend(entries.into_iter().map(|e| e.with_lora(loras[i].at(e.pos)))),
                Err(id) => {
                    bad.push((i, SeqError::Internal(format!("prompt id {id} is neither a token nor an image row"))));
                    continue;
                }
            }
            match (last, samples) {
                (true, true) => owners.push((i, 1)),
                (true, false) => read.push(i),
                _ => {}
            }
            in_batch += 1;
            reading.push(i);
        }
        finished.extend(bad.into_iter().map(|(i, e)| (i, Some(e))));
        for (i, event) in ended {
            self.emit(i, event);
            finished.push((i, None));
        }
        if !batch.is_empty() {
            // a hybrid model keeps its states after every proposal, to return to the last kept
            self.kv.keep_states_for(proposals.iter().map(Vec::len).max().unwrap_or(0));
            self.metrics.step(in_batch);
            let started = Instant::now();
            let forward = self.state.model.forward_inputs(&mut self.kv, &batch);
            self.spec_cost.pass.record(batch.len(), started.elapsed().as_secs_f64());
            match forward {
                Ok(logits) => {
                    finished.extend(read.iter().map(|&i| (i, None)));
                    for &i in &reading {
                        let r = &self.running[i];
                        let processed = self.kv.seq_len(r.seq).min(r.prompt_len);
                        let progress =
                            PromptProgress { total: r.prompt_len, cached: r.usage.cached_tokens, processed, elapsed: r.admitted.elapsed() };
                        self.report_progress(i, progress);
                    }
                    let tokenizer = self.state.model.tokenizer();
                    let mut rows_of = vec![None; self.running.len()];
                    let mut first = 0;
                    for &(i, rows) in &owners {
                        rows_of[i] = Some(first);
                        first += rows;
                    }
                    // sampling (a softmax over the vocabulary each) runs on every core
                    let steps: Vec<(usize, StepOutcome)> = self
                        .running
                        .par_iter_mut()
                        .enumerate()
                        .filter_map(|(i, r)| {
                            let first = rows_of[i]?;
                            let p = &proposals[i];
                            let step = if p.is_empty() {
                                r.decoder.step(tokenizer, logits.row(first)).map(|event| {
                                    if let Some(t) = event.token {
                                        r.history.push(t);
                                    }
                                    (vec![event], 0)
                                })
                            } else {
                                accept_proposals(&mut r.decoder, tokenizer, &mut r.history, p, |j| logits.row(first + j))
                            };
                            Some((i, step))
                        })
                        .collect();
                    for (i, step) in steps {
                        match step {
                            Ok((events, accepted)) => {
                                let r = &mut self.running[i];
                                let drafted = proposals[i].len();
                                if drafted > 0 {
                                    // the caches keep the last token and the kept proposals
                                    let kept = self.kv.seq_len(r.seq) - drafted + accepted;
                                    let resumed = self.kv.truncate(r.seq, kept);
                                    debug_assert_eq!(resumed, kept, "the states of the verified rows were kept");
                                    if let Some((_, dkv)) = self.draft.as_mut() {
                                        dkv.truncate(r.seq, dkv.seq_len(r.seq).min(kept));
                                    }
                                    r.usage.drafted_tokens += drafted;
                                    r.usage.accepted_tokens += accepted;
                                    let rounds = &mut r.rounds[sources[i] as usize];
                                    rounds.backoff.record(accepted);
                                    self.spec_cost.round(sources[i], &mut rounds.yields, drafted, accepted);
                                    self.metrics.drafted(sources[i], drafted, accepted);
                                }
                                r.first_token.get_or_insert_with(Instant::now);
                                if r.decoder.is_finished() {
                                    finished.push((i, None));
                                }
                                for event in events {
                                    self.emit(i, event);
                                }
                            }
                            Err(e) => finished.push((i, Some(e.into()))),
                        }
                    }
                }
                Err(e) => {
                    let e = format!("forward pass: {e}");
                    let failed = owners.iter().map(|&(i, _)| i).chain(read.iter().copied());
                    finished.extend(failed.map(|i| (i, Some(SeqError::Internal(e.clone())))));
                }
            }
        }
        finished.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        finished.dedup_by_key(|(i, _)| *i);
        for (i, error) in finished {
            let r = self.running.remove(i);
            self.finish(r, error);
        }
    }

    /// Sends a token event of running sequence `i` to its request, if it streams, with its
    /// times so far.
    fn emit(&self, i: usize, event: TokenEvent) {
        let r = &self.running[i];
        if !r.stream {
            return;
        }
        if let Some(g) = self.groups.get(&r.group) {
            let _ = g.events.send(SeqEvent::Token { index: r.index, event, timings: timings(r.admitted, r.first_token) });
        }
    }

    /// Sends how far running sequence `i` has read its prompt, if it asked.
    fn report_progress(&self, i: usize, progress: PromptProgress) {
        let r = &self.running[i];
        if !r.progress {
            return;
        }
        if let Some(g) = self.groups.get(&r.group) {
            let _ = g.events.send(SeqEvent::Progress { index: r.index, progress });
        }
    }

    /// The guard's prompts since the last job, as the prompts of this model's sequences are
    /// counted: one prefix-cache lookup each, their tokens and the cached ones.
    fn count_guard_prompts(&mut self) {
        let Some(guard) = &self.state.guard else { return };
        let now = guard.prompt_stats();
        let seen = std::mem::replace(&mut self.guard_prompts_seen, now);
        let hits = now.prompts_reusing - seen.prompts_reusing;
        for i in 0..now.prompts - seen.prompts {
            self.metrics.prefix_lookup(i < hits);
        }
        self.metrics.prompt((now.prompt_tokens - seen.prompt_tokens) as usize, (now.reused_tokens - seen.reused_tokens) as usize);
    }

    /// Reports the end of `r` (its completion, or `error`) and keeps its cache for reuse.
    fn finish(&mut self, r: Running, error: Option<SeqError>) {
        let result = match error {
            None => {
                let timings = timings(r.admitted, r.first_token);
                Ok(Completion { timings: Some(timings), ..r.decoder.into_completion(r.usage) })
            }
            Some(e) => Err(e),
        };
        if result.is_ok() {
            let held = self.kv.seq_len(r.seq).min(r.history.len());
            let mut history = r.history;
            history.truncate(held);
            for seq in self.cache.insert(r.seq, r.lora, history) {
                self.remove_seq(seq);
            }
        } else {
            self.remove_seq(r.seq);
        }
        self.report(r.group, r.index, result);
    }

    fn fail(&mut self, group: u64, index: usize, error: SeqError) {
        self.report(group, index, Err(error));
    }

    fn report(&mut self, group: u64, index: usize, result: Result<Completion, SeqError>) {
        let Some(g) = self.groups.get_mut(&group) else { return };
        g.remaining -= 1;
        if g.remaining > 0 {
            let _ = g.events.send(SeqEvent::Done { index, result });
            return;
        }
        // the last output: the request's place is given back before its answer goes out (a
        // client that sends its next request on the answer must find the place free), and
        // dropping the sink closes the request's channel
        let Group { events, ticket, .. } = self.groups.remove(&group).expect("the group is present");
        drop(ticket);
        let _ = events.send(SeqEvent::Done { index, result });
    }

    fn update_gauges(&self) {
        let started = self.groups.values().filter(|g| g.started).count();
        let queued = self.outstanding.load(Ordering::Relaxed).saturating_sub(started);
        self.metrics.queue_depth(queued);
        self.metrics.running(self.running.len());
        self.metrics.kv_blocks(self.used_blocks());
    }
}
