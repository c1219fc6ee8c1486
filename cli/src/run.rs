//! `engine-cli run`: generates a continuation of a prompt and streams it to stdout as it is
//! produced; everything else (token counts, speeds, why it stopped) goes to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use engine::generate::{FinishReason, GenerateParams, Generator, TokenConstraint, TokenEvent};
use engine::grammar::{Constraint, GrammarCompiler};
use engine::model::Model;
use engine::tokenizer::fim::{fim_prompt, FimOrder};

use crate::load::{default_ctx, load_model, resident_mib, thread_pool, DraftArgs, PromptArgs, RuntimeArgs};
use crate::sampling_args::SamplingArgs;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The GGUF model to run.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// The most tokens to generate (fewer when the model ends the text).
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Constrain the output to JSON valid under this JSON schema (a file).
    #[arg(long, conflicts_with = "json")]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to this GBNF grammar (a file, llama.cpp's syntax, from rule
    /// `root`; llguidance's Lark after a `%llguidance` line).
    #[arg(long, conflicts_with_all = ["json", "json_schema"])]
    pub grammar: Option<PathBuf>,
    /// Constrain the output to a JSON object (any).
    #[arg(long)]
    pub json: bool,
    /// Fill in the middle: --prompt is the code before a gap, this the code after it, and the
    /// output what goes between (a code model with FIM tokens).
    #[arg(long, requires = "prompt", conflicts_with_all = ["tokens", "images"])]
    pub suffix: Option<String>,
    /// With --suffix, the suffix first (`<fim_suf> suffix <fim_pre> prefix <fim_mid>`), the order
    /// some code models were trained on (llama.cpp's --spm-infill).
    #[arg(long, requires = "suffix")]
    pub spm_infill: bool,
    /// A vision projector GGUF (mmproj: idefics3 / SmolVLM or gemma3) for --image.
    #[arg(long, value_name = "GGUF", requires = "images")]
    pub mmproj: Option<PathBuf>,
    /// An image (PNG, JPEG, WEBP, GIF) read through --mmproj, placed at the prompt's next
    /// `<__media__>` (or before the text when it has none); repeat for several.
    #[arg(long = "image", value_name = "PATH", requires = "mmproj")]
    pub images: Vec<PathBuf>,
    /// A draft model with the same vocabulary for speculative decoding.
    #[arg(long, conflicts_with = "images")]
    pub draft: Option<PathBuf>,
    #[command(flatten)]
    pub drafting: DraftArgs,
    /// Speculation from the sequence's own tokens: `ngram` proposes the tokens that followed the
    /// latest earlier occurrence of the last 4, 3 or 2 tokens in the prompt and output so far
    /// (with --draft: first, the draft model drafting where the lookup finds nothing).
    #[arg(long, value_parser = ["ngram"], conflicts_with = "images")]
    pub spec: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let pool = thread_pool(args.runtime.threads)?;
    let draft_settings = args.drafting.settings()?;
    let mut model = load_model(&args.model, args.runtime.device)?;
    args.runtime.lora.load_into(&mut model)?;
    let resident = resident_mib();
    let prompt = match &args.suffix {
        Some(suffix) => {
            let order = FimOrder::suffix_first(args.spm_infill);
            fim_prompt(model.tokenizer(), args.prompt.text()?, suffix, order).map_err(|e| anyhow!("--suffix: {e}"))?
        }
        None if args.images.is_empty() => args.prompt.tokens(&model)?,
        None => Vec::new(),
    };
    let params = GenerateParams {
        sampling: args.sampling.params(model.tokenizer().n_vocab())?,
        max_tokens: args.n_predict,
        stop: args.sampling.stop.clone(),
        constraint: constraint(&model, &args)?,
        ..GenerateParams::default()
    };
    let needed = prompt.len() + args.n_predict;
    let n_ctx = match args.runtime.ctx_size {
        Some(c) if !args.images.is_empty() => c,
        None if !args.images.is_empty() => default_ctx(&model),
        Some(c) if c < needed => {
            bail!("--ctx-size {c} is too small: the prompt ({} tokens) and -n {} need {needed} positions", prompt.len(), args.n_predict)
        }
        Some(c) => c,
        None => default_ctx(&model).max(needed),
    };
    if model.config().n_ctx_train > 0 && n_ctx > model.config().n_ctx_train {
        tracing::warn!("context {n_ctx} is longer than the {} tokens the model was trained on", model.config().n_ctx_train);
    }

    let seed = params.sampling.seed;
    let draft = args.draft.as_deref().map(|p| args.drafting.load_draft(p, args.runtime.device)).transpose()?;
    let mut kv = model.new_kv_cache(args.runtime.kv.types(), n_ctx);
    let prompt = match &args.mmproj {
        Some(mmproj) => {
            pool.install(|| crate::images::prefill(&model, &mut kv, mmproj, &args.images, args.prompt.text()?, args.runtime.device))?
        }
        None => prompt,
    };
    eprintln!(
        "prompt: {} tokens, context {n_ctx}, KV cache {}, {} threads{}",
        prompt.len(),
        args.runtime.kv.types(),
        pool.current_num_threads(),
        resident.map_or(String::new(), |m| format!(", {m} MiB resident after loading"))
    );

    let mut draft_kv = draft.as_ref().map(|d| d.new_kv_cache(args.runtime.kv.types(), n_ctx));
    let start = Instant::now();
    let mut first_token: Option<Instant> = None;
    let mut out = std::io::stdout();
    let outcome = pool.install(|| -> anyhow::Result<_> {
        let mut generator = Generator::new(&model, &mut kv, 0, &prompt, params)?;
        if let (Some(d), Some(dkv)) = (draft.as_ref(), draft_kv.as_mut()) {
            generator = generator.with_draft(d, dkv, draft_settings)?;
        }
        if args.spec.is_some() {
            generator = generator.with_ngram(args.drafting.ngram())?;
        }
        let mut finish = None;
        for event in generator.by_ref() {
            let TokenEvent { text, finish: f, .. } = event?;
            first_token.get_or_insert_with(Instant::now);
            // flushed per token so that the text appears as it is generated
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                // a reader that stopped reading (`| head`) is not an error
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(None);
                }
                return Err(anyhow::Error::new(e).context("writing to standard output"));
            }
            finish = f;
        }
        Ok(Some((generator.usage(), finish)))
    });
    let end = Instant::now();
    // the text on stdout is exactly the continuation; the line break goes to the terminal
    eprintln!();
    let Some((usage, finish)) = outcome? else { return Ok(()) };
    report(&args, seed, usage, finish, start, first_token.unwrap_or(end), end);
    Ok(())
}

/// The output constraint `--json-schema`, `--json` or `--grammar` asks for, compiled for this
/// model.
fn constraint(model: &Model, args: &RunArgs) -> anyhow::Result<Option<Box<dyn TokenConstraint>>> {
    if let Some(path) = &args.grammar {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let matcher = GrammarCompiler::new(model.tokenizer())?.compile(&Constraint::Grammar(text));
        return Ok(Some(Box::new(matcher.with_context(|| format!("the grammar in {}", path.display()))?)));
    }
    let c = match (&args.json_schema, args.json) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let schema = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
            Constraint::JsonSchema(schema)
        }
        (None, true) => Constraint::JsonObject,
        (None, false) => return Ok(None),
    };
    let compiler = GrammarCompiler::new(model.tokenizer())?;
    let matcher = compiler.compile(&c).with_context(|| match &args.json_schema {
        Some(p) => format!("the JSON schema in {}", p.display()),
        None => "--json".to_string(),
    })?;
    Ok(Some(Box::new(matcher)))
}

/// Counts and speeds, to stderr.
#[allow(clippy::too_many_arguments)]
fn report(
    args: &RunArgs,
    seed: u64,
    usage: engine::generate::Usage,
    finish: Option<FinishReason>,
    start: Instant,
    prefill_end: Instant,
    end: Instant,
) {
    let prefill = prefill_end - start;
    let evaluated = usage.prompt_tokens - usage.cached_tokens;
    eprintln!(
        "prompt eval: {evaluated} tokens in {:.2} ms ({:.1} tokens/s)",
        prefill.as_secs_f64() * 1e3,
        evaluated as f64 / prefill.as_secs_f64()
    );
    let n = usage.completion_tokens;
    let why = match finish {
        Some(FinishReason::Length) => format!("-n {} (finish reason length)", args.n_predict),
        Some(r) => format!("finish reason {}", r.as_str()),
        None => "no output".into(),
    };
    let decode = (end - prefill_end).as_secs_f64();
    // the first token came with the prompt; the others took the decode time
    if n > 1 && decode > 0.0 {
        eprintln!("generation: {n} tokens in {:.2} ms ({:.1} tokens/s), stopped at {why}", decode * 1e3, (n - 1) as f64 / decode);
    } else {
        eprintln!("generation: {n} tokens, stopped at {why}");
    }
    if args.sampling.temp > 0.0 {
        eprintln!("sampling: temperature {}, seed {seed}", args.sampling.temp);
    }
    if args.draft.is_some() || args.spec.is_some() {
        let rate = if usage.drafted_tokens > 0 { usage.accepted_tokens as f64 / usage.drafted_tokens as f64 } else { 0.0 };
        eprintln!("draft: {} proposed, {} accepted ({:.1}%)", usage.drafted_tokens, usage.accepted_tokens, rate * 100.0);
    }
}
