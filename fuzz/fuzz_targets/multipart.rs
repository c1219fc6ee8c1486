//! `POST /v1/audio/transcriptions` on arbitrary multipart forms, through the server's real
//! handler: the input's first line is the `Content-Type` header (its boundary), the rest the
//! body. Every answer is a transcription or an OpenAI-shaped 4xx error, in time.
#![no_main]

use engine_fuzz::http::{check_answer, Harness};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (content_type, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"multipart/form-data; boundary=x"[..], data),
    };
    let path = "/v1/audio/transcriptions";
    let (status, answer) = Harness::get().send("POST", path, content_type, body.to_vec());
    check_answer(path, status, &answer);
});
