//! Tokenizers built from a GGUF's `tokenizer.ggml.*` metadata, producing the same ids as
//! llama.cpp: SentencePiece-style BPE (`spm`), byte-level BPE with the named pre-tokenizer
//! (`bpe`, `pretokenize`), WordPiece (`wpm`) and the id-only vocabulary of llama.cpp's generated
//! test models (`hashed`), plus special-token parsing, decoding, a streaming detokenizer and
//! fill-in-the-middle prompts (`fim`).

mod bpe;
mod error;
pub mod fim;
mod hashed;
mod pretokenize;
mod special;
mod spm;
mod stream;
pub mod unicode;
mod vocab;
mod wpm;

pub use error::TokenizerError;
pub use stream::StreamDecoder;
pub use vocab::{SpecialTokens, TokenAttr, TokenId, TokenizerKind};

use bpe::{Bpe, WordCache};
use pretokenize::PreTokenizer;
use special::{Fragment, SpecialMatcher};
use spm::{Spm, SPACE_MARK};
use vocab::Vocab;

use crate::gguf::GgufFile;

enum Model {
    Spm(Spm),
    Bpe(Bpe),
    Wpm,
    Hashed,
}

/// A tokenizer: text to token ids and back.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    special: SpecialMatcher,
    /// Every token's text as it appears in output (`token_to_piece` with special tokens shown).
    pieces: Vec<Box<[u8]>>,
    /// Tables other layers derive from the whole vocabulary once (keyed by what they are made
    /// from, e.g. DRY's restart sequences of a list of breakers): see [`Tokenizer::derived`].
    derived: std::sync::Mutex<rustc_hash::FxHashMap<String, std::sync::Arc<dyn std::any::Any + Send + Sync>>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("kind", &self.vocab.kind).field("pre", &self.vocab.pre).field("n_vocab", &self.n_vocab()).finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::from_gguf(file)?;
        let model = match vocab.kind {
            TokenizerKind::Spm => Model::Spm(Spm::new(&vocab)),
            TokenizerKind::Bpe => {
                let config = vocab.pre_config.expect("BPE vocabularies carry a pre-tokenizer");
                Model::Bpe(Bpe::new(&vocab, PreTokenizer::new(config.family), config.ignore_merges))
            }
            TokenizerKind::Wpm => Model::Wpm,
            TokenizerKind::Test => Model::Hashed,
        };
        if vocab.kind == TokenizerKind::Wpm && (vocab.special.bos.is_none() || vocab.special.sep.is_none()) {
            return Err(TokenizerError::MissingSpecial("WordPiece", "[CLS] and [SEP]"));
        }
        if vocab.add_bos && vocab.special.bos.is_none() {
            return Err(TokenizerError::MissingSpecial(vocab.kind.name(), "BOS"));
        }
        if vocab.add_eos && vocab.special.eos.is_none() {
            return Err(TokenizerError::MissingSpecial(vocab.kind.name(), "EOS"));
        }
        let special = SpecialMatcher::new(&vocab);
        let mut tokenizer = Tokenizer { vocab, model, special, pieces: Vec::new(), derived: Default::default() };
        tokenizer.pieces = (0..tokenizer.n_vocab() as TokenId).map(|id| tokenizer.render_piece(id)).collect();
        Ok(tokenizer)
    }

    /// Token ids of `text`. `add_special` adds what the vocabulary asks for around a sequence
    /// (BOS/EOS, or BERT's `[CLS]` ... `[SEP]`); `parse_special` turns the text of control tokens
    /// such as `<start_of_turn>` into those tokens (chat templates need it; user text must not
    /// get it).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let v = &self.vocab;
        let fragments = self.special.partition(v, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        match &self.model {
            Model::Spm(spm) => {
                if add_special && v.add_bos {
                    out.extend(v.special.bos);
                }
                // A space is prefixed to text at the start and after every special token.
                let mut after_special = true;
                let mut buf = Vec::new();
                let mut cache = WordCache::default();
                for f in fragments {
                    match f {
                        Fragment::Text(t) => {
                            buf.clear();
                            if v.add_space_prefix && after_special {
                                buf.extend_from_slice(SPACE_MARK.as_bytes());
                            }
                            escape_spaces(t, &mut buf);
                            spm.tokenize(v, &buf, &mut out, &mut cache);
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                    }
                }
                if add_special && v.add_eos {
                    out.extend(v.special.eos);
                }
            }
            Model::Bpe(bpe) => {
                if add_special && v.add_bos {
                    out.extend(v.special.bos);
                }
                let mut cache = WordCache::default();
                for f in fragments {
                    match f {
                        Fragment::Text(t) => bpe.tokenize(t, &mut out, &mut cache),
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special && v.add_eos {
                    out.extend(v.special.eos);
                }
            }
            Model::Wpm => {
                if add_special {
                    out.extend(v.special.bos);
                }
                for f in fragments {
                    match f {
                        Fragment::Text(t) => wpm::tokenize(v, t, &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    out.extend(v.special.sep);
                }
            }
            Model::Hashed => {
                for f in fragments {
                    match f {
                        Fragment::Text(t) => hashed::tokenize(t.as_bytes(), v.n_tokens(), &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        out
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }

    pub fn kind(&self) -> TokenizerKind {
        self.vocab.kind
    }

    /// `tokenizer.ggml.model` as stored (`"llama"`, `"gpt2"`, `"bert"`).
    pub fn model_name(&self) -> &str {
        &self.vocab.model
    }

    /// `tokenizer.ggml.pre` as stored (empty when absent).
    pub fn pre_tokenizer(&self) -> &str {
        &self.vocab.pre
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.vocab.special
    }

    pub fn bos(&self) -> Option<TokenId> {
        self.vocab.special.bos
    }

    pub fn eos(&self) -> Option<TokenId> {
        self.vocab.special.eos
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos && self.vocab.special.bos.is_some()
    }

    /// Whether SentencePiece text gets a leading space (at the start and after special tokens).
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }

    /// Whether a separator closes a sequence (BERT's `[SEP]`; `encode` adds it to WordPiece
    /// input with `add_special`).
    pub fn add_sep(&self) -> bool {
        self.vocab.add_sep
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether generation stops at `id` (EOS, end of turn, end of message and the like).
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.vocab.eog
    }

    /// The token's text exactly as the vocabulary stores it (`▁Hello`, `ĠHello`, `<0x0A>`).
    pub fn token_text(&self, id: TokenId) -> Option<&[u8]> {
        self.vocab.texts.get(id as usize).map(|t| &**t)
    }

    pub fn token_attr(&self, id: TokenId) -> TokenAttr {
        self.vocab.attrs.get(id as usize).copied().unwrap_or_default()
    }

    /// A token's score (SentencePiece log-probability; 0 for vocabularies without scores).
    pub fn token_score(&self, id: TokenId) -> f32 {
        self.vocab.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    /// The id of the token whose vocabulary text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.vocab.id_of(text.as_bytes())
    }

    /// The raw bytes token `id` stands for in text, special tokens spelled out (`<bos>`). A
    /// byte token gives its one byte, which may be part of a UTF-8 character.
    pub fn token_bytes(&self, id: TokenId) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], |p| &**p)
    }

    /// A table derived from the vocabulary, made by `make` the first time `key` is asked for
    /// and kept with the tokenizer (a pass over a 150k vocabulary costs a request's latency
    /// once, not every time). At most 64 tables are kept.
    pub fn derived<T: Send + Sync + 'static>(&self, key: &str, make: impl FnOnce(&Tokenizer) -> T) -> std::sync::Arc<T> {
        let found = self.derived.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned();
        if let Some(table) = found.and_then(|t| t.downcast::<T>().ok()) {
            return table;
        }
        let table = std::sync::Arc::new(make(self));
        let mut memo = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if memo.len() >= 64 {
            memo.clear();
        }
        memo.insert(key.to_string(), table.clone());
        table
    }

    /// The bytes of token `id` in output text; with `special` off, control and unknown tokens
    /// give nothing (llama.cpp's `token_to_piece`).
    pub fn token_to_piece(&self, id: TokenId, special: bool) -> &[u8] {
        if !special && self.token_attr(id).has(TokenAttr::UNKNOWN | TokenAttr::CONTROL) {
            return &[];
        }
        self.token_bytes(id)
    }

    /// llama.cpp's `llama_detokenize`: `remove_special` drops a leading BOS and trailing EOS the
    /// vocabulary adds, `unparse_special` spells control tokens out; the SentencePiece space
    /// prefix is removed from the first token and, for vocabularies that ask for it, spaces
    /// before punctuation and contractions are tidied.
    pub fn detokenize(&self, ids: &[TokenId], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && !ids.is_empty() && Some(ids[0]) == v.special.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && ids.last().is_some_and(|&l| Some(l) == v.special.eos) {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            let mut piece = self.token_to_piece(id, unparse_special);
            if remove_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            remove_space = false;
            text.extend_from_slice(piece);
        }
        if v.clean_spaces {
            clean_up_spaces(&mut text);
        }
        text
    }

    /// Text of `ids` for display: special tokens left out, the SentencePiece space prefix
    /// removed (also after a leading BOS, which llama.cpp's detokenizer keeps), invalid UTF-8
    /// replaced.
    pub fn decode(&self, ids: &[TokenId]) -> String {
        let ids = match ids.split_first() {
            Some((&first, rest)) if self.add_bos() && Some(first) == self.bos() => rest,
            _ => ids,
        };
        String::from_utf8_lossy(&self.detokenize(ids, false, false)).into_owned()
    }

    /// The text a token stands for, computed once per token at load time.
    fn render_piece(&self, id: TokenId) -> Box<[u8]> {
        let v = &self.vocab;
        let text = &v.texts[id as usize];
        let attr = v.attrs[id as usize];
        match &self.model {
            Model::Hashed => hashed::piece(id),
            _ if attr.has(TokenAttr::UNKNOWN | TokenAttr::CONTROL | TokenAttr::USER_DEFINED) => text.clone(),
            Model::Spm(_) | Model::Wpm => {
                if attr.has(TokenAttr::NORMAL) {
                    return unescape_spaces(text).into_boxed_slice();
                }
                if attr.has(TokenAttr::BYTE) {
                    return byte_token_value(text).map(|b| vec![b]).unwrap_or_default().into_boxed_slice();
                }
                Box::default()
            }
            Model::Bpe(bpe) => {
                if attr.has(TokenAttr::NORMAL) {
                    return bpe.spelled_bytes(text).into_boxed_slice();
                }
                Box::default()
            }
        }
    }
}

/// Writes `text` with every ' ' as `▁`.
fn escape_spaces(text: &str, out: &mut Vec<u8>) {
    for (i, part) in text.split(' ').enumerate() {
        if i > 0 {
            out.extend_from_slice(SPACE_MARK.as_bytes());
        }
        out.extend_from_slice(part.as_bytes());
    }
}

fn unescape_spaces(text: &[u8]) -> Vec<u8> {
    let mark = SPACE_MARK.as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(mark) {
            out.push(b' ');
            i += mark.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// The byte of a `<0xNN>` token.
fn byte_token_value(text: &[u8]) -> Option<u8> {
    let hex = text.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// Hugging Face's `clean_up_tokenization_spaces`, exactly as llama.cpp applies it, in place and
/// in three passes: " ?", " !", " .", " ," lose their space; " ' " becomes "'"; " 's", " 'm",
/// " 're", " 've" lose theirs. The passes read the buffer they are rewriting, as llama.cpp's do,
/// so that inputs like " ' ' " come out the same.
fn clean_up_spaces(t: &mut Vec<u8>) {
    // pass 1
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
    // pass 2
    let n = t.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = t[i];
        if x == b'\'' && i + 1 < n && t[i - 1] == b' ' && t[i + 1] == b' ' {
            total -= 1;
            i += 1;
            t[i] = 0;
        }
        t[total] = x;
        total += 1;
        i += 1;
    }
    t.truncate(total);
    // pass 3
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = t[i + 1];
            if matches!(x1, b's' | b'm') {
                total -= 1;
            } else if !matches!(x1, b't' | b'd') && i + 2 < n {
                let x2 = t[i + 2];
                if matches!((x1, x2), (b'r', b'e') | (b'v', b'e')) {
                    total -= 1;
                }
            }
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_up_matches_llama_cpp_rules() {
        let clean = |s: &str| {
            let mut v = s.as_bytes().to_vec();
            clean_up_spaces(&mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("it ' s"), "it's");
        assert_eq!(clean("he 's and they 're , we 'll"), "he's and they're, we 'll");
        assert_eq!(clean(" ."), ".");
        assert_eq!(clean(" ' ' x"), "'' x");
    }

    #[test]
    fn space_escaping_round_trips() {
        let mut buf = Vec::new();
        escape_spaces(" a  b ", &mut buf);
        assert_eq!(String::from_utf8(buf.clone()).unwrap(), "▁a▁▁b▁");
        assert_eq!(unescape_spaces(&buf), b" a  b ");
        assert_eq!(byte_token_value(b"<0x0A>"), Some(10));
        assert_eq!(byte_token_value(b"<0xZZ>"), None);
    }
}
