//! BERT WordPiece (`tokenizer.ggml.model = "bert"`): basic tokenization (lowercase, accents
//! stripped, split on whitespace, punctuation and CJK characters), then the longest vocabulary
//! prefix, repeatedly, for each word. The GGUF spells word-initial pieces with a leading `▁` and
//! continuation pieces bare (the converter rewrites BERT's `##` pieces that way).

use super::spm::SPACE_MARK;
use super::unicode::{flags, nfd_first, to_lower};
use super::vocab::{TokenId, Vocab};

/// Splits `text` into BERT's basic words.
fn basic_words(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if strip_accents { nfd_first(c) } else { c };
        let f = flags(c);
        if f.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || f.is_control() || (strip_accents && f.is_accent_mark()) {
            continue;
        }
        let c = if lowercase { to_lower(c) } else { c };
        if f.is_punctuation() || (c.is_ascii() && f.is_symbol()) || is_cjk(c) {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            words.last_mut().expect("never empty").push(c);
            words.push(String::new());
        } else {
            words.last_mut().expect("never empty").push(c);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// The CJK ideograph blocks BERT isolates (as Hugging Face's code has them).
fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// Appends the tokens of `text` (a fragment without special tokens) to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) {
    let unk = vocab.special.unk;
    for word in basic_words(text, vocab.lowercase, vocab.strip_accents) {
        let marked = format!("{SPACE_MARK}{word}");
        let w = marked.as_bytes();
        let n = w.len();
        let start = out.len();
        let mut i = 0;
        while i < n {
            let longest = (i + 1..=n.min(i + vocab.max_token_len)).rev().find_map(|j| vocab.id_of(&w[i..j]).map(|id| (j, id)));
            match longest {
                Some((j, id)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    // one piece that cannot be matched makes the whole word unknown
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.extend(unk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_tokenization() {
        assert_eq!(basic_words("Hello, World!", true, true), ["hello", ",", "world", "!"]);
        assert_eq!(basic_words("  Äpfel  ", true, true), ["apfel"]);
        assert_eq!(basic_words("我想apple", true, true), ["我", "想", "apple"]);
        assert_eq!(basic_words("a$b", true, true), ["a", "$", "b"]);
        assert_eq!(basic_words("Äpfel", false, false), ["Äpfel"]);
        assert!(basic_words(" \t\n", true, true).is_empty());
    }
}
