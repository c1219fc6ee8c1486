//! Every POST route of the server on arbitrary bodies, through its real handler (hyper's
//! parser, the router, body reading, strict JSON, the typed request and the route itself; a
//! valid request generates with the tiny llama fixture): the first byte picks the route, the
//! rest is the JSON body. Every answer is a success or an OpenAI-shaped 4xx error, in time.
#![no_main]

use engine_fuzz::http::{check_answer, Harness, POST_ROUTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    let path = POST_ROUTES[which as usize % POST_ROUTES.len()];
    let (status, answer) = Harness::get().send("POST", path, b"application/json", body.to_vec());
    if std::env::var_os("FUZZ_PRINT_ANSWERS").is_some() {
        eprintln!("{path} {status} {}", String::from_utf8_lossy(&answer[..answer.len().min(300)]));
    }
    check_answer(path, status, &answer);
});
