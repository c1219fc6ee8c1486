//! `POST /v1/rerank` over real TCP: the tests' cross-encoder (`engine_tests::reranker`) served
//! beside the tiny llama; results best first with their request indices, `top_n`,
//! `return_documents`, string and `{text}` documents, llama-server's other route names, usage
//! counting the pairs' tokens, and 400s for a model that is no reranker and for bad fields.

use std::sync::Arc;

use crate::common::{post, start, tiny_llama};
use engine::gguf::GgufFile;
use engine::model::Model;
use engine::rerank::{pair_tokens, rerank};
use engine_tests::fixture;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::ModelSpec;

const RERANKER: &str = "tiny-reranker";

fn reranker() -> Arc<Model> {
    let minilm = GgufFile::open(fixture("real/all-MiniLM-L6-v2-Q8_0.gguf")).unwrap();
    Arc::new(Model::from_file(Arc::new(GgufFile::from_bytes(engine_tests::reranker::make(&minilm).unwrap()).unwrap())).unwrap())
}

#[test]
fn documents_come_back_best_first_with_their_scores() {
    let model = reranker();
    let base = start(tiny_llama("tiny-llama").model(ModelSpec {
        id: RERANKER.into(),
        model: model.clone(),
        chat: false,
        guard: false,
        n_ctx: None,
        draft: None,
    }));
    let query = "What is a panda?";
    let docs = ["hi", "The giant panda is a bear species endemic to China.", "Paris is the capital of France.", "Bamboo"];
    let expected = rerank(&model, query, &docs).unwrap();
    let tokens: usize = docs.iter().map(|d| pair_tokens(&model, query, d).len()).sum();
    let mut best_first: Vec<usize> = (0..docs.len()).collect();
    best_first.sort_by(|&a, &b| expected[b].score.total_cmp(&expected[a].score));

    for path in ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"] {
        let (status, v) = post(&base, path, json!({"model": RERANKER, "query": query, "documents": docs}));
        assert_eq!(status, StatusCode::OK, "{path}: {v}");
        assert_eq!((v["object"].as_str(), v["model"].as_str()), (Some("list"), Some(RERANKER)));
        assert_eq!(v["usage"]["prompt_tokens"], tokens);
        let results = v["results"].as_array().unwrap();
        let order: Vec<usize> = results.iter().map(|r| r["index"].as_u64().unwrap() as usize).collect();
        assert_eq!(order, best_first, "{path}");
        for r in results {
            let i = r["index"].as_u64().unwrap() as usize;
            assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, expected[i].score);
            assert!(r.get("document").is_none(), "no document unless asked");
        }
    }
    // top_n, return_documents, documents as objects
    let objects: Vec<Value> = docs.iter().map(|d| json!({"text": d})).collect();
    let (status, v) =
        post(&base, "/v1/rerank", json!({"model": RERANKER, "query": query, "documents": objects, "top_n": 2, "return_documents": true}));
    assert_eq!(status, StatusCode::OK, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, &i) in results.iter().zip(&best_first) {
        assert_eq!((r["index"].as_u64(), r["document"]["text"].as_str()), (Some(i as u64), Some(docs[i])));
    }
    let (_, v) = post(&base, "/v1/rerank", json!({"model": RERANKER, "query": query, "documents": docs, "top_n": 99}));
    assert_eq!(v["results"].as_array().unwrap().len(), docs.len(), "top_n past the documents returns them all");
    // TEI's shape: `texts` in, the bare list of {index, score, text} out
    let (status, v) = post(&base, "/rerank", json!({"model": RERANKER, "query": query, "texts": docs, "return_text": true, "top_n": 3}));
    assert_eq!(status, StatusCode::OK, "{v}");
    let list = v.as_array().unwrap_or_else(|| panic!("a bare list: {v}"));
    assert_eq!(list.len(), 3);
    for (r, &i) in list.iter().zip(&best_first) {
        assert_eq!((r["index"].as_u64(), r["text"].as_str()), (Some(i as u64), Some(docs[i])));
        assert_eq!(r["score"].as_f64().unwrap() as f32, expected[i].score);
    }
    // JSON Schema's integer: 2.0 is 2
    let (_, v) = post(&base, "/v1/rerank", json!({"model": RERANKER, "query": query, "documents": docs, "top_n": 2.0}));
    assert_eq!(v["results"].as_array().unwrap().len(), 2, "{v}");
}

#[test]
fn a_model_that_is_no_reranker_and_bad_fields_are_400s() {
    let base = start(tiny_llama("tiny-llama").model(ModelSpec {
        id: RERANKER.into(),
        model: reranker(),
        chat: false,
        guard: false,
        n_ctx: None,
        draft: None,
    }));
    let refused = |body: Value| -> Value {
        let (status, v) = post(&base, "/v1/rerank", body);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert!(v["error"]["message"].is_string() && v["error"]["type"] == "invalid_request_error", "{v}");
        v["error"]["param"].clone()
    };
    let e = {
        let (status, v) = post(&base, "/v1/rerank", json!({"model": "tiny-llama", "query": "q", "documents": ["d"]}));
        assert_eq!(status, StatusCode::BAD_REQUEST);
        v["error"].clone()
    };
    assert!(e["param"] == "model" && e["message"].as_str().unwrap().contains("not a reranker"), "{e}");
    assert_eq!(refused(json!({"model": RERANKER, "documents": ["d"]})), "query");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q"})), "documents");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "documents": []})), "documents");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "texts": []})), "texts");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "documents": ["d"], "texts": ["d"]})), "texts");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "documents": [5]})), "documents");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "documents": ["d"], "top_n": 0})), "top_n");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "documents": ["d"], "top_n": 1.5})), "top_n");
    assert_eq!(refused(json!({"model": RERANKER, "query": "q", "documents": ["word ".repeat(600)]})), "documents");
    let (status, _) = post(&base, "/v1/rerank", json!({"model": "nope", "query": "q", "documents": ["d"]}));
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[test]
fn every_name_of_the_route_needs_the_api_key_when_there_is_one() {
    let spec = ModelSpec { id: RERANKER.into(), model: reranker(), chat: false, guard: false, n_ctx: None, draft: None };
    let base = start(server::Server::builder().model(spec).api_key(Some("sekret".into())));
    let body = json!({"model": RERANKER, "query": "q", "documents": ["d"]});
    let client = reqwest::blocking::Client::new();
    for path in ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"] {
        let r = client.post(format!("{base}{path}")).json(&body).send().unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        let r = client.post(format!("{base}{path}")).bearer_auth("sekret").json(&body).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
}
