//! BERT encoders: shape-checked weights and the forward pass from token ids to the final hidden
//! state of every token, over any [`Backend`]. One call takes several sequences at once; each
//! attends to the whole of itself (no causal mask) and to nothing else. An encoder reads its
//! whole input at once, so attention runs straight on the batch's keys and values and no KV
//! cache is involved.
//!
//! Batch invariance: embeddings, norms, projections and activations treat each row alone, and a
//! token's attention reads only its own sequence, in position order, so a sequence's hidden
//! states are bitwise the same alone or beside others.
//!
//! A cross-encoder (a reranker) adds a classification head over its first token's hidden
//! state ([`Classifier`]), as llama.cpp's rank pooling reads it.

use std::sync::Arc;

use super::blocks::{attention_out, plain_ffn, project_each};
use super::config::ModelConfig;
use super::error::ModelError;
use super::weights::Loader;
use crate::backend::{AttentionRow, Backend, KvSource, RowInput};
use crate::gguf::GgufFile;
use crate::tokenizer::TokenId;

/// A layer norm's scale and shift.
pub struct LayerNorm<B: Backend> {
    pub weight: B::Vector,
    pub bias: B::Vector,
}

impl<B: Backend> LayerNorm<B> {
    fn load(l: &Loader<B>, name: &str, n: usize) -> Result<LayerNorm<B>, ModelError> {
        Ok(LayerNorm { weight: l.vector(&format!("{name}.weight"), n)?, bias: l.vector(&format!("{name}.bias"), n)? })
    }

    fn apply(&self, b: &B, x: &B::Tensor, eps: f32, out: &mut B::Tensor) -> Result<(), ModelError> {
        Ok(b.layer_norm(x, &self.weight, &self.bias, eps, out)?)
    }
}

/// The weights of one encoder layer. Biases are optional, as llama.cpp loads them.
pub struct BertLayer<B: Backend> {
    pub wq: B::Matrix,
    pub bq: Option<B::Vector>,
    pub wk: B::Matrix,
    pub bk: Option<B::Vector>,
    pub wv: B::Matrix,
    pub bv: Option<B::Vector>,
    pub wo: B::Matrix,
    pub bo: Option<B::Vector>,
    pub attn_out_norm: LayerNorm<B>,
    pub ffn_up: B::Matrix,
    pub ffn_up_b: Option<B::Vector>,
    pub ffn_down: B::Matrix,
    pub ffn_down_b: Option<B::Vector>,
    pub layer_out_norm: LayerNorm<B>,
}

/// The weights of a BERT encoder.
pub struct BertWeights<B: Backend> {
    pub token_embd: B::Matrix,
    /// Row 0 of `token_types.weight` on the host: every token is in "sentence A", as in
    /// llama.cpp.
    pub token_type0: Option<Vec<f32>>,
    /// One row per position up to the trained context length.
    pub position_embd: B::Matrix,
    pub embd_norm: LayerNorm<B>,
    pub layers: Vec<BertLayer<B>>,
    /// The classification head of a cross-encoder (`cls.*` tensors), if the file has one.
    pub classifier: Option<Classifier>,
}

/// A cross-encoder's classification head, in f32 on the host (it reads one row per text):
/// `cls` (`n_embd` -> `n_embd`, then tanh) and `cls.output` (`n_embd` -> one value per label),
/// each optional, as llama.cpp loads them.
pub struct Classifier {
    /// `[n_embd][n_embd]` and its bias.
    pub dense: Option<(Vec<f32>, Option<Vec<f32>>)>,
    /// `[n_out][n_embd]` and its bias.
    pub out: Option<(Vec<f32>, Option<Vec<f32>>)>,
    pub n_embd: usize,
    /// Values per text: the length of `<arch>.classifier.output_labels` (1 without it).
    pub n_out: usize,
}

impl Classifier {
    fn load<B: Backend>(l: &Loader<B>, file: &GgufFile, c: &ModelConfig) -> Result<Option<Classifier>, ModelError> {
        let e = c.n_embd;
        let n_out = file.get(&format!("{}.classifier.output_labels", c.arch)).and_then(|v| v.as_array()).map_or(1, |a| a.len());
        let dense = match l.host_matrix_opt("cls.weight", e, e)? {
            Some(w) => Some((w, l.host_vector_opt("cls.bias", e)?)),
            None => None,
        };
        let out = match l.host_matrix_opt("cls.output.weight", n_out, e)? {
            Some(w) => Some((w, l.host_vector_opt("cls.output.bias", n_out)?)),
            None => None,
        };
        if dense.is_none() && out.is_none() {
            return Ok(None);
        }
        // without `cls.output` the head's value is the dense layer's whole row
        let n_out = if out.is_some() { n_out } else { e };
        Ok(Some(Classifier { dense, out, n_embd: e, n_out }))
    }

    /// The head over one pooled row of `n_embd` values: `cls` then tanh, then `cls.output`
    /// (each a sum in column order, in f64 as llama.cpp's f32 dot products round no worse).
    pub fn apply(&self, row: &[f32]) -> Vec<f32> {
        let mut x = row.to_vec();
        if let Some((w, b)) = &self.dense {
            x = linear(w, b.as_deref(), &x, self.n_embd).into_iter().map(f32::tanh).collect();
        }
        if let Some((w, b)) = &self.out {
            x = linear(w, b.as_deref(), &x, self.n_out);
        }
        x
    }
}

/// `w · x + b` for a `[rows][x.len()]` matrix.
fn linear(w: &[f32], b: Option<&[f32]>, x: &[f32], rows: usize) -> Vec<f32> {
    (0..rows)
        .map(|r| {
            let dot: f64 = w[r * x.len()..(r + 1) * x.len()].iter().zip(x).map(|(&a, &v)| f64::from(a) * f64::from(v)).sum();
            (dot + b.map_or(0.0, |b| f64::from(b[r]))) as f32
        })
        .collect()
}

impl<B: Backend> BertWeights<B> {
    pub(crate) fn load(file: &Arc<GgufFile>, backend: &B, c: &ModelConfig) -> Result<BertWeights<B>, ModelError> {
        let l = Loader::new(file, backend);
        let e = c.n_embd;
        let (q_out, kd, vd) = (c.n_head * c.head_dim_k, c.k_dim(), c.v_dim());
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, e)?;
        let token_type0 = l.first_row_opt("token_types.weight", e)?;
        let position_embd = l.matrix("position_embd.weight", c.n_ctx_train, e)?;
        let embd_norm = LayerNorm::load(&l, "token_embd_norm", e)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(BertLayer {
                wq: l.matrix(&n("attn_q.weight"), q_out, e)?,
                bq: l.vector_opt(&n("attn_q.bias"), q_out)?,
                wk: l.matrix(&n("attn_k.weight"), kd, e)?,
                bk: l.vector_opt(&n("attn_k.bias"), kd)?,
                wv: l.matrix(&n("attn_v.weight"), vd, e)?,
                bv: l.vector_opt(&n("attn_v.bias"), vd)?,
                wo: l.matrix(&n("attn_output.weight"), e, c.n_head * c.head_dim_v)?,
                bo: l.vector_opt(&n("attn_output.bias"), e)?,
                attn_out_norm: LayerNorm::load(&l, &n("attn_output_norm"), e)?,
                ffn_up: l.matrix(&n("ffn_up.weight"), c.n_ff, e)?,
                ffn_up_b: l.vector_opt(&n("ffn_up.bias"), c.n_ff)?,
                ffn_down: l.matrix(&n("ffn_down.weight"), e, c.n_ff)?,
                ffn_down_b: l.vector_opt(&n("ffn_down.bias"), e)?,
                layer_out_norm: LayerNorm::load(&l, &n("layer_output_norm"), e)?,
            });
        }
        let classifier = Classifier::load(&l, file, c)?;
        Ok(BertWeights { token_embd, token_type0, position_embd, embd_norm, layers, classifier })
    }
}

/// Checks the sequences and returns the start row of each.
fn check(c: &ModelConfig, seqs: &[&[TokenId]]) -> Result<Vec<usize>, ModelError> {
    if seqs.is_empty() {
        return Err(ModelError::BadBatch("no sequences".into()));
    }
    let mut starts = Vec::with_capacity(seqs.len());
    let mut n = 0;
    for (i, s) in seqs.iter().enumerate() {
        if s.is_empty() {
            return Err(ModelError::BadBatch(format!("sequence {i} is empty")));
        }
        if s.len() > c.n_ctx_train {
            return Err(ModelError::BadBatch(format!(
                "sequence {i} has {} tokens, more than the {} positions of {}.context_length",
                s.len(),
                c.n_ctx_train,
                c.arch
            )));
        }
        if let Some(&t) = s.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ModelError::BadBatch(format!("sequence {i}: token {t} is outside the vocabulary of {}", c.n_vocab)));
        }
        starts.push(n);
        n += s.len();
    }
    Ok(starts)
}

/// The final hidden state of every token of `seqs`: the sequences' rows one after the other,
/// `n_embd` values each.
pub(crate) fn forward<B: Backend>(b: &B, c: &ModelConfig, w: &BertWeights<B>, seqs: &[&[TokenId]]) -> Result<Vec<f32>, ModelError> {
    let starts = check(c, seqs)?;
    let (e, eps) = (c.n_embd, c.norm_eps);
    let tokens: Vec<RowInput> = seqs.iter().flat_map(|s| s.iter().map(|&t| RowInput::Token(t))).collect();
    let positions: Vec<RowInput> = seqs.iter().flat_map(|s| (0..s.len() as u32).map(RowInput::Token)).collect();
    let n = tokens.len();
    // each row attends to the whole of its own sequence: the batch rows from its start
    let rows: Vec<AttentionRow> = seqs
        .iter()
        .zip(&starts)
        .flat_map(|(s, &start)| std::iter::repeat_n(AttentionRow { kv: start, positions: 0..s.len() }, s.len()))
        .collect();

    // token + token type 0, then + position, in llama.cpp's order of additions
    let mut x = b.get_rows(&w.token_embd, &tokens)?; // n x e
    if let Some(t0) = &w.token_type0 {
        let t0s: Vec<f32> = t0.iter().copied().cycle().take(n * e).collect();
        b.add_scaled(&mut x, &b.upload_tensor(n, e, &t0s)?, 1.0)?;
    }
    let mut pe = b.get_rows(&w.position_embd, &positions)?; // n x e
    b.add_scaled(&mut pe, &x, 1.0)?;
    w.embd_norm.apply(b, &pe, eps, &mut x)?;

    let shape = c.attention_shape();
    // An encoder's feed-forward block has no gate: the activation applies to `up` itself.
    let act = c.facts.activation;
    let mut ffn_in = b.zeros(n, e)?;
    for layer in &w.layers {
        let [q, k, v] = project_each(b, [&layer.wq, &layer.wk, &layer.wv], [layer.bq.as_ref(), layer.bk.as_ref(), layer.bv.as_ref()], &x)?;
        let mut o = attention_out(b, &q, KvSource::Batch { k: &k, v: &v }, &rows, &shape, &layer.wo, layer.bo.as_ref())?;
        b.add_scaled(&mut o, &x, 1.0)?;
        layer.attn_out_norm.apply(b, &o, eps, &mut ffn_in)?;

        let mut d = plain_ffn(b, act, (&layer.ffn_up, layer.ffn_up_b.as_ref()), (&layer.ffn_down, layer.ffn_down_b.as_ref()), &ffn_in)?;
        b.add_scaled(&mut d, &ffn_in, 1.0)?;
        layer.layer_out_norm.apply(b, &d, eps, &mut x)?;
    }
    Ok(b.to_host(x)?)
}
