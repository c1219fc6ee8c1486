//! `engine-cli run`: generates a continuation of a prompt and streams it to stdout as it is
//! produced; everything else (token counts, speeds, why it stopped) goes to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use engine::generate::{generate, GenerateOptions, StopReason};
use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::tokenizer::StreamDecoder;

use crate::load::{kv_type_name, load_model, parse_kv_type, parse_positive, thread_pool, tokenize_prompt};

/// The default context when none is given: the model's own, but no more than this.
const DEFAULT_CTX: usize = 4096;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The GGUF model to run.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The text to continue (BOS added when the model asks for it; control-token text such as
    /// "<start_of_turn>" is parsed).
    #[arg(long, short = 'p')]
    pub prompt: String,
    /// The most tokens to generate (fewer when the model ends the text).
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    /// Sampling temperature; only 0 (greedy decoding) is available in this build.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temp: f32,
    /// Context size in tokens [default: the model's, at most 4096, at least prompt + n].
    #[arg(long, short = 'c')]
    pub ctx_size: Option<usize>,
    /// KV cache element type.
    #[arg(long, default_value = "f16", value_parser = parse_kv_type)]
    pub kv_type: KvType,
    /// Worker threads [default: all cores].
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.temp != 0.0 {
        bail!("--temp {}: only greedy decoding (--temp 0) is available in this build", args.temp);
    }
    let pool = thread_pool(args.threads)?;
    let model = load_model(&args.model)?;
    let prompt = tokenize_prompt(&model, &args.prompt)?;
    let needed = prompt.len() + args.n_predict;
    let n_ctx = match args.ctx_size {
        Some(c) if c < needed => bail!(
            "--ctx-size {c} is too small: the prompt ({} tokens) and -n {} need {needed} positions",
            prompt.len(),
            args.n_predict
        ),
        Some(c) => c,
        None => {
            let trained = model.config().n_ctx_train;
            let default = if trained == 0 { DEFAULT_CTX } else { trained.min(DEFAULT_CTX) };
            default.max(needed)
        }
    };
    if model.config().n_ctx_train > 0 && n_ctx > model.config().n_ctx_train {
        tracing::warn!("context {n_ctx} is longer than the {} tokens the model was trained on", model.config().n_ctx_train);
    }
    eprintln!(
        "prompt: {} tokens, context {n_ctx}, KV cache {}, {} threads",
        prompt.len(),
        kv_type_name(args.kv_type),
        pool.current_num_threads()
    );

    let mut kv = model.new_kv_cache(args.kv_type, n_ctx);
    let opts = GenerateOptions { max_tokens: args.n_predict, stop_at_eog: true };
    let tokenizer = model.tokenizer();
    let mut decoder = StreamDecoder::new(false);
    // not a held lock: the callback runs on a pool thread, and a lock guard cannot move there
    let mut out = std::io::stdout();
    let mut write_error: Option<std::io::Error> = None;
    let start = Instant::now();
    let mut first_token: Option<Instant> = None;
    let result = pool.install(|| {
        generate(&model, &mut kv, 0, &prompt, opts, argmax, |id| {
            first_token.get_or_insert_with(Instant::now);
            let text = decoder.push(tokenizer, id);
            // flushed per token so that the text appears as it is generated
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => true,
                Err(e) => {
                    write_error = Some(e);
                    false
                }
            }
        })
    });
    let end = Instant::now();
    let tail = decoder.finish();
    if write_error.is_none() {
        if let Err(e) = out.write_all(tail.as_bytes()).and_then(|()| out.flush()) {
            write_error = Some(e);
        }
    }
    // the text on stdout is exactly the continuation; the line break goes to the terminal
    eprintln!();
    let generation = result?;
    match write_error {
        // a reader that stopped reading (`| head`) is not an error
        Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Some(e) => return Err(anyhow::Error::new(e).context("writing to standard output")),
        None => {}
    }

    let prefill_end = first_token.unwrap_or(end);
    let prefill = prefill_end - start;
    eprintln!(
        "prompt eval: {} tokens in {:.2} ms ({:.1} tokens/s)",
        prompt.len(),
        prefill.as_secs_f64() * 1e3,
        prompt.len() as f64 / prefill.as_secs_f64()
    );
    // every token but the last was fed back, and the end-of-generation token's step counts too
    let n = generation.tokens.len();
    let steps = if matches!(generation.stop, StopReason::Eog(_)) { n } else { n.saturating_sub(1) };
    let decode = end - prefill_end;
    let why = match generation.stop {
        StopReason::Eog(id) => format!("end-of-generation token {id}"),
        StopReason::MaxTokens => format!("-n {}", args.n_predict),
        StopReason::Callback => "output closed".into(),
    };
    if steps > 0 {
        eprintln!(
            "generation: {n} tokens, {steps} decode steps in {:.2} ms ({:.1} tokens/s), stopped at {why}",
            decode.as_secs_f64() * 1e3,
            steps as f64 / decode.as_secs_f64()
        );
    } else {
        eprintln!("generation: {n} tokens, stopped at {why}");
    }
    Ok(())
}
