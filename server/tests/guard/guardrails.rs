//! Guardrails on chat completions, the tiny llama fixture as chat model. A threshold of 0 on a
//! risk makes the guard flag everything and a threshold of 1 nothing, so that both paths are
//! deterministic: an input guard refuses before any token is generated, an output guard cuts a
//! stream after its first window (the tokens already sent, or none when held back) and withholds
//! a plain reply; a guard that passes changes nothing of the reply; a continued assistant text is
//! judged with its reply.

use std::sync::Arc;

use engine::model::Model;
use engine_tests::fixture;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server, ServerBuilder, ServerGuardrails};

use super::{guard_path, start, GUARD};

const CHAT: &str = "tiny-llama";

fn builder() -> ServerBuilder {
    let chat = Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap());
    let guard = Arc::new(Model::load(guard_path()).unwrap());
    Server::builder()
        .model(ModelSpec { id: CHAT.into(), model: chat, chat: true, guard: false, n_ctx: Some(512), draft: None })
        .model(ModelSpec { id: GUARD.into(), model: guard, chat: false, guard: true, n_ctx: Some(1024), draft: None })
}

fn chat(base: &str, guard: Value, stream: bool) -> reqwest::blocking::Response {
    let mut body = json!({
        "model": CHAT,
        "messages": [{"role": "user", "content": "Tell me a story about a dragon"}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
    });
    if !guard.is_null() {
        body["guard"] = guard;
    }
    Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap()
}

fn counter(base: &str, name: &str) -> f64 {
    let text = Client::new().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    text.lines().find(|l| l.starts_with(&format!("{name} "))).map_or(0.0, |l| l[name.len() + 1..].trim().parse().unwrap())
}

/// The data events of an SSE body, parsed (`[DONE]` last, as the string).
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| if d == "[DONE]" { json!("[DONE]") } else { serde_json::from_str(d).unwrap() })
        .collect()
}

/// Content deltas' texts, the last choice chunk, and the usage chunk of a stream.
fn read_stream(text: &str) -> (Vec<String>, Value, Value) {
    let evs = events(text);
    assert_eq!(evs.last(), Some(&json!("[DONE]")), "{text}");
    let deltas: Vec<String> = evs
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .filter_map(|c| c["delta"]["content"].as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let last = evs.iter().filter_map(|e| e["choices"].get(0)).rfind(|c| !c["finish_reason"].is_null()).unwrap().clone();
    let usage = evs.iter().rev().find(|e| e["usage"].is_object()).map(|e| e["usage"].clone()).unwrap_or(Value::Null);
    (deltas, last, usage)
}

#[test]
fn an_input_guard_refuses_before_any_token_is_generated() {
    let base = start(builder());
    let before = counter(&base, "tokens_generated_total");
    let r = chat(&base, json!({"input": true, "output": false, "risks": ["harm"], "thresholds": {"harm": 0.0}}), false);
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: Value = r.json().unwrap();
    assert_eq!((e["error"]["code"].as_str(), e["error"]["param"].as_str()), (Some("content_filter"), Some("messages")), "{e}");
    assert_eq!(e["error"]["message"], "the input was flagged by the guard (harm)");
    let guard = &e["error"]["guard"];
    assert_eq!((guard["stage"].as_str(), guard["flagged"].as_bool(), guard["model"].as_str()), (Some("input"), Some(true), Some(GUARD)));
    assert_eq!(guard["verdicts"][0]["risk"], "harm");
    // streamed: the same refusal, before the stream starts
    let r = chat(&base, json!({"output": false, "risks": ["harm"], "thresholds": {"harm": 0.0}}), true);
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(counter(&base, "tokens_generated_total"), before, "nothing was generated");
    // a passing input guard: the reply as without one
    let plain: Value = chat(&base, Value::Null, false).json().unwrap();
    let guarded: Value = chat(&base, json!({"output": false, "thresholds": {"harm": 1.0}}), false).json().unwrap();
    assert_eq!(plain["choices"][0]["message"], guarded["choices"][0]["message"]);
}

#[test]
fn an_output_guard_cuts_a_stream_with_content_filter_and_the_verdicts() {
    let base = start(builder());
    let flag_all = json!({"input": false, "risks": ["harm"], "thresholds": {"harm": 0.0}, "every": 4});
    let (plain, plain_last, _) = read_stream(&chat(&base, Value::Null, true).text().unwrap());
    assert!(plain.len() > 8, "{plain:?}");

    // stream_first (the default): the first window went out before its check flagged it
    let (deltas, last, usage) = read_stream(&chat(&base, flag_all.clone(), true).text().unwrap());
    assert_eq!(last["finish_reason"], "content_filter");
    assert_eq!((last["guard"]["stage"].as_str(), last["guard"]["flagged"].as_bool()), (Some("output"), Some(true)), "{last}");
    // the first window's 4 tokens (a token may end inside a character: then fewer deltas), then
    // nothing
    assert!(!deltas.is_empty() && deltas.len() <= 4, "{deltas:?}");
    assert_eq!(deltas[..], plain[..deltas.len()]);
    assert!(deltas.concat().len() < plain.concat().len());
    assert!(usage["completion_tokens"].as_u64().unwrap() >= 4, "{usage}");

    // held back: nothing of the flagged window is sent
    let mut held = flag_all.clone();
    held["stream_first"] = json!(false);
    let (deltas, last, _) = read_stream(&chat(&base, held, true).text().unwrap());
    assert!(deltas.is_empty(), "{deltas:?}");
    assert_eq!(last["finish_reason"], "content_filter");

    // several choices: each is cut on its own, and the stream ends once all are
    let body = json!({"model": CHAT, "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 200, "n": 2, "seed": 3, "stream": true, "guard": flag_all});
    let text = Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().text().unwrap();
    let finals: Vec<Value> =
        events(&text).iter().filter_map(|e| e["choices"].get(0)).filter(|c| !c["finish_reason"].is_null()).cloned().collect();
    let mut cut: Vec<u64> =
        finals.iter().filter(|c| c["finish_reason"] == "content_filter").map(|c| c["index"].as_u64().unwrap()).collect();
    cut.sort_unstable();
    assert_eq!(cut, [0, 1], "{text}");

    // a cut reply stops its generation on purpose: no cancelled request
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(counter(&base, "requests_cancelled_total"), 0.0);

    // a guard that passes every window: the same text, held back or not, and the last verdicts
    for stream_first in [true, false] {
        let pass = json!({"input": false, "risks": ["harm"], "thresholds": {"harm": 1.0}, "every": 5, "stream_first": stream_first});
        let (deltas, last, _) = read_stream(&chat(&base, pass, true).text().unwrap());
        assert_eq!(deltas.concat(), plain.concat());
        assert_eq!(last["finish_reason"], plain_last["finish_reason"]);
        assert_eq!(last["guard"]["flagged"], false, "{last}");
    }
}

#[test]
fn an_output_guard_withholds_a_flagged_plain_reply() {
    let base = start(builder());
    // `input: false`, or naming only `output`: the input is not judged (it would be flagged)
    for only_output in [json!({"input": false}), json!({"output": true})] {
        let mut guard = json!({"risks": ["violence"], "thresholds": {"violence": 0.0}});
        guard.as_object_mut().unwrap().extend(only_output.as_object().unwrap().clone());
        let r: Value = chat(&base, guard, false).json().unwrap();
        let choice = &r["choices"][0];
        assert_eq!((choice["finish_reason"].as_str(), choice["message"]["content"].clone()), (Some("content_filter"), Value::Null), "{r}");
        assert_eq!(choice["guard"]["verdicts"][0]["risk"], "violence");
    }
    // naming only `input`: the output is not judged
    let r: Value = chat(&base, json!({"input": true, "risks": ["violence"], "thresholds": {"violence": 1.0}}), false).json().unwrap();
    assert!(r["choices"][0].get("guard").is_none() && r["choices"][0]["finish_reason"] != "content_filter", "{r}");
    let r: Value = chat(&base, json!({"input": false, "thresholds": {"violence": 1.0}, "risks": ["violence"]}), false).json().unwrap();
    assert!(r["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()), "{r}");
    assert_eq!(r["choices"][0]["guard"]["flagged"], false);
}

#[test]
fn bad_guard_fields_are_refused_by_name_and_server_guardrails_need_no_field() {
    let base = start(builder());
    for (guard, message) in [
        (json!(true), "guard must be an object"),
        (json!({"input": false, "output": false}), "guard needs input or output"),
        (json!({"every": 0}), "guard.every must be an integer from 1 to 4096"),
        (json!({"risks": ["nope"]}), "invalid risk category: nope"),
        (json!({"risks": ["groundedness"]}), "only the 9 harm risks"),
        (json!({"colour": 1}), "unknown field guard.colour"),
        (json!({"model": CHAT}), "is not a guard model"),
        (json!({"policy": "strict"}), "unknown policy `strict`"),
    ] {
        let r = chat(&base, guard.clone(), false);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{guard}");
        let e: Value = r.json().unwrap();
        assert!(e["error"]["message"].as_str().unwrap().contains(message), "{guard}: {e}");
        assert!(e["error"]["param"].as_str().unwrap().starts_with("guard"), "{e}");
    }
    let policies =
        engine::guard::Policies::from_toml("default = \"all\"\n[policies.all]\nthresholds = { harm = 0.0 }\n", "p.toml").unwrap();
    let guarded = start(builder().guard_policies(policies).guardrails(ServerGuardrails { input: true, output: false }));
    let r = chat(&guarded, Value::Null, false);
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: Value = r.json().unwrap();
    assert_eq!((e["error"]["code"].as_str(), e["error"]["guard"]["policy"].as_str()), (Some("content_filter"), Some("all")), "{e}");
    assert!(Server::builder()
        .model(ModelSpec {
            id: CHAT.into(),
            model: Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap()),
            chat: true,
            guard: false,
            n_ctx: Some(256),
            draft: None
        })
        .guardrails(ServerGuardrails { input: true, output: true })
        .build()
        .is_err());
}

#[test]
fn an_output_guard_judges_a_continued_text_and_its_reply_as_one_turn() {
    let base = start(builder());
    let user = "Tell me a story about a dragon";
    let prefill = "Once upon a time";
    let post = |path: &str, body: Value| -> Value {
        let r = Client::new().post(format!("{base}{path}")).json(&body).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json().unwrap()
    };
    let body = json!({
        "model": CHAT,
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": prefill}],
        "max_tokens": 12,
        "temperature": 0,
        "guard": {"input": false, "risks": ["harm"], "thresholds": {"harm": 1.0}},
    });
    let r = post("/v1/chat/completions", body.clone());
    let reply = r["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let judged = &r["choices"][0]["guard"]["verdicts"][0];
    // the guard's own route on the whole assistant turn gives the same verdict; on the reply
    // alone, another
    let judge = |assistant: String| {
        post("/v1/guard", json!({"model": GUARD, "input": {"user": user, "assistant": assistant}, "risks": ["harm"]}))["verdicts"][0]
            .clone()
    };
    assert_eq!(*judged, judge(format!("{prefill}{reply}")), "{r}");
    assert_ne!(*judged, judge(reply.clone()), "{r}");
    // streamed, a window that reaches back to the reply's start reads the text before it too
    let mut body = body;
    body["stream"] = json!(true);
    body["guard"]["every"] = json!(64);
    let text = Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().text().unwrap();
    let (deltas, last, _) = read_stream(&text);
    assert_eq!(deltas.concat(), reply);
    assert_eq!(last["guard"]["verdicts"][0], *judged, "{last}");
}
