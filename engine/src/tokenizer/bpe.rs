//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): pre-tokenize, then merge each word's bytes
//! by rank, lowest first, the leftmost pair among equal ranks, as llama.cpp does.
//!
//! GPT-2 vocabularies spell every byte as a printable character (space is `Ġ`, newline `Ċ`).
//! This implementation decodes the vocabulary and the merges into raw bytes once, at load time,
//! and interns every string a merge can produce; encoding then works on the text's own bytes
//! with integer symbols and never builds a string. Because the byte mapping is one-to-one, the
//! result is the same as merging the mapped text.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::pretokenize::PreTokenizer;
use super::vocab::{TokenId, Vocab};

/// A string a merge can produce, by index into `Bpe::symbols`; the 256 single bytes come first.
type Sym = u32;

pub(crate) struct Bpe {
    pre: PreTokenizer,
    ignore_merges: bool,
    /// Raw bytes of every token whose text is a byte-level spelling.
    raw_to_id: FxHashMap<Box<[u8]>, TokenId>,
    /// For each symbol, the token with exactly its bytes.
    symbol_token: Vec<Option<TokenId>>,
    symbol_len: Vec<u32>,
    /// (left, right) -> (rank, merged symbol).
    merges: FxHashMap<(Sym, Sym), (u32, Sym)>,
    /// The tokens llama.cpp emits for a byte no merge covered: the single-character tokens of
    /// the byte's spelling (only printable ASCII has one).
    byte_fallback: Vec<Vec<TokenId>>,
    /// GPT-2's byte alphabet, character to byte.
    char_to_byte: FxHashMap<char, u8>,
}

/// GPT-2's byte to character table: printable Latin-1 bytes stand for themselves, the others
/// for the code points from U+0100 upward, in byte order.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            let c = char::from_u32(next).expect("U+0100..U+0143 are characters");
            next += 1;
            c
        };
    }
    table
}

/// The raw bytes a byte-level spelled text stands for; `None` if it uses another character.
pub(crate) fn decode_byte_level(text: &[u8], char_to_byte: &FxHashMap<char, u8>) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(text).ok()?;
    s.chars().map(|c| char_to_byte.get(&c).copied()).collect()
}

pub(crate) fn char_to_byte_map() -> FxHashMap<char, u8> {
    byte_to_char_table().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect()
}

impl Bpe {
    pub fn new(vocab: &Vocab, pre: PreTokenizer, ignore_merges: bool) -> Bpe {
        let char_to_byte = char_to_byte_map();
        let mut raw_to_id: FxHashMap<Box<[u8]>, TokenId> = FxHashMap::default();
        for (id, text) in vocab.texts.iter().enumerate() {
            if let Some(raw) = decode_byte_level(text, &char_to_byte) {
                raw_to_id.insert(raw.into_boxed_slice(), id as TokenId);
            }
        }

        let mut interner = Interner::default();
        for b in 0..=255u8 {
            interner.intern(&[b]);
        }
        let mut merges: FxHashMap<(Sym, Sym), (u32, Sym)> = FxHashMap::default();
        for (rank, merge) in vocab.merges.iter().enumerate() {
            // "left right", split at the first space after the first character (a left part
            // may itself be a space-like character).
            let Some(split) = merge.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (Some(left), Some(right)) =
                (decode_byte_level(&merge[..split], &char_to_byte), decode_byte_level(&merge[split + 1..], &char_to_byte))
            else {
                continue; // spelled with characters no text can contain: can never apply
            };
            let l = interner.intern(&left);
            let r = interner.intern(&right);
            let joined = [left.as_slice(), right.as_slice()].concat();
            let m = interner.intern(&joined);
            // the first occurrence of a pair keeps its rank
            merges.entry((l, r)).or_insert((rank as u32, m));
        }

        let symbol_token = interner.strings.iter().map(|s| raw_to_id.get(&**s).copied()).collect();
        let symbol_len = interner.strings.iter().map(|s| s.len() as u32).collect();

        let table = byte_to_char_table();
        let byte_fallback = (0..256)
            .map(|b| {
                let mut buf = [0u8; 4];
                let spelled = table[b].encode_utf8(&mut buf);
                spelled.bytes().filter_map(|u| vocab.id_of(&[u])).collect()
            })
            .collect();

        Bpe { pre, ignore_merges, raw_to_id, symbol_token, symbol_len, merges, byte_fallback, char_to_byte }
    }

    /// The bytes a token's byte-level spelling stands for; characters outside the byte alphabet
    /// (added tokens written in plain Unicode) are kept as their own UTF-8.
    pub fn spelled_bytes(&self, text: &[u8]) -> Vec<u8> {
        let s = String::from_utf8_lossy(text);
        let mut out = Vec::with_capacity(text.len());
        for c in s.chars() {
            match self.char_to_byte.get(&c) {
                Some(&b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out
    }

    /// Appends the tokens of `text` (a fragment without special tokens) to `out`.
    pub fn tokenize(&self, text: &str, out: &mut Vec<TokenId>, cache: &mut WordCache) {
        let bytes = text.as_bytes();
        let mut scratch = MergeScratch::default();
        for word in self.pre.split(text) {
            let word = &bytes[word];
            if let Some(ids) = cache.get(word) {
                out.extend_from_slice(ids);
                continue;
            }
            let start = out.len();
            self.tokenize_word(word, out, &mut scratch);
            if word.len() <= MAX_CACHED_WORD {
                cache.insert(word.into(), out[start..].to_vec());
            }
        }
    }

    fn tokenize_word(&self, word: &[u8], out: &mut Vec<TokenId>, s: &mut MergeScratch) {
        if self.ignore_merges {
            if let Some(&id) = self.raw_to_id.get(word) {
                out.push(id);
                return;
            }
        }
        let n = word.len();
        s.syms.clear();
        s.syms.extend(word.iter().map(|&b| Sym::from(b)));
        s.next.clear();
        s.next.extend((1..=n).map(|i| if i == n { NONE } else { i as u32 }));
        s.prev.clear();
        s.prev.extend((0..n).map(|i| if i == 0 { NONE } else { i as u32 - 1 }));
        s.heap.clear();
        for i in 1..n {
            self.push_pair(s, i - 1, i);
        }
        while let Some(Reverse(c)) = s.heap.pop() {
            let (l, r) = (c.left as usize, c.right as usize);
            // skip pairs one of whose sides has changed since they were queued
            if s.syms[l] != c.left_sym || s.syms[r] != c.right_sym {
                continue;
            }
            s.syms[l] = c.merged;
            s.syms[r] = DEAD;
            let after = s.next[r];
            s.next[l] = after;
            if after != NONE {
                s.prev[after as usize] = l as u32;
            }
            let before = s.prev[l];
            if before != NONE {
                self.push_pair(s, before as usize, l);
            }
            if after != NONE {
                self.push_pair(s, l, after as usize);
            }
        }
        let mut i = 0;
        while i != NONE as usize {
            let sym = s.syms[i];
            match self.symbol_token[sym as usize] {
                Some(id) => out.push(id),
                None => {
                    let len = self.symbol_len[sym as usize] as usize;
                    for &b in &word[i..i + len] {
                        out.extend_from_slice(&self.byte_fallback[b as usize]);
                    }
                }
            }
            i = s.next[i] as usize;
        }
    }

    fn push_pair(&self, s: &mut MergeScratch, left: usize, right: usize) {
        let (ls, rs) = (s.syms[left], s.syms[right]);
        if let Some(&(rank, merged)) = self.merges.get(&(ls, rs)) {
            s.heap.push(Reverse(Candidate { rank, left: left as u32, right: right as u32, left_sym: ls, right_sym: rs, merged }));
        }
    }
}

const NONE: u32 = u32::MAX;
const DEAD: Sym = u32::MAX;
/// Longer words are rare and would only bloat the cache.
pub(crate) const MAX_CACHED_WORD: usize = 64;

/// Tokens of the words already seen during one encode call (natural text repeats its words);
/// SentencePiece uses it too.
pub(crate) type WordCache = FxHashMap<Box<[u8]>, Vec<TokenId>>;

/// A queued merge; ordered by rank, then by position (leftmost first).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    left: u32,
    right: u32,
    left_sym: Sym,
    right_sym: Sym,
    merged: Sym,
}

#[derive(Default)]
struct MergeScratch {
    syms: Vec<Sym>,
    next: Vec<u32>,
    prev: Vec<u32>,
    heap: BinaryHeap<Reverse<Candidate>>,
}

#[derive(Default)]
struct Interner {
    ids: FxHashMap<Box<[u8]>, Sym>,
    strings: Vec<Box<[u8]>>,
}

impl Interner {
    fn intern(&mut self, s: &[u8]) -> Sym {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as Sym;
        self.strings.push(s.into());
        self.ids.insert(s.into(), id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_a_bijection_with_gpt2_spellings() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0xAD], '\u{143}'); // the last of the 68 remapped bytes
        let mut sorted = t.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
        let back = char_to_byte_map();
        assert_eq!(decode_byte_level("ĠhelloĊ".as_bytes(), &back).unwrap(), b" hello\n");
        assert!(decode_byte_level("中".as_bytes(), &back).is_none());
    }
}
