//! OpenAI's Responses API over real TCP on the tiny llama fixture: the response's shape and
//! usage (equal to the equivalent chat completion's), input items (messages, function calls and
//! their outputs) converted as chat turns, forced function calls, the event stream (the same
//! response as answered whole, sequence numbers in order), stored responses continued with
//! `previous_response_id`, fetched and deleted, reasoning items, and errors.

use crate::common::{named_events, post, start, thinking_model, tiny_llama};
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server, ServerBuilder};

const CHAT: &str = "tiny-llama";

fn builder() -> ServerBuilder {
    tiny_llama(CHAT)
}

fn stream(base: &str, body: Value) -> Vec<(String, Value)> {
    let r = Client::new().post(format!("{base}/v1/responses")).json(&body).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    named_events(&r.text().unwrap())
}

fn chat(base: &str, messages: Value, max_tokens: u64) -> Value {
    let (s, c) =
        post(base, "/v1/chat/completions", json!({"model": CHAT, "messages": messages, "max_tokens": max_tokens, "temperature": 0}));
    assert_eq!(s, StatusCode::OK, "{c}");
    c
}

/// The output items without their ids (random).
fn without_ids(items: &Value) -> Vec<Value> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let mut i = i.clone();
            i.as_object_mut().unwrap().remove("id");
            i
        })
        .collect()
}

#[test]
fn a_response_has_the_responses_shape_and_the_chat_reply() {
    let base = start(builder());
    let body = json!({"model": CHAT, "instructions": "Be brief.", "input": "Hello", "max_output_tokens": 6, "temperature": 0, "metadata": {"k": "v"}});
    let (s, r) = post(&base, "/v1/responses", body);
    assert_eq!(s, StatusCode::OK, "{r}");
    assert!(r["id"].as_str().unwrap().starts_with("resp_"), "{r}");
    assert_eq!((r["object"].as_str(), r["model"].as_str(), r["store"].as_bool()), (Some("response"), Some(CHAT), Some(true)));
    // random weights do not end a reply within 6 tokens
    assert_eq!((r["status"].as_str(), &r["incomplete_details"]), (Some("incomplete"), &json!({"reason": "max_output_tokens"})), "{r}");
    assert_eq!(
        (r["instructions"].as_str(), r["max_output_tokens"].as_u64(), &r["metadata"]),
        (Some("Be brief."), Some(6), &json!({"k": "v"}))
    );
    let output = r["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{r}");
    assert_eq!((output[0]["type"].as_str(), output[0]["role"].as_str()), (Some("message"), Some("assistant")));
    assert!(output[0]["id"].as_str().unwrap().starts_with("msg_"));
    let c = chat(&base, json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]), 6);
    assert_eq!(output[0]["content"][0]["type"], "output_text");
    assert_eq!(output[0]["content"][0]["text"], c["choices"][0]["message"]["content"]);
    assert_eq!(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"]);
    assert_eq!(r["usage"]["output_tokens"], 6);
    assert_eq!(r["usage"]["total_tokens"].as_u64(), Some(c["usage"]["prompt_tokens"].as_u64().unwrap() + 6));
    // the same input as a list of items, with parts and a developer message
    let items = json!([
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hel"}, {"type": "input_text", "text": "lo"}]},
    ]);
    let (_, again) = post(&base, "/v1/responses", json!({"model": CHAT, "input": items, "max_output_tokens": 6, "temperature": 0}));
    assert_eq!(without_ids(&again["output"]), without_ids(&r["output"]));
}

#[test]
fn function_calls_and_their_outputs_are_chat_tool_turns() {
    let base = start(builder());
    let tools = json!([{"type": "function", "name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": false}}]);
    let input = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"},
    ]);
    let (s, r) =
        post(&base, "/v1/responses", json!({"model": CHAT, "input": input, "tools": tools, "max_output_tokens": 1, "tool_choice": "none"}));
    assert_eq!(s, StatusCode::OK, "{r}");
    let chat_messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ]);
    let chat_tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": tools[0]["parameters"]}}]);
    let (_, c) = post(
        &base,
        "/v1/chat/completions",
        json!({"model": CHAT, "messages": chat_messages, "tools": chat_tools, "max_tokens": 1, "tool_choice": "none"}),
    );
    assert_eq!(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"], "{c}");
    // a forced function: one function_call item whose arguments follow the schema, answered
    // whole and streamed alike
    let forced = json!({"model": CHAT, "input": "Weather in Paris?", "tools": tools, "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 64, "temperature": 0});
    let (s, r) = post(&base, "/v1/responses", forced.clone());
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["tool_choice"], json!({"type": "function", "name": "get_weather"}));
    assert_eq!(r["tools"][0]["name"], "get_weather");
    let calls: Vec<&Value> = r["output"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call").collect();
    assert_eq!(calls.len(), 1, "{r}");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("fc_") && calls[0]["call_id"].as_str().unwrap().starts_with("call_"));
    let args: Value = serde_json::from_str(calls[0]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    let mut streamed = forced;
    streamed["stream"] = json!(true);
    let events = stream(&base, streamed);
    let done = &events.last().unwrap().1;
    assert_eq!(done["type"], "response.completed");
    let strip = |items: &Value| -> Vec<Value> {
        without_ids(items)
            .into_iter()
            .map(|mut i| {
                i.as_object_mut().unwrap().remove("call_id");
                i
            })
            .collect()
    };
    assert_eq!(strip(&done["response"]["output"]), strip(&r["output"]));
    let deltas: String =
        events.iter().filter(|(n, _)| n == "response.function_call_arguments.delta").map(|(_, e)| e["delta"].as_str().unwrap()).collect();
    assert_eq!(deltas, calls[0]["arguments"].as_str().unwrap());
    let args_done = events.iter().find(|(n, _)| n == "response.function_call_arguments.done").unwrap();
    assert_eq!(args_done.1["name"], "get_weather");
}

#[test]
fn a_streamed_response_is_the_whole_response_as_events() {
    let base = start(builder());
    let body =
        json!({"model": CHAT, "instructions": "Be brief.", "input": "Hello", "max_output_tokens": 8, "temperature": 0, "store": false});
    let (_, whole) = post(&base, "/v1/responses", body.clone());
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = stream(&base, streamed);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..4],
        ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"],
        "{names:?}"
    );
    assert_eq!(
        names[names.len() - 4..],
        ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"],
        "{names:?}"
    );
    for (i, (_, e)) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    let id = events[0].1["response"]["id"].as_str().unwrap();
    let text: String =
        events.iter().filter(|(n, _)| n == "response.output_text.delta").map(|(_, e)| e["delta"].as_str().unwrap()).collect();
    assert_eq!(json!(text), whole["output"][0]["content"][0]["text"]);
    let last = &events.last().unwrap().1["response"];
    assert_eq!(last["id"], id);
    assert_eq!(without_ids(&last["output"]), without_ids(&whole["output"]));
    for key in ["input_tokens", "output_tokens", "total_tokens"] {
        assert_eq!(last["usage"][key], whole["usage"][key]);
    }
    // every delta names the item it belongs to
    let item = last["output"][0]["id"].as_str().unwrap();
    assert!(events.iter().filter(|(n, _)| n.ends_with(".delta")).all(|(_, e)| e["item_id"] == item));
}

#[test]
fn stored_responses_continue_the_conversation_and_can_be_fetched_and_deleted() {
    let base = start(builder());
    let c = Client::new();
    let (_, first) = post(
        &base,
        "/v1/responses",
        json!({"model": CHAT, "instructions": "Be brief.", "input": "Hello", "max_output_tokens": 4, "temperature": 0}),
    );
    let id = first["id"].as_str().unwrap();
    let reply = first["output"][0]["content"][0]["text"].as_str().unwrap();
    // the follow-up's prompt is the whole conversation (instructions are not inherited)
    let body =
        json!({"model": CHAT, "input": "And then?", "previous_response_id": id, "max_output_tokens": 4, "temperature": 0, "stream": true});
    let events = stream(&base, body);
    let second = &events.last().unwrap().1["response"];
    assert_eq!(second["previous_response_id"], id);
    let conversation =
        json!([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]);
    let c2 = chat(&base, conversation.clone(), 4);
    assert_eq!(second["usage"]["input_tokens"], c2["usage"]["prompt_tokens"]);
    assert_eq!(second["output"][0]["content"][0]["text"], c2["choices"][0]["message"]["content"]);
    // a streamed response is stored too, and chains on
    let second_id = second["id"].as_str().unwrap();
    let (s, third) = post(
        &base,
        "/v1/responses",
        json!({"model": CHAT, "input": "Why?", "previous_response_id": second_id, "max_output_tokens": 2, "temperature": 0}),
    );
    assert_eq!(s, StatusCode::OK, "{third}");
    let mut longer = conversation.as_array().unwrap().clone();
    longer.push(json!({"role": "assistant", "content": c2["choices"][0]["message"]["content"]}));
    longer.push(json!({"role": "user", "content": "Why?"}));
    assert_eq!(third["usage"]["input_tokens"], chat(&base, json!(longer), 2)["usage"]["prompt_tokens"]);
    // fetched as returned; deleted once
    let got: Value = c.get(format!("{base}/v1/responses/{id}")).send().unwrap().json().unwrap();
    assert_eq!(got, first);
    let r = c.delete(format!("{base}/v1/responses/{id}")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap(), json!({"id": id, "object": "response", "deleted": true}));
    for r in [c.get(format!("{base}/v1/responses/{id}")).send().unwrap(), c.delete(format!("{base}/v1/responses/{id}")).send().unwrap()] {
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(r.json::<Value>().unwrap()["error"]["code"], "not_found");
    }
    let (s, e) = post(&base, "/v1/responses", json!({"model": CHAT, "input": "x", "previous_response_id": id}));
    assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::NOT_FOUND, Some("previous_response_id")), "{e}");
    // store: false keeps nothing
    let (_, unstored) = post(&base, "/v1/responses", json!({"model": CHAT, "input": "Hello", "max_output_tokens": 1, "store": false}));
    assert_eq!(unstored["store"], false);
    let r = c.get(format!("{base}/v1/responses/{}", unstored["id"].as_str().unwrap())).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[test]
fn a_server_that_stores_nothing_refuses_store_true() {
    let base = start(builder().responses_store(0));
    let (s, r) = post(&base, "/v1/responses", json!({"model": CHAT, "input": "Hello", "max_output_tokens": 1}));
    assert_eq!((s, r["store"].as_bool()), (StatusCode::OK, Some(false)), "{r}");
    let (s, e) = post(&base, "/v1/responses", json!({"model": CHAT, "input": "Hello", "max_output_tokens": 1, "store": true}));
    assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("store")), "{e}");
}

#[test]
fn a_thinking_block_is_a_reasoning_item() {
    let model = thinking_model();
    let base =
        start(Server::builder().model(ModelSpec { id: CHAT.into(), model, chat: true, guard: false, n_ctx: Some(512), draft: None }));
    let body = json!({"model": CHAT, "input": "Hello", "max_output_tokens": 8, "temperature": 0});
    let (s, r) = post(&base, "/v1/responses", body.clone());
    assert_eq!(s, StatusCode::OK, "{r}");
    // the template opens the block and random weights never close it: all of it is reasoning,
    // and there is no message
    let output = r["output"].as_array().unwrap();
    assert_eq!((output.len(), output[0]["type"].as_str()), (1, Some("reasoning")), "{r}");
    assert!(output[0]["id"].as_str().unwrap().starts_with("rs_"));
    let thinking = output[0]["content"][0]["text"].as_str().unwrap();
    assert!(!thinking.is_empty());
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 8, "{r}");
    let (_, c) = post(
        &base,
        "/v1/chat/completions",
        json!({"model": CHAT, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0}),
    );
    let message = &c["choices"][0]["message"];
    assert_eq!((message["reasoning_content"].as_str(), message["reasoning"].as_str()), (Some(thinking), Some(thinking)), "{c}");
    assert_eq!(c["usage"]["completion_tokens_details"]["reasoning_tokens"], 8);
    // streamed chat: the reasoning arrives as its own deltas, and no content
    let chat_body = json!({"model": CHAT, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let text = Client::new().post(format!("{base}/v1/chat/completions")).json(&chat_body).send().unwrap().text().unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let delta = |key: &str| -> String { chunks.iter().filter_map(|c| c["choices"][0]["delta"][key].as_str()).collect() };
    assert_eq!(
        (delta("reasoning_content"), delta("reasoning"), delta("content")),
        (thinking.to_string(), thinking.to_string(), String::new())
    );
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens_details"]["reasoning_tokens"], 8);
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = stream(&base, streamed);
    let deltas: String =
        events.iter().filter(|(n, _)| n == "response.reasoning_text.delta").map(|(_, e)| e["delta"].as_str().unwrap()).collect();
    assert_eq!(deltas, thinking);
    let last = &events.last().unwrap().1["response"];
    assert_eq!(without_ids(&last["output"]), without_ids(&r["output"]));
}

#[test]
fn bad_requests_name_their_field() {
    let base = start(builder());
    let cases = [
        (json!({"model": CHAT}), StatusCode::BAD_REQUEST, "input"),
        (json!({"model": CHAT, "input": []}), StatusCode::BAD_REQUEST, "input"),
        (json!({"model": CHAT, "input": 5}), StatusCode::BAD_REQUEST, "input"),
        (
            json!({"model": CHAT, "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            StatusCode::BAD_REQUEST,
            "input[0].call_id",
        ),
        (json!({"model": CHAT, "input": [{"role": "robot", "content": "hi"}]}), StatusCode::BAD_REQUEST, "input[0].role"),
        (
            json!({"model": CHAT, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]}),
            StatusCode::BAD_REQUEST,
            "input[0].content[0]",
        ),
        (json!({"model": CHAT, "input": "x", "max_output_tokens": 0}), StatusCode::BAD_REQUEST, "max_output_tokens"),
        (json!({"model": CHAT, "input": "x", "temperature": 3}), StatusCode::BAD_REQUEST, "temperature"),
        (json!({"model": CHAT, "input": "x", "tools": [{"type": "web_search"}]}), StatusCode::BAD_REQUEST, "tools[0]"),
        (json!({"model": CHAT, "input": "x", "tools": [{"type": "function", "name": "a b"}]}), StatusCode::BAD_REQUEST, "tools[0].name"),
        (json!({"model": CHAT, "input": "x", "tool_choice": "required"}), StatusCode::BAD_REQUEST, "tool_choice"),
        (
            json!({"model": CHAT, "input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}}),
            StatusCode::BAD_REQUEST,
            "text.format.schema",
        ),
        (json!({"model": CHAT, "input": "x", "metadata": {"k": 1}}), StatusCode::BAD_REQUEST, "metadata"),
        (json!({"model": "nope", "input": "x"}), StatusCode::NOT_FOUND, "model"),
    ];
    for (body, status, param) in cases {
        let (s, e) = post(&base, "/v1/responses", body.clone());
        assert_eq!(s, status, "{body} -> {e}");
        assert_eq!(e["error"]["param"], param, "{body} -> {e}");
    }
    let r = Client::new().put(format!("{base}/v1/responses/resp_1")).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[test]
fn json_schema_text_format_constrains_the_reply() {
    let base = start(builder());
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false});
    let body = json!({"model": CHAT, "input": "Answer.", "max_output_tokens": 32, "temperature": 0, "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": true}}});
    let (s, r) = post(&base, "/v1/responses", body);
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["text"]["format"]["type"], "json_schema");
    let text = r["output"][0]["content"][0]["text"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(v["ok"].is_boolean(), "{v}");
}
