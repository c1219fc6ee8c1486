//! The guard's prompt cache (guard.md §7): the prompts of earlier evaluations stay in a KV cache
//! of the evaluator's own, so that a later prompt starting the same way forks their blocks
//! instead of computing them again. Across requests that is a format's fixed start before the
//! judged text, the whole prompt of an input judged again (the same message from several
//! clients, a retry), and a conversation or a streamed reply judged again as it grows
//! (guardrails). The cache is bounded in bytes; the least recently used prompt goes first.
//!
//! Reuse does not change a verdict: the forward pass is batch-invariant, so the keys and values
//! of a cached position are the bits a fresh computation of it would give.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::kv_cache::{KvCache, KvError, PrefixCache, SeqId};
use crate::model::LoraSchedule;
use crate::tokenizer::TokenId;

/// Cache entries live above the ids of a run's sequences (a run's sequence `i` is id `i`).
const FIRST_ENTRY_ID: SeqId = 1 << 24;
/// Entries at most (each lookup compares the prompt with every entry's tokens).
const MAX_ENTRIES: usize = 4096;

/// What the evaluator's prompts found in the cache, counted since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptStats {
    /// Prompts run.
    pub prompts: u64,
    /// Prompts that started from a cached prefix.
    pub prompts_reusing: u64,
    /// Their tokens, and how many of them came from the cache instead of a forward pass.
    pub prompt_tokens: u64,
    pub reused_tokens: u64,
    /// Prompt tokens not computed because another prompt of the same input computed them (a
    /// scan's prompts share their start: computed once, forked).
    pub shared_tokens: u64,
}

/// [`PromptStats`] as shared counters (evaluations may run on several threads).
#[derive(Debug, Default)]
pub(crate) struct PromptCounters {
    prompts: AtomicU64,
    prompts_reusing: AtomicU64,
    prompt_tokens: AtomicU64,
    reused_tokens: AtomicU64,
    shared_tokens: AtomicU64,
}

impl PromptCounters {
    /// A run of prompts of `lengths` tokens, of which `reused` came from the cache.
    pub(crate) fn record(&self, lengths: impl IntoIterator<Item = usize>, reused: &[usize]) {
        let tokens: usize = lengths.into_iter().sum();
        self.prompts.fetch_add(reused.len() as u64, Ordering::Relaxed);
        self.prompts_reusing.fetch_add(reused.iter().filter(|&&n| n > 0).count() as u64, Ordering::Relaxed);
        self.prompt_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        self.reused_tokens.fetch_add(reused.iter().sum::<usize>() as u64, Ordering::Relaxed);
    }

    /// `n` prompt tokens computed once for several prompts and forked into the others.
    pub(crate) fn record_shared(&self, n: usize) {
        self.shared_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> PromptStats {
        PromptStats {
            prompts: self.prompts.load(Ordering::Relaxed),
            prompts_reusing: self.prompts_reusing.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            reused_tokens: self.reused_tokens.load(Ordering::Relaxed),
            shared_tokens: self.shared_tokens.load(Ordering::Relaxed),
        }
    }
}

/// Earlier prompts in a KV cache, by their tokens. A run borrows the cache's KV for its own
/// sequences `0..n` ([`PromptCache::seed`]), then gives them back ([`PromptCache::keep`] or
/// [`PromptCache::release_run`]).
pub(crate) struct PromptCache {
    kv: KvCache,
    /// Keyed by the adapters the prompts ran with.
    entries: PrefixCache<LoraSchedule>,
    next_id: SeqId,
    budget_bytes: usize,
}

impl PromptCache {
    /// A cache over `kv` (empty) that holds at most `budget_bytes` of keys and values between runs.
    pub(crate) fn new(kv: KvCache, budget_bytes: usize) -> PromptCache {
        PromptCache { kv, entries: PrefixCache::new(MAX_ENTRIES), next_id: FIRST_ENTRY_ID, budget_bytes }
    }

    pub(crate) fn kv(&mut self) -> &mut KvCache {
        &mut self.kv
    }

    /// Bytes of keys and values held (a block shared by several prompts counted once).
    pub(crate) fn bytes(&self) -> usize {
        self.kv.live_blocks() * self.kv.block_bytes()
    }

    /// Starts run sequence `i` with the longest cached start of `prompts[i]` (its tokens and
    /// adapters), leaving at least its last token to compute (its logits are the answer's
    /// first). Returns how many tokens each sequence holds. On an error no run sequence is left
    /// behind.
    pub(crate) fn seed(&mut self, prompts: &[(&[TokenId], &LoraSchedule)]) -> Result<Vec<usize>, KvError> {
        let held = self.fork_starts(prompts);
        if held.is_err() {
            self.release_run(prompts.len());
        }
        held
    }

    fn fork_starts(&mut self, prompts: &[(&[TokenId], &LoraSchedule)]) -> Result<Vec<usize>, KvError> {
        let mut held = Vec::with_capacity(prompts.len());
        for (i, &(prompt, lora)) in prompts.iter().enumerate() {
            let seq = i as SeqId;
            let reuse = match self.entries.best_match(lora, prompt) {
                Some((entry, n)) if n.min(prompt.len().saturating_sub(1)) > 0 => {
                    let n = n.min(prompt.len() - 1);
                    self.kv.fork(entry, seq)?;
                    self.kv.truncate(seq, n);
                    n
                }
                _ => 0,
            };
            held.push(reuse);
        }
        Ok(held)
    }

    /// After a run that finished: each run sequence's prompt (not what it generated) becomes an
    /// entry, the run's sequences go, and the least recently used entries go until the cache
    /// fits its budget.
    pub(crate) fn keep(&mut self, prompts: &[(&[TokenId], &LoraSchedule)]) {
        for (i, &(prompt, lora)) in prompts.iter().enumerate() {
            let seq = i as SeqId;
            if prompt.is_empty() || self.kv.seq_len(seq) < prompt.len() {
                continue;
            }
            let id = self.entry_id();
            if self.kv.fork(seq, id).is_ok() {
                self.kv.truncate(id, prompt.len());
                for dropped in self.entries.insert(id, lora.clone(), prompt.to_vec()) {
                    self.kv.remove(dropped);
                }
            }
        }
        self.release_run(prompts.len());
        while self.bytes() > self.budget_bytes {
            match self.entries.evict_lru(None) {
                Some(seq) => self.kv.remove(seq),
                None => break,
            }
        }
    }

    /// Frees the run's sequences `0..n` (after a run that failed or was cancelled, whatever
    /// they hold; the entries are untouched: a shared block is copied before it is written).
    pub(crate) fn release_run(&mut self, n: usize) {
        (0..n).for_each(|i| self.kv.remove(i as SeqId));
    }

    /// A fresh entry id. After 2^32 - 2^24 entries the ids start again, from an empty cache.
    fn entry_id(&mut self) -> SeqId {
        if self.next_id == SeqId::MAX {
            while let Some(seq) = self.entries.evict_lru(None) {
                self.kv.remove(seq);
            }
            self.next_id = FIRST_ENTRY_ID;
        }
        self.next_id += 1;
        self.next_id - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::kv::CpuKvStore;
    use crate::backend::{Device, KvType};

    fn cache(budget_bytes: usize) -> PromptCache {
        let kv = KvCache::with_storage(KvType::F16, 256, Device::Cpu, CpuKvStore::new(KvType::F16.into(), 1, 4, 4));
        PromptCache::new(kv, budget_bytes)
    }

    static NO_ADAPTERS: LoraSchedule = LoraSchedule::EMPTY;

    /// Prompts run without adapters.
    fn plain<'p>(prompts: &[&'p [TokenId]]) -> Vec<(&'p [TokenId], &'static LoraSchedule)> {
        prompts.iter().map(|&p| (p, &NO_ADAPTERS)).collect()
    }

    fn keep(c: &mut PromptCache, prompts: &[&[TokenId]]) {
        c.keep(&plain(prompts));
    }

    /// A run as the evaluator makes one: seeded sequences, then every prompt computed.
    fn run(c: &mut PromptCache, prompts: &[&[TokenId]]) -> Vec<usize> {
        let held = c.seed(&plain(prompts)).unwrap();
        for (i, p) in prompts.iter().enumerate() {
            c.kv().reserve(i as SeqId, p.len() + 1).unwrap();
            c.kv().set_len(i as SeqId, p.len() + 1); // the prompt and one generated token
        }
        held
    }

    #[test]
    fn prompts_start_from_the_longest_cached_start_and_keep_a_last_token() {
        let mut c = cache(usize::MAX);
        let a: Vec<TokenId> = (0..40).collect();
        let b: Vec<TokenId> = (0..30).chain(100..120).collect();
        assert_eq!(run(&mut c, &[&a]), [0]);
        keep(&mut c, &[&a]);
        assert_eq!(c.kv().sequences().count(), 1, "the run's sequence went, its prompt stays");
        assert_eq!(run(&mut c, &[&b, &a, &a[..10]]), [30, 39, 9]);
        keep(&mut c, &[&b, &a, &a[..10]]);
        // `a` again replaced the old `a`; `a[..10]` is covered by it
        assert_eq!(c.kv().sequences().count(), 2);
    }

    #[test]
    fn a_failed_run_leaves_the_entries_and_the_budget_evicts_the_oldest() {
        let mut c = cache(usize::MAX);
        let a: Vec<TokenId> = (0..64).collect();
        run(&mut c, &[&a]);
        keep(&mut c, &[&a]);
        let bytes = c.bytes();
        run(&mut c, &[&a, &a]);
        c.release_run(2);
        assert_eq!(c.bytes(), bytes);
        assert_eq!(run(&mut c, &[&a]), [63]);
        c.release_run(1);

        let mut c = cache(bytes);
        let b: Vec<TokenId> = (1000..1064).collect();
        for p in [&a, &b] {
            run(&mut c, &[p]);
            keep(&mut c, &[p]);
            assert_eq!(c.bytes(), bytes);
        }
        assert_eq!(run(&mut c, &[&a, &b]), [0, 63], "a, the older, was evicted");
    }
}
