//! Reranking with a cross-encoder (a BERT-family model with a classification head, pooling type
//! rank): each (query, document) pair is one input, built as llama-server builds it, and its
//! score is the head's first value over the first token's final hidden state.

use crate::embed::{hidden_states, Pooling};
use crate::model::{Model, ModelError};
use crate::tokenizer::TokenId;

/// The GGUF key of a reranker's prompt template (`{query}` and `{document}` replaced).
const RERANK_TEMPLATE: &str = "tokenizer.chat_template.rerank";

/// A document's score and the tokens its pair took.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    pub score: f32,
    pub n_tokens: usize,
}

/// Whether `model` can rerank: an encoder whose file asks for rank pooling and carries a
/// classification head (only encoders have one).
pub fn is_reranker(model: &Model) -> bool {
    model.classifier().is_some() && Pooling::of_model(model).ok() == Some(Pooling::Rank)
}

/// The tokens of one pair: the file's rerank template when it has one (special tokens parsed),
/// else `BOS? query EOS? SEP? document EOS?` after what the vocabulary adds (EOS standing in
/// for a missing SEP and the other way round), as llama-server's `format_prompt_rerank`.
pub fn pair_tokens(model: &Model, query: &str, document: &str) -> Vec<TokenId> {
    let tok = model.tokenizer();
    if let Some(template) = model.file().get(RERANK_TEMPLATE).and_then(|v| v.as_str()) {
        let text = template.replace("{query}", query).replace("{document}", document);
        return tok.encode(&text, false, true);
    }
    let special = tok.special_tokens();
    let eos = special.eos.or(special.sep);
    let mut ids = Vec::new();
    if tok.add_bos() {
        ids.extend(tok.bos());
    }
    ids.extend(tok.encode(query, false, false));
    if tok.add_eos() {
        ids.extend(eos);
    }
    if tok.add_sep() {
        ids.extend(special.sep);
    }
    ids.extend(tok.encode(document, false, false));
    if tok.add_eos() {
        ids.extend(eos);
    }
    ids
}

/// Each document's score against `query`, in the documents' order. Every pair must fit the
/// model's context; a model that is not a reranker is an error naming what it lacks.
pub fn rerank(model: &Model, query: &str, documents: &[&str]) -> Result<Vec<Ranked>, ModelError> {
    let Some(head) = model.classifier() else {
        return Err(ModelError::BadBatch(format!(
            "{} is not a reranker: reranking needs a BERT-family cross-encoder with a classification head (cls.* tensors)",
            model.config().arch
        )));
    };
    let c = model.config();
    let seqs: Vec<Vec<TokenId>> = documents.iter().map(|d| pair_tokens(model, query, d)).collect();
    for (i, s) in seqs.iter().enumerate() {
        if s.is_empty() || s.len() > c.n_ctx_train {
            return Err(ModelError::BadBatch(format!(
                "the query with document {i} is {} tokens long: it must be 1 to {} ({}.context_length)",
                s.len(),
                c.n_ctx_train,
                c.arch
            )));
        }
    }
    let rows = hidden_states(model, &seqs, Pooling::Cls)?;
    Ok(rows.iter().zip(&seqs).map(|(row, s)| Ranked { score: head.apply(row)[0], n_tokens: s.len() }).collect())
}
