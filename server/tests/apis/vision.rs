//! Chat completions with images through a projector, as the engine loop schedules them: a
//! prompt prefilled in small chunks gives the same logprobs as one read whole (a chunk may cut
//! an idefics3 image, whose rows are causal, but never a Gemma 3 image, whose rows see each
//! other), and a second request about the same pixels finds the image's rows in the cache.

use std::sync::Arc;

use base64::Engine as _;
use engine::model::vision::VisionModel;
use engine::model::Model;
use engine_tests::fixture;
use serde_json::{json, Value};
use server::vision::{MediaOptions, Projector};
use server::{ModelSpec, Scheduling, Server};

use crate::common::{post, start};

fn serve(projector: &str, prefill_chunk: usize) -> String {
    let dir = fixture("vision");
    let model = Arc::new(Model::load(dir.join("tiny-vlm.gguf")).unwrap());
    let vision = VisionModel::load(dir.join(format!("tiny-{projector}-mmproj.gguf"))).unwrap();
    let p = Arc::new(Projector::new(vision, &model, MediaOptions::default()).unwrap());
    let scheduling = Scheduling { prefill_chunk, ..Scheduling::default() };
    start(Server::builder().scheduling(scheduling).projector("vlm", p).model(ModelSpec {
        id: "vlm".into(),
        model,
        chat: true,
        guard: false,
        n_ctx: Some(512),
        draft: None,
    }))
}

fn ask(base: &str, image: &str) -> Value {
    let png = std::fs::read(fixture("vision").join(image)).unwrap();
    let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
    let content = json!([{"type": "text", "text": "Here: "}, {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": " what is it?"}]);
    let body = json!({"model": "vlm", "max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 5,
                      "messages": [{"role": "user", "content": content}]});
    let (status, answer) = post(base, "/v1/chat/completions", body);
    assert!(status.is_success(), "{answer}");
    answer
}

fn logprobs(answer: &Value) -> &Value {
    &answer["choices"][0]["logprobs"]["content"]
}

#[test]
fn small_prefill_chunks_give_the_logprobs_of_a_whole_prompt() {
    for (projector, image) in [("gemma3", "tile-32.png"), ("idefics3", "grid-64.png")] {
        let whole = ask(&serve(projector, 256), image);
        let chunked = ask(&serve(projector, 3), image);
        assert_eq!(logprobs(&chunked), logprobs(&whole), "{projector}: chunks of 3");
        assert_eq!(chunked["usage"]["prompt_tokens"], whole["usage"]["prompt_tokens"]);
    }
}

#[test]
fn the_same_image_again_is_read_from_the_prefix_cache() {
    let base = serve("idefics3", 256);
    let first = ask(&base, "grid-64.png");
    let prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // 5 tiles of 4 rows and their markers, the text around them
    assert!(prompt > 20 + 10, "{}", first["usage"]);
    let again = ask(&base, "grid-64.png");
    assert_eq!(logprobs(&again), logprobs(&first));
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert_eq!(cached, prompt - 1, "all but the last prompt token: {}", again["usage"]);
    // another image shares only what comes before its first row (the text, the first tile's
    // markers: 11 tokens)
    let other = ask(&base, "tile-32.png");
    let cached = other["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert_eq!(cached, 11, "{}", other["usage"]);
}
