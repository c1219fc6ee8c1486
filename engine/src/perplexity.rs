//! Perplexity over a text, and the KL divergence of one run's token distributions from another's
//! (a quantized KV cache against f16, say), as llama.cpp's `llama-perplexity` measures them: the
//! tokens cut into chunks of `n_ctx`, the first token of each replaced by BOS where the model
//! adds one, each chunk a fresh sequence, and only the second half of each chunk scored (every
//! scored token then sees at least `n_ctx / 2` tokens of context).

use crate::kv_cache::KvTypes;
use crate::logprobs::{argmax, log_normalizer};
use crate::model::{BatchEntry, Logits, Model, ModelError};
use crate::tokenizer::TokenId;

/// The chunks of `n_ctx` tokens of `tokens` (a shorter rest is dropped, as llama.cpp does), at
/// most `max_chunks` of them.
pub fn chunks(model: &Model, tokens: &[TokenId], n_ctx: usize, max_chunks: Option<usize>) -> Vec<Vec<TokenId>> {
    let bos = model.tokenizer().add_bos().then(|| model.tokenizer().bos()).flatten();
    tokens
        .chunks_exact(n_ctx)
        .take(max_chunks.unwrap_or(usize::MAX))
        .map(|c| {
            let mut chunk = c.to_vec();
            if let Some(bos) = bos {
                chunk[0] = bos;
            }
            chunk
        })
        .collect()
}

/// The first position whose logits are scored (they predict the token after it).
pub fn first_scored(n_ctx: usize) -> usize {
    n_ctx / 2
}

/// The logits of positions `first_scored(n)..n - 1` of `chunk` (n = its length), run as one
/// sequence in a fresh KV cache of `types`.
pub fn chunk_logits(model: &Model, types: KvTypes, chunk: &[TokenId]) -> Result<Logits, ModelError> {
    let n = chunk.len();
    let first = first_scored(n);
    let mut kv = model.new_kv_cache(types, n);
    let batch: Vec<BatchEntry> =
        chunk.iter().enumerate().map(|(p, &token)| BatchEntry { seq: 0, token, pos: p as u32, logits: p >= first && p + 1 < n }).collect();
    model.forward(&mut kv, &batch)
}

/// What the scored tokens add up to.
#[derive(Clone, Debug, Default)]
pub struct Scores {
    tokens: usize,
    /// Sums of each token's negative log-likelihood and of its square.
    nll: (f64, f64),
    /// Against a base run: sums of each token's KL divergence and of its square, and the tokens
    /// whose most likely next token is the base run's.
    kl: (f64, f64),
    same_top: usize,
    compared: usize,
}

/// A mean and its standard error, from a count, a sum and a sum of squares.
fn mean_and_error(n: usize, sum: f64, squares: f64) -> (f64, f64) {
    let n_f = n as f64;
    let mean = sum / n_f;
    let variance = (squares / n_f - mean * mean).max(0.0);
    let error = if n > 1 { (variance / (n_f - 1.0)).sqrt() } else { 0.0 };
    (mean, error)
}

impl Scores {
    /// Adds the scored rows of one chunk: `logits` from [`chunk_logits`], and where given the
    /// same rows of the base run.
    pub fn add_chunk(&mut self, chunk: &[TokenId], logits: &Logits, base: Option<&Logits>) {
        let first = first_scored(chunk.len());
        for (i, target) in chunk[first + 1..].iter().enumerate() {
            let row = logits.row(i);
            let log_z = log_normalizer(row).unwrap_or(f64::NAN);
            let nll = log_z - f64::from(row[*target as usize]);
            self.nll.0 += nll;
            self.nll.1 += nll * nll;
            self.tokens += 1;
            if let Some(base) = base {
                let base_row = base.row(i);
                let kl = kl_divergence(base_row, row);
                self.kl.0 += kl;
                self.kl.1 += kl * kl;
                self.same_top += usize::from(argmax(base_row) == argmax(row));
                self.compared += 1;
            }
        }
    }

    /// Tokens scored.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// exp(mean negative log-likelihood) and its standard error (propagated from the mean's).
    pub fn perplexity(&self) -> (f64, f64) {
        let (mean, error) = mean_and_error(self.tokens, self.nll.0, self.nll.1);
        let ppl = mean.exp();
        (ppl, ppl * error)
    }

    /// The mean KL divergence from the base run and its standard error, when there was one.
    pub fn mean_kl(&self) -> Option<(f64, f64)> {
        (self.compared > 0).then(|| mean_and_error(self.compared, self.kl.0, self.kl.1))
    }

    /// The share of tokens whose most likely next token is the base run's.
    pub fn same_top(&self) -> Option<f64> {
        (self.compared > 0).then(|| self.same_top as f64 / self.compared as f64)
    }
}

/// KL(P || Q) in nats, P and Q the softmax of `p_logits` and `q_logits`, summed in f64.
pub fn kl_divergence(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let (Some(zp), Some(zq)) = (log_normalizer(p_logits), log_normalizer(q_logits)) else {
        return f64::NAN;
    };
    p_logits
        .iter()
        .zip(q_logits)
        .map(|(&p, &q)| {
            let log_p = f64::from(p) - zp;
            log_p.exp() * (log_p - (f64::from(q) - zq))
        })
        .sum::<f64>()
        .max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_divergence_is_zero_for_equal_rows_and_matches_a_hand_computed_pair() {
        let p = [1.0f32, 2.0, 3.0];
        assert_eq!(kl_divergence(&p, &p), 0.0);
        // shifting every logit leaves the distribution as it is
        assert!(kl_divergence(&p, &[11.0, 12.0, 13.0]).abs() < 1e-12);
        // P = (1/2, 1/2), Q = (1/(1+e), e/(1+e)): KL = ln(1+e) - 1/2 - ln 2
        let e = std::f64::consts::E;
        let want = (1.0 + e).ln() - 0.5 - 2f64.ln();
        assert!((kl_divergence(&[0.0, 0.0], &[0.0, 1.0]) - want).abs() < 1e-12);
    }

    #[test]
    fn the_mean_and_its_error_are_those_of_the_samples() {
        // samples 1, 2, 3: mean 2, variance 2/3, error sqrt(2/3 / 2)
        let (mean, error) = mean_and_error(3, 6.0, 14.0);
        assert!((mean - 2.0).abs() < 1e-12 && (error - (1.0f64 / 3.0).sqrt()).abs() < 1e-12, "{mean} {error}");
        assert_eq!(mean_and_error(1, 4.0, 16.0), (4.0, 0.0));
    }
}
