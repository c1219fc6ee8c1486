//! The distribution a token is drawn from, and the draw. A row of the whole vocabulary (the
//! common case: a temperature and nothing cut) is kept dense, by token id, so that building it
//! and drawing from it are straight vectorised passes; a cut keeps the survivors' ids beside
//! their probabilities.

use super::{Rng, SamplingError};
use crate::tokenizer::TokenId;

/// Entries per chunk of the draw's two-level walk: the draw finds its chunk from the chunk
/// totals, then walks at most this many entries one by one.
const CHUNK: usize = 1024;

/// A probability distribution over the vocabulary, probabilities summing to 1.
#[derive(Clone, Debug)]
pub struct Distribution {
    /// The token of each entry, ascending; empty when entry `i` is token `i` (dense).
    ids: Vec<TokenId>,
    /// The probability of each entry (zeros allowed: they are never drawn).
    probs: Vec<f32>,
    /// `Σ probs` over each chunk of [`CHUNK`] entries, in f64 over eight lanes.
    chunk_sums: Vec<f64>,
}

impl PartialEq for Distribution {
    /// Two distributions are equal when they give the same tokens the same probabilities.
    fn eq(&self, other: &Distribution) -> bool {
        self.candidates().eq(other.candidates())
    }
}

impl Distribution {
    /// All the mass on one token.
    pub fn certain(token: TokenId) -> Distribution {
        Distribution { ids: vec![token], probs: vec![1.0], chunk_sums: vec![1.0] }
    }

    /// Probabilities of tokens `0..probs.len()`, by id (zeros for tokens that cannot be drawn).
    /// Inlined into the vectorised copies of the caller.
    #[inline(always)]
    pub(super) fn dense(probs: Vec<f32>) -> Distribution {
        Distribution { ids: Vec::new(), chunk_sums: chunk_sums(&probs), probs }
    }

    /// Probabilities of the tokens `ids` (ascending).
    pub(super) fn sparse(ids: Vec<TokenId>, probs: Vec<f32>) -> Distribution {
        debug_assert_eq!(ids.len(), probs.len());
        Distribution { ids, chunk_sums: chunk_sums(&probs), probs }
    }

    /// Normalises non-negative weights (any order; zero weights are dropped).
    pub fn from_weights(mut weights: Vec<(TokenId, f64)>) -> Result<Distribution, SamplingError> {
        weights.retain(|&(_, w)| w > 0.0 && w.is_finite());
        let total: f64 = weights.iter().map(|&(_, w)| w).sum();
        if weights.is_empty() || total <= 0.0 || !total.is_finite() {
            return Err(SamplingError::NoCandidates);
        }
        weights.sort_unstable_by_key(|&(id, _)| id);
        let (ids, probs) = weights.into_iter().map(|(id, w)| (id, (w / total) as f32)).unzip();
        Ok(Distribution::sparse(ids, probs))
    }

    fn id(&self, entry: usize) -> TokenId {
        if self.ids.is_empty() {
            entry as TokenId
        } else {
            self.ids[entry]
        }
    }

    /// The tokens that may be drawn (probability above 0), ascending, with their probabilities.
    pub fn candidates(&self) -> impl Iterator<Item = (TokenId, f32)> + '_ {
        self.probs.iter().enumerate().filter(|(_, &p)| p > 0.0).map(|(i, &p)| (self.id(i), p))
    }

    /// The `n` likeliest tokens that may be drawn, likeliest first (ties to the lower id), each
    /// with its share of the whole mass (llama-server's post-sampling probabilities).
    pub fn best(&self, n: usize) -> Vec<(TokenId, f32)> {
        if n == 0 {
            return Vec::new();
        }
        let total: f64 = self.chunk_sums.iter().sum();
        let likelier = |a: &(TokenId, f32), b: &(TokenId, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let mut best: Vec<(TokenId, f32)> = self.candidates().collect();
        // the n best first, without sorting a whole vocabulary's candidates
        if best.len() > n {
            best.select_nth_unstable_by(n - 1, likelier);
            best.truncate(n);
        }
        best.sort_unstable_by(likelier);
        best.into_iter().map(|(id, p)| (id, (f64::from(p) / total) as f32)).collect()
    }

    /// `token`'s share of the whole mass (0 when it cannot be drawn).
    pub fn share(&self, token: TokenId) -> f32 {
        let total: f64 = self.chunk_sums.iter().sum();
        (f64::from(self.prob(token)) / total) as f32
    }

    pub fn prob(&self, token: TokenId) -> f32 {
        if self.ids.is_empty() {
            return self.probs.get(token as usize).copied().unwrap_or(0.0);
        }
        self.ids.binary_search(&token).map_or(0.0, |i| self.probs[i])
    }

    /// Draws a token: a uniform number times the total mass, then the first token whose
    /// cumulative probability (in token order) passes it. The chunk totals find its chunk, and
    /// only that chunk is walked entry by entry.
    pub fn sample(&self, rng: &mut Rng) -> TokenId {
        let total: f64 = self.chunk_sums.iter().sum();
        let target = rng.next_f64() * total;
        let mut acc = 0.0;
        let mut chunk = self.chunk_sums.len() - 1;
        for (c, &s) in self.chunk_sums.iter().enumerate() {
            if target < acc + s {
                chunk = c;
                break;
            }
            acc += s;
        }
        let entries = chunk * CHUNK..((chunk + 1) * CHUNK).min(self.probs.len());
        for i in entries.clone() {
            acc += f64::from(self.probs[i]);
            if target < acc {
                return self.id(i);
            }
        }
        // rounding left the target at the very top of the chunk: its last entry with mass
        let last = entries.rev().find(|&i| self.probs[i] > 0.0);
        let last = last.or_else(|| (0..self.probs.len()).rev().find(|&i| self.probs[i] > 0.0));
        self.id(last.unwrap_or(0))
    }
}

/// The total of each chunk of [`CHUNK`] probabilities (a plain loop, inlined into the
/// vectorised copies of the callers, where an iterator chain would not be).
#[inline(always)]
fn chunk_sums(probs: &[f32]) -> Vec<f64> {
    let mut sums = Vec::with_capacity(probs.len().div_ceil(CHUNK));
    for c in probs.chunks(CHUNK) {
        sums.push(sum_f64(c));
    }
    sums
}

/// `Σ w` in f64 over eight lanes (then the lanes in order, then the tail): a fixed order, so
/// the same bits everywhere, without one long chain of dependent additions.
#[inline(always)]
pub(super) fn sum_f64(w: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = w.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l += f64::from(x);
        }
    }
    rest.iter().fold(lanes.iter().sum::<f64>(), |t, &x| t + f64::from(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunked draw picks the token a plain walk over the cumulative sum picks.
    #[test]
    fn chunked_draw_equals_the_plain_walk() {
        let mut state = 0x9e37_79b9u32;
        let mut probs: Vec<f32> = (0..5_000)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                if i % 3 == 0 {
                    0.0
                } else {
                    (state % 1000) as f32
                }
            })
            .collect();
        let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
        probs.iter_mut().for_each(|p| *p = (f64::from(*p) / total) as f32);
        let dense = Distribution::dense(probs.clone());
        let ids: Vec<TokenId> = (0..probs.len() as TokenId).map(|i| i * 2 + 1).collect();
        let sparse = Distribution::sparse(ids, probs.clone());
        let mut seeds = Rng::new(5);
        for _ in 0..2_000 {
            let seed = seeds.next_u64();
            let target = Rng::new(seed).next_f64() * dense.chunk_sums.iter().sum::<f64>();
            let mut acc = 0.0;
            let want = probs.iter().position(|&p| {
                acc += f64::from(p);
                target < acc
            });
            let draw = dense.sample(&mut Rng::new(seed));
            assert_eq!(Some(draw as usize), want);
            assert_eq!(sparse.sample(&mut Rng::new(seed)), draw * 2 + 1);
        }
    }

    #[test]
    fn the_best_are_the_likeliest_as_shares_of_the_mass() {
        // weights not summing to 1, as a constraint's mask leaves them
        let d = Distribution::sparse(vec![2, 5, 7, 9], vec![0.1, 0.3, 0.0, 0.1]);
        assert_eq!(d.best(2), [(5, 0.6), (2, 0.2)], "ties to the lower id");
        assert_eq!(d.best(9).len(), 3, "a token of probability 0 cannot be drawn");
        assert_eq!((d.share(9), d.share(7), d.share(1)), (0.2, 0.0, 0.0));
        assert_eq!(d.best(0), []);
        // a dense row: the same as sorting every candidate
        let dense = Distribution::dense((0..1000).map(|i| ((i * 7919) % 997) as f32).collect());
        let mut all: Vec<(TokenId, f32)> = dense.candidates().collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let ids = |v: &[(TokenId, f32)]| v.iter().map(|c| c.0).collect::<Vec<_>>();
        assert_eq!(ids(&dense.best(5)), ids(&all[..5]));
    }

    #[test]
    fn zero_entries_are_no_candidates_and_never_drawn() {
        let d = Distribution::dense(vec![0.0, 0.25, 0.0, 0.75, 0.0]);
        assert_eq!(d.candidates().collect::<Vec<_>>(), [(1, 0.25), (3, 0.75)]);
        assert_eq!((d.prob(3), d.prob(4), d.prob(99)), (0.75, 0.0, 0.0));
        let mut rng = Rng::new(3);
        for _ in 0..500 {
            assert!(matches!(d.sample(&mut rng), 1 | 3));
        }
        assert_eq!(d, Distribution::sparse(vec![1, 3], vec![0.25, 0.75]));
    }
}
