//! The prefix cache: finished sequences left in the KV cache, keyed by the tokens they hold, so
//! that a new prompt that starts the same way (the same system prompt, the next turn of a chat,
//! the shared part of a guard scan) forks their blocks instead of computing them again. The
//! least recently used entry goes first when space or the entry limit runs out. An entry also
//! carries a key `K` that says how it was computed (the LoRA adapters of its positions); a
//! prompt reuses an entry only over the positions its own key computes the same way, `()`
//! where there is none.

use super::SeqId;
use crate::tokenizer::TokenId;

/// The length of the common prefix of two token sequences (how much of a cached sequence a new
/// prompt can reuse).
pub fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How the keys and values of a sequence were computed, beyond its tokens.
pub trait CacheKey {
    /// How many leading positions are computed the same way under `self` and `other`
    /// (`usize::MAX`: all of them).
    fn shared_positions(&self, other: &Self) -> usize;
}

impl CacheKey for () {
    fn shared_positions(&self, _: &()) -> usize {
        usize::MAX
    }
}

/// Whether an entry of `tokens` under `key` holds all of `held` under `held_key`.
fn covers<K: CacheKey>(tokens: &[TokenId], key: &K, held: &[TokenId], held_key: &K) -> bool {
    tokens.starts_with(held) && key.shared_positions(held_key) >= held.len()
}

struct Entry<K> {
    key: K,
    seq: SeqId,
    /// What the cache holds for `seq`.
    tokens: Vec<TokenId>,
    last_used: u64,
}

pub struct PrefixCache<K = ()> {
    entries: Vec<Entry<K>>,
    max_entries: usize,
    clock: u64,
}

impl<K: CacheKey> PrefixCache<K> {
    pub fn new(max_entries: usize) -> PrefixCache<K> {
        PrefixCache { entries: Vec::new(), max_entries, clock: 0 }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry sharing the longest prefix with `prompt` under `key`, and that length (marked
    /// as used).
    pub fn best_match(&mut self, key: &K, prompt: &[TokenId]) -> Option<(SeqId, usize)> {
        self.best_match_by(key, prompt, |_, n| n).0
    }

    /// The entry from which the most of `prompt` under `key` can be resumed, and that much
    /// (marked as used; ties go to the most recently used): an entry shares the tokens it
    /// holds up to where its key and `key` part, and `resume(seq, n)` says how much of a shared
    /// prefix of `n` tokens entry `seq` gives back (a hybrid model's entry: only up to a length
    /// whose recurrent states it kept); and the longest prefix any entry shares.
    pub fn best_match_by(
        &mut self,
        key: &K,
        prompt: &[TokenId],
        resume: impl Fn(SeqId, usize) -> usize,
    ) -> (Option<(SeqId, usize)>, usize) {
        self.clock += 1;
        let clock = self.clock;
        let mut longest = 0;
        let best = self
            .entries
            .iter_mut()
            .map(|e| {
                let n = common_prefix(&e.tokens, prompt).min(e.key.shared_positions(key));
                longest = longest.max(n);
                (resume(e.seq, n), e)
            })
            .filter(|(n, _)| *n > 0)
            .max_by_key(|(n, e)| (*n, e.last_used));
        let best = best.map(|(n, e)| {
            e.last_used = clock;
            (e.seq, n)
        });
        (best, longest)
    }

    /// Keeps `seq`, which holds `tokens` computed under `key`. Returns the sequences to drop
    /// from the KV cache: entries the new one covers (theirs is a prefix of its tokens,
    /// computed the same way) and, beyond the entry limit, the least recently used; or `seq`
    /// itself when an entry covers it (that entry counts as used).
    pub fn insert(&mut self, seq: SeqId, key: K, tokens: Vec<TokenId>) -> Vec<SeqId> {
        let mut dropped = Vec::new();
        if self.max_entries == 0 || tokens.is_empty() {
            dropped.push(seq);
            return dropped;
        }
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| covers(&e.tokens, &e.key, &tokens, &key)) {
            e.last_used = self.clock;
            dropped.push(seq);
            return dropped;
        }
        self.entries.retain(|e| {
            let covered = covers(&tokens, &key, &e.tokens, &e.key);
            if covered {
                dropped.push(e.seq);
            }
            !covered
        });
        self.entries.push(Entry { key, seq, tokens, last_used: self.clock });
        while self.entries.len() > self.max_entries {
            dropped.extend(self.evict_lru(None));
        }
        dropped
    }

    /// Removes the least recently used entry other than `keep`, returning its sequence.
    pub fn evict_lru(&mut self, keep: Option<SeqId>) -> Option<SeqId> {
        let (i, _) = self.entries.iter().enumerate().filter(|(_, e)| Some(e.seq) != keep).min_by_key(|(_, e)| e.last_used)?;
        Some(self.entries.remove(i).seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_shared_prefix_wins_and_covered_entries_go() {
        let mut c = PrefixCache::new(3);
        assert!(c.insert(1, (), vec![1, 2, 3]).is_empty());
        assert!(c.insert(2, (), vec![1, 2, 9, 9]).is_empty());
        assert_eq!(c.best_match(&(), &[1, 2, 3, 4]), Some((1, 3)));
        assert_eq!(c.best_match(&(), &[1, 2, 9]), Some((2, 3)));
        assert_eq!(c.best_match(&(), &[7]), None);
        // the next turn of conversation 1 replaces it
        assert_eq!(c.insert(3, (), vec![1, 2, 3, 4, 5]), vec![1]);
        assert_eq!(c.best_match(&(), &[1, 2, 3, 4, 5, 6]), Some((3, 5)));
        assert_eq!(c.len(), 2);
        // a prompt the cache already holds more of adds nothing
        assert_eq!(c.insert(4, (), vec![1, 2, 3]), vec![4]);
        assert_eq!(c.len(), 2);
    }

    /// A key like an adapter that runs from a position on (`None`: not at all).
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct RunsFrom(Option<usize>);

    impl CacheKey for RunsFrom {
        fn shared_positions(&self, other: &Self) -> usize {
            if self == other {
                return usize::MAX;
            }
            self.0.unwrap_or(usize::MAX).min(other.0.unwrap_or(usize::MAX))
        }
    }

    #[test]
    fn entries_are_reused_only_where_their_keys_compute_the_same() {
        let (everywhere, never, from_2) = (RunsFrom(Some(0)), RunsFrom(None), RunsFrom(Some(2)));
        let mut c = PrefixCache::new(8);
        assert!(c.insert(1, everywhere, vec![1, 2, 3]).is_empty());
        // the same tokens under a key that differs from the first position neither cover nor
        // are covered
        assert!(c.insert(2, never, vec![1, 2]).is_empty());
        assert_eq!(c.insert(3, never, vec![1, 2, 3, 4]), vec![2]);
        assert_eq!(c.best_match(&everywhere, &[1, 2, 3, 4]), Some((1, 3)));
        assert_eq!(c.best_match(&never, &[1, 2, 3, 4]), Some((3, 4)));
        // a key that parts from `never` at 2 shares its first two positions, none of `everywhere`
        assert_eq!(c.best_match(&from_2, &[1, 2, 3, 4]), Some((3, 2)));
        assert!(c.insert(4, from_2, vec![1, 2, 3, 4, 5]).is_empty(), "it holds entry 3's last two positions otherwise");
        // what an entry holds computed the same way covers a prompt of another key, both ways
        assert_eq!(c.insert(5, RunsFrom(Some(3)), vec![1, 2]), vec![5]);
        assert_eq!(c.insert(6, RunsFrom(Some(9)), vec![1, 2, 3, 4, 5, 6]), vec![3]);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn the_entry_that_gives_back_the_most_is_chosen_where_entries_resume_only_at_kept_lengths() {
        let mut c = PrefixCache::new(4);
        c.insert(1, (), vec![1, 2, 3, 4, 5, 6]);
        c.insert(2, (), vec![1, 2, 3, 4, 9]);
        // entry 1 shares more but kept a state only after 2 tokens, entry 2 after 4
        let kept = |seq: SeqId, n: usize| if seq == 1 { n.min(2) } else { n.min(4) };
        assert_eq!(c.best_match_by(&(), &[1, 2, 3, 4, 5, 7], kept), (Some((2, 4)), 5));
        assert_eq!(c.best_match_by(&(), &[8], kept), (None, 0));
    }

    #[test]
    fn the_least_recently_used_entry_is_evicted_first() {
        let mut c = PrefixCache::new(2);
        c.insert(1, (), vec![1]);
        c.insert(2, (), vec![2]);
        c.best_match(&(), &[1]); // 1 is now the most recent
        assert_eq!(c.insert(3, (), vec![3]), vec![2]);
        assert_eq!(c.evict_lru(Some(1)), Some(3));
        assert_eq!(c.evict_lru(Some(1)), None);
        assert_eq!(c.evict_lru(None), Some(1));
        assert!(c.is_empty());
    }
}
