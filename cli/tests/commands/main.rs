//! `engine-cli` run as a program, one module per command: one test binary, so that the suite
//! links once (`device.rs`, run again with `--features cuda`, and the Python clients and
//! operations binaries stay apart).

mod bench;
mod chat;
mod embed;
mod guard;
mod info;
mod logits;
mod perplexity;
mod quantize;
mod run;
mod tokenize;
mod transcribe;
