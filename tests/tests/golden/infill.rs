//! `/infill` against llama-server b11434 (`fixtures/infill/llama-cpp.json`,
//! `tools/make-infill-goldens.py`) on the real Qwen2.5-Coder-0.5B-Instruct at a context of 4096:
//! every request's prompt is llama-server's token for token (the repository layout, the extra
//! files, the budgets of a prompt past them), and `n_indent` cuts llama-server's own replies
//! where llama-server cut them.

use engine::generate::line_limits::LineLimits;
use engine::model::Model;
use engine::tokenizer::fim::{infill_prompt, Infill, InfillBudget};
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
    let cases = goldens["prompts"].as_array().unwrap();
    assert!(cases.len() >= 6);
    for case in cases {
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
        let ids = infill_prompt(qwen.tokenizer(), &infill, InfillBudget { n_batch: 2048, n_ctx, n_predict }).unwrap();
        assert_eq!(ids, json_ids(&case["prompt_ids"]), "{}", case["name"]);
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
