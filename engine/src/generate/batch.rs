//! Lockstep batch generation: several outputs advance together, one forward pass per step for
//! all of them (prompts prefilled in the same first pass). Finished sequences drop out; the
//! others keep going. Jobs with the same prompt (several samples of one request) share its
//! prefill: it runs once and the cache blocks are shared copy-on-write. Used where a fixed set
//! of requests arrives at once (guard batches, `n` choices, tests).

use super::{Completion, FinishReason, GenerateError, GenerateParams, SequenceDecoder, Usage};
use crate::kv_cache::KvCache;
use crate::model::{BatchEntry, Model, ModelError};
use crate::tokenizer::TokenId;

/// Generates an output for every `(prompt, params)`, sequence `i` of `kv` for job `i` (those
/// sequences are cleared first). Outputs are the same as generating each alone: the forward
/// pass is batch-invariant.
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
        let usage = Usage { prompt_tokens: prompt.len(), ..Usage::default() };
        seqs.push((decoder, prompt, usage));
    }
    share_prefills(model, kv, &seqs)?;
    loop {
        let mut batch = Vec::new();
        let mut owners = Vec::new();
        for (i, (decoder, history, _)) in seqs.iter_mut().enumerate() {
            if decoder.is_finished() {
                continue;
            }
            let seq = i as u32;
            let fed = kv.seq_len(seq);
            if history.len() > n_ctx {
                decoder.end(FinishReason::Length);
                continue;
            }
            batch.extend(BatchEntry::sequence(seq, &history[fed..], fed as u32, false));
            owners.push(i);
        }
        if owners.is_empty() {
            break;
        }
        let logits = model.forward(kv, &batch)?;
        for (row, &i) in owners.iter().enumerate() {
            let (decoder, history, _) = &mut seqs[i];
            let event = decoder.step(model.tokenizer(), logits.row(row))?;
            if let Some(t) = event.token {
                history.push(t);
            }
        }
    }
    Ok(seqs
        .into_iter()
        .map(|(decoder, _, usage)| {
            let (text, tokens, logprobs, finish) = decoder.into_parts();
            let usage = Usage { completion_tokens: tokens.len(), ..usage };
            Completion { text, tokens, finish, usage, logprobs }
        })
        .collect())
}

/// Prefills each distinct prompt once (all but its last token, whose logits each sequence
/// computes itself) and forks that cache into the sequences with the same prompt.
fn share_prefills(
    model: &Model,
    kv: &mut KvCache,
    seqs: &[(SequenceDecoder, Vec<TokenId>, Usage)],
) -> Result<(), GenerateError> {
    let mut first_with: Vec<Option<usize>> = vec![None; seqs.len()];
    let mut batch = Vec::new();
    for (i, (_, prompt, _)) in seqs.iter().enumerate() {
        match seqs[..i].iter().position(|(_, p, _)| p == prompt) {
            Some(j) if prompt.len() > 1 => first_with[i] = Some(j),
            Some(_) => {}
            None if prompt.len() > 1 && seqs[i + 1..].iter().any(|(_, p, _)| p == prompt) => {
                batch.extend(BatchEntry::sequence(i as u32, &prompt[..prompt.len() - 1], 0, false));
            }
            None => {}
        }
    }
    if batch.is_empty() {
        return Ok(());
    }
    for e in &mut batch {
        e.logits = false;
    }
    model.forward(kv, &batch)?;
    for (i, first) in first_with.iter().enumerate() {
        if let Some(j) = *first {
            kv.fork(j as u32, i as u32).map_err(ModelError::from)?;
        }
    }
    Ok(())
}
