//! The route handlers, one file per API family.

pub mod chat;
pub mod completions;
pub mod custom_risks;
pub mod embeddings;
pub mod generation;
pub mod guard;
pub mod guardrails;
pub mod messages;
pub mod models;
pub mod moderations;
pub mod tokens;
mod tool_stream;
pub mod transcriptions;
