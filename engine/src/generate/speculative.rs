//! Speculative decoding: a small draft model (or the sequence's own history, `ngram.rs`)
//! proposes a few tokens, the target model scores them all in one batched forward pass, and the
//! standard acceptance rule keeps a prefix of them.
//!
//! A proposal `d` drawn from the draft's distribution `q` is kept with probability
//! `min(1, p(d) / q(d))`, `p` being the target's distribution at that position (after the
//! sequence's own bias, penalties and cuts); at the first rejection a token is drawn from
//! `max(0, p - q)` renormalised, and when every proposal is kept one more comes from the
//! target's last row. The output then has exactly the target's distribution. At temperature 0
//! both distributions are certainties, so a proposal is kept exactly when it is the target's
//! argmax: greedy output equals the target's alone, token for token. A proposal that is a
//! certainty (an n-gram's, or any at temperature 0) is checked by drawing the target's token as
//! a plain step would, with the same generator, and keeping the proposal when they agree: the
//! same distribution and acceptance rate (`p(d)`), and a seeded output the same tokens with
//! speculation or without.

use super::draft_model::{propose_batch, DraftRequest, DraftSettings};
use super::ngram::NgramDraft;
use super::{GenerateError, SequenceDecoder, TokenEvent};
use crate::kv_cache::{KvCache, SeqId};
use crate::model::{BatchEntry, LoraSchedule, Model};
use crate::sampling::{Distribution, Rng};
use crate::tokenizer::{TokenId, Tokenizer};

/// Vocabulary sizes may differ by a few padding tokens (llama.cpp allows as much).
const MAX_VOCAB_SIZE_DIFFERENCE: usize = 128;

/// Where a round's proposals come from.
pub enum Draft<'a> {
    /// A draft model, its cache and its own random generator (so the target's stays the same
    /// whatever the draft does).
    Model { model: &'a Model, kv: &'a mut KvCache, settings: DraftSettings, rng: &'a mut Rng },
    /// The sequence's own history.
    Ngram(NgramDraft),
}

impl Draft<'_> {
    fn n_draft(&self) -> usize {
        match self {
            Draft::Model { settings, .. } => settings.n_draft,
            Draft::Ngram(n) => n.n_draft,
        }
    }
}

/// The draft's random generator for a sequence whose sampling seed is `seed`.
pub fn draft_rng(seed: u64) -> Rng {
    Rng::new(seed ^ 0xD7AF_75EE_D5A1_7C0D)
}

/// What one speculative round did.
#[derive(Debug)]
pub struct SpeculativeRound {
    /// The events of the tokens it produced (the kept proposals and the target's own token).
    pub events: Vec<TokenEvent>,
    pub drafted: usize,
    pub accepted: usize,
}

/// Whether `draft` can draft for `target`: token ids must mean the same text in both models.
fn check_same_vocabulary(target: &Model, draft: &Model) -> Result<(), GenerateError> {
    let (t, d) = (target.tokenizer(), draft.tokenizer());
    if t.n_vocab().abs_diff(d.n_vocab()) > MAX_VOCAB_SIZE_DIFFERENCE {
        return Err(GenerateError::Draft(format!(
            "vocabularies differ in size: the target has {} tokens, the draft {}",
            t.n_vocab(),
            d.n_vocab()
        )));
    }
    if let Some(id) = (0..t.n_vocab().min(d.n_vocab()) as TokenId).find(|&id| t.token_bytes(id) != d.token_bytes(id)) {
        return Err(GenerateError::Draft(format!(
            "token {id} differs: {:?} in the target, {:?} in the draft",
            String::from_utf8_lossy(t.token_bytes(id)),
            String::from_utf8_lossy(d.token_bytes(id))
        )));
    }
    Ok(())
}

/// One round for sequence `seq` of `kv`, whose cache holds all of `history` but its last token:
/// `draft` proposes up to `n_draft` tokens (a draft model catching up on what its cache lacks of
/// `history`), the target checks them in one pass, and `decoder` commits the kept prefix and one
/// token of the target's. `history` gains the committed tokens; the caches keep only what was
/// kept. The target runs the adapters `lora` (the draft none).
/// Returns `None` (having done nothing) when no proposal fits (token budget, a nearly full
/// context): the caller then runs a plain step.
pub fn speculative_round(
    model: &Model,
    kv: &mut KvCache,
    seq: SeqId,
    decoder: &mut SequenceDecoder,
    history: &mut Vec<TokenId>,
    draft: Draft<'_>,
    lora: &LoraSchedule,
) -> Result<Option<SpeculativeRound>, GenerateError> {
    let fed = kv.seq_len(seq);
    debug_assert_eq!(fed + 1, history.len(), "the cache holds all of the history but its last token");
    let k = proposal_budget(draft.n_draft(), decoder, kv.n_ctx(), fed);
    if k == 0 {
        return Ok(None);
    }
    let (proposals, qs, draft_kv) = match draft {
        Draft::Model { model: draft_model, kv: draft_kv, settings, rng } => {
            let request = DraftRequest { seq, history, k, params: decoder.sampler().params(), rng };
            let mut proposed = propose_batch(draft_model, draft_kv, model.tokenizer(), settings, usize::MAX, &mut [request])?;
            let p = proposed.pop().unwrap_or_default();
            (p.tokens, p.qs, Some(draft_kv))
        }
        Draft::Ngram(ngram) => {
            let proposals = ngram.propose(history, k);
            let qs = certainties(&proposals)?;
            (proposals, qs, None)
        }
    };
    if proposals.is_empty() {
        return Ok(None);
    }

    // verify: the last kept token and every proposal in one pass, logits for each
    let mut tokens = Vec::with_capacity(proposals.len() + 1);
    tokens.push(history[fed]);
    tokens.extend_from_slice(&proposals);
    // a hybrid model's states after every proposal are kept, to return to the last one kept
    kv.keep_states_for(proposals.len());
    let logits = model.forward_scheduled(kv, &BatchEntry::sequence(seq, &tokens, fed as u32, true), lora)?;
    let (events, accepted) = accept_proposals(decoder, model.tokenizer(), history, &proposals, &qs, |i| logits.row(i))?;

    // the caches keep the last token and the accepted proposals; the token chosen after
    // them is fed next round
    let kept = fed + 1 + accepted;
    let resumed = kv.truncate(seq, kept);
    debug_assert_eq!(resumed, kept, "the states of the verified rows were kept");
    if let Some(draft_kv) = draft_kv {
        let draft_len = draft_kv.seq_len(seq).min(kept);
        draft_kv.truncate(seq, draft_len);
    }
    Ok(Some(SpeculativeRound { events, drafted: proposals.len(), accepted }))
}

/// How many of `n_draft` proposals a sequence may check when its cache holds `fed` positions of
/// `n_ctx`: the token after them must still fit in its token budget (so in what it reserved)
/// and in the context.
pub(crate) fn proposal_budget(n_draft: usize, decoder: &SequenceDecoder, n_ctx: usize, fed: usize) -> usize {
    n_draft.min(decoder.remaining().saturating_sub(1)).min(n_ctx.saturating_sub(fed + 1))
}

/// Each proposal as a certainty (`q(d) = 1`, what an n-gram proposal is): kept with probability
/// `p(d)`, and otherwise a token drawn from `p` without `d`.
pub(crate) fn certainties(proposals: &[TokenId]) -> Result<Vec<Distribution>, GenerateError> {
    Ok(proposals.iter().map(|&d| Distribution::from_weights(vec![(d, 1.0)])).collect::<Result<_, _>>()?)
}

/// The target's verdict on `proposals` (drawn from `qs`), committed to `decoder` and `history`:
/// `row(i)` is the target's logits after the sequence's last token and `proposals[..i]`
/// (`proposals.len() + 1` rows). Each proposal is kept by the acceptance rule until one is not
/// (a token drawn from what is left then takes its place) or the output ends; when all are kept
/// the last row gives one more token. Returns the committed tokens' events and how many
/// proposals were kept.
pub(crate) fn accept_proposals<'r>(
    decoder: &mut SequenceDecoder,
    tokenizer: &Tokenizer,
    history: &mut Vec<TokenId>,
    proposals: &[TokenId],
    qs: &[Distribution],
    row: impl Fn(usize) -> &'r [f32],
) -> Result<(Vec<TokenEvent>, usize), GenerateError> {
    let mut accepted = 0;
    let mut events = Vec::new();
    for i in 0..=proposals.len() {
        let row = row(i);
        let p = decoder.distribution(row)?;
        let (token, kept) = match proposals.get(i).zip(qs.get(i)) {
            Some((&d, q)) if q.prob(d) < 1.0 => verify(&p, q, d, decoder.rng()),
            // a certainty: the draw of a plain step decides
            Some((&d, _)) => {
                let t = decoder.sample(&p);
                (t, t == d)
            }
            None => (decoder.sample(&p), false),
        };
        let event = decoder.commit(tokenizer, token, row)?;
        if let Some(t) = event.token {
            history.push(t);
        }
        events.push(event);
        accepted += usize::from(kept);
        if !kept || decoder.is_finished() {
            break;
        }
    }
    Ok((events, accepted))
}

/// Checks that `draft` can draft for `target` as `settings` say (a decoder of the same
/// vocabulary, settings in range).
pub fn check_draft(target: &Model, draft: &Model, settings: DraftSettings) -> Result<(), GenerateError> {
    settings.check()?;
    if draft.is_encoder() {
        return Err(GenerateError::Draft("an encoder model cannot draft tokens".into()));
    }
    check_same_vocabulary(target, draft)
}

/// The acceptance rule for proposal `d` drawn from `q` where the target says `p`: keep it with
/// probability `min(1, p(d) / q(d))`, otherwise draw from `max(0, p - q)` renormalised (from
/// `p` if that is empty, which only rounding can cause). Returns the token and whether it is
/// the proposal.
pub(crate) fn verify(p: &Distribution, q: &Distribution, d: TokenId, rng: &mut Rng) -> (TokenId, bool) {
    let (pd, qd) = (f64::from(p.prob(d)), f64::from(q.prob(d)));
    if rng.next_f64() * qd < pd {
        return (d, true);
    }
    let residual = p.candidates().map(|(id, pi)| (id, f64::from((pi - q.prob(id)).max(0.0)))).collect();
    match Distribution::from_weights(residual) {
        Ok(r) => (r.sample(rng), false),
        Err(_) => (p.sample(rng), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(probs: &[f64]) -> Distribution {
        Distribution::from_weights(probs.iter().enumerate().map(|(i, &p)| (i as TokenId, p)).collect()).unwrap()
    }

    /// A proposal that is a certainty (an n-gram's) is kept with probability p(d), and what is
    /// drawn instead comes from p without it: the target's distribution either way.
    #[test]
    fn certain_proposals_keep_the_target_distribution() {
        let p = dist(&[0.5, 0.3, 0.2, 0.0]);
        let mut rng = Rng::new(5);
        let n = 200_000;
        for d in [0u32, 2, 3] {
            let mut certain = [0.0; 4];
            certain[d as usize] = 1.0;
            let q = dist(&certain);
            let mut counts = [0usize; 4];
            let mut kept = 0;
            for _ in 0..n {
                let (t, accepted) = verify(&p, &q, d, &mut rng);
                counts[t as usize] += 1;
                kept += usize::from(accepted);
            }
            for (c, want) in counts.iter().zip([0.5, 0.3, 0.2, 0.0]) {
                assert!((*c as f64 / n as f64 - want).abs() < 0.005, "proposal {d}: {counts:?}");
            }
            assert!((kept as f64 / n as f64 - f64::from(p.prob(d))).abs() < 0.005, "proposal {d}: {kept} kept");
        }
    }

    #[test]
    fn accepted_or_resampled_tokens_follow_the_target() {
        let p = dist(&[0.5, 0.3, 0.2, 0.0]);
        let q = dist(&[0.1, 0.2, 0.3, 0.4]);
        let mut rng = Rng::new(3);
        let n = 200_000;
        let mut counts = [0usize; 4];
        let mut kept = 0;
        for _ in 0..n {
            let d = q.sample(&mut rng);
            let (t, accepted) = verify(&p, &q, d, &mut rng);
            counts[t as usize] += 1;
            kept += usize::from(accepted);
        }
        for (c, want) in counts.iter().zip([0.5, 0.3, 0.2, 0.0]) {
            assert!((*c as f64 / n as f64 - want).abs() < 0.005, "{counts:?}");
        }
        // the acceptance rate is sum(min(p, q)) = 0.1 + 0.2 + 0.2 + 0
        assert!((kept as f64 / n as f64 - 0.5).abs() < 0.005, "{kept}");
    }

    #[test]
    fn certainties_keep_exactly_the_argmax() {
        let p = Distribution::certain(7);
        let mut rng = Rng::new(1);
        assert_eq!(verify(&p, &Distribution::certain(7), 7, &mut rng), (7, true));
        assert_eq!(verify(&p, &Distribution::certain(3), 3, &mut rng), (7, false));
    }
}
