//! The bodies of the generation routes as typed requests (serde): one struct per request kind,
//! with its range and cross-field checks as methods, shared by the routes that accept it
//! (`/v1/responses` and `/v1/messages` build the chat request they mean). A wrong value is a 400
//! naming the top-level field as `param` and the value by its path in the message
//! (`messages[2].role: unknown variant ...`); a missing one is `missing_required_parameter`.

pub mod chat;
pub mod completion;
pub mod embedding;
pub mod guard;
pub mod infill;
pub mod inputs;
pub mod llama;
pub mod llama_completion;
pub mod rerank;
pub mod sampling;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// The body as the typed request `T`. This crate's own checks write their messages as the rest
/// of a sentence about the value (`must be ...`, `is ...`, `has ...`, or `.field must be ...`
/// for a field within it), read after the value's path; serde's own follow the path after a
/// colon.
pub fn parse<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| value_error(&e.path().to_string(), &e.into_inner().to_string(), false))
}

/// A count field: a JSON number that is whole and not negative, written `3` or `3.0` (JSON
/// Schema's `integer` takes both, as OpenAI's API does); `null` is left out.
pub(crate) fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::Deserialize;
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => match (n.as_u64(), n.as_f64()) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => Ok(Some(f as u64)),
            _ => Err(serde::de::Error::custom(format!("invalid value: {n}, expected a whole number of at least 0"))),
        },
    }
}

/// The 400 of a value at `path` that did not read (`message`, serde's or this crate's):
/// `missing_required_parameter` for a missing field. `param` is the whole path when
/// `whole_path`, else the top-level field.
pub fn value_error(path: &str, message: &str, whole_path: bool) -> ApiError {
    let param = |p: &str| if whole_path { p.to_string() } else { top_level(p).to_string() };
    if let Some(missing) = message.strip_prefix("missing field `").and_then(|r| r.strip_suffix('`')) {
        let full = if path == "." { missing.to_string() } else { format!("{path}.{missing}") };
        return ApiError { param: Some(param(&full)), ..ApiError::missing(&full) };
    }
    ApiError::invalid_param(&param(path), joined(path, message))
}

/// `path` and a message about its value as one sentence.
fn joined(path: &str, message: &str) -> String {
    if message.starts_with('.') {
        format!("{path}{message}")
    } else if ["must ", "is ", "has "].iter().any(|s| message.starts_with(s)) {
        format!("{path} {message}")
    } else {
        format!("{path}: {message}")
    }
}

/// An error of a value read inside a custom deserializer (a tool read whole, then typed), as a
/// message that reads after the outer path: `.function.name must be ...`, or a missing field
/// named by its path within.
pub fn nested_error(e: serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.into_inner().to_string();
    if path == "." {
        return inner;
    }
    match inner.strip_prefix("missing field `").and_then(|r| r.strip_suffix('`')) {
        Some(missing) => format!("missing field `{path}.{missing}`"),
        None => format!(".{}", joined(&path, &inner)),
    }
}

/// The top-level field of a serde path (`messages` of `messages[2].role`).
fn top_level(path: &str) -> &str {
    path.split(['.', '[']).next().unwrap_or(path)
}

/// For an optional `model` that may be left out but not sent as null.
pub fn present_model<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ModelName>, D::Error> {
    <ModelName as serde::Deserialize>::deserialize(d).map(Some)
}

/// `model`: the id of a loaded model, a non-empty string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelName(pub String);

impl<'de> serde::Deserialize<'de> for ModelName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ModelName, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if !s.is_empty() => Ok(ModelName(s)),
            _ => Err(serde::de::Error::custom("must be a non-empty string")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::chat::ChatCompletionRequest;
    use super::completion::CompletionRequest;
    use super::embedding::EmbeddingRequest;
    use super::*;

    /// The (param, message) of the error a chat body gets, read and checked for a 512-token
    /// vocabulary.
    fn chat_error(body: Value) -> (String, String) {
        let e = ChatCompletionRequest::from_body(&body)
            .and_then(|r| r.check(512, &Default::default(), &Default::default()).map(|_| ()))
            .unwrap_err();
        (e.param.unwrap_or_default(), e.message)
    }

    #[test]
    fn a_last_assistant_text_is_continued_by_default_or_as_the_request_says() {
        use super::chat::{ChatDefaults, PromptEnd};
        let end = |messages: Value, fields: Value, prefill_assistant: bool| {
            let mut body = json!({"model": "m", "messages": messages});
            body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
            ChatCompletionRequest::from_body(&body)
                .unwrap()
                .prompt_end(&ChatDefaults { prefill_assistant })
                .map_err(|e| (e.param.unwrap(), e.message))
        };
        let prefilled = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "He"}]);
        let asked = json!([{"role": "user", "content": "Hi"}]);
        let called = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]);
        assert_eq!(end(prefilled.clone(), json!({}), true), Ok(PromptEnd::Continue));
        assert_eq!(end(prefilled.clone(), json!({}), false), Ok(PromptEnd::NewTurn));
        assert_eq!(end(prefilled.clone(), json!({"continue_final_message": true}), false), Ok(PromptEnd::Continue));
        assert_eq!(end(prefilled.clone(), json!({"continue_final_message": false}), true), Ok(PromptEnd::NewTurn));
        assert_eq!(end(prefilled.clone(), json!({"add_generation_prompt": true}), true), Ok(PromptEnd::NewTurn));
        assert_eq!(end(prefilled.clone(), json!({"add_generation_prompt": false}), true), Ok(PromptEnd::AfterMessages));
        assert_eq!(
            end(prefilled.clone(), json!({"continue_final_message": true, "add_generation_prompt": false}), false),
            Ok(PromptEnd::Continue)
        );
        // nothing to continue: a new turn by default, an error when asked for
        assert_eq!(end(asked.clone(), json!({}), true), Ok(PromptEnd::NewTurn));
        assert_eq!(end(called.clone(), json!({}), true), Ok(PromptEnd::NewTurn));
        for messages in [asked, called] {
            let (param, message) = end(messages, json!({"continue_final_message": true}), true).unwrap_err();
            assert_eq!(param, "continue_final_message");
            assert!(message.contains("last message to be an assistant's text"), "{message}");
        }
        let both = end(prefilled, json!({"continue_final_message": true, "add_generation_prompt": true}), true).unwrap_err();
        assert_eq!(both.0, "continue_final_message");
    }

    #[test]
    fn counts_take_whole_numbers_written_either_way() {
        let body = |n: Value| json!({"model": "m", "messages": [{"role": "user"}], "max_tokens": n, "n": 2.0, "top_logprobs": null});
        let r =
            ChatCompletionRequest::from_body(&body(json!(7.0))).unwrap().check(512, &Default::default(), &Default::default()).ok().unwrap();
        assert_eq!((r.common.max_tokens, r.common.n), (Some(7), 2));
        for bad in [json!(1.5), json!(-1), json!("7")] {
            let (param, message) = chat_error(body(bad.clone()));
            assert_eq!(param, "max_tokens", "{bad}");
            assert!(message.starts_with("max_tokens: "), "{message}");
        }
    }

    #[test]
    fn errors_name_the_top_level_field_and_the_value_by_its_path() {
        let m = |content: Value| json!({"model": "m", "messages": [{"role": "user", "content": content}]});
        let cases = [
            (json!({"model": "m"}), "messages", "messages is required"),
            (json!({"model": "m", "messages": []}), "messages", "messages must be a non-empty array"),
            (json!({"model": "m", "messages": [{"content": "x"}]}), "messages", "messages[0].role is required"),
            (json!({"model": "m", "messages": [{"role": "robot"}]}), "messages", "messages[0].role: unknown variant `robot`"),
            (m(json!([{"type": "text", "text": 5}])), "messages", "messages[0].content[0].text must be a string"),
            (
                m(json!([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x", "detail": "huge"}}])),
                "messages",
                "messages[0].content[1].image_url.detail must be auto, low or high",
            ),
            (m(json!([{"type": "image_url", "image_url": {}}])), "messages", "messages[0].content[0].image_url.url must be a string"),
            (m(json!([{"type": "input_audio"}])), "messages", "messages[0].content[0] is an input_image or audio part"),
            (m(json!([{"type": "video"}])), "messages", "messages[0].content[0] has an unknown type"),
            (m(json!(5)), "messages", "messages[0].content: invalid type: integer `5`, expected a string or an array of content parts"),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": 5}}]}]}),
                "messages",
                "messages[0].tool_calls[0].function.arguments must be JSON text or an object",
            ),
            (json!({"model": "", "messages": [{"role": "user"}]}), "model", "model must be a non-empty string"),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "temperature": 3}),
                "temperature",
                "temperature must be between 0 and 2, got 3",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "temperature": "hot"}),
                "temperature",
                "temperature: invalid type: string \"hot\"",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "stop": ["a", ""]}),
                "stop",
                "stop must be a string or an array of at most 4 non-empty strings",
            ),
            (json!({"model": "m", "messages": [{"role": "user"}], "seed": 1.5}), "seed", "seed must be a 64-bit integer, got 1.5"),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "tools": [{"type": "function"}]}),
                "tools",
                "tools[0].function is required",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "tools": [{"type": "function", "function": {"name": "a b"}}]}),
                "tools",
                "tools[0].function.name must be a non-empty name of letters, digits, _ or -",
            ),
            (json!({"model": "m", "messages": [{"role": "user"}], "tool_choice": "auto"}), "tool_choice", "tool_choice needs tools"),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "response_format": {"type": "xml"}}),
                "response_format",
                "response_format.type must be text, json_object or json_schema",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "top_logprobs": 2}),
                "top_logprobs",
                "top_logprobs requires logprobs to be true",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}], "logit_bias": {"600": 1}}),
                "logit_bias",
                "logit_bias token 600 is outside the vocabulary of 512",
            ),
        ];
        for (body, param, message) in cases {
            let (p, m) = chat_error(body.clone());
            assert_eq!(p, param, "{body}: {m}");
            assert!(m.starts_with(message), "{body}: {m:?} does not start with {message:?}");
        }
    }

    #[test]
    fn template_messages_read_developer_as_system_and_call_arguments_as_objects() {
        let body = json!({"model": "m", "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}], "reasoning_content": "kept"},
            {"role": "tool", "tool_call_id": "c1", "content": null},
        ]});
        let messages = ChatCompletionRequest::from_body(&body).unwrap().messages().unwrap();
        assert_eq!(messages[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(messages[1]["content"], Value::Null);
        assert_eq!(messages[1]["tool_calls"][0]["function"]["arguments"], json!({"x": 1}));
        assert_eq!(messages[1]["reasoning_content"], "kept");
        assert_eq!(messages[2], json!({"role": "tool", "content": "", "tool_call_id": "c1"}));
    }

    #[test]
    fn completion_and_embedding_requests_check_their_own_fields() {
        let e = CompletionRequest::from_body(&json!({"model": "m", "prompt": [1, "a"]})).unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (Some("prompt"), "prompt must be a string, an array of strings, an array of token ids or an array of such arrays")
        );
        let e = CompletionRequest::from_body(&json!({"model": "m", "prompt": "a", "best_of": 2}))
            .unwrap()
            .check(512, &Default::default())
            .err()
            .unwrap();
        assert_eq!(e.param.as_deref(), Some("best_of"));
        let e = CompletionRequest::from_body(&json!({"model": "m"})).unwrap().check(512, &Default::default()).err().unwrap();
        assert_eq!((e.param.as_deref(), e.code), (Some("prompt"), Some("missing_required_parameter")));
        let r: EmbeddingRequest = parse(&json!({"model": "m", "input": ["a", ""]})).unwrap();
        assert_eq!(r.inputs().unwrap_err().message, "input items must not be empty");
        let e = parse::<EmbeddingRequest>(&json!({"model": "m", "input": "a", "encoding_format": "hex"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("encoding_format"));
    }
}
