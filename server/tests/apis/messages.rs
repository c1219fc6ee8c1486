//! Anthropic's Messages API over real TCP on the tiny llama fixture: the reply's shape, stop
//! reasons (max_tokens, a stop sequence), usage equal to `count_tokens` and to the equivalent
//! chat completion, tool_use / tool_result turns converted as chat tool calls, the event stream
//! (the same reply as answered whole), thinking blocks, Anthropic-shaped errors, and `x-api-key`.

use crate::common::{named_events, post, start, thinking_model, tiny_llama};
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server, ServerBuilder};

const CHAT: &str = "tiny-llama";

fn builder() -> ServerBuilder {
    tiny_llama(CHAT)
}

fn hello(max_tokens: u64) -> Value {
    json!({"model": CHAT, "max_tokens": max_tokens, "temperature": 0, "system": "Be brief.", "messages": [{"role": "user", "content": "Hello"}]})
}

#[test]
fn a_reply_has_the_messages_shape_and_counts_its_tokens() {
    let base = start(builder());
    let (s, m) = post(&base, "/v1/messages", hello(6));
    assert_eq!(s, StatusCode::OK, "{m}");
    assert!(m["id"].as_str().unwrap().starts_with("msg_"), "{m}");
    assert_eq!((m["type"].as_str(), m["role"].as_str(), m["model"].as_str()), (Some("message"), Some("assistant"), Some(CHAT)));
    assert_eq!(m["content"][0]["type"], "text");
    // random weights do not end a reply within 6 tokens
    assert_eq!((m["stop_reason"].as_str(), &m["stop_sequence"]), (Some("max_tokens"), &Value::Null), "{m}");
    assert_eq!(m["usage"]["output_tokens"], 6);
    let (_, counted) = post(&base, "/v1/messages/count_tokens", hello(6));
    assert_eq!(counted["input_tokens"], m["usage"]["input_tokens"]);
    // the same conversation as a chat completion: the same prompt, the same greedy text
    let chat = json!({"model": CHAT, "max_tokens": 6, "temperature": 0, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]});
    let (_, c) = post(&base, "/v1/chat/completions", chat);
    assert_eq!(c["usage"]["prompt_tokens"], m["usage"]["input_tokens"]);
    assert_eq!(c["choices"][0]["message"]["content"], m["content"][0]["text"]);
    // count_tokens needs no max_tokens
    let mut no_max = hello(1);
    no_max.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(post(&base, "/v1/messages/count_tokens", no_max).1["input_tokens"], counted["input_tokens"]);
}

#[test]
fn a_stop_sequence_ends_the_reply_and_is_named() {
    let base = start(builder());
    let (_, full) = post(&base, "/v1/messages", hello(24));
    let text = full["content"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() > 8, "{text}");
    let stop: String = chars[4..7].iter().collect();
    let before = &text[..text.find(&stop).unwrap()];
    let mut body = hello(24);
    body["stop_sequences"] = json!(["\u{1}never", stop]);
    let (s, m) = post(&base, "/v1/messages", body);
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!((m["stop_reason"].as_str(), m["stop_sequence"].as_str()), (Some("stop_sequence"), Some(stop.as_str())), "{m}");
    let got = m["content"].get(0).and_then(|b| b["text"].as_str()).unwrap_or_default();
    assert_eq!(got, before);
}

#[test]
fn tool_turns_become_chat_tool_calls() {
    let base = start(builder());
    let tools = json!([{"name": "get_weather", "description": "The weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": false}}]);
    let messages = json!([
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C, sunny"}]}]},
    ]);
    let (s, counted) = post(&base, "/v1/messages/count_tokens", json!({"model": CHAT, "messages": messages, "tools": tools}));
    assert_eq!(s, StatusCode::OK, "{counted}");
    let chat_messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C, sunny"},
    ]);
    let chat_tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": tools[0]["input_schema"]}}]);
    let (_, c) =
        post(&base, "/v1/chat/completions", json!({"model": CHAT, "max_tokens": 1, "messages": chat_messages, "tools": chat_tools}));
    assert_eq!(counted["input_tokens"], c["usage"]["prompt_tokens"], "{c}");
    // a forced tool: the reply is one tool_use block whose input follows the schema
    let (s, m) = post(
        &base,
        "/v1/messages",
        json!({"model": CHAT, "max_tokens": 64, "temperature": 0, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools, "tool_choice": {"type": "tool", "name": "get_weather"}}),
    );
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    let call = m["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap_or_else(|| panic!("{m}"));
    assert_eq!(call["name"], "get_weather");
    assert!(call["input"]["city"].is_string(), "{m}");
}

#[test]
fn errors_have_the_anthropic_shape() {
    let base = start(builder());
    let cases = [
        (json!({"model": CHAT, "messages": [{"role": "user", "content": "Hi"}]}), StatusCode::BAD_REQUEST, "max_tokens"),
        (json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}), StatusCode::NOT_FOUND, "nope"),
        (
            json!({"model": CHAT, "max_tokens": 5, "messages": [{"role": "robot", "content": "Hi"}]}),
            StatusCode::BAD_REQUEST,
            "messages[0].role",
        ),
        // Anthropic's range, not OpenAI's 0 to 2
        (
            json!({"model": CHAT, "max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "Hi"}]}),
            StatusCode::BAD_REQUEST,
            "temperature must be between 0 and 1",
        ),
        (
            json!({"model": CHAT, "max_tokens": 5, "stop_sequences": ["a", ""], "messages": [{"role": "user", "content": "Hi"}]}),
            StatusCode::BAD_REQUEST,
            "stop_sequences must be",
        ),
        (
            json!({"model": CHAT, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "get weather", "input_schema": {"type": "object"}}]}),
            StatusCode::BAD_REQUEST,
            "tools[0].name must be",
        ),
        (
            json!({"model": CHAT, "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "Hi"}], "thinking": {"type": "sometimes"}}),
            StatusCode::BAD_REQUEST,
            "thinking",
        ),
        (
            json!({"model": CHAT, "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}),
            StatusCode::BAD_REQUEST,
            "vision",
        ),
        (
            json!({"model": CHAT, "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}),
            StatusCode::BAD_REQUEST,
            "assistant turn",
        ),
    ];
    for (body, status, names) in cases {
        let (s, e) = post(&base, "/v1/messages", body.clone());
        assert_eq!(s, status, "{body} -> {e}");
        assert_eq!(e["type"], "error", "{e}");
        let kind = if status == StatusCode::NOT_FOUND { "not_found_error" } else { "invalid_request_error" };
        assert_eq!(e["error"]["type"], kind, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(names), "{names}: {e}");
    }
}

#[test]
fn x_api_key_is_accepted_like_a_bearer_token() {
    let base = start(builder().api_key(Some("sekret".into())));
    let c = Client::new();
    let r = c.post(format!("{base}/v1/messages")).json(&hello(2)).send().unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.json::<Value>().unwrap()["error"]["type"], "authentication_error");
    let r = c.post(format!("{base}/v1/messages")).header("x-api-key", "sekret").json(&hello(2)).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c.get(format!("{base}/v1/models")).header("x-api-key", "sekret").send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c.get(format!("{base}/v1/models")).header("x-api-key", "wrong").send().unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

fn stream(base: &str, body: Value) -> Vec<(String, Value)> {
    let r = Client::new().post(format!("{base}/v1/messages")).json(&body).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    named_events(&r.text().unwrap())
}

/// The content blocks a stream builds, from its start, delta and stop events (checking that
/// every block starts, gets its deltas and stops in order, at consecutive indexes).
fn blocks_of(events: &[(String, Value)]) -> Vec<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut open = false;
    for (name, e) in events {
        match name.as_str() {
            "content_block_start" => {
                assert!(!open, "a block starts while another is open");
                assert_eq!(e["index"], blocks.len());
                blocks.push(e["content_block"].clone());
                open = true;
            }
            "content_block_delta" => {
                assert!(open);
                assert_eq!(e["index"], blocks.len() - 1);
                let b = blocks.last_mut().unwrap();
                let d = &e["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => b["text"] = json!(b["text"].as_str().unwrap().to_string() + d["text"].as_str().unwrap()),
                    "thinking_delta" => {
                        b["thinking"] = json!(b["thinking"].as_str().unwrap().to_string() + d["thinking"].as_str().unwrap())
                    }
                    "input_json_delta" => {
                        let partial = b.get("partial").and_then(Value::as_str).unwrap_or_default().to_string();
                        b["partial"] = json!(partial + d["partial_json"].as_str().unwrap());
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                assert!(open);
                assert_eq!(e["index"], blocks.len() - 1);
                open = false;
                let b = blocks.last_mut().unwrap();
                if let Some(partial) = b.as_object_mut().unwrap().remove("partial") {
                    b["input"] = serde_json::from_str(partial.as_str().unwrap()).unwrap();
                }
            }
            _ => {}
        }
    }
    assert!(!open);
    blocks
}

#[test]
fn a_streamed_reply_is_the_whole_reply_as_events() {
    let base = start(builder());
    let (_, whole) = post(&base, "/v1/messages", hello(8));
    let mut body = hello(8);
    body["stream"] = json!(true);
    let events = stream(&base, body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "ping"], "{names:?}");
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"], "{names:?}");
    let start = &events[0].1["message"];
    assert!(start["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!((start["model"].as_str(), start["content"].as_array().map(Vec::len)), (Some(CHAT), Some(0)));
    assert_eq!(start["usage"]["input_tokens"], whole["usage"]["input_tokens"]);
    assert_eq!(blocks_of(&events), whole["content"].as_array().unwrap().clone());
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], whole["stop_reason"]);
    assert_eq!(delta["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
    // a forced tool: one tool_use block whose streamed input is the whole reply's
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": false}}]);
    let mut body = json!({"model": CHAT, "max_tokens": 64, "temperature": 0, "messages": [{"role": "user", "content": "Weather?"}], "tools": tools, "tool_choice": {"type": "tool", "name": "get_weather"}});
    let (_, whole) = post(&base, "/v1/messages", body.clone());
    body["stream"] = json!(true);
    let events = stream(&base, body);
    let blocks = blocks_of(&events);
    let strip_ids = |blocks: &[Value]| -> Vec<Value> {
        blocks
            .iter()
            .map(|b| {
                let mut b = b.clone();
                b.as_object_mut().unwrap().remove("id");
                b
            })
            .collect()
    };
    assert_eq!(strip_ids(&blocks), strip_ids(whole["content"].as_array().unwrap()), "{events:?}");
    assert!(blocks.iter().any(|b| b["type"] == "tool_use" && b["id"].as_str().unwrap().starts_with("call_")), "{blocks:?}");
    assert_eq!(events[events.len() - 2].1["delta"]["stop_reason"], "tool_use");
}

#[test]
fn a_thinking_block_is_its_own_content_block() {
    let model = thinking_model();
    let base =
        start(Server::builder().model(ModelSpec { id: CHAT.into(), model, chat: true, guard: false, n_ctx: Some(512), draft: None }));
    // the template opens the block and random weights never close it: all of the reply is thinking
    let (s, m) = post(&base, "/v1/messages", hello(8));
    assert_eq!(s, StatusCode::OK, "{m}");
    let blocks = m["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{m}");
    assert_eq!((blocks[0]["type"].as_str(), blocks[0]["signature"].as_str()), (Some("thinking"), Some("")));
    let chat = json!({"model": CHAT, "max_tokens": 8, "temperature": 0, "reasoning_format": "none", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]});
    let (_, c) = post(&base, "/v1/chat/completions", chat);
    let raw = c["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(raw.strip_prefix("<think>").unwrap().trim_start(), blocks[0]["thinking"].as_str().unwrap());
    let mut body = hello(8);
    body["stream"] = json!(true);
    assert_eq!(blocks_of(&stream(&base, body)), *blocks);
}
