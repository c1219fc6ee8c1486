//! Lockstep batch generation: several outputs advance together, one forward pass per step for
//! all of them (prompts prefilled in the same first pass). Finished sequences drop out; the
//! others keep going. Sequences whose prompts start alike share that start: it is prefilled
//! once and the cache blocks are shared copy-on-write. Used where a fixed set of requests
//! arrives at once (guard scans and batches, `n` choices, tests).

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Completion, FinishReason, GenerateError, GenerateParams, SequenceDecoder, Usage};
use crate::kv_cache::{common_prefix, KvCache};
use crate::model::{BatchEntry, InputEntry, LoraSchedule, Model, ModelError};
use crate::tokenizer::TokenId;

/// One sequence of a lockstep run (sequence `i` of the cache for entry `i`).
#[derive(Debug)]
pub struct LockstepSeq {
    pub decoder: SequenceDecoder,
    /// The prompt, then every output token; the cache may already hold any prefix of it
    /// (computed with the same adapters).
    pub tokens: Vec<TokenId>,
    /// The LoRA adapters each of its positions runs with.
    pub lora: LoraSchedule,
}

/// Generates an output for every `(prompt, params)`, sequence `i` of `kv` for job `i` (those
/// sequences are cleared first). Outputs are the same as generating each alone: the forward
/// pass is batch-invariant. Jobs with the same prompt (several samples of one request) prefill
/// it once. The model's default adapters run as [`Model::default_schedule`] says.
pub fn generate_batch(
    model: &Model,
    kv: &mut KvCache,
    jobs: Vec<(Vec<TokenId>, GenerateParams)>,
) -> Result<Vec<Completion>, GenerateError> {
    let n_ctx = kv.n_ctx();
    let mut seqs = Vec::with_capacity(jobs.len());
    for (i, (prompt, params)) in jobs.into_iter().enumerate() {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        if prompt.len() > n_ctx {
            return Err(GenerateError::PromptTooLong { prompt: prompt.len(), n_ctx });
        }
        kv.remove(i as u32);
        let decoder = SequenceDecoder::new(model.tokenizer(), &prompt, params)?;
        let lora = model.default_schedule(&prompt);
        seqs.push(LockstepSeq { decoder, tokens: prompt, lora });
    }
    let prompt_lens: Vec<usize> = seqs.iter().map(|s| s.tokens.len()).collect();
    // groups of identical prompts
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, s) in seqs.iter().enumerate() {
        match groups.iter_mut().find(|g| seqs[g[0]].tokens == s.tokens) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    prefill_shared_prefixes(model, kv, &seqs, &groups)?;
    decode_lockstep(model, kv, &mut seqs, &AtomicBool::new(false), |_, _| {})?;
    Ok(seqs
        .into_iter()
        .zip(prompt_lens)
        .map(|(s, prompt_tokens)| {
            let (text, tokens, logprobs, finish) = s.decoder.into_parts();
            let usage = Usage { prompt_tokens, completion_tokens: tokens.len(), ..Usage::default() };
            Completion { text, tokens, finish, usage, logprobs, timings: None }
        })
        .collect())
}

/// For each group of two or more sequences, prefills the tokens all its members start with
/// (and compute with the same adapters) once, in one pass for all groups, and forks that cache
/// into the members. A sequence may already hold a start of its prompt (forked from a prefix
/// cache): a member holding the whole shared part keeps what it has; of the others, the one
/// holding the most computes the rest and the others fork it. Each sequence keeps at least its last token to run itself: its logits
/// start the output. Returns the positions the forked members did not compute.
pub fn prefill_shared_prefixes(
    model: &Model,
    kv: &mut KvCache,
    seqs: &[LockstepSeq],
    groups: &[Vec<usize>],
) -> Result<usize, GenerateError> {
    let mut batch = Vec::new();
    let mut forks = Vec::new();
    let mut spared = 0;
    for group in groups.iter().filter(|g| g.len() > 1) {
        let (first, lora) = (&seqs[group[0]].tokens, &seqs[group[0]].lora);
        let shared = group
            .iter()
            .map(|&i| common_prefix(first, &seqs[i].tokens).min(seqs[i].tokens.len() - 1).min(lora.agrees_for(&seqs[i].lora)))
            .min()
            .unwrap_or(0);
        let behind: Vec<usize> = group.iter().copied().filter(|&i| kv.seq_len(i as u32) < shared).collect();
        // a lone member computes its own prompt in the first decoding pass: nothing to share
        let Some(&leader) = behind.iter().rev().max_by_key(|&&i| kv.seq_len(i as u32)).filter(|_| behind.len() > 1) else {
            continue;
        };
        let held = kv.seq_len(leader as u32);
        batch.extend(first[held..shared].iter().enumerate().map(|(k, &token)| {
            let pos = (held + k) as u32;
            InputEntry::from(BatchEntry { seq: leader as u32, token, pos, logits: false }).with_lora(lora.at(pos))
        }));
        for &i in behind.iter().filter(|&&i| i != leader) {
            spared += shared - kv.seq_len(i as u32);
            forks.push((leader, i));
        }
    }
    if !batch.is_empty() {
        model.forward_inputs(kv, &batch)?;
    }
    for (src, dst) in forks {
        kv.fork(src as u32, dst as u32).map_err(ModelError::from)?;
    }
    Ok(spared)
}

/// Advances every unfinished sequence, one forward pass per step for all of them, until each
/// is finished (a sequence that would outgrow the cache ends with `Length`). `observe(i, row)`
/// sees each row of logits before sequence `i` samples from it; `cancel` is checked before
/// every pass ([`GenerateError::Cancelled`]).
pub fn decode_lockstep(
    model: &Model,
    kv: &mut KvCache,
    seqs: &mut [LockstepSeq],
    cancel: &AtomicBool,
    mut observe: impl FnMut(usize, &[f32]),
) -> Result<(), GenerateError> {
    let n_ctx = kv.n_ctx();
    loop {
        let mut batch = Vec::new();
        let mut owners = Vec::new();
        for (i, s) in seqs.iter_mut().enumerate() {
            if s.decoder.is_finished() {
                continue;
            }
            if s.tokens.len() > n_ctx {
                s.decoder.end(FinishReason::Length);
                continue;
            }
            let seq = i as u32;
            let fed = kv.seq_len(seq);
            let entries = BatchEntry::sequence(seq, &s.tokens[fed..], fed as u32, false);
            batch.extend(entries.into_iter().map(|e| InputEntry::from(e).with_lora(s.lora.at(e.pos))));
            owners.push(i);
        }
        if owners.is_empty() {
            return Ok(());
        }
        if cancel.load(Ordering::Relaxed) {
            return Err(GenerateError::Cancelled);
        }
        let logits = model.forward_inputs(kv, &batch)?;
        for (row, &i) in owners.iter().enumerate() {
            let row = logits.row(row);
            observe(i, row);
            let s = &mut seqs[i];
            if let Some(t) = s.decoder.step(model.tokenizer(), row)?.token {
                s.tokens.push(t);
            }
        }
    }
}
