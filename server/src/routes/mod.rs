//! The route handlers, one file per API family.

pub mod chat;
mod chat_request;
mod chat_turn;
pub mod completions;
pub mod embeddings;
pub mod generation;
pub mod guard;
pub mod guardrails;
mod harmony;
pub mod infill;
pub mod llama_answer;
pub mod llama_completion;
pub mod lora_adapters;
pub mod messages;
pub mod models;
pub mod moderations;
pub mod props;
mod reasoning;
mod reply;
pub mod rerank;
pub mod responses;
pub(crate) mod responses_stream;
mod timings;
pub mod tokens;
mod tool_stream;
pub mod transcriptions;
