//! What Whisper may say next: the logit filters of its decoding, applied before a token is
//! chosen, as openai-whisper and faster-whisper apply them:
//! - never the non-speech symbols of the model's suppress list, nor the task, start and
//!   no-speech tokens;
//! - not a blank or the end of text as the first token;
//! - timestamps (when on): the first token is a timestamp of at most 1 s; timestamps come in
//!   pairs (a segment's end, the next one's start) except right before the end of text; they
//!   never go back; and when the timestamps together are likelier than any single text token,
//!   a timestamp it is.

use crate::logprobs::log_normalizer;
use crate::model::whisper::WhisperConfig;
use crate::tokenizer::TokenId;

/// Seconds per timestamp step.
pub const TIMESTAMP_STEP: f64 = 0.02;
/// The latest first timestamp, in seconds.
const MAX_INITIAL_TIMESTAMP: f64 = 1.0;

/// The filters of one model.
#[derive(Clone, Debug)]
pub struct LogitRules {
    suppress: Vec<TokenId>,
    suppress_begin: Vec<TokenId>,
    no_timestamps: TokenId,
    eot: TokenId,
    /// `<|0.00|>`: every id from here on is a timestamp.
    timestamp_begin: usize,
}

impl LogitRules {
    pub fn new(c: &WhisperConfig, tokenizer: &crate::tokenizer::Tokenizer) -> LogitRules {
        let t = &c.tokens;
        let mut suppress = c.suppress_tokens.clone();
        suppress.extend([t.transcribe, t.translate, t.sot, t.sot_prev, t.no_speech]);
        suppress.extend(tokenizer.token_id("<|startoflm|>"));
        suppress.sort_unstable();
        suppress.dedup();
        LogitRules {
            suppress,
            suppress_begin: c.suppress_begin.clone(),
            no_timestamps: t.no_timestamps,
            eot: t.eot,
            timestamp_begin: t.timestamp_begin as usize,
        }
    }

    /// Applies the filters to `logits` given the tokens chosen so far in this window
    /// (`sampled`, after the prompt).
    pub fn apply(&self, logits: &mut [f32], sampled: &[TokenId], timestamps: bool) {
        let ban = |logits: &mut [f32], ids: &[TokenId]| {
            for &id in ids {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        };
        if sampled.is_empty() {
            ban(logits, &self.suppress_begin);
        }
        ban(logits, &self.suppress);
        if !timestamps {
            // no timestamps: only text and the end of text
            let tb = self.timestamp_begin.min(logits.len());
            logits[tb..].fill(f32::NEG_INFINITY);
            return;
        }
        ban(logits, &[self.no_timestamps]);
        self.timestamp_rules(logits, sampled);
    }

    fn timestamp_rules(&self, logits: &mut [f32], sampled: &[TokenId]) {
        let tb = self.timestamp_begin.min(logits.len());
        let is_ts = |t: TokenId| t as usize >= tb;
        let last_was_ts = sampled.last().is_some_and(|&t| is_ts(t));
        let penultimate_was_ts = sampled.len() < 2 || is_ts(sampled[sampled.len() - 2]);
        if last_was_ts {
            if penultimate_was_ts {
                // a pair just closed: text (or the end) comes next
                logits[tb..].fill(f32::NEG_INFINITY);
            } else {
                // a segment's end: the next one's start, or the end of text
                logits[..(self.eot as usize).min(tb)].fill(f32::NEG_INFINITY);
            }
        }
        // timestamps never go back (and a closed pair's next start is after its end)
        if let Some(&last_ts) = sampled.iter().rev().find(|&&t| is_ts(t)) {
            let floor = if last_was_ts && !penultimate_was_ts { last_ts as usize } else { last_ts as usize + 1 };
            let end = floor.min(logits.len());
            logits[tb..end].fill(f32::NEG_INFINITY);
        }
        if sampled.is_empty() {
            // the window starts with a timestamp, at most MAX_INITIAL_TIMESTAMP in
            logits[..tb].fill(f32::NEG_INFINITY);
            let last_allowed = tb + (MAX_INITIAL_TIMESTAMP / TIMESTAMP_STEP).round() as usize;
            if last_allowed + 1 < logits.len() {
                logits[last_allowed + 1..].fill(f32::NEG_INFINITY);
            }
        }
        // all timestamps together likelier than the likeliest text token: a timestamp
        let log_sum_exp = |xs: &[f32]| log_normalizer(xs).unwrap_or(f64::NEG_INFINITY);
        let total = log_sum_exp(logits);
        let ts = log_sum_exp(&logits[tb..]) - total;
        let best_text = logits[..tb].iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64 - total;
        if ts > best_text {
            logits[..tb].fill(f32::NEG_INFINITY);
        }
    }
}
