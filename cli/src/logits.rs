//! `engine-cli logits`: runs a prompt (text or token ids) as one batch and shows the best tokens (ids and raw
//! logits) at every position, as a table or as JSON for comparing with other implementations.

use std::fmt::Write as _;
use std::path::PathBuf;

use engine::backend::Device;
use engine::kv_cache::KvType;
use engine::logprobs::top_k;
use engine::model::BatchEntry;
use engine::tokenizer::TokenId;
use serde::Serialize;

use crate::load::{load_model, parse_device, parse_positive, thread_pool, LoraArgs, PromptArgs};
use crate::tokenize::piece;

#[derive(clap::Args)]
pub struct LogitsArgs {
    /// The GGUF model to run.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// How many of the best tokens to show per position.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print one JSON object: {"tokens": [ids], "top": [[[id, logit], ...] per position]}.
    #[arg(long)]
    pub json: bool,
    /// Worker threads [default: all cores].
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
    /// Device: cpu, cuda or cuda:N (a build without CUDA refuses cuda with an error).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
    #[command(flatten)]
    pub lora: LoraArgs,
}

/// The JSON output. serde writes an f32 in its shortest form that reads back to the same f32.
#[derive(Serialize)]
struct Output {
    tokens: Vec<TokenId>,
    top: Vec<Vec<(TokenId, f32)>>,
}

pub fn run(args: LogitsArgs) -> anyhow::Result<()> {
    let pool = thread_pool(args.threads)?;
    let mut model = load_model(&args.model, args.device)?;
    args.lora.load_into(&mut model)?;
    let tokens = args.prompt.tokens(&model)?;
    // an f32 cache: this command is for checking numerics, so nothing is rounded on the way
    let mut kv = model.new_kv_cache(KvType::F32, tokens.len());
    let lora = model.default_schedule(&tokens);
    let logits = pool.install(|| model.forward_scheduled(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true), &lora))?;
    let top: Vec<Vec<(TokenId, f32)>> = (0..logits.len()).map(|i| top_k(logits.row(i), args.top)).collect();
    if args.json {
        println!("{}", serde_json::to_string(&Output { tokens, top })?);
        return Ok(());
    }
    let tokenizer = model.tokenizer();
    println!("{:>5} {:>7}  {:<16} top {} (id: logit)", "pos", "id", "token", args.top);
    for (pos, (&id, best)) in tokens.iter().zip(&top).enumerate() {
        let mut line = format!("{pos:>5} {id:>7}  {:<16}", format!("{:?}", piece(tokenizer, id)));
        for (t, v) in best {
            let _ = write!(line, " {t:>6}: {v:<9.5}");
        }
        println!("{}", line.trim_end());
    }
    Ok(())
}
