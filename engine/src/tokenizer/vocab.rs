//! The vocabulary as a GGUF stores it (`tokenizer.ggml.*`): token texts, scores and types, the
//! special token ids, the end-of-generation set and the flags that steer tokenization, with the
//! defaults and fix-ups llama.cpp applies when it loads the same file.

use rustc_hash::FxHashMap;

use super::error::TokenizerError;
use super::pretokenize::PreTokenizerConfig;
use crate::gguf::{GgufFile, Value};

/// A token id, as stored in a GGUF vocabulary.
pub type TokenId = u32;

/// Which tokenization algorithm the vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// SentencePiece-style score merges with byte fallback (`"llama"`; Llama 2, Gemma).
    Spm,
    /// Byte-level BPE with ranked merges and a pre-tokenizer (`"gpt2"`).
    Bpe,
    /// BERT WordPiece (`"bert"`).
    Wpm,
    /// llama.cpp's id-only vocabulary of its generated test models (`"test"`): 5-byte chunks
    /// hashed to ids, ids shown in hex.
    Test,
}

impl TokenizerKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Spm => "SPM",
            Self::Bpe => "BPE",
            Self::Wpm => "WPM",
            Self::Test => "TEST",
        }
    }
}

/// Token attributes, llama.cpp's `LLAMA_TOKEN_ATTR_*` bits, derived from the GGUF token types
/// (`tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
/// 6 byte) and adjusted at load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TokenAttr(pub u16);

impl TokenAttr {
    pub const UNDEFINED: u16 = 0;
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    /// Strip whitespace to the left of this special token when it is matched in text.
    pub const LSTRIP: u16 = 1 << 7;
    /// Strip whitespace to the right of this special token when it is matched in text.
    pub const RSTRIP: u16 = 1 << 8;

    fn from_token_type(t: i32) -> TokenAttr {
        TokenAttr(match t {
            1 => Self::NORMAL,
            2 => Self::UNKNOWN,
            3 => Self::CONTROL,
            4 => Self::USER_DEFINED,
            5 => Self::UNUSED,
            6 => Self::BYTE,
            _ => Self::UNDEFINED,
        })
    }

    pub fn has(self, bits: u16) -> bool {
        self.0 & bits != 0
    }
    fn set(&mut self, bits: u16, on: bool) {
        if on {
            self.0 |= bits
        } else {
            self.0 &= !bits
        }
    }
}

/// The ids of the tokens with a role; `None` where the vocabulary has no such token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub eot: Option<TokenId>,
    pub eom: Option<TokenId>,
    pub unk: Option<TokenId>,
    pub sep: Option<TokenId>,
    pub pad: Option<TokenId>,
    pub mask: Option<TokenId>,
    pub fim_pre: Option<TokenId>,
    pub fim_suf: Option<TokenId>,
    pub fim_mid: Option<TokenId>,
    pub fim_pad: Option<TokenId>,
    pub fim_rep: Option<TokenId>,
    pub fim_sep: Option<TokenId>,
}

/// Everything read from the GGUF, shared by the three algorithms.
pub(crate) struct Vocab {
    pub kind: TokenizerKind,
    pub model: String,
    pub pre: String,
    pub texts: Vec<Box<[u8]>>,
    pub scores: Vec<f32>,
    pub attrs: Vec<TokenAttr>,
    pub text_to_id: FxHashMap<Box<[u8]>, TokenId>,
    pub special: SpecialTokens,
    /// End-of-generation ids, sorted.
    pub eog: Vec<TokenId>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
    pub add_space_prefix: bool,
    /// Detokenization tidies " ," and " 's" the way Hugging Face's `clean_up_tokenization_spaces`
    /// does (llama.cpp turns it on for most BPE vocabularies and WordPiece).
    pub clean_spaces: bool,
    pub lowercase: bool,
    pub strip_accents: bool,
    pub max_token_len: usize,
    /// Control, user-defined and unknown tokens, longest text first: the order in which they are
    /// cut out of the input before the model's own splitting.
    pub special_by_length: Vec<TokenId>,
    /// Merges as read (`tokenizer.ggml.merges`), BPE only.
    pub merges: Vec<Vec<u8>>,
    pub pre_config: Option<PreTokenizerConfig>,
}

/// Where a role's id lives in `SpecialTokens`.
type RoleSlot = fn(&mut SpecialTokens) -> &mut Option<TokenId>;

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";

impl Vocab {
    pub fn from_gguf(file: &GgufFile) -> Result<Vocab, TokenizerError> {
        let model = match file.get(KEY_MODEL) {
            None => return Err(TokenizerError::MissingKey(KEY_MODEL)),
            Some(v) => v.as_str().ok_or(TokenizerError::WrongType { key: KEY_MODEL, expected: "string" })?.to_string(),
        };
        let pre = file.get_str(KEY_PRE).unwrap_or("").to_string();
        let kind = match model.as_str() {
            "llama" => TokenizerKind::Spm,
            "gpt2" => TokenizerKind::Bpe,
            "bert" => TokenizerKind::Wpm,
            "test" => TokenizerKind::Test,
            _ => return Err(TokenizerError::UnknownModel(model)),
        };

        let texts = read_texts(file)?;
        let n = texts.len();
        let scores = read_scores(file, n)?;
        let mut attrs = read_attrs(file, n)?;

        let mut text_to_id: FxHashMap<Box<[u8]>, TokenId> = FxHashMap::default();
        text_to_id.reserve(n);
        for (i, t) in texts.iter().enumerate() {
            if let Some(first) = text_to_id.insert(t.clone(), i as TokenId) {
                return Err(TokenizerError::DuplicateToken { text: String::from_utf8_lossy(t).into_owned(), first, second: i as TokenId });
            }
        }
        let max_token_len = texts.iter().map(|t| t.len()).max().unwrap_or(0);

        // Defaults per algorithm, as llama.cpp sets them before reading the overrides.
        let mut special = SpecialTokens::default();
        let mut add_bos;
        let mut add_eos = false;
        let mut add_sep = false;
        let mut add_space_prefix;
        let clean_spaces;
        let mut merges = Vec::new();
        let mut pre_config = None;
        match kind {
            TokenizerKind::Spm => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                add_bos = true;
                add_space_prefix = true;
                clean_spaces = false;
            }
            TokenizerKind::Wpm => {
                special.bos = Some(101);
                special.unk = Some(100);
                special.sep = Some(102);
                special.pad = Some(0);
                special.mask = Some(103);
                add_bos = true;
                add_sep = true;
                add_space_prefix = false;
                clean_spaces = true;
            }
            TokenizerKind::Bpe => {
                merges = read_merges(file)?;
                special.bos = Some(11);
                special.eos = Some(11);
                let name = if pre.is_empty() { "default" } else { pre.as_str() };
                let config = PreTokenizerConfig::for_name(name).ok_or_else(|| TokenizerError::UnknownPreTokenizer(pre.clone()))?;
                add_bos = config.add_bos;
                add_space_prefix = false;
                clean_spaces = config.clean_spaces;
                if config.no_bos {
                    special.bos = None;
                }
                pre_config = Some(config);
            }
            // no special tokens, nothing added around a sequence
            TokenizerKind::Test => {
                add_bos = false;
                add_space_prefix = false;
                clean_spaces = false;
            }
        }
        if let Some(v) = file.get("tokenizer.ggml.add_space_prefix").and_then(Value::as_bool) {
            add_space_prefix = v;
        }

        // Ids stored in the file; out-of-range ones are ignored, as llama.cpp does.
        let id_keys: [(&str, RoleSlot); 17] = [
            ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
            ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
            ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
            ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
            ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
            ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
            ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
            ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
            ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
            ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
            ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
            ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
            ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
        ];
        for (key, slot) in id_keys {
            let slot = slot(&mut special);
            if slot.is_some_and(|id| id as usize >= n) {
                *slot = None;
            }
            if let Some(id) = file.get_u64(key) {
                if (id as usize) < n {
                    *slot = Some(id as TokenId);
                } else {
                    tracing::warn!(key, id, n_vocab = n, "special token id out of range; ignored");
                }
            }
        }
        if let Some(v) = file.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool) {
            add_bos = v;
        }
        if let Some(v) = file.get("tokenizer.ggml.add_eos_token").and_then(Value::as_bool) {
            add_eos = v;
        }
        if let Some(v) = file.get("tokenizer.ggml.add_sep_token").and_then(Value::as_bool) {
            add_sep = v;
        }
        let lowercase = file.get("tokenizer.ggml.normalizer.lowercase").and_then(Value::as_bool).unwrap_or(true);
        let strip_accents = file.get("tokenizer.ggml.normalizer.strip_accents").and_then(Value::as_bool).unwrap_or(lowercase);

        detect_role_tokens(&texts, &mut attrs, &mut special);
        mark_unused(&texts, &mut attrs);
        let eog = end_of_generation_ids(&texts, &mut attrs, &special);

        let mut special_by_length: Vec<TokenId> = (0..n as TokenId)
            .filter(|&id| attrs[id as usize].has(TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN))
            .collect();
        // Longest first; equal lengths keep id order so the result does not depend on the sort.
        special_by_length.sort_by(|&a, &b| texts[b as usize].len().cmp(&texts[a as usize].len()));

        let general_name = file.get_str("general.name").unwrap_or("").to_ascii_lowercase();
        let arch = file.architecture().unwrap_or("");
        apply_strip_attrs(&pre, &general_name, arch, &text_to_id, &special_by_length, &mut attrs);

        Ok(Vocab {
            kind,
            model,
            pre,
            texts,
            scores,
            attrs,
            text_to_id,
            special,
            eog,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            clean_spaces,
            lowercase,
            strip_accents,
            max_token_len,
            special_by_length,
            merges,
            pre_config,
        })
    }

    pub fn n_tokens(&self) -> usize {
        self.texts.len()
    }

    pub fn id_of(&self, text: &[u8]) -> Option<TokenId> {
        self.text_to_id.get(text).copied()
    }
}

fn read_texts(file: &GgufFile) -> Result<Vec<Box<[u8]>>, TokenizerError> {
    let value = file.get(KEY_TOKENS).ok_or(TokenizerError::MissingKey(KEY_TOKENS))?;
    let strings =
        value.as_array().and_then(|a| a.as_strings()).ok_or(TokenizerError::WrongType { key: KEY_TOKENS, expected: "array of strings" })?;
    if strings.is_empty() {
        return Err(TokenizerError::EmptyVocab);
    }
    if u32::try_from(strings.len()).is_err() {
        return Err(TokenizerError::TooManyTokens(strings.len()));
    }
    Ok(strings
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // llama.cpp gives empty entries a placeholder text so every token stays addressable.
            if s.is_empty() {
                format!("[EMPTY_{i}]").into_bytes().into_boxed_slice()
            } else {
                s.clone().into_boxed_slice()
            }
        })
        .collect())
}

fn read_scores(file: &GgufFile, n: usize) -> Result<Vec<f32>, TokenizerError> {
    let Some(value) = file.get(KEY_SCORES) else {
        return Ok(vec![0.0; n]);
    };
    let wrong = TokenizerError::WrongType { key: KEY_SCORES, expected: "array of f32 or i32" };
    let array = value.as_array().ok_or(wrong.clone())?;
    let scores: Vec<f32> = if let Some(f) = array.as_f32s() {
        f.to_vec()
    } else if let Some(i) = array.as_i32s() {
        i.iter().map(|&v| v as f32).collect()
    } else {
        return Err(wrong);
    };
    if scores.len() < n {
        return Err(TokenizerError::ShortArray { key: KEY_SCORES, len: scores.len(), n_tokens: n });
    }
    Ok(scores)
}

fn read_attrs(file: &GgufFile, n: usize) -> Result<Vec<TokenAttr>, TokenizerError> {
    let Some(value) = file.get(KEY_TYPES) else {
        return Ok(vec![TokenAttr(TokenAttr::NORMAL); n]);
    };
    let types = value.as_array().and_then(|a| a.as_i32s()).ok_or(TokenizerError::WrongType { key: KEY_TYPES, expected: "array of i32" })?;
    if types.len() < n {
        return Err(TokenizerError::ShortArray { key: KEY_TYPES, len: types.len(), n_tokens: n });
    }
    Ok(types[..n].iter().map(|&t| TokenAttr::from_token_type(t)).collect())
}

fn read_merges(file: &GgufFile) -> Result<Vec<Vec<u8>>, TokenizerError> {
    let value = file.get(KEY_MERGES).ok_or(TokenizerError::MissingKey(KEY_MERGES))?;
    let merges =
        value.as_array().and_then(|a| a.as_strings()).ok_or(TokenizerError::WrongType { key: KEY_MERGES, expected: "array of strings" })?;
    Ok(merges.to_vec())
}

/// Texts llama.cpp recognises as end-of-turn and fill-in-the-middle tokens when the file does
/// not name them; a recognised token is also made a control token.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] =
    &["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"];
const FIM_SUF_TEXTS: &[&str] =
    &["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"];
const FIM_MID_TEXTS: &[&str] =
    &["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts that end generation wherever they occur in a vocabulary.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

fn detect_role_tokens(texts: &[Box<[u8]>], attrs: &mut [TokenAttr], special: &mut SpecialTokens) {
    // llama.cpp walks a hash map here, so when a vocabulary holds two candidates which one it
    // picks is arbitrary; walking in id order picks the lowest id, deterministically.
    let roles: [(&[&str], RoleSlot); 8] = [
        (EOT_TEXTS, |s| &mut s.eot),
        (EOM_TEXTS, |s| &mut s.eom),
        (FIM_PRE_TEXTS, |s| &mut s.fim_pre),
        (FIM_SUF_TEXTS, |s| &mut s.fim_suf),
        (FIM_MID_TEXTS, |s| &mut s.fim_mid),
        (FIM_PAD_TEXTS, |s| &mut s.fim_pad),
        (FIM_REP_TEXTS, |s| &mut s.fim_rep),
        (FIM_SEP_TEXTS, |s| &mut s.fim_sep),
    ];
    for (candidates, slot) in roles {
        if slot(special).is_some() {
            continue;
        }
        if let Some(id) = texts.iter().position(|t| candidates.iter().any(|c| c.as_bytes() == &**t)) {
            *slot(special) = Some(id as TokenId);
            attrs[id].set(TokenAttr::CONTROL, true);
        }
    }
}

/// Control tokens whose text says "unused" are unused (Gemma's `<unused0>`...): never an
/// end-of-generation token.
fn mark_unused(texts: &[Box<[u8]>], attrs: &mut [TokenAttr]) {
    for (t, a) in texts.iter().zip(attrs.iter_mut()) {
        if a.has(TokenAttr::CONTROL) && t.windows(6).any(|w| w == b"unused") {
            a.set(TokenAttr::UNUSED, true);
        }
    }
}

fn end_of_generation_ids(texts: &[Box<[u8]>], attrs: &mut [TokenAttr], s: &SpecialTokens) -> Vec<TokenId> {
    let text_is = |id: TokenId, t: &str| &*texts[id as usize] == t.as_bytes();
    let mut eog: Vec<TokenId> = [s.fim_pad, s.fim_rep, s.fim_sep].into_iter().flatten().collect();
    for (id, t) in texts.iter().enumerate() {
        if EOG_TEXTS.iter().any(|c| c.as_bytes() == &**t) {
            eog.push(id as TokenId);
            // a token that ends generation is a control token, whatever the file says
            attrs[id].set(TokenAttr::CONTROL, true);
        }
        // gpt-oss's channel markers are plain text to the tokenizer.
        if [&b"<|channel|>"[..], b"<|message|>", b"<|start|>", b"<|constrain|>"].contains(&&**t) {
            attrs[id] = TokenAttr(TokenAttr::USER_DEFINED);
        }
    }
    eog.extend([s.eos, s.eot, s.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();

    // Harmony-style vocabularies end a turn with <|return|>/<|call|>: their <|end|> only ends a
    // message, so it is demoted to plain text.
    let has = |eog: &[TokenId], t: &str| eog.iter().any(|&id| text_is(id, t));
    let end = eog.iter().copied().find(|&id| text_is(id, "<|end|>"));
    let has_call = has(&eog, "<|call|>") || has(&eog, "<|calls|>");
    if let Some(end) = end {
        if has_call && (has(&eog, "<|return|>") || has(&eog, "<|flush|>")) {
            eog.retain(|&id| id != end);
            attrs[end as usize] = TokenAttr(TokenAttr::USER_DEFINED);
        }
    }
    // Where another token marks the end of a sequence, "</s>" is ordinary text.
    let s_id = eog.iter().copied().find(|&id| text_is(id, "</s>"));
    if let Some(s_id) = s_id {
        if has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>") {
            eog.retain(|&id| id != s_id);
            attrs[s_id as usize] = TokenAttr(TokenAttr::NORMAL);
        }
    }
    eog
}

/// Strip attributes llama.cpp gives certain special tokens by model name: Phi-3's special tokens
/// swallow the whitespace after them, some BERT variants' mask token the whitespace before it.
fn apply_strip_attrs(
    pre: &str,
    general_name: &str,
    arch: &str,
    text_to_id: &FxHashMap<Box<[u8]>, TokenId>,
    special_by_length: &[TokenId],
    attrs: &mut [TokenAttr],
) {
    let contains_any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    let id = |t: &str| text_to_id.get(t.as_bytes()).copied();
    if contains_any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"]) || contains_any(arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        if let Some(m) = id("<mask>") {
            attrs[m as usize].set(TokenAttr::LSTRIP, true);
        }
    } else if contains_any(general_name, &["phi-3", "phi3"]) {
        for &t in special_by_length {
            attrs[t as usize].set(TokenAttr::RSTRIP, true);
        }
        if let Some(t) = id("</s>") {
            attrs[t as usize].set(TokenAttr::RSTRIP, true);
        }
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            if let Some(t) = id(t) {
                attrs[t as usize].set(TokenAttr::RSTRIP, false);
            }
        }
    } else if general_name.contains("modern-bert") {
        if let Some(m) = id("[MASK]") {
            attrs[m as usize].set(TokenAttr::LSTRIP, true);
        }
    }
}
