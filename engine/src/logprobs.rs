//! Reading a row of logits: log-probabilities (log-softmax), the k best tokens and the best one.
//! Ties always go to the lower token id, as in llama.cpp's goldens, so results are reproducible.
//! NaN logits rank below every number (they are never chosen over a real value).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::tokenizer::TokenId;

/// Log-probabilities of a row of logits: `x - max - ln(sum(exp(x - max)))`. Subtracting the
/// maximum keeps `exp` from overflowing; the sum is accumulated in f64 so that a large
/// vocabulary of small terms does not lose precision. A row whose maximum is not finite gives
/// NaN (there is no distribution to speak of).
pub fn log_softmax(row: &[f32]) -> Vec<f32> {
    match log_normalizer(row) {
        Some(log_z) => row.iter().map(|&v| (f64::from(v) - log_z) as f32).collect(),
        None => vec![f32::NAN; row.len()],
    }
}

/// `ln(sum(exp(x)))` of a row, computed as `max + ln(sum(exp(x - max)))` with an f64 sum;
/// `None` when the row's maximum is not finite (no distribution).
pub fn log_normalizer(row: &[f32]) -> Option<f64> {
    let max = row.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return None;
    }
    let sum: f64 = row.iter().map(|&v| (f64::from(v) - f64::from(max)).exp()).sum();
    Some(f64::from(max) + sum.ln())
}

/// A candidate ordered from worst to best: lower value first, and between equal values the
/// higher id first (the lower id is the better one).
#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: TokenId,
    value: f32,
}

impl Candidate {
    /// NaN ranks below -inf; -0.0 equals 0.0 (adding 0.0 turns -0.0 into 0.0) so that the id
    /// decides between them.
    fn key(&self) -> (bool, f32) {
        (!self.value.is_nan(), if self.value.is_nan() { 0.0 } else { self.value + 0.0 })
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.key(), other.key());
        a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(other.id.cmp(&self.id))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

/// The `k` highest values of `row` as `(token id, value)`, best first, ties to the lower id
/// (fewer than `k` when the row is shorter). A min-heap of the best `k` seen so far makes it
/// O(n log k): a vocabulary of 256k tokens is scanned once.
pub fn top_k(row: &[f32], k: usize) -> Vec<(TokenId, f32)> {
    let k = k.min(row.len());
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Reverse<Candidate>> = BinaryHeap::with_capacity(k + 1);
    for (i, &value) in row.iter().enumerate() {
        let c = Candidate { id: i as TokenId, value };
        if heap.len() < k {
            heap.push(Reverse(c));
        } else if heap.peek().is_some_and(|worst| c > worst.0) {
            heap.pop();
            heap.push(Reverse(c));
        }
    }
    // ascending order of Reverse<Candidate> is best first
    heap.into_sorted_vec().into_iter().map(|Reverse(c)| (c.id, c.value)).collect()
}

/// The log-probability reported for a token the model gives no chance at all (a masked or
/// -inf logit): JSON has no -inf, and clients do arithmetic on these numbers.
pub const LOGPROB_FLOOR: f32 = -9999.0;

/// A generated token's log-probability and the most likely alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    pub logprob: f32,
    /// The `n` most likely tokens, best first (ties to the lower id).
    pub top: Vec<(TokenId, f32)>,
}

/// `token`'s log-probability under the softmax of `row`, and the `n_top` best alternatives; every
/// value is finite (at least [`LOGPROB_FLOOR`]).
pub fn token_logprob(row: &[f32], token: TokenId, n_top: usize) -> TokenLogprob {
    let log_z = log_normalizer(row).unwrap_or(f64::NAN);
    let lp = |v: f32| {
        let x = (f64::from(v) - log_z) as f32;
        if x.is_nan() {
            LOGPROB_FLOOR
        } else {
            x.max(LOGPROB_FLOOR)
        }
    };
    let logprob = row.get(token as usize).map_or(LOGPROB_FLOOR, |&v| lp(v));
    let top = top_k(row, n_top).into_iter().map(|(id, v)| (id, lp(v))).collect();
    TokenLogprob { token, logprob, top }
}

/// The id of the highest value, the lower id on ties (0 for an empty row or one of NaNs only).
///
/// Two straight passes that vectorise, rather than one comparison of (value, id) pairs per
/// token: the maximum of the numbers (a NaN never compares greater), then the first token
/// equal to it (-0.0 equals 0.0, as in the candidate order).
pub fn argmax(row: &[f32]) -> TokenId {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = row.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = rest.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    // the first chunk holding it (a comparison of every lane, no early exit, vectorises), then
    // the place within that chunk
    let first = |c: &[f32]| c.iter().fold(false, |hit, &x| hit | (x == max));
    let chunk = row.chunks(16).position(first).unwrap_or(0);
    row[chunk * 16..].iter().position(|&x| x == max).map_or(0, |i| (chunk * 16 + i) as TokenId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_normalises_and_survives_large_values() {
        let lp = log_softmax(&[1.0, 2.0, 3.0]);
        let total: f64 = lp.iter().map(|&v| f64::from(v).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        assert!((lp[2] - lp[1] - 1.0).abs() < 1e-6);
        // exp(1000) overflows f32 and f64; subtracting the max does not
        let lp = log_softmax(&[1000.0, 1000.0]);
        assert!((lp[0] - (-std::f32::consts::LN_2)).abs() < 1e-6, "{lp:?}");
        // a masked token keeps probability zero
        let lp = log_softmax(&[0.0, f32::NEG_INFINITY]);
        assert_eq!(lp, vec![0.0, f32::NEG_INFINITY]);
        assert!(log_softmax(&[]).is_empty());
        assert!(log_softmax(&[f32::NEG_INFINITY; 2]).iter().all(|v| v.is_nan()));
    }

    #[test]
    fn top_k_is_best_first_with_ties_to_the_lower_id() {
        let row = [0.5, 2.0, -1.0, 2.0, 3.0, 0.5, f32::NAN, 0.5];
        assert_eq!(top_k(&row, 3), vec![(4, 3.0), (1, 2.0), (3, 2.0)]);
        assert_eq!(top_k(&row, 5), vec![(4, 3.0), (1, 2.0), (3, 2.0), (0, 0.5), (5, 0.5)]);
        assert_eq!(top_k(&row, 0), vec![]);
        let all = top_k(&row, 100);
        assert_eq!(all.len(), row.len());
        assert_eq!(all[6], (2, -1.0));
        assert!(all[7].1.is_nan() && all[7].0 == 6);
        assert_eq!(top_k(&[], 3), vec![]);
    }

    #[test]
    fn top_k_agrees_with_a_full_sort() {
        // a deterministic pseudo-random row with many repeated values
        let mut x = 12345u32;
        let row: Vec<f32> = (0..1000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                ((x >> 16) % 97) as f32 / 7.0
            })
            .collect();
        let mut sorted: Vec<(TokenId, f32)> = row.iter().enumerate().map(|(i, &v)| (i as TokenId, v)).collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for k in [1, 2, 10, 97, 1000] {
            assert_eq!(top_k(&row, k), sorted[..k], "k = {k}");
        }
        assert_eq!(argmax(&row), sorted[0].0);
    }

    #[test]
    fn token_logprob_is_finite_and_ranked() {
        let row = [0.0, 1.0, f32::NEG_INFINITY, 1.0];
        let t = token_logprob(&row, 3, 3);
        let z = (1.0f64 + 2.0 * std::f64::consts::E).ln();
        assert!((f64::from(t.logprob) - (1.0 - z)).abs() < 1e-6);
        assert_eq!(t.top.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 3, 0]);
        // the masked token gets the floor, never -inf
        assert_eq!(token_logprob(&row, 2, 4).logprob, LOGPROB_FLOOR);
        assert_eq!(token_logprob(&row, 2, 4).top[3], (2, LOGPROB_FLOOR));
        assert!(token_logprob(&[f32::NEG_INFINITY; 2], 0, 2).top.iter().all(|c| c.1 == LOGPROB_FLOOR));
    }

    #[test]
    fn argmax_prefers_the_lower_id_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -5.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(argmax(&[]), 0);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY, f32::NAN]), 1);
        // -0.0 and 0.0 tie: the lower id
        assert_eq!(argmax(&[-1.0, -0.0, 0.0]), 1);
        assert_eq!(argmax(&[-1.0, 0.0, -0.0]), 1);
        // long rows: the maximum in a later chunk, in the tail, and tied across chunks
        let mut row: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.7).sin()).collect();
        row[517] = 2.0;
        assert_eq!(argmax(&row), 517);
        row[998] = 3.0;
        assert_eq!(argmax(&row), 998);
        row[40] = 3.0;
        assert_eq!(argmax(&row), 40);
    }
}
