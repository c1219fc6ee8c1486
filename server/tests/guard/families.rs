//! A guard family with prompts of its own behind the guard and moderation APIs: a scripted
//! llama (`engine_tests::scripted`) with Llama Guard 3's template answers `unsafe` with codes;
//! the API reports the family as the format, judges only the risks its categories stand for
//! (400 for the others, naming the family), and `/v1/moderations` answers all 13 of OpenAI's
//! categories, those no category of the family covers applied to no input type.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server};

use super::common::post;
use super::start;

const LLAMA_GUARD: &str = "llama-guard-scripted";

fn serve() -> String {
    let template = std::fs::read_to_string(engine_tests::fixture("guard-families/llama-guard-3-8b.jinja")).unwrap();
    let specials = ["<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"];
    let script = ["unsafe", "\n", "S1", ",", "S10", "<|eot_id|>"];
    let file = engine_tests::scripted::make(&specials, &script, &template).unwrap();
    let model = Arc::new(engine::model::Model::from_file(file).unwrap());
    start(Server::builder().model(ModelSpec { id: LLAMA_GUARD.into(), model, chat: false, guard: true, n_ctx: Some(1024), draft: None }))
}

#[test]
fn a_llama_guard_model_answers_the_guard_and_moderation_apis_in_its_categories() {
    let base = serve();
    let (s, r) = post(&base, "/v1/guard", json!({"model": LLAMA_GUARD, "input": {"user": "Tell me about them."}}));
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!((r["format"].as_str(), r["flagged"].as_bool()), (Some("llama-guard"), Some(true)), "{r}");
    let verdicts: Vec<(&str, bool)> =
        r["verdicts"].as_array().unwrap().iter().map(|v| (v["risk"].as_str().unwrap(), v["unsafe"].as_bool().unwrap())).collect();
    assert_eq!(
        verdicts,
        [("harm", true), ("sexual_content", false), ("social_bias", true), ("unethical_behavior", false), ("violence", true)]
    );
    let (s, e) = post(&base, "/v1/guard", json!({"model": LLAMA_GUARD, "input": {"user": "x"}, "risks": ["profanity"]}));
    assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("risks")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not judged by a llama-guard model"), "{e}");
    let (s, e) = post(&base, "/v1/guard", json!({"model": LLAMA_GUARD, "input": {"user": "x"}, "format": "3.2"}));
    assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("format")), "{e}");

    let (s, m) = post(&base, "/v1/moderations", json!({"input": "Tell me about them."}));
    assert_eq!(s, StatusCode::OK, "{m}");
    let result = &m["results"][0];
    let openai = [
        "harassment",
        "harassment/threatening",
        "hate",
        "hate/threatening",
        "illicit",
        "illicit/violent",
        "self-harm",
        "self-harm/instructions",
        "self-harm/intent",
        "sexual",
        "sexual/minors",
        "violence",
        "violence/graphic",
    ];
    for name in openai {
        assert!(result["categories"][name].is_boolean() && result["category_scores"][name].is_number(), "{name}: {result}");
    }
    assert_eq!((result["categories"]["violence"].as_bool(), result["categories"]["hate"].as_bool()), (Some(true), Some(true)));
    assert_eq!(result["categories"]["illicit"], false);
    assert_eq!(result["category_applied_input_types"]["hate"], json!(["text"]));
    // no Llama Guard category covers harassment: reported, but applied to no input
    assert_eq!(
        (result["categories"]["harassment"].clone(), result["category_applied_input_types"]["harassment"].clone()),
        (json!(false), json!([]))
    );
    assert_eq!(m["format"], Value::from("llama-guard"));
}
