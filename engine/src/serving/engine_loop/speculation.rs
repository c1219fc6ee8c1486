//! Speculation's part of a step: each running sequence's proposals (a draft model's, drawn in
//! shared passes, or n-gram ones), and under load only those of the sequences whose rounds
//! are expected to pay for their rows (`SpecCost::choose`).

use std::time::Instant;

use super::EngineLoop;
use crate::generate::{proposal_budget, propose_batch, DraftRequest};
use crate::serving::protocol::SeqError;
use crate::serving::spec_cost::{explores, prompt_share, Candidate, RoundYield, SpecPolicy};
use crate::tokenizer::TokenId;

impl EngineLoop {
    /// Each running sequence's proposals for this step (none for those that are not decoding
    /// or may not draft): a draft model's, drawn for all of them in its shared passes (catching
    /// up on their prompts within the prefill budget), or under `--spec ngram` their own
    /// tokens'. A failed draft pass fails the sequences it drafted for (into `failed`).
    pub(super) fn propose(&mut self, failed: &mut Vec<(usize, Option<SeqError>)>) -> Vec<Vec<TokenId>> {
        let n_ctx = self.config.n_ctx;
        let mut out: Vec<Vec<TokenId>> = vec![Vec::new(); self.running.len()];
        let Some(n_draft) = self.n_draft() else { return out };
        // each sequence's budget of proposals (0: it does not draft this step)
        let (kv, step) = (&self.kv, self.steps);
        let budgets: Vec<usize> = self
            .running
            .iter()
            .map(|r| {
                let fed = kv.seq_len(r.seq);
                let decoding = r.history.len() == fed + 1;
                let may = r.speculative && decoding && !r.decoder.is_constrained() && r.backoff.due(step);
                if may {
                    proposal_budget(n_draft, &r.decoder, n_ctx, fed)
                } else {
                    0
                }
            })
            .collect();
        if let Some(ngram) = self.config.ngram.filter(|_| self.draft.is_none()) {
            // proposals cost nothing to find: each sequence's are weighed as they are
            for (i, &k) in budgets.iter().enumerate().filter(|(_, &k)| k > 0) {
                out[i] = ngram.propose(&self.running[i].history, k);
            }
            let found: Vec<usize> = out.iter().map(Vec::len).collect();
            for (i, k) in self.weigh_rounds(found).into_iter().enumerate() {
                let r = &mut self.running[i];
                if budgets[i] == 0 {
                    continue;
                }
                if out[i].is_empty() {
                    // a round that found nothing cost nothing
                    self.spec_cost.round(&mut r.round_yield, 0, 0);
                } else if k > 0 {
                    r.last_round = self.steps;
                } else {
                    self.spec_cost.left_out(&mut r.round_yield);
                    out[i].clear();
                }
            }
            return out;
        }
        let budgets = self.weigh_rounds(budgets);
        let drafting: Vec<usize> = (0..budgets.len()).filter(|&i| budgets[i] > 0).collect();
        for &i in &drafting {
            self.running[i].last_round = self.steps;
        }
        if let Some((model, dkv)) = self.draft.as_mut() {
            let mut requests: Vec<DraftRequest> = self
                .running
                .iter_mut()
                .zip(&budgets)
                .filter(|(_, &k)| k > 0)
                .map(|(r, &k)| DraftRequest {
                    seq: r.seq,
                    history: &r.history,
                    k,
                    params: r.decoder.sampler().params(),
                    rng: r.decoder.sampler().rng().clone(),
                })
                .collect();
            let tokenizer = self.state.model.tokenizer();
            // a round's cost by the sequences it drafts for, where it did not also catch up on
            // prompts (or on what the draft missed while its sequences did not draft); else
            // what the catching up added, by the tokens read (at most a prefill chunk a step)
            let lag: usize = requests.iter().map(|q| q.history.len() - dkv.seq_len(q.seq)).sum();
            let started = Instant::now();
            let proposed = propose_batch(model, dkv, tokenizer, self.config.draft, self.config.prefill_chunk, &mut requests);
            let (seconds, n) = (started.elapsed().as_secs_f64(), requests.len());
            if lag <= 2 * n {
                self.spec_cost.draft.record(n, seconds);
            } else if let Some(round) = self.spec_cost.draft.estimate(n as f64) {
                let read = (lag - 2 * n).min(self.config.prefill_chunk);
                self.spec_cost.catch_up.record(read, (seconds - round).max(0.0));
            }
            match proposed {
                Ok(proposed) => {
                    for (&i, p) in drafting.iter().zip(proposed) {
                        let r = &mut self.running[i];
                        // a draft pass for nothing (not a prompt still being caught up on)
                        if p.is_empty() && dkv.seq_len(r.seq) >= r.history.len() {
                            r.backoff.record(0);
                            self.spec_cost.round(&mut r.round_yield, 0, 0);
                        }
                        out[i] = p;
                    }
                }
                Err(e) => {
                    let e = format!("draft model: {e}");
                    failed.extend(drafting.iter().map(|&i| (i, Some(SeqError::Internal(e.clone())))));
                }
            }
        }
        out
    }

    /// Tokens a sequence proposes per round, at most (`None`: the loop does not speculate).
    pub(super) fn n_draft(&self) -> Option<usize> {
        match (&self.draft, self.config.ngram) {
            (Some(_), _) => Some(self.config.draft.n_draft),
            (None, Some(ngram)) => Some(ngram.n_draft),
            (None, None) => None,
        }
    }

    /// `budgets` (each running sequence's proposals this step, at most or as found; 0 for none)
    /// with those whose rounds are not expected to pay for their rows set to 0
    /// (`SpecCost::choose`), under [`SpecPolicy::WhenItPays`]. A round is expected to keep
    /// the share of its proposals that the sequence's rounds have kept, and to propose what
    /// they have proposed, or the budget where that is less.
    fn weigh_rounds(&self, mut budgets: Vec<usize>) -> Vec<usize> {
        if self.config.speculation == SpecPolicy::Always || budgets.iter().all(|&k| k == 0) {
            return budgets;
        }
        // the pass's rows without proposals: a token per decoding sequence, and the prompts'
        // chunks within the prefill budget
        let (mut decoding, mut prefill, mut prefilling) = (0, 0, 0);
        for r in &self.running {
            match r.history.len() - self.kv.seq_len(r.seq) {
                1 => decoding += 1,
                pending => (prefill, prefilling) = (prefill + pending, prefilling + 1),
            }
        }
        let base_rows = decoding + prefill.min(self.config.prefill_chunk);
        let asking: Vec<usize> = (0..budgets.len()).filter(|&i| budgets[i] > 0).collect();
        let candidates: Vec<Candidate> = asking
            .iter()
            .map(|&i| {
                let (r, budget) = (&self.running[i], budgets[i] as f64);
                let proposed = if self.draft.is_some() { r.round_yield.proposed.min(budget) } else { budget };
                let expected = RoundYield { proposed, kept: proposed * r.round_yield.kept_share() };
                // what the draft missed while the sequence did not draft, past its prompt (a
                // round reads the last two tokens anyway); or, before it has read the prompt,
                // the prompt's share of one round
                let catch_up = self.draft.as_ref().map_or(0.0, |(_, dkv)| {
                    let (fed, len) = (dkv.seq_len(r.seq), r.history.len());
                    if fed >= r.prompt_len {
                        len.saturating_sub(fed + 2) as f64
                    } else {
                        prompt_share(len - fed, r.reserved.saturating_sub(len), expected)
                    }
                });
                // (a draft model's sequences never explore: `spec_cost::EXPLORE_EVERY`)
                Candidate { expected, explore: self.draft.is_none() && explores(self.steps, r.last_round), catch_up }
            })
            .collect();
        for (&i, chosen) in asking.iter().zip(self.spec_cost.choose(base_rows, decoding + prefilling, &candidates)) {
            if !chosen {
                budgets[i] = 0;
            }
        }
        budgets
    }
}
