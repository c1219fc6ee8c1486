//! `GuardError`: everything the guard can refuse or fail with. The request errors carry the exact
//! messages of the contract (guard.md §2), which the HTTP layer returns with status 400 (the
//! server's `error.rs` says how each is reported) and the CLI prints as its one error line.

use crate::chat::ChatError;

use super::family::GuardFamily;
use super::risks::Risk;

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// `input.user` empty or missing.
    #[error("input.user is required")]
    UserRequired,
    /// A risk name that is not one of the 13 categories (the first bad one).
    #[error("invalid risk category: {0}")]
    InvalidRisk(String),
    /// A RAG risk without both `input.context` and `input.assistant`.
    #[error("risk {0} requires input.context and input.assistant")]
    RagInputRequired(Risk),
    /// `format` not one of 3.0, 3.2, 3.3 (the value as given).
    #[error("unsupported format \"{0}\" (must be 3.0, 3.2, or 3.3)")]
    UnsupportedFormat(String),
    /// `think` with a format other than 3.3.
    #[error("thinking mode is only supported with format 3.3")]
    ThinkRequiresFormat33,
    /// A risk that judges the assistant message (function_call_hallucination) without one.
    #[error("risk {0} requires input.assistant")]
    AssistantRequired(Risk),
    /// The prompt for these native inputs cannot be rendered: the model's Guardian template
    /// called `raise_exception(message)`, or the built-in renderer refused the same inputs
    /// (with the template's message where the template has one). The message is the bare text.
    #[error("{message}")]
    Prompt { message: String },
    /// The model's chat template failed otherwise (syntax, an undefined value, a type error).
    #[error("guard prompt template failed: {0}")]
    Template(ChatError),
    /// The model's answer for a risk does not follow its format (never read as "safe").
    #[error("cannot read the verdict for risk {risk} from the model output: {output:?}")]
    Unparseable { risk: String, output: String },
    /// `input.messages` that is not a conversation the guard can judge (the message says which
    /// message and why).
    #[error("{0}")]
    Messages(String),
    /// A custom risk whose name or definition is refused (the message says which and why).
    #[error("{0}")]
    CustomRisk(String),
    /// A risk that no category of the model's family stands for (README's taxonomy table).
    #[error("risk {risk} is not judged by a {family} model (it judges {})", judged.iter().map(|r| r.name()).collect::<Vec<_>>().join(", "))]
    RiskNotJudged { family: GuardFamily, risk: Risk, judged: Vec<Risk> },
    /// A `format` that is not the model family's.
    #[error("unsupported format \"{format}\" for a {family} model (must be {family})")]
    FamilyFormat { format: String, family: GuardFamily },
    /// A scan (the 9 harm risks) asked for risks of its own.
    #[error("a scan judges the 9 harm risks: leave risks out")]
    ScanRisks,
    /// A batch with no inputs.
    #[error("inputs is required")]
    BatchEmpty,
    /// A batch over the limit.
    #[error("inputs exceeds maximum batch size of {max}")]
    BatchTooLarge { max: usize },
    /// The caller cancelled the evaluation (a dropped HTTP request).
    #[error("the evaluation was cancelled")]
    Cancelled,
    /// The device option names no device this build can use.
    #[error("{0}")]
    Device(String),
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Generate(#[from] crate::generate::GenerateError),
}

impl GuardError {
    /// Whether the caller's request is at fault (HTTP 400), as opposed to the model or engine.
    pub fn is_invalid_request(&self) -> bool {
        matches!(
            self,
            GuardError::UserRequired
                | GuardError::InvalidRisk(_)
                | GuardError::RagInputRequired(_)
                | GuardError::UnsupportedFormat(_)
                | GuardError::ThinkRequiresFormat33
                | GuardError::AssistantRequired(_)
                | GuardError::Messages(_)
                | GuardError::CustomRisk(_)
                | GuardError::ScanRisks
                | GuardError::RiskNotJudged { .. }
                | GuardError::FamilyFormat { .. }
                | GuardError::BatchEmpty
                | GuardError::BatchTooLarge { .. }
        )
    }

    pub(crate) fn prompt(message: impl Into<String>) -> GuardError {
        GuardError::Prompt { message: message.into() }
    }
}

impl From<ChatError> for GuardError {
    /// A template's own refusal keeps its bare message; anything else stays a template failure.
    fn from(e: ChatError) -> GuardError {
        match e {
            ChatError::Raised(message) => GuardError::Prompt { message },
            other => GuardError::Template(other),
        }
    }
}
