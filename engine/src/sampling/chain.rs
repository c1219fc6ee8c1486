//! Samplers in the order a request names them (llama-server's `samplers`): each step cuts or
//! reshapes the candidates left by the one before, and the draw is a softmax of what is left.
//! As in llama.cpp's chain, temperature is applied only where it is named (0 there keeps the
//! most likely token, and a dynamic temperature range makes it follow the candidates'
//! entropy), and the `infill` step keeps a code model's fill short: it ends the fill when the
//! end-of-generation tokens weigh enough, merges tokens whose text starts another's, and keeps
//! only clear favourites. Without a named order, llama-server's default one runs when one of
//! its other samplers (typical-p, top-n-sigma, XTC, the dynamic temperature) is on.

use super::shaping::{cut_top_n_sigma, cut_typical, cut_xtc, dynamic_temperature};
use super::{better, cut_min_p, cut_top_k, cut_top_p, finite_candidates, softmax, Distribution, SamplingError, SamplingParams};
use crate::tokenizer::{TokenId, Tokenizer};

/// One step of a named order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplerStep {
    TopK,
    TopP,
    MinP,
    Temperature,
    Infill,
    TypicalP,
    TopNSigma,
    Xtc,
    /// A sampler of llama.cpp's this engine has no parameters for (`dry`, `adaptive_p`): at
    /// their defaults they change nothing, and so here.
    Inert,
    /// The penalties, which the logit adjustment applies before any step.
    Penalties,
}

impl SamplerStep {
    /// The step llama-server names `name`: its canonical names, their kebab-case and
    /// unseparated forms, and its aliases.
    pub fn from_name(name: &str) -> Option<SamplerStep> {
        const CANONICAL: [(&str, SamplerStep); 11] = [
            ("top_k", SamplerStep::TopK),
            ("top_p", SamplerStep::TopP),
            ("min_p", SamplerStep::MinP),
            ("temperature", SamplerStep::Temperature),
            ("infill", SamplerStep::Infill),
            ("penalties", SamplerStep::Penalties),
            ("dry", SamplerStep::Inert),
            ("typ_p", SamplerStep::TypicalP),
            ("top_n_sigma", SamplerStep::TopNSigma),
            ("xtc", SamplerStep::Xtc),
            ("adaptive_p", SamplerStep::Inert),
        ];
        let spelled = |c: &str| name == c || name == c.replace('_', "-") || name == c.replace('_', "");
        let alias = match name {
            "nucleus" => Some(SamplerStep::TopP),
            "temp" => Some(SamplerStep::Temperature),
            "typ" => Some(SamplerStep::TypicalP),
            _ => None,
        };
        CANONICAL.iter().find(|(c, _)| spelled(c)).map(|&(_, step)| step).or(alias)
    }

    /// The step of llama-server's one-letter name `c` (`samplers` given as a string).
    pub fn from_char(c: char) -> Option<SamplerStep> {
        let step = match c {
            'k' => SamplerStep::TopK,
            'p' => SamplerStep::TopP,
            'm' => SamplerStep::MinP,
            't' => SamplerStep::Temperature,
            'i' => SamplerStep::Infill,
            'e' => SamplerStep::Penalties,
            'y' => SamplerStep::TypicalP,
            's' => SamplerStep::TopNSigma,
            'x' => SamplerStep::Xtc,
            'd' | 'a' => SamplerStep::Inert,
            _ => return None,
        };
        Some(step)
    }
}

/// llama-server's default order of its samplers (the penalties and `dry` aside: the logit
/// adjustment applies the penalties first, and there is no `dry` here).
pub(super) const DEFAULT_ORDER: [SamplerStep; 7] = [
    SamplerStep::TopNSigma,
    SamplerStep::TopK,
    SamplerStep::TypicalP,
    SamplerStep::TopP,
    SamplerStep::MinP,
    SamplerStep::Xtc,
    SamplerStep::Temperature,
];

/// The distribution after `order`'s steps over the adjusted `logits`; `vocab` gives the
/// `infill` step the tokens' texts and ends (without it, that step is skipped: a draft model's
/// proposals, which the target checks with its own); `xtc_draw` (uniform in [0, 1)) decides
/// whether XTC cuts at this position.
pub(super) fn ordered(
    params: &SamplingParams,
    order: &[SamplerStep],
    logits: &[f32],
    vocab: Option<&Tokenizer>,
    xtc_draw: f64,
) -> Result<Distribution, SamplingError> {
    let mut cands = finite_candidates(logits)?;
    for step in order {
        match step {
            SamplerStep::TopK => cut_top_k(&mut cands, params.top_k),
            SamplerStep::TopP if params.top_p < 1.0 => cut_top_p(&mut cands, params.top_p),
            SamplerStep::MinP => cut_min_p(&mut cands, params.min_p),
            SamplerStep::TopNSigma => cut_top_n_sigma(&mut cands, params.top_n_sigma),
            SamplerStep::TypicalP => cut_typical(&mut cands, params.typical_p),
            SamplerStep::Xtc => cut_xtc(&mut cands, params.xtc_probability, params.xtc_threshold, xtc_draw),
            SamplerStep::Temperature => {
                let t = match params.dynatemp_range {
                    range if range > 0.0 => dynamic_temperature(&cands, params.temperature, range, params.dynatemp_exponent),
                    _ => params.temperature,
                };
                if t <= 0.0 {
                    cands = cands.iter().min_by(|a, b| better(a, b)).into_iter().copied().collect();
                } else {
                    cands.iter_mut().for_each(|c| c.1 /= t);
                }
            }
            SamplerStep::Infill => {
                if let Some(vocab) = vocab {
                    infill(&mut cands, vocab);
                }
            }
            _ => {}
        }
    }
    cands.sort_unstable_by_key(|c| c.0);
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    softmax(cands.iter().map(|c| c.0).collect(), cands.iter().map(|c| c.1 - max).collect())
}

/// llama.cpp's `infill` sampler on the candidates (their logits kept: the draw's softmax is
/// of the logits of those left, as llama.cpp's `dist` recomputes it).
fn infill(cands: &mut Vec<(TokenId, f32)>, vocab: &Tokenizer) {
    cands.sort_unstable_by(better);
    let max = cands[0].1;
    let weights: Vec<f64> = cands.iter().map(|c| (f64::from(c.1) - f64::from(max)).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut p: Vec<f64> = weights.iter().map(|w| w / total).collect();
    let eog: Vec<bool> = cands.iter().map(|c| vocab.is_eog(c.0)).collect();
    let (p_eog, p_txt) = p.iter().zip(&eog).fold((0.0, 0.0), |(e, t), (&p, &is)| if is { (e + p, t) } else { (e, t + p) });
    // the ends weigh enough against the text: end the fill
    if 3.0 * p_eog * cands.len() as f64 > p_txt {
        *cands = cands.iter().zip(&eog).filter(|(_, &e)| e).map(|(c, _)| *c).collect();
        return;
    }
    // a token whose text starts another's gives its probability to the likelier of the two
    let mut gone = vec![false; cands.len()];
    for i0 in 0..cands.len() {
        for i1 in 0..cands.len() {
            if gone[i0] {
                break;
            }
            if i0 == i1 || gone[i1] {
                continue;
            }
            let (t0, t1) = (vocab.token_to_piece(cands[i0].0, false), vocab.token_to_piece(cands[i1].0, false));
            if !t0.is_empty() && t1.starts_with(t0) {
                let (dst, src) = if p[i1] > p[i0] { (i1, i0) } else { (i0, i1) };
                p[dst] += p[src];
                p[src] = 0.0;
                gone[src] = true;
            }
        }
    }
    // the clear favourites: at least 0.2, then at least 1 / (their count + 1) of what the
    // first cut left; the ends always stay
    let left: Vec<usize> = (0..cands.len()).filter(|&i| !gone[i]).collect();
    let first = favourites(&left, &p, &eog, 0.2);
    let texts = first.iter().filter(|&&i| !eog[i]).count();
    if texts == 0 {
        // nothing but ends: the end of text (or of the sequence) for certain
        if let Some(end) = vocab.special_tokens().eot.or(vocab.eos()) {
            *cands = vec![(end, 1.0)];
        } else {
            cands.truncate(1);
        }
        return;
    }
    let sum: f64 = first.iter().map(|&i| p[i]).sum();
    first.iter().for_each(|&i| p[i] /= sum);
    let second = favourites(&first, &p, &eog, 1.0 / (texts + 1) as f64);
    *cands = second.into_iter().map(|i| cands[i]).collect();
}

/// Of the candidates `kept`, those with probability `p` at least `threshold`, and the ends.
fn favourites(kept: &[usize], p: &[f64], eog: &[bool], threshold: f64) -> Vec<usize> {
    kept.iter().copied().filter(|&i| eog[i] || p[i] >= threshold).collect()
}
