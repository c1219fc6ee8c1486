//! The WordPiece tokenizer (`bert-bge` vocabulary) on arbitrary bytes: see
//! [`engine_fuzz::tokenizer_properties`]. Decoding is not checked against the text: WordPiece
//! lowercases, strips accents and maps unknown words to `[UNK]`.
#![no_main]

use std::sync::OnceLock;

use engine::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    let tokenizer = TOKENIZER.get_or_init(|| engine_fuzz::vocab("bert-bge"));
    engine_fuzz::tokenizer_properties(tokenizer, data, |_| false);
});
