//! A GGUF inference engine: file format, quantized numerics and CPU kernels (more layers come
//! on top: models, tokenizers, sessions, the guard). See ARCHITECTURE.md for the map.

#[cfg(target_endian = "big")]
compile_error!("the engine reads GGUF's little-endian data in place and needs a little-endian target");

pub mod audio;
pub mod backend;
pub mod chat;
pub mod embed;
pub mod generate;
pub mod gguf;
pub mod grammar;
pub mod guard;
pub mod image;
pub mod kv_cache;
pub mod logprobs;
pub mod model;
pub mod perplexity;
pub mod quant;
pub mod rerank;
pub mod sampling;
pub mod serving;
pub mod tokenizer;
pub mod transcribe;
