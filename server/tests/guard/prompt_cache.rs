//! The guard's prompt cache seen through the API: a text judged again starts from its earlier
//! prompts, with the same scores, and the guard model's prompt metrics count what was reused.

use std::sync::Arc;

use engine::model::Model;
use reqwest::blocking::Client;
use serde_json::{json, Value};
use server::{ModelSpec, Server};

use super::{guard_path, start, GUARD};

#[test]
fn a_text_judged_again_reuses_its_prompts_with_the_same_scores() {
    let guard = Arc::new(Model::load(guard_path()).unwrap());
    let base = start(Server::builder().model(ModelSpec {
        id: GUARD.into(),
        model: guard,
        chat: false,
        guard: true,
        n_ctx: Some(1024),
        draft: None,
    }));
    let client = Client::new();
    let moderate = |text: &str| -> Value {
        let r = client.post(format!("{base}/v1/moderations")).json(&json!({"input": text})).send().unwrap();
        assert!(r.status().is_success());
        r.json::<Value>().unwrap()["results"][0]["category_scores"].clone()
    };
    let counts = || -> [u64; 3] {
        let metrics = client.get(format!("{base}/metrics")).send().unwrap().text().unwrap();
        ["prompt_tokens_total", "prompt_tokens_cached_total", "prefix_cache_hits_total"].map(|name| {
            let key = format!("{name}{{model=\"{GUARD}\"}} ");
            let line = metrics.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("{key}missing:\n{metrics}"));
            line[key.len()..].parse().unwrap()
        })
    };
    // the engine thread counts a job's prompts once the job has replied: wait for the count
    let settled = |done: &dyn Fn(&[u64; 3]) -> bool| {
        let start = std::time::Instant::now();
        loop {
            let c = counts();
            if done(&c) || start.elapsed().as_secs() > 10 {
                return c;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let first = moderate("Where can I buy a cheap bike?");
    let [tokens, cached, hits] = settled(&|c| c[0] > 0);
    assert!(tokens > 9 && cached == 0 && hits == 0, "nothing was cached before: {tokens} {cached} {hits}");
    let again = moderate("Where can I buy a cheap bike?");
    assert_eq!(first, again);
    let [tokens2, cached2, hits2] = settled(&|c| c[0] > tokens);
    // the nine prompts again: everything but each prompt's last token came from the cache
    assert_eq!((tokens2 - tokens, cached2 - cached, hits2 - hits), (tokens, tokens - 9, 9));
    moderate("Another text entirely");
    let [tokens3, cached3, _] = settled(&|c| c[0] > tokens2);
    assert!(cached3 > cached2 && cached3 - cached2 < (tokens3 - tokens2) / 2, "another text shares the format's start only");
}
