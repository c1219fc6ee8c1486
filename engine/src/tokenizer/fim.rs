//! Fill-in-the-middle prompts: the text before a gap and the text after it laid out with the
//! model's FIM tokens, for a code model (Qwen2.5-Coder, CodeLlama, StarCoder, DeepSeek-Coder,
//! Codestral) to write what goes between them. The layout is the prefix-suffix-middle order of
//! one file in llama-server's infill: `[BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>`.

use super::{TokenId, Tokenizer};

/// A FIM token the model's vocabulary lacks (`pre`, `suf` or `mid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model has no fill-in-the-middle `{0}` token (tokenizer.ggml.fim_{0}_token_id, or a token such as <|fim_prefix|>)")]
pub struct NoFimToken(pub &'static str);

/// Whether the model's vocabulary has the three tokens a FIM prompt needs.
pub fn can_fill(tokenizer: &Tokenizer) -> bool {
    fim_tokens(tokenizer).is_ok()
}

/// The prompt that asks for the text between `prefix` and `suffix`, both tokenized as plain
/// text (a special token's text in code stays text).
pub fn fim_prompt(tokenizer: &Tokenizer, prefix: &str, suffix: &str) -> Result<Vec<TokenId>, NoFimToken> {
    let (pre, suf, mid) = fim_tokens(tokenizer)?;
    let mut ids = Vec::new();
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos());
    }
    ids.push(pre);
    ids.extend(tokenizer.encode(prefix, false, false));
    ids.push(suf);
    ids.extend(tokenizer.encode(suffix, false, false));
    ids.push(mid);
    Ok(ids)
}

/// The prefix, suffix and middle tokens.
fn fim_tokens(tokenizer: &Tokenizer) -> Result<(TokenId, TokenId, TokenId), NoFimToken> {
    let s = tokenizer.special_tokens();
    Ok((s.fim_pre.ok_or(NoFimToken("pre"))?, s.fim_suf.ok_or(NoFimToken("suf"))?, s.fim_mid.ok_or(NoFimToken("mid"))?))
}
