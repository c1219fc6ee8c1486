//! `/infill` against llama-server b11434 (`fixtures/infill/llama-cpp.json`,
//! `tools/make-infill-goldens.py`) on the real Qwen2.5-Coder-0.5B-Instruct at a context of 4096:
//! every request's prompt is llama-server's token for token (the repository layout, the extra
//! files, the budgets of a prompt past them; prefix first, and suffix first as `--spm-infill`
//! lays it out), `n_indent` cuts llama-server's own replies where llama-server cut them, and
//! llama.vim's sampler chain (`top_k`, `top_p`, `infill`) leaves the tokens llama-server's left
//! before each of its draws.

use engine::generate::line_limits::LineLimits;
use engine::model::Model;
use engine::tokenizer::fim::{infill_prompt, FimOrder, Infill, InfillBudget};
use engine_tests::{fixture, json_ids, read_json};
use serde_json::Value;

fn text<'a>(request: &'a Value, key: &str) -> &'a str {
    request[key].as_str().unwrap_or("")
}

#[test]
fn infill_prompts_are_llama_server_s_token_for_token() {
    let qwen = Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap();
    let goldens = read_json(&fixture("infill/llama-cpp.json"));
    let n_ctx = goldens["n_ctx"].as_u64().unwrap() as usize;
    let cases = goldens["prompts"].as_array().unwrap().iter().map(|c| (c, FimOrder::PrefixSuffixMiddle));
    // and as a server started with --spm-infill lays them out, suffix first
    let spm = goldens["spm_prompts"].as_array().unwrap().iter().map(|c| (c, FimOrder::SuffixPrefixMiddle));
    let cases: Vec<_> = cases.chain(spm).collect();
    assert!(cases.len() >= 10);
    for (case, order) in cases {
        let request = &case["request"];
        let extra: Vec<(String, String)> = request["input_extra"]
            .as_array()
            // a file without a name is `tmp`, as llama-server reads it
            .map(|files| files.iter().map(|f| (f["filename"].as_str().unwrap_or("tmp").to_string(), text(f, "text").to_string())).collect())
            .unwrap_or_default();
        let infill = Infill {
            prefix: text(request, "input_prefix"),
            suffix: text(request, "input_suffix"),
            middle_start: text(request, "prompt"),
            extra: &extra,
        };
        let n_predict = request["n_predict"].as_i64().and_then(|n| usize::try_from(n).ok());
        let ids = infill_prompt(qwen.tokenizer(), &infill, InfillBudget { n_batch: 2048, n_ctx, n_predict }, order).unwrap();
        assert_eq!(ids, json_ids(&case["prompt_ids"]), "{} {order:?}", case["name"]);
    }
}

#[test]
fn n_indent_cuts_llama_server_s_replies_where_it_does() {
    let goldens = read_json(&fixture("infill/llama-cpp.json"));
    let (mut same, mut later) = (0, 0);
    for case in goldens["indents"].as_array().unwrap() {
        let whole = case["content"].as_str().unwrap();
        for cut in case["cuts"].as_array().unwrap() {
            let n_indent = cut["n_indent"].as_u64().unwrap() as usize;
            let theirs = cut["content"].as_str().unwrap();
            let ours = &whole[..LineLimits::new(n_indent, None).cut(whole).unwrap_or(whole.len())];
            if ours == theirs {
                same += 1;
                continue;
            }
            // llama-server reads a line a token or two after it starts: one begun in the
            // reply's last tokens is not read before the budget ends it (a blank line here)
            assert!(theirs == whole && theirs.starts_with(ours), "{} n_indent {n_indent}: {ours:?} against {theirs:?}", case["name"]);
            assert!(whole[ours.len()..].trim().is_empty(), "{} n_indent {n_indent}: {:?} kept", case["name"], &whole[ours.len()..]);
            later += 1;
        }
    }
    assert!(same >= 5 && later <= 1, "{same} cut alike, {later} later by llama-server");
}

#[test]
fn llama_vim_s_sampler_chain_leaves_what_llama_server_s_leaves() {
    use engine::kv_cache::KvType;
    use engine::model::BatchEntry;
    use engine::sampling::{Sampler, SamplerStep, SamplingParams};
    let qwen = Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap();
    let tok = qwen.tokenizer();
    let goldens = read_json(&fixture("infill/llama-cpp.json"));
    let chain = &goldens["chain"];
    let order: Vec<SamplerStep> =
        chain["samplers"].as_array().unwrap().iter().map(|n| SamplerStep::from_name(n.as_str().unwrap()).unwrap()).collect();
    let params = SamplingParams {
        top_k: chain["top_k"].as_u64().unwrap() as usize,
        top_p: chain["top_p"].as_f64().unwrap() as f32,
        order: Some(order),
        ..SamplingParams::default()
    };
    let (mut steps, mut alike, mut worst) = (0, 0, 0.0f32);
    for case in goldens["sampled"].as_array().unwrap() {
        // llama-server's draws fed back: the logits before each of its tokens
        let prompt = json_ids(&case["prompt_ids"]);
        let drawn: Vec<u32> = case["steps"].as_array().unwrap().iter().map(|s| s["id"].as_u64().unwrap() as u32).collect();
        let ids = [&prompt[..], &drawn[..drawn.len() - 1]].concat();
        let mut kv = qwen.new_kv_cache(KvType::F16, ids.len() + 1);
        let logits = qwen.forward(&mut kv, &BatchEntry::sequence(0, &ids, 0, true)).unwrap();
        for (j, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let row = logits.row(prompt.len() - 1 + j);
            let ours: Vec<(u32, f32)> = Sampler::new(params.clone(), &[]).distribution(row, tok).unwrap().candidates().collect();
            let mut theirs: Vec<(u32, f32)> =
                step["left"].as_array().unwrap().iter().map(|c| (c[0].as_u64().unwrap() as u32, c[1].as_f64().unwrap() as f32)).collect();
            theirs.sort_unstable_by_key(|c| c.0);
            steps += 1;
            let ids_of = |v: &[(u32, f32)]| v.iter().map(|c| c.0).collect::<Vec<_>>();
            if ids_of(&ours) == ids_of(&theirs) {
                alike += 1;
                worst = ours.iter().zip(&theirs).map(|(a, b)| (a.1 - b.1).abs()).fold(worst, f32::max);
            } else {
                eprintln!("{} seed {} step {j}: ours {ours:?}, llama-server's {theirs:?}", case["name"], case["seed"]);
            }
        }
    }
    eprintln!("{alike} of {steps} steps left the same tokens; probabilities within {worst}");
    assert!(steps >= 100 && alike == steps, "{alike} of {steps} steps alike");
    // the two engines' logits differ a little (a near tie of two tokens moves by up to 0.03)
    assert!(worst < 0.05, "{worst}");
}
