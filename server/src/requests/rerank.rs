//! The `/v1/rerank` request (llama-server's, Jina's and Cohere's shape): `query`, `documents`
//! (strings, or objects with `text`; at most [`MAX_DOCUMENTS`]), `top_n`, `return_documents`;
//! or, as llama-server also takes it, Hugging Face TEI's shape: `texts` and `return_text`.

use serde::Deserialize;

use super::sampling::int_in;
use super::ModelName;
use crate::error::ApiError;

/// The most documents one request may rank.
pub const MAX_DOCUMENTS: usize = 1024;

#[derive(Debug, Deserialize)]
pub struct RerankRequest {
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    documents: Option<Vec<Document>>,
    #[serde(default, deserialize_with = "super::whole_number")]
    top_n: Option<u64>,
    #[serde(default)]
    return_documents: Option<bool>,
    /// TEI's name of `documents`; the answer is then TEI's too.
    #[serde(default)]
    texts: Option<Vec<Document>>,
    /// TEI's name of `return_documents`.
    #[serde(default)]
    return_text: Option<bool>,
}

/// A document as a string, or as `{"text": ...}` (Jina's and Cohere's object form).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Document {
    Text(String),
    Object { text: String },
}

/// A rerank request, checked.
pub struct CheckedRerank {
    pub query: String,
    pub documents: Vec<String>,
    /// How many results to return, the best first (all by default).
    pub top_n: usize,
    pub return_documents: bool,
    /// Asked in TEI's shape (`texts`): answered as TEI answers.
    pub tei: bool,
}

impl RerankRequest {
    /// The model the request names (null or left out: `model is required`).
    pub fn model_id(&self) -> Result<String, ApiError> {
        self.model.as_ref().map(|m| m.0.clone()).ok_or_else(|| ApiError::missing("model"))
    }

    pub fn check(self) -> Result<CheckedRerank, ApiError> {
        let query = self.query.ok_or_else(|| ApiError::missing("query"))?;
        let tei = self.texts.is_some();
        let given = match (self.documents, self.texts) {
            (Some(_), Some(_)) => return Err(ApiError::invalid_param("texts", "give documents or texts (TEI's name), not both")),
            (Some(d), None) | (None, Some(d)) => d,
            (None, None) => return Err(ApiError::missing("documents")),
        };
        let field = if tei { "texts" } else { "documents" };
        let documents: Vec<String> = given
            .into_iter()
            .map(|d| match d {
                Document::Text(t) | Document::Object { text: t } => t,
            })
            .collect();
        if documents.is_empty() || documents.len() > MAX_DOCUMENTS {
            return Err(ApiError::invalid_param(
                field,
                format!("{field} has {} items: it must have 1 to {MAX_DOCUMENTS}", documents.len()),
            ));
        }
        let top_n = int_in("top_n", self.top_n, 1, u64::MAX)?.map_or(documents.len(), |n| (n as usize).min(documents.len()));
        let return_documents = self.return_documents.or(self.return_text).unwrap_or(false);
        Ok(CheckedRerank { query, documents, top_n, return_documents, tei })
    }
}
