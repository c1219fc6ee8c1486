//! One 30-second window decoded by Whisper: the prompt (earlier text after `<|startofprev|>`,
//! then `<|startoftranscript|>`, the language and task for multilingual models, and
//! `<|notimestamps|>` when timestamps are off), then tokens chosen one at a time under the
//! logit rules until the end of text or half the decoder's context.

use super::logit_rules::{log_softmax, LogitRules};
use crate::model::whisper::{EncodedWindow, WhisperModel};
use crate::model::ModelError;
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

/// A source of uniform numbers in `[0, 1)` for sampling at a temperature above 0.
pub trait Uniform {
    fn next_f64(&mut self) -> f64;
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
    rng: &mut dyn Uniform,
) -> Result<WindowResult, ModelError> {
    let c = model.config();
    let eot = c.tokens.eot;
    let (tokens, sot_index) = prompt_tokens(model, prompt);
    let mut cache = model.new_cache();
    // through <|startoftranscript|> first: its logits give the no-speech probability
    let mut logits = model.decode(audio, &mut cache, &tokens[..=sot_index], 0)?;
    let no_speech_prob = log_softmax(&logits)[c.tokens.no_speech as usize].exp();
    if sot_index + 1 < tokens.len() {
        logits = model.decode(audio, &mut cache, &tokens[sot_index + 1..], sot_index + 1)?;
    }
    let sample_len = c.decoder.n_ctx / 2;
    let mut sampled: Vec<TokenId> = Vec::new();
    let mut sum_logprob = 0f64;
    let mut pos = tokens.len();
    loop {
        rules.apply(&mut logits, &sampled, prompt.timestamps);
        let logprobs = log_softmax(&logits);
        let next = if temperature > 0.0 { sample(&logits, temperature, rng) } else { argmax(&logits) };
        sum_logprob += logprobs[next as usize];
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

/// The first index of the largest logit.
fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as TokenId
}

/// A token drawn from `softmax(logits / temperature)`.
fn sample(logits: &[f32], temperature: f32, rng: &mut dyn Uniform) -> TokenId {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logits.iter().map(|&l| (((l - m) / temperature) as f64).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.next_f64() * total;
    for (i, w) in weights.iter().enumerate() {
        if u < *w {
            return i as TokenId;
        }
        u -= w;
    }
    argmax(logits)
}
