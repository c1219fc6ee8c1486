//! `ApiError`: every refusal and failure of the server as the OpenAI error body
//! `{"error": {"message", "type", "param", "code"}}` with its HTTP status. Client mistakes are
//! 4xx (never 5xx, which the SDKs retry); deterministic server failures say so with
//! `x-should-retry: false`.

use engine::generate::GenerateError;
use engine::guard::GuardError;
use engine::serving::SeqError;
use hyper::StatusCode;
use serde_json::json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// For 405: the methods the route allows (sent as the `Allow` header).
    pub allow: Option<String>,
    /// For 400 `content_filter`: the guard's verdicts, sent as the error's `guard` field.
    pub guard: Option<Box<serde_json::Value>>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), kind, param: None, code: None, allow: None, guard: None }
    }

    /// 400 `context_length_exceeded`: the request needs more positions than there are.
    pub fn context_length_exceeded(param: Option<&str>, message: impl Into<String>) -> ApiError {
        let e = match param {
            Some(p) => ApiError::invalid_param(p, message),
            None => ApiError::invalid(message),
        };
        ApiError { code: Some("context_length_exceeded"), ..e }
    }

    /// 400: the request is malformed or a value is out of range.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the offending field, with code `invalid_value`.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError { param: Some(param.into()), code: Some("invalid_value"), ..ApiError::invalid(message) }
    }

    /// 400 for a field that is required and missing.
    pub fn missing(param: &str) -> ApiError {
        ApiError {
            param: Some(param.into()),
            code: Some("missing_required_parameter"),
            ..ApiError::invalid(format!("{param} is required"))
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", "invalid or missing API key")
        }
    }

    pub fn model_not_found(id: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("the model `{id}` does not exist or is not loaded"))
        }
    }

    /// 404 for an object the request names by id (a stored response).
    pub fn not_found(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            code: Some("not_found"),
            ..ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
        }
    }

    /// 408: the request's `timeout` passed before its first output token.
    pub fn timeout() -> ApiError {
        ApiError {
            code: Some("request_timeout"),
            ..ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout_error", "the request's timeout passed before its first token")
        }
    }

    /// 408: the request's body did not arrive in time.
    pub fn body_timeout(limit: std::time::Duration) -> ApiError {
        ApiError {
            code: Some("request_timeout"),
            ..ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout_error",
                format!("the request body did not arrive within {} s", limit.as_secs_f64()),
            )
        }
    }

    /// 409: the request clashes with what the server holds (a model id already loaded).
    pub fn conflict(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            code: Some("conflict"),
            ..ApiError::new(StatusCode::CONFLICT, "invalid_request_error", message)
        }
    }

    pub fn route_not_found(method: &hyper::Method, path: &str) -> ApiError {
        ApiError { code: Some("not_found"), ..ApiError::new(StatusCode::NOT_FOUND, "not_found_error", format!("no route {method} {path}")) }
    }

    /// A route this server serves only with what it lacks: the 404 says `why`.
    pub fn route_off(method: &hyper::Method, path: &str, why: &str) -> ApiError {
        ApiError { message: format!("no route {method} {path}: {why}"), ..ApiError::route_not_found(method, path) }
    }

    pub fn method_not_allowed(method: &hyper::Method, path: &str, allowed: &str) -> ApiError {
        ApiError {
            allow: Some(allowed.to_string()),
            ..ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                format!("{path} does not support {method} (allowed: {allowed})"),
            )
        }
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            code: Some("request_too_large"),
            ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", format!("the request body exceeds {limit} bytes"))
        }
    }

    /// A part of the request over a size limit (an image's bytes or pixels): 413 naming it.
    pub fn payload_too_large(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("request_too_large"),
            param: Some(param.to_string()),
            ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", message)
        }
    }

    pub fn not_supported(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", message)
    }

    /// 503: the model is busy with more work than its queue holds.
    pub fn overloaded() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable_error", "the server is overloaded; retry later")
    }

    /// 503 for a connection past the server's limit.
    pub fn too_many_connections() -> ApiError {
        ApiError {
            code: Some("too_many_connections"),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                "the server holds as many connections as it accepts; retry later",
            )
        }
    }

    /// 500: a real fault of the model or engine.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// 400 `content_filter`: the guard flagged the request's input; `verdicts` says how.
    pub fn content_filter(message: impl Into<String>, verdicts: serde_json::Value) -> ApiError {
        ApiError {
            param: Some("messages".into()),
            code: Some("content_filter"),
            guard: Some(Box::new(verdicts)),
            ..ApiError::invalid(message)
        }
    }

    /// The error as Anthropic's body `{"type": "error", "error": {"type", "message"}}` (the
    /// Messages routes), its type named by the status as Anthropic names them.
    pub fn anthropic_body(&self) -> serde_json::Value {
        let kind = match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            408 => "timeout_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": self.message}})
    }

    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}});
        if let Some(guard) = &self.guard {
            body["error"]["guard"] = (**guard).clone();
        }
        body
    }
}

impl From<GuardError> for ApiError {
    fn from(e: GuardError) -> ApiError {
        ApiError::of_guard(&e)
    }
}

impl ApiError {
    /// How the API reports a guard error. The caller's faults are 400 `invalid_request_error` naming the field. An answer the model
    /// gave but that does not follow the format is 422 `model_error`: the request was understood
    /// and the server worked, but this model cannot answer it in this format (typically a format
    /// it was not trained on), and decoding is greedy, so a retry gives the same answer. Engine
    /// faults are 500 `server_error`.
    pub fn of_guard(e: &GuardError) -> ApiError {
        let invalid = |param: &str| ApiError { param: Some(param.to_string()), ..ApiError::invalid(e.to_string()) };
        let server = |code: &'static str| ApiError { code: Some(code), ..ApiError::server(e.to_string()) };
        match e {
            GuardError::UserRequired => invalid("input.user"),
            GuardError::InvalidRisk(_) | GuardError::ScanRisks | GuardError::RiskNotJudged { .. } => invalid("risks"),
            GuardError::RagInputRequired(_) | GuardError::Prompt { .. } => invalid("input"),
            GuardError::AssistantRequired(_) => invalid("input.assistant"),
            GuardError::Messages(_) => invalid("input.messages"),
            GuardError::CustomRisk(_) => invalid("risk_definitions"),
            GuardError::UnsupportedFormat(_) | GuardError::FamilyFormat { .. } => invalid("format"),
            GuardError::ThinkRequiresFormat33 => invalid("think"),
            GuardError::BatchEmpty | GuardError::BatchTooLarge { .. } => invalid("inputs"),
            GuardError::Unparseable { .. } => ApiError {
                code: Some("unparseable_model_output"),
                ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "model_error", e.to_string())
            },
            GuardError::Template(_) => server("template_error"),
            GuardError::Cancelled => server("cancelled"),
            GuardError::Device(_) | GuardError::Model(_) | GuardError::Generate(_) => server("engine_error"),
        }
    }
}

impl From<SeqError> for ApiError {
    fn from(e: SeqError) -> ApiError {
        match e {
            SeqError::Timeout => ApiError::timeout(),
            SeqError::ContextLength(message) => ApiError::context_length_exceeded(None, message),
            SeqError::Generate(e) => e.into(),
            SeqError::Internal(message) => ApiError::server(message),
        }
    }
}

impl From<GenerateError> for ApiError {
    fn from(e: GenerateError) -> ApiError {
        match &e {
            GenerateError::EmptyPrompt => ApiError::invalid_param("messages", e.to_string()),
            GenerateError::PromptTooLong { .. } => ApiError::context_length_exceeded(Some("messages"), e.to_string()),
            GenerateError::Sampling(_) | GenerateError::TooManyLogprobs(_) => ApiError::invalid(e.to_string()),
            GenerateError::Constraint(_) => ApiError::invalid_param("response_format", e.to_string()),
            GenerateError::Cancelled => ApiError::server("the request was cancelled"),
            GenerateError::Model(_) | GenerateError::Draft(_) => ApiError::server(e.to_string()),
        }
    }
}
