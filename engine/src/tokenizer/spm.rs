//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`; Llama 2, Mistral, Gemma): start
//! from single characters and repeatedly merge the adjacent pair whose joined text is the
//! highest-scoring token (the leftmost among equal scores); characters that end up in no token
//! are spelled with byte tokens (`<0xNN>`).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::bpe::{WordCache, MAX_CACHED_WORD};
use super::vocab::{TokenId, Vocab};

/// SentencePiece's visible space, which stands for ' ' in the vocabulary.
pub(crate) const SPACE_MARK: &str = "\u{2581}";

pub(crate) struct Spm {
    /// `<0xNN>` (or, failing that, the byte itself, or the unknown token) for every byte.
    byte_tokens: Vec<Option<TokenId>>,
    /// No token has a `▁` right after something other than `▁`, so no merge can join a word to
    /// the space before the next one: text can be tokenized word by word (and repeated words
    /// looked up), with the same result as merging it whole. True of SentencePiece vocabularies
    /// trained with whitespace splitting (Llama 2, Gemma); checked, not assumed.
    words_are_independent: bool,
}

impl Spm {
    pub fn new(vocab: &Vocab) -> Spm {
        let byte_tokens = (0..=255u8)
            .map(|b| vocab.id_of(format!("<0x{b:02X}>").as_bytes()).or_else(|| vocab.id_of(&[b])).or(vocab.special.unk))
            .collect();
        let mark = SPACE_MARK.as_bytes();
        let words_are_independent = !vocab.texts.iter().any(|t| (1..t.len()).any(|i| t[i..].starts_with(mark) && !t[..i].ends_with(mark)));
        Spm { byte_tokens, words_are_independent }
    }

    /// The token for byte `b` when no piece covers it.
    pub fn byte_token(&self, b: u8) -> Option<TokenId> {
        self.byte_tokens[b as usize]
    }

    /// Appends the tokens of `text` (spaces already written as `▁`) to `out`.
    pub fn tokenize(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<TokenId>, cache: &mut WordCache) {
        if !self.words_are_independent {
            return self.tokenize_span(vocab, text, out);
        }
        let mark = SPACE_MARK.as_bytes();
        let mut start = 0;
        let mut i = 1;
        while i <= text.len() {
            // a word ends before a `▁` that does not continue a run of them
            let boundary = i == text.len() || (text[i..].starts_with(mark) && !text[..i].ends_with(mark));
            if boundary {
                let word = &text[start..i];
                match cache.get(word) {
                    Some(ids) => out.extend_from_slice(ids),
                    None => {
                        let first = out.len();
                        self.tokenize_span(vocab, word, out);
                        if word.len() <= MAX_CACHED_WORD {
                            cache.insert(word.into(), out[first..].to_vec());
                        }
                    }
                }
                start = i;
            }
            i += 1;
        }
    }

    /// The merge loop over one span of text.
    fn tokenize_span(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<TokenId>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        let mut offset = 0;
        while offset < text.len() {
            let len = utf8_len(text[offset]).min(text.len() - offset);
            let i = symbols.len() as i32;
            symbols.push(Symbol {
                start: offset as u32,
                len: len as u32,
                prev: i - 1,
                next: if offset + len == text.len() { -1 } else { i + 1 },
            });
            offset += len;
        }
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            push_bigram(vocab, text, &symbols, i as i32 - 1, i as i32, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (b.left as usize, b.right as usize);
            let (ll, rl) = (symbols[l].len, symbols[r].len);
            // stale: one side was merged into something else since this pair was queued
            if ll == 0 || rl == 0 || ll + rl != b.len {
                continue;
            }
            symbols[l].len += rl;
            symbols[r].len = 0;
            let after = symbols[r].next;
            symbols[l].next = after;
            if after >= 0 {
                symbols[after as usize].prev = b.left;
            }
            push_bigram(vocab, text, &symbols, symbols[l].prev, b.left, &mut queue);
            push_bigram(vocab, text, &symbols, b.left, after, &mut queue);
        }
        let mut i = if symbols.is_empty() { -1 } else { 0 };
        while i >= 0 {
            let s = symbols[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match vocab.id_of(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.iter().filter_map(|&b| self.byte_token(b))),
            }
            i = s.next;
        }
    }
}

/// Bytes in the UTF-8 sequence a lead byte starts (1 for stray continuation bytes).
fn utf8_len(lead: u8) -> usize {
    const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(lead >> 4) as usize]
}

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    len: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Greatest = popped first: the higher score, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

fn push_bigram(vocab: &Vocab, text: &[u8], symbols: &[Symbol], left: i32, right: i32, queue: &mut BinaryHeap<Bigram>) {
    if left < 0 || right < 0 {
        return;
    }
    let (l, r) = (symbols[left as usize], symbols[right as usize]);
    let joined = &text[l.start as usize..(r.start + r.len) as usize];
    if let Some(id) = vocab.id_of(joined) {
        queue.push(Bigram { left, right, score: vocab.scores[id as usize], len: l.len + r.len });
    }
}
