//! llama-server's token utilities over real TCP: `/tokenize` and `/detokenize` against the
//! model's own tokenizer, `/apply-template` against its chat template, the errors naming their
//! field, and the API key.

use std::sync::Arc;

use crate::common::{post, start};
use engine::chat::{ChatInput, ChatTemplate};
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

fn one_model() -> ServerBuilder {
    Server::builder().model(ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(512), draft: None })
}

fn two_models() -> ServerBuilder {
    let guard = Arc::new(Model::load(fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf")).unwrap());
    one_model().model(ModelSpec { id: GUARD.into(), model: guard, chat: false, guard: true, n_ctx: Some(1024), draft: None })
}

/// A 400's `param` and `code`.
fn refused(base: &str, path: &str, body: Value) -> (String, String) {
    let (status, e) = post(base, path, body);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
    let e = &e["error"];
    assert!(e["message"].is_string() && e["type"] == "invalid_request_error", "{e}");
    (e["param"].as_str().unwrap_or_default().to_string(), e["code"].as_str().unwrap_or_default().to_string())
}

#[test]
fn tokens_round_trip_through_the_model_s_tokenizer() {
    let base = start(one_model());
    let model = chat_model();
    let tok = model.tokenizer();
    let text = "Hello world, <s> is special";
    let ids = |j: &Value| -> Vec<u32> { j["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect() };

    let (s, plain) = post(&base, "/tokenize", json!({"content": text}));
    assert_eq!(s, StatusCode::OK, "{plain}");
    assert_eq!(ids(&plain), tok.encode(text, false, true));
    let (_, with_bos) = post(&base, "/tokenize", json!({"model": CHAT, "content": text, "add_special": true}));
    assert_eq!(ids(&with_bos), tok.encode(text, true, true));
    assert_eq!(ids(&with_bos)[0], tok.bos().unwrap());
    // `<s>` written as text is the BOS token unless special tokens are not parsed
    assert!(ids(&plain).contains(&tok.bos().unwrap()));
    let (_, letters) = post(&base, "/tokenize", json!({"content": text, "parse_special": false}));
    assert!(!ids(&letters).contains(&tok.bos().unwrap()) && ids(&letters) == tok.encode(text, false, false));

    let (_, pieces) = post(&base, "/tokenize", json!({"content": text, "with_pieces": true}));
    let pieces = pieces["tokens"].as_array().unwrap();
    assert_eq!(pieces.iter().map(|p| p["id"].as_u64().unwrap() as u32).collect::<Vec<_>>(), ids(&plain));
    let joined: String = pieces.iter().map(|p| p["piece"].as_str().unwrap()).collect();
    // the pieces are the text, but for the space SPM puts before the first word
    assert_eq!(joined.strip_prefix(' ').unwrap(), String::from_utf8(tok.detokenize(&ids(&plain), false, true)).unwrap());

    let (s, back) = post(&base, "/detokenize", json!({"tokens": ids(&plain)}));
    assert_eq!(s, StatusCode::OK, "{back}");
    assert_eq!(back["content"], joined);
    let (_, hello) = post(&base, "/tokenize", json!({"content": "Hello world"}));
    assert_eq!(post(&base, "/detokenize", json!({"tokens": hello["tokens"]})).1["content"], " Hello world");
    assert_eq!(post(&base, "/detokenize", json!({"tokens": []})).1["content"], "");
}

#[test]
fn a_piece_that_is_not_utf8_alone_comes_back_as_its_bytes() {
    let base = start(one_model());
    // an emoji is four byte tokens in the tiny llama's vocabulary (byte fallback)
    let (_, j) = post(&base, "/tokenize", json!({"content": "🙂", "with_pieces": true}));
    let pieces = j["tokens"].as_array().unwrap();
    let bytes: Vec<u8> = pieces
        .iter()
        .flat_map(|p| match &p["piece"] {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Array(b) => b.iter().map(|x| x.as_u64().unwrap() as u8).collect(),
            other => panic!("{other}"),
        })
        .collect();
    assert!(pieces.iter().any(|p| p["piece"].is_array()), "{j}");
    assert!(String::from_utf8_lossy(&bytes).ends_with("🙂"), "{j}");
}

#[test]
fn apply_template_renders_what_a_chat_completion_is_given() {
    let base = start(two_models());
    let template = ChatTemplate::from_model(&chat_model()).unwrap();
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]);
    let render = |generation: bool| {
        template.render(&ChatInput { add_generation_prompt: generation, ..ChatInput::new(messages.as_array().unwrap().clone()) }).unwrap()
    };
    let (s, j) = post(&base, "/apply-template", json!({"model": CHAT, "messages": messages}));
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["prompt"], render(true));
    let (_, j) = post(&base, "/apply-template", json!({"model": CHAT, "messages": messages, "add_generation_prompt": false}));
    assert_eq!(j["prompt"], render(false));
    // one model generates: it is the one meant
    assert_eq!(post(&base, "/apply-template", json!({"messages": messages})).1["prompt"], render(true));
    assert_eq!(refused(&base, "/apply-template", json!({"model": CHAT, "messages": []})).0, "messages");
    assert_eq!(refused(&base, "/apply-template", json!({"model": CHAT, "messages": [{"role": "robot"}]})).0, "messages");
    assert_eq!(refused(&base, "/apply-template", json!({"model": CHAT, "messages": messages, "tools": [{"type": "x"}]})).0, "tools");
    assert_eq!(refused(&base, "/apply-template", json!({"model": GUARD, "messages": messages})).0, "model");
    // the messages and tools are checked as chat completions check them: earlier tool calls,
    // names and descriptions have their types
    let call = |function: Value| json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": function}]}]);
    let ok = post(&base, "/apply-template", json!({"model": CHAT, "messages": call(json!({"name": "f", "arguments": "{}"}))}));
    assert_eq!(ok.0, StatusCode::OK, "{}", ok.1);
    for bad in [
        json!({"model": CHAT, "messages": call(json!({"name": "f", "arguments": 5}))}),
        json!({"model": CHAT, "messages": call(json!({"arguments": "{}"}))}),
        json!({"model": CHAT, "messages": [{"role": "tool", "content": "x", "tool_call_id": 7}]}),
        json!({"model": CHAT, "messages": [{"role": "user", "content": "x", "name": []}]}),
        json!({"model": CHAT, "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
    ] {
        assert_eq!(refused(&base, "/apply-template", bad.clone()).0, "messages", "{bad}");
    }
    let described = json!([{"type": "function", "function": {"name": "f", "description": 5}}]);
    assert_eq!(refused(&base, "/apply-template", json!({"model": CHAT, "messages": messages, "tools": described})).0, "tools");
}

#[test]
fn bad_requests_name_their_field() {
    let base = start(two_models());
    let cases = [
        ("/tokenize", json!({"model": CHAT}), "content", "missing_required_parameter"),
        ("/tokenize", json!({"model": CHAT, "content": 5}), "content", "invalid_value"),
        ("/tokenize", json!({"model": CHAT, "content": "x", "with_pieces": "yes"}), "with_pieces", "invalid_value"),
        // two models: which one must be said
        ("/tokenize", json!({"content": "x"}), "model", "missing_required_parameter"),
        ("/detokenize", json!({"model": CHAT, "tokens": [1, -1]}), "tokens[1]", "invalid_value"),
        ("/detokenize", json!({"model": CHAT, "tokens": [1, 4294967296u64]}), "tokens[1]", "invalid_value"),
        ("/detokenize", json!({"model": CHAT, "tokens": "1 2"}), "tokens", "invalid_value"),
        ("/detokenize", json!({"model": CHAT}), "tokens", "missing_required_parameter"),
    ];
    for (path, body, param, code) in cases {
        assert_eq!(refused(&base, path, body.clone()), (param.to_string(), code.to_string()), "{path} {body}");
    }
    let n_vocab = chat_model().tokenizer().n_vocab();
    let (param, _) = refused(&base, "/detokenize", json!({"model": CHAT, "tokens": [n_vocab]}));
    assert_eq!(param, "tokens[0]");
    let (s, j) = post(&base, "/tokenize", json!({"model": "nope", "content": "x"}));
    assert_eq!((s, j["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("model_not_found")), "{j}");
    let r = Client::new().get(format!("{base}/tokenize")).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[test]
fn the_token_routes_need_the_api_key_when_there_is_one() {
    let base = start(one_model().api_key(Some("sekret".into())));
    for path in ["/tokenize", "/detokenize", "/apply-template"] {
        let r = Client::new().post(format!("{base}{path}")).json(&json!({"content": "x", "tokens": [], "messages": []})).send().unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let r = Client::new().post(format!("{base}/tokenize")).bearer_auth("sekret").json(&json!({"content": "x"})).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
