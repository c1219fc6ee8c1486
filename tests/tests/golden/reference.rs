//! Real models against llama.cpp's golden logits: gemma-3-270m Q4_K_M (`fixtures/real/
//! gemma-3-270m.logits.json`, bounds from `gemma-3-270m.tolerance.json`) and
//! Qwen2.5-Coder-0.5B-Instruct Q4_K_M (`fixtures/real/qwen2.5-coder-0.5b/goldens.json`).
//! Teacher-forced prompts: top-1 equal wherever llama.cpp's top-1/top-2 margin is at least 0.5,
//! logits of llama.cpp's top entries within the recommended bounds; greedy continuations equal
//! up to the first step whose margin is below 0.5.

use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::model::BatchEntry;
use engine_tests::{fixture, json_ids, read_json, shared_model};

const MARGIN: f32 = 0.5;

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// top-1 minus top-2 of a row.
fn margin(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

struct Stats {
    positions: usize,
    top1_agree: usize,
    max_abs: f32,
    sum_abs: f64,
    n_abs: usize,
}

impl Stats {
    fn new() -> Stats {
        Stats { positions: 0, top1_agree: 0, max_abs: 0.0, sum_abs: 0.0, n_abs: 0 }
    }

    /// Compares one row with llama.cpp's top entries (ids best first, logits).
    fn row(&mut self, what: &str, ours: &[f32], top_ids: &[u32], top_logits: &[f32]) {
        self.positions += 1;
        let golden_margin = top_logits[0] - top_logits[1];
        let ours_top = argmax(ours);
        if ours_top == top_ids[0] {
            self.top1_agree += 1;
        } else {
            assert!(golden_margin < MARGIN, "{what}: top-1 {ours_top} but llama.cpp's is {} with margin {golden_margin}", top_ids[0]);
        }
        for (&id, &want) in top_ids.iter().zip(top_logits) {
            let d = (ours[id as usize] - want).abs();
            self.max_abs = self.max_abs.max(d);
            self.sum_abs += f64::from(d);
            self.n_abs += 1;
        }
    }

    fn mean_abs(&self) -> f32 {
        (self.sum_abs / self.n_abs as f64) as f32
    }
}

#[test]
fn gemma_3_270m_matches_llama_cpp() {
    let model = shared_model("gemma");
    let golden = read_json(&fixture("real/gemma-3-270m.logits.json"));
    let tolerance = read_json(&fixture("real/gemma-3-270m.tolerance.json"));
    let rec = &tolerance["recommended"];
    let mut stats = Stats::new();
    for p in golden["prompts"].as_array().unwrap() {
        let prompt = p["prompt"].as_str().unwrap();
        let tokens = json_ids(&p["tokens"]);
        // `run` tokenizes this way: special tokens parsed, BOS as the file says
        assert_eq!(model.tokenizer().encode(prompt, true, true), tokens, "tokens of {prompt:?}");
        let mut kv = model.new_kv_cache(KvType::F32, 1024);
        let out = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
        for (i, top) in p["top"].as_array().unwrap().iter().enumerate() {
            stats.row(&format!("{prompt:?} position {i}"), out.row(i), &json_ids(&top["ids"]), &floats(&top["logits"]));
        }
        // greedy, one token at a time, while llama.cpp's choice is clear
        let greedy = json_ids(&p["greedy"]);
        let margins = floats(&p["greedy_margins"]);
        let mut next = argmax(out.row(tokens.len() - 1));
        for (j, &want) in greedy.iter().enumerate() {
            if margins[j] < MARGIN {
                break;
            }
            assert_eq!(next, want, "{prompt:?}: greedy token {j}");
            let o = model.forward(&mut kv, &[BatchEntry { seq: 0, token: next, pos: (tokens.len() + j) as u32, logits: true }]).unwrap();
            let gt = &p["greedy_top"][j];
            stats.row(&format!("{prompt:?} greedy {j}"), o.row(0), &json_ids(&gt["ids"]), &floats(&gt["logits"]));
            next = argmax(o.row(0));
        }
    }
    let agree = stats.top1_agree as f64 / stats.positions as f64;
    eprintln!(
        "gemma-3-270m: {} rows, top-1 agreement {agree:.3}, max |Δ| on llama.cpp's top-20 {:.3}, mean {:.3}",
        stats.positions,
        stats.max_abs,
        stats.mean_abs()
    );
    assert!(stats.max_abs <= rec["max_abs_on_golden_top20"].as_f64().unwrap() as f32);
    assert!(stats.mean_abs() <= rec["mean_abs_on_golden_top20"].as_f64().unwrap() as f32);
    assert!(agree >= rec["top1_agreement_overall_min"].as_f64().unwrap());
}

#[test]
fn qwen2_5_coder_0_5b_matches_llama_cpp() {
    let model = shared_model("qwen2.5-coder");
    let golden = read_json(&fixture("real/qwen2.5-coder-0.5b/goldens.json"));
    let mut stats = Stats::new();
    for p in golden.as_array().unwrap() {
        let prompt = p["prompt"].as_str().unwrap();
        let tokens = json_ids(&p["tokens"]);
        assert_eq!(model.tokenizer().encode(prompt, true, true), tokens, "tokens of {prompt:?}");
        let mut kv = model.new_kv_cache(KvType::F32, 1024);
        let out = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
        for (i, top) in p["top10_per_position"].as_array().unwrap().iter().enumerate() {
            let pairs = top.as_array().unwrap();
            let top_ids: Vec<u32> = pairs.iter().map(|x| x[0].as_u64().unwrap() as u32).collect();
            let top_logits: Vec<f32> = pairs.iter().map(|x| x[1].as_f64().unwrap() as f32).collect();
            stats.row(&format!("{prompt:?} position {i}"), out.row(i), &top_ids, &top_logits);
        }
        // the file has no margins for the continuation: compare while ours is clear
        let greedy = json_ids(&p["greedy_ids"]);
        let mut row = out.row(tokens.len() - 1).to_vec();
        for (j, &want) in greedy.iter().enumerate() {
            if margin(&row) < MARGIN {
                break;
            }
            let next = argmax(&row);
            assert_eq!(next, want, "{prompt:?}: greedy token {j}");
            let o = model.forward(&mut kv, &[BatchEntry { seq: 0, token: next, pos: (tokens.len() + j) as u32, logits: true }]).unwrap();
            row = o.row(0).to_vec();
        }
    }
    let agree = stats.top1_agree as f64 / stats.positions as f64;
    eprintln!(
        "qwen2.5-coder-0.5b: {} positions, top-1 agreement {agree:.3}, max |Δ| on llama.cpp's top-10 {:.3}, mean {:.4}",
        stats.positions,
        stats.max_abs,
        stats.mean_abs()
    );
    // Measured: top-1 agreement 0.982 (the two misses at golden margins 0.06 and 0.18), mean
    // |Δ| 0.074, max 2.7 at one low-margin position. That is the noise class gemma's tolerance
    // study measures between llama.cpp's own configurations (up to 3.4 on its top-20), so the
    // bounds are gemma's recommended ones.
    assert!(agree >= 0.95, "top-1 agreement {agree}");
    assert!(stats.mean_abs() <= 0.15, "mean |Δ| {}", stats.mean_abs());
    assert!(stats.max_abs <= 7.0, "max |Δ| {}", stats.max_abs);
}
