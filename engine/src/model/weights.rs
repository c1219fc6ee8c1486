//! Shape-checked weight loading: every tensor a model uses is looked up by name, its shape
//! compared with what the hyperparameters imply and its type checked computable, once, at load.
//! Matrices stay in the memory map; norm vectors and biases (small) are converted to f32.

//! Shape-checked weight loading: every tensor a model uses is looked up by name, its shape
//! compared with what the hyperparameters imply and its type checked computable, once, at load,
//! then uploaded to the model's backend (the CPU keeps matrices in the memory map). Norm vectors
//! and biases (small) are converted to f32 first.

use std::sync::Arc;

use super::config::ModelConfig;
use super::error::ModelError;
use crate::backend::Backend;
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant;

/// Row `r` of tensor `t` (rows of `cols` values), dequantized on the host.
pub(crate) fn host_row(file: &GgufFile, t: &TensorInfo, cols: usize, r: usize) -> Result<Vec<f32>, ModelError> {
    let row_bytes = t.ty.row_bytes(cols).ok_or(ModelError::TensorType { name: t.name.clone(), ty: t.ty })?;
    let bytes = file
        .tensor_data(t)
        .get(r * row_bytes..(r + 1) * row_bytes)
        .ok_or_else(|| ModelError::BadBatch(format!("row {r} is outside tensor {}", t.name)))?;
    let mut out = vec![0.0f32; cols];
    (quant::ops(t.ty)?.dequantize)(bytes, &mut out);
    Ok(out)
}

pub(crate) struct Loader<'a, B: Backend> {
    pub file: &'a Arc<GgufFile>,
    pub backend: &'a B,
}

impl<B: Backend> Loader<'_, B> {
    fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.file.tensor(name)
    }

    fn check_type(&self, t: &TensorInfo) -> Result<(), ModelError> {
        if quant::ops(t.ty).is_err() {
            return Err(ModelError::TensorType { name: t.name.clone(), ty: t.ty });
        }
        Ok(())
    }

    /// The tensor `name` if present, checked to be `rows` x `cols` of a computable type.
    fn matrix_info(&self, name: &str, rows: usize, cols: usize) -> Result<Option<&TensorInfo>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        let expected = vec![cols as u64, rows as u64];
        if t.dims != expected {
            return Err(ModelError::TensorShape { name: name.into(), expected, got: t.dims.clone() });
        }
        self.check_type(t)?;
        if t.ty.row_bytes(cols).is_none() {
            return Err(ModelError::TensorType { name: name.into(), ty: t.ty });
        }
        Ok(Some(t))
    }

    /// A matrix of `rows` x `cols` on the backend, if present.
    pub fn matrix_opt(&self, name: &str, rows: usize, cols: usize) -> Result<Option<B::Matrix>, ModelError> {
        match self.matrix_info(name, rows, cols)? {
            Some(t) => Ok(Some(self.backend.upload_matrix(self.file, t, rows, cols)?)),
            None => Ok(None),
        }
    }

    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<B::Matrix, ModelError> {
        self.matrix_opt(name, rows, cols)?.ok_or_else(|| ModelError::MissingTensor(name.into()))
    }

    /// Row 0 of a matrix of rows of `cols` values whose row count the file decides (at least
    /// one), as f32 on the host, if present: BERT's token-type table, whose size is a
    /// converter's choice.
    pub fn first_row_opt(&self, name: &str, cols: usize) -> Result<Option<Vec<f32>>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        let rows = match t.dims[..] {
            [c, r] if c == cols as u64 && r >= 1 => usize::try_from(r).map_err(|_| ModelError::TensorShape {
                name: name.into(),
                expected: vec![cols as u64, r],
                got: t.dims.clone(),
            })?,
            _ => return Err(ModelError::TensorShape { name: name.into(), expected: vec![cols as u64, 1], got: t.dims.clone() }),
        };
        let t = self.matrix_info(name, rows, cols)?.expect("present");
        Ok(Some(host_row(self.file, t, cols, 0)?))
    }

    /// A matrix of `rows` x `cols` converted to f32 on the host (a position table added once).
    pub fn host_matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.matrix_info(name, rows, cols)?.ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        let mut out = vec![0.0f32; rows * cols];
        (quant::ops(t.ty)?.dequantize)(self.file.tensor_data(t), &mut out);
        Ok(out)
    }

    /// A vector of `n` values converted to f32 on the host, if present.
    pub fn host_vector_opt(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        if t.n_elements != n as u64 || t.dims.iter().filter(|&&d| d != 1).count() > 1 {
            return Err(ModelError::TensorShape { name: name.into(), expected: vec![n as u64], got: t.dims.clone() });
        }
        self.check_type(t)?;
        let mut out = vec![0.0f32; n];
        let ops = quant::ops(t.ty)?;
        if t.ty.row_bytes(n).is_none() {
            return Err(ModelError::TensorType { name: name.into(), ty: t.ty });
        }
        (ops.dequantize)(self.file.tensor_data(t), &mut out);
        Ok(Some(out))
    }

    /// A vector of `n` values on the backend, if present.
    pub fn vector_opt(&self, name: &str, n: usize) -> Result<Option<B::Vector>, ModelError> {
        match self.host_vector_opt(name, n)? {
            Some(v) => Ok(Some(self.backend.upload_vector(&v)?)),
            None => Ok(None),
        }
    }

    pub fn vector(&self, name: &str, n: usize) -> Result<B::Vector, ModelError> {
        self.vector_opt(name, n)?.ok_or_else(|| ModelError::MissingTensor(name.into()))
    }

    /// A vector the architecture requires (`required`), or may have.
    pub fn vector_if(&self, required: bool, name: &str, n: usize) -> Result<Option<B::Vector>, ModelError> {
        match self.vector_opt(name, n)? {
            None if required => Err(ModelError::MissingTensor(name.into())),
            v => Ok(v),
        }
    }
}

/// The weights of one decoder layer.
pub struct DecoderLayer<B: Backend> {
    pub attn_norm: B::Vector,
    pub wq: B::Matrix,
    pub wk: B::Matrix,
    pub wv: B::Matrix,
    pub bq: Option<B::Vector>,
    pub bk: Option<B::Vector>,
    pub bv: Option<B::Vector>,
    pub q_norm: Option<B::Vector>,
    pub k_norm: Option<B::Vector>,
    pub wo: B::Matrix,
    pub attn_post_norm: Option<B::Vector>,
    pub ffn_norm: B::Vector,
    pub ffn_gate: B::Matrix,
    pub ffn_up: B::Matrix,
    pub ffn_down: B::Matrix,
    pub ffn_post_norm: Option<B::Vector>,
}

/// The weights of a decoder-only model (llama, granite, qwen2, gemma3).
pub struct DecoderWeights<B: Backend> {
    pub token_embd: B::Matrix,
    pub layers: Vec<DecoderLayer<B>>,
    pub output_norm: B::Vector,
    /// `output.weight`, or the token embeddings when the model ties them.
    pub output: B::Matrix,
}

impl<B: Backend> DecoderWeights<B> {
    pub(crate) fn load(file: &Arc<GgufFile>, backend: &B, c: &ModelConfig) -> Result<DecoderWeights<B>, ModelError> {
        let l = Loader { file, backend };
        let f = &c.facts;
        let (e, q_out, kv_k, kv_v) = (c.n_embd, c.n_head * c.head_dim_k, c.k_dim(), c.v_dim());
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, e)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(DecoderLayer {
                attn_norm: l.vector(&n("attn_norm.weight"), e)?,
                wq: l.matrix(&n("attn_q.weight"), q_out, e)?,
                wk: l.matrix(&n("attn_k.weight"), kv_k, e)?,
                wv: l.matrix(&n("attn_v.weight"), kv_v, e)?,
                bq: l.vector_opt(&n("attn_q.bias"), q_out)?,
                bk: l.vector_opt(&n("attn_k.bias"), kv_k)?,
                bv: l.vector_opt(&n("attn_v.bias"), kv_v)?,
                q_norm: l.vector_if(f.qk_norm, &n("attn_q_norm.weight"), c.head_dim_k)?,
                k_norm: l.vector_if(f.qk_norm, &n("attn_k_norm.weight"), c.head_dim_k)?,
                wo: l.matrix(&n("attn_output.weight"), e, c.n_head * c.head_dim_v)?,
                attn_post_norm: l.vector_if(f.post_norms, &n("post_attention_norm.weight"), e)?,
                ffn_norm: l.vector(&n("ffn_norm.weight"), e)?,
                ffn_gate: l.matrix(&n("ffn_gate.weight"), c.n_ff, e)?,
                ffn_up: l.matrix(&n("ffn_up.weight"), c.n_ff, e)?,
                ffn_down: l.matrix(&n("ffn_down.weight"), e, c.n_ff)?,
                ffn_post_norm: l.vector_if(f.post_norms, &n("post_ffw_norm.weight"), e)?,
            });
        }
        let output_norm = l.vector("output_norm.weight", e)?;
        // a model that ties its output to the token embeddings reads the same tensor (on the
        // CPU the same bytes of the map)
        let output = match l.matrix_opt("output.weight", c.n_vocab, e)? {
            Some(m) => m,
            None => l.matrix("token_embd.weight", c.n_vocab, e)?,
        };
        let products: Vec<&B::Matrix> =
            layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down]).chain([&output]).collect();
        backend.prepare_products(&products)?;
        Ok(DecoderWeights { token_embd, layers, output_norm, output })
    }
}
