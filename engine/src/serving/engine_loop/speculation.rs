//! Speculation's part of a step: each running sequence's proposals (n-gram ones, found in its
//! own tokens; a draft model's, drawn in shared passes, for the sequences whose lookup found
//! nothing or that have no lookup), and under load only those of the sequences whose rounds
//! are expected to pay for their rows (`SpecCost::choose`).

use std::time::Instant;

use super::EngineLoop;
use crate::generate::{lookups_quiet, proposal_budget, propose_batch, DraftBackoff, DraftRequest};
use crate::serving::protocol::SeqError;
use crate::serving::spec_cost::{explores, prompt_share, Candidate, RoundYield, Source, SpecPolicy};
use crate::tokenizer::TokenId;

/// A sequence's rounds from one [`Source`].
pub(super) struct SourceRounds {
    /// When it next proposes from the source.
    pub backoff: DraftBackoff,
    /// What its rounds from the source propose and keep.
    pub yields: RoundYield,
    /// The step of its last round from the source (or of its start).
    pub last: u64,
    /// The lookup's only: the step at which it last found proposals, whether checked or left
    /// out (or the sequence's last step reading its prompt); the draft's stays at its start.
    pub found: u64,
}

/// A sequence's rounds by source: `[Source::Ngram as usize]`, `[Source::Draft as usize]`.
pub(super) type Rounds = [SourceRounds; 2];

impl EngineLoop {
    /// A new sequence's rounds, from this step on: each source's first yield as the loop expects.
    pub(super) fn fresh_rounds(&self) -> Rounds {
        let n_draft = self.n_draft().unwrap_or(0);
        Source::ALL.map(|source| SourceRounds {
            backoff: DraftBackoff::default(),
            yields: self.spec_cost.first_yield(source, n_draft),
            last: self.steps,
            found: self.steps,
        })
    }

    /// Each running sequence's proposals for this step and where they came from (none for
    /// those that are not decoding or may not draft): under `--spec ngram` their own tokens'
    /// where a lookup finds some, and a draft model's for the others whose lookups have been
    /// quiet long enough ([`lookups_quiet`]; or for all, without the lookup), drawn for all of
    /// them in its shared passes (catching up on their prompts within the prefill budget). A
    /// failed draft pass fails the sequences it drafted for (into `failed`).
    pub(super) fn propose(&mut self, failed: &mut Vec<(usize, Option<SeqError>)>) -> (Vec<Vec<TokenId>>, Vec<Source>) {
        let n_ctx = self.config.n_ctx;
        let mut out: Vec<Vec<TokenId>> = vec![Vec::new(); self.running.len()];
        let mut sources = vec![Source::Draft; self.running.len()];
        let Some(n_draft) = self.n_draft() else { return (out, sources) };
        let (kv, step, ngram, drafts) = (&self.kv, self.steps, self.config.ngram, self.draft.is_some());
        // with both sources: the sequences that may propose, and those of them whose lookups
        // have been quiet long enough for the draft
        let (mut may, mut quiet_ones) = (0, 0);
        // each sequence's budget of proposals (0: it does not propose this step): as found by
        // its lookup, else at most the draft model's
        let budgets: Vec<usize> = self
            .running
            .iter()
            .zip(out.iter_mut().zip(sources.iter_mut()))
            .map(|(r, (found, source))| {
                let fed = kv.seq_len(r.seq);
                let decoding = r.history.len() == fed + 1;
                if !(r.speculative && decoding && !r.decoder.is_constrained()) {
                    return 0;
                }
                let budget = proposal_budget(n_draft, &r.decoder, n_ctx, fed);
                if budget == 0 {
                    return 0;
                }
                may += 1;
                let due = |source: Source| r.rounds[source as usize].backoff.due(step);
                if let Some(ngram) = ngram.filter(|_| due(Source::Ngram)) {
                    *found = ngram.propose(&r.history, budget);
                    *source = Source::Ngram;
                    if !found.is_empty() || !drafts {
                        return found.len();
                    }
                }
                // with the lookup too, the draft only once its lookups have been quiet a while
                let quiet = ngram.is_none() || lookups_quiet(step, r.rounds[Source::Ngram as usize].found);
                quiet_ones += usize::from(quiet);
                if drafts && quiet && due(Source::Draft) {
                    *source = Source::Draft;
                    return budget;
                }
                0
            })
            .collect();
        if ngram.is_some() && drafts {
            self.spec_cost.note_quiet(quiet_ones, may);
        }
        let chosen = self.weigh_rounds(&budgets, &sources);
        for (i, r) in self.running.iter_mut().enumerate() {
            if r.history.len() > self.kv.seq_len(r.seq) + 1 {
                // still reading its prompt: its lookups' quiet steps count from its first token
                r.rounds[Source::Ngram as usize].found = step;
                continue;
            }
            let rounds = &mut r.rounds[sources[i] as usize];
            match (sources[i], budgets[i], chosen[i]) {
                // a lookup that found nothing cost nothing
                (Source::Ngram, 0, _) => self.spec_cost.round(Source::Ngram, &mut rounds.yields, 0, 0),
                (_, 0, _) | (Source::Draft, _, false) => {}
                (Source::Draft, _, true) => rounds.last = step,
                (Source::Ngram, _, chosen) => {
                    rounds.found = step;
                    if chosen {
                        rounds.last = step;
                    } else {
                        self.spec_cost.left_out(&mut rounds.yields);
                        out[i].clear();
                    }
                }
            }
        }
        let drafting: Vec<usize> = (0..budgets.len()).filter(|&i| sources[i] == Source::Draft && chosen[i]).collect();
        if let (Some((model, dkv)), false) = (self.draft.as_mut(), drafting.is_empty()) {
            let mut requests: Vec<DraftRequest> = drafting
                .iter()
                .map(|&i| {
                    let r = &self.running[i];
                    DraftRequest {
                        seq: r.seq,
                        history: &r.history,
                        k: budgets[i],
                        params: r.decoder.sampler().params(),
                        rng: r.decoder.sampler().rng().clone(),
                    }
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
                            let rounds = &mut r.rounds[Source::Draft as usize];
                            rounds.backoff.record(0);
                            self.spec_cost.round(Source::Draft, &mut rounds.yields, 0, 0);
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
        (out, sources)
    }

    /// Tokens a sequence proposes per round, at most (`None`: the loop does not speculate).
    pub(super) fn n_draft(&self) -> Option<usize> {
        match (&self.draft, self.config.ngram) {
            (Some(_), _) => Some(self.config.draft.n_draft),
            (None, Some(ngram)) => Some(ngram.n_draft),
            (None, None) => None,
        }
    }

    /// Which sequences propose this step, of those with `budgets` (each running sequence's
    /// proposals from its `sources`, at most or as found; 0 for none): under
    /// [`SpecPolicy::WhenItPays`] those whose rounds are expected to pay for their rows
    /// (`SpecCost::choose`). A round is expected to keep the share of its proposals that the
    /// sequence's rounds from its source have kept, and to propose what they have proposed, or
    /// the budget where that is less (a lookup's: what it found).
    fn weigh_rounds(&self, budgets: &[usize], sources: &[Source]) -> Vec<bool> {
        let mut chosen: Vec<bool> = budgets.iter().map(|&k| k > 0).collect();
        if self.config.speculation == SpecPolicy::Always || budgets.iter().all(|&k| k == 0) {
            return chosen;
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
                let (r, budget, source) = (&self.running[i], budgets[i] as f64, sources[i]);
                let rounds = &r.rounds[source as usize];
                let proposed = match source {
                    Source::Draft => rounds.yields.proposed.min(budget),
                    Source::Ngram => budget,
                };
                let expected = RoundYield { proposed, kept: proposed * rounds.yields.kept_share() };
                // what the draft missed while the sequence did not draft, past its prompt (a
                // round reads the last two tokens anyway); or, before it has read the prompt,
                // the prompt's share of one of the draft's rounds (with the lookup too, only
                // the draft's share of the sequence's remaining tokens has them)
                let catch_up = match (source, self.draft.as_ref()) {
                    (Source::Draft, Some((_, dkv))) => {
                        let (fed, len) = (dkv.seq_len(r.seq), r.history.len());
                        if fed >= r.prompt_len {
                            len.saturating_sub(fed + 2) as f64
                        } else {
                            let remaining = r.reserved.saturating_sub(len) as f64 * self.spec_cost.draft_share();
                            prompt_share(len - fed, remaining as usize, expected)
                        }
                    }
                    _ => 0.0,
                };
                // (a draft model's rounds never explore: `spec_cost::EXPLORE_EVERY`)
                let explore = source == Source::Ngram && explores(self.steps, rounds.last);
                Candidate { source, expected, explore, catch_up }
            })
            .collect();
        for (&i, yes) in asking.iter().zip(self.spec_cost.choose(base_rows, decoding + prefilling, &candidates)) {
            chosen[i] = yes;
        }
        chosen
    }
}
