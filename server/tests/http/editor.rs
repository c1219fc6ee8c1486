//! `/infill` as the editor plugins call it: llama.vim's requests (its cache warm-up with
//! `n_predict` 0, `response_fields`), and the line limits that end a completion where an editor
//! wants it to (`n_indent`, `t_max_predict_ms`), with what llama-server answers.

use std::collections::BTreeSet;
use std::sync::Arc;

use engine::model::Model;
use engine::tokenizer::fim::{fim_prompt, infill_prompt, FimOrder, Infill, InfillBudget};
use engine::tokenizer::TokenId;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server};

use super::{client, expect_error, plain_chat_server, qwen_server, sse_events, start, CHAT};

/// The FIM prompt `/infill` builds at a context of 4096.
fn prompt_of(qwen: &Model, body: &Value) -> Vec<TokenId> {
    let extra: Vec<(String, String)> = body["input_extra"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["filename"].as_str().unwrap().to_string(), f["text"].as_str().unwrap().to_string()))
        .collect();
    let text = |k: &str| body[k].as_str().unwrap();
    let infill = Infill { prefix: text("input_prefix"), suffix: text("input_suffix"), middle_start: text("prompt"), extra: &extra };
    let n_predict = body["n_predict"].as_i64().and_then(|n| usize::try_from(n).ok());
    infill_prompt(qwen.tokenizer(), &infill, InfillBudget { n_batch: 2048, n_ctx: 4096, n_predict }, FimOrder::PrefixSuffixMiddle).unwrap()
}

#[test]
fn llama_vim_warms_the_cache_with_n_predict_0_and_reads_only_the_fields_it_names() {
    let qwen = Arc::new(Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap());
    let base = qwen_server(qwen.clone(), 4096);
    let url = format!("{base}/infill");
    let extra = json!([{"filename": "util.py", "text": "def helper(x):\n    return x * 2\n\n\ndef twice(f, x):\n    return f(f(x))\n"}]);
    // llama.vim's request when its ring of chunks around the cursor changes: read them into the
    // cache, write nothing, answer nothing
    let warm = json!({"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "", "n_predict": 0,
                      "temperature": 0.0, "samplers": [], "stream": false, "cache_prompt": true, "t_max_prompt_ms": 1,
                      "t_max_predict_ms": 1, "response_fields": [""]});
    let r = client().post(&url).json(&warm).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().unwrap(), json!({}));
    // then a completion at the cursor, as llama.vim asks for it
    let fields = [
        "content",
        "timings/prompt_n",
        "timings/prompt_ms",
        "timings/prompt_per_token_ms",
        "timings/prompt_per_second",
        "timings/predicted_n",
        "timings/predicted_ms",
        "timings/predicted_per_token_ms",
        "timings/predicted_per_second",
        "truncated",
        "tokens_cached",
    ];
    let at_cursor = json!({"id_slot": 0, "input_prefix": "def add(a, b):\n", "input_suffix": "\n\nprint(add(1, 2))\n", "input_extra": extra,
                           "prompt": "    return ", "n_predict": 16, "stop": [], "n_indent": 4, "top_k": 40, "top_p": 0.9,
                           "samplers": ["top_k", "top_p", "infill"], "seed": 7, "stream": false, "cache_prompt": true, "t_max_prompt_ms": 500,
                           "t_max_predict_ms": 1000, "response_fields": fields});
    let r: Value = client().post(&url).json(&at_cursor).send().unwrap().json().unwrap();
    let keys: BTreeSet<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, fields.into_iter().collect(), "{r}");
    // the warm-up's prompt was read whole: all it shares with this one is reused
    let (warmed, asked) = (prompt_of(&qwen, &warm), prompt_of(&qwen, &at_cursor));
    let shared = warmed.iter().zip(&asked).take_while(|(a, b)| a == b).count();
    assert!(shared > 30, "the other file's tokens are shared: {shared}");
    assert_eq!(r["tokens_cached"].as_u64(), Some(shared as u64), "{r}");
    assert_eq!(r["timings/prompt_n"].as_u64(), Some((asked.len() - shared) as u64), "{r}");
    assert!(r["content"].as_str().unwrap().starts_with("a + b"), "{r}");
    let n = r["timings/predicted_n"].as_u64().unwrap();
    for k in ["timings/prompt_ms", "timings/prompt_per_second", "timings/predicted_ms", "timings/predicted_per_second"] {
        assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
    }
    // rates as llama-server counts them: the first token comes with the prompt's pass
    let per_token = r["timings/predicted_ms"].as_f64().unwrap() / (n - 1) as f64;
    assert!((r["timings/predicted_per_token_ms"].as_f64().unwrap() - per_token).abs() < 1e-9, "{r}");
    // the whole answer carries the same timings object
    let mut whole = at_cursor.clone();
    whole.as_object_mut().unwrap().remove("response_fields");
    let w: Value = client().post(&url).json(&whole).send().unwrap().json().unwrap();
    let t = &w["timings"];
    assert_eq!(t["predicted_n"], w["tokens_predicted"], "{w}");
    assert_eq!(t["prompt_n"].as_u64().unwrap() + t["cache_n"].as_u64().unwrap(), w["tokens_evaluated"].as_u64().unwrap(), "{w}");
    for (bad, param) in [(json!({"n_predict": -2}), "n_predict"), (json!({"n_indent": -1}), "n_indent")] {
        let mut body = json!({"input_prefix": "a"});
        body.as_object_mut().unwrap().extend(bad.as_object().unwrap().clone());
        let e = expect_error(client().post(&url).json(&body).send().unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(e["param"], param, "{bad}: {e}");
    }
}

/// `text` cut as llama-server's `n_indent` cuts it: from the second line on, at the first
/// character of a line that is not a space or tab when fewer than `n` of them come before it.
fn cut_at_indent(text: &str, n: usize) -> &str {
    let Some(first) = text.find('\n') else { return text };
    let mut at = first + 1;
    loop {
        let line = &text[at..];
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if indent == line.len() {
            return text;
        }
        if indent < n {
            return &text[..at + indent];
        }
        match line[indent..].find('\n') {
            Some(end) => at += indent + end + 1,
            None => return text,
        }
    }
}

#[test]
fn n_indent_and_t_max_predict_ms_end_a_completion_at_a_line_as_llama_server_does() {
    let qwen = Arc::new(Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap());
    let base = qwen_server(qwen, 4096);
    let url = format!("{base}/infill");
    // a method's body: the reply writes it, a blank line, then the next method
    let body = json!({"input_prefix": "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
                      "input_suffix": "\n\n    def pop(self):\n        return self.items.pop()\n", "n_predict": 24, "temperature": 0});
    let with = |field: &str, value: Value| {
        let mut b = body.clone();
        b[field] = value;
        b
    };
    let ask = |b: &Value| client().post(&url).json(b).send().unwrap().json::<Value>().unwrap();
    let plain = ask(&body);
    let whole = plain["content"].as_str().unwrap();
    assert!(whole.matches('\n').count() > 2, "{plain}");
    for n_indent in [4, 100] {
        let r = ask(&with("n_indent", json!(n_indent)));
        let expected = cut_at_indent(whole, n_indent);
        assert!(expected.len() < whole.len(), "n_indent {n_indent} cuts this reply: {plain}");
        assert_eq!(r["content"].as_str(), Some(expected), "n_indent {n_indent}");
        assert_eq!(r["stop_type"], "limit", "{r}");
        // streamed, no piece past the cut goes out
        let mut streamed = with("n_indent", json!(n_indent));
        streamed["stream"] = json!(true);
        let text = client().post(&url).json(&streamed).send().unwrap().text().unwrap();
        let events: Vec<Value> = sse_events(&text).iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        assert_eq!(events.iter().map(|e| e["content"].as_str().unwrap()).collect::<String>(), expected, "n_indent {n_indent}");
    }
    // a millisecond after the first token, the next line end ends it
    let r = ask(&with("t_max_predict_ms", json!(1)));
    let content = r["content"].as_str().unwrap();
    assert!(whole.starts_with(content) && content.len() < whole.len() && content.contains('\n'), "{r}");
    assert_eq!(r["stop_type"], "limit", "{r}");
    // without a limit (0, as llama-server reads it) the reply is whole
    assert_eq!(ask(&with("t_max_predict_ms", json!(0)))["content"].as_str(), Some(whole));
}

#[test]
fn samplers_run_in_the_order_named_with_temperature_only_where_named() {
    let base = plain_chat_server();
    let url = format!("{base}/v1/completions");
    let complete = |extra: Value| {
        let mut body = json!({"model": CHAT, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "top_k": 40});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let r: Value = client().post(&url).json(&body).send().unwrap().json().unwrap();
        r["choices"][0]["text"].as_str().unwrap_or_else(|| panic!("{r}")).to_string()
    };
    let greedy = complete(json!({}));
    // temperature named: 0 keeps the best, as the fixed order's greedy does
    assert_eq!(complete(json!({"samplers": ["top_k", "temperature"], "seed": 1})), greedy);
    assert_eq!(complete(json!({"samplers": "kt", "seed": 2})), greedy);
    // not named: llama-server's chain draws at temperature 1 from the top 40
    let drawn: Vec<String> = (1..=4).map(|seed| complete(json!({"samplers": ["top_k"], "seed": seed}))).collect();
    assert!(drawn.iter().any(|d| *d != greedy), "{drawn:?}");
    for bad in [json!(["top_k", "mirostat"]), json!("kq"), json!(3)] {
        let e = expect_error(
            client().post(&url).json(&json!({"model": CHAT, "prompt": "a", "samplers": bad})).send().unwrap(),
            StatusCode::BAD_REQUEST,
        );
        assert_eq!(e["param"], "samplers", "{e}");
    }
}

#[test]
fn a_server_started_suffix_first_lays_every_fill_out_so() {
    let qwen = Arc::new(Model::load(engine_tests::fetch_model("qwen2.5-coder")).unwrap());
    let spec = ModelSpec { id: "qwen".into(), model: qwen.clone(), chat: true, guard: false, n_ctx: Some(4096), draft: None };
    let base = start(Server::builder().fim_order(FimOrder::SuffixPrefixMiddle).model(spec));
    let (prefix, suffix) = ("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n");
    let by_ids = |ids: Vec<TokenId>| {
        let body = json!({"model": "qwen", "prompt": ids, "max_tokens": 8, "temperature": 0});
        let r: Value = client().post(format!("{base}/v1/completions")).json(&body).send().unwrap().json().unwrap();
        r["choices"][0]["text"].as_str().unwrap().to_string()
    };
    // /infill: the suffix-first prompt's reply
    let body = json!({"input_prefix": prefix, "input_suffix": suffix, "n_predict": 8, "temperature": 0});
    let r: Value = client().post(format!("{base}/infill")).json(&body).send().unwrap().json().unwrap();
    let psm = prompt_of(&qwen, &json!({"input_prefix": prefix, "input_suffix": suffix, "prompt": "", "input_extra": [], "n_predict": 8}));
    let infill = Infill { prefix, suffix, middle_start: "", extra: &[] };
    let budget = InfillBudget { n_batch: 2048, n_ctx: 4096, n_predict: Some(8) };
    let spm = infill_prompt(qwen.tokenizer(), &infill, budget, FimOrder::SuffixPrefixMiddle).unwrap();
    assert_ne!(spm, psm, "the orders differ");
    assert_eq!(r["tokens_evaluated"].as_u64(), Some(spm.len() as u64));
    assert_eq!(r["content"].as_str().unwrap(), by_ids(spm));
    // a completion's suffix too
    let body = json!({"model": "qwen", "prompt": prefix, "suffix": suffix, "max_tokens": 8, "temperature": 0});
    let r: Value = client().post(format!("{base}/v1/completions")).json(&body).send().unwrap().json().unwrap();
    let spm = fim_prompt(qwen.tokenizer(), prefix, suffix, FimOrder::SuffixPrefixMiddle).unwrap();
    assert_eq!(r["usage"]["prompt_tokens"].as_u64(), Some(spm.len() as u64));
    assert_eq!(r["choices"][0]["text"].as_str().unwrap(), by_ids(spm));
}
