//! Speculative decoding: a small draft model (or the sequence's own history, `ngram.rs`)
//! proposes a few tokens, the target model scores them all in one batched forward pass, and a
//! prefix of them is kept.
//!
//! Each position's token is the one a plain step would draw: the target's distribution there
//! (after the sequence's own bias, penalties and cuts), drawn with the sequence's generator, one
//! number per token as always. A proposal is kept when that token is the proposal; the first
//! that is not ends the round with the target's token in its place, and when every proposal is
//! kept the last row gives one more. So the output is the tokens the sequence gives without
//! speculation, greedy or seeded, whenever and however often it drafted.
//!
//! A draft model draws its proposals from its own distribution `q` with a copy of the
//! sequence's generator, proposal `j` with the number the target's draw at that position will
//! use. Both draws pick the token at which the cumulative probability in token order passes that
//! number, so a proposal is kept with probability `Σ_x |[P(x-1), P(x)) ∩ [Q(x-1), Q(x))|` (`P`,
//! `Q` the cumulative sums): 1 where `q = p` and close to it where `q` is close to `p`. That is
//! at most the `Σ_x min(p(x), q(x))` of the classic rule (keep `d` with probability
//! `min(1, p(d) / q(d))`, else draw from `max(0, p - q)`), whose draws depend on what was
//! proposed and so cannot give a seeded output its plain tokens. An n-gram proposal is a
//! certainty and is kept with probability `p(d)`.

use super::draft_model::{propose_batch, DraftRequest, DraftSettings};
use super::ngram::NgramDraft;
use super::{GenerateError, SequenceDecoder, TokenEvent};
use crate::kv_cache::{KvCache, SeqId};
use crate::model::{BatchEntry, LoraSchedule, Model};
use crate::tokenizer::{TokenId, Tokenizer};

/// Vocabulary sizes may differ by a few padding tokens (llama.cpp allows as much).
const MAX_VOCAB_SIZE_DIFFERENCE: usize = 128;

/// Where a round's proposals come from.
pub enum Draft<'a> {
    /// A draft model and its cache.
    Model { model: &'a Model, kv: &'a mut KvCache, settings: DraftSettings },
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
    let (proposals, draft_kv) = match draft {
        Draft::Model { model: draft_model, kv: draft_kv, settings } => {
            let rng = decoder.sampler().rng().clone();
            let request = DraftRequest { seq, history, k, params: decoder.sampler().params(), rng };
            let mut proposed = propose_batch(draft_model, draft_kv, model.tokenizer(), settings, usize::MAX, &mut [request])?;
            (proposed.pop().unwrap_or_default(), Some(draft_kv))
        }
        Draft::Ngram(ngram) => (ngram.propose(history, k), None),
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
    let (events, accepted) = accept_proposals(decoder, model.tokenizer(), history, &proposals, |i| logits.row(i))?;

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

/// The target's verdict on `proposals`, committed to `decoder` and `history`: `row(i)` is the
/// target's logits after the sequence's last token and `proposals[..i]` (`proposals.len() + 1`
/// rows). Each row's token is drawn as a plain step draws it; a proposal is kept when it is that
/// token, until one is not (the drawn token then takes its place) or the output ends, and when
/// all are kept the last row gives one more token. Returns the committed tokens' events and how
/// many proposals were kept.
pub(crate) fn accept_proposals<'r>(
    decoder: &mut SequenceDecoder,
    tokenizer: &Tokenizer,
    history: &mut Vec<TokenId>,
    proposals: &[TokenId],
    row: impl Fn(usize) -> &'r [f32],
) -> Result<(Vec<TokenEvent>, usize), GenerateError> {
    let mut accepted = 0;
    let mut events = Vec::new();
    for i in 0..=proposals.len() {
        let row = row(i);
        let p = decoder.distribution(tokenizer, row)?;
        let token = decoder.sample(&p);
        let kept = proposals.get(i) == Some(&token);
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

#[cfg(test)]
mod tests {
    use crate::sampling::{Distribution, Rng};
    use crate::tokenizer::TokenId;

    fn dist(probs: &[f64]) -> Distribution {
        Distribution::from_weights(probs.iter().enumerate().map(|(i, &p)| (i as TokenId, p)).collect()).unwrap()
    }

    /// How often a draw from `q` with a copy of the generator (a draft's proposal) is the draw
    /// from `p` that the generator then makes (the target's token), and how often each token is
    /// the target's.
    fn coupled(p: &Distribution, q: &Distribution, n: usize) -> (f64, Vec<f64>) {
        let mut rng = Rng::new(17);
        let (mut kept, mut counts) = (0, vec![0usize; 4]);
        for _ in 0..n {
            let d = q.sample(&mut rng.clone());
            let t = p.sample(&mut rng);
            kept += usize::from(d == t);
            counts[t as usize] += 1;
        }
        (kept as f64 / n as f64, counts.iter().map(|&c| c as f64 / n as f64).collect())
    }

    /// Proposals drawn with the numbers of the target's own draws agree with them by the overlap
    /// of the two distributions' intervals in token order, and the target's tokens keep its
    /// distribution (they are its plain draws).
    #[test]
    fn proposals_drawn_with_the_targets_numbers_agree_by_the_overlap_of_the_intervals() {
        let p = dist(&[0.5, 0.3, 0.2, 0.0]);
        let n = 200_000;
        // the same distribution: every proposal is the target's token
        assert_eq!(coupled(&p, &p, n).0, 1.0);
        // [0, .45) in [0, .5), [.45, .8) against [.5, .8), [.8, 1) against [.8, 1): .95 (an
        // independent draw would agree .5 * .45 + .3 * .35 + .2 * .2 = .37 of the time)
        let (kept, freq) = coupled(&p, &dist(&[0.45, 0.35, 0.2, 0.0]), n);
        assert!((kept - 0.95).abs() < 0.005, "{kept}");
        for (f, want) in freq.iter().zip([0.5, 0.3, 0.2, 0.0]) {
            assert!((f - want).abs() < 0.005, "{freq:?}");
        }
        // a certainty (an n-gram's proposal) is the target's token with probability p(d)
        for (d, pd) in [(0, 0.5), (2, 0.2), (3, 0.0)] {
            let (kept, _) = coupled(&p, &Distribution::certain(d), n);
            assert!((kept - pd).abs() < 0.005, "proposal {d}: {kept}");
        }
    }
}
