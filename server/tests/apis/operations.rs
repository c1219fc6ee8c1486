//! Operations over real TCP: request deadlines (`timeout`, the server's default and maximum: a
//! generation cut as `length`, or 408 before its first token) and readiness (`GET /ready`
//! answers 503 while a model's queue is full). Cuts that need a generation slower than its
//! deadline use the real Qwen2.5-Coder-0.5B; the rest the tiny llama fixture.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{post, start};
use engine::model::Model;
use engine_tests::{fetch_model, fixture};
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Scheduling, Server, ServerBuilder};

const TINY: &str = "tiny-llama";
const QWEN: &str = "qwen";

fn tiny() -> ServerBuilder {
    let model = Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap());
    Server::builder().model(ModelSpec { id: TINY.into(), model, chat: true, guard: false, n_ctx: Some(512), draft: None })
}

fn qwen(scheduling: Scheduling) -> ServerBuilder {
    let model = Arc::new(Model::load(fetch_model("qwen2.5-coder")).unwrap());
    Server::builder().scheduling(scheduling).model(ModelSpec {
        id: QWEN.into(),
        model,
        chat: true,
        guard: false,
        n_ctx: Some(1024),
        draft: None,
    })
}

fn chat(model: &str, max_tokens: u64) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}], "max_tokens": max_tokens, "temperature": 0})
}

#[test]
fn a_deadline_before_the_first_token_is_a_408_and_timeouts_are_checked() {
    let base = start(tiny().request_timeouts(None, Some(Duration::from_secs(60))));
    let mut body = chat(TINY, 64);
    body["timeout"] = json!(1e-9);
    let (s, e) = post(&base, "/v1/chat/completions", body.clone());
    assert_eq!(
        (s, e["error"]["code"].as_str(), e["error"]["type"].as_str()),
        (StatusCode::REQUEST_TIMEOUT, Some("request_timeout"), Some("timeout_error")),
        "{e}"
    );
    let r = Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
    assert_eq!(r.headers()["x-should-retry"], "false");
    // streamed: the error is the stream's event
    body["stream"] = json!(true);
    let text = Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().text().unwrap();
    assert!(text.contains("\"request_timeout\"") && text.ends_with("data: [DONE]\n\n"), "{text}");
    // text completions too
    let (s, _) = post(&base, "/v1/completions", json!({"model": TINY, "prompt": "Once", "max_tokens": 8, "timeout": 1e-9}));
    assert_eq!(s, StatusCode::REQUEST_TIMEOUT);
    for bad in [json!(0), json!(-1), json!(61), json!("soon")] {
        let mut body = chat(TINY, 4);
        body["timeout"] = bad.clone();
        let (s, e) = post(&base, "/v1/chat/completions", body);
        assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("timeout")), "{bad}: {e}");
    }
    // a deadline that is not reached changes nothing
    let (_, plain) = post(&base, "/v1/chat/completions", chat(TINY, 8));
    let mut body = chat(TINY, 8);
    body["timeout"] = json!(30);
    let (_, timed) = post(&base, "/v1/chat/completions", body);
    assert_eq!(timed["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);
    // a default above the maximum is refused at start
    assert!(tiny().request_timeouts(Some(Duration::from_secs(9)), Some(Duration::from_secs(5))).build().is_err());
}

#[test]
fn a_deadline_cuts_a_generation_as_length_and_a_full_queue_is_not_ready() {
    let base =
        start(qwen(Scheduling { parallel: 1, queue: 0, ..Scheduling::default() }).request_timeouts(Some(Duration::from_millis(700)), None));
    let c = Client::new();
    let ready = || c.get(format!("{base}/ready")).send().unwrap();
    let r = ready();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap()["status"], "ready");
    // the server's default deadline: 256 tokens take this model several seconds
    let started = Instant::now();
    let (s, cut) = post(&base, "/v1/chat/completions", chat(QWEN, 256));
    let took = started.elapsed();
    assert_eq!(s, StatusCode::OK, "{cut}");
    assert_eq!(cut["choices"][0]["finish_reason"], "length", "{cut}");
    let tokens = cut["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens < 256, "{cut}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // its text is the start of the uncut reply
    let mut longer = chat(QWEN, tokens);
    longer["timeout"] = json!(120);
    let (_, whole) = post(&base, "/v1/chat/completions", longer);
    // the place of an answered request is free at once: a client's next request is not refused
    assert_eq!(ready().status(), StatusCode::OK);
    assert_eq!(whole["choices"][0]["message"]["content"], cut["choices"][0]["message"]["content"]);
    // one sequence and no queue: while a request runs the model is full and the server is not ready
    let runner = {
        let base = base.clone();
        std::thread::spawn(move || {
            let mut body = chat(QWEN, 24);
            body["timeout"] = json!(120);
            post(&base, "/v1/chat/completions", body).0
        })
    };
    let mut seen_busy = false;
    while !runner.is_finished() {
        let r = ready();
        if r.status() == StatusCode::SERVICE_UNAVAILABLE {
            let body: Value = r.json().unwrap();
            assert!(body["reason"].as_str().unwrap().contains("queue of qwen is full"), "{body}");
            seen_busy = true;
            let (s, _) = post(&base, "/v1/chat/completions", chat(QWEN, 4));
            assert!(s == StatusCode::SERVICE_UNAVAILABLE || s == StatusCode::OK, "{s}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(runner.join().unwrap(), StatusCode::OK);
    assert!(seen_busy, "the server never said it was busy");
    assert_eq!(ready().status(), StatusCode::OK);
}
