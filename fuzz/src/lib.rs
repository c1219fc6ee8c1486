//! What the fuzz targets share: fixture paths, the fixture tokenizers (loaded once per process),
//! and the server's real HTTP handler over an in-memory connection.

use std::path::PathBuf;
use std::time::Duration;

use engine::gguf::GgufFile;
use engine::tokenizer::{TokenId, Tokenizer};

pub mod http;

/// A file under the repository's `tests/fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(rel)
}

/// The tokenizer of `tests/fixtures/tokenizer/ggml-vocab-<name>.gguf`.
pub fn vocab(name: &str) -> Tokenizer {
    let path = fixture(&format!("tokenizer/ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One tokenizer's properties on arbitrary input, whatever the bytes:
/// - encoding (with and without special tokens, parsing control-token text or not) never
///   panics and gives ids inside the vocabulary;
/// - decoding those ids, and arbitrary ids read from the input, never panics;
/// - when `lossless`, decoding the plain encoding of valid UTF-8 gives the text back.
pub fn tokenizer_properties(tokenizer: &Tokenizer, data: &[u8], lossless: impl Fn(&str) -> bool) {
    let text = String::from_utf8_lossy(data);
    let n_vocab = tokenizer.n_vocab();
    for (add_special, parse_special) in [(false, false), (true, true), (true, false)] {
        let ids = tokenizer.encode(&text, add_special, parse_special);
        assert!(ids.iter().all(|&id| (id as usize) < n_vocab), "an id outside the vocabulary of {n_vocab}: {ids:?}");
        let back = tokenizer.detokenize(&ids, false, parse_special);
        if !add_special && !parse_special && lossless(&text) {
            assert_eq!(String::from_utf8_lossy(&back), text, "decode(encode(text)) is not the text; ids {ids:?}");
        }
        let _ = tokenizer.decode(&ids);
    }
    // Arbitrary ids, in range and out of it: the server's `/detokenize` and prompt-token routes
    // take ids from clients.
    let ids: Vec<TokenId> = data.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) % (n_vocab as u32 + 8)).collect();
    let in_range: Vec<TokenId> = ids.iter().copied().filter(|&id| (id as usize) < n_vocab).collect();
    let _ = tokenizer.detokenize(&in_range, true, false);
    let _ = tokenizer.detokenize(&in_range, false, true);
    let _ = tokenizer.decode(&in_range);
    for &id in &ids {
        let _ = tokenizer.token_text(id);
    }
}

/// How long one fuzz input may keep the HTTP target waiting before it counts as a hang.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
