//! Reranking against llama.cpp: the tests' cross-encoder (`engine_tests::reranker`, MiniLM with
//! a seeded classification head, pooling rank) on every (query, document) pair of
//! `fixtures/rerank/llama-cpp.json` (llama-server `--reranking`, `tools/make-rerank-goldens.py`):
//! the pair's tokens are llama-server's; the classification head over llama.cpp's own
//! first-token state gives llama.cpp's score to 1e-5; the engine's first-token state is
//! llama.cpp's within the encoder's tolerance (cosine 0.999, as the MiniLM embeddings), and so
//! its score is within 0.03. A pair scores the same bits alone or among others.

use std::sync::Arc;

use engine::embed::Pooling;
use engine::gguf::GgufFile;
use engine::model::Model;
use engine::rerank::{is_reranker, pair_tokens, rerank};
use engine_tests::{fixture, json_ids, read_json};

fn reranker() -> Model {
    let minilm = GgufFile::open(fixture("real/all-MiniLM-L6-v2-Q8_0.gguf")).unwrap();
    let bytes = engine_tests::reranker::make(&minilm).unwrap();
    Model::from_file(Arc::new(GgufFile::from_bytes(bytes).unwrap())).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
    let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn scores_follow_llama_cpps_reranking() {
    let model = reranker();
    assert!(is_reranker(&model) && Pooling::of_model(&model).unwrap() == Pooling::Rank);
    let head = model.classifier().unwrap();
    let goldens = read_json(&fixture("rerank/llama-cpp.json"));
    let pairs = goldens["pairs"].as_array().unwrap();
    assert!(pairs.len() >= 12);
    let (mut worst_head, mut worst_score, mut worst_cos) = (0.0f64, 0.0f64, 1.0f64);
    for p in pairs {
        let (query, doc) = (p["query"].as_str().unwrap(), p["document"].as_str().unwrap());
        let ids = pair_tokens(&model, query, doc);
        assert_eq!(ids, json_ids(&p["ids"]), "{query:?} / {doc:?}");
        let expected = p["score"].as_f64().unwrap();
        // the head and the score's reading, on llama.cpp's own first-token state
        let theirs: Vec<f32> = p["cls_state"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let head_diff = (f64::from(head.apply(&theirs)[0]) - expected).abs();
        assert!(head_diff < 1e-5, "{query:?} / {doc:?}: the head gives {head_diff:.2e} off llama.cpp's score");
        // the encoder, within its tolerance, and the score that follows
        let ours = model.encode(std::slice::from_ref(&ids)).unwrap()[..theirs.len()].to_vec();
        let cos = cosine(&ours, &theirs);
        assert!(cos >= 0.999, "{query:?} / {doc:?}: first-token state cosine {cos} with llama.cpp");
        let ranked = &rerank(&model, query, &[doc]).unwrap()[0];
        assert_eq!(ranked.n_tokens, ids.len());
        let diff = (f64::from(ranked.score) - expected).abs();
        assert!(diff < 0.03, "{query:?} / {doc:?}: {} against llama.cpp's {expected}", ranked.score);
        (worst_head, worst_score, worst_cos) = (worst_head.max(head_diff), worst_score.max(diff), worst_cos.min(cos));
    }
    eprintln!(
        "rerank: {} pairs; head on llama.cpp's state {worst_head:.1e} off, states' cosine at least {worst_cos:.6}, scores {worst_score:.1e} off",
        pairs.len()
    );
}

#[test]
fn a_pair_scores_the_same_alone_or_among_others() {
    let model = reranker();
    let docs = ["The giant panda is a bear.", "Bread", "", "Zürich is in Switzerland."];
    let together = rerank(&model, "What is a panda?", &docs).unwrap();
    for (i, d) in docs.iter().enumerate() {
        let alone = &rerank(&model, "What is a panda?", &[d]).unwrap()[0];
        assert_eq!(alone.score.to_bits(), together[i].score.to_bits(), "{d:?}");
        assert_eq!(alone.n_tokens, pair_tokens(&model, "What is a panda?", d).len());
    }
}

#[test]
fn only_a_cross_encoder_reranks_and_a_reranker_does_not_embed() {
    let minilm = Model::load(fixture("real/all-MiniLM-L6-v2-Q8_0.gguf")).unwrap();
    assert!(!is_reranker(&minilm));
    let e = rerank(&minilm, "q", &["d"]).unwrap_err().to_string();
    assert!(e.contains("not a reranker"), "{e}");
    let model = reranker();
    let e = engine::embed::embed(&model, &["text"], None, true).unwrap_err().to_string();
    assert!(e.contains("reranker"), "{e}");
    let long = "word ".repeat(600);
    let e = rerank(&model, "q", &[&long]).unwrap_err().to_string();
    assert!(e.contains("context_length"), "{e}");
}
