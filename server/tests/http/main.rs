//! The server over real TCP on 127.0.0.1 with a real HTTP client: the tiny llama fixture as chat
//! model and the tiny Guardian 3.0 fixture as guard. Routes, error statuses and bodies, SSE
//! framing, usage counts against the tokenizer, guard routes, unloading, metrics; speculative
//! decoding (`speculation.rs`); llama-server's `/infill` (`editor.rs`), `/completion`
//! (`llama_completion.rs`), its timings and progress reports (`stream_extras.rs`), and its other
//! routes and names (`llama_routes.rs`).

#[path = "../common/mod.rs"]
mod common;
mod editor;
mod llama_completion;
mod llama_routes;
mod speculation;
mod stream_extras;

use std::sync::Arc;

use common::start;
use engine::chat::{tokenize_rendered, ChatInput, ChatTemplate};
use engine::model::Model;
use engine_tests::fixture;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server, ServerBuilder};

const CHAT: &str = "tiny-llama";
const GUARD: &str = "guardian-tiny-3.0";

fn chat_model() -> Arc<Model> {
    Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap())
}

fn builder() -> ServerBuilder {
    let guard = Arc::new(Model::load(fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf")).unwrap());
    Server::builder()
        .model(ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(512), draft: None })
        .model(ModelSpec { id: GUARD.into(), model: guard, chat: false, guard: true, n_ctx: Some(1024), draft: None })
        .max_body_bytes(64 << 10)
}

fn client() -> Client {
    Client::builder().timeout(std::time::Duration::from_secs(120)).build().unwrap()
}

/// Asserts the OpenAI error shape and status; returns the error object.
fn expect_error(r: reqwest::blocking::Response, status: StatusCode) -> Value {
    assert_eq!(r.status(), status);
    let body: Value = r.json().unwrap();
    let e = &body["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "{body}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "all four keys: {body}");
    e.clone()
}

fn prompt_tokens(messages: &Value) -> usize {
    let model = chat_model();
    let template = ChatTemplate::from_model(&model).unwrap();
    let text = template.render(&ChatInput { add_generation_prompt: true, ..ChatInput::new(messages.as_array().unwrap().clone()) }).unwrap();
    tokenize_rendered(model.tokenizer(), &text).len()
}

#[test]
fn models_health_and_metrics() {
    let base = start(builder());
    let c = client();
    assert_eq!(c.get(format!("{base}/health")).send().unwrap().json::<Value>().unwrap()["status"], "ok");
    let list: Value = c.get(format!("{base}/v1/models")).send().unwrap().json().unwrap();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [GUARD, CHAT]);
    let m: Value = c.get(format!("{base}/v1/models/{CHAT}")).send().unwrap().json().unwrap();
    assert_eq!((m["object"].as_str(), m["owned_by"].as_str(), m["architecture"].as_str()), (Some("model"), Some("local"), Some("llama")));
    assert!(m["created"].is_u64() && m["context_length"] == 512);
    let e = expect_error(c.get(format!("{base}/v1/models/nope")).send().unwrap(), StatusCode::NOT_FOUND);
    assert_eq!(e["code"], "model_not_found");
    let doc = c.get(format!("{base}/openapi.yaml")).send().unwrap().text().unwrap();
    assert!(doc.starts_with("openapi: 3."));
    for route in [
        "/health:",
        "/metrics:",
        "/openapi.yaml:",
        "/v1/models:",
        "/v1/models/{model}:",
        "/v1/chat/completions:",
        "/v1/completions:",
        "/v1/embeddings:",
        "/v1/guard:",
        "/v1/guard/scan:",
        "/v1/guard/batch:",
    ] {
        assert!(doc.contains(&format!("\n  {route}\n")), "{route} is not described");
    }
    // routes that are off are not described; model ids are the loaded ones
    assert!(!doc.contains("/v1/audio/transcriptions:"));
    // no adapters: listing them is on, setting them and naming one in a request are not
    assert!(doc.contains("operationId: listLoraAdapters") && !doc.contains("operationId: setLoraAdapters"));
    assert!(doc.contains("      maxItems: 0\n      items: {$ref: \"#/components/schemas/LoraChoice\"}"));
    let r = c.post(format!("{base}/lora-adapters")).json(&json!([])).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(c.get(format!("{base}/lora-adapters")).send().unwrap().json::<Value>().unwrap(), json!([]));
    assert!(doc.contains(&format!("    ChatModelId: {{type: string, enum: [\"{CHAT}\"]}}")), "{doc}");
    assert!(doc.contains(&format!("    GuardModelId: {{type: string, enum: [\"{GUARD}\"]}}")));
    let metrics = c.get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    for name in ["requests_total", "tokens_generated_total", "request_latency_ms_bucket", "guard_requests_total", "guard_latency_ms_bucket"]
    {
        assert!(metrics.contains(name), "{name} missing from\n{metrics}");
    }
}

#[test]
fn chat_completion_counts_usage_like_the_tokenizer() {
    let base = start(builder());
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]);
    let body = json!({"model": CHAT, "messages": messages, "max_tokens": 8, "temperature": 0, "seed": 7});
    let r: Value = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json().unwrap();
    assert_eq!(r["object"], "chat.completion");
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r["model"], CHAT);
    let choice = &r["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"]["content"].is_string());
    assert!(choice["message"].get("refusal").is_some());
    let usage = &r["usage"];
    assert_eq!(usage["prompt_tokens"].as_u64().unwrap() as usize, prompt_tokens(&messages));
    let completion = usage["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion));
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), usage["prompt_tokens"].as_u64().unwrap() + completion);
    let finish = choice["finish_reason"].as_str().unwrap();
    assert!(finish == "length" && completion == 8 || finish == "stop", "{r}");
    // greedy: the same request gives the same text (the second reuses the cached prompt)
    let again: Value = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json().unwrap();
    assert_eq!(again["choices"][0]["message"]["content"], choice["message"]["content"]);
    assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0);
}

/// `data:` payloads of an SSE body (`common::sse_records`); framing checked: every event is an
/// unnamed `message`.
fn sse_events(text: &str) -> Vec<String> {
    common::sse_records(text)
        .into_iter()
        .map(|(name, data)| {
            assert_eq!(name, "message", "unnamed events only");
            data
        })
        .collect()
}

#[test]
fn streaming_sends_role_once_then_deltas_finish_usage_and_done() {
    let base = start(builder());
    let body = json!({
        "model": CHAT, "messages": [{"role": "user", "content": "Count"}], "max_tokens": 6, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true}, "n": 2,
    });
    let r = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = sse_events(&r.text().unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(chunks.iter().all(|c| c["id"] == id && c["object"] == "chat.completion.chunk"));
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null()), "usage is null before the last chunk");
    let mut text = [String::new(), String::new()];
    for index in 0..2 {
        let mine: Vec<&Value> = chunks.iter().filter(|c| c["choices"][0]["index"] == index).collect();
        assert_eq!(mine[0]["choices"][0]["delta"]["role"], "assistant");
        assert!(mine[1..].iter().all(|c| c["choices"][0]["delta"].get("role").is_none()), "role only in the first chunk");
        let last = mine.last().unwrap();
        assert_eq!(last["choices"][0]["delta"], json!({}));
        assert!(last["choices"][0]["finish_reason"].is_string());
        for c in &mine {
            text[index as usize].push_str(c["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
        }
    }
    assert_eq!(text[0], text[1], "greedy choices agree");
    let u = &usage_chunk["usage"];
    assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()));
    // the streamed text is the non-streamed text
    let plain: Value = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": CHAT, "messages": [{"role": "user", "content": "Count"}], "max_tokens": 6, "temperature": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(plain["choices"][0]["message"]["content"].as_str().unwrap(), text[0]);
}

#[test]
fn errors_have_the_openai_shape_and_status() {
    let base = start(builder());
    let c = client();
    let url = format!("{base}/v1/chat/completions");
    let post = |body: &str| c.post(&url).header("content-type", "application/json").body(body.to_string()).send().unwrap();
    expect_error(post("{not json"), StatusCode::BAD_REQUEST);
    expect_error(post("[1, 2]"), StatusCode::BAD_REQUEST);
    assert_eq!(expect_error(post(r#"{"messages": [{"role": "user", "content": "x"}]}"#), StatusCode::BAD_REQUEST)["param"], "model");
    let e = expect_error(post(r#"{"model": "nope", "messages": [{"role": "user", "content": "x"}]}"#), StatusCode::NOT_FOUND);
    assert_eq!(e["code"], "model_not_found");
    for (field, value) in [
        ("temperature", json!(3)),
        ("top_p", json!(-1)),
        ("n", json!(0)),
        ("max_tokens", json!(0)),
        ("top_logprobs", json!(21)),
        ("presence_penalty", json!(9)),
        ("stop", json!(["a", "b", "c", "d", "e"])),
        ("logit_bias", json!({"99999999": 1})),
    ] {
        let mut body = json!({"model": CHAT, "messages": [{"role": "user", "content": "x"}], "logprobs": true});
        body[field] = value;
        let e = expect_error(c.post(&url).json(&body).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], field, "{e}");
    }
    let image = json!({"model": CHAT, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]});
    let e = expect_error(c.post(&url).json(&image).send().unwrap(), StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("no vision"), "{e}");
    let no_stream = json!({"model": CHAT, "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}});
    expect_error(c.post(&url).json(&no_stream).send().unwrap(), StatusCode::BAD_REQUEST);
    expect_error(c.get(&url).send().unwrap(), StatusCode::METHOD_NOT_ALLOWED);
    expect_error(c.get(format!("{base}/v1/nothing")).send().unwrap(), StatusCode::NOT_FOUND);
    let big = format!(r#"{{"model": "{CHAT}", "messages": [{{"role": "user", "content": "{}"}}]}}"#, "x".repeat(100 << 10));
    expect_error(post(&big), StatusCode::PAYLOAD_TOO_LARGE);
}

#[test]
fn an_api_key_is_required_when_configured() {
    let base = start(builder().api_key(Some("sekrit".into())));
    let c = client();
    let e = expect_error(c.get(format!("{base}/v1/models")).send().unwrap(), StatusCode::UNAUTHORIZED);
    assert_eq!(e["type"], "authentication_error");
    expect_error(c.get(format!("{base}/v1/models")).bearer_auth("wrong").send().unwrap(), StatusCode::UNAUTHORIZED);
    assert_eq!(c.get(format!("{base}/v1/models")).bearer_auth("sekrit").send().unwrap().status(), StatusCode::OK);
    // health stays open for probes
    assert_eq!(c.get(format!("{base}/health")).send().unwrap().status(), StatusCode::OK);
}

#[test]
fn guard_routes_follow_the_contract() {
    let base = start(builder());
    let c = client();
    let scan: Value = c
        .post(format!("{base}/v1/guard/scan"))
        .json(&json!({"model": GUARD, "input": {"user": "How do I pick a lock?"}}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(scan["model"], GUARD);
    assert_eq!(scan["verdicts"].as_array().unwrap().len(), 9);
    assert!(scan["latency_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(scan.get("highest_risk").is_some(), scan["flagged"].as_bool().unwrap());
    for v in scan["verdicts"].as_array().unwrap() {
        assert!(v["unsafe"].is_boolean() && v["confidence"].is_number() && v["risk_probability"].is_number());
    }
    let one: Value = c
        .post(format!("{base}/v1/guard"))
        .json(&json!({"model": GUARD, "input": {"user": "Hello", "assistant": "Hi"}, "risks": ["harm", "profanity"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(one["verdicts"].as_array().unwrap().len(), 2);
    let batch: Value = c
        .post(format!("{base}/v1/guard/batch"))
        .json(&json!({"model": GUARD, "inputs": [{"user": "a"}, {"user": "b"}], "risks": ["harm"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let indexes: Vec<u64> = batch["results"].as_array().unwrap().iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(indexes, [0, 1]);
    for (body, status, message) in [
        (json!({"input": {"user": "x"}}), StatusCode::BAD_REQUEST, "model is required"),
        (json!({"model": "nope", "input": {"user": "x"}}), StatusCode::NOT_FOUND, ""),
        (json!({"model": GUARD, "input": {"user": ""}}), StatusCode::BAD_REQUEST, "input.user is required"),
        (json!({"model": GUARD, "input": {"user": "x"}, "risks": ["nope"]}), StatusCode::BAD_REQUEST, "invalid risk category: nope"),
        (
            json!({"model": GUARD, "input": {"user": "x"}, "format": "3.1"}),
            StatusCode::BAD_REQUEST,
            "unsupported format \"3.1\" (must be 3.0, 3.2, or 3.3)",
        ),
    ] {
        let e = expect_error(c.post(format!("{base}/v1/guard")).json(&body).send().unwrap(), status);
        assert!(e["message"].as_str().unwrap().contains(message), "{e}");
    }
    let e = expect_error(
        c.post(format!("{base}/v1/guard/batch")).json(&json!({"model": GUARD, "inputs": []})).send().unwrap(),
        StatusCode::BAD_REQUEST,
    );
    assert_eq!(e["message"], "inputs is required");
    let many: Vec<Value> = (0..257).map(|_| json!({"user": "x"})).collect();
    let e = expect_error(
        c.post(format!("{base}/v1/guard/batch")).json(&json!({"model": GUARD, "inputs": many})).send().unwrap(),
        StatusCode::BAD_REQUEST,
    );
    assert_eq!(e["message"], "inputs exceeds maximum batch size of 256");
    let metrics = c.get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let line = metrics.lines().find(|l| l.starts_with("guard_requests_total")).unwrap();
    assert!(line.split_whitespace().last().unwrap().parse::<f64>().unwrap() >= 10.0, "{line}");
}

#[test]
fn guard_routes_are_absent_without_a_guard_and_delete_unloads() {
    let base = plain_chat_server();
    let c = client();
    expect_error(
        c.post(format!("{base}/v1/guard")).json(&json!({"model": CHAT, "input": {"user": "x"}})).send().unwrap(),
        StatusCode::NOT_FOUND,
    );
    let d: Value = c.delete(format!("{base}/v1/models/{CHAT}")).send().unwrap().json().unwrap();
    assert_eq!(d, json!({"id": CHAT, "object": "model", "deleted": true}));
    expect_error(c.get(format!("{base}/v1/models/{CHAT}")).send().unwrap(), StatusCode::NOT_FOUND);
    let body = json!({"model": CHAT, "messages": [{"role": "user", "content": "x"}]});
    expect_error(c.post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap(), StatusCode::NOT_FOUND);
    expect_error(c.delete(format!("{base}/v1/models/{CHAT}")).send().unwrap(), StatusCode::NOT_FOUND);
}

#[test]
fn embeddings_as_floats_base64_token_ids_and_dimensions() {
    use base64::Engine as _;
    let base = start(builder());
    let c = client();
    let url = format!("{base}/v1/embeddings");
    let post = |body: Value| -> Value { c.post(&url).json(&body).send().unwrap().json().unwrap() };
    let floats = post(json!({"model": CHAT, "input": ["Hello world", "Second text"]}));
    assert_eq!(floats["object"], "list");
    let data = floats["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let v0: Vec<f32> = data[0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    let norm: f32 = v0.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "unit length, got {norm}");
    let model = chat_model();
    let ids = engine::embed::tokenize(&model, &["Hello world", "Second text"]).unwrap();
    assert_eq!(floats["usage"]["prompt_tokens"].as_u64().unwrap() as usize, ids[0].len() + ids[1].len());
    let b64 = post(json!({"model": CHAT, "input": "Hello world", "encoding_format": "base64"}));
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(decoded, v0);
    let by_ids = post(json!({"model": CHAT, "input": ids[0]}));
    let from_ids: Vec<f32> = by_ids["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert_eq!(from_ids, v0);
    let short = post(json!({"model": CHAT, "input": "Hello world", "dimensions": 8}));
    let s: Vec<f64> = short["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!(s.len(), 8);
    assert!((s.iter().map(|x| x * x).sum::<f64>().sqrt() - 1.0).abs() < 1e-4);
    for (body, param) in [
        (json!({"model": CHAT, "input": []}), "input"),
        (json!({"model": CHAT, "input": [""]}), "input"),
        (json!({"model": CHAT}), "input"),
        (json!({"model": CHAT, "input": "x", "encoding_format": "hex"}), "encoding_format"),
        (json!({"model": CHAT, "input": "x", "dimensions": 100000}), "dimensions"),
        (json!({"model": CHAT, "input": [[99999999]]}), "input"),
    ] {
        let e = expect_error(c.post(&url).json(&body).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], param, "{body}: {e}");
    }
}

#[test]
fn legacy_completions_with_echo_logprobs_and_streaming() {
    let base = start(builder());
    let c = client();
    let url = format!("{base}/v1/completions");
    let prompt = "The quick brown fox";
    let r: Value = c
        .post(&url)
        .json(&json!({"model": CHAT, "prompt": prompt, "temperature": 0, "max_tokens": 4, "echo": true, "logprobs": 2}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(r["object"], "text_completion");
    assert!(r["id"].as_str().unwrap().starts_with("cmpl-"));
    let choice = &r["choices"][0];
    let model = chat_model();
    let prompt_ids = model.tokenizer().encode(prompt, true, true);
    assert!(choice["text"].as_str().unwrap().starts_with(&model.tokenizer().decode(&prompt_ids)));
    let lp = &choice["logprobs"];
    let completion = r["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(r["usage"]["prompt_tokens"].as_u64().unwrap() as usize, prompt_ids.len());
    assert_eq!(lp["tokens"].as_array().unwrap().len(), prompt_ids.len() + completion);
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(), "the first prompt token has no log-prob");
    assert!(lp["token_logprobs"][1].as_f64().unwrap() <= 0.0);
    assert_eq!(lp["top_logprobs"][1].as_object().unwrap().len(), 2);
    let offsets: Vec<u64> = lp["text_offset"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]) && offsets[0] == 0);
    // default max_tokens is 16; several prompts x n give prompt-major indexes
    let many: Value =
        c.post(&url).json(&json!({"model": CHAT, "prompt": ["a", "b"], "n": 2, "temperature": 0})).send().unwrap().json().unwrap();
    let idx: Vec<u64> = many["choices"].as_array().unwrap().iter().map(|c| c["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    assert!(many["usage"]["completion_tokens"].as_u64().unwrap() <= 4 * 16);
    // token-id prompt = text prompt
    let by_ids: Value =
        c.post(&url).json(&json!({"model": CHAT, "prompt": prompt_ids, "temperature": 0, "max_tokens": 4})).send().unwrap().json().unwrap();
    let by_text: Value =
        c.post(&url).json(&json!({"model": CHAT, "prompt": prompt, "temperature": 0, "max_tokens": 4})).send().unwrap().json().unwrap();
    assert_eq!(by_ids["choices"][0]["text"], by_text["choices"][0]["text"]);
    // streaming: text_completion chunks, then the finish chunk, usage, [DONE]
    let text = c
        .post(&url)
        .json(&json!({"model": CHAT, "prompt": prompt, "temperature": 0, "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let events = sse_events(&text);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let streamed: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert_eq!(streamed, by_text["choices"][0]["text"].as_str().unwrap());
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    for (body, param) in [
        (json!({"model": CHAT}), "prompt"),
        (json!({"model": CHAT, "prompt": "x", "logprobs": 6}), "logprobs"),
        (json!({"model": CHAT, "prompt": "x", "suffix": "y"}), "suffix"),
        (json!({"model": CHAT, "prompt": [[]]}), "prompt"),
    ] {
        let e = expect_error(c.post(&url).json(&body).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], param, "{body}: {e}");
    }
}

/// The chat model served alone (no guard, no speculation).
fn plain_chat_server() -> String {
    start(Server::builder().model(ModelSpec {
        id: CHAT.into(),
        model: chat_model(),
        chat: true,
        guard: false,
        n_ctx: Some(256),
        draft: None,
    }))
}

#[test]
fn a_forced_tool_choice_is_decoded_under_the_tool_grammar() {
    // closed schemas, so that even random weights must finish the call within max_tokens: 12
    // gaps of at most 22 whitespace characters, and some 50 characters of JSON
    let base = start(builder());
    let c = client();
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC"]}}, "required": ["zone"], "additionalProperties": false}}},
    ]);
    for (choice, allowed) in [
        (json!({"type": "function", "function": {"name": "get_weather"}}), vec!["get_weather"]),
        (json!("required"), vec!["get_weather", "get_time"]),
    ] {
        for stream in [false, true] {
            let body = json!({"model": CHAT, "messages": [{"role": "user", "content": "Weather?"}], "tools": tools, "tool_choice": choice, "max_tokens": 320, "stream": stream});
            let r = c.post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
            let (finish, name, args) = if stream {
                let events = sse_events(&r.text().unwrap());
                let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
                let calls: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0)).collect();
                assert_eq!(calls[0]["index"], 0);
                assert!(calls[0]["id"].is_string() && calls[0]["type"] == "function");
                assert!(calls[1..].iter().all(|c| c.get("id").is_none() && c["function"].get("name").is_none()), "id and name only once");
                let args: String = calls.iter().filter_map(|c| c["function"]["arguments"].as_str()).collect();
                let finish = chunks.last().unwrap()["choices"][0]["finish_reason"].as_str().unwrap().to_string();
                (finish, calls[0]["function"]["name"].as_str().unwrap().to_string(), args)
            } else {
                let v: Value = r.json().unwrap();
                let call = &v["choices"][0]["message"]["tool_calls"][0];
                assert!(v["choices"][0]["message"]["content"].is_null());
                (
                    v["choices"][0]["finish_reason"].as_str().unwrap().to_string(),
                    call["function"]["name"].as_str().unwrap().to_string(),
                    call["function"]["arguments"].as_str().unwrap().to_string(),
                )
            };
            assert_eq!(finish, "tool_calls", "{choice} stream={stream}");
            assert!(allowed.contains(&name.as_str()), "{name}");
            let args: Value = serde_json::from_str(&args).unwrap();
            assert!(args.get("city").is_some() || args.get("zone").is_some(), "{args}");
        }
    }
    let both = json!({"model": CHAT, "messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": "required", "response_format": {"type": "json_object"}});
    expect_error(c.post(format!("{base}/v1/chat/completions")).json(&both).send().unwrap(), StatusCode::BAD_REQUEST);
    let unknown = json!({"model": CHAT, "messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}});
    assert_eq!(
        expect_error(c.post(format!("{base}/v1/chat/completions")).json(&unknown).send().unwrap(), StatusCode::BAD_REQUEST)["param"],
        "tool_choice"
    );
}

/// A test backend: reports the upload's size and the options it was given.
struct EchoBackend;

impl server::Transcriber for EchoBackend {
    fn model_id(&self) -> &str {
        "echo-asr"
    }
    fn transcribe(&self, audio: &[u8], options: &server::TranscribeOptions) -> Result<server::Transcription, server::TranscribeError> {
        Ok(server::Transcription {
            text: format!("{} bytes in {}", audio.len(), options.language.as_deref().unwrap_or("any")),
            language: Some("english".into()),
            duration: Some(2.5),
            segments: vec![server::Segment { start: 0.0, end: 2.5, text: format!("{} bytes", audio.len()), ..Default::default() }],
        })
    }
}

#[test]
fn transcriptions_are_multipart_and_only_with_a_backend() {
    use reqwest::blocking::multipart::{Form, Part};
    let form = |format: &str| {
        Form::new()
            .text("model", "echo-asr")
            .text("language", "en")
            .text("response_format", format.to_string())
            .text("timestamp_granularities[]", "segment")
            .part("file", Part::bytes(vec![7u8; 1000]).file_name("a.wav"))
    };
    let none = plain_chat_server();
    let c = client();
    let e = expect_error(c.post(format!("{none}/v1/audio/transcriptions")).multipart(form("json")).send().unwrap(), StatusCode::NOT_FOUND);
    assert!(e["message"].as_str().unwrap().ends_with("no transcription model (start it with --transcribe FILE)"), "{e}");
    // the guard's routes say what they lack too
    for path in ["/v1/moderations", "/v1/guard"] {
        let e = expect_error(c.post(format!("{none}{path}")).json(&json!({"input": "x"})).send().unwrap(), StatusCode::NOT_FOUND);
        assert!(e["message"].as_str().unwrap().contains("no guard model loaded"), "{e}");
    }
    let base = start(builder().transcriber(Arc::new(EchoBackend)));
    // the backend's model is listed, can be retrieved, and is not unloaded by DELETE
    let models: Value = c.get(format!("{base}/v1/models")).send().unwrap().json().unwrap();
    let listed = models["data"].as_array().unwrap().iter().find(|m| m["id"] == "echo-asr").expect("listed").clone();
    assert_eq!(listed["capabilities"], json!(["transcription"]));
    assert_eq!(c.get(format!("{base}/v1/models/echo-asr")).send().unwrap().json::<Value>().unwrap(), listed);
    expect_error(c.delete(format!("{base}/v1/models/echo-asr")).send().unwrap(), StatusCode::BAD_REQUEST);
    let url = format!("{base}/v1/audio/transcriptions");
    let j: Value = c.post(&url).multipart(form("json")).send().unwrap().json().unwrap();
    assert_eq!(j, json!({"text": "1000 bytes in en"}));
    let text = c.post(&url).multipart(form("text")).send().unwrap();
    assert!(text.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    assert_eq!(text.text().unwrap(), "1000 bytes in en");
    assert_eq!(c.post(&url).multipart(form("srt")).send().unwrap().text().unwrap(), "1\n00:00:00,000 --> 00:00:02,500\n1000 bytes\n\n");
    assert!(c.post(&url).multipart(form("vtt")).send().unwrap().text().unwrap().starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:02.500\n"));
    let v: Value = c.post(&url).multipart(form("verbose_json")).send().unwrap().json().unwrap();
    assert_eq!((v["task"].as_str(), v["language"].as_str(), v["duration"].as_f64()), (Some("transcribe"), Some("english"), Some(2.5)));
    assert_eq!(v["segments"][0]["end"], 2.5);
    let e = expect_error(c.post(&url).multipart(form("docx")).send().unwrap(), StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "response_format");
    let e = expect_error(c.post(&url).multipart(Form::new().text("model", "echo-asr")).send().unwrap(), StatusCode::BAD_REQUEST);
    assert_eq!(e["param"], "file");
    let wrong = Form::new().text("model", "whisper-9").part("file", Part::bytes(vec![1u8; 10]).file_name("a.wav"));
    expect_error(c.post(&url).multipart(wrong).send().unwrap(), StatusCode::NOT_FOUND);
    expect_error(c.post(&url).json(&json!({"model": "echo-asr"})).send().unwrap(), StatusCode::BAD_REQUEST);
    // uploads up to 25 MiB (more than the JSON routes take), then 413
    let big = |n: usize| Form::new().text("model", "echo-asr").part("file", Part::bytes(vec![1u8; n]).file_name("a.wav"));
    let r = c.post(&url).multipart(big(20 << 20)).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // a 40 MB upload: the client sends it whole and reads the 413's JSON (the server reads the
    // rest of an oversize body before it answers, so the client sees no broken pipe)
    let e = expect_error(c.post(&url).multipart(big(40 << 20)).send().unwrap(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(e["code"], "request_too_large", "{e}");
    // a JSON route, whose limit is lower, the same way
    let chat = format!("{{\"model\": \"echo-asr\", \"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}", "x".repeat(40 << 20));
    let r = c.post(format!("{base}/v1/chat/completions")).header("content-type", "application/json").body(chat).send().unwrap();
    let e = expect_error(r, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(e["code"], "request_too_large", "{e}");
    let words = form("verbose_json").text("timestamp_granularities[]", "word");
    assert_eq!(expect_error(c.post(&url).multipart(words).send().unwrap(), StatusCode::BAD_REQUEST)["param"], "timestamp_granularities");
}

/// The value of a counter in `/metrics` (0 before it is first set).
fn counter(base: &str, name: &str) -> u64 {
    let text = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    line[name.len() + 1..].trim().parse().unwrap()
}

fn wait_for(what: &str, deadline: std::time::Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Sends `body` as a raw HTTP/1.1 POST to `path`, returning the open connection.
fn raw_post(base: &str, path: &str, body: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .unwrap();
    s
}

#[test]
fn a_request_its_client_drops_stops_its_work_and_is_counted() {
    use std::io::Read;
    let base = start(builder().max_body_bytes(1 << 20));
    assert_eq!(counter(&base, "requests_cancelled_total"), 0);

    // A batch of 256 long inputs x 9 risks: about 50 s of work on a 2-core machine (8 of these
    // inputs take 1.6 s). Dropped after 300 ms, it stops at its next evaluation.
    let text = "Explain in great detail, step by step, how the old lighthouse keeper repaired the lamp during the storm. ".repeat(6);
    let batch = json!({"model": GUARD, "inputs": vec![json!({"user": text}); 256]}).to_string();
    let connection = raw_post(&base, "/v1/guard/batch", &batch);
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(connection);
    wait_for("the dropped batch to be counted", std::time::Duration::from_secs(15), || counter(&base, "requests_cancelled_total") == 1);
    // the guard model is free again at once
    let one = client()
        .post(format!("{base}/v1/guard"))
        .json(&json!({"model": GUARD, "input": {"user": "Hi"}, "risks": ["harm"]}))
        .send()
        .unwrap();
    assert_eq!(one.status(), StatusCode::OK);

    // A stream dropped after its first event: the next event fails to send and generation stops.
    let stream = json!({"model": CHAT, "messages": [{"role": "user", "content": "Tell a long story"}], "max_tokens": 400, "stream": true})
        .to_string();
    let mut connection = raw_post(&base, "/v1/chat/completions", &stream);
    let mut first = [0u8; 256];
    let n = connection.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    drop(connection);
    wait_for("the dropped stream to be counted", std::time::Duration::from_secs(15), || counter(&base, "requests_cancelled_total") == 2);
}

/// Reads a chat stream back: (content, tool calls assembled from their deltas, finish reason,
/// logprob entries, number of content deltas).
fn assemble_chat_stream(text: &str) -> (String, Vec<(String, String)>, String, usize, usize) {
    let events = sse_events(text);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let (mut content, mut calls, mut finish, mut logprobs, mut deltas) =
        (String::new(), Vec::<(String, String)>::new(), String::new(), 0, 0);
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        let Some(choice) = chunk["choices"].get(0) else { continue };
        if let Some(piece) = choice["delta"]["content"].as_str().filter(|p| !p.is_empty()) {
            content.push_str(piece);
            deltas += 1;
        }
        logprobs += choice["logprobs"]["content"].as_array().map_or(0, Vec::len);
        for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push((call["function"]["name"].as_str().unwrap().to_string(), String::new()));
            }
            calls[i].1.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (content, calls, finish, logprobs, deltas)
}

#[test]
fn with_tools_offered_plain_text_still_streams_as_it_decodes_with_its_logprobs() {
    let base = start(builder());
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let body = json!({"model": CHAT, "messages": [{"role": "user", "content": "Tell me a story"}], "tools": tools, "max_tokens": 24, "temperature": 0, "logprobs": true});
    let plain: Value = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json().unwrap();
    let message = &plain["choices"][0]["message"];
    assert!(message.get("tool_calls").is_none(), "random weights write text: {message}");
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let text = client().post(format!("{base}/v1/chat/completions")).json(&streaming).send().unwrap().text().unwrap();
    let (content, calls, finish, logprobs, deltas) = assemble_chat_stream(&text);
    assert_eq!(content, message["content"].as_str().unwrap());
    assert!(calls.is_empty());
    assert_eq!(finish, plain["choices"][0]["finish_reason"].as_str().unwrap());
    assert_eq!(logprobs, plain["usage"]["completion_tokens"].as_u64().unwrap() as usize, "one logprob per token");
    assert!(deltas > 4, "text is sent as it decodes, not held to the end: {deltas} deltas");
}

/// The real Qwen2.5-Coder-0.5B-Instruct served as `qwen` with a context of `n_ctx`.
fn qwen_server(qwen: Arc<Model>, n_ctx: usize) -> String {
    start(Server::builder().model(ModelSpec { id: "qwen".into(), model: qwen, chat: true, guard: false, n_ctx: Some(n_ctx), draft: None }))
}

#[test]
fn qwen_calls_a_tool_in_its_own_syntax_streamed_and_not() {
    let qwen = Arc::new(Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap());
    let base = qwen_server(qwen, 1024);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let body = json!({"model": "qwen", "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}], "tools": tools, "max_tokens": 48, "temperature": 0});
    let plain: Value = client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json().unwrap();
    assert_eq!(plain["choices"][0]["finish_reason"], "tool_calls", "{plain}");
    let call = &plain["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["city"], "Paris");
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let text = client().post(format!("{base}/v1/chat/completions")).json(&streaming).send().unwrap().text().unwrap();
    let (content, calls, finish, _, _) = assemble_chat_stream(&text);
    assert_eq!(content, plain["choices"][0]["message"]["content"].as_str().unwrap_or(""), "no call text leaks into content");
    assert_eq!(finish, "tool_calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "get_weather");
    assert_eq!(serde_json::from_str::<Value>(&calls[0].1).unwrap(), args);
}

#[test]
fn a_suffix_asks_qwen_for_the_code_that_fills_the_gap() {
    let qwen = Arc::new(Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap());
    let prompt_ids = engine::tokenizer::fim::fim_prompt(
        qwen.tokenizer(),
        "def add(a, b):\n    return ",
        "\n\nprint(add(1, 2))\n",
        engine::tokenizer::fim::FimOrder::PrefixSuffixMiddle,
    )
    .unwrap();
    let base = qwen_server(qwen, 1024);
    let url = format!("{base}/v1/completions");
    let body = json!({"model": "qwen", "prompt": "def add(a, b):\n    return ", "suffix": "\n\nprint(add(1, 2))\n", "max_tokens": 16, "temperature": 0});
    let filled: Value = client().post(&url).json(&body).send().unwrap().json().unwrap();
    // the real model writes the gap (this instruct model then adds a line of its own) and ends
    let text = filled["choices"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("a + b") && filled["choices"][0]["finish_reason"] == "stop", "{filled}");
    // the prompt is the FIM layout: the same reply as a completion of its token ids
    assert_eq!(filled["usage"]["prompt_tokens"].as_u64(), Some(prompt_ids.len() as u64));
    let by_ids: Value = client()
        .post(&url)
        .json(&json!({"model": "qwen", "prompt": prompt_ids, "max_tokens": 16, "temperature": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(by_ids["choices"][0]["text"].as_str(), Some(text));
    for bad in [
        json!({"model": "qwen", "prompt": [1, 2], "suffix": "x"}),
        json!({"model": "qwen", "prompt": "a", "suffix": "x", "echo": true}),
        json!({"model": "qwen", "prompt": "a", "suffix": 5}),
    ] {
        let e = expect_error(client().post(&url).json(&bad).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], "suffix", "{bad}: {e}");
    }
}

#[test]
fn infill_answers_the_editor_plugins_in_llama_server_s_shape() {
    use engine::tokenizer::fim::{infill_prompt, FimOrder, Infill, InfillBudget};
    let qwen = Arc::new(Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap());
    let extra = vec![("util.py".to_string(), "def helper(x):\n    return x * 2\n".to_string())];
    let infill = Infill { prefix: "def add(a, b):\n    return ", suffix: "\n\nprint(add(1, 2))\n", middle_start: "", extra: &extra };
    // a context beyond llama-server's batch of 2048, so that the other file fits
    let ids = infill_prompt(
        qwen.tokenizer(),
        &infill,
        InfillBudget { n_batch: 2048, n_ctx: 4096, n_predict: Some(16) },
        FimOrder::PrefixSuffixMiddle,
    )
    .unwrap();
    let repo = qwen.tokenizer().special_tokens().fim_rep.unwrap();
    assert_eq!(ids[0], repo, "Qwen2.5-Coder's repository-level layout");
    let base = qwen_server(qwen, 4096);
    let url = format!("{base}/infill");
    let body = json!({"input_prefix": infill.prefix, "input_suffix": infill.suffix, "input_extra": [{"filename": "util.py", "text": extra[0].1}],
                      "n_predict": 16, "temperature": 0});
    let r: Value = client().post(&url).json(&body).send().unwrap().json().unwrap();
    let content = r["content"].as_str().unwrap().to_string();
    assert!(content.starts_with("a + b"), "{r}");
    // this instruct model may write on after the gap (then up to the limit)
    let ended = if r["tokens_predicted"] == 16 { "limit" } else { "eos" };
    assert_eq!((r["stop"].as_bool(), r["stop_type"].as_str(), r["model"].as_str()), (Some(true), Some(ended), Some("qwen")), "{r}");
    assert_eq!(r["tokens_evaluated"].as_u64(), Some(ids.len() as u64));
    assert_eq!(r["has_new_line"].as_bool(), Some(content.contains('\n')));
    assert_eq!(r["generation_settings"]["n_ctx"], 4096);
    // the same text as a completion of those ids
    let by_ids: Value = client()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": "qwen", "prompt": ids, "max_tokens": 16, "temperature": 0}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(by_ids["choices"][0]["text"].as_str(), Some(content.as_str()));
    // streamed: the pieces add up to it, the last event has the answer's fields
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let text = client().post(&url).json(&streamed).send().unwrap().text().unwrap();
    let events: Vec<Value> = sse_events(&text).iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let (last, pieces) = events.split_last().unwrap();
    assert!(pieces.iter().all(|e| e["stop"] == false) && last["stop"] == true, "{text}");
    assert_eq!(pieces.iter().map(|e| e["content"].as_str().unwrap()).collect::<String>(), content);
    assert_eq!((last["stop_type"].as_str(), &last["tokens_predicted"]), (Some(ended), &r["tokens_predicted"]));
    // a stop word, and the token limit
    let mut worded = body.clone();
    worded["stop"] = json!(["+"]);
    let w: Value = client().post(&url).json(&worded).send().unwrap().json().unwrap();
    assert_eq!((w["stop_type"].as_str(), w["stopping_word"].as_str(), w["content"].as_str()), (Some("word"), Some("+"), Some("a ")), "{w}");
    let mut short = body.clone();
    short["n_predict"] = json!(2);
    let l: Value = client().post(&url).json(&short).send().unwrap().json().unwrap();
    assert_eq!((l["stop_type"].as_str(), l["tokens_predicted"].as_u64()), (Some("limit"), Some(2)), "{l}");
    for (bad, param) in
        [(json!({"input_prefix": "a", "n_predict": -3}), "n_predict"), (json!({"input_extra": [{"filename": "a"}]}), "input_extra")]
    {
        let e = expect_error(client().post(&url).json(&bad).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], param, "{bad}: {e}");
    }
}

#[test]
fn infill_on_a_model_without_fim_tokens_is_a_400() {
    let base = plain_chat_server();
    let e =
        expect_error(client().post(format!("{base}/infill")).json(&json!({"input_prefix": "a"})).send().unwrap(), StatusCode::BAD_REQUEST);
    assert!(e["message"].as_str().unwrap().contains("no fill-in-the-middle"), "{e}");
    assert_eq!(e["param"], "model");
}
