//! llama.cpp's `test` vocabulary, written by its `test-llama-archs` into tiny random-weight models
//! of every architecture: ids only, no merges. Text becomes one id per 5-byte chunk (the chunk's
//! bytes hashed as `h = h·31 + byte`, modulo the vocabulary size) and an id is shown as its hex
//! number. Nothing in it is meant to read well; it lets those files load and run by token ids.

use super::vocab::TokenId;

/// Bytes per id when text is encoded.
const CHUNK: usize = 5;

/// Appends the id of every 5-byte chunk of `text` (the last one may be shorter).
pub(super) fn tokenize(text: &[u8], n_vocab: usize, out: &mut Vec<TokenId>) {
    for chunk in text.chunks(CHUNK) {
        let hash = chunk.iter().fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        out.push((hash % n_vocab as u64) as TokenId);
    }
}

/// The text of token `id`: its number in lowercase hex.
pub(super) fn piece(id: TokenId) -> Box<[u8]> {
    format!("{id:x}").into_bytes().into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_five_bytes_hash_to_ids_as_llama_cpp_does() {
        let mut out = Vec::new();
        tokenize(b"hello world", 128, &mut out);
        // "hello": (((104·31 + 101)·31 + 108)·31 + 108)·31 + 111 = 99162322, mod 128 = 82;
        // " worl" = 33208114 -> 50; "d" = 100
        assert_eq!(out, [82, 50, 100]);
        assert_eq!(&*piece(255), b"ff");
    }
}
