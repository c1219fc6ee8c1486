//! The hybrid models (the tiny LFM2, Granite 4 hybrid, Qwen3.5 and Qwen3.5-MoE architecture
//! models: short convolutions, Mamba-2 blocks or gated delta nets, with states per sequence,
//! beside attention) served over real
//! TCP: a conversation's second turn resumes from the
//! first turn's states and gives what a fresh server computes, `n` choices fork one prompt's
//! states and are each the choice of its own seed, prompts sharing a system prompt resume from
//! the checkpoint kept where one met another, and speculation (n-gram or a draft model,
//! whose rejected proposals return the states to the last kept token) leaves greedy output
//! unchanged.

use std::sync::Arc;

use crate::common::{post, start};
use engine::generate::{DraftSettings, NgramDraft};
use engine::model::Model;
use engine::serving::SpecPolicy;
use engine_tests::fixture;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Scheduling, Server};

const ID: &str = "tiny-hybrid";

/// The hybrids: each architecture's file of seed 1, with its file of seed 2 as the draft.
const HYBRIDS: [(&str, &str); 4] = [
    ("archs/lfm2-s1.gguf", "archs/lfm2-s2.gguf"),
    ("archs/granitehybrid-s1.gguf", "archs/granitehybrid-s2.gguf"),
    ("archs/qwen35-s1.gguf", "archs/qwen35-s2.gguf"),
    ("archs/qwen35moe-s1.gguf", "archs/qwen35moe-s2.gguf"),
];

/// A prompt of ids with repeats (for the n-gram drafts to find).
const PROMPT: [u32; 20] = [5, 17, 33, 2, 90, 5, 17, 33, 2, 64, 8, 120, 5, 17, 33, 2, 77, 41, 5, 17];

fn serve(file: &str, scheduling: Scheduling, draft: Option<&str>) -> String {
    let spec = ModelSpec {
        id: ID.into(),
        model: Arc::new(Model::load(fixture(file)).unwrap()),
        chat: true,
        guard: false,
        n_ctx: Some(256),
        draft: draft.map(|name| Arc::new(Model::load(fixture(name)).unwrap())),
    };
    start(Server::builder().scheduling(scheduling).model(spec))
}

/// A completion of `prompt` (ids), `extra` added to the request.
fn complete(base: &str, prompt: &[u32], max_tokens: usize, extra: Value) -> Value {
    let mut body = json!({"model": ID, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, v) = post(base, "/v1/completions", body);
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

/// Choice `i`'s token ids (the test vocabulary's pieces are the ids in hex) and log-probabilities.
fn tokens(v: &Value, i: usize) -> (Vec<u32>, Vec<f64>) {
    let lp = &v["choices"][i]["logprobs"];
    let ids = lp["tokens"].as_array().unwrap().iter().map(|t| u32::from_str_radix(t.as_str().unwrap(), 16).unwrap()).collect();
    (ids, lp["token_logprobs"].as_array().unwrap().iter().map(|p| p.as_f64().unwrap()).collect())
}

fn cached(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()
}

#[test]
fn a_second_turn_resumes_from_the_first_turns_states_and_computes_what_a_fresh_server_does() {
    for (file, _) in HYBRIDS {
        second_turn(file);
    }
}

fn second_turn(file: &str) {
    let (warm, fresh) = (serve(file, Scheduling::default(), None), serve(file, Scheduling::default(), None));
    let first = complete(&warm, &PROMPT, 12, json!({}));
    assert_eq!(cached(&first), 0);
    let (reply, _) = tokens(&first, 0);
    assert_eq!(reply.len(), 12, "{first}");
    // the next turn: the conversation so far and more
    let turn: Vec<u32> = PROMPT.iter().chain(&reply).chain(&[3, 4, 5]).copied().collect();
    let second = complete(&warm, &turn, 12, json!({}));
    // the first sequence held its prompt and all but its last token, and their states
    assert_eq!(cached(&second), (PROMPT.len() + reply.len() - 1) as u64, "{second}");
    let again = complete(&fresh, &turn, 12, json!({}));
    assert_eq!(cached(&again), 0);
    // the same tokens and the same bits: a row's numbers do not depend on where its pass began
    assert_eq!(tokens(&second, 0), tokens(&again, 0), "{file}");
}

#[test]
fn prompts_sharing_a_system_prompt_resume_where_the_second_met_the_first() {
    for (file, _) in HYBRIDS {
        shared_start(file);
    }
}

fn shared_start(file: &str) {
    let (warm, fresh) = (serve(file, Scheduling::default(), None), serve(file, Scheduling::default(), None));
    // a 40-token system prompt, then each its own question
    let system: Vec<u32> = (0..40).map(|i| 3 + (i * 13) % 97).collect();
    let asking = |q: u32| -> Vec<u32> { system.iter().copied().chain((0..10).map(|i| 100 + (q * 5 + i) % 27)).collect() };
    let first = complete(&warm, &asking(0), 4, json!({}));
    assert_eq!(cached(&first), 0);
    // the first kept no state within the system prompt: the second computes it again, and keeps
    // one where it met the first (at the last block boundary: 32)
    let second = complete(&warm, &asking(1), 4, json!({}));
    assert_eq!(cached(&second), 0, "{file}: {second}");
    let third = complete(&warm, &asking(2), 8, json!({}));
    assert_eq!(cached(&third), 32, "{file}: {third}");
    assert_eq!(tokens(&third, 0), tokens(&complete(&fresh, &asking(2), 8, json!({})), 0), "{file}");
}

#[test]
fn choices_fork_one_prompts_states_and_each_is_its_own_seeds_choice() {
    for (file, _) in HYBRIDS {
        choices(file);
    }
}

fn choices(file: &str) {
    let base = serve(file, Scheduling::default(), None);
    let sampled = json!({"n": 4, "temperature": 1.0, "seed": 11});
    let all = complete(&base, &PROMPT, 10, sampled.clone());
    let choices: Vec<_> = (0..4).map(|i| tokens(&all, i)).collect();
    assert!(choices.iter().any(|c| c.0 != choices[0].0), "four samples of a random model differ: {all}");
    // the same request again: the same choices, from the prompt's checkpoint
    let repeat = complete(&base, &PROMPT, 10, sampled);
    assert_eq!((0..4).map(|i| tokens(&repeat, i)).collect::<Vec<_>>(), choices);
    assert_eq!(cached(&repeat), (PROMPT.len() - 1) as u64, "{repeat}");
    // choice i is what one choice of seed 11 + i gives: no choice saw another's states
    for (i, choice) in choices.iter().enumerate() {
        let alone = complete(&base, &PROMPT, 10, json!({"temperature": 1.0, "seed": 11 + i}));
        assert_eq!(&tokens(&alone, 0), choice, "{file}: choice {i}");
    }
}

#[test]
fn speculation_returns_rejected_proposals_states_and_leaves_greedy_output_unchanged() {
    for (file, draft) in HYBRIDS {
        speculation(file, draft);
    }
}

fn speculation(file: &str, draft: &str) {
    // long enough for the random model's reply to repeat a few ids of its prompt or itself
    const N: usize = 80;
    let plain = serve(file, Scheduling::default(), None);
    let always = SpecPolicy::Always;
    let ngram =
        serve(file, Scheduling { ngram: Some(NgramDraft::DEFAULT), parallel: 8, speculation: always, ..Scheduling::default() }, None);
    // the other seed's file drafts: the same vocabulary, other numbers (most proposals rejected)
    let every = DraftSettings { p_min: 0.0, ..DraftSettings::DEFAULT };
    let drafted = serve(file, Scheduling { draft: every, parallel: 8, speculation: always, ..Scheduling::default() }, Some(draft));
    // both: the lookup where it finds something, the draft model for the rest
    let ngram_first = Some(NgramDraft::DEFAULT);
    let both = serve(
        file,
        Scheduling { ngram: ngram_first, draft: every, parallel: 8, speculation: always, ..Scheduling::default() },
        Some(draft),
    );
    let prompts: Vec<Vec<u32>> = (0..3).map(|k| PROMPT.iter().map(|&t| (t + k) % 128).collect()).collect();
    let want: Vec<_> = prompts.iter().map(|p| tokens(&complete(&plain, p, N, json!({})), 0)).collect();
    for (name, base) in [("n-gram", &ngram), ("draft model", &drafted), ("n-gram and draft model", &both)] {
        // alone, then all at once with two choices each (verifications batched together)
        let mut rejected = 0;
        for (p, want) in prompts.iter().zip(&want) {
            let v = complete(base, p, N, json!({}));
            assert_eq!(&tokens(&v, 0), want, "{file} {name}");
            rejected += v["usage"]["completion_tokens_details"]["rejected_prediction_tokens"].as_u64().unwrap();
        }
        assert!(rejected > 0, "{file} {name}: proposals were rejected and their states dropped");
        let replies: Vec<Value> = std::thread::scope(|s| {
            let sent: Vec<_> = prompts.iter().map(|p| s.spawn(move || complete(base, p, N, json!({"n": 2})))).collect();
            sent.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (reply, want) in replies.iter().zip(&want) {
            for i in 0..2 {
                assert_eq!(&tokens(reply, i), want, "{file} {name} under load, choice {i}");
            }
        }
    }
}
