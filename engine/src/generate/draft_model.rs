//! A draft model's proposals for several sequences at once. Each pass of the draft runs one row
//! per sequence still drafting (the first pass also the tokens its cache lacks), so a batch of
//! sequences pays for the draft's passes once, not once per sequence, and the target then checks
//! every sequence's proposals in its own one pass. A sequence stops drafting at its budget, at an
//! end-of-generation token, or at a token the draft itself gives less than `p_min` (the softmax
//! of its logits, whatever the sequence's sampling: llama.cpp's `--draft-p-min`): a proposal
//! the draft doubts is seldom kept, and every proposal costs the target a row. A sequence's
//! proposals are drawn with a copy of its own generator: proposal `j` with the number the
//! target's draw for that position will use (`speculative.rs` says why).

use rayon::prelude::*;

use super::GenerateError;
use crate::kv_cache::{KvCache, SeqId};
use crate::logprobs::log_normalizer;
use crate::model::{BatchEntry, Model};
use crate::sampling::{distribution, Rng, SamplingParams};
use crate::tokenizer::{TokenId, Tokenizer};

/// How a draft model drafts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftSettings {
    /// Proposals per sequence and round, at most.
    pub n_draft: usize,
    /// The least probability the draft may give a token it proposes (the softmax of its logits;
    /// 0 proposes every token).
    pub p_min: f32,
}

impl DraftSettings {
    /// Up to 8 tokens, each of probability at least 0.75 under the draft (llama-server's
    /// `--draft-p-min` default).
    pub const DEFAULT: DraftSettings = DraftSettings { n_draft: 8, p_min: 0.75 };

    /// An error unless at least one token is proposed and `p_min` is a probability.
    pub fn check(&self) -> Result<(), GenerateError> {
        if self.n_draft == 0 {
            return Err(GenerateError::Draft("the number of draft tokens must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&self.p_min) {
            return Err(GenerateError::Draft(format!("the draft's least probability must be within 0 and 1, got {}", self.p_min)));
        }
        Ok(())
    }
}

/// One sequence's call for proposals.
pub struct DraftRequest<'a> {
    pub seq: SeqId,
    /// Its tokens: the target's cache holds all of them but the last.
    pub history: &'a [TokenId],
    /// Proposals wanted, at most (at least 1).
    pub k: usize,
    /// Its sampling: each proposal is drawn from the draft's distribution under them.
    pub params: &'a SamplingParams,
    /// A copy of the sequence's generator as it stands before the round (the sequence's
    /// `Sampler::rng`): the draws of proposals `0, 1, ...` take its next numbers in turn, the
    /// numbers the target's own draws for those positions will take.
    pub rng: Rng,
}

/// Proposals of `draft` (its cache `kv`) for each of `requests`, in their order. A request's
/// sequence first catches up on what the draft's cache lacks of its history, within
/// `catch_up` tokens for all of them together (a request beyond it only advances its cache by
/// what is left, and proposes nothing this time). Token ids are `target`'s.
pub fn propose_batch(
    draft: &Model,
    kv: &mut KvCache,
    target: &Tokenizer,
    settings: DraftSettings,
    catch_up: usize,
    requests: &mut [DraftRequest<'_>],
) -> Result<Vec<Vec<TokenId>>, GenerateError> {
    let n_vocab = target.n_vocab();
    let mut out: Vec<Vec<TokenId>> = vec![Vec::new(); requests.len()];
    // the first pass: every request's missing tokens, logits after the last for those that
    // caught up entirely
    let mut entries = Vec::new();
    let mut drafting = Vec::new(); // (request, position of its next row)
    let mut budget = catch_up;
    for (j, r) in requests.iter().enumerate() {
        let fed = r.history.len() - 1; // what the target holds
        let held = kv.truncate(r.seq, kv.seq_len(r.seq).min(fed));
        let lag = r.history.len() - held;
        let take = lag.min(budget);
        if take == 0 || r.k == 0 {
            continue;
        }
        budget -= take;
        let whole = take == lag;
        entries.extend(BatchEntry::sequence(r.seq, &r.history[held..held + take], held as u32, false).into_iter().map(|mut e| {
            e.logits &= whole;
            e
        }));
        if whole {
            drafting.push((j, r.history.len()));
        }
    }
    while !entries.is_empty() {
        let logits = draft.forward(kv, &entries)?;
        entries.clear();
        // each drafting request's row of logits
        let mut rows = vec![None; requests.len()];
        for (row, &(j, _)) in drafting.iter().enumerate() {
            rows[j] = Some(row);
        }
        // a draw and the draft's own probability of it per request (a softmax over the
        // vocabulary each), on every core
        let mut drawn: Vec<Option<TokenId>> = requests
            .par_iter_mut()
            .zip(&rows)
            .map(|(r, row)| {
                let row = logits.row((*row)?);
                let row = &row[..n_vocab.min(row.len())];
                let q = distribution(r.params, row).ok()?;
                let d = q.sample(&mut r.rng);
                if settings.p_min > 0.0 {
                    let confidence = (f64::from(row[d as usize]) - log_normalizer(row)?).exp();
                    if confidence < f64::from(settings.p_min) {
                        return None; // the draft doubts it: not proposed
                    }
                }
                Some(d)
            })
            .collect();
        let mut next = Vec::with_capacity(drafting.len());
        for &(j, pos) in &drafting {
            let r = &requests[j];
            let Some(d) = drawn[j].take() else { continue };
            let proposed = &mut out[j];
            proposed.push(d);
            // nothing worth proposing after the end; the last proposal is never fed
            if proposed.len() < r.k && !target.is_eog(d) && pos < kv.n_ctx() {
                entries.push(BatchEntry { seq: r.seq, token: d, pos: pos as u32, logits: true });
                next.push((j, pos + 1));
            }
        }
        drafting = next;
    }
    Ok(out)
}

/// When a sequence next drafts: after a round that cost something (a draft model's passes, or
/// verification rows) and kept fewer than two proposals, it drafts only at steps that are
/// multiples of 2, then 4, then 8 while that goes on, and every step again after a round that
/// keeps two or more. (A round that keeps one token took at least two draft passes, the one that
/// proposed it and the next: it pays only where a draft pass costs under half the model's, and a
/// small draft of a large vocabulary costs about half on a CPU.) Text the draft cannot predict
/// then costs a round every few steps instead of every step, and because the periods are powers
/// of two counted on one clock, the sequences backing off draft at the same steps: one draft pass
/// serves them together instead of each costing a pass of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraftBackoff {
    /// Draft only at steps that are multiples of this (0: every step).
    period: u8,
}

impl DraftBackoff {
    const MAX_PERIOD: u8 = 8;

    /// Whether to draft at step `step` (of a clock shared by the sequences drafting together).
    pub fn due(&self, step: u64) -> bool {
        self.period == 0 || step.is_multiple_of(u64::from(self.period))
    }

    /// Records a round that cost something and kept `kept` proposals.
    pub fn record(&mut self, kept: usize) {
        self.period = if kept >= 2 { 0 } else { (self.period * 2).clamp(2, Self::MAX_PERIOD) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_that_keep_under_two_space_out_to_every_eighth_step() {
        let mut b = DraftBackoff::default();
        let mut asked = Vec::new();
        // fewer than two proposals are kept before step 40 (one at step 16), three every time after
        for step in 1..=50 {
            if b.due(step) {
                asked.push(step);
                b.record(if step >= 40 { 3 } else { usize::from(step == 16) });
            }
        }
        assert_eq!(asked, [1, 2, 4, 8, 16, 24, 32, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]);
    }
}
