//! The sampling and stopping flags `run` and `chat` share, with llama.cpp's names and defaults
//! (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, typical, top-n-sigma, XTC and the
//! dynamic temperature off, a random seed that is printed so a run can be repeated).

use engine::sampling::{DrySettings, SamplerStep, SamplingParams};
use engine::tokenizer::TokenId;

#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy (always the most likely token).
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temp: f32,
    /// Keep only the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens up to this total probability (1 = all).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0 = none).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalise tokens already in the prompt or output (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Subtracted from the logit of tokens already in the output (OpenAI's presence penalty).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtracted per occurrence in the output (OpenAI's frequency penalty).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Locally typical sampling: keep the tokens whose surprise is nearest the entropy up to
    /// this total probability (1 = off).
    #[arg(long = "typical", default_value_t = 1.0)]
    pub typical_p: f32,
    /// Keep the tokens within this many standard deviations of the best logit (0 or less = off).
    #[arg(long = "top-nsigma", default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_n_sigma: f32,
    /// XTC: the chance at each token of excluding every token above --xtc-threshold but the
    /// least likely of them (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub xtc_probability: f32,
    /// XTC's threshold (above 0.5: nothing is excluded).
    #[arg(long, default_value_t = 0.1)]
    pub xtc_threshold: f32,
    /// The dynamic temperature: within --temp plus or minus this, following the candidates'
    /// entropy (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub dynatemp_range: f32,
    /// The dynamic temperature's exponent.
    #[arg(long = "dynatemp-exp", default_value_t = 1.0)]
    pub dynatemp_exponent: f32,
    /// DRY: the penalty on a token that would extend a repetition (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub dry_multiplier: f32,
    /// DRY: the penalty grows by this factor per token of the repetition past --dry-allowed-length.
    #[arg(long, default_value_t = 1.75)]
    pub dry_base: f32,
    /// DRY: repetitions up to this long go unpenalised.
    #[arg(long, default_value_t = 2)]
    pub dry_allowed_length: usize,
    /// DRY: the tokens scanned back for repetitions (0 = off).
    #[arg(long, default_value_t = 64)]
    pub dry_penalty_last_n: usize,
    /// DRY: a text that ends a repetition's count (repeatable) [default: line end, `:`, `"`, `*`].
    #[arg(long = "dry-sequence-breaker")]
    pub dry_sequence_breakers: Vec<String>,
    /// Add BIAS to token ID's logit, as ID=BIAS (repeatable; -100 bans a token).
    #[arg(long = "logit-bias", value_parser = parse_logit_bias, allow_negative_numbers = true)]
    pub logit_bias: Vec<(TokenId, f32)>,
    /// Random seed (full 64 bits) [default: random, printed].
    #[arg(long, short = 's')]
    pub seed: Option<u64>,
    /// Stop before this text (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// The samplers in this order, as llama.cpp names them separated by `;` (e.g.
    /// `top_k;top_p;infill`; temperature applies only where named) [default: top_k, top_p,
    /// min_p, temperature].
    #[arg(long, value_parser = parse_samplers)]
    pub samplers: Option<SamplerOrder>,
}

impl SamplingArgs {
    /// The parameters, checked against their ranges; the seed is drawn when none was given.
    pub fn params(&self, n_vocab: usize) -> anyhow::Result<SamplingParams> {
        let seed = self.seed.unwrap_or_else(random_seed);
        let params = SamplingParams {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            logit_bias: self.logit_bias.clone(),
            seed,
            typical_p: self.typical_p,
            top_n_sigma: self.top_n_sigma,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exponent,
            dry: DrySettings {
                multiplier: self.dry_multiplier,
                base: self.dry_base,
                allowed_length: self.dry_allowed_length,
                penalty_last_n: self.dry_penalty_last_n,
                sequence_breakers: if self.dry_sequence_breakers.is_empty() {
                    DrySettings::default().sequence_breakers
                } else {
                    self.dry_sequence_breakers.clone()
                },
            },
            order: self.samplers.clone().map(|o| o.0),
        };
        params.validate(n_vocab)?;
        Ok(params)
    }
}

/// A seed from the OS's hash randomisation and the clock: good enough to differ run to run.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

fn parse_logit_bias(s: &str) -> Result<(TokenId, f32), String> {
    let (id, bias) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected ID=BIAS, e.g. 13=-100"))?;
    let id = id.trim().parse().map_err(|_| format!("{s:?}: {id:?} is not a token id"))?;
    let bias = bias.trim().parse().map_err(|_| format!("{s:?}: {bias:?} is not a number"))?;
    Ok((id, bias))
}

/// `--samplers`' list (one value to clap, which would read a `Vec` as a repeated flag).
#[derive(Clone, Debug)]
pub struct SamplerOrder(Vec<SamplerStep>);

fn parse_samplers(s: &str) -> Result<SamplerOrder, String> {
    let steps =
        s.split(';').map(|name| SamplerStep::from_name(name.trim()).ok_or_else(|| format!("{name:?} is not a sampler of llama.cpp's")));
    steps.collect::<Result<_, _>>().map(SamplerOrder)
}
