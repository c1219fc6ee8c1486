//! The engine against golden data (llama.cpp's outputs, faster-whisper's, the tokenizer
//! vectors): one test binary, a module per subject, so that the suite links once.

mod archs;
mod chat_templates;
mod embedding_input;
mod embeddings;
mod gbnf;
mod generate;
mod ggml_dots;
mod gguf_malformed;
mod gguf_roundtrip;
mod grammar;
mod grid_quants;
mod guard_evaluator;
mod guard_families;
mod guard_prompt_cache;
mod guard_prompts;
mod guard_verdicts;
mod infill;
mod kv_quant;
mod lora;
mod quant_golden;
mod reference;
mod rerank;
mod sampler_order;
mod serving;
mod simd_vs_ref;
mod table_quants;
mod tiny_archs;
mod tokenizer_golden;
mod tokenizer_robust;
mod vision;
mod whisper;
