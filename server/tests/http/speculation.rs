//! Speculative decoding served: a draft model, n-gram lookups and both together leave greedy
//! (and seeded) replies unchanged alone and under load, and `/metrics` counts each source's
//! proposals.

use std::sync::Arc;

use engine::generate::{DraftSettings, NgramDraft};
use engine::model::Model;
use engine::serving::SpecPolicy;
use engine_tests::fixture;
use serde_json::{json, Value};
use server::{ModelSpec, Scheduling, Server};

use super::{chat_model, client, plain_chat_server, start, CHAT};

/// A greedy chat completion of `content` with `n` choices of at most `max_tokens` from the chat
/// model at `base`.
fn greedy_chat(base: &str, content: &str, max_tokens: u64, n: u64) -> Value {
    let body =
        json!({"model": CHAT, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, "n": n});
    client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json().unwrap()
}

/// The chat model's proposed and kept tokens, from `/metrics` at `base`: both sources'.
fn draft_counts(base: &str) -> (u64, u64) {
    let (ngram, draft) = (draft_counts_of(base, "ngram"), draft_counts_of(base, "draft"));
    (ngram.0 + draft.0, ngram.1 + draft.1)
}

/// The chat model's proposed and kept tokens from `source` (`ngram`, `draft`), from `/metrics`
/// at `base`.
fn draft_counts_of(base: &str, source: &str) -> (u64, u64) {
    let metrics = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let value = |name: &str| -> u64 {
        let prefix = format!("{name}{{model=\"{CHAT}\",source=\"{source}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{name} of {source} missing:\n{metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    (value("draft_tokens_total"), value("draft_tokens_accepted_total"))
}

#[test]
fn a_draft_model_leaves_greedy_and_seeded_output_unchanged() {
    // the tiny llama drafts for itself in another weight type: same vocabulary, different numbers
    let draft = Arc::new(Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap());
    // every proposal of the tiny draft, however unsure of it
    let every = DraftSettings { p_min: 0.0, ..DraftSettings::DEFAULT };
    let wide = Scheduling { parallel: 16, draft: every, speculation: SpecPolicy::Always, ..Scheduling::default() };
    let with = start(Server::builder().scheduling(wide).model(ModelSpec {
        id: CHAT.into(),
        model: chat_model(),
        chat: true,
        guard: false,
        n_ctx: Some(256),
        draft: Some(draft),
    }));
    let without = plain_chat_server();
    greedy_text_alone_and_under_load(&with, &without, &["Say hello", "Say hello twice", "Count", "a b c a b c"], 24, true);

    // seeded sampling too: the texts the server without the draft gives, requests side by side
    let seeded = |base: &str, content: &str| -> Value {
        let body = json!({"model": CHAT, "messages": [{"role": "user", "content": content}], "max_tokens": 24, "temperature": 1.0, "seed": 7, "n": 2});
        client().post(format!("{base}/v1/chat/completions")).json(&body).send().unwrap().json().unwrap()
    };
    let texts =
        |reply: &Value| -> Vec<Value> { reply["choices"].as_array().unwrap().iter().map(|c| c["message"]["content"].clone()).collect() };
    let prompts = ["Say hello", "Count"];
    let together: Vec<Value> = std::thread::scope(|scope| {
        let sent: Vec<_> = prompts.iter().map(|content| scope.spawn(|| seeded(&with, content))).collect();
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (content, reply) in prompts.iter().zip(&together) {
        assert_eq!(texts(reply), texts(&seeded(&without, content)), "{content}: {reply}");
    }
    let (kept, rejected) = together.iter().map(predictions).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert!(kept > 0 && rejected > 0, "{kept} proposals kept, {rejected} not");

    // a prompt of many prefill chunks: the draft catches up on it chunk by chunk, step after
    // step (a chunk is no round that proposed nothing), and drafts well within the reply
    let chunked = Scheduling { prefill_chunk: 16, draft: every, speculation: SpecPolicy::Always, ..Scheduling::default() };
    let draft = Arc::new(Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap());
    let spec = ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(256), draft: Some(draft) };
    let long = start(Server::builder().scheduling(chunked).model(spec));
    let reply = greedy_chat(&long, &"one two three four ".repeat(12), 24, 1);
    assert_eq!(reply["usage"]["completion_tokens"], 24, "{reply}");
    assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() > 120, "{reply}");
    let (kept, rejected) = predictions(&reply);
    assert!(kept + rejected >= 8, "proposals once the draft caught up: {reply}");
    let other_vocab = Arc::new(Model::load(fixture("models/tiny-granite-Q8_0.gguf")).unwrap());
    let refused = Server::builder()
        .model(ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(256), draft: Some(other_vocab) })
        .build();
    assert!(refused.is_err());
}

#[test]
fn ngram_speculation_leaves_greedy_output_unchanged_and_is_counted() {
    let spec = |ngram| {
        start(
            Server::builder()
                .scheduling(Scheduling { ngram, parallel: 16, speculation: SpecPolicy::Always, ..Scheduling::default() })
                .model(ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(256), draft: None }),
        )
    };
    let (with, without) = (spec(Some(NgramDraft::DEFAULT)), spec(None));
    let prompts = ["Say hello hello hello", "Count one two one two one two", "Repeat", "a b c a b c a b"];
    greedy_text_alone_and_under_load(&with, &without, &prompts, 40, false);

    // by default a sequence proposes only where its rounds pay for their rows (which the pass
    // times measured decide): the replies are the same whatever it decides
    let weighed = start(
        Server::builder()
            .scheduling(Scheduling { ngram: Some(NgramDraft::DEFAULT), parallel: 16, ..Scheduling::default() })
            .model(ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(256), draft: None }),
    );
    same_replies_all_at_once(&weighed, &without, &prompts, 40);
}

/// `--spec ngram` with a draft model: the lookup proposes where it finds something, the draft
/// model for the others; the replies are the same, and `/metrics` counts both sources.
#[test]
fn ngram_lookups_and_a_draft_model_together_leave_greedy_output_unchanged() {
    let serve = |speculation| {
        let draft = Arc::new(Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap());
        let every = DraftSettings { p_min: 0.0, ..DraftSettings::DEFAULT };
        let both = Scheduling { ngram: Some(NgramDraft::DEFAULT), draft: every, parallel: 16, speculation, ..Scheduling::default() };
        let spec = ModelSpec { id: CHAT.into(), model: chat_model(), chat: true, guard: false, n_ctx: Some(256), draft: Some(draft) };
        start(Server::builder().scheduling(both).model(spec))
    };
    let with = serve(SpecPolicy::Always);
    let without = plain_chat_server();
    let prompts = ["Say hello hello hello", "Count", "a b c a b c a b", "Say hello"];
    greedy_text_alone_and_under_load(&with, &without, &prompts, 40, true);
    let (ngram, draft) = (draft_counts_of(&with, "ngram"), draft_counts_of(&with, "draft"));
    assert!(ngram.0 > 0 && draft.0 > 0, "proposals by the lookup {ngram:?} and by the draft model {draft:?}");
    assert_eq!(draft_counts_of(&without, "ngram"), (0, 0));
    // weighed (each source's rounds by what they keep against the rows and draft passes they
    // cost), all at once: the same replies whatever it decides
    same_replies_all_at_once(&serve(SpecPolicy::WhenItPays), &without, &prompts, 40);
}

/// Greedy replies of at most `max_tokens` to `prompts`, three choices each, all at once from the
/// speculating server at `with`: each choice is the reply of the server at `without`.
fn same_replies_all_at_once(with: &str, without: &str, prompts: &[&str], max_tokens: u64) {
    let replies: Vec<(Value, Value)> = std::thread::scope(|scope| {
        let sent: Vec<_> = prompts
            .iter()
            .map(|content| scope.spawn(|| (greedy_chat(with, content, max_tokens, 3), greedy_chat(without, content, max_tokens, 1))))
            .collect();
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (reply, plain)) in replies.iter().enumerate() {
        for choice in reply["choices"].as_array().unwrap() {
            assert_eq!(choice["message"]["content"], plain["choices"][0]["message"]["content"], "prompt {i}: {reply}");
        }
    }
}

/// A reply's speculative proposals: (kept, not kept).
fn predictions(reply: &Value) -> (u64, u64) {
    let details = &reply["usage"]["completion_tokens_details"];
    (details["accepted_prediction_tokens"].as_u64().unwrap(), details["rejected_prediction_tokens"].as_u64().unwrap())
}

/// Greedy replies of at most `max_tokens` to `prompts` from the speculating server at `with`
/// (at least 3 x prompts parallel sequences) equal those of the one at `without`, one request at
/// a time and all at once with three choices each. A request's three choices are admitted
/// together and are the same tokens, so none of them ever decodes alone: their proposals were
/// checked in shared passes. Proposals are reported in the replies' usage (each reply's when
/// `every_reply` drafts: a draft model always proposes) and counted in `/metrics`, and only a
/// part of them kept.
fn greedy_text_alone_and_under_load(with: &str, without: &str, prompts: &[&str], max_tokens: u64, every_reply: bool) {
    let mut alone = Vec::new();
    for (i, content) in prompts.iter().enumerate() {
        let (a, b) = (greedy_chat(with, content, max_tokens, 1), greedy_chat(without, content, max_tokens, 1));
        assert_eq!(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"], "request {i}");
        assert_eq!(a["usage"]["completion_tokens"], b["usage"]["completion_tokens"]);
        assert_eq!(predictions(&b), (0, 0));
        alone.push(b["choices"][0]["message"]["content"].clone());
    }
    let replies: Vec<Value> = std::thread::scope(|scope| {
        let sent: Vec<_> = prompts.iter().map(|content| scope.spawn(move || greedy_chat(with, content, max_tokens, 3))).collect();
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut reported = (0, 0);
    for (i, reply) in replies.iter().enumerate() {
        for choice in reply["choices"].as_array().unwrap() {
            assert_eq!(choice["message"]["content"], alone[i], "prompt {i} under load: {reply}");
        }
        let (kept, rejected) = predictions(reply);
        assert!(!every_reply || kept + rejected > 0, "prompt {i}: no proposals under load: {reply}");
        reported = (reported.0 + kept, reported.1 + rejected);
    }
    assert!(reported.0 + reported.1 > 0, "no proposals under load");
    let (drafted, accepted) = draft_counts(with);
    assert!(accepted < drafted, "{accepted} of {drafted} proposals kept");
    assert!(drafted >= reported.0 + reported.1 && accepted >= reported.0, "/metrics counts every reply's proposals");
}
