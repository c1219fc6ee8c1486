//! Drafting without a draft model (prompt lookup, vLLM's `ngram` and llama.cpp's n-gram
//! speculation): the sequence's last few tokens are looked up in its own history (prompt and
//! output), and the tokens that followed their latest earlier occurrence are proposed. Output
//! that repeats its input (code being edited, a document quoted, a list continued) is then
//! verified several tokens per pass. A proposal is kept when it is the token the target's own
//! draw gives (probability `p(d)`), so the output is the target's alone, token for token.

use crate::tokenizer::TokenId;

/// With a draft model too, the draft proposes for a sequence only once its lookups have proposed
/// nothing for this many steps. Where a reply repeats its input, the lookup misses for a step or
/// two at each change (a renamed variable) and then finds again; a draft round there would first
/// catch the draft up on everything the lookups gave, for a few tokens at best.
pub const DRAFT_AFTER_QUIET_STEPS: u64 = 4;

/// Whether a sequence whose lookups last proposed at step `found` has been quiet long enough at
/// step `now` for the draft model to propose ([`DRAFT_AFTER_QUIET_STEPS`]).
pub fn lookups_quiet(now: u64, found: u64) -> bool {
    now - found > DRAFT_AFTER_QUIET_STEPS
}

/// How proposals are looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramDraft {
    /// Tokens proposed per round, at most.
    pub n_draft: usize,
    /// The longest and the shortest run of last tokens looked up (the longest found wins).
    pub max_ngram: usize,
    pub min_ngram: usize,
}

impl NgramDraft {
    /// Up to 8 tokens after a match of the last 4, 3 or 2 tokens.
    pub const DEFAULT: NgramDraft = NgramDraft { n_draft: 8, max_ngram: 4, min_ngram: 2 };

    /// Up to `k` tokens that followed the latest earlier occurrence of `history`'s last `n`
    /// tokens, for the longest `n` from `max_ngram` down to `min_ngram` that occurs; empty when
    /// none does.
    pub fn propose(&self, history: &[TokenId], k: usize) -> Vec<TokenId> {
        let len = history.len();
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if n >= len {
                continue;
            }
            let tail = &history[len - n..];
            // starts of earlier occurrences, latest first; a match may not be the tail itself
            if let Some(start) = (0..len - n).rev().find(|&s| &history[s..s + n] == tail) {
                let from = start + n;
                return history[from..(from + k).min(len)].to_vec();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: NgramDraft = NgramDraft { n_draft: 8, max_ngram: 3, min_ngram: 2 };

    #[test]
    fn the_longest_run_of_last_tokens_finds_what_followed_its_latest_occurrence() {
        // "1 2 3" occurred twice, followed by 4 5 and by 9 8: the latest wins
        let h = [1, 2, 3, 4, 5, 0, 1, 2, 3, 9, 8, 7, 6, 1, 2, 3];
        assert_eq!(D.propose(&h, 8), vec![9, 8, 7, 6, 1, 2, 3]);
        assert_eq!(D.propose(&h, 2), vec![9, 8]);
        // only "7 2" matches (after 3 7 2 the 3-gram "3 7 2" never occurred): two tokens
        let h = [5, 7, 2, 6, 6, 3, 7, 2];
        assert_eq!(D.propose(&h, 4), vec![6, 6, 3, 7]);
        // a 3-gram beats a later 2-gram
        let h = [1, 2, 3, 10, 0, 2, 3, 20, 1, 2, 3];
        assert_eq!(D.propose(&h, 1), vec![10]);
    }

    #[test]
    fn nothing_is_proposed_without_an_earlier_occurrence() {
        assert!(D.propose(&[1, 2, 3, 4, 5], 8).is_empty());
        assert!(D.propose(&[1], 8).is_empty());
        assert!(D.propose(&[], 8).is_empty());
        // a run of one token repeated: the continuation overlaps the tail
        assert_eq!(D.propose(&[7, 7, 7, 7], 8), vec![7]);
    }
}
