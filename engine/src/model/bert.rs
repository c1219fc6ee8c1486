//! BERT encoders: shape-checked weights and the forward pass from token ids to the final hidden
//! state of every token. One call takes several sequences at once; each attends to the whole of
//! itself (no causal mask) and to nothing else. An encoder reads its whole input at once, so
//! attention runs straight on the batch's keys and values and no KV cache is involved.
//!
//! Batch invariance: embeddings, norms, projections and activations treat each row alone, and a
//! token's attention reads only its own sequence, in position order, so a sequence's hidden
//! states are bitwise the same alone or beside others.

use rayon::prelude::*;

use super::arch::Activation;
use super::config::ModelConfig;
use super::decoder::{project, project_each};
use super::error::ModelError;
use super::weights::{Loader, Matrix};
use crate::backend::cpu::activation::{gelu, gelu_erf, silu};
use crate::backend::cpu::attention::{attend_group, with_scratch, KvRow, KvRows};
use crate::backend::cpu::get_rows;
use crate::backend::cpu::norm::layer_norm;
use crate::gguf::GgufFile;
use crate::tokenizer::TokenId;

/// A layer norm's scale and shift.
pub struct LayerNorm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

impl LayerNorm {
    fn load(l: &Loader, name: &str, n: usize) -> Result<LayerNorm, ModelError> {
        Ok(LayerNorm { weight: l.vector(&format!("{name}.weight"), n)?, bias: l.vector(&format!("{name}.bias"), n)? })
    }

    fn apply(&self, x: &[f32], eps: f32, out: &mut [f32]) {
        layer_norm(x, &self.weight, &self.bias, eps, out);
    }
}

/// The weights of one encoder layer. Biases are optional, as llama.cpp loads them.
pub struct BertLayer {
    pub wq: Matrix,
    pub bq: Option<Vec<f32>>,
    pub wk: Matrix,
    pub bk: Option<Vec<f32>>,
    pub wv: Matrix,
    pub bv: Option<Vec<f32>>,
    pub wo: Matrix,
    pub bo: Option<Vec<f32>>,
    pub attn_out_norm: LayerNorm,
    pub ffn_up: Matrix,
    pub ffn_up_b: Option<Vec<f32>>,
    pub ffn_down: Matrix,
    pub ffn_down_b: Option<Vec<f32>>,
    pub layer_out_norm: LayerNorm,
}

/// The weights of a BERT encoder.
pub struct BertWeights {
    pub token_embd: Matrix,
    /// Row 0 of `token_types.weight`: every token is in "sentence A", as in llama.cpp.
    pub token_type0: Option<Vec<f32>>,
    /// One row per position up to the trained context length.
    pub position_embd: Matrix,
    pub embd_norm: LayerNorm,
    pub layers: Vec<BertLayer>,
}

impl BertWeights {
    pub fn load(file: &GgufFile, c: &ModelConfig) -> Result<BertWeights, ModelError> {
        let l = Loader { file };
        let e = c.n_embd;
        let (q_out, kd, vd) = (c.n_head * c.head_dim_k, c.k_dim(), c.v_dim());
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, e)?;
        let token_type0 = match l.matrix_any_rows_opt("token_types.weight", e)? {
            Some(m) => {
                let mut row = vec![0.0f32; e];
                get_rows(&m.view(file), &[0], &mut row)?;
                Some(row)
            }
            None => None,
        };
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
        Ok(BertWeights { token_embd, token_type0, position_embd, embd_norm, layers })
    }
}

/// The keys and values of one sequence of the batch, by position within the sequence.
struct SeqRows<'a> {
    k: &'a [f32],
    v: &'a [f32],
    k_dim: usize,
    v_dim: usize,
}

impl KvRows for SeqRows<'_> {
    fn key(&self, pos: usize) -> KvRow<'_> {
        KvRow::F32(&self.k[pos * self.k_dim..(pos + 1) * self.k_dim])
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        KvRow::F32(&self.v[pos * self.v_dim..(pos + 1) * self.v_dim])
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
pub(crate) fn forward(file: &GgufFile, c: &ModelConfig, w: &BertWeights, seqs: &[&[TokenId]]) -> Result<Vec<f32>, ModelError> {
    let starts = check(c, seqs)?;
    let e = c.n_embd;
    let tokens: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
    let positions: Vec<u32> = seqs.iter().flat_map(|s| 0..s.len() as u32).collect();
    let n = tokens.len();
    // the sequence each row belongs to: (its start row, its length)
    let row_seq: Vec<(usize, usize)> = seqs.iter().zip(&starts).flat_map(|(s, &st)| std::iter::repeat_n((st, s.len()), s.len())).collect();

    // token + token type 0, then + position, in llama.cpp's order of additions
    let mut x = vec![0.0f32; n * e];
    get_rows(&w.token_embd.view(file), &tokens, &mut x)?;
    if let Some(t0) = &w.token_type0 {
        x.chunks_exact_mut(e).for_each(|row| row.iter_mut().zip(t0).for_each(|(a, &b)| *a += b));
    }
    let mut pe = vec![0.0f32; n * e];
    get_rows(&w.position_embd.view(file), &positions, &mut pe)?;
    pe.iter_mut().zip(&x).for_each(|(p, &v)| *p += v);
    w.embd_norm.apply(&pe, c.norm_eps, &mut x);

    let shape = c.attention_shape();
    // An encoder's feed-forward block has no gate: the activation applies to `up` itself.
    let act: fn(f32) -> f32 = match c.facts.activation {
        Activation::GeluErf => gelu_erf,
        Activation::GeluGated => gelu,
        Activation::SiluGated => silu,
    };
    let (qd, kd, vd, hv) = (c.n_head * c.head_dim_k, c.k_dim(), c.v_dim(), c.head_dim_v);
    let mut ffn_in = vec![0.0f32; n * e];
    for layer in &w.layers {
        let [q, k, v] =
            project_each(file, [&layer.wq, &layer.wk, &layer.wv], &x, n, [layer.bq.as_deref(), layer.bk.as_deref(), layer.bv.as_deref()])?;
        let mut attn = vec![0.0f32; n * c.n_head * hv];
        let group = c.n_head / c.n_head_kv;
        attn.par_chunks_mut(group * hv).enumerate().for_each(|(idx, out)| {
            let (i, g) = (idx / c.n_head_kv, idx % c.n_head_kv);
            let (start, len) = row_seq[i];
            let rows = SeqRows { k: &k[start * kd..(start + len) * kd], v: &v[start * vd..(start + len) * vd], k_dim: kd, v_dim: vd };
            with_scratch(|scratch| attend_group(&q[i * qd..(i + 1) * qd], g, &shape, 0..len, &rows, out, scratch));
        });
        let mut o = project(file, &layer.wo, &attn, n, layer.bo.as_deref())?;
        o.iter_mut().zip(&x).for_each(|(a, &b)| *a += b);
        layer.attn_out_norm.apply(&o, c.norm_eps, &mut ffn_in);

        let mut u = project(file, &layer.ffn_up, &ffn_in, n, layer.ffn_up_b.as_deref())?;
        u.par_iter_mut().for_each(|a| *a = act(*a));
        let mut d = project(file, &layer.ffn_down, &u, n, layer.ffn_down_b.as_deref())?;
        d.iter_mut().zip(&ffn_in).for_each(|(a, &b)| *a += b);
        layer.layer_out_norm.apply(&d, c.norm_eps, &mut x);
    }
    Ok(x)
}
