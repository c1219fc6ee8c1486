//! Text embeddings: texts are tokenized (special tokens added and parsed), run through the model
//! (a BERT encoder, or a decoder's final normalised hidden states), pooled into one vector per
//! text and optionally L2-normalised, as llama.cpp's `llama-embedding` does.
//!
//! Every text is computed independently of the others, so a text's embedding is bitwise the same
//! alone or in a list.

use crate::kv_cache::KvType;
use crate::model::{BatchEntry, InputEntry, Model, ModelError};
use crate::tokenizer::TokenId;

/// How the hidden states of a text's tokens become one vector (llama.cpp's pooling types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// No pooling: one vector per token (see [`embed_tokens`]).
    None,
    /// The mean over all tokens, special tokens included.
    Mean,
    /// The first token's state (`[CLS]`).
    Cls,
    /// The last token's state.
    Last,
    /// A cross-encoder's score: its classification head over the first token's state
    /// ([`crate::rerank`]); a score, not an embedding.
    Rank,
}

impl Pooling {
    /// The pooling of a GGUF's `<arch>.pooling_type` value: 0 none, 1 mean, 2 cls, 3 last,
    /// 4 rank.
    pub fn from_gguf(value: u32) -> Option<Pooling> {
        match value {
            0 => Some(Pooling::None),
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            4 => Some(Pooling::Rank),
            _ => None,
        }
    }

    /// `none`, `mean`, `cls` or `last`.
    pub fn from_name(name: &str) -> Option<Pooling> {
        match name {
            "none" => Some(Pooling::None),
            "mean" => Some(Pooling::Mean),
            "cls" => Some(Pooling::Cls),
            "last" => Some(Pooling::Last),
            "rank" => Some(Pooling::Rank),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// The pooling the model's file asks for (none when it says nothing).
    pub fn of_model(model: &Model) -> Result<Pooling, ModelError> {
        let c = model.config();
        Pooling::from_gguf(c.pooling_type).ok_or_else(|| ModelError::BadKey {
            key: format!("{}.pooling_type", c.arch),
            reason: format!("pooling type {} is not supported (0 none, 1 mean, 2 cls, 3 last, 4 rank)", c.pooling_type),
        })
    }
}

/// One embedding per text: the model's hidden states pooled with `pooling` (the file's
/// `pooling_type` when `None`), L2-normalised when `normalize`.
///
/// [`Pooling::None`] is an error here, since it gives one vector per token rather than one per
/// text: use [`embed_tokens`] for that.
pub fn embed(model: &Model, texts: &[&str], pooling: Option<Pooling>, normalize: bool) -> Result<Vec<Vec<f32>>, ModelError> {
    embed_ids(model, &tokenize(model, texts)?, pooling, normalize)
}

/// [`embed`] of already tokenized texts (each non-empty and within the model's context).
pub fn embed_ids(model: &Model, seqs: &[Vec<TokenId>], pooling: Option<Pooling>, normalize: bool) -> Result<Vec<Vec<f32>>, ModelError> {
    let c = model.config();
    for (i, ids) in seqs.iter().enumerate() {
        if ids.is_empty() || ids.len() > c.n_ctx_train {
            return Err(ModelError::BadBatch(format!("input {i} has {} tokens: it must have 1 to {}", ids.len(), c.n_ctx_train)));
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ModelError::BadBatch(format!("input {i}: token {bad} is outside the vocabulary of {}", c.n_vocab)));
        }
    }
    let pooling = match pooling {
        Some(p) => p,
        None => Pooling::of_model(model)?,
    };
    match pooling {
        Pooling::None => {
            return Err(ModelError::BadBatch(
                "pooling none gives one vector per token, not one per text: choose mean, cls or last pooling".into(),
            ))
        }
        Pooling::Rank => {
            return Err(ModelError::BadBatch(
                "this model is a reranker (pooling rank): it scores query and document pairs (/v1/rerank), it does not embed texts; choose mean, cls or last pooling".into(),
            ))
        }
        Pooling::Mean | Pooling::Cls | Pooling::Last => {}
    }
    let e = c.n_embd;
    let mut out = Vec::with_capacity(seqs.len());
    for (seq, hidden) in seqs.iter().zip(hidden_states(model, seqs, pooling)?) {
        let mut v = match pooling {
            Pooling::Mean => {
                let mut sum = vec![0.0f64; e];
                for row in hidden.chunks_exact(e) {
                    sum.iter_mut().zip(row).for_each(|(s, &x)| *s += f64::from(x));
                }
                sum.iter().map(|&s| (s / seq.len() as f64) as f32).collect()
            }
            // `hidden_states` keeps just the wanted row for these
            Pooling::Cls | Pooling::Last | Pooling::None | Pooling::Rank => hidden,
        };
        if normalize {
            l2_normalize(&mut v);
        }
        out.push(v);
    }
    Ok(out)
}

/// The hidden state of every token of every text (no pooling): `[text][token][n_embd]`,
/// each vector L2-normalised when `normalize`.
pub fn embed_tokens(model: &Model, texts: &[&str], normalize: bool) -> Result<Vec<Vec<Vec<f32>>>, ModelError> {
    let seqs = tokenize(model, texts)?;
    let e = model.config().n_embd;
    let hidden = hidden_states(model, &seqs, Pooling::None)?;
    Ok(hidden
        .into_iter()
        .map(|h| {
            h.chunks_exact(e)
                .map(|row| {
                    let mut v = row.to_vec();
                    if normalize {
                        l2_normalize(&mut v);
                    }
                    v
                })
                .collect()
        })
        .collect())
}

/// Scales `v` to unit Euclidean length (a zero vector stays zero), as llama.cpp's
/// `common_embd_normalize(.., 2)` does.
pub fn l2_normalize(v: &mut [f32]) {
    let sum: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let norm = sum.sqrt();
    let inv = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= inv);
}

/// The tokens of each text as [`embed`] reads it (special tokens added), each checked to be
/// non-empty and within the model's context.
pub fn tokenize(model: &Model, texts: &[&str]) -> Result<Vec<Vec<TokenId>>, ModelError> {
    let c = model.config();
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let ids = model.tokenizer().encode(text, true, true);
            if ids.is_empty() {
                return Err(ModelError::BadBatch(format!("text {i} gives no tokens")));
            }
            if ids.len() > c.n_ctx_train {
                return Err(ModelError::BadBatch(format!(
                    "text {i} is {} tokens long, more than the model's context of {} ({}.context_length)",
                    ids.len(),
                    c.n_ctx_train,
                    c.arch
                )));
            }
            Ok(ids)
        })
        .collect()
}

/// Tokens per encoder call: bounds the activations held at once (a few `n_ff`-wide rows per
/// token) when many texts are embedded.
const ENCODER_CALL_TOKENS: usize = 2048;

/// Decoder positions run per forward call: bounds the logits buffer (rows x vocabulary), which
/// the decoder forward computes for every row it returns a hidden state of.
const DECODER_CHUNK: usize = 64;

/// Per sequence, the hidden-state rows pooling needs: every token's for mean or none, only the
/// first or last token's for cls or last.
pub(crate) fn hidden_states(model: &Model, seqs: &[Vec<TokenId>], pooling: Pooling) -> Result<Vec<Vec<f32>>, ModelError> {
    let e = model.config().n_embd;
    if model.is_encoder() {
        // Encoder calls of several texts each (every text attends to itself only).
        let mut out = Vec::with_capacity(seqs.len());
        let mut rest = seqs;
        while !rest.is_empty() {
            let mut take = 1;
            let mut tokens = rest[0].len();
            while take < rest.len() && tokens + rest[take].len() <= ENCODER_CALL_TOKENS {
                tokens += rest[take].len();
                take += 1;
            }
            let (group, tail) = rest.split_at(take);
            rest = tail;
            let all = model.encode(group)?;
            let mut start = 0;
            for s in group {
                let rows = match pooling {
                    Pooling::Cls | Pooling::Rank => &all[start * e..(start + 1) * e],
                    Pooling::Last => &all[(start + s.len() - 1) * e..(start + s.len()) * e],
                    Pooling::Mean | Pooling::None => &all[start * e..(start + s.len()) * e],
                };
                out.push(rows.to_vec());
                start += s.len();
            }
        }
        return Ok(out);
    }
    // Decoders: each text in its own fresh cache, fed in chunks, hidden states only of the
    // rows pooling reads (their logits are computed too, and dropped).
    let mut out = Vec::with_capacity(seqs.len());
    for s in seqs {
        let mut kv = model.new_kv_cache(KvType::F32, s.len());
        let n = s.len();
        let wanted = |i: usize| match pooling {
            Pooling::Cls | Pooling::Rank => i == 0,
            Pooling::Last => i + 1 == n,
            Pooling::Mean | Pooling::None => true,
        };
        let mut rows = Vec::new();
        for (ci, chunk) in s.chunks(DECODER_CHUNK).enumerate() {
            let start = ci * DECODER_CHUNK;
            let mut batch = BatchEntry::sequence(0, chunk, start as u32, true);
            batch.iter_mut().enumerate().for_each(|(j, b)| b.logits = wanted(start + j));
            let entries: Vec<InputEntry> = batch.into_iter().map(|e| InputEntry::from(e).with_hidden()).collect();
            rows.extend_from_slice(&model.forward_inputs(&mut kv, &entries)?.hidden);
        }
        out.push(rows);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_names_and_gguf_values() {
        for (v, p) in [(0, Pooling::None), (1, Pooling::Mean), (2, Pooling::Cls), (3, Pooling::Last), (4, Pooling::Rank)] {
            assert_eq!(Pooling::from_gguf(v), Some(p));
            assert_eq!(Pooling::from_name(p.name()), Some(p));
        }
        assert_eq!(Pooling::from_gguf(5), None);
        assert_eq!(Pooling::from_name("max"), None);
    }

    #[test]
    fn l2_normalize_scales_to_unit_length_and_keeps_zero() {
        let mut v = [3.0f32, 0.0, -4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.0, -0.8]);
        let mut z = [0.0f32; 3];
        l2_normalize(&mut z);
        assert_eq!(z, [0.0; 3]);
    }
}

/// The encoder on the simulated GPU (feature `sim`), with the model's checks' helpers.
#[cfg(all(test, feature = "sim"))]
mod sim_check {
    use super::embed;
    use crate::model::sim_check::{cosine, fixture, json};
    use crate::model::Model;

    /// The encoder path (BERT: token-type and position rows, layer norms, exact-erf GELU, attention
    /// over the batch's own rows of several sequences) on the simulated GPU: all-MiniLM-L6-v2 Q8_0
    /// sentence embeddings against llama.cpp's, and a sentence alone equal bit for bit to the same
    /// sentence in a batch.
    #[test]
    fn sentence_embeddings_on_the_simulated_gpu_match_llama_cpp() {
        let model = Model::load_simulated(fixture("real/all-MiniLM-L6-v2-Q8_0.gguf")).expect("load");
        let golden = json("real/all-MiniLM-L6-v2.embeddings.json");
        let sentences: Vec<(&str, Vec<f32>)> = golden["sentences"]
            .as_array()
            .expect("sentences")
            .iter()
            .take(3)
            .map(|s| {
                let e = s["embedding_llama_cpp_q8_0"]
                    .as_array()
                    .expect("embedding")
                    .iter()
                    .map(|x| x.as_f64().expect("value") as f32)
                    .collect();
                (s["text"].as_str().expect("text"), e)
            })
            .collect();
        let texts: Vec<&str> = sentences.iter().map(|s| s.0).collect();
        let all = embed(&model, &texts, None, true).expect("embed");
        for ((text, want), got) in sentences.iter().zip(&all) {
            let c = cosine(got, want);
            eprintln!("sim all-MiniLM-L6-v2: cosine {c:.7} with llama.cpp for {text:?}");
            assert!(c >= 0.999, "{text:?}: cosine {c}");
        }
        let alone = embed(&model, &texts[1..2], None, true).expect("embed").remove(0);
        assert!(alone.iter().zip(&all[1]).all(|(a, b)| a.to_bits() == b.to_bits()), "a sentence alone vs in a batch");
    }
}
