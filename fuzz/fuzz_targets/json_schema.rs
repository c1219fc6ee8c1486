//! The grammar compiler on arbitrary JSON schemas, tool lists and GBNF grammars (`gpt-2`
//! vocabulary, compiled once): the first byte picks the constraint (its low two bits: a
//! `response_format` schema, a tool call over `[{"name", "parameters"}]`, or a user grammar:
//! the rest as text, GBNF or `%llguidance` Lark), the rest is the JSON. Compiling returns a matcher
//! or an error, never panics; a compiled matcher then walks a few steps, each picking one of
//! the tokens its mask allows, and must accept every token it allowed and roll back what it
//! accepted.
#![no_main]

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use engine::grammar::{Constraint, GrammarCompiler, ToolSpec};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Steps walked through a compiled matcher (each computes a mask over the whole vocabulary).
const STEPS: usize = 4;

fuzz_target!(|data: &[u8]| {
    static COMPILER: OnceLock<GrammarCompiler> = OnceLock::new();
    let compiler = COMPILER.get_or_init(|| GrammarCompiler::new(&engine_fuzz::vocab("gpt-2")).expect("the gpt-2 vocabulary compiles"));
    let Some((&mode, json)) = data.split_first() else { return };
    let constraint = if mode & 3 >= 2 {
        let Ok(text) = std::str::from_utf8(json) else { return };
        Some(Constraint::Grammar(text.to_string()))
    } else {
        let Ok(value) = serde_json::from_slice::<Value>(json) else { return };
        json_constraint(mode, value)
    };
    let Some(constraint) = constraint else { return };
    let Ok(mut matcher) = compiler.compile(&constraint) else { return };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut hasher);
    let mut pick = hasher.finish();
    let mut accepted = 0;
    let mut logits = vec![0f32; compiler.n_vocab()];
    for _ in 0..STEPS {
        logits.fill(0.0);
        if matcher.mask_logits(&mut logits).is_err() {
            return;
        }
        let allowed: Vec<u32> = (0..logits.len() as u32).filter(|&i| logits[i as usize].is_finite()).collect();
        if allowed.is_empty() {
            break;
        }
        let token = allowed[(pick % allowed.len() as u64) as usize];
        pick = pick.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15;
        matcher.accept(token).unwrap_or_else(|e| panic!("token {token} was allowed by the mask, then refused: {e}"));
        accepted += 1;
    }
    matcher.rollback(accepted).unwrap_or_else(|e| panic!("rolling back {accepted} accepted tokens failed: {e}"));
});

/// A `response_format` schema (low bit clear) or a tool call over `[{"name", "parameters"}]`.
fn json_constraint(mode: u8, value: Value) -> Option<Constraint> {
    if mode & 1 == 0 {
        return Some(Constraint::JsonSchema(value));
    }
    let Value::Array(tools) = value else { return None };
    let tools = tools
        .into_iter()
        .map(|t| ToolSpec { name: t["name"].as_str().unwrap_or("f").to_string(), parameters: t.get("parameters").cloned().unwrap_or(Value::Null) })
        .collect();
    Some(Constraint::ToolCall(tools))
}
