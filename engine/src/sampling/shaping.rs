//! llama.cpp's other samplers on the candidates, each as its `llama-sampler.cpp` defines it:
//! top-n-sigma (logits within n standard deviations of the best), locally typical sampling
//! (the tokens whose surprise is nearest the distribution's entropy), XTC (exclude the top
//! choices: with some chance, every token above a threshold but the least likely of them goes)
//! and the dynamic temperature (scaled by the candidates' normalised entropy).

use crate::tokenizer::TokenId;

use super::better;

/// The candidates' probabilities at temperature 1, in f32 as llama.cpp's softmax computes them
/// (the best's logit subtracted, the C library's exp, one f32 running total).
fn softmax_f32(cands: &[(TokenId, f32)]) -> Vec<f32> {
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = cands.iter().map(|c| (c.1 - max).exp()).collect();
    let total: f32 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// Drops the candidates whose logit is more than `n` standard deviations (over the
/// candidates, population) below the best (`n` <= 0: none).
pub(super) fn cut_top_n_sigma(cands: &mut Vec<(TokenId, f32)>, n: f32) {
    if n <= 0.0 || cands.len() <= 1 {
        return;
    }
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let mean = cands.iter().map(|c| c.1).sum::<f32>() / cands.len() as f32;
    let var = cands.iter().map(|c| f64::from(c.1 - mean).powi(2) as f32).sum::<f32>() / cands.len() as f32;
    let floor = max - n * var.sqrt();
    cands.retain(|c| c.1 >= floor);
}

/// Locally typical sampling: keeps the candidates whose surprise (`-ln p`) is nearest the
/// entropy, nearest first, until their probability passes `p` (1: all).
pub(super) fn cut_typical(cands: &mut Vec<(TokenId, f32)>, p: f32) {
    if p >= 1.0 || cands.is_empty() {
        return;
    }
    cands.sort_unstable_by(better);
    let probs = softmax_f32(cands);
    let entropy: f32 = probs.iter().map(|&q| -q * q.ln()).sum();
    let shift: Vec<f32> = probs.iter().map(|&q| (-q.ln() - entropy).abs()).collect();
    // a stable order by distance, ties in likelihood order (as llama.cpp's sort leaves them
    // from the sorted candidates)
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| shift[a].total_cmp(&shift[b]));
    let mut sum = 0.0f32;
    let mut keep = order.len();
    for (i, &at) in order.iter().enumerate() {
        sum += probs[at];
        if sum > p {
            keep = i + 1;
            break;
        }
    }
    *cands = order[..keep].iter().map(|&at| cands[at]).collect();
}

/// XTC: when `draw` (uniform in [0, 1)) falls within `probability`, drops every candidate at
/// least as likely as `threshold` except the least likely of them (a threshold above 0.5
/// never cuts; fewer than two such tokens: nothing goes).
pub(super) fn cut_xtc(cands: &mut Vec<(TokenId, f32)>, probability: f32, threshold: f32, draw: f64) {
    if probability <= 0.0 || threshold > 0.5 || cands.len() < 2 || draw as f32 > probability {
        return;
    }
    cands.sort_unstable_by(better);
    let probs = softmax_f32(cands);
    let last_above = probs.iter().take_while(|&&q| q >= threshold).count().saturating_sub(1);
    if last_above > 0 {
        cands.drain(..last_above);
    }
}

/// The dynamic temperature of llama.cpp's `temp_ext`: within `temperature` ± `range` (not
/// below 0), higher as the candidates' entropy nears its most (`ln` of their count), raised to
/// `exponent`. A single candidate keeps `temperature`.
pub(super) fn dynamic_temperature(cands: &[(TokenId, f32)], temperature: f32, range: f32, exponent: f32) -> f32 {
    if cands.len() <= 1 {
        return temperature;
    }
    let (lo, hi) = ((temperature - range).max(0.0), temperature + range);
    let most = -(1.0 / cands.len() as f32).ln();
    let entropy: f32 = softmax_f32(cands).iter().filter(|&&q| q > 0.0).map(|&q| -q * q.ln()).sum();
    lo + (hi - lo) * (entropy / most).powf(exponent)
}

#[cfg(test)]
mod tests {
    use super::super::{distribution, distribution_at, SamplingParams};
    use super::*;

    /// Candidates whose softmax is `probs` (ids in order).
    fn of(probs: &[f32]) -> Vec<(TokenId, f32)> {
        probs.iter().enumerate().map(|(i, p)| (i as TokenId, p.ln())).collect()
    }

    fn kept(cands: &[(TokenId, f32)]) -> Vec<TokenId> {
        let mut ids: Vec<TokenId> = cands.iter().map(|c| c.0).collect();
        ids.sort_unstable();
        ids
    }

    // the cases of llama.cpp's tests/test-sampling.cpp (b11434), by the tokens they leave

    #[test]
    fn top_n_sigma_keeps_the_logits_near_the_best() {
        let run = |n: f32| {
            let mut c = of(&[0.1, 0.2, 0.3, 0.4]);
            cut_top_n_sigma(&mut c, n);
            kept(&c)
        };
        // llama.cpp: {0, 0, 0.428571, 0.571429} at 1, all at 0 and 3
        assert_eq!(run(1.0), [2, 3]);
        assert_eq!(run(0.0), [0, 1, 2, 3]);
        assert_eq!(run(3.0), [0, 1, 2, 3]);
    }

    #[test]
    fn typical_keeps_the_tokens_nearest_the_entropy() {
        let run = |probs: &[f32], p: f32| {
            let mut c = of(probs);
            cut_typical(&mut c, p);
            kept(&c)
        };
        assert_eq!(run(&[0.97, 0.01, 0.01, 0.01], 0.5), [0]);
        assert_eq!(run(&[0.4, 0.2, 0.2, 0.2], 0.5), [1, 2, 3]);
        assert_eq!(run(&[0.4, 0.2, 0.2, 0.2], 1.0), [0, 1, 2, 3]);
    }

    #[test]
    fn xtc_drops_the_top_choices_but_the_least_of_them() {
        let run = |threshold: f32, draw: f64| {
            let mut c = of(&[0.4, 0.3, 0.2, 0.1]);
            cut_xtc(&mut c, 0.99, threshold, draw);
            kept(&c)
        };
        assert_eq!(run(0.09, 0.5), [3]);
        assert_eq!(run(0.19, 0.5), [2, 3]);
        assert_eq!(run(0.29, 0.5), [1, 2, 3]);
        assert_eq!(run(0.39, 0.5), [0, 1, 2, 3]);
        // above 0.5 never, and a draw past the chance neither
        assert_eq!(run(0.51, 0.5), [0, 1, 2, 3]);
        assert_eq!(run(0.09, 0.995), [0, 1, 2, 3]);
    }

    #[test]
    fn the_dynamic_temperature_follows_the_normalised_entropy() {
        // uniform: the entropy is its most, the temperature the range's top
        assert!((dynamic_temperature(&of(&[0.25; 4]), 1.0, 0.5, 1.0) - 1.5).abs() < 1e-5);
        // nearly certain: near the bottom (exponent 1), and nearer with a larger exponent
        let sure = of(&[0.997, 0.001, 0.001, 0.001]);
        let t1 = dynamic_temperature(&sure, 1.0, 0.5, 1.0);
        let t2 = dynamic_temperature(&sure, 1.0, 0.5, 2.0);
        assert!(t1 > 0.5 && t1 < 0.6 && t2 < t1 && t2 > 0.5, "{t1} {t2}");
        // never below 0, and one candidate keeps the temperature
        assert!(dynamic_temperature(&sure, 0.2, 0.5, 1.0) >= 0.0);
        assert_eq!(dynamic_temperature(&of(&[1.0]), 0.8, 0.5, 1.0), 0.8);
    }

    #[test]
    fn they_run_in_llama_servers_order_when_one_is_on_and_xtc_draws_by_position() {
        let logits: Vec<f32> = of(&[0.4, 0.3, 0.2, 0.1]).iter().map(|c| c.1).collect();
        let ids = |p: &SamplingParams| distribution(p, &logits).unwrap().candidates().map(|c| c.0).collect::<Vec<_>>();
        let base = SamplingParams::default();
        assert_eq!(ids(&base), [0, 1, 2, 3]);
        assert_eq!(ids(&SamplingParams { xtc_probability: 1.0, xtc_threshold: 0.19, ..base.clone() }), [2, 3]);
        assert_eq!(ids(&SamplingParams { top_n_sigma: 1.0, ..base.clone() }), [0, 1]);
        // top-k before typical: of the best two, 0.4 and 0.3 (entropy 0.68), 0.4 is nearer
        assert_eq!(ids(&SamplingParams { top_k: 2, typical_p: 0.3, ..base.clone() }), [0]);
        // at temperature 0 the most likely token, whatever else is on
        assert_eq!(ids(&SamplingParams { temperature: 0.0, xtc_probability: 1.0, xtc_threshold: 0.09, ..base.clone() }), [0]);
        // at half a chance, about half the positions cut, the same ones for the same seed
        let half = SamplingParams { xtc_probability: 0.5, xtc_threshold: 0.09, seed: 7, ..base.clone() };
        let cut = |p: &SamplingParams| -> Vec<bool> {
            (0..400).map(|i| distribution_at(p, &logits, None, p.xtc_draw(i)).unwrap().candidates().count() == 1).collect()
        };
        let positions = cut(&half);
        let n = positions.iter().filter(|&&c| c).count();
        assert!((160..240).contains(&n), "{n} of 400 cut");
        assert_eq!(cut(&half), positions);
        assert_ne!(cut(&SamplingParams { seed: 8, ..half }), positions);
    }
}
