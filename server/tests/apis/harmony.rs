//! Harmony replies (gpt-oss): the real gpt-oss chat template, and a model that walks a fixed
//! script of harmony tokens (`engine_tests::scripted`), read by the chat completions, Messages and
//! Responses routes: the analysis channel as reasoning, a message to `functions.NAME` as a tool
//! call, the final channel as content; whole and streamed alike.

use std::sync::Arc;

use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server};

use crate::common::{named_events, post, start};

const SPECIALS: [&str; 7] = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"];
/// A reply: an analysis message with `thought`, then a second message with `header` and `body`,
/// ended by `end`. A text the script needs twice is spelled the second time in plain tokens (each
/// script token follows one token only).
fn script<'a>(thought: [&'a str; 2], header: &[&'a str], body: &[&'a str], end: &'a str) -> Vec<&'a str> {
    let mut s =
        vec!["<|channel|>", "analysis", "<|message|>", thought[0], thought[1], "<|end|>", "<|start|>", "assist", "ant", "<|chan", "nel|>"];
    s.extend(header);
    s.extend(["<|mess", "age|>"]);
    s.extend(body);
    s.push(end);
    s
}

/// A reply that thinks, then answers.
fn answer() -> Vec<&'static str> {
    script(["User", " asks."], &["final"], &["Four", "."], "<|return|>")
}

/// A reply that thinks, then calls a function.
fn call() -> Vec<&'static str> {
    script(
        ["Need", " weather."],
        &["commentary to=functions.get_weather ", "<|constrain|>", "json"],
        &["{\"city\": \"Paris\"}"],
        "<|call|>",
    )
}

const MODEL: &str = "gpt-oss-scripted";

fn serve(script: &[&str]) -> String {
    let template = std::fs::read_to_string(engine_tests::fixture("templates/openai-gpt-oss-120b.jinja")).unwrap();
    let file = engine_tests::scripted::make(&SPECIALS, script, &template).unwrap();
    let model = Arc::new(engine::model::Model::from_file(file).unwrap());
    start(Server::builder().model(ModelSpec { id: MODEL.into(), model, chat: true, guard: false, n_ctx: Some(2048), draft: None }))
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

/// The data of a chat completion stream's chunks.
fn chunks(base: &str, body: &Value) -> Vec<Value> {
    let text = Client::new().post(format!("{base}/v1/chat/completions")).json(body).send().unwrap().text().unwrap();
    text.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[test]
fn the_analysis_channel_is_reasoning_content_and_the_final_channel_the_answer() {
    let base = serve(&answer());
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}], "temperature": 0});
    let (s, c) = post(&base, "/v1/chat/completions", body.clone());
    assert_eq!(s, StatusCode::OK, "{c}");
    let message = &c["choices"][0]["message"];
    assert_eq!((message["reasoning_content"].as_str(), message["content"].as_str()), (Some("User asks."), Some("Four.")), "{c}");
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    // the analysis body's tokens and the `<|message|>` / `<|end|>` around it
    assert_eq!(c["usage"]["completion_tokens_details"]["reasoning_tokens"], 4, "{c}");
    // streamed: reasoning deltas, then content deltas, adding up to the same reply
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks = chunks(&base, &streamed);
    let delta = |key: &str| -> String { chunks.iter().filter_map(|c| c["choices"][0]["delta"][key].as_str()).collect() };
    assert_eq!((delta("reasoning_content"), delta("content")), ("User asks.".into(), "Four.".into()));
    // the reasoning came out as it decoded, before the content
    let first_content = chunks.iter().position(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()));
    let reasoning_chunks: Vec<usize> =
        (0..chunks.len()).filter(|&i| chunks[i]["choices"][0]["delta"]["reasoning_content"].as_str().is_some()).collect();
    assert!(reasoning_chunks.len() >= 2 && reasoning_chunks.iter().all(|&i| Some(i) < first_content), "{chunks:?}");
    // reasoning_format "none" keeps the analysis message in the content
    let mut inline = body;
    inline["reasoning_format"] = json!("none");
    let (_, c) = post(&base, "/v1/chat/completions", inline);
    let message = &c["choices"][0]["message"];
    assert_eq!(message["content"], "<|channel|>analysis<|message|>User asks.<|end|>Four.", "{c}");
    assert!(message.get("reasoning_content").is_none(), "{c}");
}

#[test]
fn a_message_to_a_function_is_a_tool_call_on_every_route() {
    let base = serve(&call());
    let body =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": weather_tool(), "temperature": 0});
    let (s, c) = post(&base, "/v1/chat/completions", body.clone());
    assert_eq!(s, StatusCode::OK, "{c}");
    let choice = &c["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{c}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(
        (call["function"]["name"].as_str(), call["function"]["arguments"].as_str()),
        (Some("get_weather"), Some(r#"{"city":"Paris"}"#))
    );
    assert_eq!((choice["message"]["content"].as_str(), choice["message"]["reasoning_content"].as_str()), (None, Some("Need weather.")));
    // streamed: the call comes as tool_calls deltas, never as text
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks = chunks(&base, &streamed);
    let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    let args: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()).collect();
    assert_eq!((content.as_str(), args.as_str()), ("", r#"{"city":"Paris"}"#));
    assert_eq!(chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect::<Vec<_>>(), ["tool_calls"]);
    // without tools the message is to no function the request offers: not part of the reply
    let (_, c) = post(&base, "/v1/chat/completions", json!({"model": MODEL, "messages": body["messages"], "temperature": 0}));
    assert_eq!(
        (c["choices"][0]["message"]["content"].as_str(), c["choices"][0]["finish_reason"].as_str()),
        (Some(""), Some("stop")),
        "{c}"
    );

    // Anthropic's Messages API: a thinking block and a tool_use block
    let tools = json!([{"name": "get_weather", "description": "The weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let messages = json!({"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools, "temperature": 0});
    let (s, m) = post(&base, "/v1/messages", messages.clone());
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!((m["content"][0]["type"].as_str(), m["content"][0]["thinking"].as_str()), (Some("thinking"), Some("Need weather.")), "{m}");
    assert_eq!((m["content"][1]["type"].as_str(), &m["content"][1]["input"]), (Some("tool_use"), &json!({"city": "Paris"})), "{m}");
    assert_eq!(m["stop_reason"], "tool_use");
    let mut streamed = messages;
    streamed["stream"] = json!(true);
    let text = Client::new().post(format!("{base}/v1/messages")).json(&streamed).send().unwrap().text().unwrap();
    let events = named_events(&text);
    let input: String = events.iter().filter_map(|(_, e)| e["delta"]["partial_json"].as_str()).collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"city": "Paris"}));

    // the Responses API: a reasoning item and a function_call item
    let responses = json!({"model": MODEL, "input": "Weather in Paris?", "tools": [{"type": "function", "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}], "temperature": 0});
    let (s, r) = post(&base, "/v1/responses", responses);
    assert_eq!(s, StatusCode::OK, "{r}");
    let types: Vec<&str> = r["output"].as_array().unwrap().iter().filter_map(|o| o["type"].as_str()).collect();
    assert_eq!(types, ["reasoning", "function_call"], "{r}");
    assert_eq!((r["output"][1]["name"].as_str(), r["output"][1]["arguments"].as_str()), (Some("get_weather"), Some(r#"{"city":"Paris"}"#)));
}

#[test]
fn a_conversation_with_the_call_and_its_result_renders_in_harmony() {
    let base = serve(&call());
    // the assistant turn as the server answered it, sent back with the tool's result
    let messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "reasoning_content": "Need weather.",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
    ]);
    let (s, p) = post(&base, "/apply-template", json!({"model": MODEL, "messages": messages, "tools": weather_tool()}));
    assert_eq!(s, StatusCode::OK, "{p}");
    let prompt = p["prompt"].as_str().unwrap();
    for part in [
        "<|start|>assistant<|channel|>analysis<|message|>Need weather.<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
        // the template writes the result's text as a JSON string
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 18}\"<|end|>",
    ] {
        assert!(prompt.contains(part), "{part:?} not in {prompt}");
    }
    assert!(prompt.ends_with("<|start|>assistant"), "{prompt}");
}

#[test]
fn the_reasoning_effort_and_template_kwargs_reach_the_template() {
    let base = serve(&answer());
    let messages = json!([{"role": "user", "content": "2+2?"}]);
    let prompt = |extra: Value| {
        let mut body = json!({"model": MODEL, "messages": messages});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (s, p) = post(&base, "/apply-template", body);
        assert_eq!(s, StatusCode::OK, "{p}");
        p["prompt"].as_str().unwrap().to_string()
    };
    assert!(prompt(json!({})).contains("\nReasoning: medium\n"));
    assert!(prompt(json!({"reasoning_effort": "high"})).contains("\nReasoning: high\n"));
    assert!(prompt(json!({"chat_template_kwargs": {"reasoning_effort": "low"}})).contains("\nReasoning: low\n"));
    // the request's own field wins over the kwargs
    assert!(
        prompt(json!({"chat_template_kwargs": {"reasoning_effort": "low"}, "reasoning_effort": "high"})).contains("\nReasoning: high\n")
    );
    for (bad, field) in [
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
        (json!({"chat_template_kwargs": [1]}), "chat_template_kwargs"),
        // the kwargs cannot replace the messages the guardrails judge
        (json!({"chat_template_kwargs": {"messages": [{"role": "user", "content": "other"}]}}), "chat_template_kwargs"),
    ] {
        let mut body = json!({"model": MODEL, "messages": messages});
        body.as_object_mut().unwrap().extend(bad.as_object().unwrap().clone());
        let (s, e) = post(&base, "/v1/chat/completions", body);
        assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{e}");
    }
    // the Responses API's reasoning.effort is the same setting, echoed back
    let (s, r) = post(&base, "/v1/responses", json!({"model": MODEL, "input": "2+2?", "reasoning": {"effort": "low"}, "temperature": 0}));
    assert_eq!((s, r["reasoning"]["effort"].as_str()), (StatusCode::OK, Some("low")), "{r}");
    assert_eq!(r["output"][1]["content"][0]["text"], "Four.", "{r}");
    let (s, e) = post(&base, "/v1/responses", json!({"model": MODEL, "input": "2+2?", "reasoning": {"effort": "extreme"}}));
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
}
