//! Choosing the next token from a row of logits: logit bias, repetition / presence / frequency
//! penalties, top-k, top-p, min-p, temperature and a seeded random draw; and llama.cpp's other
//! samplers: the DRY penalty (`dry.rs`, with the penalties) and typical-p, top-n-sigma, XTC and
//! the dynamic temperature (`shaping.rs`), which run in llama-server's default order when one of
//! them is on.
//!
//! The pipeline, in order (the order is part of the contract, tests pin it):
//! 1. `logit_bias` is added to the named tokens;
//! 2. penalties: repetition (CTRL / llama.cpp rule) over the prompt and the output so far,
//!    presence and frequency (OpenAI's rule) over the output so far;
//! 3. (a grammar mask, applied by the caller, sets forbidden tokens to -inf);
//! 4. at temperature 0 the result is the most likely token (lower id on ties), nothing random;
//! 5. otherwise top-k, then top-p, then min-p cut the candidates, each judged on the softmax of
//!    what is left at temperature 1 (as llama.cpp does), then the survivors are scaled by the
//!    temperature, normalised, and one is drawn with the seeded generator.
//!
//! The random generator is ours (xoshiro256++ seeded through SplitMix64 from a full `u64`), so
//! a seed gives the same text on every machine and every version of every dependency.

mod chain;
mod distribution;
mod dry;
mod shaping;

use rustc_hash::{FxHashMap, FxHashSet};

pub use chain::SamplerStep;
use distribution::sum_f64;
pub use distribution::Distribution;
pub use dry::DrySettings;

use crate::logprobs::argmax;
use crate::quant::ggml_expf;
use crate::tokenizer::{TokenId, Tokenizer};

/// How tokens are chosen. `Default` is OpenAI's: temperature 1, nothing cut, no penalties.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy; otherwise logits are divided by it before the draw.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (1 = all;
    /// at least one token always stays).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0 = none).
    pub min_p: f32,
    /// Divide positive logits / multiply negative logits of every token already seen in the
    /// prompt or the output by this (1 = off).
    pub repetition_penalty: f32,
    /// Subtract this from the logit of every token the output already contains (0 = off).
    pub presence_penalty: f32,
    /// Subtract this times the token's count in the output so far (0 = off).
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens (-100 effectively bans a token, +100 forces it).
    pub logit_bias: Vec<(TokenId, f32)>,
    pub seed: u64,
    /// Locally typical sampling: keep the tokens whose surprise is nearest the entropy until
    /// their probability passes this (1 = off).
    pub typical_p: f32,
    /// Keep the tokens whose logit is within this many standard deviations of the best (0 or
    /// less = off).
    pub top_n_sigma: f32,
    /// XTC: the chance, at each token, that every token at least `xtc_threshold` likely but the
    /// least likely of them is excluded (0 = off; a threshold above 0.5 never excludes).
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    /// The dynamic temperature: within `temperature` ± this, following the candidates'
    /// normalised entropy raised to `dynatemp_exponent` (0 = a fixed temperature).
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
    /// The DRY penalty on tokens that would extend a repetition (off by default).
    pub dry: DrySettings,
    /// The cuts in the order named (llama-server's `samplers`), temperature only where named;
    /// `None`: top-k, top-p, min-p, then temperature (llama-server's default order when
    /// typical-p, top-n-sigma, XTC or the dynamic temperature is on), and 0 is greedy.
    pub order: Option<Vec<SamplerStep>>,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            dry: DrySettings::default(),
            order: None,
        }
    }
}

impl SamplingParams {
    /// Always the most likely token.
    pub fn greedy() -> SamplingParams {
        SamplingParams { temperature: 0.0, ..SamplingParams::default() }
    }

    /// Checks every value against its documented range (the ranges of the OpenAI API where it
    /// has one); `n_vocab` bounds the token ids of `logit_bias`.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SamplingError> {
        let check = |name: &'static str, value: f32, ok: bool, expected: &'static str| {
            if ok && value.is_finite() {
                Ok(())
            } else {
                Err(SamplingError::OutOfRange { name, expected, value: value.to_string() })
            }
        };
        check("temperature", self.temperature, (0.0..=100.0).contains(&self.temperature), "between 0 and 100")?;
        check("top_p", self.top_p, (0.0..=1.0).contains(&self.top_p), "between 0 and 1")?;
        check("min_p", self.min_p, (0.0..=1.0).contains(&self.min_p), "between 0 and 1")?;
        let rp = self.repetition_penalty;
        check("repetition_penalty", rp, rp > 0.0 && rp <= 10.0, "greater than 0 and at most 10")?;
        let pp = self.presence_penalty;
        check("presence_penalty", pp, (-2.0..=2.0).contains(&pp), "between -2 and 2")?;
        let fp = self.frequency_penalty;
        check("frequency_penalty", fp, (-2.0..=2.0).contains(&fp), "between -2 and 2")?;
        check("typical_p", self.typical_p, (0.0..=1.0).contains(&self.typical_p), "between 0 and 1")?;
        check("top_n_sigma", self.top_n_sigma, self.top_n_sigma <= 100.0, "at most 100 (0 or less: off)")?;
        check("xtc_probability", self.xtc_probability, (0.0..=1.0).contains(&self.xtc_probability), "between 0 and 1")?;
        check("xtc_threshold", self.xtc_threshold, (0.0..=1.0).contains(&self.xtc_threshold), "between 0 and 1")?;
        check("dynatemp_range", self.dynatemp_range, (0.0..=100.0).contains(&self.dynatemp_range), "between 0 and 100")?;
        let de = self.dynatemp_exponent;
        check("dynatemp_exponent", de, (0.0..=100.0).contains(&de), "between 0 and 100")?;
        let dm = self.dry.multiplier;
        check("dry_multiplier", dm, (0.0..=100.0).contains(&dm), "between 0 and 100")?;
        check("dry_base", self.dry.base, (1.0..=100.0).contains(&self.dry.base), "between 1 and 100")?;
        for &(id, bias) in &self.logit_bias {
            if id as usize >= n_vocab {
                return Err(SamplingError::OutOfRange {
                    name: "logit_bias",
                    expected: "token ids below the vocabulary size",
                    value: id.to_string(),
                });
            }
            check("logit_bias", bias, (-100.0..=100.0).contains(&bias), "between -100 and 100")?;
        }
        Ok(())
    }

    fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether one of llama.cpp's other samplers is on (then its default order runs).
    fn shapes(&self) -> bool {
        self.typical_p < 1.0 || self.top_n_sigma > 0.0 || self.xtc_probability > 0.0 || self.dynatemp_range > 0.0
    }

    /// The uniform number XTC draws for output token `position` (1, which never cuts, when XTC
    /// is off): a function of the seed and the position alone, so that a position's
    /// distribution is the same however the tokens before it were verified.
    fn xtc_draw(&self, position: u64) -> f64 {
        if self.xtc_probability <= 0.0 {
            return 1.0;
        }
        Rng::new(self.seed ^ 0x5854_435f_6472_6177 ^ position.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_f64()
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplingError {
    #[error("{name} must be {expected}, got {value}")]
    OutOfRange { name: &'static str, expected: &'static str, value: String },
    /// Every token was masked out (or every logit was NaN): nothing can be drawn.
    #[error("no token is allowed at this point (every logit is -inf or NaN)")]
    NoCandidates,
}

/// xoshiro256++, seeded from one `u64` through SplitMix64 (the seeding its authors recommend).
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The candidate order used by the cuts: higher logit first, then lower id.
fn better(a: &(TokenId, f32), b: &(TokenId, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Turns adjusted (biased, penalised, masked) logits into the distribution the draw uses:
/// greedy gives certainty on the argmax; otherwise top-k, top-p, min-p and temperature.
pub fn distribution(params: &SamplingParams, logits: &[f32]) -> Result<Distribution, SamplingError> {
    distribution_at(params, logits, None, params.xtc_draw(0))
}

/// [`distribution`] with the vocabulary the `infill` step reads and this position's XTC draw.
fn distribution_at(
    params: &SamplingParams,
    logits: &[f32],
    vocab: Option<&Tokenizer>,
    xtc_draw: f64,
) -> Result<Distribution, SamplingError> {
    if let Some(order) = &params.order {
        return chain::ordered(params, order, logits, vocab, xtc_draw);
    }
    if params.is_greedy() {
        let best = argmax(logits);
        if !logits.get(best as usize).is_some_and(|v| v.is_finite()) {
            return Err(SamplingError::NoCandidates);
        }
        return Ok(Distribution::certain(best));
    }
    if params.shapes() {
        return chain::ordered(params, &chain::DEFAULT_ORDER, logits, vocab, xtc_draw);
    }
    if (params.top_k == 0 || params.top_k >= logits.len()) && params.top_p >= 1.0 && params.min_p <= 0.0 {
        return whole_vocabulary(logits, params.temperature);
    }
    let mut cands = finite_candidates(logits)?;
    let n_finite = cands.len();
    cut_top_k(&mut cands, params.top_k);
    if params.top_p < 1.0 {
        cut_top_p(&mut cands, params.top_p);
    }
    cut_min_p(&mut cands, params.min_p);
    if cands.len() < n_finite {
        // the cuts reorder what they keep; the draw walks token order
        cands.sort_unstable_by_key(|c| c.0);
    }
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let scaled = cands.iter().map(|c| (c.1 - max) / params.temperature).collect();
    softmax(cands.iter().map(|c| c.0).collect(), scaled)
}

/// The distribution of `ids` (ascending) with weights `exp(scaled)`: ggml's polynomial exp,
/// the f64 total over lanes, each probability `w / total`.
fn softmax(ids: Vec<TokenId>, mut scaled: Vec<f32>) -> Result<Distribution, SamplingError> {
    let total = exp_and_total(&mut scaled)?;
    normalise(&mut scaled, total);
    Ok(Distribution::sparse(ids, scaled))
}

/// `w = exp(w)` over the row, and the total weight.
fn exp_and_total(w: &mut [f32]) -> Result<f64, SamplingError> {
    exp_in_place(w);
    total_weight(w)
}

/// The total of the weights `w` (an error when nothing has weight).
#[inline(always)]
fn total_weight(w: &[f32]) -> Result<f64, SamplingError> {
    let total = sum_f64(w);
    if total <= 0.0 || !total.is_finite() {
        return Err(SamplingError::NoCandidates);
    }
    Ok(total)
}

/// `w = w / total`, as a product with the f64 reciprocal rounded to f32 (a division per token
/// costs more than the rest of the pass), a straight loop that vectorises.
#[inline(always)]
fn normalise(w: &mut [f32], total: f64) {
    let inv = 1.0 / total;
    w.iter_mut().for_each(|x| *x = (f64::from(*x) * inv) as f32);
}

crate::quant::fma_variants!(
    /// The distribution when nothing is cut (the common case: OpenAI's defaults, or a
    /// temperature alone): the same steps as the general path in [`distribution`], straight
    /// over the row and kept dense (by token id), without listing the candidates as (token,
    /// logit) pairs. Every pass is a loop the tier's copy vectorises; the bits are the same on
    /// every tier.
    fn whole_vocabulary, fn whole_vocabulary_with(logits: &[f32], temperature: f32) -> Result<Distribution, SamplingError> = whole_vocabulary_body
);

#[inline(always)]
fn whole_vocabulary_body(logits: &[f32], temperature: f32) -> Result<Distribution, SamplingError> {
    let max = finite_max(logits);
    if max == f32::NEG_INFINITY {
        return Err(SamplingError::NoCandidates);
    }
    // infinite and NaN logits are no candidates: weight exp(-inf) = 0 (one loop, here, so
    // that it is the tier's copy that runs)
    let mut w = vec![0.0f32; logits.len()];
    for (w, &l) in w.iter_mut().zip(logits) {
        *w = ggml_expf(if l.is_finite() { (l - max) / temperature } else { f32::NEG_INFINITY });
    }
    let total = total_weight(&w)?;
    normalise(&mut w, total);
    Ok(Distribution::dense(w))
}

/// The largest finite value (-inf if none), over 16 lanes so that the loop vectorises.
#[inline(always)]
fn finite_max(v: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = v.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x.is_finite() && x > *m { x } else { *m };
        }
    }
    rest.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &x| if x.is_finite() && x > m { x } else { m })
}

crate::quant::fma_variants!(
    /// `w = exp(w)` over a row, with ggml's vectorised polynomial exp (within 1.5 ulp; the same
    /// bits on every machine, fused multiply-adds or not). A row of the whole vocabulary is the
    /// common case (no top-k / top-p), and the C library's exp on each of 150k-260k logits
    /// would cost more than the rest of sampling.
    fn exp_in_place, fn exp_in_place_with(w: &mut [f32]) = exp_in_place_body
);

#[inline(always)]
fn exp_in_place_body(w: &mut [f32]) {
    w.iter_mut().for_each(|x| *x = ggml_expf(*x));
}

/// The finite logits as (token, logit) candidates, in token order (an error when none is).
fn finite_candidates(logits: &[f32]) -> Result<Vec<(TokenId, f32)>, SamplingError> {
    let cands: Vec<(TokenId, f32)> = logits.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| (i as TokenId, v)).collect();
    if cands.is_empty() {
        return Err(SamplingError::NoCandidates);
    }
    Ok(cands)
}

/// Keeps the `k` most likely candidates (0: all).
fn cut_top_k(cands: &mut Vec<(TokenId, f32)>, k: usize) {
    if k > 0 && k < cands.len() {
        cands.select_nth_unstable_by(k - 1, better);
        cands.truncate(k);
    }
}

/// Drops the candidates less likely than `min_p` times the most likely one (0: none).
fn cut_min_p(cands: &mut Vec<(TokenId, f32)>, min_p: f32) {
    if min_p > 0.0 {
        // p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p)
        let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
        let floor = max + min_p.ln();
        cands.retain(|c| c.1 >= floor);
    }
}

/// Keeps the most likely candidates until their probability (softmax at temperature 1 over
/// `cands`) reaches `top_p`. Sorting a 262k vocabulary every token would cost more than the
/// rest of sampling, so the best few are selected and sorted first, and the window only grows
/// when their mass falls short.
fn cut_top_p(cands: &mut Vec<(TokenId, f32)>, top_p: f32) {
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let total: f64 = cands.iter().map(|c| (f64::from(c.1) - f64::from(max)).exp()).sum();
    let target = f64::from(top_p) * total;
    let mut window = 64.min(cands.len());
    loop {
        if window < cands.len() {
            cands.select_nth_unstable_by(window - 1, better);
        }
        cands[..window].sort_unstable_by(better);
        let mut acc = 0.0;
        for i in 0..window {
            acc += (f64::from(cands[i].1) - f64::from(max)).exp();
            if acc >= target {
                cands.truncate(i + 1);
                return;
            }
        }
        if window == cands.len() {
            return; // rounding: the whole set is the nucleus
        }
        window = (window * 8).min(cands.len());
    }
}

/// One sequence's sampler: the parameters, the random generator and the token counts the
/// penalties need.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Occurrences of each token in the output so far (presence and frequency penalties).
    output_counts: FxHashMap<TokenId, u32>,
    /// Tokens of the prompt and the output (repetition penalty).
    seen: FxHashSet<TokenId>,
    /// Output tokens so far: the position of the next, whose XTC draw it decides.
    produced: u64,
    /// With DRY on: the prompt and the output so far, and the breakers' restart sequences in
    /// the vocabulary ([`Sampler::with_vocabulary`]).
    history: Vec<TokenId>,
    breakers: std::sync::Arc<dry::Breakers>,
}

impl Sampler {
    /// A sampler for an output that continues `prompt`. Validate `params` first
    /// ([`SamplingParams::validate`]): out-of-range values are used as given.
    pub fn new(params: SamplingParams, prompt: &[TokenId]) -> Sampler {
        let rng = Rng::new(params.seed);
        let mut seen = FxHashSet::default();
        if params.repetition_penalty != 1.0 {
            seen.extend(prompt.iter().copied());
        }
        let history = if params.dry.is_on() { prompt.to_vec() } else { Vec::new() };
        Sampler { params, rng, output_counts: FxHashMap::default(), seen, produced: 0, history, breakers: Default::default() }
    }

    /// The DRY breakers' restart sequences in `vocab` (with DRY on: a pass over the vocabulary,
    /// made once per list of breakers and kept with the tokenizer).
    pub fn with_vocabulary(mut self, vocab: &Tokenizer) -> Sampler {
        if self.params.dry.is_on() {
            let breakers = &self.params.dry.sequence_breakers;
            let key = format!("dry restart sequences {breakers:?}");
            self.breakers = vocab.derived(&key, |v| dry::restart_sequences(v, breakers));
        }
        self
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records a token of the output (for the penalties).
    pub fn accept(&mut self, token: TokenId) {
        self.produced += 1;
        if self.params.dry.is_on() {
            self.history.push(token);
        }
        *self.output_counts.entry(token).or_default() += 1;
        if self.params.repetition_penalty != 1.0 {
            self.seen.insert(token);
        }
    }

    /// Whether [`Sampler::adjust`] would change any logit: a bias, or a penalty with tokens
    /// to apply it to.
    pub fn adjusts(&self) -> bool {
        let (rp, pp, fp) = (self.params.repetition_penalty, self.params.presence_penalty, self.params.frequency_penalty);
        !self.params.logit_bias.is_empty()
            || (self.params.dry.is_on() && self.history.len() > self.params.dry.allowed_length)
            || (rp != 1.0 && !self.seen.is_empty())
            || ((pp != 0.0 || fp != 0.0) && !self.output_counts.is_empty())
    }

    /// Steps 1 and 2 of the pipeline, in place: logit bias, then the penalties (DRY's last).
    pub fn adjust(&self, logits: &mut [f32]) {
        for &(id, bias) in &self.params.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
        let rp = self.params.repetition_penalty;
        if rp != 1.0 {
            for &id in &self.seen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = if *l > 0.0 { *l / rp } else { *l * rp };
                }
            }
        }
        let (pp, fp) = (self.params.presence_penalty, self.params.frequency_penalty);
        if pp != 0.0 || fp != 0.0 {
            for (&id, &count) in &self.output_counts {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= pp + fp * count as f32;
                }
            }
        }
        dry::apply(&self.params.dry, &self.breakers, &self.history, logits);
    }

    /// The distribution a draw would use for these adjusted logits of `vocab`'s tokens.
    pub fn distribution(&self, adjusted: &[f32], vocab: &Tokenizer) -> Result<Distribution, SamplingError> {
        distribution_at(&self.params, adjusted, Some(vocab), self.params.xtc_draw(self.produced))
    }

    /// Draws from `dist` with this sampler's generator.
    pub fn sample(&mut self, dist: &Distribution) -> TokenId {
        dist.sample(&mut self.rng)
    }

    /// This sampler's generator as it stands: a draft model copies it to draw its proposals
    /// with the numbers this sampler's next draws will use.
    pub fn rng(&self) -> &Rng {
        &self.rng
    }

    /// The whole pipeline on a raw row: adjusts `logits` in place, then draws. Does not record
    /// the token (call [`Sampler::accept`] once it is kept).
    pub fn pick(&mut self, logits: &mut [f32]) -> Result<TokenId, SamplingError> {
        self.adjust(logits);
        let dist = distribution_at(&self.params, logits, None, self.params.xtc_draw(self.produced))?;
        Ok(self.sample(&dist))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
        let mut p = SamplingParams::default();
        f(&mut p);
        p
    }

    fn ids(d: &Distribution) -> Vec<TokenId> {
        d.candidates().map(|c| c.0).collect()
    }

    /// Logits whose softmax is exactly `probs`.
    fn logits_of(probs: &[f32]) -> Vec<f32> {
        probs.iter().map(|p| p.ln()).collect()
    }

    /// The softmax's exp gives the same bits on every tier (16, 8 or 1 lanes at a time).
    #[test]
    fn exp_tiers_agree_bit_for_bit() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 90.0 - 20.0).chain([f32::NEG_INFINITY, 0.0, -0.0]).collect();
        let mut plain = x.clone();
        exp_in_place_with(crate::quant::Isa::Scalar, &mut plain);
        for tier in crate::quant::Isa::available() {
            let mut fused = x.clone();
            exp_in_place_with(tier, &mut fused);
            assert_eq!(
                plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                fused.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{tier:?}"
            );
        }
    }

    /// The whole-vocabulary path gives the same probabilities on every tier.
    #[test]
    fn whole_vocabulary_tiers_agree_bit_for_bit() {
        let logits: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.61).sin() * 25.0).chain([f32::NAN, f32::NEG_INFINITY, 1e30]).collect();
        let plain = whole_vocabulary_with(crate::quant::Isa::Scalar, &logits, 0.7).unwrap();
        for tier in crate::quant::Isa::available() {
            let fused = whole_vocabulary_with(tier, &logits, 0.7).unwrap();
            let bits = |d: &Distribution| d.candidates().map(|(id, p)| (id, p.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(&plain), bits(&fused), "{tier:?}");
        }
    }

    #[test]
    fn rng_is_reproducible_and_uniform_enough() {
        let a: Vec<u64> = (0..4).scan(Rng::new(42), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..4).scan(Rng::new(42), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        let c: Vec<u64> = (0..4).scan(Rng::new(43), |r, _| Some(r.next_u64())).collect();
        assert_ne!(a, c);
        // the high bits of the seed matter too (full u64 seeds)
        let d: Vec<u64> = (0..4).scan(Rng::new(42 | 1 << 63), |r, _| Some(r.next_u64())).collect();
        assert_ne!(a, d);
        let mut r = Rng::new(7);
        let mean = (0..100_000).map(|_| r.next_f64()).sum::<f64>() / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
    }

    #[test]
    fn greedy_is_the_argmax_with_ties_to_the_lower_id() {
        let d = distribution(&SamplingParams::greedy(), &[1.0, 5.0, 5.0, -2.0]).unwrap();
        assert_eq!(d, Distribution::certain(1));
        let masked = [f32::NEG_INFINITY; 3];
        assert_eq!(distribution(&SamplingParams::greedy(), &masked), Err(SamplingError::NoCandidates));
        assert_eq!(distribution(&SamplingParams::default(), &masked), Err(SamplingError::NoCandidates));
    }

    #[test]
    fn the_uncut_fast_path_equals_the_general_path() {
        let mut state = 0x2545_f491u32;
        let mut logits: Vec<f32> = (0..5000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as f32 / u32::MAX as f32 * 30.0 - 15.0
            })
            .collect();
        logits[7] = f32::NEG_INFINITY;
        logits[8] = f32::NAN;
        logits[9] = f32::INFINITY;
        for t in [0.3, 0.8, 1.0, 1.7] {
            let fast = distribution(&params(|p| p.temperature = t), &logits).unwrap();
            // top_k = the vocabulary cuts nothing but takes the general path
            let general = distribution(&params(|p| (p.temperature, p.top_k) = (t, logits.len() - 1)), &logits).unwrap();
            assert_eq!(fast, general, "temperature {t}");
            assert!(fast.prob(7) == 0.0 && fast.prob(8) == 0.0 && fast.prob(9) == 0.0);
        }
    }

    #[test]
    fn top_k_keeps_the_k_best() {
        let l = logits_of(&[0.1, 0.4, 0.05, 0.3, 0.15]);
        assert_eq!(ids(&distribution(&params(|p| p.top_k = 2), &l).unwrap()), [1, 3]);
        assert_eq!(ids(&distribution(&params(|p| p.top_k = 3), &l).unwrap()), [1, 3, 4]);
        assert_eq!(ids(&distribution(&params(|p| p.top_k = 9), &l).unwrap()), [0, 1, 2, 3, 4]);
        // ties at the boundary go to the lower id
        let l = [1.0, 2.0, 2.0, 2.0];
        assert_eq!(ids(&distribution(&params(|p| p.top_k = 2), &l).unwrap()), [1, 2]);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        let l = logits_of(&[0.1, 0.4, 0.05, 0.3, 0.15]);
        // sorted: 0.4 (1), 0.3 (3), 0.15 (4), 0.1 (0), 0.05 (2)
        // (values away from the exact sums: the logits are rounded logarithms)
        assert_eq!(ids(&distribution(&params(|p| p.top_p = 0.39), &l).unwrap()), [1]);
        assert_eq!(ids(&distribution(&params(|p| p.top_p = 0.41), &l).unwrap()), [1, 3]);
        assert_eq!(ids(&distribution(&params(|p| p.top_p = 0.69), &l).unwrap()), [1, 3]);
        assert_eq!(ids(&distribution(&params(|p| p.top_p = 0.71), &l).unwrap()), [1, 3, 4]);
        assert_eq!(ids(&distribution(&params(|p| p.top_p = 0.9), &l).unwrap()), [0, 1, 3, 4]);
        assert_eq!(ids(&distribution(&params(|p| p.top_p = 0.0), &l).unwrap()), [1]);
        // after top-k the nucleus is judged on the renormalised survivors: 0.4 / 0.7 > 0.5
        let d = distribution(&params(|p| (p.top_k, p.top_p) = (2, 0.5)), &l).unwrap();
        assert_eq!(ids(&d), [1]);
    }

    #[test]
    fn top_p_window_grows_on_a_flat_large_vocabulary() {
        // 10,000 equal tokens: the nucleus of 0.5 is the first 5,000 ids (ties to lower ids),
        // far past the first selection window
        let l = vec![0.0f32; 10_000];
        let d = distribution(&params(|p| p.top_p = 0.5), &l).unwrap();
        assert_eq!(d.candidates().count(), 5_000);
        assert_eq!(d.candidates().last().unwrap().0, 4_999);
    }

    #[test]
    fn min_p_drops_tokens_below_the_fraction_of_the_best() {
        let l = logits_of(&[0.1, 0.4, 0.05, 0.3, 0.15]);
        // 0.24 * 0.4 = 0.096 keeps 0.1; 0.26 * 0.4 = 0.104 drops it
        assert_eq!(ids(&distribution(&params(|p| p.min_p = 0.24), &l).unwrap()), [0, 1, 3, 4]);
        assert_eq!(ids(&distribution(&params(|p| p.min_p = 0.26), &l).unwrap()), [1, 3, 4]);
        assert_eq!(ids(&distribution(&params(|p| p.min_p = 0.5), &l).unwrap()), [1, 3]);
        assert_eq!(ids(&distribution(&params(|p| p.min_p = 1.0), &l).unwrap()), [1]);
    }

    #[test]
    fn temperature_reshapes_the_survivors() {
        let l = logits_of(&[0.2, 0.8]);
        let d = distribution(&params(|p| p.temperature = 1.0), &l).unwrap();
        assert!((d.prob(1) - 0.8).abs() < 1e-6);
        // T = 0.5 squares the odds: 0.64 / (0.64 + 0.04)
        let d = distribution(&params(|p| p.temperature = 0.5), &l).unwrap();
        assert!((d.prob(1) - 0.64 / 0.68).abs() < 1e-6, "{d:?}");
        // T = 2 takes square roots
        let d = distribution(&params(|p| p.temperature = 2.0), &l).unwrap();
        let (a, b) = (0.2f32.sqrt(), 0.8f32.sqrt());
        assert!((d.prob(1) - b / (a + b)).abs() < 1e-6);
    }

    #[test]
    fn penalties_change_logits_by_the_documented_amounts() {
        let prompt = [0, 1];
        let p = params(|p| {
            p.repetition_penalty = 2.0;
            p.presence_penalty = 0.5;
            p.frequency_penalty = 0.25;
            p.logit_bias = vec![(4, 3.0)];
        });
        let mut s = Sampler::new(p, &prompt);
        s.accept(2);
        s.accept(2);
        s.accept(3);
        let mut l = vec![4.0, -4.0, 4.0, -1.0, 1.0, 1.0];
        s.adjust(&mut l);
        // 0: prompt only -> repetition: 4 / 2
        // 1: prompt only, negative -> -4 * 2
        // 2: output twice -> 4 / 2 - 0.5 - 2 * 0.25
        // 3: output once, negative -> -1 * 2 - 0.5 - 0.25
        // 4: bias only -> 1 + 3; 5: untouched
        assert_eq!(l, vec![2.0, -8.0, 1.0, -2.75, 4.0, 1.0]);

        // repetition penalty off: the prompt does not count, presence/frequency still do
        let mut s = Sampler::new(params(|p| p.frequency_penalty = 1.0), &prompt);
        s.accept(0);
        let mut l = vec![1.0, 1.0];
        s.adjust(&mut l);
        assert_eq!(l, vec![0.0, 1.0]);
    }

    /// `adjusts` says false exactly when `adjust` would leave every logit as it is.
    #[test]
    fn adjusts_only_when_adjust_changes_something() {
        let row = vec![4.0, -4.0, 2.0, 1.0];
        let changes = |s: &Sampler| {
            let mut l = row.clone();
            s.adjust(&mut l);
            l != row
        };
        let cases: Vec<(Sampler, Option<TokenId>)> = vec![
            (Sampler::new(params(|_| {}), &[0, 1]), None),
            (Sampler::new(params(|p| p.logit_bias = vec![(2, 1.0)]), &[]), None),
            (Sampler::new(params(|p| p.repetition_penalty = 1.5), &[]), None),
            (Sampler::new(params(|p| p.repetition_penalty = 1.5), &[0]), None),
            (Sampler::new(params(|p| p.presence_penalty = 0.5), &[0, 1]), None),
            (Sampler::new(params(|p| p.presence_penalty = 0.5), &[]), Some(3)),
            (Sampler::new(params(|p| p.frequency_penalty = -0.5), &[]), Some(1)),
        ];
        let mut seen = [false, false];
        for (mut s, accepted) in cases {
            if let Some(t) = accepted {
                s.accept(t);
            }
            assert_eq!(s.adjusts(), changes(&s), "{:?} after {accepted:?}", s.params);
            seen[usize::from(s.adjusts())] = true;
        }
        assert_eq!(seen, [true, true]);
    }

    #[test]
    fn same_seed_same_draws_different_seed_different_draws() {
        let l: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let draws = |seed: u64| {
            let mut s = Sampler::new(params(|p| p.seed = seed), &[]);
            (0..64).map(|_| s.pick(&mut l.clone()).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draws(1234), draws(1234));
        assert_ne!(draws(1234), draws(1235));
    }

    #[test]
    fn draws_follow_the_distribution() {
        let l = logits_of(&[0.5, 0.3, 0.2]);
        let mut s = Sampler::new(params(|p| p.seed = 9), &[]);
        let mut counts = [0usize; 3];
        for _ in 0..30_000 {
            counts[s.pick(&mut l.clone()).unwrap() as usize] += 1;
        }
        for (c, want) in counts.iter().zip([0.5, 0.3, 0.2]) {
            let got = *c as f64 / 30_000.0;
            assert!((got - want).abs() < 0.015, "{counts:?}");
        }
    }

    #[test]
    fn masked_tokens_are_never_drawn() {
        let mut l = vec![f32::NEG_INFINITY; 10];
        l[7] = -50.0;
        l[3] = -49.0;
        let mut s = Sampler::new(params(|p| p.seed = 1), &[]);
        for _ in 0..200 {
            let t = s.pick(&mut l.clone()).unwrap();
            assert!(t == 3 || t == 7);
        }
    }

    #[test]
    fn validation_names_the_bad_value() {
        assert!(SamplingParams::default().validate(10).is_ok());
        let e = params(|p| p.top_p = 1.5).validate(10).unwrap_err();
        assert_eq!(e.to_string(), "top_p must be between 0 and 1, got 1.5");
        assert!(params(|p| p.temperature = -1.0).validate(10).is_err());
        assert!(params(|p| p.temperature = f32::NAN).validate(10).is_err());
        assert!(params(|p| p.repetition_penalty = 0.0).validate(10).is_err());
        assert!(params(|p| p.presence_penalty = 2.5).validate(10).is_err());
        assert!(params(|p| p.logit_bias = vec![(10, 1.0)]).validate(10).is_err());
        assert!(params(|p| p.logit_bias = vec![(9, 101.0)]).validate(10).is_err());
    }
}
