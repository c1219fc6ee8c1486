//! The server under load, over real TCP with real HTTP clients and the tiny llama fixture:
//! continuous batching (concurrent outputs equal their solo outputs and share forward steps),
//! the prefix cache, backpressure (503 with Retry-After), clients that hang up, unloading a
//! model that is busy, the batch scheduler and graceful shutdown, KV-cache limits, and the
//! scheduler's metrics.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{start, start_server};
use engine::model::Model;
use engine_tests::fixture;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::batch_scheduler::BatchConfig;
use server::{ModelSpec, Scheduling, Server, ServerBuilder};

const CHAT: &str = "tiny-llama";

fn chat_model() -> Arc<Model> {
    Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap())
}

fn builder(scheduling: Scheduling) -> ServerBuilder {
    let spec = ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(512), draft: None };
    Server::builder().model(spec).scheduling(scheduling)
}

fn scheduling(parallel: usize, queue: usize) -> Scheduling {
    Scheduling { parallel, queue, ..Scheduling::default() }
}

/// Serves `server` on a free port in a background runtime; returns its base URL and a handle
/// that ends when `serve` returns.
fn client() -> Client {
    Client::builder().timeout(Duration::from_secs(120)).build().unwrap()
}

/// A model's series of a scheduler metric (`name` with its `_total` etc. suffix).
fn metric(base: &str, name: &str) -> f64 {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let prefix = format!("{name}{{model=\"{CHAT}\"}} ");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{prefix} missing:\n{text}"));
    line[prefix.len()..].trim().parse().unwrap()
}

fn wait_for(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn chat(content: &str, max_tokens: usize, stream: bool) -> Value {
    json!({"model": CHAT, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, "stream": stream})
}

/// The content of a streamed chat reply, checking that it ends with a finish reason and
/// `[DONE]`.
fn streamed_content(body: &str) -> String {
    let mut content = String::new();
    let mut finished = false;
    let data: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    for d in &data[..data.len() - 1] {
        let v: Value = serde_json::from_str(d).unwrap();
        assert!(v.get("error").is_none(), "{v}");
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            content.push_str(c);
        }
        finished |= v["choices"][0]["finish_reason"].is_string();
    }
    assert!(finished, "no finish reason in {body}");
    content
}

#[test]
fn concurrent_streams_share_forward_steps_and_keep_their_solo_output() {
    let base = start(builder(scheduling(8, 16)));
    let prompts: Vec<String> =
        (0..6).map(|i| format!("Tell story number {i} about a {} cat", ["red", "blue", "green", "old", "young", "tiny"][i])).collect();
    let solo: Vec<String> = prompts
        .iter()
        .map(|p| {
            let r: Value = client().post(format!("{base}/v1/chat/completions")).json(&chat(p, 40, false)).send().unwrap().json().unwrap();
            r["choices"][0]["message"]["content"].as_str().unwrap().to_string()
        })
        .collect();
    let steps_before = metric(&base, "batch_size_count");
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (url, body) = (format!("{base}/v1/chat/completions"), chat(p, 40, true));
            std::thread::spawn(move || streamed_content(&client().post(url).json(&body).send().unwrap().text().unwrap()))
        })
        .collect();
    let together: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // the forward pass is batch-invariant: greedy outputs are the same alone or together
    assert_eq!(together, solo);
    // and they were decoded together: fewer steps than sequences x tokens, several per step
    let steps = metric(&base, "batch_size_count") - steps_before;
    assert!(steps > 0.0 && steps < 6.0 * 41.0 / 2.0, "{steps} steps for 6 outputs of up to 40 tokens");
    assert_eq!(metric(&base, "running_sequences"), 0.0);
}

#[test]
fn a_full_queue_answers_503_with_retry_after_and_accepted_requests_complete() {
    // two sequences at once and four waiting: a burst of 50 overflows
    let base = start(builder(scheduling(2, 4)));
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let (url, body) = (format!("{base}/v1/chat/completions"), chat(&format!("Story {i}"), 48, false));
            std::thread::spawn(move || {
                let r = client().post(url).json(&body).send().unwrap();
                let (status, retry) = (r.status(), r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string()));
                (status, retry, r.json::<Value>().unwrap())
            })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for h in handles {
        let (status, retry, body) = h.join().unwrap();
        match status {
            StatusCode::OK => {
                ok += 1;
                assert!(body["choices"][0]["message"]["content"].is_string(), "{body}");
                assert!(body["usage"]["completion_tokens"].as_u64().unwrap() >= 1);
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                refused += 1;
                assert!(retry.is_some_and(|s| s.parse::<u64>().is_ok()), "a 503 says when to retry");
                assert!(body["error"]["message"].is_string() && body["error"]["type"].is_string(), "{body}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(ok >= 6 && refused > 0, "{ok} served, {refused} refused");
    assert_eq!(ok + refused, 50);
    // nothing is left behind and the server serves on
    wait_for("the queue to empty", Duration::from_secs(30), || {
        metric(&base, "queue_depth") == 0.0 && metric(&base, "running_sequences") == 0.0
    });
    let again = client().post(format!("{base}/v1/chat/completions")).json(&chat("Hi", 4, false)).send().unwrap();
    assert_eq!(again.status(), StatusCode::OK);
}

#[test]
fn clients_that_hang_up_mid_stream_leave_no_sequence_running() {
    use std::io::{Read, Write};
    let base = start(builder(scheduling(8, 128)));
    let addr = base.trim_start_matches("http://").to_string();
    let handles: Vec<_> = (0..100)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let body = chat(&format!("Tell a very long story number {i}"), 480, true).to_string();
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                write!(
                    s,
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                // wait for the first content delta, then hang up
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while String::from_utf8_lossy(&seen).matches("data: ").count() < 3 {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "the stream ended early: {}", String::from_utf8_lossy(&seen));
                    seen.extend_from_slice(&buf[..n]);
                }
                assert!(seen.starts_with(b"HTTP/1.1 200"));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    wait_for("every sequence to be dropped", Duration::from_secs(60), || {
        metric(&base, "running_sequences") == 0.0 && metric(&base, "queue_depth") == 0.0
    });
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let cancelled: u64 = text.lines().find_map(|l| l.strip_prefix("requests_cancelled_total ")).unwrap().trim().parse().unwrap();
    // (a few may have finished before their client's hang-up was noticed)
    assert!(cancelled >= 50, "{cancelled} of 100 counted as cancelled");
    // cancelled sequences free their blocks: what remains is the prefix cache at most
    let (used, capacity) = (metric(&base, "kv_cache_blocks_used"), metric(&base, "kv_cache_blocks_capacity"));
    assert!(used <= 16.0 * 16.0, "{used}");
    // the inference gateway's KV-cache utilisation: the same state as a fraction
    assert!(capacity > 0.0);
    assert_eq!(metric(&base, "kv_cache_usage_ratio"), used / capacity);
}

#[test]
fn a_shared_system_prompt_is_computed_once() {
    let base = start(builder(scheduling(4, 8)));
    let system = "You are a careful assistant for a lighthouse. Answer in short sentences, name the tide, the wind and the lamp, and never speak of ships. ".repeat(4);
    let ask = |user: &str| {
        let body = json!({"model": CHAT, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}], "max_tokens": 4, "temperature": 0});
        client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json::<Value>().unwrap()
    };
    let first = ask("What is the tide?");
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let second = ask("And the wind?");
    let prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    // the whole system part (well over 100 tokens) came from the cache, the question did not
    assert!(cached > 100 && cached < prompt, "{cached} of {prompt} cached");
    assert!(metric(&base, "prefix_cache_hits_total") >= 1.0);
    assert!(metric(&base, "prompt_tokens_cached_total") >= cached as f64);
}

#[test]
fn unloading_a_busy_model_lets_its_streams_finish() {
    let base = start(builder(scheduling(8, 8)));
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let (url, body) = (format!("{base}/v1/chat/completions"), chat(&format!("Story {i}"), 200, true));
            std::thread::spawn(move || client().post(url).json(&body).send().unwrap().text().unwrap())
        })
        .collect();
    wait_for("the streams to start", Duration::from_secs(30), || metric(&base, "running_sequences") > 0.0);
    let deleted = client().delete(format!("{base}/v1/models/{CHAT}")).send().unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    // new requests no longer find it; those it accepted run to their end
    let late = client().post(format!("{base}/v1/chat/completions")).json(&chat("Hi", 4, false)).send().unwrap();
    assert_eq!(late.status(), StatusCode::NOT_FOUND);
    for h in handles {
        streamed_content(&h.join().unwrap());
    }
    wait_for("the engine thread to stop", Duration::from_secs(30), || metric(&base, "running_sequences") == 0.0);
}

#[test]
fn the_batch_scheduler_serves_non_streaming_requests_and_close_drains_it() {
    let batch = BatchConfig { max_batch_size: 4, batch_timeout: Duration::from_millis(20), max_in_flight: 4 };
    let server = Arc::new(builder(scheduling(8, 16)).batch_scheduler(batch).build().unwrap());
    let (base, serving) = start_server(server.clone());
    let plain = start(builder(scheduling(8, 16)));
    let ask = |base: &str, i: usize| {
        let r = client().post(format!("{base}/v1/chat/completions")).json(&chat(&format!("Tell story {i}"), 24, false)).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<Value>().unwrap()["choices"][0]["message"]["content"].as_str().unwrap().to_string()
    };
    let expected: Vec<String> = (0..8).map(|i| ask(&plain, i)).collect();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let base = base.clone();
            std::thread::spawn(move || ask(&base, i))
        })
        .collect();
    // close while they are in flight: each still gets its answer, then `serve` returns
    std::thread::sleep(Duration::from_millis(50));
    server.close();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, expected);
    serving.join().unwrap();
    assert!(!server.state().batcher.as_ref().unwrap().is_running());
}

#[test]
fn a_request_larger_than_the_kv_cache_is_refused_and_others_wait_their_turn() {
    // room for 192 positions and a copy-on-write block for each of the 4 slots (10 blocks of
    // 32): two sequences of 100 tokens at a time
    let base = start(builder(Scheduling { parallel: 4, queue: 8, kv_positions: Some(192), ..Scheduling::default() }));
    let too_big = client().post(format!("{base}/v1/chat/completions")).json(&chat("Hi", 400, false)).send().unwrap();
    assert_eq!(too_big.status(), StatusCode::BAD_REQUEST);
    let e: Value = too_big.json().unwrap();
    assert_eq!(e["error"]["code"], "context_length_exceeded", "{e}");
    // four requests of 100 tokens each fit one at a time: they wait for room, then all finish
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let (url, body) = (format!("{base}/v1/chat/completions"), chat(&format!("Story {i}"), 100, false));
            std::thread::spawn(move || client().post(url).json(&body).send().unwrap().status())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), StatusCode::OK);
    }
    assert!(metric(&base, "kv_cache_blocks_capacity") == 10.0);
}

#[test]
fn one_slot_may_fill_its_whole_context() {
    // the cache holds one context: a request without a token limit may still use all of it
    let base = start(builder(scheduling(1, 4)));
    let mut body = chat("Hi", 0, false);
    body.as_object_mut().unwrap().remove("max_tokens");
    for body in [body, chat("Hi", 4096, false)] {
        let r = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{}", r.text().unwrap());
    }
    assert!(metric(&base, "kv_cache_blocks_capacity") == (512 / 32 + 1) as f64);
}

#[test]
fn sixty_four_streaming_clients_for_a_while_all_complete() {
    let base = start(builder(scheduling(16, 64)));
    let until = std::time::Instant::now() + Duration::from_secs(4);
    let handles: Vec<_> = (0..64)
        .map(|i| {
            let base = base.clone();
            std::thread::spawn(move || {
                let mut done = 0;
                while std::time::Instant::now() < until {
                    let body = json!({"model": CHAT, "messages": [{"role": "user", "content": format!("Story {i}.{done}")}], "max_tokens": 32, "temperature": 0.8, "seed": i, "stream": true});
                    let r = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
                    assert_eq!(r.status(), StatusCode::OK);
                    streamed_content(&r.text().unwrap());
                    done += 1;
                }
                done
            })
        })
        .collect();
    let completed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(completed >= 64, "{completed} streams");
    // the gauges are set after each step, a moment after its last answers went out
    wait_for("the gauges to settle", Duration::from_secs(5), || {
        metric(&base, "running_sequences") == 0.0 && metric(&base, "queue_depth") == 0.0
    });
}
