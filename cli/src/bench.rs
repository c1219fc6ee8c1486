//! `engine-cli bench`: prompt-processing and generation speed, measured like llama-bench: `ppN`
//! is one batch of N tokens in a fresh cache, `tgN` is N single-token steps from an empty
//! cache, and `tgNxP` is P sequences generating N tokens each side by side (one batch of P
//! entries per step, as the server's continuous batching runs them; llama-batched-bench's
//! S_TG). Each test runs once untimed, then the tests take turns `-r` times (so a change in
//! the machine's speed touches them alike), and each reports tokens/s as mean ± sd.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use engine::backend::{Device, DeviceWork};
use engine::gguf::GgufFile;
use engine::kv_cache::{KvCache, KvTypes};
use engine::model::{BatchEntry, Model};
use engine::tokenizer::TokenId;
use serde::Serialize;

use crate::load::{load_model, parse_device, parse_positive, thread_pool, KvCacheArgs, LoraArgs};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The GGUF model to measure.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// Prompt tokens of the prompt-processing test (0 skips it).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Tokens of the generation test (0 skips it).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Tokens already in the cache when each test starts (filled untimed, as llama-bench's
    /// `-d`): the attention then reads that many positions more per token.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    pub n_depth: usize,
    /// Sequences generating side by side in the generation test, one test per value
    /// (comma-separated, e.g. `1,8`): tokens/s counts the tokens of all of them.
    #[arg(long = "parallel", value_delimiter = ',', default_value = "1", value_parser = parse_positive)]
    pub parallel: Vec<usize>,
    /// Timed repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5, value_parser = parse_positive)]
    pub repetitions: usize,
    /// Worker threads [default: all cores].
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
    /// Device: cpu, cuda or cuda:N (a build without CUDA refuses cuda with an error).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
    #[command(flatten)]
    pub lora: LoraArgs,
    #[command(flatten)]
    pub kv: KvCacheArgs,
    /// Print a JSON array of results (mean, sd and every sample) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One test's results; the field names are llama-bench's JSON names.
#[derive(Serialize)]
struct TestResult {
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    /// llama-bench's name of the backend: `CPU` or `CUDA`
    backends: &'static str,
    /// the device the model ran on: `cpu`, `cuda:N`
    device: String,
    n_threads: usize,
    /// llama-bench's names of the KV cache's key and value types
    type_k: &'static str,
    type_v: &'static str,
    test: String,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    n_parallel: usize,
    avg_ns: f64,
    stddev_ns: f64,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
    /// launches (a kernel issued on its own, or a step replayed as one graph) and transfers
    /// (uploads, downloads, copies, fills) per token of the timed runs: 0 on the CPU
    launches_per_token: f64,
    transfers_per_token: f64,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.n_prompt == 0 && args.n_gen == 0 {
        bail!("nothing to measure: -p and -n are both 0");
    }
    let pool = thread_pool(args.threads)?;
    let mut model = load_model(&args.model, args.device)?;
    args.lora.load_plain_into(&mut model, "`bench`")?;
    let n_threads = pool.current_num_threads();
    let file = model.file();
    let model_type = model_type(&model);
    let max_parallel = args.parallel.iter().copied().max().unwrap_or(1);
    let tokens = bench_tokens(model.config().n_vocab, args.n_depth + args.n_prompt.max(args.n_gen * max_parallel));
    let (depth, tokens) = tokens.split_at(args.n_depth);
    // llama-bench's names: `pp512 @ d4096`
    let at_depth = if args.n_depth > 0 { format!(" @ d{}", args.n_depth) } else { String::new() };
    // (name, prompt tokens, generated tokens per sequence, sequences)
    let mut tests: Vec<(String, usize, usize, usize)> = Vec::new();
    if args.n_prompt > 0 {
        tests.push((format!("pp{}{at_depth}", args.n_prompt), args.n_prompt, 0, 1));
    }
    if args.n_gen > 0 {
        // each value once, in the order given
        let mut parallel: Vec<usize> = Vec::new();
        for &p in &args.parallel {
            if !parallel.contains(&p) {
                parallel.push(p);
            }
        }
        for p in parallel {
            let name = if p == 1 { format!("tg{}{at_depth}", args.n_gen) } else { format!("tg{}x{p}{at_depth}", args.n_gen) };
            tests.push((name, 0, args.n_gen, p));
        }
    }
    let once = |&(_, n_prompt, n_gen, parallel): &(String, usize, usize, usize)| -> anyhow::Result<u64> {
        if n_prompt > 0 {
            prompt_once(&model, args.kv.types(), depth, &tokens[..n_prompt])
        } else {
            generate_once(&model, args.kv.types(), depth, &tokens[..n_gen * parallel], parallel)
        }
    };
    // the device work of each test's timed runs, summed
    let mut issued = vec![DeviceWork::default(); tests.len()];
    let samples = pool.install(|| -> anyhow::Result<Vec<Vec<u64>>> {
        for test in &tests {
            once(test)?; // warm-up: page in the weights, grow the allocator
        }
        let mut samples = vec![Vec::with_capacity(args.repetitions); tests.len()];
        for _ in 0..args.repetitions {
            for ((test, s), work) in tests.iter().zip(&mut samples).zip(&mut issued) {
                let before = DeviceWork::now();
                s.push(once(test)?);
                let done = DeviceWork::since(before);
                work.launches += done.launches;
                work.transfers += done.transfers;
            }
        }
        Ok(samples)
    })?;
    let mut results = Vec::new();
    if !args.json {
        println!(
            "| {:<30} | {:>10} | {:>10} | {:<7} | {:>7} | {:>10} | {:>20} |",
            "model", "size", "params", "backend", "threads", "test", "t/s"
        );
        println!("| {:-<30} | {:->9}: | {:->9}: | {:-<7} | {:->6}: | {:->9}: | {:->19}: |", "", "", "", "", "", "", "");
    }
    for (((test, n_prompt, n_gen, n_parallel), samples_ns), work) in tests.into_iter().zip(samples).zip(issued) {
        let n_tokens = (n_prompt + n_gen * n_parallel) as f64;
        let timed_tokens = n_tokens * args.repetitions as f64;
        let samples_ts: Vec<f64> = samples_ns.iter().map(|&ns| n_tokens * 1e9 / ns.max(1) as f64).collect();
        let ns: Vec<f64> = samples_ns.iter().map(|&v| v as f64).collect();
        let (avg_ns, stddev_ns) = mean_sd(&ns);
        let (avg_ts, stddev_ts) = mean_sd(&samples_ts);
        let r = TestResult {
            model_filename: args.model.display().to_string(),
            model_type: model_type.clone(),
            model_size: file.tensor_data_bytes(),
            model_n_params: file.n_parameters(),
            backends: match model.device() {
                Device::Cpu => "CPU",
                Device::Cuda(_) => "CUDA",
            },
            device: model.device().to_string(),
            n_threads,
            type_k: args.kv.types().key.name(),
            type_v: args.kv.types().value.name(),
            test,
            n_prompt,
            n_gen,
            n_depth: args.n_depth,
            n_parallel,
            avg_ns,
            stddev_ns,
            avg_ts,
            stddev_ts,
            samples_ns,
            samples_ts,
            launches_per_token: work.launches as f64 / timed_tokens,
            transfers_per_token: work.transfers as f64 / timed_tokens,
        };
        if !args.json {
            println!(
                "| {:<30} | {:>10} | {:>10} | {:<7} | {:>7} | {:>10} | {:>20} |",
                r.model_type,
                size(r.model_size),
                params(r.model_n_params),
                r.device,
                r.n_threads,
                r.test,
                format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts)
            );
        }
        results.push(r);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    Ok(())
}

/// A fresh cache of `n_ctx` positions whose sequence 0 holds `depth` (filled untimed, in
/// prompt-sized batches).
fn cache_at_depth(model: &Model, kv_types: KvTypes, depth: &[TokenId], n_ctx: usize) -> anyhow::Result<KvCache> {
    let mut kv = model.new_kv_cache(kv_types, n_ctx);
    for (i, chunk) in depth.chunks(512).enumerate() {
        model.forward(&mut kv, &BatchEntry::sequence(0, chunk, (i * 512) as u32, false))?;
    }
    Ok(kv)
}

/// Nanoseconds of one prefill batch of `tokens` (logits of the last one) in a fresh cache that
/// holds `depth` first.
fn prompt_once(model: &Model, kv_types: KvTypes, depth: &[TokenId], tokens: &[TokenId]) -> anyhow::Result<u64> {
    let mut kv = cache_at_depth(model, kv_types, depth, depth.len() + tokens.len())?;
    let start = Instant::now();
    let logits = model.forward(&mut kv, &BatchEntry::sequence(0, tokens, depth.len() as u32, false))?;
    let ns = start.elapsed().as_nanos() as u64;
    std::hint::black_box(logits);
    Ok(ns)
}

/// Nanoseconds of `parallel` sequences generating side by side after `depth` (each sequence a
/// fork of it; none when empty), sequence `s` feeding `tokens[s * n..(s + 1) * n]` (n =
/// `tokens.len() / parallel`): one step per position, a batch of one entry per sequence,
/// logits for each.
fn generate_once(model: &Model, kv_types: KvTypes, depth: &[TokenId], tokens: &[TokenId], parallel: usize) -> anyhow::Result<u64> {
    let n = tokens.len() / parallel;
    let mut kv = cache_at_depth(model, kv_types, depth, depth.len() + n)?;
    if !depth.is_empty() {
        for s in 1..parallel {
            kv.fork(0, s as u32)?;
        }
    }
    let start = Instant::now();
    for pos in 0..n {
        let at = (depth.len() + pos) as u32;
        let batch: Vec<BatchEntry> =
            (0..parallel).map(|s| BatchEntry { seq: s as u32, token: tokens[s * n + pos], pos: at, logits: true }).collect();
        let logits = model.forward(&mut kv, &batch)?;
        std::hint::black_box(logits);
    }
    Ok(start.elapsed().as_nanos() as u64)
}

/// `n` token ids spread over the vocabulary by a fixed pseudo-random sequence: every run
/// measures the same work, and the ids are not one repeated token.
fn bench_tokens(n_vocab: usize, n: usize) -> Vec<TokenId> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n_vocab.max(1) as u64) as TokenId
        })
        .collect()
}

/// Mean and sample standard deviation (0 for a single sample), as llama-bench reports them.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// "llama Q4_K - Medium": the architecture and the file type as llama.cpp names it
/// (`general.file_type`), else the type holding most of the weight bytes.
fn model_type(model: &Model) -> String {
    let file = model.file();
    let ty = file.get_u64("general.file_type").and_then(file_type_name).unwrap_or_else(|| main_type(file));
    format!("{} {ty}", model.config().arch).trim_end().to_string()
}

/// llama.cpp's names of the common `general.file_type` values.
fn file_type_name(ftype: u64) -> Option<&'static str> {
    Some(match ftype {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        21 => "Q2_K - Small",
        32 => "BF16",
        _ => return None,
    })
}

fn main_type(file: &GgufFile) -> &'static str {
    let mut bytes: Vec<(&'static str, u64)> = Vec::new();
    for t in file.tensors() {
        match bytes.iter_mut().find(|(name, _)| *name == t.ty.name()) {
            Some((_, b)) => *b += t.n_bytes,
            None => bytes.push((t.ty.name(), t.n_bytes)),
        }
    }
    bytes.iter().max_by_key(|(_, b)| *b).map_or("", |(name, _)| name)
}

fn size(bytes: u64) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.2} GiB", b / GIB)
    } else {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    }
}

fn params(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else {
        format!("{:.2} K", n / 1e3)
    }
}
