//! The routes a llama-server client finds besides the OpenAI ones: its names without `/v1`,
//! `/v1/health`, the prompt counts (`/v1/chat/completions/input_tokens` and OpenAI's
//! `/v1/responses/input_tokens`) against the usage the same requests report, `/props`, and
//! `/embedding` against `/v1/embeddings`.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{builder, chat_model, client, common::start, expect_error, CHAT};

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap_or_else(|| panic!("not a vector: {v}")).iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn llama_servers_names_count_the_prompts_the_requests_report() {
    let base = start(builder().api_key(Some("k".into())));
    let c = client();
    let post = |path: &str, body: &Value| -> Value {
        let r = c.post(format!("{base}{path}")).bearer_auth("k").json(body).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        r.json().unwrap()
    };
    // the names without /v1 are the same routes (keyed), /v1/health is open as /health is
    let chat = json!({"model": CHAT, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
                      "max_tokens": 4, "temperature": 0});
    let answer = post("/v1/chat/completions", &chat);
    assert_eq!(post("/chat/completions", &chat)["choices"], answer["choices"]);
    assert_eq!(c.post(format!("{base}/chat/completions")).json(&chat).send().unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(c.get(format!("{base}/v1/health")).send().unwrap().json::<Value>().unwrap()["status"], "ok");
    let models: Value = c.get(format!("{base}/models")).bearer_auth("k").send().unwrap().json().unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 2);
    // a chat request's prompt tokens, tools included, before it is sent
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]);
    let mut with_tools = chat.clone();
    with_tools["tools"] = tools;
    for body in [chat.clone(), with_tools] {
        let counted = post("/v1/chat/completions/input_tokens", &body);
        assert_eq!(counted["object"], "response.input_tokens");
        let used = post("/v1/chat/completions", &body)["usage"]["prompt_tokens"].clone();
        assert_eq!(counted["input_tokens"], used, "{body}");
        assert_eq!(post("/chat/completions/input_tokens", &body)["input_tokens"], used);
    }
    // a Responses request's, its stored conversation included
    let first = json!({"model": CHAT, "input": "Tell me a story", "instructions": "Be brief.", "max_output_tokens": 4, "temperature": 0});
    let counted = post("/v1/responses/input_tokens", &first);
    let made = post("/v1/responses", &first);
    assert_eq!(counted["input_tokens"], made["usage"]["input_tokens"]);
    let next = json!({"model": CHAT, "input": "And then?", "previous_response_id": made["id"], "max_output_tokens": 4, "temperature": 0});
    let counted = post("/responses/input_tokens", &next);
    assert_eq!(counted["input_tokens"], post("/responses", &next)["usage"]["input_tokens"]);
    assert!(counted["input_tokens"].as_u64() > made["usage"]["input_tokens"].as_u64(), "the conversation counts");
    let gone = json!({"model": CHAT, "input": "x", "previous_response_id": "resp_nope"});
    let r = c.post(format!("{base}/v1/responses/input_tokens")).bearer_auth("k").json(&gone).send().unwrap();
    assert_eq!(expect_error(r, StatusCode::NOT_FOUND)["param"], "previous_response_id");
    let r = c.post(format!("{base}/v1/chat/completions/input_tokens")).bearer_auth("k").json(&json!({"model": CHAT})).send().unwrap();
    assert_eq!(expect_error(r, StatusCode::BAD_REQUEST)["param"], "messages");
}

#[test]
fn props_describe_a_generating_model() {
    let base = start(builder());
    let c = client();
    // the only generating model (the guard beside it is not), or the one named
    let props: Value = c.get(format!("{base}/props")).send().unwrap().json().unwrap();
    assert_eq!(props, c.get(format!("{base}/props?model={CHAT}")).send().unwrap().json::<Value>().unwrap());
    let model = chat_model();
    let tok = model.tokenizer();
    let text = |id: Option<u32>| String::from_utf8_lossy(tok.token_text(id.unwrap()).unwrap()).into_owned();
    assert_eq!(props["default_generation_settings"]["n_ctx"], 512);
    assert_eq!(props["total_slots"], 8);
    assert_eq!(props["model_alias"], CHAT);
    assert_eq!(
        (props["bos_token"].as_str().unwrap(), props["eos_token"].as_str().unwrap()),
        (text(tok.bos()).as_str(), text(tok.eos()).as_str())
    );
    let template = engine::chat::ChatTemplate::from_model(&model).unwrap();
    assert_eq!(props["chat_template"], template.source());
    assert_eq!(props["modalities"], json!({"vision": false, "video": false, "audio": false}));
    assert_eq!(props["media_marker"], "<__media__>");
    // the sampling a request gets when it names none
    let params = &props["default_generation_settings"]["params"];
    assert_eq!((params["temperature"].as_f64(), params["top_p"].as_f64(), params["top_k"].as_u64()), (Some(1.0), Some(1.0), Some(0)));
    let r = c.get(format!("{base}/props?model=nope")).send().unwrap();
    assert_eq!(expect_error(r, StatusCode::NOT_FOUND)["code"], "model_not_found");
    let r = c.post(format!("{base}/props")).json(&json!({})).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[test]
fn embedding_answers_in_llama_servers_shape_normalised_as_asked() {
    let base = start(builder());
    let c = client();
    let texts = ["Hello world", "Second text"];
    let oai: Value = c.post(format!("{base}/v1/embeddings")).json(&json!({"model": CHAT, "input": texts})).send().unwrap().json().unwrap();
    let native = |body: Value| -> Value {
        let r = c.post(format!("{base}/embedding")).json(&body).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{body}");
        r.json().unwrap()
    };
    let close =
        |a: &[f64], b: &[f64], tol: f64| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * y.abs().max(1.0));
    // the default, Euclidean: /v1/embeddings' vectors, each in a list of one
    let answer = native(json!({"model": CHAT, "content": texts}));
    for (i, a) in answer.as_array().unwrap().iter().enumerate() {
        assert_eq!(a["index"], i);
        assert_eq!(a["embedding"].as_array().unwrap().len(), 1);
        assert!(close(&floats(&a["embedding"][0]), &floats(&oai["data"][i]["embedding"]), 1e-6), "text {i}");
    }
    let want = floats(&oai["data"][0]["embedding"]);
    // `input` and `/embeddings` alike; token ids
    let ids = engine::embed::tokenize(&chat_model(), &[texts[0]]).unwrap().remove(0);
    for body in [json!({"model": CHAT, "input": texts[0]}), json!({"model": CHAT, "content": ids})] {
        assert!(close(&floats(&native(body.clone())[0]["embedding"][0]), &want, 1e-6), "{body}");
    }
    let r: Value = c.post(format!("{base}/embeddings")).json(&json!({"model": CHAT, "content": texts[0]})).send().unwrap().json().unwrap();
    assert!(close(&floats(&r[0]["embedding"][0]), &want, 1e-6));
    // none: the pooled vector itself, whose Euclidean scaling is the default's
    let raw = floats(&native(json!({"model": CHAT, "content": texts[0], "embd_normalize": -1}))[0]["embedding"][0]);
    let length = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((length - 1.0).abs() > 1e-3, "the raw vector has length {length}");
    assert!(close(&raw.iter().map(|x| x / length).collect::<Vec<_>>(), &want, 1e-5));
    // int16's range, and the taxicab norm
    let int16 = floats(&native(json!({"model": CHAT, "content": texts[0], "embd_normalize": 0}))[0]["embedding"][0]);
    assert!((int16.iter().fold(0.0f64, |m, x| m.max(x.abs())) - 32760.0).abs() < 0.01);
    let taxicab = floats(&native(json!({"model": CHAT, "content": texts[0], "embd_normalize": 1}))[0]["embedding"][0]);
    assert!((taxicab.iter().map(|x| x.abs()).sum::<f64>() - 1.0).abs() < 1e-4);
    for (body, param) in [
        (json!({"model": CHAT}), "content"),
        (json!({"model": CHAT, "content": []}), "content"),
        (json!({"model": CHAT, "input": [""]}), "input"),
        (json!({"model": CHAT, "content": "x", "embd_normalize": 65}), "embd_normalize"),
        (json!({"content": "x"}), "model"),
    ] {
        let e = expect_error(c.post(format!("{base}/embedding")).json(&body).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], param, "{body}: {e}");
    }
}
