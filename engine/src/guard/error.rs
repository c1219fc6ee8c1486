//! `GuardError`: everything the guard can refuse or fail with. The request errors carry the exact
//! messages of the contract (guard.md §2), which the HTTP layer returns with status 400 and the
//! CLI prints as its one error line.

use crate::chat::ChatError;

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
                | GuardError::BatchEmpty
                | GuardError::BatchTooLarge { .. }
        )
    }

    /// How the OpenAI-style API reports this error: HTTP status, `type`, `param` and `code` of
    /// the `{"error": {...}}` body (the message is the error's display text). The caller's
    /// faults are 400 `invalid_request_error` naming the field. An answer the model gave but
    /// that does not follow the format is 422 `model_error`: the request was understood and the
    /// server worked, but this model cannot answer it in this format (typically a format it was
    /// not trained on), and decoding is greedy, so a retry gives the same answer. Engine faults
    /// are 500 `server_error`.
    pub fn api_error(&self) -> ApiError {
        let invalid = |param: &'static str| ApiError { status: 400, kind: "invalid_request_error", param: Some(param), code: None };
        let server = |code: &'static str| ApiError { status: 500, kind: "server_error", param: None, code: Some(code) };
        match self {
            GuardError::UserRequired => invalid("input.user"),
            GuardError::InvalidRisk(_) => invalid("risks"),
            GuardError::RagInputRequired(_) | GuardError::Prompt { .. } => invalid("input"),
            GuardError::AssistantRequired(_) => invalid("input.assistant"),
            GuardError::Messages(_) => invalid("input.messages"),
            GuardError::CustomRisk(_) => invalid("risk_definitions"),
            GuardError::UnsupportedFormat(_) => invalid("format"),
            GuardError::ThinkRequiresFormat33 => invalid("think"),
            GuardError::BatchEmpty | GuardError::BatchTooLarge { .. } => invalid("inputs"),
            GuardError::Unparseable { .. } => {
                ApiError { status: 422, kind: "model_error", param: None, code: Some("unparseable_model_output") }
            }
            GuardError::Template(_) => server("template_error"),
            GuardError::Cancelled => server("cancelled"),
            GuardError::Device(_) | GuardError::Model(_) | GuardError::Generate(_) => server("engine_error"),
        }
    }

    pub(crate) fn prompt(message: impl Into<String>) -> GuardError {
        GuardError::Prompt { message: message.into() }
    }
}

/// The HTTP status and the `type`, `param`, `code` fields of an OpenAI-shaped error body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
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
