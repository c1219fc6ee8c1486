//! `engine-cli`: inspect GGUF files and run the engine from a terminal.

// clap's help texts are the arguments' doc comments, whose brackets are JSON and token names
// (`[ids]`, `[CLS]`), not links
#![allow(rustdoc::broken_intra_doc_links)]

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod embed;
mod guard;
mod guard_jsonl;
mod images;
mod info;
mod load;
mod logits;
mod perplexity;
mod quantize;
mod run;
mod sampling_args;
mod serve;
mod tokenize;
mod transcribe;

/// mimalloc keeps freed memory for reuse: a forward pass allocates its activation buffers
/// afresh every step, and with glibc's allocator each large one is a new mapping whose pages
/// fault in and are zeroed again (a tenth of a 2-thread prompt's time on gemma-3-270m).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "engine-cli", version, about = "GGUF inference engine command-line tool")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe a GGUF file: architecture, sizes, tensor types, tokenizer and all metadata.
    Info(info::InfoArgs),
    /// Print the token ids and pieces of a text under a model's tokenizer.
    Tokenize(tokenize::TokenizeArgs),
    /// Generate a continuation of a prompt (sampled, greedy, JSON-constrained or drafted) and
    /// stream it to stdout.
    Run(Box<run::RunArgs>),
    /// Judge a text for risks with a guard model (exit 0 safe, 1 flagged, 2 error).
    Guard(guard::GuardArgs),
    /// Talk to a chat model: each input line is a user turn, replies are streamed.
    Chat(Box<chat::ChatArgs>),
    /// Show the best tokens and their logits at every position of a prompt.
    Logits(logits::LogitsArgs),
    /// Measure a model's perplexity over a text (llama-perplexity's chunks), and what a KV cache
    /// type costs (--kl-against f16).
    Perplexity(perplexity::PerplexityArgs),
    /// Measure prompt-processing and generation speed, like llama-bench.
    Bench(bench::BenchArgs),
    /// Print one embedding vector per text (sentence embeddings: BERT encoders, or decoders).
    Embed(embed::EmbedArgs),
    /// Serve models over the OpenAI-style HTTP API, with the guard routes.
    Serve(Box<serve::ServeArgs>),
    /// Transcribe an audio file with a Whisper model.
    Transcribe(transcribe::TranscribeArgs),
    /// Write a GGUF file with every weight matrix in one type (llama-quantize --pure).
    Quantize(quantize::QuantizeArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,symphonia=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Run(args) => run::run(*args),
        Command::Chat(args) => chat::run(*args),
        Command::Logits(args) => logits::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Transcribe(args) => transcribe::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Guard(args) => match guard::run(args) {
            Ok(true) => std::process::exit(1),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        },
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}
