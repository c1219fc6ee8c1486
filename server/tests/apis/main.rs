//! The API routes over real TCP on 127.0.0.1 (one test binary: each links once): Anthropic's
//! Messages API (`messages.rs`), OpenAI's Responses API (`responses.rs`), a last assistant
//! message continued (`prefill.rs`), llama-server's token
//! utilities (`tokens.rs`), a hybrid model's states (`hybrid.rs`), GBNF grammars (`grammar.rs`), reranking (`rerank.rs`), the playground page (`webui.rs`), models loaded and unloaded at run time (`model_loading.rs`), and
//! deadlines and readiness (`operations.rs`).

#[path = "../common/mod.rs"]
mod common;
mod grammar;
mod harmony;
mod hybrid;
mod lora;
mod messages;
mod model_loading;
mod operations;
mod prefill;
mod rerank;
mod responses;
mod tokens;
mod vision;
mod webui;
