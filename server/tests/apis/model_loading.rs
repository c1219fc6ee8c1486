//! Models loaded and unloaded while the server runs, over real TCP with the tiny fixtures: `POST
//! /v1/models` from a models directory (roles, names that are not bare file names, corrupt files,
//! duplicates), unloading with DELETE, 8 streams on one model while another is loaded and unloaded
//! 10 times, and idle unloading with the reload a later request waits for (a stream gets progress
//! comments meanwhile).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{post, start};
use engine::backend::Device;
use engine::model::Model;
use engine_tests::fixture;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server, ServerBuilder};

const A: &str = "tiny-llama";
const B: &str = "tiny-granite-Q8_0";

/// A fresh models directory holding the tiny granite fixture, an encoder (MiniLM), a corrupt
/// file, and a link to a file outside it.
fn models_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("engine-models-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("models/tiny-granite-Q8_0.gguf"), dir.join("tiny-granite-Q8_0.gguf")).unwrap();
    std::fs::write(dir.join("broken.gguf"), b"GGUF not really").unwrap();
    std::os::unix::fs::symlink(fixture("models/tiny-llama-Q8_0.gguf"), dir.join("outside.gguf")).unwrap();
    std::fs::copy(fixture("real/all-MiniLM-L6-v2-Q8_0.gguf"), dir.join("minilm.gguf")).unwrap();
    dir
}

fn builder() -> ServerBuilder {
    let model = Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap());
    Server::builder().model(ModelSpec { id: A.into(), model, chat: true, guard: false, n_ctx: Some(512), draft: None })
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0, "stream": stream})
}

#[test]
fn models_of_the_directory_load_with_their_role_and_unload() {
    let dir = models_dir("roles");
    let base = start(builder().models_dir(dir.clone(), Device::Cpu, Some(256)));
    let c = Client::new();
    let (s, m) = post(&base, "/v1/models", json!({"model": B}));
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!((m["id"].as_str(), m["context_length"].as_u64(), m["status"].as_str()), (Some(B), Some(256), Some("loaded")), "{m}");
    assert_eq!(m["capabilities"], json!(["chat", "completion", "embedding"]));
    let listed: Value = c.get(format!("{base}/v1/models")).send().unwrap().json().unwrap();
    assert_eq!(listed["data"].as_array().unwrap().len(), 2, "{listed}");
    let (s, reply) = post(&base, "/v1/chat/completions", chat(B, false));
    assert_eq!(s, StatusCode::OK, "{reply}");
    // once is enough
    let (s, e) = post(&base, "/v1/models", json!({"model": "tiny-granite-Q8_0.gguf"}));
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("conflict")), "{e}");
    // unloaded, then loaded again under another id and as an embedding model only
    assert_eq!(c.delete(format!("{base}/v1/models/{B}")).send().unwrap().status(), StatusCode::OK);
    assert_eq!(post(&base, "/v1/chat/completions", chat(B, false)).0, StatusCode::NOT_FOUND);
    let (s, m) = post(&base, "/v1/models", json!({"model": B, "id": "granite-embed", "role": "embedding"}));
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!(m["capabilities"], json!(["embedding"]));
    let (s, e) = post(&base, "/v1/chat/completions", chat("granite-embed", false));
    assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("model")), "{e}");
    let (s, e) = post(&base, "/v1/embeddings", json!({"model": "granite-embed", "input": "Hello"}));
    assert_eq!(s, StatusCode::OK, "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn only_bare_file_names_of_the_directory_load() {
    let dir = models_dir("names");
    let base = start(builder().models_dir(dir.clone(), Device::Cpu, None));
    let cases = [
        (json!({"model": "../models/tiny-llama-Q8_0.gguf"}), StatusCode::BAD_REQUEST, "model"),
        (json!({"model": "sub/dir.gguf"}), StatusCode::BAD_REQUEST, "model"),
        (json!({"model": ".hidden"}), StatusCode::BAD_REQUEST, "model"),
        (json!({"model": "/etc/passwd"}), StatusCode::BAD_REQUEST, "model"),
        (json!({"model": "outside"}), StatusCode::BAD_REQUEST, "model"),
        (json!({"model": "missing"}), StatusCode::NOT_FOUND, "model"),
        (json!({"model": "broken"}), StatusCode::BAD_REQUEST, "model"),
        (json!({"model": B, "role": "transcription"}), StatusCode::BAD_REQUEST, "role"),
        (json!({"model": B, "role": "robot"}), StatusCode::BAD_REQUEST, "role"),
        (json!({"model": "minilm", "role": "chat"}), StatusCode::BAD_REQUEST, "role"),
        (json!({"model": B, "context_length": 0}), StatusCode::BAD_REQUEST, "context_length"),
        (json!({"model": B, "id": A}), StatusCode::CONFLICT, "id"),
        (json!({"role": "chat"}), StatusCode::BAD_REQUEST, "model"),
    ];
    for (body, status, param) in cases {
        let (s, e) = post(&base, "/v1/models", body.clone());
        assert_eq!((s, e["error"]["param"].as_str()), (status, Some(param)), "{body} -> {e}");
    }
    let (_, e) = post(&base, "/v1/models", json!({"model": "broken"}));
    assert!(e["error"]["message"].as_str().unwrap().starts_with("broken.gguf: "), "{e}");
    let (_, e) = post(&base, "/v1/models", json!({"model": "minilm", "role": "chat"}));
    assert!(e["error"]["message"].as_str().unwrap().contains("an encoder model (bert) cannot chat"), "{e}");
    // nothing was loaded by any of them
    let listed: Value = Client::new().get(format!("{base}/v1/models")).send().unwrap().json().unwrap();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_server_without_a_models_directory_loads_nothing() {
    let base = start(builder());
    let r = Client::new().post(format!("{base}/v1/models")).json(&json!({"model": B})).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "GET");
}

/// The `data:` payloads of a chat stream, checked to end with `[DONE]` and hold no error.
fn streamed_ok(text: &str) -> bool {
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    data.last() == Some(&"[DONE]") && data.iter().all(|d| !d.contains("\"error\""))
}

#[test]
fn streams_on_one_model_go_on_while_another_is_loaded_and_unloaded() {
    let dir = models_dir("under-load");
    let base = start(builder().models_dir(dir.clone(), Device::Cpu, Some(256)));
    let stop = Arc::new(AtomicBool::new(false));
    let streams: Vec<_> = (0..8)
        .map(|i| {
            let (base, stop) = (base.clone(), stop.clone());
            std::thread::spawn(move || {
                let c = Client::new();
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) || done == 0 {
                    let body = json!({"model": A, "messages": [{"role": "user", "content": format!("Story {i}")}], "max_tokens": 48, "stream": true, "seed": i});
                    let r = c.post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
                    assert_eq!(r.status(), StatusCode::OK);
                    let text = r.text().unwrap();
                    assert!(streamed_ok(&text), "stream {i}: {text}");
                    done += 1;
                }
                done
            })
        })
        .collect();
    let c = Client::new();
    for round in 0..10 {
        let (s, m) = post(&base, "/v1/models", json!({"model": B}));
        assert_eq!(s, StatusCode::OK, "round {round}: {m}");
        let (s, reply) = post(&base, "/v1/chat/completions", chat(B, false));
        assert_eq!(s, StatusCode::OK, "round {round}: {reply}");
        assert_eq!(c.delete(format!("{base}/v1/models/{B}")).send().unwrap().status(), StatusCode::OK, "round {round}");
    }
    stop.store(true, Ordering::Relaxed);
    let finished: usize = streams.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(finished >= 8, "{finished}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_idle_model_is_unloaded_and_loaded_again_by_the_next_request() {
    let path = fixture("models/tiny-llama-Q8_0.gguf");
    let model = Arc::new(Model::load(&path).unwrap());
    let spec = ModelSpec { id: A.into(), model, chat: true, guard: false, n_ctx: Some(512), draft: None };
    // idle for a second: `loaded` is asserted after a request, and on a busy 2-core machine a
    // shorter idle time (300 ms) ran out between the reply and that check
    let base = start(Server::builder().model_file(spec, path).idle_unload(Duration::from_secs(1)));
    let c = Client::new();
    let status = || -> Value { c.get(format!("{base}/v1/models/{A}")).send().unwrap().json::<Value>().unwrap()["status"].clone() };
    let wait_unloaded = || {
        for _ in 0..100 {
            if status() == "unloaded" {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the model was not unloaded");
    };
    let (s, first) = post(&base, "/v1/chat/completions", chat(A, false));
    assert_eq!(s, StatusCode::OK, "{first}");
    wait_unloaded();
    let listed: Value = c.get(format!("{base}/v1/models")).send().unwrap().json().unwrap();
    assert_eq!(listed["data"][0]["status"], "unloaded", "{listed}");
    // the next request waits for the model and gets the same greedy reply
    let (s, again) = post(&base, "/v1/chat/completions", chat(A, false));
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]);
    assert_eq!(status(), "loaded");
    // a stream is answered at once: a progress comment, then the route's own stream
    wait_unloaded();
    let text = c.post(format!("{base}/v1/chat/completions")).json(&chat(A, true)).send().unwrap().text().unwrap();
    assert!(text.starts_with(&format!(": loading {A} (0 s)\n\n")), "{text}");
    assert!(streamed_ok(&text), "{text}");
    let streamed: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).unwrap()["choices"][0]["delta"]["content"].as_str().map(String::from))
        .collect();
    assert_eq!(json!(streamed), first["choices"][0]["message"]["content"]);
    // deleting a parked model forgets it
    wait_unloaded();
    assert_eq!(c.delete(format!("{base}/v1/models/{A}")).send().unwrap().status(), StatusCode::OK);
    assert_eq!(post(&base, "/v1/chat/completions", chat(A, false)).0, StatusCode::NOT_FOUND);
}
