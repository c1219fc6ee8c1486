//! llama-server's native `POST /completion` request: `prompt` in any of its shapes (a string,
//! token ids, strings and ids mixed, `{"prompt_string": ...}`, or an array of such prompts),
//! `grammar` (GBNF) or `json_schema`, llama-server's own fields ([`LlamaFields`]: `n_predict`,
//! `n_probs`, ...) and the shared sampling fields.

use engine::grammar::Constraint;
use engine::tokenizer::TokenId;
use serde::Deserialize;
use serde_json::Value;

use super::llama::{LlamaFields, LlamaLimits};
use super::sampling::{CommonParams, SamplingRequest, Timeouts};
use super::{parse, ModelName};
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
pub struct LlamaCompletionRequest {
    /// Needed when several models generate.
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    prompt: Option<Value>,
    /// A GBNF grammar the output follows (empty: none).
    #[serde(default)]
    grammar: Option<String>,
    /// A JSON schema the output follows.
    #[serde(default)]
    json_schema: Option<Value>,
    #[serde(skip)]
    llama: LlamaFields,
    #[serde(skip)]
    sampling: SamplingRequest,
}

/// One prompt as sent: text and token ids in order.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptPart {
    Text(String),
    Token(TokenId),
}

/// A `/completion` request, checked.
pub struct CheckedLlamaCompletion {
    /// Each prompt's parts; a prompt whose first part is text starts with the vocabulary's BOS.
    pub prompts: Vec<Vec<PromptPart>>,
    pub common: CommonParams,
    pub limits: LlamaLimits,
    pub constraint: Option<Constraint>,
}

impl LlamaCompletionRequest {
    pub fn from_body(body: &Value) -> Result<LlamaCompletionRequest, ApiError> {
        let mut request: LlamaCompletionRequest = parse(body)?;
        request.llama = parse(body)?;
        request.sampling = parse(body)?;
        Ok(request)
    }

    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.0.as_str())
    }

    /// The request checked for a model of `n_vocab` tokens.
    pub fn check(self, n_vocab: usize, timeouts: &Timeouts) -> Result<CheckedLlamaCompletion, ApiError> {
        let mut common = self.sampling.params(n_vocab, timeouts)?;
        if common.n != 1 {
            return Err(ApiError::invalid_param("n", "/completion gives one completion per prompt: n must be 1"));
        }
        let limits = self.llama.check(&mut common)?;
        let prompt = self.prompt.ok_or_else(|| ApiError::missing("prompt"))?;
        let prompts = prompts(&prompt, n_vocab).map_err(|m| ApiError::invalid_param("prompt", m))?;
        let grammar = self.grammar.filter(|g| !g.is_empty()).map(Constraint::Grammar);
        let constraint = match (grammar, self.json_schema) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_param("json_schema", "json_schema and grammar cannot both be given"));
            }
            (Some(g), None) => Some(g),
            (None, Some(schema @ Value::Object(_))) => Some(Constraint::JsonSchema(schema)),
            (None, Some(other)) => {
                return Err(ApiError::invalid_param("json_schema", format!("json_schema must be an object, got {other}")))
            }
            (None, None) => None,
        };
        Ok(CheckedLlamaCompletion { prompts, common, limits, constraint })
    }
}

/// `prompt` as llama-server reads it: an array holding a number is one prompt (ids, or strings
/// and ids mixed); any other array is several prompts; a string or `{"prompt_string": ...}` is
/// one.
fn prompts(prompt: &Value, n_vocab: usize) -> Result<Vec<Vec<PromptPart>>, String> {
    let list: Vec<&Value> = match prompt {
        Value::Array(items) if !items.iter().any(Value::is_number) => items.iter().collect(),
        one => vec![one],
    };
    if list.is_empty() {
        return Err("prompt must not be empty".into());
    }
    list.iter()
        .enumerate()
        .map(|(i, p)| one_prompt(p, n_vocab).map_err(|m| if list.len() > 1 { format!("prompt[{i}] {m}") } else { format!("prompt {m}") }))
        .collect()
}

/// One prompt: a string, an array of strings and token ids, or `{"prompt_string": ...}` (its
/// `multimodal_data` is not read here: images go through chat completions).
fn one_prompt(prompt: &Value, n_vocab: usize) -> Result<Vec<PromptPart>, String> {
    match prompt {
        Value::String(s) => Ok(vec![PromptPart::Text(s.clone())]),
        Value::Array(items) => items.iter().map(|item| part(item, n_vocab)).collect(),
        Value::Object(o) if o.contains_key("multimodal_data") => {
            Err("has multimodal_data, which /completion does not read: send images as image parts to /v1/chat/completions".into())
        }
        Value::Object(o) => match o.get("prompt_string") {
            Some(inner @ (Value::String(_) | Value::Array(_))) => one_prompt(inner, n_vocab),
            _ => Err("must hold prompt_string, a string or an array of strings and token ids".into()),
        },
        _ => Err("must be a string, an array of strings and token ids, an object with prompt_string, or an array of such prompts".into()),
    }
}

fn part(item: &Value, n_vocab: usize) -> Result<PromptPart, String> {
    match item {
        Value::String(s) => Ok(PromptPart::Text(s.clone())),
        Value::Number(n) => match n.as_u64().and_then(|t| TokenId::try_from(t).ok()) {
            Some(id) if (id as usize) < n_vocab => Ok(PromptPart::Token(id)),
            Some(id) => Err(format!("has token {id}, outside the vocabulary of {n_vocab}")),
            None => Err(format!("has {n}, which is not a token id")),
        },
        other => Err(format!("has {other}, which is neither text nor a token id")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use PromptPart::{Text, Token};

    #[test]
    fn prompts_take_llama_servers_shapes() {
        let t = |s: &str| Text(s.to_string());
        assert_eq!(prompts(&json!("a"), 10).unwrap(), vec![vec![t("a")]]);
        assert_eq!(prompts(&json!([1, 2]), 10).unwrap(), vec![vec![Token(1), Token(2)]]);
        // one number makes the array one prompt, mixed
        assert_eq!(prompts(&json!(["a", 3, "b"]), 10).unwrap(), vec![vec![t("a"), Token(3), t("b")]]);
        // otherwise several prompts
        assert_eq!(prompts(&json!(["a", "b"]), 10).unwrap(), vec![vec![t("a")], vec![t("b")]]);
        assert_eq!(
            prompts(&json!([[1, "x"], "b", {"prompt_string": [2]}]), 10).unwrap(),
            vec![vec![Token(1), t("x")], vec![t("b")], vec![Token(2)]]
        );
        assert_eq!(prompts(&json!({"prompt_string": "c"}), 10).unwrap(), vec![vec![t("c")]]);
    }

    #[test]
    fn bad_prompts_say_which_and_why() {
        assert_eq!(prompts(&json!([]), 10).unwrap_err(), "prompt must not be empty");
        assert_eq!(prompts(&json!([1, 10]), 10).unwrap_err(), "prompt has token 10, outside the vocabulary of 10");
        assert_eq!(prompts(&json!([1, -1]), 10).unwrap_err(), "prompt has -1, which is not a token id");
        assert_eq!(prompts(&json!([1, 2.5]), 10).unwrap_err(), "prompt has 2.5, which is not a token id");
        assert_eq!(prompts(&json!(["a", [1, null]]), 10).unwrap_err(), "prompt[1] has null, which is neither text nor a token id");
        assert!(prompts(&json!({"prompt_string": "a", "multimodal_data": []}), 10).unwrap_err().contains("multimodal_data"));
        assert!(prompts(&json!(7.5), 10).unwrap_err().starts_with("prompt must be a string"));
        assert!(prompts(&json!([{}]), 10).unwrap_err().starts_with("prompt must hold prompt_string"));
    }

    #[test]
    fn checks_name_their_fields() {
        let check = |body: Value| LlamaCompletionRequest::from_body(&body).and_then(|r| r.check(10, &Timeouts::default()));
        let param = |body: Value| check(body).err().unwrap().param.unwrap();
        assert_eq!(param(json!({})), "prompt");
        assert_eq!(param(json!({"prompt": "a", "n_probs": 21})), "n_probs");
        assert_eq!(param(json!({"prompt": "a", "grammar": "root ::= \"x\"", "json_schema": {}})), "json_schema");
        assert_eq!(param(json!({"prompt": "a", "json_schema": "x"})), "json_schema");
        assert_eq!(param(json!({"prompt": "a", "n_predict": -2})), "n_predict");
        assert_eq!(param(json!({"prompt": "a", "n": 2})), "n");
        let ok = check(json!({"prompt": ["a", "b"], "n_probs": 0, "n_predict": 5, "return_tokens": true, "grammar": ""})).unwrap();
        assert_eq!((ok.prompts.len(), ok.limits.n_probs, ok.common.max_tokens, ok.limits.return_tokens), (2, None, Some(5), true));
        assert!(ok.constraint.is_none());
        let probs = check(json!({"prompt": "a", "n_probs": 3, "post_sampling_probs": true})).unwrap().limits;
        assert_eq!((probs.n_probs, probs.post_sampling), (Some(3), true));
    }
}
