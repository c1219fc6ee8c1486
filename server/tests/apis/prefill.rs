//! Continuing a last assistant message (a prefill) over real TCP: the chat completion, Messages
//! and `/apply-template` prompts that end in its text, replies equal to a plain completion of
//! that prompt, the Responses API's new turn, the server's default and the request's own say,
//! and a thinking block the text left open.

use std::sync::Arc;

use crate::common::{post, sse_records, start, thinking_model, tiny_llama};
use engine::chat::tokenize_rendered;
use engine::model::Model;
use engine_tests::fixture;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server};

const CHAT: &str = "tiny-llama";
const PREFILL: &str = "Sure, here";

fn conversation(last: Option<&str>) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "Hello"})];
    if let Some(text) = last {
        messages.push(json!({"role": "assistant", "content": text}));
    }
    Value::Array(messages)
}

/// `/apply-template`'s prompt for `messages` with the request's other `fields`.
fn prompt(base: &str, messages: &Value, fields: Value) -> String {
    let mut body = json!({"model": CHAT, "messages": messages});
    body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    let (s, j) = post(base, "/apply-template", body);
    assert_eq!(s, StatusCode::OK, "{j}");
    j["prompt"].as_str().unwrap().to_string()
}

/// A greedy chat completion of `messages` (with `fields`), 12 tokens.
fn chat(base: &str, messages: &Value, fields: Value) -> Value {
    let mut body = json!({"model": CHAT, "messages": messages, "max_tokens": 12, "temperature": 0});
    body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    let (s, j) = post(base, "/v1/chat/completions", body);
    assert_eq!(s, StatusCode::OK, "{j}");
    j
}

/// The greedy 12-token completion of `prompt`'s token ids, as the chat routes tokenize it, and
/// how many ids it has.
fn completion_of(base: &str, model: &Model, prompt: &str) -> (String, u64) {
    let ids = tokenize_rendered(model.tokenizer(), prompt);
    let (s, j) = post(base, "/v1/completions", json!({"model": CHAT, "prompt": ids, "max_tokens": 12, "temperature": 0}));
    assert_eq!(s, StatusCode::OK, "{j}");
    (j["choices"][0]["text"].as_str().unwrap().to_string(), ids.len() as u64)
}

#[test]
fn a_last_assistant_text_is_continued_as_a_completion_of_the_prompt_that_ends_in_it() {
    let base = start(tiny_llama(CHAT));
    let model = Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    let prefilled = conversation(Some(PREFILL));

    // the prompt is the new turn's, then the text; asked apart, the turn is closed and a new one
    // opens, or the prompt ends with the messages
    let new_turn = prompt(&base, &conversation(None), json!({}));
    let continued = prompt(&base, &prefilled, json!({}));
    assert_eq!(continued, format!("{new_turn}{PREFILL}"));
    assert_eq!(prompt(&base, &prefilled, json!({"continue_final_message": true, "add_generation_prompt": false})), continued);
    let after = prompt(&base, &prefilled, json!({"continue_final_message": false}));
    assert!(
        after.starts_with(&continued)
            && after.len() > continued.len()
            && after.ends_with(&new_turn[new_turn.rfind("<|im_start|>").unwrap()..]),
        "{after}"
    );
    let closed = prompt(&base, &prefilled, json!({"add_generation_prompt": false}));
    assert!(after.starts_with(&closed) && closed.len() > continued.len(), "{closed}");

    // the reply is what a plain completion of that prompt says, whole or streamed
    let (text, prompt_ids) = completion_of(&base, &model, &continued);
    let c = chat(&base, &prefilled, json!({}));
    assert_eq!(
        (c["choices"][0]["message"]["content"].as_str(), c["usage"]["prompt_tokens"].as_u64()),
        (Some(text.as_str()), Some(prompt_ids)),
        "{c}"
    );
    let r = Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": CHAT, "messages": prefilled, "max_tokens": 12, "temperature": 0, "stream": true}))
        .send()
        .unwrap();
    let streamed: String = sse_records(&r.text().unwrap())
        .iter()
        .filter(|(_, data)| data != "[DONE]")
        .filter_map(|(_, data)| serde_json::from_str::<Value>(data).unwrap()["choices"][0]["delta"]["content"].as_str().map(String::from))
        .collect();
    assert_eq!(streamed, text);
    let (_, new_ids) = completion_of(&base, &model, &after);
    assert_eq!(chat(&base, &prefilled, json!({"continue_final_message": false}))["usage"]["prompt_tokens"].as_u64(), Some(new_ids));

    // Anthropic's Messages API continues it too; OpenAI's Responses API answers with a new turn
    let (s, m) = post(&base, "/v1/messages", json!({"model": CHAT, "max_tokens": 12, "temperature": 0, "messages": prefilled}));
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!((m["content"][0]["text"].as_str(), m["usage"]["input_tokens"].as_u64()), (Some(text.as_str()), Some(prompt_ids)), "{m}");
    let (_, counted) = post(&base, "/v1/messages/count_tokens", json!({"model": CHAT, "messages": prefilled}));
    assert_eq!(counted["input_tokens"].as_u64(), Some(prompt_ids), "{counted}");
    // a prefill that ends in white space is refused, as Anthropic refuses it (plain text or a
    // last text block); white space earlier in it is not
    let spaced = |content: Value| {
        let mut messages = conversation(None);
        messages.as_array_mut().unwrap().push(json!({"role": "assistant", "content": content}));
        messages
    };
    for (content, refused) in [
        (json!("Sure, here "), true),
        (json!("Sure,\nhere"), false),
        (json!("Sure,\n"), true),
        (json!([{"type": "text", "text": "Sure, "}, {"type": "text", "text": "here\t"}]), true),
        (json!([{"type": "text", "text": "Sure, "}, {"type": "text", "text": "here"}]), false),
    ] {
        for route in ["/v1/messages", "/v1/messages/count_tokens"] {
            let (s, e) = post(&base, route, json!({"model": CHAT, "max_tokens": 2, "messages": spaced(content.clone())}));
            if refused {
                assert_eq!(s, StatusCode::BAD_REQUEST, "{route} {content}: {e}");
                assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
                assert_eq!(e["error"]["message"], "messages: final assistant content cannot end with trailing whitespace", "{e}");
            } else {
                assert_eq!(s, StatusCode::OK, "{route} {content}: {e}");
            }
        }
    }
    let (s, r) = post(&base, "/v1/responses", json!({"model": CHAT, "input": prefilled, "max_output_tokens": 4, "temperature": 0}));
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["usage"]["input_tokens"].as_u64(), Some(new_ids), "{r}");

    // asked for with nothing to continue, or beside a generation prompt: a 400 naming the field
    for (messages, fields) in [
        (conversation(None), json!({"continue_final_message": true})),
        (prefilled.clone(), json!({"continue_final_message": true, "add_generation_prompt": true})),
    ] {
        let mut body = json!({"model": CHAT, "messages": messages, "max_tokens": 2});
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        let (s, e) = post(&base, "/v1/chat/completions", body);
        assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("continue_final_message")), "{e}");
    }
}

#[test]
fn without_the_default_a_request_still_asks_for_the_continuation_and_messages_always_do() {
    let base = start(tiny_llama(CHAT).prefill_assistant(false));
    let model = Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    let prefilled = conversation(Some(PREFILL));
    let continued = format!("{}{PREFILL}", prompt(&base, &conversation(None), json!({})));
    let new_turn = prompt(&base, &prefilled, json!({}));
    assert_ne!(new_turn, continued);
    assert_eq!(prompt(&base, &prefilled, json!({"continue_final_message": true})), continued);
    let (_, new_ids) = completion_of(&base, &model, &new_turn);
    let (text, prompt_ids) = completion_of(&base, &model, &continued);
    assert_eq!(chat(&base, &prefilled, json!({}))["usage"]["prompt_tokens"].as_u64(), Some(new_ids));
    let c = chat(&base, &prefilled, json!({"continue_final_message": true}));
    assert_eq!(
        (c["choices"][0]["message"]["content"].as_str(), c["usage"]["prompt_tokens"].as_u64()),
        (Some(text.as_str()), Some(prompt_ids))
    );
    let (_, m) = post(&base, "/v1/messages", json!({"model": CHAT, "max_tokens": 12, "temperature": 0, "messages": prefilled}));
    assert_eq!(m["content"][0]["text"].as_str(), Some(text.as_str()), "{m}");
}

#[test]
fn a_thinking_block_the_continued_text_left_open_goes_on_as_reasoning() {
    let model: Arc<Model> = thinking_model();
    let base = start(Server::builder().model(ModelSpec {
        id: CHAT.into(),
        model: model.clone(),
        chat: true,
        guard: false,
        n_ctx: Some(512),
        draft: None,
    }));
    // the template's assistant turn opens no block: the text's own tag does
    let open = conversation(Some("<think>\nLet me"));
    let (text, _) = completion_of(&base, &model, &prompt(&base, &open, json!({})));
    let c = chat(&base, &open, json!({}));
    let message = &c["choices"][0]["message"];
    // random weights never close the block: all of the reply is reasoning, every character kept
    assert_eq!(message["reasoning_content"].as_str(), Some(text.as_str()), "{c}");
    assert!(message["content"].as_str().unwrap_or_default().is_empty(), "{c}");
    // kept inline, the reply is the text that follows the prefill, with no tag added
    let inline = chat(&base, &open, json!({"reasoning_format": "none"}));
    assert_eq!(inline["choices"][0]["message"]["content"].as_str(), Some(text.as_str()), "{inline}");
    // a block the text closed leaves the reply all content
    let closed = conversation(Some("<think>\nDone.\n</think>\n\nThe"));
    let (text, _) = completion_of(&base, &model, &prompt(&base, &closed, json!({})));
    let c = chat(&base, &closed, json!({}));
    assert_eq!(c["choices"][0]["message"]["content"].as_str(), Some(text.as_str()), "{c}");
    assert!(c["choices"][0]["message"]["reasoning_content"].is_null(), "{c}");
}
