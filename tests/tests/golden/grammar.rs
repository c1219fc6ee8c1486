//! Structured output end to end: masked sampling (seeded, temperature 1) on the tiny fixture
//! models and on Qwen2.5-Coder-0.5B always yields JSON that parses and validates against its
//! schema (checked by Python's `jsonschema`, the reference implementation), for JSON schemas, any-object and tool calls,
//! and text that GBNF grammars describe (JSON shapes, read back by serde);
//! unsupported schemas fail at compile time; the mask's cost on a 150k vocabulary is measured.

use std::time::{Duration, Instant};

use engine::generate::{generate_batch, FinishReason, GenerateParams};
use engine::grammar::{Constraint, GrammarCompiler, GrammarError, ToolSpec};
use engine::kv_cache::KvType;
use engine::model::Model;
use engine::sampling::SamplingParams;
use engine::tokenizer::TokenId;
use engine_tests::{fixture, shared_model};
use serde_json::{json, Value};

/// One generation to run: its prompt, constraint and sampling seed.
struct Job {
    prompt: Vec<TokenId>,
    constraint: Constraint,
    seed: u64,
}

/// How a generation ended.
#[derive(Debug)]
struct Outcome {
    /// The output text (the end-of-generation token left out): exactly what the grammar matched.
    text: String,
    n_tokens: usize,
    /// The token cap was reached before the grammar finished.
    capped: bool,
}

/// Runs every job through the engine's own generation stack: the grammar as the output
/// constraint of a seeded sampler at temperature 1, all jobs batched in lockstep (jobs with
/// the same prompt share its prefill), at most `cap` tokens each.
fn run(model: &Model, compiler: &GrammarCompiler, jobs: &[Job], cap: usize) -> Vec<Outcome> {
    let longest = jobs.iter().map(|j| j.prompt.len()).max().unwrap_or(0);
    let mut kv = model.new_kv_cache(KvType::F16, longest + cap + 1);
    let batch = jobs
        .iter()
        .map(|j| {
            let matcher = compiler.compile(&j.constraint).unwrap();
            let params = GenerateParams {
                sampling: SamplingParams { seed: j.seed, ..SamplingParams::default() },
                max_tokens: cap,
                constraint: Some(Box::new(matcher)),
                ..GenerateParams::default()
            };
            (j.prompt.clone(), params)
        })
        .collect();
    generate_batch(model, &mut kv, batch)
        .unwrap()
        .into_iter()
        .map(|c| Outcome { n_tokens: c.tokens.len(), capped: c.finish == FinishReason::Length, text: c.text })
        .collect()
}

/// Outputs that must validate against their schemas: each parses when added; the schemas are
/// checked all at once by `assert_all` (one Python process, `engine_tests::json_schema_errors`).
/// Dropped unchecked, it fails the test.
#[derive(Default)]
struct SchemaChecks {
    cases: Vec<(Value, String)>,
    checked: bool,
}

impl SchemaChecks {
    /// `text` must parse as JSON (asserted now) and `schema` must accept it (asserted by
    /// `assert_all`, formats included).
    fn expect_valid(&mut self, schema: &Value, text: &str) {
        let _: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        self.cases.push((schema.clone(), text.to_string()));
    }

    fn assert_all(mut self) {
        self.checked = true;
        assert!(!self.cases.is_empty(), "nothing to validate");
        let errors = engine_tests::json_schema_errors(&self.cases);
        let failures: Vec<String> = self
            .cases
            .iter()
            .zip(&errors)
            .filter(|(_, e)| !e.is_empty())
            .map(|((schema, text), e)| format!("{text}\n  does not validate against {schema}: {e:?}"))
            .collect();
        assert!(failures.is_empty(), "{} of {} outputs fail their schemas:\n{}", failures.len(), self.cases.len(), failures.join("\n"));
    }
}

impl Drop for SchemaChecks {
    fn drop(&mut self) {
        if !self.checked && !std::thread::panicking() {
            panic!("{} outputs were never validated (SchemaChecks::assert_all)", self.cases.len());
        }
    }
}

/// Parses output of the any-object constraint. JSON has no bound on exponents, and random
/// weights write numbers like `4e5145617980046` that serde_json refuses as out of range: such
/// exponents are shrunk (to `e0`, inside strings too, which keeps them strings) before a
/// second parse, so that only a syntax error fails.
fn parse_any_json(text: &str) -> Value {
    match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) if e.to_string().contains("number out of range") => {
            let b = text.as_bytes();
            let mut out = String::with_capacity(text.len());
            let mut i = 0;
            while i < text.len() {
                let c = text[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
                if (c == 'e' || c == 'E') && i > 1 && b[i - 2].is_ascii_digit() {
                    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                        out.push(b[i] as char);
                        i += 1;
                    }
                    if i < b.len() && b[i].is_ascii_digit() {
                        while i < b.len() && b[i].is_ascii_digit() {
                            i += 1;
                        }
                        out.push('0');
                    }
                }
            }
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
        }
        Err(e) => panic!("not JSON ({e}): {text}"),
    }
}

/// Asserts a tool call names one of `tools`, and expects its arguments to validate against that
/// tool.
fn assert_tool_call(checks: &mut SchemaChecks, tools: &[ToolSpec], text: &str) -> String {
    let call: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let obj = call.as_object().unwrap_or_else(|| panic!("not an object: {text}"));
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["name", "arguments"], "{text}");
    let name = obj["name"].as_str().unwrap();
    let tool = tools.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("unknown tool: {text}"));
    checks.expect_valid(&tool.parameters, &obj["arguments"].to_string());
    name.to_string()
}

/// The schemas of the tiny-model test: bounded (lengths, counts, ranges) because random
/// weights will happily write a string forever.
fn schemas() -> Vec<Value> {
    let short = json!({"type": "string", "maxLength": 6});
    vec![
        // required properties, bounded integer and string
        json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
               "required": ["name", "age"], "additionalProperties": false}),
        // nested objects with an array inside
        json!({"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
               "tags": {"type": "array", "items": short, "maxItems": 3}}, "required": ["id", "tags"], "additionalProperties": false}},
               "required": ["user"], "additionalProperties": false}),
        // array length bounds, negative integers
        json!({"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 2, "maxItems": 4}),
        // string enum
        json!({"type": "string", "enum": ["red", "green", "blue"]}),
        // mixed enum and const
        json!({"type": "object", "properties": {"color": {"enum": ["red", "green", 7, null]}, "kind": {"const": "paint"}},
               "required": ["color", "kind"], "additionalProperties": false}),
        // bounded numbers with fractions and exponents
        json!({"type": "object", "properties": {"t": {"type": "number", "minimum": -10, "maximum": 10}, "p": {"type": "number", "minimum": 0, "maximum": 1}},
               "required": ["t", "p"], "additionalProperties": false}),
        // exclusive bounds and multipleOf at the top level
        json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100, "multipleOf": 5}),
        // booleans and null
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}, "nothing": {"type": "null"}},
               "required": ["ok", "nothing"], "additionalProperties": false}),
        // anyOf of different types
        json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 4}, {"type": "boolean"}]}),
        // optional properties
        json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 10}, "b": {"type": "string", "maxLength": 5}, "c": {"type": "boolean"}},
               "required": ["b"], "additionalProperties": false}),
        // array of objects
        json!({"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}, "y": {"type": "integer", "minimum": 0, "maximum": 99}},
               "required": ["x", "y"], "additionalProperties": false}, "minItems": 1, "maxItems": 3}),
        // local references
        json!({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["x"], "additionalProperties": false}},
               "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}}, "required": ["from", "to"], "additionalProperties": false}),
        // exact string length
        json!({"type": "object", "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 3}}, "required": ["code"], "additionalProperties": false}),
        // pattern
        json!({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2,4}$"}}, "required": ["id"], "additionalProperties": false}),
        // formats
        json!({"type": "object", "properties": {"day": {"type": "string", "format": "date"}, "uid": {"type": "string", "format": "uuid"}},
               "required": ["day", "uid"], "additionalProperties": false}),
        // tuple
        json!({"type": "array", "prefixItems": [short, {"type": "integer", "minimum": 0, "maximum": 9}, {"type": "boolean"}], "items": false}),
        // nested arrays
        json!({"type": "array", "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}, "minItems": 1, "maxItems": 2}),
        // patternProperties and a property count bound
        json!({"type": "object", "patternProperties": {"^[a-z]{1,4}$": {"type": "integer", "minimum": 0, "maximum": 9}}, "additionalProperties": false,
               "minProperties": 1, "maxProperties": 3}),
        // top-level enum of any JSON values
        json!({"enum": [1, "two", {"three": 3}, [4], null, true]}),
        // allOf intersection
        json!({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, "required": ["a"], "additionalProperties": false},
                         {"properties": {"a": {"minimum": 0, "maximum": 5}}, "required": ["b"]}]}),
        // disjoint oneOf (llguidance proves the branches exclusive)
        json!({"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}, "n": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["k", "n"], "additionalProperties": false},
                         {"type": "object", "properties": {"k": {"const": "b"}, "s": short}, "required": ["k", "s"], "additionalProperties": false}]}),
    ]
}

/// A GBNF grammar: a JSON array of at most five integers of up to three digits.
const NUMBER_LIST: &str = "root ::= \"[\" ( num ( \",\" \" \"? num ){0,4} )? \"]\"\nnum ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,2} )\n";

fn assert_number_list(text: &str) {
    let v = parse_any_json(text);
    let items = v.as_array().unwrap_or_else(|| panic!("not an array: {text}"));
    assert!(items.len() <= 5 && items.iter().all(|n| n.as_i64().is_some_and(|n| n.abs() < 1000)), "{text}");
}

/// A GBNF grammar: `{"name": "...", "legs": N}` with a short name of letters and spaces.
const ANIMAL: &str = "root ::= \"{\\\"name\\\": \\\"\" [A-Za-z ]{1,20} \"\\\", \\\"legs\\\": \" [0-9]{1,2} \"}\"\n";

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                               "required": ["city", "unit"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "get_time".into(),
            parameters: json!({"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 20}}, "required": ["timezone"], "additionalProperties": false}),
        },
    ]
}

/// Every schema with several seeds, json_object and a two-tool call on one tiny model.
fn tiny_model(name: &str) {
    let model = Model::load(fixture(&format!("models/{name}.gguf"))).unwrap();
    let tok = model.tokenizer();
    let compiler = GrammarCompiler::new(tok).unwrap();
    let prompt = tok.encode("Answer in JSON:", true, false);
    let schemas = schemas();
    let seeds = [1u64, 2, 3, 4, 5];
    let mut jobs = Vec::new();
    for s in &schemas {
        for &seed in &seeds {
            jobs.push(Job { prompt: prompt.clone(), constraint: Constraint::JsonSchema(s.clone()), seed });
        }
    }
    let n_schema_jobs = jobs.len();
    for seed in 0..6 {
        jobs.push(Job { prompt: prompt.clone(), constraint: Constraint::JsonObject, seed });
        jobs.push(Job { prompt: prompt.clone(), constraint: Constraint::ToolCall(tools()), seed });
        jobs.push(Job { prompt: prompt.clone(), constraint: Constraint::Grammar(NUMBER_LIST.into()), seed });
    }
    let cap = 400;
    let t0 = Instant::now();
    let outs = run(&model, &compiler, &jobs, cap);
    let elapsed = t0.elapsed();

    let mut capped = Vec::new();
    let mut bounded_capped = 0;
    let mut names = Vec::new();
    let mut checks = SchemaChecks::default();
    for (job, out) in jobs.iter().zip(&outs) {
        if out.capped {
            capped.push(out.text.clone());
            bounded_capped += usize::from(job.constraint != Constraint::JsonObject);
            continue;
        }
        match &job.constraint {
            Constraint::JsonSchema(s) => checks.expect_valid(s, &out.text),
            Constraint::JsonObject => {
                assert!(parse_any_json(&out.text).is_object(), "{}", out.text);
            }
            Constraint::ToolCall(t) => names.push(assert_tool_call(&mut checks, t, &out.text)),
            Constraint::Grammar(_) => assert_number_list(&out.text),
        }
    }
    checks.assert_all();
    let tokens: usize = outs.iter().map(|o| o.n_tokens).sum();
    eprintln!(
        "{name}: {} generations ({} schema jobs), {tokens} tokens in {elapsed:.2?}, {} capped at {cap}; tools called: {names:?}",
        outs.len(),
        n_schema_jobs,
        capped.len(),
    );
    for (job, out) in jobs.iter().zip(&outs).take(n_schema_jobs).step_by(seeds.len()) {
        eprintln!("  seed {}: {}", job.seed, out.text);
    }
    for c in &capped {
        eprintln!("  capped: {}...", c.chars().take(120).collect::<String>());
    }
    // Random weights may wander inside an unbounded value: json_object's free keys and values
    // (reported above, not failures); the schemas and tool arguments here are all bounded.
    assert!(bounded_capped * 20 <= outs.len(), "{bounded_capped} generations of bounded schemas hit the cap");
}

#[test]
fn tiny_llama_spm_output_validates() {
    tiny_model("tiny-llama-Q8_0");
}

#[test]
fn tiny_granite_bpe_output_validates() {
    tiny_model("tiny-granite-Q8_0");
}

#[test]
fn unsupported_schemas_are_compile_errors() {
    let model = Model::load(fixture("models/tiny-granite-Q8_0.gguf")).unwrap();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    for (schema, names) in [
        (json!({"type": "object", "properties": {"a": {"$ref": "http://example.com/x"}}}), "http://example.com/x"),
        (json!({"type": "array", "uniqueItems": true}), "uniqueItems"),
        (json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}), "oneOf"),
        (json!({"type": "string", "format": "no-such-format"}), "no-such-format"),
        (json!({"type": "string", "pattern": "(?=a)b"}), "look-around"),
        (json!({"not": {"type": "null"}}), "not"),
    ] {
        match compiler.compile(&Constraint::JsonSchema(schema.clone())) {
            Err(GrammarError::Schema(msg)) => assert!(msg.contains(names), "{schema}: {msg}"),
            other => panic!("{schema}: expected a schema error, got {other:?}"),
        }
    }
    let bad_tool = ToolSpec { name: "f".into(), parameters: json!({"type": "object", "properties": {"x": {"if": {}}}}) };
    assert!(matches!(compiler.compile(&Constraint::ToolCall(vec![bad_tool])), Err(GrammarError::Tools(_))));
}

/// Control tokens never appear inside JSON, end-of-generation tokens only where it may end.
#[test]
fn qwen_special_tokens_stay_out_of_the_text() {
    let model = shared_model("qwen2.5-coder");
    let tok = model.tokenizer();
    let compiler = GrammarCompiler::new(tok).unwrap();
    let mut m = compiler.compile(&Constraint::JsonSchema(json!({"type": "integer"}))).unwrap();
    let n_model = model.config().n_vocab;
    let mut logits = vec![0.0f32; n_model];
    m.mask_logits(&mut logits).unwrap();
    let allowed: Vec<TokenId> = (0..n_model as TokenId).filter(|&t| logits[t as usize].is_finite()).collect();
    assert!(!allowed.is_empty());
    for &t in &allowed {
        let bytes = tok.token_bytes(t);
        assert!(!bytes.is_empty() && (bytes[0] == b'-' || bytes[0].is_ascii_digit()), "{t}: {bytes:?}");
    }
    let one = tok.encode("7", false, false);
    assert_eq!(one.len(), 1);
    m.accept(one[0]).unwrap();
    let mut logits = vec![0.0f32; n_model];
    m.mask_logits(&mut logits).unwrap();
    for &e in tok.eog_ids() {
        assert!(logits[e as usize].is_finite(), "EOG {e} allowed once the integer may end");
    }
    let im_start = tok.token_id("<|im_start|>").unwrap();
    assert!(logits[im_start as usize] == f32::NEG_INFINITY);
    assert!(m.accept(im_start).is_err());
    assert!(logits[tok.n_vocab()..].iter().all(|&l| l == f32::NEG_INFINITY), "ids past the tokenizer's vocabulary");
}

fn qwen_prompt(model: &Model, task: &str) -> Vec<TokenId> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful assistant. Reply with compact JSON only.<|im_end|>\n<|im_start|>user\n{task}<|im_end|>\n<|im_start|>assistant\n"
    );
    model.tokenizer().encode(&text, false, true)
}

/// The real model under constraints, several sequences batched; prints the mask cost.
#[test]
fn qwen_output_validates_and_mask_cost() {
    let model = shared_model("qwen2.5-coder");
    let t0 = Instant::now();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let build = t0.elapsed();

    let person = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}}, "required": ["name", "age", "languages"], "additionalProperties": false});
    let colors = json!({"type": "array", "items": {"enum": ["red", "green", "blue", "yellow"]}, "minItems": 2, "maxItems": 3});
    let point = json!({"type": "object", "properties": {"x": {"type": "number", "minimum": -100, "maximum": 100}, "y": {"type": "number", "minimum": -100, "maximum": 100},
                       "label": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]}}, "required": ["x", "y", "label"], "additionalProperties": false});
    let code = json!({"type": "object", "properties": {"lang": {"enum": ["python", "rust", "go"]}, "ok": {"type": "boolean"}, "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
                      "required": ["lang", "ok", "id"], "additionalProperties": false});
    let cases: Vec<(&str, Constraint)> = vec![
        ("Describe a fictional programmer: name, age and up to three languages.", Constraint::JsonSchema(person.clone())),
        ("List two or three colors of a rainbow.", Constraint::JsonSchema(colors.clone())),
        ("Give a point in the plane with an optional label.", Constraint::JsonSchema(point.clone())),
        ("Pick a language, say whether it is compiled, and make up a ticket id like ABC-12.", Constraint::JsonSchema(code.clone())),
        ("Describe the city of Paris in one JSON object with two or three fields.", Constraint::JsonObject),
        ("What is the weather in Paris, in celsius? Call a tool.", Constraint::ToolCall(tools())),
        ("Describe an animal: its name and number of legs.", Constraint::Grammar(ANIMAL.into())),
    ];
    // two seeds per case, all fourteen sequences batched
    let cases: Vec<(&str, Constraint)> = cases.iter().chain(&cases).cloned().collect();
    let jobs: Vec<Job> = cases
        .iter()
        .enumerate()
        .map(|(i, (task, c))| Job { prompt: qwen_prompt(model, task), constraint: c.clone(), seed: 100 + i as u64 })
        .collect();
    let t0 = Instant::now();
    for j in &jobs {
        compiler.compile(&j.constraint).unwrap();
    }
    let compile = t0.elapsed() / jobs.len() as u32;
    let t0 = Instant::now();
    let outs = run(model, &compiler, &jobs, 96);
    let elapsed = t0.elapsed();
    let tokens: usize = outs.iter().map(|o| o.n_tokens).sum();
    eprintln!(
        "qwen: compiler built in {build:.2?}, a constraint compiled in {compile:.2?}; {} generations, {tokens} tokens in {elapsed:.2?}",
        outs.len(),
    );
    let mut checks = SchemaChecks::default();
    for ((task, c), out) in cases.iter().zip(&outs) {
        eprintln!("  {task}\n    -> {} ({} tokens{})", out.text, out.n_tokens, if out.capped { ", CAPPED" } else { "" });
        assert!(!out.capped, "{task}: hit the token cap: {}", out.text);
        match c {
            Constraint::JsonSchema(s) => checks.expect_valid(s, &out.text),
            Constraint::JsonObject => {
                assert!(parse_any_json(&out.text).is_object(), "{}", out.text);
            }
            Constraint::ToolCall(t) => {
                assert_tool_call(&mut checks, t, &out.text);
            }
            Constraint::Grammar(_) => {
                let v = parse_any_json(&out.text);
                let name = v["name"].as_str().unwrap_or_else(|| panic!("{}", out.text));
                assert!(!name.is_empty() && name.len() <= 20 && v["legs"].as_u64().is_some_and(|n| n < 100), "{}", out.text);
            }
        }
    }
    checks.assert_all();

    // the mask alone on the full vocabulary, token by token into a free string (most tokens
    // allowed there): under the schema, and under a GBNF grammar for JSON (one lexeme per
    // character, so a parser step per byte)
    let text = "{\"name\":\"Ada Lovelace, the first programmer";
    for (what, c) in [("schema", Constraint::JsonSchema(person)), ("GBNF", Constraint::Grammar(json_gbnf()))] {
        let mut m = compiler.compile(&c).unwrap();
        let mut logits = vec![0.0f32; model.config().n_vocab];
        let (mut total, mut n, mut allowed) = (Duration::ZERO, 0u32, 0);
        for t in model.tokenizer().encode(text, false, false) {
            logits.fill(0.0);
            let t0 = Instant::now();
            m.mask_logits(&mut logits).unwrap();
            total += t0.elapsed();
            n += 1;
            allowed = logits.iter().filter(|l| l.is_finite()).count();
            m.accept(t).unwrap();
        }
        eprintln!(
            "qwen: {what} mask along a string: {:.2?} per call over {n} calls; {allowed} of {} tokens allowed at the end",
            total / n,
            logits.len()
        );
    }
}

/// The bar on the real model: 200 generations under 20 schemas (10 seeds each, sampled at
/// temperature 1, all 200 in one lockstep batch), every one parses and validates.
#[test]
fn qwen_two_hundred_generations_under_twenty_schemas() {
    let model = shared_model("qwen2.5-coder");
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let schemas: Vec<Value> = schemas().into_iter().take(20).collect();
    assert_eq!(schemas.len(), 20);
    let jobs: Vec<Job> = schemas
        .iter()
        .flat_map(|schema| {
            let prompt = qwen_prompt(model, &format!("Reply with a JSON value that matches this JSON schema: {schema}"));
            (0..10).map(move |seed| Job { prompt: prompt.clone(), constraint: Constraint::JsonSchema(schema.clone()), seed })
        })
        .collect();
    let t0 = Instant::now();
    let outs = run(model, &compiler, &jobs, 160);
    let elapsed = t0.elapsed();
    let mut checks = SchemaChecks::default();
    for (job, out) in jobs.iter().zip(&outs) {
        let Constraint::JsonSchema(schema) = &job.constraint else { unreachable!() };
        assert!(!out.capped, "hit the token cap under {schema}: {}", out.text);
        checks.expect_valid(schema, &out.text);
    }
    assert_eq!(outs.len(), 200);
    checks.assert_all();
    let tokens: usize = outs.iter().map(|o| o.n_tokens).sum();
    eprintln!("qwen: {} generations under {} schemas, {tokens} tokens in {elapsed:.1?}", outs.len(), schemas.len());
}

/// A forced tool call ends with finish reason `tool_calls`, and the chat layer reads it back.
#[test]
fn a_forced_tool_call_finishes_as_tool_calls_and_parses() {
    let model = Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let prompt = model.tokenizer().encode("Call a tool:", true, false);
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let mut checks = SchemaChecks::default();
    for seed in 0..4 {
        let params = GenerateParams {
            sampling: SamplingParams { seed, ..SamplingParams::default() },
            max_tokens: 300,
            constraint: Some(Box::new(compiler.compile(&Constraint::ToolCall(tools())).unwrap())),
            ..GenerateParams::default()
        };
        let c = engine::generate::generate(&model, &mut kv, &prompt, params).unwrap();
        assert_eq!(c.finish, FinishReason::ToolCalls, "{}", c.text);
        let reply = engine::chat::parse_tool_calls(&c.text);
        assert_eq!(reply.tool_calls.len(), 1, "{}", c.text);
        let call = &reply.tool_calls[0];
        let tool = tools().into_iter().find(|t| t.name == call.name).unwrap();
        checks.expect_valid(&tool.parameters, &call.arguments.to_string());
    }
    checks.assert_all();
}

/// The most digits any number of `json` has in its integral part, fraction and exponent.
fn widest_number(json: &str) -> [usize; 3] {
    let (mut widest, mut in_string, mut escaped) = ([0; 3], false, false);
    let (mut part, mut run) = (None::<usize>, 0);
    for c in json.chars() {
        if in_string {
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
            continue;
        }
        match (c, part) {
            ('"', _) => in_string = true,
            ('-', None) => (part, run) = (Some(0), 0),
            ('0'..='9', None) => (part, run) = (Some(0), 1),
            ('0'..='9', Some(_)) => run += 1,
            ('.', Some(0)) | ('e' | 'E', Some(0 | 1)) => {
                widest[part.unwrap()] = widest[part.unwrap()].max(run);
                (part, run) = (Some(if c == '.' { 1 } else { 2 }), 0);
                continue;
            }
            ('+' | '-', Some(2)) => {}
            _ => {}
        }
        if let Some(p) = part {
            if !(c.is_ascii_digit() || c == '-' || c == '+') {
                widest[p] = widest[p].max(run);
                part = None;
            }
        }
    }
    if let Some(p) = part {
        widest[p] = widest[p].max(run);
    }
    widest
}

/// Sampled at temperature 1 under schemas of bare numbers, the real model may not spend its
/// budget on one number: every output ends within the cap, with numbers inside the bound (16
/// integral, 16 fractional, 3 exponent digits).
#[test]
fn qwen_sampled_numbers_stay_within_the_digit_bound() {
    assert_eq!(widest_number(r#"{"a":-123.45e+6,"b":"99999999","c":[1234567,0.1]}"#), [7, 2, 1]);
    let model = shared_model("qwen2.5-coder");
    let compiler = GrammarCompiler::new(model.tokenizer()).unwrap();
    let cases = [
        (
            "Give the value of a very large number, as large as you can.",
            json!({"type": "object", "properties": {"value": {"type": "number"}}, "required": ["value"]}),
        ),
        (
            "How many grains of sand are on Earth? Give an exact count.",
            json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}),
        ),
        ("Write pi to as many decimals as you know.", json!({"type": "number"})),
    ];
    let jobs: Vec<Job> = cases
        .iter()
        .flat_map(|(task, schema)| {
            let prompt = qwen_prompt(model, task);
            (0..6).map(move |seed| Job { prompt: prompt.clone(), constraint: Constraint::JsonSchema(schema.clone()), seed })
        })
        .collect();
    let outs = run(model, &compiler, &jobs, 160);
    let mut checks = SchemaChecks::default();
    for (job, out) in jobs.iter().zip(&outs) {
        let Constraint::JsonSchema(schema) = &job.constraint else { unreachable!() };
        eprintln!("  {} ({} tokens)", out.text, out.n_tokens);
        assert!(!out.capped, "ran to the token cap: {}", out.text);
        checks.expect_valid(schema, &out.text);
        let [integral, fraction, exponent] = widest_number(&out.text);
        assert!(integral <= 16 && fraction <= 16 && exponent <= 3, "{}", out.text);
    }
    checks.assert_all();
}

/// JSON in GBNF: the `json` grammar of the GBNF goldens (`fixtures/gbnf/llama-cpp.json`).
fn json_gbnf() -> String {
    let goldens = engine_tests::read_json(&fixture("gbnf/llama-cpp.json"));
    let case = goldens["cases"].as_array().unwrap().iter().find(|c| c["name"] == "json").expect("the json grammar");
    case["grammar"].as_str().unwrap().to_string()
}
