//! One sequence's decoding state, independent of how its logits are computed: the sampler, an
//! optional output constraint (a grammar), stop strings, streaming text, log-probabilities, the
//! token budget and the line limits. A single-sequence [`super::Generator`], the lockstep batch
//! driver and a continuous-batching scheduler all feed rows of logits to this same type.

use std::time::Instant;

use super::line_limits::LineLimits;
use super::{FinishReason, GenerateError, GenerateParams, TokenEvent};
use crate::generate::stop::StopStrings;
use crate::logprobs::{token_logprob, TokenLogprob, LOGPROB_FLOOR};
use crate::sampling::{Distribution, Sampler};
use crate::tokenizer::{StreamDecoder, TokenId, Tokenizer};

/// Restricts which tokens may come next (structured output). The mask is applied before
/// sampling, so a draw can only pick an allowed token.
pub trait TokenConstraint: Send {
    /// Sets the logits of every token not allowed next to -inf.
    fn mask_logits(&mut self, logits: &mut [f32]) -> Result<(), String>;
    /// Advances past `token`, which must be allowed.
    fn accept(&mut self, token: TokenId) -> Result<(), String>;
    /// Nothing may follow: the output is complete.
    fn is_finished(&self) -> bool;
    /// How a completed output ends (a forced tool call ends with `ToolCalls`).
    fn finish_reason(&self) -> FinishReason {
        FinishReason::Stop
    }
}

/// The most alternatives a token's log-probability may list: OpenAI's routes allow 20,
/// llama-server's `n_probs` more; bounded, so that a long output's answer stays small (100
/// alternatives are about 7 KB of JSON per token).
pub const MAX_TOP_LOGPROBS: usize = 100;

/// A sequence being decoded: give it rows of logits, it picks tokens and releases text.
pub struct SequenceDecoder {
    sampler: Sampler,
    constraint: Option<Box<dyn TokenConstraint>>,
    stops: StopStrings,
    lines: LineLimits,
    stream: StreamDecoder,
    stop_at_eog: bool,
    max_tokens: usize,
    n_logprobs: Option<usize>,
    /// Whether those come from the distribution drawn from (`post_sampling_logprobs`).
    post_sampling: bool,
    tokens: Vec<TokenId>,
    logprobs: Vec<TokenLogprob>,
    text: String,
    finish: Option<FinishReason>,
    /// The adjusted copy of the current row (bias, penalties, mask).
    scratch: Vec<f32>,
}

impl std::fmt::Debug for SequenceDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceDecoder").field("tokens", &self.tokens).field("finish", &self.finish).finish()
    }
}

/// The prompt's tokens without its image rows (see `model::vision::ImageRows`).
fn text_tokens(tokenizer: &Tokenizer, prompt: &[TokenId]) -> Vec<TokenId> {
    let n_vocab = tokenizer.n_vocab();
    prompt.iter().copied().filter(|&t| (t as usize) < n_vocab).collect()
}

impl SequenceDecoder {
    /// Checks `params` (sampling ranges, logprobs count) and starts an output after `prompt`
    /// (whose image rows, ids past the vocabulary, are no tokens to penalise).
    pub fn new(tokenizer: &Tokenizer, prompt: &[TokenId], params: GenerateParams) -> Result<Self, GenerateError> {
        params.sampling.validate(tokenizer.n_vocab())?;
        if let Some(n) = params.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(GenerateError::TooManyLogprobs(n));
        }
        let finish = (params.max_tokens == 0).then_some(FinishReason::Length);
        Ok(SequenceDecoder {
            sampler: Sampler::new(params.sampling, &text_tokens(tokenizer, prompt)).with_vocabulary(tokenizer),
            constraint: params.constraint,
            stops: StopStrings::new(&params.stop),
            lines: LineLimits::new(params.min_indent, params.line_time_limit),
            stream: StreamDecoder::new(false),
            stop_at_eog: params.stop_at_eog,
            max_tokens: params.max_tokens,
            n_logprobs: params.logprobs,
            post_sampling: params.post_sampling_logprobs,
            tokens: Vec::new(),
            logprobs: Vec::new(),
            text: String::new(),
            finish,
            scratch: Vec::new(),
        })
    }

    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    /// The output tokens so far (without an end-of-generation token that ended it).
    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    /// The text released so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many more tokens the budget allows.
    pub fn remaining(&self) -> usize {
        if self.is_finished() {
            0
        } else {
            self.max_tokens - self.tokens.len()
        }
    }

    /// Whether an output constraint is active (speculative decoding is skipped then).
    pub fn is_constrained(&self) -> bool {
        self.constraint.is_some()
    }

    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    pub fn sample(&mut self, dist: &Distribution) -> TokenId {
        self.sampler.sample(dist)
    }

    /// The distribution the next token is drawn from, given the raw row: logit bias,
    /// penalties, the constraint's mask, then the sampler's cuts and temperature.
    pub fn distribution(&mut self, tokenizer: &Tokenizer, logits: &[f32]) -> Result<Distribution, GenerateError> {
        if self.constraint.is_none() && !self.sampler.adjusts() {
            // nothing to change: the row as it is (no copy of the whole vocabulary)
            return Ok(self.sampler.distribution(logits, tokenizer)?);
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(logits);
        self.sampler.adjust(&mut self.scratch);
        if let Some(c) = &mut self.constraint {
            c.mask_logits(&mut self.scratch).map_err(GenerateError::Constraint)?;
        }
        Ok(self.sampler.distribution(&self.scratch, tokenizer)?)
    }

    /// Picks the next token from `logits` (the row after everything so far) and records it.
    pub fn step(&mut self, tokenizer: &Tokenizer, logits: &[f32]) -> Result<TokenEvent, GenerateError> {
        let dist = self.distribution(tokenizer, logits)?;
        let token = self.sampler.sample(&dist);
        let drawn = self.n_logprobs.filter(|_| self.post_sampling).map(|n| TokenLogprob {
            token,
            logprob: dist.share(token).ln().max(LOGPROB_FLOOR),
            top: dist.best(n).into_iter().map(|(id, p)| (id, p.ln().max(LOGPROB_FLOOR))).collect(),
        });
        self.commit_logged(tokenizer, token, logits, drawn)
    }

    /// Records `token` as the next one (chosen elsewhere from `logits`, e.g. by speculative
    /// verification): end-of-generation, constraint, stop strings and the budget are checked
    /// here. Must not be called once finished.
    pub fn commit(&mut self, tokenizer: &Tokenizer, token: TokenId, logits: &[f32]) -> Result<TokenEvent, GenerateError> {
        self.commit_logged(tokenizer, token, logits, None)
    }

    /// [`commit`](Self::commit), reporting `drawn` as the token's log-probabilities when given
    /// (else the raw softmax's, when asked for).
    fn commit_logged(
        &mut self,
        tokenizer: &Tokenizer,
        token: TokenId,
        logits: &[f32],
        drawn: Option<TokenLogprob>,
    ) -> Result<TokenEvent, GenerateError> {
        debug_assert!(!self.is_finished(), "commit after the end");
        let now = Instant::now();
        self.lines.token(now);
        if self.stop_at_eog && tokenizer.is_eog(token) {
            let mut text = self.flush();
            let completed = self.constraint.as_ref().map(|c| c.finish_reason());
            self.finish = Some(completed.unwrap_or(FinishReason::Stop));
            self.limit_lines(&mut text);
            self.text.push_str(&text);
            return Ok(TokenEvent { token: None, text, logprob: None, finish: self.finish });
        }
        if let Some(c) = &mut self.constraint {
            c.accept(token).map_err(GenerateError::Constraint)?;
        }
        self.sampler.accept(token);
        self.tokens.push(token);
        let logprob = drawn.or_else(|| self.n_logprobs.map(|n| token_logprob(logits, token, n)));
        if let Some(lp) = &logprob {
            self.logprobs.push(lp.clone());
        }
        let piece = self.stream.push(tokenizer, token);
        let check = self.stops.push(&piece);
        let mut text = check.release;
        if check.stopped {
            self.finish = Some(FinishReason::Stop);
        } else if let Some(reason) = self.constraint.as_ref().filter(|c| c.is_finished()).map(|c| c.finish_reason()) {
            text.push_str(&self.flush());
            self.finish = Some(reason);
        } else if self.tokens.len() >= self.max_tokens {
            text.push_str(&self.flush());
            self.finish = Some(FinishReason::Length);
        }
        if !self.limit_lines(&mut text) && self.finish.is_none() && self.lines.time_is_up(&text, now) {
            // what the stop strings held back is released, and read for its lines too
            let mut tail = self.flush();
            self.limit_lines(&mut tail);
            text.push_str(&tail);
            self.finish = Some(FinishReason::Length);
        }
        self.text.push_str(&text);
        Ok(TokenEvent { token: Some(token), text, logprob, finish: self.finish })
    }

    /// Cuts `text`, the next text to release, where a line indented too little starts, and
    /// ends the output there (true), dropping what was held back.
    fn limit_lines(&mut self, text: &mut String) -> bool {
        let Some(at) = self.lines.cut(text) else { return false };
        text.truncate(at);
        self.finish = Some(FinishReason::Length);
        true
    }

    /// Ends the output from outside (the context is full, the caller stops): what was held
    /// back is released.
    pub fn end(&mut self, reason: FinishReason) -> TokenEvent {
        let mut text = self.flush();
        self.finish = Some(reason);
        self.limit_lines(&mut text);
        self.text.push_str(&text);
        TokenEvent { token: None, text, logprob: None, finish: self.finish }
    }

    /// Text held back by the stream decoder (half a character) and the stop strings.
    fn flush(&mut self) -> String {
        let tail = self.stream.finish();
        let check = self.stops.push(&tail);
        if check.stopped {
            check.release
        } else {
            check.release + &self.stops.flush()
        }
    }

    /// The finished output with its counts (`usage.completion_tokens` is set here).
    pub fn into_completion(self, usage: super::Usage) -> super::Completion {
        let usage = super::Usage { completion_tokens: self.tokens.len(), ..usage };
        let (text, tokens, logprobs, finish) = self.into_parts();
        super::Completion { text, tokens, finish, usage, logprobs, timings: None }
    }

    /// The finished output (finish reason `Length` if it never finished).
    pub(crate) fn into_parts(self) -> (String, Vec<TokenId>, Vec<TokenLogprob>, FinishReason) {
        (self.text, self.tokens, self.logprobs, self.finish.unwrap_or(FinishReason::Length))
    }
}
