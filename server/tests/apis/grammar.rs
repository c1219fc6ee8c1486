//! llama-server's `grammar` field over real TCP: chat and text completions (whole, streamed,
//! several choices) decoded under a GBNF grammar on the tiny llama's random weights, so that
//! only the grammar shapes the text; a malformed grammar is a 400 naming its line and column,
//! and a grammar beside another constraint is refused.

use crate::common::{post, sse_records, start, tiny_llama};
use reqwest::StatusCode;
use serde_json::{json, Value};

const CHAT: &str = "tiny-llama";

/// `yes, ` or `no, `, two to five lowercase letters, a full stop: short enough that random
/// weights finish it within the token budget.
const ANSWER: &str = "# a verdict and a word\nroot ::= ( \"yes\" | \"no\" ) \", \" word \".\"\nword ::= [a-z]{2,5}\n";

fn is_answer(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("yes, ").or_else(|| text.strip_prefix("no, ")) else { return false };
    let Some(word) = rest.strip_suffix('.') else { return false };
    (2..=5).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_lowercase())
}

#[test]
fn chat_and_text_completions_follow_the_grammar() {
    let base = start(tiny_llama(CHAT));
    for stream in [false, true] {
        let body = json!({"model": CHAT, "messages": [{"role": "user", "content": "Well?"}], "grammar": ANSWER,
                          "n": 3, "temperature": 1.0, "seed": 7, "max_tokens": 40, "stream": stream});
        let r = reqwest::blocking::Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let mut texts = vec![String::new(); 3];
        let mut finishes = vec![String::new(); 3];
        if stream {
            for (_, data) in sse_records(&r.text().unwrap()).into_iter().filter(|(_, d)| d != "[DONE]") {
                let chunk: Value = serde_json::from_str(&data).unwrap();
                for c in chunk["choices"].as_array().unwrap() {
                    let i = c["index"].as_u64().unwrap() as usize;
                    texts[i].push_str(c["delta"]["content"].as_str().unwrap_or_default());
                    if let Some(f) = c["finish_reason"].as_str() {
                        finishes[i] = f.to_string();
                    }
                }
            }
        } else {
            let v: Value = r.json().unwrap();
            for c in v["choices"].as_array().unwrap() {
                let i = c["index"].as_u64().unwrap() as usize;
                texts[i] = c["message"]["content"].as_str().unwrap().to_string();
                finishes[i] = c["finish_reason"].as_str().unwrap().to_string();
            }
        }
        for (text, finish) in texts.iter().zip(&finishes) {
            assert!(is_answer(text), "stream={stream}: {text:?}");
            assert_eq!(finish, "stop", "the grammar ended the reply: {text:?}");
        }
    }
    let (status, v) = post(
        &base,
        "/v1/completions",
        json!({"model": CHAT, "prompt": ["Well?", "So?"], "grammar": ANSWER,
                                                          "temperature": 1.0, "seed": 3, "max_tokens": 40}),
    );
    assert_eq!(status, StatusCode::OK, "{v}");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    for c in choices {
        assert!(is_answer(c["text"].as_str().unwrap()) && c["finish_reason"] == "stop", "{c}");
    }
    // an empty grammar is no grammar (llama-server's default): the same seeded sample as without
    // one, which no grammar would allow
    let body = |grammar: Option<&str>| {
        let mut b = json!({"model": CHAT, "prompt": "Well?", "temperature": 1.0, "seed": 11, "max_tokens": 12});
        if let Some(g) = grammar {
            b["grammar"] = json!(g);
        }
        b
    };
    let (status, empty) = post(&base, "/v1/completions", body(Some("")));
    let (_, none) = post(&base, "/v1/completions", body(None));
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty["choices"][0]["text"], none["choices"][0]["text"]);
    assert_eq!(empty["choices"][0]["finish_reason"], none["choices"][0]["finish_reason"]);
    assert!(!is_answer(empty["choices"][0]["text"].as_str().unwrap()), "{empty}");
}

#[test]
fn a_bad_grammar_is_a_400_naming_where() {
    let base = start(tiny_llama(CHAT));
    let messages = json!([{"role": "user", "content": "Well?"}]);
    let refused = |path: &str, body: Value| -> Value {
        let (status, v) = post(&base, path, body);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        let e = &v["error"];
        assert!(e["message"].is_string() && e["type"] == "invalid_request_error", "{v}");
        e.clone()
    };
    let bad = "root ::= \"a\" rest\nrest ::= ( \"b\" | \"c\"\n";
    for (path, body) in [
        ("/v1/chat/completions", json!({"model": CHAT, "messages": messages, "grammar": bad})),
        ("/v1/completions", json!({"model": CHAT, "prompt": "x", "grammar": bad})),
    ] {
        let e = refused(path, body);
        assert_eq!(e["param"], "grammar", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("line 3, column 1") && message.contains("group opened at line 2, column 10"), "{message}");
    }
    let e = refused("/v1/chat/completions", json!({"model": CHAT, "messages": messages, "grammar": "root ::= <nope>"}));
    assert!(e["param"] == "grammar" && e["message"].as_str().unwrap().contains("<nope>"), "{e}");
    let e = refused(
        "/v1/chat/completions",
        json!({"model": CHAT, "messages": messages, "grammar": ANSWER, "response_format": {"type": "json_object"}}),
    );
    assert_eq!(e["param"], "grammar");
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let e = refused(
        "/v1/chat/completions",
        json!({"model": CHAT, "messages": messages, "grammar": ANSWER, "tools": tools, "tool_choice": "required"}),
    );
    assert_eq!(e["param"], "grammar");
    let e = refused("/v1/chat/completions", json!({"model": CHAT, "messages": messages, "grammar": 5}));
    assert_eq!(e["param"], "grammar");
}
