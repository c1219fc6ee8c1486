//! llama-server's extras on the tiny llama with prompts read 16 tokens per pass: `timings` on
//! every finished answer, `timings_per_token` on each streamed piece, and `return_progress`
//! events as the prompt is read, on `/completion`, `/v1/chat/completions` and
//! `/v1/completions`, counted against the prompt, the prefix cache and the tokens written.

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Scheduling, Server};

use super::{chat_model, client, common::start, sse_events, CHAT};

fn chunked_server() -> String {
    let spec = ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(256), draft: None };
    start(Server::builder().model(spec).scheduling(Scheduling { prefill_chunk: 16, ..Scheduling::default() }))
}

fn read_events(r: reqwest::blocking::Response) -> Vec<Value> {
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().unwrap();
    sse_events(&text).iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).unwrap()).collect()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The `prompt_progress` objects of a stream's events: the first at admission (the cached
/// tokens read, no time), then one per pass growing by at most a chunk, the last the whole
/// prompt; each with its timings when it has them (the prompt's so far). Gives the cached
/// count.
fn check_progress(events: &[Value], total: u64) -> u64 {
    let reports: Vec<&Value> = events.iter().filter(|e| e.get("prompt_progress").is_some()).collect();
    assert!(!reports.is_empty(), "no progress reports");
    let first = &reports[0]["prompt_progress"];
    let cache = n(&first["cache"]);
    assert_eq!((n(&first["total"]), n(&first["processed"]), n(&first["time_ms"])), (total, cache, 0), "{first}");
    if let Some(t) = reports[0].get("timings") {
        assert_eq!((n(&t["prompt_n"]), t["prompt_ms"].as_f64()), (0, Some(0.0)));
    }
    for pair in reports.windows(2) {
        let (a, b) = (&pair[0]["prompt_progress"], &pair[1]["prompt_progress"]);
        assert_eq!((n(&b["total"]), n(&b["cache"])), (total, cache));
        assert!(n(&b["processed"]) > n(&a["processed"]) && n(&b["processed"]) - n(&a["processed"]) <= 16, "{a} then {b}");
        assert!(n(&b["time_ms"]) >= n(&a["time_ms"]));
        if let (Some(ta), Some(tb)) = (pair[0].get("timings"), pair[1].get("timings")) {
            assert_eq!(n(&tb["prompt_n"]), n(&b["processed"]) - cache);
            assert!(tb["prompt_ms"].as_f64() >= ta["prompt_ms"].as_f64());
        }
    }
    assert_eq!(n(&reports.last().unwrap()["prompt_progress"]["processed"]), total, "the last report has read the prompt");
    assert_eq!(reports.len() as u64, 1 + (total - cache).div_ceil(16), "one report per pass");
    cache
}

/// The timings of a stream's pieces (`pieces`, in order) against its output's end: the
/// prompt's counts and time fixed; the tokens written (`predicted_n`) growing from 1 to the
/// end's, each piece's what `written` says when it says.
fn check_piece_timings(pieces: &[&Value], written: impl Fn(&Value) -> Option<u64>, end: &Value, prompt: u64, cache: u64) {
    assert!(!pieces.is_empty());
    let mut before = (0, 0.0);
    for p in pieces {
        let t = &p["timings"];
        assert_eq!((n(&t["prompt_n"]), n(&t["cache_n"])), (prompt - cache, cache), "{p}");
        assert_eq!(t["prompt_ms"], end["prompt_ms"], "the prompt's time is fixed from the first token on: {p}");
        let now = (n(&t["predicted_n"]), t["predicted_ms"].as_f64().unwrap());
        assert!(now.0 >= 1.max(before.0) && now.0 <= n(&end["predicted_n"]) && now.1 >= before.1, "{p}");
        if let Some(w) = written(p) {
            assert_eq!(now.0, w, "{p}");
        }
        before = now;
    }
    assert!(before.1 <= end["predicted_ms"].as_f64().unwrap());
    assert_eq!((n(&end["prompt_n"]), n(&end["cache_n"])), (prompt - cache, cache), "{end}");
}

#[test]
fn completion_streams_its_prompts_progress_and_each_pieces_timings() {
    let base = chunked_server();
    let url = format!("{base}/completion");
    let prompt: Vec<u32> = (0..50).map(|i| 1 + (i * 11) % 250).collect();
    let ask =
        json!({"prompt": prompt, "n_predict": 5, "temperature": 0, "stream": true, "return_progress": true, "timings_per_token": true});
    // twice: the second time the start of the prompt is in the prefix cache
    let mut texts = Vec::new();
    for round in 0..2 {
        let events = read_events(client().post(&url).json(&ask).send().unwrap());
        let cache = check_progress(&events, 50);
        if round == 0 {
            let processed: Vec<u64> = events.iter().filter_map(|e| e.get("prompt_progress")).map(|p| n(&p["processed"])).collect();
            assert_eq!(processed, [0, 16, 32, 48, 50]);
        } else {
            assert!(cache >= 32, "round 1 found {cache} tokens cached");
        }
        let progress_first = events.iter().take_while(|e| e.get("prompt_progress").is_some()).count();
        assert_eq!(progress_first, events.iter().filter(|e| e.get("prompt_progress").is_some()).count(), "progress after a piece");
        let (end, pieces) = events[progress_first..].split_last().unwrap();
        assert_eq!(end["stop"], true);
        let pieces: Vec<&Value> = pieces.iter().collect();
        check_piece_timings(&pieces, |p| Some(n(&p["tokens_predicted"])), &end["timings"], 50, cache);
        texts.push((pieces.iter().map(|p| p["content"].as_str().unwrap()).collect::<String>(), n(&end["timings"]["predicted_n"])));
    }
    let whole: Value =
        client().post(&url).json(&json!({"prompt": prompt, "n_predict": 5, "temperature": 0})).send().unwrap().json().unwrap();
    for (text, predicted) in texts {
        assert_eq!((text.as_str(), predicted), (whole["content"].as_str().unwrap(), n(&whole["tokens_predicted"])));
    }
    // without the flags: no reports, no timings but the answer's
    let plain = json!({"prompt": prompt, "n_predict": 5, "temperature": 0, "stream": true});
    let events = read_events(client().post(&url).json(&plain).send().unwrap());
    let (end, pieces) = events.split_last().unwrap();
    assert!(pieces.iter().all(|p| p.get("timings").is_none() && p.get("prompt_progress").is_none()), "{pieces:?}");
    assert!(end["timings"]["predicted_per_second"].is_number());
    // timings alone: the pieces still count the cached prompt, and no report goes out
    let timed = json!({"prompt": prompt, "n_predict": 5, "temperature": 0, "stream": true, "timings_per_token": true});
    let events = read_events(client().post(&url).json(&timed).send().unwrap());
    assert!(events.iter().all(|e| e.get("prompt_progress").is_none()));
    let (end, pieces) = events.split_last().unwrap();
    let pieces: Vec<&Value> = pieces.iter().collect();
    let cache = n(&end["timings"]["cache_n"]);
    assert!(cache >= 32, "{end}");
    check_piece_timings(&pieces, |p| Some(n(&p["tokens_predicted"])), &end["timings"], 50, cache);
}

#[test]
fn chat_and_text_completions_carry_llama_servers_timings_and_progress() {
    let base = chunked_server();
    let messages =
        json!([{"role": "user", "content": "Tell me a long story about a brave little dog and a wise old cat who live by the sea."}]);
    let chat = format!("{base}/v1/chat/completions");
    let whole: Value = client()
        .post(&chat)
        .json(&json!({"model": CHAT, "messages": messages, "max_tokens": 6, "temperature": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let (prompt, written) = (n(&whole["usage"]["prompt_tokens"]), n(&whole["usage"]["completion_tokens"]));
    assert!(prompt > 32, "a prompt of several passes: {prompt}");
    let t = &whole["timings"];
    assert_eq!((n(&t["prompt_n"]) + n(&t["cache_n"]), n(&t["predicted_n"])), (prompt, written), "{whole}");
    let body = json!({"model": CHAT, "messages": messages, "max_tokens": 6, "temperature": 0, "stream": true,
                      "stream_options": {"include_usage": true}, "return_progress": true, "timings_per_token": true});
    let events = read_events(client().post(&chat).json(&body).send().unwrap());
    let cache = check_progress(&events, prompt);
    for report in events.iter().filter(|e| e.get("prompt_progress").is_some()) {
        assert_eq!(report["choices"][0]["delta"], json!({"role": "assistant", "content": null}), "{report}");
    }
    let (usage, rest) = events.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(n(&usage["timings"]["predicted_n"]), n(&usage["usage"]["completion_tokens"]));
    let finish = rest.iter().find(|e| e["choices"][0]["finish_reason"].is_string()).unwrap();
    assert_eq!(finish["timings"], usage["timings"], "the last chunk of the choice and the usage chunk");
    // the content deltas after the first chunk (the role's)
    let content: Vec<&Value> =
        rest.iter().filter(|e| e["choices"][0]["delta"]["content"].is_string() && e["choices"][0]["delta"].get("role").is_none()).collect();
    let text: String = content.iter().map(|e| e["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, whole["choices"][0]["message"]["content"].as_str().unwrap());
    assert!(content.iter().all(|e| e.get("timings").is_some()), "every content chunk has its timings");
    check_piece_timings(&content, |_| None, &usage["timings"], prompt, cache);
    // text completions: the same reports, a progress chunk's text empty
    let url = format!("{base}/v1/completions");
    let body = json!({"model": CHAT, "prompt": "The brave little dog and the wise old cat lived by the sea, where every morning the waves",
                      "max_tokens": 4, "temperature": 0, "stream": true, "return_progress": true});
    let events = read_events(client().post(&url).json(&body).send().unwrap());
    let reports: Vec<&Value> = events.iter().filter(|e| e.get("prompt_progress").is_some()).collect();
    assert!(reports.iter().all(|r| r["choices"][0]["text"] == "" && r.get("timings").is_none()), "{reports:?}");
    let total = n(&reports[0]["prompt_progress"]["total"]);
    check_progress(&events, total);
    let end = events.iter().find(|e| e["choices"][0]["finish_reason"].is_string()).unwrap();
    assert_eq!(n(&end["timings"]["prompt_n"]) + n(&end["timings"]["cache_n"]), total);
    let whole: Value =
        client().post(&url).json(&json!({"model": CHAT, "prompt": "The cat", "max_tokens": 3})).send().unwrap().json().unwrap();
    assert_eq!(n(&whole["timings"]["predicted_n"]), n(&whole["usage"]["completion_tokens"]), "{whole}");
    // two outputs: each its own last chunk's timings, none on the whole answer
    let two: Value =
        client().post(&url).json(&json!({"model": CHAT, "prompt": "The cat", "max_tokens": 3, "n": 2})).send().unwrap().json().unwrap();
    assert!(two.get("timings").is_none(), "{two}");
}
