//! Token generation: one prefill batch of the prompt, then one token per forward step until an
//! end-of-generation token, the token budget, or the caller says stop. Which token a row of
//! logits gives is a parameter (`pick`), so greedy decoding here and samplers later share the
//! same loop.

use crate::kv_cache::{KvCache, SeqId};
use crate::logprobs::argmax;
use crate::model::{BatchEntry, Model, ModelError};
use crate::tokenizer::TokenId;

/// When generation stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    /// The most tokens to produce (0 produces none and runs nothing).
    pub max_tokens: usize,
    /// Stop at an end-of-generation token (`Tokenizer::is_eog`); that token is neither returned
    /// nor passed to the callback. When false, such tokens are generated like any other.
    pub stop_at_eog: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions { max_tokens: 128, stop_at_eog: true }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model chose this end-of-generation token.
    Eog(TokenId),
    /// `max_tokens` tokens were produced.
    MaxTokens,
    /// The callback returned false.
    Callback,
}

/// The tokens produced (without the prompt, without a final end-of-generation token) and why
/// generation stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub tokens: Vec<TokenId>,
    pub stop: StopReason,
}

/// Generates a continuation of `prompt` in sequence `seq` of `kv`, which may already hold
/// earlier tokens of that sequence (the prompt continues them). `pick` chooses the next token
/// from a row of logits; `on_token` receives each token as soon as it is chosen and returns
/// false to stop after it.
///
/// The prompt goes through the model as one batch (logits of its last position only), then each
/// chosen token is fed back alone. The last token produced is not fed back (its logits would not
/// be used), so `kv` ends up holding the prompt and all generated tokens but the last. Running
/// out of context is an error ([`crate::kv_cache::KvError::ContextFull`]), as is an empty
/// prompt; tokens produced before the error have already been given to `on_token`.
pub fn generate(
    model: &Model,
    kv: &mut KvCache,
    seq: SeqId,
    prompt: &[TokenId],
    opts: GenerateOptions,
    mut pick: impl FnMut(&[f32]) -> TokenId,
    mut on_token: impl FnMut(TokenId) -> bool,
) -> Result<Generation, ModelError> {
    if prompt.is_empty() {
        return Err(ModelError::BadBatch("the prompt is empty".into()));
    }
    let mut tokens = Vec::new();
    if opts.max_tokens == 0 {
        return Ok(Generation { tokens, stop: StopReason::MaxTokens });
    }
    let start = kv.seq_len(seq) as u32;
    let logits = model.forward(kv, &BatchEntry::sequence(seq, prompt, start, false))?;
    let mut next = pick(logits.row(0));
    let mut pos = start + prompt.len() as u32;
    loop {
        if opts.stop_at_eog && model.tokenizer().is_eog(next) {
            return Ok(Generation { tokens, stop: StopReason::Eog(next) });
        }
        tokens.push(next);
        if !on_token(next) {
            return Ok(Generation { tokens, stop: StopReason::Callback });
        }
        if tokens.len() >= opts.max_tokens {
            return Ok(Generation { tokens, stop: StopReason::MaxTokens });
        }
        let logits = model.forward(kv, &[BatchEntry { seq, token: next, pos, logits: true }])?;
        pos += 1;
        next = pick(logits.row(0));
    }
}

/// [`generate`] with greedy decoding: always the most likely token (the lower id on ties).
/// Returns the tokens produced.
pub fn generate_greedy(
    model: &Model,
    kv: &mut KvCache,
    seq: SeqId,
    prompt: &[TokenId],
    opts: GenerateOptions,
    on_token: impl FnMut(TokenId) -> bool,
) -> Result<Vec<TokenId>, ModelError> {
    generate(model, kv, seq, prompt, opts, argmax, on_token).map(|g| g.tokens)
}
