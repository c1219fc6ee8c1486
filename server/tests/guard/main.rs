//! The guard as a service over real TCP on 127.0.0.1, with the tiny Guardian 3.0 fixture as
//! guard (and the tiny llama fixture as chat model): policies, audit fields, conversation input,
//! per-risk metrics and requests of many clients judged together (`policy.rs`); guardrails on
//! chat completions (`guardrails.rs`); the prompt cache across requests (`prompt_cache.rs`); a
//! family with prompts of its own, Llama Guard, behind the same APIs (`families.rs`).

#[path = "../common/mod.rs"]
mod common;
mod families;
mod guardrails;
mod policy;
mod prompt_cache;

pub use common::start;

use engine_tests::fixture;

pub const GUARD: &str = "guardian-tiny-3.0";

pub fn guard_path() -> std::path::PathBuf {
    fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf")
}
