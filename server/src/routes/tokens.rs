//! llama-server's token utilities: `POST /tokenize` (text to token ids, each with its piece on
//! request), `POST /detokenize` (ids to text) and `POST /apply-template` (chat messages and tools
//! to the prompt the model's own template renders, as a chat completion would). `model` may be
//! left out when the server has one model.

use engine::tokenizer::{TokenId, Tokenizer};
use hyper::Response;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat_request;
use crate::error::ApiError;
use crate::http::{ok_json, typed, Body};
use crate::requests::chat::ChatCompletionRequest;
use crate::AppState;

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    content: String,
    /// The model's BOS / EOS as its tokenizer adds them to a prompt.
    #[serde(default)]
    add_special: bool,
    /// Special tokens written as text (`<|im_start|>`) become those tokens, not their letters.
    #[serde(default = "yes")]
    parse_special: bool,
    /// Each id with its piece: a string, or its bytes when they are not UTF-8 alone.
    #[serde(default)]
    with_pieces: bool,
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    tokens: Vec<TokenId>,
}

fn yes() -> bool {
    true
}

pub fn tokenize(state: &AppState, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: TokenizeRequest = typed(body)?;
    let entry = state.registry.named_or_only(request.model.as_deref(), false)?;
    let tokenizer = entry.model.tokenizer();
    let ids = tokenizer.encode(&request.content, request.add_special, request.parse_special);
    let tokens: Vec<Value> = match request.with_pieces {
        false => ids.iter().map(|&id| json!(id)).collect(),
        true => ids.iter().map(|&id| json!({"id": id, "piece": piece(tokenizer, id)})).collect(),
    };
    Ok(ok_json(&json!({"tokens": tokens})))
}

/// A token's text as llama-server gives it: a string when its bytes are UTF-8, else the bytes.
fn piece(tokenizer: &Tokenizer, id: TokenId) -> Value {
    let bytes = tokenizer.token_to_piece(id, true);
    match std::str::from_utf8(bytes) {
        Ok(text) => json!(text),
        Err(_) => json!(bytes),
    }
}

pub fn detokenize(state: &AppState, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request: DetokenizeRequest = typed(body)?;
    let entry = state.registry.named_or_only(request.model.as_deref(), false)?;
    let tokenizer = entry.model.tokenizer();
    let n_vocab = tokenizer.n_vocab();
    if let Some(i) = request.tokens.iter().position(|&t| t as usize >= n_vocab) {
        return Err(ApiError::invalid_param(
            &format!("tokens[{i}]"),
            format!("tokens[{i}] = {} is not a token of {} (its vocabulary has {n_vocab})", request.tokens[i], entry.id),
        ));
    }
    // the pieces one after another, special tokens as their text, as llama-server writes them
    // (so SPM's space before the first word stays)
    let bytes: Vec<u8> = request.tokens.iter().flat_map(|&t| tokenizer.token_to_piece(t, true).to_vec()).collect();
    Ok(ok_json(&json!({"content": String::from_utf8_lossy(&bytes)})))
}

/// The prompt of a chat completion with these `messages` and `tools` (checked as that route
/// checks them), ending as that route's would: with the generation prompt, in a last assistant
/// message's text that is continued, or after the messages (`add_generation_prompt: false`); an
/// image part shows as `<__media__>`, llama.cpp's marker, where its rows would go.
pub fn apply_template(state: &AppState, body: Map<String, Value>) -> Result<Response<Body>, ApiError> {
    let request = ChatCompletionRequest::from_body(&Value::Object(body))?;
    let entry = state.registry.named_or_only(request.model(), true)?;
    let prompt = chat_request::typed_prompt(&entry, &request, &state.chat_defaults)?;
    let prompt = prompt.text.replace(crate::vision::media_marker(), "<__media__>");
    Ok(ok_json(&json!({"prompt": prompt})))
}
