//! `engine-cli guard`: judges a text (and optionally a response and a context) for risks with a
//! Granite Guardian model, or any chat model through the generic path. Prints one line per risk
//! and the overall result, or with `--json` the object the HTTP endpoint returns (for an error,
//! its OpenAI-shaped error body, besides the error line on stderr). Exit code 0 when nothing is
//! flagged, 1 when something is, 2 on error.

use std::path::PathBuf;
use std::time::Instant;

use engine::backend::Device;
use engine::guard::error::ApiError;
use engine::guard::evaluator::highest_risk;
use engine::guard::{Evaluator, EvaluatorOptions, GuardError, GuardFormat, GuardInput, GuardRequest, Thresholds, Verdict};
use serde_json::json;

use crate::load::{parse_device, parse_positive, text_or_file, thread_pool};

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 when nothing is flagged, 1 when a risk is flagged, 2 on error.")]
pub struct GuardArgs {
    /// The guard model: a Granite Guardian 3.0 / 3.2 / 3.3 GGUF, or any chat model.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The user message to judge.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub input: Option<String>,
    /// Read the user message from a file (`-` for standard input).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// The assistant's response to judge (with the user message as its context).
    #[arg(long)]
    pub response: Option<String>,
    /// A context document (RAG risks: groundedness, context_relevance, answer_relevance).
    #[arg(long)]
    pub context: Option<String>,
    /// Risks to judge, comma-separated [default: the 9 harm risks].
    #[arg(long, value_delimiter = ',', conflicts_with = "scan")]
    pub risks: Vec<String>,
    /// Judge the 9 harm risks and report the highest one.
    #[arg(long)]
    pub scan: bool,
    /// Print the HTTP endpoint's JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Device: cpu, cuda or cuda:N (a build without CUDA refuses cuda with an error).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
    /// Prompt format 3.0, 3.2 or 3.3 [default: detected from the model].
    #[arg(long)]
    pub format: Option<String>,
    /// Let a 3.3 model reason before its verdict (shown as the reasoning).
    #[arg(long)]
    pub think: bool,
    /// Worker threads [default: all cores].
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
    /// Print the prompts the model would judge (one JSON object per line: `risk`, `prompt`)
    /// instead of judging them: to inspect a template, or to send the same prompts to another
    /// server.
    #[arg(long)]
    pub print_prompts: bool,
    /// `RISK=P` (repeatable): RISK is unsafe exactly when its probability reaches P (0 to 1),
    /// whatever the model's label; as the endpoints' `thresholds`.
    #[arg(long = "threshold", value_name = "RISK=P")]
    pub thresholds: Vec<String>,
}

/// The `--threshold RISK=P` arguments, checked as the endpoints check `thresholds`.
fn thresholds(args: &[String]) -> anyhow::Result<Thresholds> {
    let mut pairs = Vec::with_capacity(args.len());
    for a in args {
        let (risk, p) = a.split_once('=').ok_or_else(|| anyhow::anyhow!("--threshold {a}: expected RISK=P"))?;
        let p: f64 = p.trim().parse().map_err(|_| anyhow::anyhow!("--threshold {a}: P must be a number from 0 to 1"))?;
        pairs.push((risk.trim().to_string(), p));
    }
    Thresholds::parse(pairs).map_err(|e| anyhow::anyhow!("--threshold: {e}"))
}

/// Runs the evaluation; `Ok(true)` when something was flagged.
pub fn run(args: GuardArgs) -> anyhow::Result<bool> {
    let json = args.json;
    let result = evaluate(args);
    if let (Err(e), true) = (&result, json) {
        println!("{}", serde_json::to_string_pretty(&error_body(e))?);
    }
    result
}

/// The body the HTTP endpoint would answer this error with. Guard errors keep their API type
/// (400 `invalid_request_error` naming the field, or 500 `server_error`); anything else here
/// (arguments, files, loading) is the caller's.
fn error_body(e: &anyhow::Error) -> serde_json::Value {
    let api = e.chain().find_map(|c| c.downcast_ref::<GuardError>()).map(GuardError::api_error);
    let ApiError { kind, param, code, .. } =
        api.unwrap_or(ApiError { status: 400, kind: "invalid_request_error", param: None, code: None });
    json!({"error": {"message": format!("{e:#}"), "type": kind, "param": param, "code": code}})
}

fn evaluate(args: GuardArgs) -> anyhow::Result<bool> {
    let pool = thread_pool(args.threads)?;
    let limits = thresholds(&args.thresholds)?;
    let Some(user) = text_or_file(args.input.as_deref(), args.file.as_deref())? else { anyhow::bail!("--input or --file is required") };
    if let Some(f) = &args.format {
        GuardFormat::parse(f)?;
    }
    let mut input = GuardInput::new(user);
    input.assistant = args.response.clone();
    input.context = args.context.clone();
    let options = EvaluatorOptions { device: args.device, ..EvaluatorOptions::default() };
    let evaluator = Evaluator::new(&args.model, options).map_err(|e| anyhow::anyhow!(e).context(args.model.display().to_string()))?;
    let model_id = args.model.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let start = Instant::now();
    let request = GuardRequest { input, risks: args.risks.clone(), format: args.format.clone(), think: args.think };
    if args.print_prompts {
        for p in evaluator.prompts(&request)? {
            println!("{}", json!({"risk": p.risk.name(), "prompt": p.text}));
        }
        return Ok(false);
    }
    let (mut flagged, mut verdicts, mut highest) = pool.install(|| -> anyhow::Result<_> {
        if args.scan {
            let r = evaluator.scan_cancellable(&request.input, request.format.as_deref(), request.think, &Default::default())?;
            Ok((r.flagged, r.verdicts, r.highest_risk))
        } else {
            let r = evaluator.evaluate(&request)?;
            Ok((r.flagged, r.verdicts, None))
        }
    })?;
    if !limits.is_empty() {
        flagged = limits.apply(&mut verdicts);
        if args.scan {
            highest = highest_risk(&verdicts);
        }
    }
    let latency_ms = start.elapsed().as_secs_f64() * 1e3;
    if args.json {
        let mut out = json!({"model": model_id, "flagged": flagged, "verdicts": verdicts, "latency_ms": latency_ms});
        if !limits.is_empty() {
            out["thresholds"] = json!(limits);
        }
        if let Some(h) = highest {
            out["highest_risk"] = json!(h);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&verdicts);
        match highest {
            Some(h) => println!("result: UNSAFE (highest risk: {})", h.name()),
            None if flagged => println!("result: UNSAFE"),
            None => println!("result: SAFE"),
        }
        eprintln!("{} risks in {latency_ms:.0} ms", verdicts.len());
    }
    Ok(flagged)
}

fn print_table(verdicts: &[Verdict]) {
    let width = verdicts.iter().map(|v| v.risk.name().len()).max().unwrap_or(4);
    for v in verdicts {
        let label = if v.is_unsafe { "UNSAFE" } else { "SAFE" };
        let prob = v.risk_probability.map_or(String::new(), |p| format!("  P(risk) {p:.3}"));
        println!("{:<width$}  {label:<6}  confidence {:.3}{prob}", v.risk.name(), v.confidence);
        if !v.reasoning.is_empty() {
            println!("{:<width$}  reasoning: {}", "", v.reasoning.replace('\n', " "));
        }
    }
}
