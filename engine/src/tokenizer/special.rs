//! Cutting special tokens out of the text before the model's own splitting.
//!
//! The rule is llama.cpp's: the control, user-defined and unknown tokens are tried longest text
//! first; every occurrence of one in a stretch of plain text becomes that token, and the text
//! around it is searched for the next ones. Control and unknown tokens are only recognised when
//! `parse_special` is on; user-defined tokens (Gemma's whitespace runs and HTML tags, added
//! words) always are, as in Hugging Face tokenizers. A token marked LSTRIP / RSTRIP also
//! swallows the ASCII whitespace on that side of it.
//!
//! Trying each of Gemma's ~6,000 special tokens against a long text would dominate encoding, so
//! an Aho-Corasick pass first finds which special texts occur at all; only those are tried.

use aho_corasick::AhoCorasick;

use super::vocab::{TokenAttr, TokenId, Vocab};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(TokenId),
}

pub(crate) struct SpecialMatcher {
    /// Candidates in trial order (longest first); their texts are valid UTF-8.
    tokens: Vec<TokenId>,
    automaton: Option<AhoCorasick>,
}

impl SpecialMatcher {
    pub fn new(vocab: &Vocab) -> SpecialMatcher {
        let tokens: Vec<TokenId> = vocab
            .special_by_length
            .iter()
            .copied()
            // a text that is not UTF-8 could split a character of the input; such tokens can only
            // be produced from ids, never from text
            .filter(|&id| std::str::from_utf8(&vocab.texts[id as usize]).is_ok())
            .collect();
        let patterns: Vec<&[u8]> = tokens.iter().map(|&id| &*vocab.texts[id as usize]).collect();
        let automaton = if patterns.is_empty() {
            None
        } else {
            // Building can only fail past the automaton's size limits, far beyond any vocabulary;
            // without it every candidate is simply tried.
            AhoCorasick::new(&patterns).ok()
        };
        SpecialMatcher { tokens, automaton }
    }

    /// Splits `text` into plain-text fragments and special tokens.
    pub fn partition<'t>(&self, vocab: &Vocab, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(text)];
        let present = self.present(text);
        for (i, &id) in self.tokens.iter().enumerate() {
            if present.as_ref().is_some_and(|p| !p[i]) {
                continue;
            }
            let attr = vocab.attrs[id as usize];
            if !parse_special && attr.has(TokenAttr::CONTROL | TokenAttr::UNKNOWN) {
                continue;
            }
            // the candidate's text was checked to be UTF-8 when the matcher was built
            let needle = std::str::from_utf8(&vocab.texts[id as usize]).unwrap_or_default();
            fragments = split_on(fragments, needle, id, attr);
        }
        fragments
    }

    /// Which candidates occur in `text` (overlaps included), or `None` to try them all.
    fn present(&self, text: &str) -> Option<Vec<bool>> {
        let ac = self.automaton.as_ref()?;
        let mut present = vec![false; self.tokens.len()];
        for m in ac.find_overlapping_iter(text) {
            present[m.pattern().as_usize()] = true;
        }
        Some(present)
    }
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

fn split_on<'t>(fragments: Vec<Fragment<'t>>, needle: &str, id: TokenId, attr: TokenAttr) -> Vec<Fragment<'t>> {
    let mut out = Vec::with_capacity(fragments.len() + 2);
    for f in fragments {
        let Fragment::Text(mut rest) = f else {
            out.push(f);
            continue;
        };
        while let Some(at) = rest.find(needle) {
            let mut left = &rest[..at];
            if attr.has(TokenAttr::LSTRIP) {
                left = left.trim_end_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
            }
            if !left.is_empty() {
                out.push(Fragment::Text(left));
            }
            out.push(Fragment::Token(id));
            rest = &rest[at + needle.len()..];
            if attr.has(TokenAttr::RSTRIP) {
                rest = rest.trim_start_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
            }
        }
        if !rest.is_empty() {
            out.push(Fragment::Text(rest));
        }
    }
    out
}
