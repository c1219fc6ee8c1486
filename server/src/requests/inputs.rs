//! `prompt` (`/v1/completions`) and `input` (`/v1/embeddings`) in any of OpenAI's four shapes: a
//! string, strings, token ids, or arrays of token ids (never mixed; every token array
//! non-empty).

use engine::tokenizer::TokenId;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Inputs {
    Texts(Vec<String>),
    Tokens(Vec<Vec<TokenId>>),
}

impl Inputs {
    pub fn len(&self) -> usize {
        match self {
            Inputs::Texts(t) => t.len(),
            Inputs::Tokens(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'de> Deserialize<'de> for Inputs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Inputs, D::Error> {
        use serde::de::Error;
        let tokens = |v: &Value| -> Result<Vec<TokenId>, D::Error> {
            let ids: Option<Vec<TokenId>> =
                v.as_array().and_then(|a| a.iter().map(|t| t.as_u64().and_then(|t| TokenId::try_from(t).ok())).collect());
            ids.filter(|i| !i.is_empty())
                .ok_or_else(|| D::Error::custom("must hold token ids as non-empty arrays of non-negative integers"))
        };
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Inputs::Texts(vec![s])),
            Value::Array(items) if items.is_empty() => Err(D::Error::custom("must not be empty")),
            Value::Array(items) if items.iter().all(Value::is_string) => {
                Ok(Inputs::Texts(items.into_iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect()))
            }
            v @ Value::Array(_) if v.as_array().is_some_and(|a| a.iter().all(Value::is_number)) => Ok(Inputs::Tokens(vec![tokens(&v)?])),
            Value::Array(items) if items.iter().all(Value::is_array) => {
                Ok(Inputs::Tokens(items.iter().map(tokens).collect::<Result<_, _>>()?))
            }
            _ => Err(D::Error::custom("must be a string, an array of strings, an array of token ids or an array of such arrays")),
        }
    }
}
