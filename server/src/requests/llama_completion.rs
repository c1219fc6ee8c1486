//! llama-server's native `POST /completion` request: `prompt` in any of its shapes (a string,
//! token ids, strings and ids mixed, `{"prompt_string": ...}` with its `multimodal_data`, or an
//! array of such prompts),
//! `n_cmpl` (or `n`) completions of each, `grammar` (GBNF) or `json_schema`, llama-server's own
//! fields ([`LlamaFields`]: `n_predict`, `n_probs`, ...) and the shared sampling fields.

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
    /// Completions of each prompt (llama-server's name; `n` is read when it is absent).
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    n_cmpl: Option<u64>,
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

/// A piece of a prompt as sent: text, or a token id.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptPart {
    Text(String),
    Token(TokenId),
}

/// llama-server's marker of an image's place in a `prompt_string` with `multimodal_data`.
pub const MEDIA_MARKER: &str = "<__media__>";

/// One prompt as sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Text and token ids in order; one whose first part is text starts with the vocabulary's
    /// BOS.
    Parts(Vec<PromptPart>),
    /// A text (starting with BOS) and its images (each base64, in the order of the text's
    /// [`MEDIA_MARKER`]s), read through the model's vision projector.
    Media { text: String, images: Vec<String> },
}

/// A `/completion` request, checked.
pub struct CheckedLlamaCompletion {
    pub prompts: Vec<Prompt>,
    /// Completions of each prompt: the answers are each prompt's in turn.
    pub n_cmpl: usize,
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

    /// The request checked for a model of `n_vocab` tokens decoding up to `parallel` sequences
    /// (the most completions of a prompt, as llama-server bounds them by its slots).
    pub fn check(self, n_vocab: usize, timeouts: &Timeouts, parallel: usize) -> Result<CheckedLlamaCompletion, ApiError> {
        let mut common = self.sampling.params(n_vocab, timeouts)?;
        let (field, n_cmpl) = match self.n_cmpl {
            Some(n) => ("n_cmpl", n),
            None => ("n", common.n as u64),
        };
        if !(1..=parallel as u64).contains(&n_cmpl) {
            let why = format!("{field} must be between 1 and {parallel} (the sequences the server decodes at once), got {n_cmpl}");
            return Err(ApiError::invalid_param(field, why));
        }
        let n_cmpl = n_cmpl as usize;
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
        Ok(CheckedLlamaCompletion { prompts, n_cmpl, common, limits, constraint })
    }
}

/// `prompt` as llama-server reads it: an array holding a number is one prompt (ids, or strings
/// and ids mixed); any other array is several prompts; a string or `{"prompt_string": ...}` is
/// one.
fn prompts(prompt: &Value, n_vocab: usize) -> Result<Vec<Prompt>, String> {
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

/// One prompt: a string, an array of strings and token ids, or `{"prompt_string": ...}`, with
/// `multimodal_data` (base64 images) beside a string.
fn one_prompt(prompt: &Value, n_vocab: usize) -> Result<Prompt, String> {
    match prompt {
        Value::String(s) => Ok(Prompt::Parts(vec![PromptPart::Text(s.clone())])),
        // as llama-server reads one: token ids, or texts and ids mixed (texts alone are not one)
        Value::Array(items) if items.iter().any(Value::is_number) => parts(items, n_vocab),
        Value::Array(_) => Err("must hold token ids when it is an array (texts alone are several prompts, not one)".into()),
        Value::Object(o) => match (o.get("prompt_string"), o.get("multimodal_data")) {
            (Some(Value::String(text)), Some(Value::Array(data))) => {
                let images: Vec<String> = data.iter().filter_map(|d| d.as_str().map(str::to_string)).collect();
                if images.len() < data.len() {
                    return Err("has multimodal_data that is not all strings (each image's base64)".into());
                }
                let markers = text.matches(MEDIA_MARKER).count();
                if markers != images.len() {
                    return Err(format!(
                        "must have as many {MEDIA_MARKER} markers in prompt_string ({markers}) as images in multimodal_data ({})",
                        images.len()
                    ));
                }
                Ok(Prompt::Media { text: text.clone(), images })
            }
            (_, Some(Value::Array(_))) => Err("must hold prompt_string as one string beside multimodal_data".into()),
            (_, Some(_)) => Err("has multimodal_data that is not an array of base64 strings".into()),
            (Some(Value::String(s)), None) => Ok(Prompt::Parts(vec![PromptPart::Text(s.clone())])),
            (Some(Value::Array(items)), None) => parts(items, n_vocab),
            _ => Err("must hold prompt_string, a string or an array of strings and token ids".into()),
        },
        _ => Err("must be a string, an array of strings and token ids, an object with prompt_string, or an array of such prompts".into()),
    }
}

fn parts(items: &[Value], n_vocab: usize) -> Result<Prompt, String> {
    Ok(Prompt::Parts(items.iter().map(|item| part(item, n_vocab)).collect::<Result<_, _>>()?))
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

    fn as_parts(p: Vec<Prompt>) -> Vec<Vec<PromptPart>> {
        p.into_iter()
            .map(|p| match p {
                Prompt::Parts(parts) => parts,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn prompts_take_llama_servers_shapes() {
        let t = |s: &str| Text(s.to_string());
        let read = |v: Value| as_parts(prompts(&v, 10).unwrap());
        assert_eq!(read(json!("a")), vec![vec![t("a")]]);
        assert_eq!(read(json!([1, 2])), vec![vec![Token(1), Token(2)]]);
        // one number makes the array one prompt, mixed
        assert_eq!(read(json!(["a", 3, "b"])), vec![vec![t("a"), Token(3), t("b")]]);
        // otherwise several prompts
        assert_eq!(read(json!(["a", "b"])), vec![vec![t("a")], vec![t("b")]]);
        assert_eq!(read(json!([[1, "x"], "b", {"prompt_string": [2]}])), vec![vec![Token(1), t("x")], vec![t("b")], vec![Token(2)]]);
        assert_eq!(read(json!({"prompt_string": "c"})), vec![vec![t("c")]]);
        // images beside a text, each where its marker is
        let media = json!({"prompt_string": "<__media__> and <__media__>?", "multimodal_data": ["AAAA", "BBBB"]});
        let want = Prompt::Media { text: "<__media__> and <__media__>?".into(), images: vec!["AAAA".into(), "BBBB".into()] };
        assert_eq!(prompts(&json!(["a", media]), 10).unwrap()[1], want);
    }

    #[test]
    fn bad_prompts_say_which_and_why() {
        assert_eq!(prompts(&json!([]), 10).unwrap_err(), "prompt must not be empty");
        assert_eq!(prompts(&json!([1, 10]), 10).unwrap_err(), "prompt has token 10, outside the vocabulary of 10");
        assert_eq!(prompts(&json!([1, -1]), 10).unwrap_err(), "prompt has -1, which is not a token id");
        assert_eq!(prompts(&json!([1, 2.5]), 10).unwrap_err(), "prompt has 2.5, which is not a token id");
        assert_eq!(prompts(&json!(["a", [1, null]]), 10).unwrap_err(), "prompt[1] has null, which is neither text nor a token id");
        let media = |text: Value, data: Value| prompts(&json!({"prompt_string": text, "multimodal_data": data}), 10).unwrap_err();
        assert_eq!(
            media(json!("a <__media__>"), json!([])),
            "prompt must have as many <__media__> markers in prompt_string (1) as images in multimodal_data (0)"
        );
        assert!(media(json!("a"), json!(["AAAA"])).ends_with("(0) as images in multimodal_data (1)"));
        assert!(media(json!("<__media__>"), json!([1])).contains("not all strings"));
        assert!(media(json!("<__media__>"), json!("AAAA")).contains("not an array"));
        assert!(media(json!([1, "<__media__>"]), json!(["AAAA"])).contains("one string"));
        assert!(prompts(&json!(7.5), 10).unwrap_err().starts_with("prompt must be a string"));
        assert!(prompts(&json!([{}]), 10).unwrap_err().starts_with("prompt must hold prompt_string"));
        // an array of texts inside several prompts is no prompt (prompt_string may hold one)
        assert!(prompts(&json!([[""], [""]]), 10).unwrap_err().starts_with("prompt[0] must hold token ids"));
        assert!(prompts(&json!([[]]), 10).is_err());
        assert_eq!(as_parts(prompts(&json!({"prompt_string": ["a", "b"]}), 10).unwrap()), vec![vec![Text("a".into()), Text("b".into())]]);
    }

    #[test]
    fn checks_name_their_fields() {
        let check = |body: Value| LlamaCompletionRequest::from_body(&body).and_then(|r| r.check(10, &Timeouts::default(), 8));
        let param = |body: Value| check(body).err().unwrap().param.unwrap();
        assert_eq!(param(json!({})), "prompt");
        assert_eq!(param(json!({"prompt": "a", "n_probs": 101})), "n_probs");
        assert_eq!(param(json!({"prompt": "a", "grammar": "root ::= \"x\"", "json_schema": {}})), "json_schema");
        assert_eq!(param(json!({"prompt": "a", "json_schema": "x"})), "json_schema");
        assert_eq!(param(json!({"prompt": "a", "n_predict": -2})), "n_predict");
        assert_eq!(param(json!({"prompt": "a", "n_cmpl": 0})), "n_cmpl");
        assert_eq!(param(json!({"prompt": "a", "n_cmpl": 9})), "n_cmpl");
        assert_eq!(param(json!({"prompt": "a", "n": 9})), "n");
        assert_eq!(param(json!({"prompt": "a", "n": 129})), "n");
        let n_cmpl = |body: Value| check(body).unwrap().n_cmpl;
        assert_eq!((n_cmpl(json!({"prompt": "a"})), n_cmpl(json!({"prompt": "a", "n": 3}))), (1, 3));
        assert_eq!(n_cmpl(json!({"prompt": "a", "n": 3, "n_cmpl": 2})), 2, "n_cmpl before n");
        let ok = check(json!({"prompt": ["a", "b"], "n_probs": 0, "n_predict": 5, "return_tokens": true, "grammar": ""})).unwrap();
        assert_eq!((ok.prompts.len(), ok.limits.n_probs, ok.common.max_tokens, ok.limits.return_tokens), (2, None, Some(5), true));
        assert!(ok.constraint.is_none());
        let probs = check(json!({"prompt": "a", "n_probs": 3, "post_sampling_probs": true})).unwrap().limits;
        assert_eq!((probs.n_probs, probs.post_sampling), (Some(3), true));
    }
}
