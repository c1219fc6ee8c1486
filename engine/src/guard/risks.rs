//! The guard's vocabulary and request checks (guard.md §1-§3): the 13 risk categories (API
//! names, the models' native ids, the definition each format sends), the three prompt formats and
//! how a model's format is detected, and the validation of a request with the contract's exact
//! error messages.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::definitions::{bank_3_0, bank_3_2, criteria_3_3};
use super::error::GuardError;

/// A risk category. The declaration order is the contract's category order (guard.md §1), which
/// also breaks ties between verdicts (`Ord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Risk {
    Evasiveness,
    Harm,
    HarmEngagement,
    Jailbreaking,
    Profanity,
    SexualContent,
    SocialBias,
    UnethicalBehavior,
    Violence,
    AnswerRelevance,
    ContextRelevance,
    Groundedness,
    FunctionCallHallucination,
}

impl serde::Serialize for Risk {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The three groups of guard.md §1; they decide which input fields a risk needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RiskGroup {
    Harm,
    Rag,
    FunctionCalling,
}

/// Which message a prompt asks the model to judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    User,
    Assistant,
}

impl Risk {
    /// All 13, in category order.
    pub const ALL: [Risk; 13] = [
        Risk::Evasiveness,
        Risk::Harm,
        Risk::HarmEngagement,
        Risk::Jailbreaking,
        Risk::Profanity,
        Risk::SexualContent,
        Risk::SocialBias,
        Risk::UnethicalBehavior,
        Risk::Violence,
        Risk::AnswerRelevance,
        Risk::ContextRelevance,
        Risk::Groundedness,
        Risk::FunctionCallHallucination,
    ];

    /// The 9 harm categories: the default when a request names no risks, and what a scan runs.
    pub const HARM: [Risk; 9] = [
        Risk::Evasiveness,
        Risk::Harm,
        Risk::HarmEngagement,
        Risk::Jailbreaking,
        Risk::Profanity,
        Risk::SexualContent,
        Risk::SocialBias,
        Risk::UnethicalBehavior,
        Risk::Violence,
    ];

    /// The API name (guard.md §1).
    pub fn name(self) -> &'static str {
        match self {
            Risk::Evasiveness => "evasiveness",
            Risk::Harm => "harm",
            Risk::HarmEngagement => "harm_engagement",
            Risk::Jailbreaking => "jailbreaking",
            Risk::Profanity => "profanity",
            Risk::SexualContent => "sexual_content",
            Risk::SocialBias => "social_bias",
            Risk::UnethicalBehavior => "unethical_behavior",
            Risk::Violence => "violence",
            Risk::AnswerRelevance => "answer_relevance",
            Risk::ContextRelevance => "context_relevance",
            Risk::Groundedness => "groundedness",
            Risk::FunctionCallHallucination => "function_call_hallucination",
        }
    }

    /// The risk with this exact API name (no aliases: the models' native spellings such as
    /// `jailbreak` are not API names).
    pub fn from_name(name: &str) -> Option<Risk> {
        Risk::ALL.into_iter().find(|r| r.name() == name)
    }

    pub fn group(self) -> RiskGroup {
        match self {
            Risk::AnswerRelevance | Risk::ContextRelevance | Risk::Groundedness => RiskGroup::Rag,
            Risk::FunctionCallHallucination => RiskGroup::FunctionCalling,
            _ => RiskGroup::Harm,
        }
    }

    /// The id the models know the risk by (`risk_name` in 3.0/3.2, `criteria_id` in 3.3); the
    /// same in every format (guardian-formats.md §6).
    pub fn native_id(self) -> &'static str {
        match self {
            Risk::Jailbreaking => "jailbreak",
            Risk::FunctionCallHallucination => "function_call",
            other => other.name(),
        }
    }

    /// Whether the format's own bank has this risk; 3.0 lacks harm_engagement, evasiveness and
    /// function_call, which go to a 3.0 model as custom definitions.
    pub fn is_native(self, format: GuardFormat) -> bool {
        match format {
            GuardFormat::V3_0 => bank_3_0(self.native_id()).is_some(),
            GuardFormat::V3_2 | GuardFormat::V3_3 => true,
        }
    }

    /// The message a prompt for this risk judges (guard.md §2): the assistant message when there
    /// is one for the harm risks, the user message for context_relevance (judging the context
    /// against it), the assistant message for the other RAG risks and function calls.
    pub fn judged(self, has_assistant: bool) -> Judged {
        match self {
            Risk::ContextRelevance => Judged::User,
            Risk::AnswerRelevance | Risk::Groundedness | Risk::FunctionCallHallucination => Judged::Assistant,
            _ if has_assistant => Judged::Assistant,
            _ => Judged::User,
        }
    }

    /// The definition text a prompt of `format` carries for this risk when `judged` is judged:
    /// the 3.0 bank text (its RAG `default` text for RAG risks; the 3.2 text sent as a custom
    /// definition where 3.0 has none), the 3.2 bank text, or the 3.3 criteria. `None` where the
    /// format has no text for that role (e.g. 3.2 groundedness judging a user message).
    pub fn definition(self, format: GuardFormat, judged: Judged) -> Option<&'static str> {
        let id = self.native_id();
        match format {
            GuardFormat::V3_0 => match bank_3_0(id) {
                Some(b) if self.group() == RiskGroup::Rag => b.default,
                Some(b) => match judged {
                    Judged::User => b.prompt,
                    Judged::Assistant => b.response,
                },
                None => Risk::definition(self, GuardFormat::V3_2, judged),
            },
            GuardFormat::V3_2 => bank_3_2(id).and_then(|b| match judged {
                Judged::User => b.user,
                Judged::Assistant => b.assistant,
            }),
            GuardFormat::V3_3 => criteria_3_3(id),
        }
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Risk {
    type Err = GuardError;

    fn from_str(s: &str) -> Result<Risk, GuardError> {
        Risk::from_name(s).ok_or_else(|| GuardError::InvalidRisk(s.to_string()))
    }
}

/// A Granite Guardian prompt format (and with it the decoding rules of guard.md §4).
/// 3.1 models use format 3.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardFormat {
    V3_0,
    V3_2,
    V3_3,
}

impl GuardFormat {
    pub const ALL: [GuardFormat; 3] = [GuardFormat::V3_0, GuardFormat::V3_2, GuardFormat::V3_3];

    pub fn as_str(self) -> &'static str {
        match self {
            GuardFormat::V3_0 => "3.0",
            GuardFormat::V3_2 => "3.2",
            GuardFormat::V3_3 => "3.3",
        }
    }

    /// Exactly `3.0`, `3.2` or `3.3`; anything else is the contract's "unsupported format" error.
    pub fn parse(s: &str) -> Result<GuardFormat, GuardError> {
        GuardFormat::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| GuardError::UnsupportedFormat(s.to_string()))
    }
}

impl fmt::Display for GuardFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for GuardFormat {
    type Err = GuardError;

    fn from_str(s: &str) -> Result<GuardFormat, GuardError> {
        GuardFormat::parse(s)
    }
}

/// What a model file says about itself as a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detection {
    /// The format requests default to: the Guardian template's, else the version in the model's
    /// name for a Guardian model, else 3.0 (a generic chat model is read by the 3.0 rules).
    pub format: GuardFormat,
    /// A Granite Guardian model (by its template or its name), as opposed to a generic chat model.
    pub guardian: bool,
    /// The format of the file's own chat template when it is a Guardian template (it mentions
    /// `guardian_config`); `None` when the file has no such template and the built-in renderer
    /// (or, for a generic model, the 3.2 layout inside its chat template) is used.
    pub template_format: Option<GuardFormat>,
}

/// Detects the guard format from a GGUF's `tokenizer.chat_template` and its names
/// (`general.name`, `general.basename`, a file name...), per guard.md §3 and the markers of
/// `fixtures/guardian/README.md`: a Guardian template is 3.3 if it knows `judge`
/// (`judge_protocol`, the `judge` generation role), 3.2 if it knows `<start_of_conversation>` or
/// `harm_engagement` (the 3.2 template never contains `<confidence>`: that tag is only output),
/// else 3.0 (the `<start_of_turn>` layout of 3.0/3.1).
pub fn detect_format(chat_template: Option<&str>, names: &[&str]) -> Detection {
    let template_format = chat_template.filter(|t| is_guardian_template(t)).map(template_format);
    let named_guardian = names.iter().any(|n| n.to_ascii_lowercase().contains("guardian"));
    let format = match template_format {
        Some(f) => f,
        None if named_guardian => names.iter().find_map(|n| version_in_name(n)).unwrap_or(GuardFormat::V3_0),
        None => GuardFormat::V3_0,
    };
    Detection { format, guardian: template_format.is_some() || named_guardian, template_format }
}

/// A chat template written for Granite Guardian: it reads the `guardian_config` variable. (A
/// Guardian-named file may carry a plain Granite template, like the tiny 3.3 fixture; that one is
/// no use for guard prompts.)
pub fn is_guardian_template(source: &str) -> bool {
    source.contains("guardian_config")
}

fn template_format(source: &str) -> GuardFormat {
    if source.contains("judge") {
        GuardFormat::V3_3
    } else if source.contains("<start_of_conversation>") || source.contains("harm_engagement") {
        GuardFormat::V3_2
    } else {
        GuardFormat::V3_0
    }
}

/// The first `3.N` in a name such as `granite-guardian-3.2-5b` or `granite3.3-guardian`.
fn version_in_name(name: &str) -> Option<GuardFormat> {
    let b = name.as_bytes();
    b.windows(3).find_map(|w| match w {
        [b'3', b'.', b'0' | b'1'] => Some(GuardFormat::V3_0),
        [b'3', b'.', b'2'] => Some(GuardFormat::V3_2),
        [b'3', b'.', b'3'] => Some(GuardFormat::V3_3),
        _ => None,
    })
}

/// The text to evaluate (guard.md §2). Empty optional fields count as absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuardInput {
    pub user: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assistant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Our extension: the tool definitions available to the assistant (OpenAI tool objects, or
    /// IBM's bare `{name, description, parameters}`), for function_call_hallucination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<serde_json::Value>>,
    /// The conversation before the judged turn: `{role: user|assistant, content}` messages
    /// (`conversation::from_messages`), shown to the harm risks' prompts before it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<serde_json::Value>,
}

impl GuardInput {
    pub fn new(user: impl Into<String>) -> GuardInput {
        GuardInput { user: user.into(), ..GuardInput::default() }
    }

    pub fn with_assistant(mut self, assistant: impl Into<String>) -> GuardInput {
        self.assistant = Some(assistant.into());
        self
    }

    pub fn with_context(mut self, context: impl Into<String>) -> GuardInput {
        self.context = Some(context.into());
        self
    }

    pub fn with_tools(mut self, tools: Vec<serde_json::Value>) -> GuardInput {
        self.tools = Some(tools);
        self
    }

    /// The assistant message, `None` when absent or empty.
    pub fn assistant(&self) -> Option<&str> {
        self.assistant.as_deref().filter(|s| !s.is_empty())
    }

    /// The context, `None` when absent or empty.
    pub fn context(&self) -> Option<&str> {
        self.context.as_deref().filter(|s| !s.is_empty())
    }

    /// The tool list, `None` when absent or empty.
    pub fn tools(&self) -> Option<&[serde_json::Value]> {
        self.tools.as_deref().filter(|t| !t.is_empty())
    }
}

/// A request that passed [`check_request`]: known risks, a resolved format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRequest {
    /// In request order, duplicates dropped; the 9 harm risks when the request named none.
    pub risks: Vec<Risk>,
    pub format: GuardFormat,
    pub think: bool,
}

/// The risks a request names: unknown names are an error (the first one), duplicates are
/// dropped, none means the 9 harm risks.
pub fn parse_risks<S: AsRef<str>>(names: &[S]) -> Result<Vec<Risk>, GuardError> {
    if names.is_empty() {
        return Ok(Risk::HARM.to_vec());
    }
    let mut risks = Vec::with_capacity(names.len());
    for name in names {
        let risk: Risk = name.as_ref().parse()?;
        if !risks.contains(&risk) {
            risks.push(risk);
        }
    }
    Ok(risks)
}

/// Validates a request (guard.md §2). `format` is the request's own field; `fallback` is what it
/// resolves to without one (the evaluator's default format, else the detected one). The checks
/// run in the contract's table order: user, risk names, RAG inputs, format, think, assistant for
/// function calls; the first failure is returned.
pub fn check_request<S: AsRef<str>>(
    input: &GuardInput,
    risks: &[S],
    format: Option<&str>,
    think: bool,
    fallback: GuardFormat,
) -> Result<CheckedRequest, GuardError> {
    // A whitespace-only message gives the model nothing to judge.
    if input.user.trim().is_empty() {
        return Err(GuardError::UserRequired);
    }
    let risks = parse_risks(risks)?;
    let rag_ready = input.context().is_some() && input.assistant().is_some();
    if let Some(&r) = risks.iter().find(|r| r.group() == RiskGroup::Rag && !rag_ready) {
        return Err(GuardError::RagInputRequired(r));
    }
    let format = match format {
        Some(f) => GuardFormat::parse(f)?,
        None => fallback,
    };
    if think && format != GuardFormat::V3_3 {
        return Err(GuardError::ThinkRequiresFormat33);
    }
    if let Some(&r) = risks.iter().find(|r| r.group() == RiskGroup::FunctionCalling && input.assistant().is_none()) {
        return Err(GuardError::AssistantRequired(r));
    }
    Ok(CheckedRequest { risks, format, think })
}

#[cfg(test)]
#[path = "risks_tests.rs"]
mod tests;
