//! The SentencePiece tokenizer (`llama-spm` vocabulary) on arbitrary bytes: see
//! [`engine_fuzz::tokenizer_properties`]. Decoding is not checked against the text: SPM
//! prefixes a space and maps text with no piece to `<unk>`.
#![no_main]

use std::sync::OnceLock;

use engine::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    let tokenizer = TOKENIZER.get_or_init(|| engine_fuzz::vocab("llama-spm"));
    engine_fuzz::tokenizer_properties(tokenizer, data, |_| false);
});
