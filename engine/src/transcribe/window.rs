//! One 30-second window decoded by Whisper: the prompt (earlier text after `<|startofprev|>`,
//! then `<|startoftranscript|>`, the language and task for multilingual models, and
//! `<|notimestamps|>` when timestamps are off), then tokens chosen one at a time under the
//! logit rules until the end of text or half the decoder's context.

use super::logit_rules::LogitRules;
use crate::logprobs::{argmax, log_normalizer};
use crate::model::whisper::{EncodedWindow, WhisperModel};
use crate::model::ModelError;
use crate::sampling::{distribution, Rng, SamplingParams};
use crate::tokenizer::TokenId;

/// What goes before a window's own tokens.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowPrompt {
    /// Text tokens of earlier windows or of the caller's prompt (the last `n_ctx / 2 - 1` are
    /// kept).
    pub previous: Vec<TokenId>,
    /// The language token (multilingual models; `None` there means English).
    pub language: Option<TokenId>,
    pub translate: bool,
    pub timestamps: bool,
}

/// A decoded window.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowResult {
    /// The chosen tokens, the end of text left out.
    pub tokens: Vec<TokenId>,
    /// Sum of the chosen tokens' log-probabilities, the end of text's included.
    pub sum_logprob: f64,
    /// `sum_logprob / (tokens + 1)`.
    pub avg_logprob: f64,
    /// Probability of `<|nospeech|>` right after `<|startoftranscript|>`.
    pub no_speech_prob: f64,
    pub temperature: f32,
}

/// The prompt tokens, and the index of `<|startoftranscript|>` in them.
pub fn prompt_tokens(model: &WhisperModel, p: &WindowPrompt) -> (Vec<TokenId>, usize) {
    let c = model.config();
    let t = &c.tokens;
    let mut tokens = Vec::new();
    if !p.previous.is_empty() {
        let keep = c.decoder.n_ctx / 2 - 1;
        tokens.push(t.sot_prev);
        tokens.extend_from_slice(&p.previous[p.previous.len().saturating_sub(keep)..]);
    }
    let sot_index = tokens.len();
    tokens.push(t.sot);
    if c.multilingual {
        let english = t.languages.iter().find(|(_, code)| code == "en").map(|&(id, _)| id);
        tokens.extend(p.language.or(english));
        tokens.push(if p.translate { t.translate } else { t.transcribe });
    }
    if !p.timestamps {
        tokens.push(t.no_timestamps);
    }
    (tokens, sot_index)
}

/// Decodes one window at `temperature` (0: the likeliest token each step).
pub fn decode_window(
    model: &WhisperModel,
    audio: &EncodedWindow,
    rules: &LogitRules,
    prompt: &WindowPrompt,
    temperature: f32,
    rng: &mut Rng,
) -> Result<WindowResult, ModelError> {
    let c = model.config();
    let eot = c.tokens.eot;
    let (tokens, sot_index) = prompt_tokens(model, prompt);
    let mut cache = model.new_cache();
    // through <|startoftranscript|> first: its logits give the no-speech probability
    let mut logits = model.decode(audio, &mut cache, &tokens[..=sot_index], 0)?;
    let no_speech_prob = logprob(&logits, c.tokens.no_speech).exp();
    if sot_index + 1 < tokens.len() {
        logits = model.decode(audio, &mut cache, &tokens[sot_index + 1..], sot_index + 1)?;
    }
    let sample_len = c.decoder.n_ctx / 2;
    let mut sampled: Vec<TokenId> = Vec::new();
    let mut sum_logprob = 0f64;
    let mut pos = tokens.len();
    loop {
        rules.apply(&mut logits, &sampled, prompt.timestamps);
        let next = if temperature > 0.0 { sample(&logits, temperature, rng) } else { argmax(&logits) };
        sum_logprob += logprob(&logits, next);
        if next == eot || sampled.len() + 1 >= sample_len || pos + 1 >= c.decoder.n_ctx {
            if next != eot {
                sampled.push(next);
            }
            break;
        }
        sampled.push(next);
        logits = model.decode(audio, &mut cache, &[next], pos)?;
        pos += 1;
    }
    let avg_logprob = sum_logprob / (sampled.len() + 1) as f64;
    Ok(WindowResult { tokens: sampled, sum_logprob, avg_logprob, no_speech_prob, temperature })
}

/// The log-probability of `token` under `softmax(logits)`, in f64 (what decoding sums).
pub fn logprob(logits: &[f32], token: TokenId) -> f64 {
    f64::from(logits[token as usize]) - log_normalizer(logits).unwrap_or(f64::NAN)
}

/// A token drawn from `softmax(logits / temperature)` by the text models' sampler (nothing cut,
/// no penalties); the likeliest token when the row has no distribution.
fn sample(logits: &[f32], temperature: f32, rng: &mut Rng) -> TokenId {
    let params = SamplingParams { temperature, ..SamplingParams::default() };
    match distribution(&params, logits) {
        Ok(dist) => dist.sample(rng),
        Err(_) => argmax(logits),
    }
}
