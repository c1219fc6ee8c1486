//! Why a GGUF's vocabulary could not be turned into a tokenizer.

use super::vocab::TokenId;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TokenizerError {
    #[error("the file has no tokenizer: metadata key {0} is missing")]
    MissingKey(&'static str),
    #[error("metadata key {key} should be {expected}")]
    WrongType { key: &'static str, expected: &'static str },
    #[error("unknown tokenizer model {0:?} (supported: \"llama\" (SPM), \"gpt2\" (BPE), \"bert\" (WPM), \"test\" (ids only))")]
    UnknownModel(String),
    #[error("unknown pre-tokenizer {0:?} in tokenizer.ggml.pre")]
    UnknownPreTokenizer(String),
    #[error("metadata key {key} has {len} entries but the vocabulary has {n_tokens} tokens")]
    ShortArray { key: &'static str, len: usize, n_tokens: usize },
    #[error("the vocabulary is empty")]
    EmptyVocab,
    #[error("the vocabulary has {0} tokens, more than a 32-bit token id can address")]
    TooManyTokens(usize),
    #[error("token text {text:?} appears twice in the vocabulary (ids {first} and {second})")]
    DuplicateToken { text: String, first: TokenId, second: TokenId },
    #[error("the {0} tokenizer needs a {1} token and the vocabulary has none")]
    MissingSpecial(&'static str, &'static str),
}
