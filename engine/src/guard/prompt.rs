//! A rendered guard prompt, whichever family wrote it: the risk it is read for, how it was
//! produced, the text ending at the answer position, and how its answer is read (`Reader`).

use super::risks::{GuardFormat, Risk};

/// How a prompt was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptPath {
    /// The GGUF's own Granite Guardian chat template.
    GuardianTemplate,
    /// The built-in renderer of the format (a Guardian model without a usable template, or a
    /// format other than its template's).
    Builtin,
    /// A generic chat model: a question in its own chat template (`generic`: the built-in 3.2
    /// prompt as one user message, or a direct, few-shot or question-first yes/no question).
    Generic,
    /// The model's own template of another family (`family`: Llama Guard, ShieldGemma,
    /// Qwen3Guard, gpt-oss-safeguard).
    FamilyTemplate,
}

/// How a prompt's answer is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// By the rules of the prompt's Granite Guardian format (guard.md §4): Granite Guardian; the
    /// generic path and ShieldGemma by 3.0's, P(Yes) at the first position.
    Guardian,
    /// Llama Guard's `safe` / `unsafe` + codes, for these risks at once.
    LlamaGuard(Vec<Risk>),
    /// Qwen3Guard's `Safety:` label and categories, for these risks at once.
    Qwen3Guard(Vec<Risk>),
    /// gpt-oss-safeguard's 1 / 0 on the final channel, after its analysis.
    Safeguard,
}

/// One rendered guard prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardPrompt {
    pub risk: Risk,
    /// The format whose decoding rules read the answer (guard.md §4): the request's format for a
    /// Guardian model; always 3.0 (Yes/No log-probabilities) on the generic path.
    pub format: GuardFormat,
    /// 3.3 thinking mode (false on the generic path).
    pub think: bool,
    pub path: PromptPath,
    /// The full prompt, ending at the answer position (generation prompt included). Tokenize it
    /// with special tokens parsed and without an added BOS, as HF and llama.cpp do.
    pub text: String,
    pub reader: Reader,
}
