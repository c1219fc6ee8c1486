//! Whisper's hyperparameters from a GGUF written by `tools/whisper-to-gguf.py`
//! (`whisper.*` keys), and its special tokens from the vocabulary.

use crate::backend::AttentionShape;
use crate::gguf::{GgufFile, Value};
use crate::model::error::ModelError;
use crate::tokenizer::{TokenId, Tokenizer};

/// One transformer stack's size (the encoder's or the decoder's).
#[derive(Clone, Debug, PartialEq)]
pub struct StackConfig {
    /// Positions it holds: 1500 audio frames (30 s after the stride-2 convolution), 448 tokens.
    pub n_ctx: usize,
    pub n_state: usize,
    pub n_head: usize,
    pub n_layer: usize,
}

impl StackConfig {
    pub fn attention_shape(&self) -> AttentionShape {
        AttentionShape::multi_head(self.n_state, self.n_head)
    }
}

/// The ids of Whisper's special tokens in this vocabulary (English-only models number them one
/// lower than multilingual ones).
#[derive(Clone, Debug, PartialEq)]
pub struct SpecialTokens {
    pub eot: TokenId,
    pub sot: TokenId,
    pub transcribe: TokenId,
    pub translate: TokenId,
    pub sot_prev: TokenId,
    pub no_timestamps: TokenId,
    pub no_speech: TokenId,
    /// `<|0.00|>`: timestamp `i` (in 20 ms steps) is `timestamp_begin + i`.
    pub timestamp_begin: TokenId,
    /// Language tokens in order (`<|en|>`, `<|zh|>`, ...), with their codes.
    pub languages: Vec<(TokenId, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WhisperConfig {
    pub n_mels: usize,
    pub encoder: StackConfig,
    pub decoder: StackConfig,
    pub n_vocab: usize,
    pub eps: f32,
    /// Tokens never sampled (punctuation-like symbols Whisper's authors suppress).
    pub suppress_tokens: Vec<TokenId>,
    /// Tokens not sampled first (a blank, end of text).
    pub suppress_begin: Vec<TokenId>,
    pub tokens: SpecialTokens,
    /// Whether the model knows more than English (it then takes a language and task token).
    pub multilingual: bool,
}

fn u32_key(file: &GgufFile, key: &str) -> Result<usize, ModelError> {
    file.get_u64(key).map(|v| v as usize).ok_or_else(|| ModelError::MissingKey(key.into()))
}

fn ids(file: &GgufFile, key: &str) -> Vec<TokenId> {
    match file.get(key) {
        Some(Value::Array(a)) => a.values().filter_map(|v| v.as_u64()).map(|v| v as TokenId).collect(),
        _ => Vec::new(),
    }
}

impl WhisperConfig {
    pub fn from_gguf(file: &GgufFile, tokenizer: &Tokenizer) -> Result<WhisperConfig, ModelError> {
        let stack = |side: &str| -> Result<StackConfig, ModelError> {
            let c = StackConfig {
                n_ctx: u32_key(file, &format!("whisper.{side}.context_length"))?,
                n_state: u32_key(file, &format!("whisper.{side}.embedding_length"))?,
                n_head: u32_key(file, &format!("whisper.{side}.attention.head_count"))?,
                n_layer: u32_key(file, &format!("whisper.{side}.block_count"))?,
            };
            if c.n_head == 0 || !c.n_state.is_multiple_of(c.n_head) || c.n_ctx == 0 || c.n_layer == 0 {
                return Err(ModelError::BadKey { key: format!("whisper.{side}"), reason: format!("inconsistent sizes {c:?}") });
            }
            Ok(c)
        };
        let special = |text: &str| {
            tokenizer
                .token_id(text)
                .ok_or_else(|| ModelError::BadKey { key: "tokenizer.ggml.tokens".into(), reason: format!("no {text} token") })
        };
        let languages: Vec<(TokenId, String)> = ids(file, "whisper.language_token_ids")
            .into_iter()
            .filter_map(|id| {
                let text = String::from_utf8_lossy(tokenizer.token_text(id)?).into_owned();
                let code = text.strip_prefix("<|")?.strip_suffix("|>")?.to_string();
                Some((id, code))
            })
            .collect();
        let tokens = SpecialTokens {
            eot: special("<|endoftext|>")?,
            sot: special("<|startoftranscript|>")?,
            transcribe: special("<|transcribe|>")?,
            translate: special("<|translate|>")?,
            sot_prev: special("<|startofprev|>")?,
            no_timestamps: special("<|notimestamps|>")?,
            no_speech: special("<|nospeech|>").or_else(|_| special("<|nocaptions|>"))?,
            timestamp_begin: special("<|0.00|>")?,
            languages,
        };
        let n_vocab = tokenizer.n_vocab();
        // an English-only vocabulary ends its special tokens one earlier: 51864 tokens, not 51865
        let multilingual = n_vocab >= 51865;
        Ok(WhisperConfig {
            n_mels: u32_key(file, "whisper.audio.n_mels")?,
            encoder: stack("encoder")?,
            decoder: stack("decoder")?,
            n_vocab,
            eps: file.get_f64("whisper.attention.layer_norm_epsilon").unwrap_or(1e-5) as f32,
            suppress_tokens: ids(file, "whisper.suppress_tokens"),
            suppress_begin: ids(file, "whisper.suppress_tokens_begin"),
            tokens,
            multilingual,
        })
    }
}
