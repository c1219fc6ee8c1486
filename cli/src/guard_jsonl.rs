//! `engine-cli guard --file DATA.jsonl --jsonl`: offline moderation of a data set. Every line
//! is checked before any is judged (a bad line is an error naming it, before hours of work);
//! the lines are then judged in batches and each result printed as one JSON line, in order, as
//! soon as its batch is done.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use engine::guard::evaluator::highest_risk;
use engine::guard::{conversation, Evaluator, GuardInput, GuardRequest};
use serde_json::{json, Value};

/// Lines judged together (one `evaluate_batch`).
const LINES_PER_BATCH: usize = 32;

/// One input of the data set, its 1-based line number, and its own risks when it names them.
pub struct Line {
    pub number: usize,
    pub input: GuardInput,
    pub risks: Option<Vec<String>>,
}

/// Reads and checks every non-blank line; `context` (the `--context` argument) applies to
/// lines without their own.
pub fn read(path: &Path, context: Option<&str>) -> anyhow::Result<Vec<Line>> {
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?))
    };
    let mut lines = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let number = i + 1;
        let at = |what: String| anyhow::anyhow!("{} line {number}: {what}", path.display());
        let line = line.map_err(|e| at(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| at(format!("not JSON ({e})")))?;
        let mut input = self::input(&value).map_err(at)?;
        if input.context.is_none() {
            input.context = context.map(str::to_string);
        }
        let risks = match value.get("risks") {
            None | Some(Value::Null) => None,
            Some(Value::Array(names)) => Some(
                names
                    .iter()
                    .map(|n| n.as_str().map(str::to_string).ok_or_else(|| at("risks must be an array of risk names".into())))
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => return Err(at("risks must be an array of risk names".into())),
        };
        lines.push(Line { number, input, risks });
    }
    if lines.is_empty() {
        anyhow::bail!("{}: no inputs", path.display());
    }
    Ok(lines)
}

/// An input as JSON: a string (the user message), a message list, or an object like the
/// endpoint's `input` (`{user, assistant?, context?}` or `{messages, context?}`; a line may add
/// `risks`, judged instead of `--risks`).
pub fn input(value: &Value) -> Result<GuardInput, String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        match value.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{key} must be a string")),
        }
    };
    let input = match value {
        Value::String(user) => GuardInput::new(user.clone()),
        Value::Array(messages) => conversation::from_messages(messages).map_err(|e| e.to_string())?,
        Value::Object(_) => {
            let mut input = match value.get("messages") {
                Some(Value::Array(messages)) => conversation::from_messages(messages).map_err(|e| e.to_string())?,
                Some(_) => return Err("messages must be an array of chat messages".into()),
                None => {
                    let mut input = GuardInput::new(text("user")?.unwrap_or_default());
                    input.assistant = text("assistant")?;
                    input
                }
            };
            input.context = text("context")?;
            input
        }
        _ => return Err("an input is a string, a message list, or an object with user (or messages)".into()),
    };
    if input.user.trim().is_empty() {
        return Err("input.user is required".into());
    }
    Ok(input)
}

/// Judges every line, printing `{line, flagged, verdicts, ...}` per line; `Ok(true)` when any
/// line was flagged. `audit` (model, format, policy) is repeated on every line, so that the
/// lines of several runs can be told apart.
pub fn judge(evaluator: &Evaluator, lines: &[Line], template: &GuardRequest, scan: bool, audit: &Value) -> anyhow::Result<bool> {
    let risks = &template.risks;
    let start = Instant::now();
    let mut flagged_lines = 0;
    let stdout = std::io::stdout();
    for chunk in lines.chunks(LINES_PER_BATCH) {
        // each line with the risks it asks for, all of the chunk's lines in one evaluation
        let requests: Vec<GuardRequest> = chunk
            .iter()
            .map(|line| GuardRequest {
                risks: line.risks.clone().unwrap_or_else(|| risks.to_vec()),
                ..template.with_input(line.input.clone())
            })
            .collect();
        let results = evaluator.evaluate_batch(&requests).map_err(|e| {
            // the line at fault when its request is refused, else the chunk's
            match chunk.iter().zip(&requests).find_map(|(line, r)| evaluator.prompts(r).err().map(|e| (line.number, e))) {
                Some((number, e)) => anyhow::anyhow!(e).context(format!("line {number}")),
                None => anyhow::anyhow!(e).context(format!("lines {}-{}", chunk[0].number, chunk[chunk.len() - 1].number)),
            }
        })?;
        let mut out = stdout.lock();
        for (line, item) in chunk.iter().zip(results) {
            flagged_lines += usize::from(item.flagged);
            let mut result = audit.clone();
            result["line"] = json!(line.number);
            result["flagged"] = json!(item.flagged);
            if scan {
                result["highest_risk"] = json!(highest_risk(&item.verdicts));
            }
            result["verdicts"] = json!(item.verdicts);
            if !template.thresholds.is_empty() {
                result["thresholds"] = json!(template.thresholds);
            }
            writeln!(out, "{result}")?;
        }
        out.flush()?;
    }
    eprintln!("{} lines, {flagged_lines} flagged, in {:.1} s", lines.len(), start.elapsed().as_secs_f64());
    Ok(flagged_lines > 0)
}
