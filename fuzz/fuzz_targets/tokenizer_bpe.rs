//! The byte-level BPE tokenizer (`qwen2` vocabulary and pre-tokenizer) on arbitrary bytes: see
//! [`engine_fuzz::tokenizer_properties`]. Byte-level BPE loses nothing, so decoding the
//! encoding of any text gives the text back.
#![no_main]

use std::sync::OnceLock;

use engine::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    let tokenizer = TOKENIZER.get_or_init(|| engine_fuzz::vocab("qwen2"));
    engine_fuzz::tokenizer_properties(tokenizer, data, |_| true);
});
