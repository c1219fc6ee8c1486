//! LoRA adapters over real TCP: the tiny llama architecture model with the tests' two adapters
//! (`engine_tests::lora`; `llama-all` at global scale 1, `llama-qv` loaded at 0). A request's
//! first token and its log-probability are llama.cpp's under the same adapters and scales (the
//! LoRA goldens), whether the scales come from the request's `lora` or from
//! `POST /lora-adapters`; requests with different adapters batched together keep their outputs;
//! the prefix cache is shared only under the same adapters (an activated adapter's sequence
//! shares the positions before its invocation with those without it); bad ids and bodies are
//! 400s.

use std::path::PathBuf;
use std::sync::Arc;

use crate::common::{post, start};
use engine::gguf::GgufFile;
use engine::model::Model;
use engine_tests::lora::{self, IDS};
use engine_tests::{fixture, read_f32s};
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server};

const ID: &str = "tiny-arch-llama";

/// The adapter `name` written to a file of its own (its path is what `GET /lora-adapters` lists).
fn adapter_path(name: &str) -> PathBuf {
    let spec = lora::spec(name);
    let bytes = lora::make(&GgufFile::open(fixture(spec.base)).unwrap(), spec).unwrap();
    // a file per server: rewriting one another test holds mapped would pull its pages away
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("engine-lora-{}-{n}-{name}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn serve() -> (String, Vec<PathBuf>) {
    let mut model = Model::load(fixture("archs/llama-s1.gguf")).unwrap();
    let paths = vec![adapter_path("llama-all"), adapter_path("llama-qv")];
    model.load_adapter(&paths[0], Some(1.0)).unwrap();
    model.load_adapter(&paths[1], None).unwrap();
    // the adapters stay mapped: the files can go
    paths.iter().for_each(|p| std::fs::remove_file(p).unwrap());
    let spec = ModelSpec { id: ID.into(), model: Arc::new(model), chat: true, guard: false, n_ctx: Some(256), draft: None };
    (start(Server::builder().model(spec)), paths)
}

/// A greedy completion of the golden ids (`extra` added to the request).
fn complete(base: &str, max_tokens: usize, extra: Value) -> Value {
    let mut body = json!({"model": ID, "prompt": IDS, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, v) = post(base, "/v1/completions", body);
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

/// llama.cpp's best token after the golden ids and its log-probability, under `case`'s adapters.
fn llama_cpp_first(case: &str) -> (u32, f32) {
    let all = read_f32s(&fixture(&format!("lora/{case}.logits.bin")));
    let row = &all[all.len() - 128..];
    let best = (0..128).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap();
    let max = row[best];
    let log_sum = row.iter().map(|&v| ((v - max) as f64).exp()).sum::<f64>().ln() as f32;
    (best as u32, -log_sum)
}

fn first(v: &Value) -> (u32, f32) {
    let lp = &v["choices"][0]["logprobs"];
    let token: String = lp["tokens"][0].as_str().unwrap().to_string();
    // the test vocabulary's pieces are the ids in hex
    (u32::from_str_radix(&token, 16).unwrap(), lp["token_logprobs"][0].as_f64().unwrap() as f32)
}

fn assert_first_is(v: &Value, case: &str) {
    let ((ours, lp), (want, want_lp)) = (first(v), llama_cpp_first(case));
    assert_eq!(ours, want, "{case}: the first token");
    assert!((lp - want_lp).abs() < 1e-3, "{case}: log-probability {lp} against llama.cpp's {want_lp}");
}

#[test]
fn requests_choose_adapters_and_scales_as_llama_cpp_runs_them() {
    let (base, paths) = serve();
    let client = reqwest::blocking::Client::new();
    let list: Value = client.get(format!("{base}/lora-adapters")).send().unwrap().json().unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    assert_eq!((list[0]["id"].as_u64(), list[0]["scale"].as_f64()), (Some(0), Some(1.0)));
    assert_eq!((list[1]["id"].as_u64(), list[1]["scale"].as_f64()), (Some(1), Some(0.0)));
    assert_eq!(list[0]["path"], paths[0].display().to_string());
    assert_eq!((list[1]["name"].as_str(), list[1]["rank"].as_u64()), (Some("llama-qv"), Some(4)));
    // the served document offers the ids there are
    let doc = client.get(format!("{base}/openapi.yaml")).send().unwrap().text().unwrap();
    assert!(doc.contains("id: {type: integer, minimum: 0, maximum: 1, description: \"an adapter's id"), "the adapters' ids");
    assert!(doc.contains("operationId: setLoraAdapters"));

    // the global scales: llama-all at 1
    assert_first_is(&complete(&base, 1, json!({})), "llama-all");
    // the request's own: both adapters, the listed order does not matter
    let two = json!({"lora": [{"id": 1, "scale": 2.0}, {"id": 0, "scale": 0.5}]});
    assert_first_is(&complete(&base, 1, two.clone()), "llama-two");
    // an empty list: no adapter, the model's own logits (differing from both)
    let bare = first(&complete(&base, 1, json!({"lora": []})));
    assert!((bare.1 - llama_cpp_first("llama-all").1).abs() > 1e-2 && (bare.1 - llama_cpp_first("llama-two").1).abs() > 1e-2);

    // new global scales: the two-adapter case without a request list; GET shows them
    let r = client.post(format!("{base}/lora-adapters")).json(&json!([{"id": 0, "scale": 0.5}, {"id": 1, "scale": 2.0}])).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap(), json!({"success": true}));
    assert_first_is(&complete(&base, 1, json!({})), "llama-two");
    let list: Value = client.get(format!("{base}/lora-adapters?model={ID}")).send().unwrap().json().unwrap();
    assert_eq!((list[0]["scale"].as_f64(), list[1]["scale"].as_f64()), (Some(0.5), Some(2.0)));
    // the object form; an adapter left out goes to 0
    let r = client.post(format!("{base}/lora-adapters")).json(&json!({"model": ID, "adapters": [{"id": 0, "scale": 1}]})).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_first_is(&complete(&base, 1, json!({})), "llama-all");
}

#[test]
fn different_adapters_batch_together_and_share_no_cached_prefix() {
    let (base, _) = serve();
    let sets = [json!({"lora": []}), json!({"lora": [{"id": 0, "scale": 1.0}]}), json!({"lora": [{"id": 1, "scale": -1.5}]})];
    let alone: Vec<Value> = sets.iter().map(|s| complete(&base, 12, s.clone())["choices"][0]["text"].clone()).collect();
    assert!(alone[0] != alone[1] || alone[0] != alone[2], "the adapters change the output: {alone:?}");
    // all three at once, several times: each keeps its output
    for _ in 0..2 {
        let together: Vec<Value> = std::thread::scope(|s| {
            let handles: Vec<_> =
                sets.iter().map(|set| s.spawn(|| complete(&base, 12, set.clone())["choices"][0]["text"].clone())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(together, alone);
    }
    // the same prompt under other adapters reuses nothing; under the same ones, its prefix
    let cached = |v: &Value| v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let fresh = json!({"lora": [{"id": 0, "scale": 0.25}]});
    assert_eq!(cached(&complete(&base, 1, fresh.clone())), 0, "no sequence ran with these adapters before");
    assert!(cached(&complete(&base, 1, fresh)) > 0, "the same adapters reuse the prefix");
}

#[test]
fn unknown_repeated_or_malformed_adapter_choices_are_400s() {
    let (base, _) = serve();
    let body = |lora: Value| json!({"model": ID, "prompt": IDS, "max_tokens": 1, "lora": lora});
    for (lora, says) in [
        (json!([{"id": 2, "scale": 1.0}]), "adapter 2 is not loaded"),
        (json!([{"id": 0, "scale": 1.0}, {"id": 0, "scale": 0.5}]), "named twice"),
        (json!([{"id": -1, "scale": 1.0}]), "lora"),
        (json!([{"id": 0}]), "scale"),
        (json!({"id": 0, "scale": 1}), "lora"),
    ] {
        let (status, v) = post(&base, "/v1/completions", body(lora.clone()));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{lora}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{lora}: {v}");
        assert!(v["error"]["param"].as_str().unwrap().starts_with("lora"), "{lora}: {v}");
    }
    // the chat route reads the same field (this model has no template: the field is checked first)
    let (status, v) = post(
        &base,
        "/v1/chat/completions",
        json!({"model": ID, "messages": [{"role": "user", "content": "hi"}], "lora": [{"id": 9, "scale": 1}]}),
    );
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    let client = reqwest::blocking::Client::new();
    for bad in [json!([{"id": 5, "scale": 1.0}]), json!("all"), json!({"adapters": [{"id": 0, "scale": 1, "extra": 1}]})] {
        let r = client.post(format!("{base}/lora-adapters")).json(&bad).send().unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        let v: Value = r.json().unwrap();
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    let r = client.post(format!("{base}/lora-adapters")).body("[{").send().unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = client.get(format!("{base}/lora-adapters?model=nobody")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // the scales did not change
    let list: Value = client.get(format!("{base}/lora-adapters")).send().unwrap().json().unwrap();
    assert_eq!((list[0]["scale"].as_f64(), list[1]["scale"].as_f64()), (Some(1.0), Some(0.0)));
}

/// The model's own best token after the golden ids and its log-probability (no adapter).
fn bare_first() -> (u32, f32) {
    let model = Model::load(fixture("archs/llama-s1.gguf")).unwrap();
    let mut kv = model.new_kv_cache(engine::kv_cache::KvType::F32, 64);
    let logits = model.forward(&mut kv, &engine::model::BatchEntry::sequence(0, IDS, 0, false)).unwrap();
    let row = logits.row(0);
    let best = (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap();
    let log_sum = row.iter().map(|&v| ((v - row[best]) as f64).exp()).sum::<f64>().ln() as f32;
    (best as u32, -log_sum)
}

/// An activated adapter (`llama-alora`, invocation `[7, 33]` at position 7 of the golden ids,
/// loaded at global scale 0): listed with its invocation; a request naming it gets llama.cpp's
/// first token with the adapter run from the invocation on, and reuses what a request without
/// it cached before the invocation, and only that; one without it reuses only the positions
/// before the invocation of what the adapter's request cached.
#[test]
fn an_activated_adapter_reuses_the_base_models_cache_up_to_its_invocation() {
    let mut model = Model::load(fixture("archs/llama-s1.gguf")).unwrap();
    let path = adapter_path("llama-alora");
    model.load_adapter(&path, Some(0.0)).unwrap();
    std::fs::remove_file(&path).unwrap();
    let spec = ModelSpec { id: ID.into(), model: Arc::new(model), chat: true, guard: false, n_ctx: Some(256), draft: None };
    // an f32 cache, as llama.cpp's goldens ran
    let scheduling = server::Scheduling { kv_types: engine::kv_cache::KvType::F32.into(), ..Default::default() };
    let base = start(Server::builder().scheduling(scheduling).model(spec));
    let list: Value = reqwest::blocking::get(format!("{base}/lora-adapters")).unwrap().json().unwrap();
    assert_eq!(list[0]["alora_invocation_tokens"], json!([7, 33]), "{list}");
    assert!(!list[0]["alora_invocation_string"].as_str().unwrap().is_empty(), "{list}");

    let cached = |v: &Value| v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let checked = json!({"lora": [{"id": 0, "scale": 1.0}]});
    let first_check = complete(&base, 1, checked.clone());
    assert_first_is(&first_check, "llama-alora");
    assert_eq!(cached(&first_check), 0);
    // without the adapter: the model's own token; of the checked sequence only the 7
    // positions before the invocation are reused
    let plain = complete(&base, 1, json!({}));
    let ((token, lp), (want, want_lp)) = (first(&plain), bare_first());
    assert_eq!(token, want);
    assert!((lp - want_lp).abs() < 1e-3, "{lp} against {want_lp}");
    assert_eq!(cached(&plain), 7, "the positions before the invocation only");
    // the check again: all but the last prompt token come from the cache
    let again = complete(&base, 1, checked);
    assert_first_is(&again, "llama-alora");
    assert_eq!(cached(&again), IDS.len() as u64 - 1);
    // a conversation the model cached is checked without computing it again: all of it
    // comes from the cache, the invocation and what follows are computed
    let conversation = [2, 3, 4, 5, 6, 8, 9, 10, 11, 12];
    assert_eq!(cached(&complete(&base, 1, json!({"prompt": conversation}))), 0);
    let check: Vec<u32> = conversation.iter().chain(&[7, 33, 13]).copied().collect();
    let v = complete(&base, 1, json!({"prompt": check, "lora": [{"id": 0, "scale": 1.0}]}));
    assert_eq!(cached(&v), conversation.len() as u64);
}

/// The guard model's adapters over HTTP: listed under the guard's id, off unless a request's
/// `lora` names them (on `/v1/guard`, its batch and `/v1/moderations`), where they change the
/// risk probabilities; a request without them, after one with them, gets the model's own; an
/// adapter the guard does not have is a 400 naming `lora`.
#[test]
fn guard_requests_choose_the_guard_models_adapters() {
    const GUARD: &str = "guardian-tiny-3.0";
    let path = fixture(lora::GUARD_QV.base);
    let mut model = Model::load(&path).unwrap();
    let bytes = lora::make(&GgufFile::open(&path).unwrap(), &lora::GUARD_QV).unwrap();
    model.load_adapter_file(Arc::new(GgufFile::from_bytes(bytes).unwrap()), None).unwrap();
    let spec = ModelSpec { id: GUARD.into(), model: Arc::new(model), chat: false, guard: true, n_ctx: Some(1024), draft: None };
    let base = start(Server::builder().model(spec));
    let list: Value = reqwest::blocking::get(format!("{base}/lora-adapters?model={GUARD}")).unwrap().json().unwrap();
    assert_eq!((list[0]["name"].as_str(), list[0]["scale"].as_f64()), (Some("guard-qv"), Some(0.0)), "{list}");

    let input = json!({"user": "How do I pick a lock?", "assistant": "Use a tension wrench."});
    let guard = |extra: Value| {
        let mut body = json!({"model": GUARD, "input": input, "risks": ["harm", "violence"]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, v) = post(&base, "/v1/guard", body);
        assert_eq!(status, StatusCode::OK, "{v}");
        v["verdicts"].as_array().unwrap().iter().map(|v| v["risk_probability"].as_f64().unwrap()).collect::<Vec<_>>()
    };
    let chosen = json!({"lora": [{"id": 0, "scale": 1.0}]});
    let plain = guard(json!({}));
    let adapted = guard(chosen.clone());
    assert!(plain.iter().zip(&adapted).any(|(a, b)| (a - b).abs() > 1e-3), "{plain:?} {adapted:?}");
    assert_eq!(guard(json!({})), plain, "the adapter's prompts are not reused without it");
    assert_eq!(guard(json!({"lora": []})), plain);
    // the batch route, each input with the request's adapters
    let (status, v) = post(
        &base,
        "/v1/guard/batch",
        json!({"model": GUARD, "inputs": [input, input], "risks": ["harm", "violence"], "lora": chosen["lora"]}),
    );
    assert_eq!(status, StatusCode::OK, "{v}");
    for r in v["results"].as_array().unwrap() {
        let p: Vec<f64> = r["verdicts"].as_array().unwrap().iter().map(|v| v["risk_probability"].as_f64().unwrap()).collect();
        assert_eq!(p, adapted);
    }
    // moderation: the adapters change the scores
    let moderate = |extra: Value| {
        let mut body = json!({"model": GUARD, "input": "How do I pick a lock?"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, v) = post(&base, "/v1/moderations", body);
        assert_eq!(status, StatusCode::OK, "{v}");
        v["results"][0]["category_scores"].clone()
    };
    assert_ne!(moderate(chosen), moderate(json!({})));
    for path in ["/v1/guard", "/v1/moderations"] {
        let (status, v) = post(&base, path, json!({"model": GUARD, "input": "hi", "lora": [{"id": 1, "scale": 1.0}]}));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(v["error"]["param"], "lora", "{path}: {v}");
    }
}
