//! `engine-cli guard`: judges a text (and optionally a response and a context) for risks with a
//! Granite Guardian model, or any chat model through the generic path. Prints one line per risk
//! and the overall result, or with `--json` the object the HTTP endpoint returns (for an error,
//! its OpenAI-shaped error body, besides the error line on stderr); a conversation with
//! `--messages`, a data set with `--file --jsonl` (`guard_jsonl`). Exit code 0 when nothing is
//! flagged, 1 when something is, 2 on error.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use engine::backend::Device;
use engine::guard::{
    CustomRisk, Evaluator, EvaluatorOptions, GenericPrompt, GuardError, GuardFamily, GuardFormat, GuardInput, GuardRequest, Policies,
    Thresholds, Verdict,
};
use serde_json::json;
use server::error::ApiError;

use crate::guard_jsonl as jsonl;
use crate::load::{load_model, parse_device, parse_positive, text_or_file, thread_pool, LoraArgs};

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 when nothing is flagged, 1 when a risk is flagged, 2 on error.")]
pub struct GuardArgs {
    /// The guard model: a Granite Guardian 3.0 / 3.2 / 3.3 GGUF, or any chat model.
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The user message to judge.
    #[arg(long, conflicts_with_all = ["file", "messages"], required_unless_present_any = ["file", "messages"])]
    pub input: Option<String>,
    /// Read the user message from a file (`-` for standard input); with --jsonl, one input per
    /// line.
    #[arg(long, short = 'f', conflicts_with = "messages")]
    pub file: Option<PathBuf>,
    /// A conversation to judge: a JSON file with an OpenAI chat message list (or an object with
    /// `messages`); the last user turn is judged, or the assistant's turn when it comes last.
    #[arg(long, value_name = "FILE.json", conflicts_with = "response")]
    pub messages: Option<PathBuf>,
    /// With --file: one input per line (a JSON string, or an object like the endpoint's `input`:
    /// `{user, assistant, context}` or `{messages}`), one JSON result per line on standard
    /// output; exit 1 if any line is flagged.
    #[arg(long, requires = "file", conflicts_with_all = ["format", "think", "print_prompts", "json"])]
    pub jsonl: bool,
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
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Prompt format 3.0, 3.2 or 3.3 of a Granite Guardian model, or the model's own family
    /// (llama-guard, shieldgemma, qwen3guard, gpt-oss-safeguard) [default: detected from the model].
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
    /// A policy preset from a policy file (as `serve --guard-policy`): `FILE:NAME`, or `FILE`
    /// for the file's default policy; --threshold replaces its thresholds risk by risk.
    #[arg(long, value_name = "FILE:NAME")]
    pub policy: Option<String>,
    /// How a chat model (not a Granite Guardian) is asked: `layout` (Granite Guardian 3.2's
    /// prompt in the model's template), `direct` (a plain yes/no question), `few-shot` (the
    /// question after two answered examples) or `question-first` (the question before the
    /// conversation: each risk's start is cached across inputs).
    #[arg(long, value_parser = parse_generic_prompt, default_value = "direct")]
    pub generic_prompt: GenericPrompt,
    /// The model's guard family, when its file does not say it: granite-guardian, llama-guard,
    /// shieldgemma, qwen3guard, gpt-oss-safeguard or generic (default: from the file's chat template and names).
    #[arg(long, value_parser = parse_family)]
    pub guard_family: Option<GuardFamily>,
    /// `NAME=DEFINITION` (repeatable): a custom risk, judged with --risks (alone when --risks is
    /// not given), as the endpoint's `risk_definitions`; --threshold may name it.
    #[arg(long = "risk-definition", value_name = "NAME=DEFINITION", conflicts_with_all = ["scan", "jsonl", "print_prompts"])]
    pub risk_definitions: Vec<String>,
}

/// The `--risk-definition NAME=DEFINITION` arguments, checked as the endpoint checks them.
fn custom_risks(args: &[String]) -> anyhow::Result<Vec<CustomRisk>> {
    args.iter()
        .map(|a| {
            let (name, def) = a.split_once('=').ok_or_else(|| anyhow::anyhow!("--risk-definition {a}: expected NAME=DEFINITION"))?;
            CustomRisk::new(name.trim(), def).map_err(|e| anyhow::anyhow!("--risk-definition: {e}"))
        })
        .collect()
}

pub fn parse_family(s: &str) -> Result<GuardFamily, String> {
    GuardFamily::parse(s)
        .ok_or_else(|| "expected granite-guardian, llama-guard, shieldgemma, qwen3guard, gpt-oss-safeguard or generic".to_string())
}

pub fn parse_generic_prompt(s: &str) -> Result<GenericPrompt, String> {
    GenericPrompt::parse(s).ok_or_else(|| "expected layout, direct, few-shot or question-first".to_string())
}

/// The policy (`--policy`) and the thresholds to judge by (`own`, the `--threshold` ones, over
/// the policy's).
fn applied(args: &GuardArgs, own: Thresholds) -> anyhow::Result<(Option<String>, Thresholds)> {
    let Some(spec) = &args.policy else { return Ok((None, own)) };
    let (file, name) = match spec.rsplit_once(':') {
        Some((file, name)) if !name.is_empty() && !name.contains('/') => (file, Some(name)),
        _ => (spec.as_str(), None),
    };
    let policies = Policies::load(Path::new(file))?;
    let policy =
        policies.select(name).map_err(|e| anyhow::anyhow!("--policy {spec}: {}", e.replace(" the server has", " the file has")))?;
    let policy = policy.ok_or_else(|| anyhow::anyhow!("--policy {spec}: the file has no default policy: name one as FILE:NAME"))?;
    Ok((Some(policy.name.clone()), policy.thresholds.overridden_by(&own)))
}

/// The `--threshold RISK=P` arguments, checked as the endpoints check `thresholds`: built-in
/// risks, and custom risks (`--risk-definition`).
fn thresholds(args: &[String], customs: &[CustomRisk]) -> anyhow::Result<Thresholds> {
    let mut pairs = Vec::with_capacity(args.len());
    for a in args {
        let (risk, p) = a.split_once('=').ok_or_else(|| anyhow::anyhow!("--threshold {a}: expected RISK=P"))?;
        let p: f64 = p.trim().parse().map_err(|_| anyhow::anyhow!("--threshold {a}: P must be a number from 0 to 1"))?;
        pairs.push((risk.trim().to_string(), p));
    }
    Thresholds::parse_with_custom(pairs, customs).map_err(|e| anyhow::anyhow!("--threshold: {e}"))
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
    let api = e.chain().find_map(|c| c.downcast_ref::<GuardError>()).map(ApiError::of_guard);
    let ApiError { kind, param, code, .. } = api.unwrap_or_else(|| ApiError::invalid(""));
    json!({"error": {"message": format!("{e:#}"), "type": kind, "param": param, "code": code}})
}

fn evaluate(args: GuardArgs) -> anyhow::Result<bool> {
    let pool = thread_pool(args.threads)?;
    let customs = custom_risks(&args.risk_definitions)?;
    let own = thresholds(&args.thresholds, &customs)?;
    let (policy, limits) = applied(&args, own)?;
    // a Granite Guardian format is checked before the model loads; a family's name by the
    // evaluator, which knows the model's family
    if let Some(f) = args.format.as_deref().filter(|f| GuardFamily::parse(f).is_none()) {
        GuardFormat::parse(f)?;
    }
    let lines = match (&args.file, args.jsonl) {
        (Some(file), true) => Some(jsonl::read(file, args.context.as_deref())?),
        _ => None,
    };
    let input = match (&lines, &args.messages) {
        (Some(_), _) => GuardInput::default(),
        (None, Some(path)) => {
            let mut input = messages_file(path)?;
            input.context = args.context.clone().or(input.context);
            input
        }
        (None, None) => {
            let Some(user) = text_or_file(args.input.as_deref(), args.file.as_deref())? else {
                anyhow::bail!("--input, --file or --messages is required")
            };
            let mut input = GuardInput::new(user);
            input.assistant = args.response.clone();
            input.context = args.context.clone();
            input
        }
    };
    let options = EvaluatorOptions {
        device: args.device,
        generic_prompt: args.generic_prompt,
        family: args.guard_family,
        ..EvaluatorOptions::default()
    };
    let mut model = load_model(&args.model, args.device)?;
    args.lora.load_into(&mut model)?;
    let evaluator = Evaluator::from_model(std::sync::Arc::new(model), options)
        .map_err(|e| anyhow::anyhow!(e).context(args.model.display().to_string()))?;
    let model_id = args.model.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let format = evaluator.format_label(args.format.as_deref());
    let audit = json!({"model": model_id, "format": format, "policy": policy});
    let start = Instant::now();
    // `--risk-definition` risks are judged after `--risks` without being named there
    let mut risks = args.risks.clone();
    if !risks.is_empty() {
        risks.extend(customs.iter().filter(|c| !args.risks.contains(&c.name)).map(|c| c.name.clone()));
    }
    let request =
        GuardRequest { input, risks, customs, format: args.format.clone(), think: args.think, thresholds: limits.clone(), lora: None };
    if let Some(lines) = lines {
        return pool.install(|| jsonl::judge(&evaluator, &lines, &request, args.scan, &audit));
    }
    if args.print_prompts {
        for p in evaluator.prompts(&request)? {
            println!("{}", json!({"risk": p.risk.name(), "prompt": p.text}));
        }
        return Ok(false);
    }
    let (flagged, verdicts, highest) = pool.install(|| -> anyhow::Result<_> {
        if args.scan {
            let r = evaluator.scan_cancellable(&request, &Default::default())?;
            Ok((r.flagged, r.verdicts, r.highest_risk))
        } else {
            let r = evaluator.evaluate(&request)?;
            Ok((r.flagged, r.verdicts, None))
        }
    })?;
    let latency_ms = start.elapsed().as_secs_f64() * 1e3;
    if args.json {
        let mut out = audit;
        out["flagged"] = json!(flagged);
        out["verdicts"] = json!(verdicts);
        out["latency_ms"] = json!(latency_ms);
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

/// `--messages FILE.json`: a message list, or an object with `messages` (and `context`).
fn messages_file(path: &Path) -> anyhow::Result<GuardInput> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    jsonl::input(&value).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// One line per verdict: risk, label, confidence, probability, reasoning.
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
