//! Guardrails on chat completions: a request's `guard` field (or the server's `--guardrails`)
//! has the guard model judge the conversation's last user turn before anything is generated
//! (flagged: a 400 with code `content_filter` and the verdicts, no token generated), and the
//! reply as it is generated: every `every` tokens, the new tokens with the `context` tokens
//! before them (a streamed reply), or the whole reply (a plain one). A flagged reply ends with
//! `finish_reason: "content_filter"` and the verdicts. With `stream_first` (the default) tokens
//! are sent as they come and the stream is cut after the check that flags them; without it,
//! tokens are held until the check of their window passes. The checks run as jobs of the guard
//! model's engine thread (through its queue, with other clients' guard requests) while the chat
//! model keeps decoding on its own.

use std::sync::Arc;

use engine::guard::{conversation, GuardInput, GuardRequest, Risk, RiskGroup};
use serde_json::{json, Value};

use crate::audit::{self, Applied};
use crate::error::ApiError;
use crate::registry::ModelEntry;
use crate::requests::guard::GuardrailsField;
use crate::routes::guard::{applied, format_label};
use crate::AppState;

/// Output tokens per check when a request names no `every`.
pub const DEFAULT_EVERY: usize = 200;
/// Tokens before each window shown with it when a request names no `context`.
pub const DEFAULT_CONTEXT: usize = 50;

/// Which sides the server guards for every chat completion (`--guardrails`); a request's own
/// `guard` field adds to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerGuardrails {
    pub input: bool,
    pub output: bool,
}

/// A chat request's guardrails, checked.
pub struct Guardrails {
    pub guard: Arc<ModelEntry>,
    pub input: bool,
    pub output: bool,
    /// Risk names; empty: the 9 harm risks.
    pub risks: Vec<String>,
    pub applied: Applied,
    pub every: usize,
    pub context: usize,
    pub stream_first: bool,
}

/// The request's `guard` field merged with the server's guardrails; `None` when neither asks
/// for any.
pub fn parse(state: &AppState, field: Option<&GuardrailsField>) -> Result<Option<Arc<Guardrails>>, ApiError> {
    let server = state.guardrails;
    let bad = |m: &str| ApiError::invalid_param("guard", m);
    let none = GuardrailsField::default();
    let field = match field {
        None if !server.input && !server.output => return Ok(None),
        None => &none,
        Some(f) => f,
    };
    let count = |key: &str, value: Option<u64>, default: usize, min: u64, max: u64| -> Result<usize, ApiError> {
        match value {
            None => Ok(default),
            Some(n) if (min..=max).contains(&n) => Ok(n as usize),
            Some(_) => Err(bad(&format!("guard.{key} must be an integer from {min} to {max}"))),
        }
    };
    // a side left out is guarded unless the other side is named true: `{}` guards both,
    // `{"output": true}` only the output, `{"input": false}` only the output; the server's
    // sides always stay on
    let input = field.input.unwrap_or(field.output != Some(true)) || server.input;
    let output = field.output.unwrap_or(field.input != Some(true)) || server.output;
    if !input && !output {
        return Err(bad("guard needs input or output (or both) to be true"));
    }
    let risks = field
        .risks
        .iter()
        .flatten()
        .map(|name| match Risk::from_name(name).map(Risk::group) {
            Some(RiskGroup::Harm) => Ok(name.to_string()),
            // they judge a reply against documents or tools a chat request does not give
            Some(_) => Err(bad(&format!("{name} cannot guard a chat completion: only the 9 harm risks can"))),
            None => Err(bad(&format!("invalid risk category: {name}"))),
        })
        .collect::<Result<_, _>>()?;
    let guard = match &field.model {
        None => state.registry.guard(None, "guard")?,
        Some(id) => state.registry.guard(Some(id), "guard.model")?,
    };
    let applied = applied(state, &field.policy, &[])
        .map_err(|e| ApiError { param: Some(format!("guard.{}", e.param.as_deref().unwrap_or(""))), ..e })?;
    Ok(Some(Arc::new(Guardrails {
        guard,
        input,
        output,
        risks,
        applied,
        every: count("every", field.every, DEFAULT_EVERY, 1, 4096)?,
        context: count("context", field.context, DEFAULT_CONTEXT, 0, 1024)?,
        stream_first: field.stream_first.unwrap_or(true),
    })))
}

/// What the guard said of one text: `flagged`, the verdicts and the audit fields.
pub struct Judgement {
    pub flagged: bool,
    pub report: Value,
}

impl Guardrails {
    /// Judges `input` for the request's risks under its policy and thresholds.
    pub async fn judge(&self, state: &AppState, input: GuardInput, stage: &str) -> Result<Judgement, ApiError> {
        let start = std::time::Instant::now();
        state.metrics.guard_requests.inc();
        let request = GuardRequest { thresholds: self.applied.thresholds.clone(), ..GuardRequest::new(input, &self.risks) };
        let mut items = self.guard.guard_queue.evaluate(&self.guard.worker, vec![request]).await?;
        let item = items.pop().ok_or_else(|| ApiError::server("the guard returned no result"))?;
        let latency_ms = start.elapsed().as_secs_f64() * 1e3;
        state.metrics.guard_latency_ms.observe(latency_ms);
        state.metrics.record_verdicts(&item.verdicts, latency_ms);
        let mut report = audit::fields(&self.guard.id, self.guard.digest.as_ref(), &format_label(&self.guard, None), &self.applied);
        report.insert("stage".into(), json!(stage));
        report.insert("flagged".into(), json!(item.flagged));
        report.insert("verdicts".into(), json!(item.verdicts));
        Ok(Judgement { flagged: item.flagged, report: Value::Object(report) })
    }

    /// The input check: the conversation's last user turn (with the turns before it). Flagged:
    /// the 400 `content_filter` error, carrying the verdicts.
    pub async fn check_input(&self, state: &AppState, messages: &[Value]) -> Result<(), ApiError> {
        if !self.input {
            return Ok(());
        }
        let judgement = self.judge(state, user_turn(messages)?, "input").await?;
        if !judgement.flagged {
            return Ok(());
        }
        let risks: Vec<&str> = judgement.report["verdicts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["unsafe"] == true)
            .filter_map(|v| v["risk"].as_str())
            .collect();
        Err(ApiError::content_filter(format!("the input was flagged by the guard ({})", risks.join(", ")), judgement.report))
    }
}

/// The conversation up to its last user message, as the guard's input.
pub fn user_turn(messages: &[Value]) -> Result<GuardInput, ApiError> {
    let last_user = messages.iter().rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let upto = last_user.map_or(messages.len(), |i| i + 1);
    conversation::from_messages(&messages[..upto])
        .map_err(|e| ApiError::invalid_param("messages", format!("the guard cannot read the conversation: {e}")))
}

/// One choice's output as the guard sees it: the token texts so far and how many were judged.
pub struct OutputWatch {
    rails: Arc<Guardrails>,
    /// The conversation the reply answers (its last user turn and the turns before).
    turn: GuardInput,
    /// The assistant text the reply continues (a prefill; empty when none): the start of the
    /// turn the guard reads.
    continued: String,
    tokens: Vec<String>,
    judged: usize,
}

impl OutputWatch {
    pub fn new(rails: Arc<Guardrails>, turn: GuardInput, continued: String) -> OutputWatch {
        OutputWatch { rails, turn, continued, tokens: Vec::new(), judged: 0 }
    }

    /// Adds a generated token's text; true when a window is due for judging.
    pub fn push(&mut self, text: &str) -> bool {
        self.tokens.push(text.to_string());
        self.tokens.len() - self.judged >= self.rails.every
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.tokens.len()
    }

    /// Tokens generated since the last check.
    pub fn unjudged(&self) -> usize {
        self.tokens.len() - self.judged
    }

    pub fn stream_first(&self) -> bool {
        self.rails.stream_first
    }

    /// Judges the tokens since the last check, with up to `context` tokens before them, as the
    /// assistant's reply to the conversation (from the text it continues when the window reaches
    /// back to the reply's start).
    pub async fn judge_window(&mut self, state: &AppState) -> Result<Judgement, ApiError> {
        let from = self.judged.saturating_sub(self.rails.context);
        let opening = if from == 0 { self.continued.as_str() } else { "" };
        let window = opening.to_string() + &self.tokens[from..].concat();
        self.judged = self.tokens.len();
        self.judge_turn(state, window).await
    }

    /// Judges a whole reply (a response that is not streamed), after the text it continues.
    pub async fn judge_text(&self, state: &AppState, reply: String) -> Result<Judgement, ApiError> {
        self.judge_turn(state, self.continued.clone() + &reply).await
    }

    /// Judges `text` as the assistant's turn.
    async fn judge_turn(&self, state: &AppState, text: String) -> Result<Judgement, ApiError> {
        let mut input = self.turn.clone();
        input.assistant = Some(text);
        self.rails.judge(state, input, "output").await
    }
}
