//! `engine-cli perplexity`: a model's perplexity over a text file, as llama.cpp's
//! `llama-perplexity` measures it, and with `--kl-against TYPE` the KL divergence of this run's
//! token distributions from a run whose KV cache is of `TYPE` (what a quantized cache costs).

use std::path::PathBuf;

use anyhow::{bail, Context};
use engine::backend::Device;
use engine::kv_cache::KvType;
use engine::perplexity::{chunk_logits, chunks, first_scored, Scores};
use serde::Serialize;

use crate::load::{load_model, parse_device, parse_kv_type, parse_positive, thread_pool, KvCacheArgs, LoraArgs};

#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// The GGUF model to measure.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The text to score (tokenized whole, BOS added where the model asks for it).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: PathBuf,
    /// Tokens per chunk; the second half of each chunk is scored.
    #[arg(long, short = 'c', default_value_t = 512, value_parser = parse_positive)]
    pub ctx_size: usize,
    /// Score at most this many chunks [default: every whole chunk of the text].
    #[arg(long, value_parser = parse_positive)]
    pub chunks: Option<usize>,
    #[command(flatten)]
    pub kv: KvCacheArgs,
    /// Also run every chunk with keys and values of TYPE, and report the mean KL divergence of
    /// this run's next-token distributions from that run's, and how often both rank the same
    /// token first.
    #[arg(long, value_name = "TYPE", value_parser = parse_kv_type)]
    pub kl_against: Option<KvType>,
    /// Print one JSON object instead of the lines of text.
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

#[derive(Serialize)]
struct Output {
    kv_types: String,
    n_ctx: usize,
    chunks: usize,
    tokens_scored: usize,
    perplexity: f64,
    perplexity_error: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    kl_against: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mean_kl: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mean_kl_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    same_top: Option<f64>,
}

pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    if args.ctx_size < 4 {
        bail!("--ctx-size {} is too small: a chunk needs at least 4 tokens", args.ctx_size);
    }
    let text = std::fs::read_to_string(&args.file).with_context(|| args.file.display().to_string())?;
    let pool = thread_pool(args.threads)?;
    let mut model = load_model(&args.model, args.device)?;
    args.lora.load_plain_into(&mut model, "`perplexity`")?;
    let tokens = model.tokenizer().encode(&text, true, false);
    let chunks = chunks(&model, &tokens, args.ctx_size, args.chunks);
    if chunks.is_empty() {
        bail!("{} gives {} tokens, less than one chunk of {} (--ctx-size)", args.file.display(), tokens.len(), args.ctx_size);
    }
    let types = args.kv.types();
    let base_types = args.kl_against.map(engine::kv_cache::KvTypes::from);
    let mut scores = Scores::default();
    for (i, chunk) in chunks.iter().enumerate() {
        let (logits, base) = pool.install(|| -> anyhow::Result<_> {
            let logits = chunk_logits(&model, types, chunk)?;
            let base = base_types.map(|b| chunk_logits(&model, b, chunk)).transpose()?;
            Ok((logits, base))
        })?;
        scores.add_chunk(chunk, &logits, base.as_ref());
        if !args.json {
            let (ppl, _) = scores.perplexity();
            eprintln!("chunk {}/{}: perplexity so far {ppl:.4}", i + 1, chunks.len());
        }
    }
    let (perplexity, perplexity_error) = scores.perplexity();
    let kl = scores.mean_kl();
    let out = Output {
        kv_types: types.to_string(),
        n_ctx: args.ctx_size,
        chunks: chunks.len(),
        tokens_scored: scores.tokens(),
        perplexity,
        perplexity_error,
        kl_against: args.kl_against.map(KvType::name),
        mean_kl: kl.map(|k| k.0),
        mean_kl_error: kl.map(|k| k.1),
        same_top: scores.same_top(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    println!(
        "KV cache {}: {} chunks of {} tokens, {} tokens scored (from position {} of each)",
        out.kv_types,
        out.chunks,
        out.n_ctx,
        out.tokens_scored,
        first_scored(args.ctx_size) + 1
    );
    println!("perplexity: {perplexity:.4} ± {perplexity_error:.4}");
    if let (Some(against), Some((kl, kl_error)), Some(same)) = (out.kl_against, kl, out.same_top) {
        println!("mean KL divergence from the {against} cache: {kl:.6} ± {kl_error:.6}");
        println!("same most likely token as the {against} cache: {:.2}%", 100.0 * same);
    }
    Ok(())
}
