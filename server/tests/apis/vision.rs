//! Chat completions with images through a projector, as the engine loop schedules them: a
//! prompt prefilled in small chunks gives the same logprobs as one read whole (a chunk may cut
//! an idefics3 image, whose rows are causal, but never a Gemma 3 image, whose rows see each
//! other), and a second request about the same pixels finds the image's rows in the cache;
//! llama-server's `/completion` reads `multimodal_data` as chat reads image parts, and the
//! prompt's count counts an image's rows.

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

/// A chat request about `image` (a file of the fixtures).
fn question(image: &str) -> Value {
    let png = std::fs::read(fixture("vision").join(image)).unwrap();
    let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
    let content = json!([{"type": "text", "text": "Here: "}, {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": " what is it?"}]);
    json!({"model": "vlm", "max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 5,
           "messages": [{"role": "user", "content": content}]})
}

fn ask(base: &str, image: &str) -> Value {
    let (status, answer) = post(base, "/v1/chat/completions", question(image));
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

#[test]
fn completion_reads_multimodal_data_where_its_markers_are_as_chat_reads_image_parts() {
    for (projector, image) in [("gemma3", "tile-32.png"), ("idefics3", "grid-64.png")] {
        let base = serve(projector, 5);
        // the prompt's count, its image's rows included, before it is sent
        let (status, counted) = post(&base, "/v1/chat/completions/input_tokens", question(image));
        assert!(status.is_success(), "{counted}");
        let chat = ask(&base, image);
        assert_eq!(counted["input_tokens"], chat["usage"]["prompt_tokens"], "{projector}");
        // the chat's prompt as llama-server's page builds it: the template's text with
        // `<__media__>` where the image goes, then the image's base64 beside it
        let content = json!([{"type": "text", "text": "Here: "}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                             {"type": "text", "text": " what is it?"}]);
        let (status, template) = post(&base, "/apply-template", json!({"messages": [{"role": "user", "content": content}]}));
        assert!(status.is_success(), "{template}");
        let text = template["prompt"].as_str().unwrap();
        assert_eq!(text.matches("<__media__>").count(), 1, "{text}");
        let png = base64::engine::general_purpose::STANDARD.encode(std::fs::read(fixture("vision").join(image)).unwrap());
        let prompt = json!({"prompt_string": text, "multimodal_data": [png]});
        let (status, r) = post(&base, "/completion", json!({"prompt": prompt, "n_predict": 4, "temperature": 0, "n_probs": 5}));
        assert!(status.is_success(), "{r}");
        assert_eq!(r["tokens_evaluated"], chat["usage"]["prompt_tokens"], "{projector}");
        assert_eq!(r["content"], chat["choices"][0]["message"]["content"], "{projector}");
        let steps = r["completion_probabilities"].as_array().unwrap();
        assert_eq!(steps.len(), logprobs(&chat).as_array().unwrap().len());
        for (step, want) in steps.iter().zip(logprobs(&chat).as_array().unwrap()) {
            assert_eq!(step["logprob"], want["logprob"], "{projector}: {step} against {want}");
            let tops = |v: &Value, key: &str| v[key].as_array().unwrap().iter().map(|t| t["logprob"].clone()).collect::<Vec<_>>();
            assert_eq!(tops(step, "top_logprobs"), tops(want, "top_logprobs"));
        }
        // the answer's prompt is its text, the image's rows left out
        assert_eq!(r["prompt"].as_str().unwrap().matches("what is it?").count(), 1);
        // a second image where the text has one marker, and bytes that are no image: 400s
        for bad in
            [json!({"prompt_string": text, "multimodal_data": [png, png]}), json!({"prompt_string": text, "multimodal_data": ["AAAA"]})]
        {
            let (status, e) = post(&base, "/completion", json!({"prompt": bad, "n_predict": 1}));
            assert_eq!((status.as_u16(), &e["error"]["param"]), (400, &json!("prompt")), "{e}");
        }
    }
}
