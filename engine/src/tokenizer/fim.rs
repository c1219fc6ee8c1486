//! Fill-in-the-middle prompts: the text before a gap and the text after it laid out with the
//! model's FIM tokens, for a code model (Qwen2.5-Coder, CodeLlama, StarCoder, DeepSeek-Coder,
//! Codestral) to write what goes between them, in the prefix-suffix-middle order (or
//! suffix-prefix-middle, which some models were trained on: llama-server's `--spm-infill`): one
//! file (`[BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>`, [`fim_prompt`]), or llama-server's
//! `/infill` prompt with other files before it and its budget of tokens ([`infill_prompt`]).

use super::{TokenId, Tokenizer};

/// A FIM token the model's vocabulary lacks (`pre`, `suf` or `mid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model has no fill-in-the-middle `{0}` token (tokenizer.ggml.fim_{0}_token_id, or a token such as <|fim_prefix|>)")]
pub struct NoFimToken(pub &'static str);

/// Whether the model's vocabulary has the three tokens a FIM prompt needs.
pub fn can_fill(tokenizer: &Tokenizer) -> bool {
    fim_tokens(tokenizer).is_ok()
}

/// Which of the texts around the gap comes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FimOrder {
    /// `<fim_pre> prefix <fim_suf> suffix <fim_mid>`.
    #[default]
    PrefixSuffixMiddle,
    /// `<fim_suf> suffix <fim_pre> prefix <fim_mid>`.
    SuffixPrefixMiddle,
}

impl FimOrder {
    /// The order a `--spm-infill` flag asks for: suffix first when `spm` is set.
    pub fn suffix_first(spm: bool) -> FimOrder {
        if spm {
            FimOrder::SuffixPrefixMiddle
        } else {
            FimOrder::PrefixSuffixMiddle
        }
    }
}

/// The prompt that asks for the text between `prefix` and `suffix`, both tokenized as plain
/// text (a special token's text in code stays text).
pub fn fim_prompt(tokenizer: &Tokenizer, prefix: &str, suffix: &str, order: FimOrder) -> Result<Vec<TokenId>, NoFimToken> {
    let tokens = fim_tokens(tokenizer)?;
    let (prefix, suffix) = (tokenizer.encode(prefix, false, false), tokenizer.encode(suffix, false, false));
    Ok(layout(tokenizer, tokens, Vec::new(), &prefix, &suffix, order))
}

/// `context [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>`, or with the suffix first.
fn layout(
    tokenizer: &Tokenizer,
    (pre, suf, mid): (TokenId, TokenId, TokenId),
    context: Vec<TokenId>,
    prefix: &[TokenId],
    suffix: &[TokenId],
    order: FimOrder,
) -> Vec<TokenId> {
    let mut ids = context;
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos());
    }
    let (prefix, suffix) = ([&[pre], prefix].concat(), [&[suf], suffix].concat());
    match order {
        FimOrder::PrefixSuffixMiddle => ids.extend(prefix.into_iter().chain(suffix)),
        FimOrder::SuffixPrefixMiddle => ids.extend(suffix.into_iter().chain(prefix)),
    }
    ids.push(mid);
    ids
}

/// The prefix, suffix and middle tokens.
fn fim_tokens(tokenizer: &Tokenizer) -> Result<(TokenId, TokenId, TokenId), NoFimToken> {
    let s = tokenizer.special_tokens();
    Ok((s.fim_pre.ok_or(NoFimToken("pre"))?, s.fim_suf.ok_or(NoFimToken("suf"))?, s.fim_mid.ok_or(NoFimToken("mid"))?))
}

/// What llama-server's `/infill` lays out around a gap.
pub struct Infill<'a> {
    pub prefix: &'a str,
    pub suffix: &'a str,
    /// The start of the middle, written after the prefix (llama-server's `prompt`).
    pub middle_start: &'a str,
    /// Other files for context, `(filename, text)`, before the prefix.
    pub extra: &'a [(String, String)],
}

/// The tokens an infill prompt may spend: llama-server's batch size (the prefix keeps its last
/// three quarters of it, the suffix and the middle's start its first quarter), the sequence's
/// context and the tokens to generate (the other files get what is left of the context after a
/// batch and twice the generation; `None`: no bound, counted as llama-server counts -1).
#[derive(Clone, Copy, Debug)]
pub struct InfillBudget {
    pub n_batch: usize,
    pub n_ctx: usize,
    pub n_predict: Option<usize>,
}

/// llama-server's infill prompt: the repository-level layout of Qwen2.5-Coder's paper where the
/// vocabulary has its tokens (`<fim_rep>myproject\n`, each other file as `<fim_sep>filename\n`
/// and its text, then `<fim_sep>filename\n` for this one), a snippet separator between the
/// files otherwise; then `[BOS] <fim_pre> prefix middle_start <fim_suf> suffix <fim_mid>` (or
/// with the suffix first), the prefix cut to its end, the suffix and the other files to what
/// the budget leaves them (the files' text cut from its start). Every text is read as plain
/// text.
pub fn infill_prompt(tokenizer: &Tokenizer, infill: &Infill, budget: InfillBudget, order: FimOrder) -> Result<Vec<TokenId>, NoFimToken> {
    let tokens = fim_tokens(tokenizer)?;
    let text = |t: &str| tokenizer.encode(t, false, false);
    let special = tokenizer.special_tokens();
    let mut extra = Vec::new();
    if let Some(rep) = special.fim_rep {
        extra.push(rep);
        extra.extend(text("myproject\n"));
    }
    for (filename, body) in infill.extra {
        match special.fim_sep {
            Some(sep) => {
                extra.push(sep);
                extra.extend(text(&format!("{filename}\n")));
            }
            None => extra.extend(text("\n\n--- snippet ---\n\n")),
        }
        extra.extend(text(body));
    }
    if let Some(sep) = special.fim_sep {
        extra.push(sep);
        extra.extend(text("filename\n"));
    }
    let (prefix, suffix, middle_start) = (text(infill.prefix), text(infill.suffix), text(infill.middle_start));
    let quarter = budget.n_batch / 4;
    let prefix_take = prefix.len().min(3 * quarter);
    let suffix_take = suffix.len().min(quarter.saturating_sub(2 + middle_start.len()));
    let generated = budget.n_predict.map_or(-2, |n| 2 * n as i64);
    let extra_take = extra.len().min((budget.n_ctx as i64 - budget.n_batch as i64 - generated).max(0) as usize);

    // the middle's start goes on from the prefix
    let head = [&prefix[prefix.len() - prefix_take..], &middle_start].concat();
    Ok(layout(tokenizer, tokens, extra[extra.len() - extra_take..].to_vec(), &head, &suffix[..suffix_take], order))
}
