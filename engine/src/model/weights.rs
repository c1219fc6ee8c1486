//! Shape-checked weight loading: every tensor a model uses is looked up by name, its shape
//! compared with what the hyperparameters imply and its type checked computable, once, at load.
//! Matrices stay in the memory map; norm vectors and biases (small) are converted to f32.

use super::config::ModelConfig;
use super::error::ModelError;
use crate::backend::cpu::WeightMatrix;
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant::{self, GgmlType};

/// A 2-D weight in the file: `rows` rows of `cols` values (ggml `ne = [cols, rows]`).
#[derive(Clone, Debug)]
pub struct Matrix {
    pub info: TensorInfo,
    pub rows: usize,
    pub cols: usize,
}

impl Matrix {
    pub fn view<'f>(&self, file: &'f GgufFile) -> WeightMatrix<'f> {
        WeightMatrix::new(self.info.ty, self.rows, self.cols, file.tensor_data(&self.info)).expect("shape and size were checked at load")
    }

    pub fn ty(&self) -> GgmlType {
        self.info.ty
    }
}

pub(crate) struct Loader<'a> {
    pub file: &'a GgufFile,
}

impl Loader<'_> {
    fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.file.tensor(name)
    }

    fn check_type(&self, t: &TensorInfo) -> Result<(), ModelError> {
        if quant::ops(t.ty).is_err() {
            return Err(ModelError::TensorType { name: t.name.clone(), ty: t.ty });
        }
        Ok(())
    }

    /// A matrix of `rows` x `cols`, if present.
    pub fn matrix_opt(&self, name: &str, rows: usize, cols: usize) -> Result<Option<Matrix>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        let expected = vec![cols as u64, rows as u64];
        if t.dims != expected {
            return Err(ModelError::TensorShape { name: name.into(), expected, got: t.dims.clone() });
        }
        self.check_type(t)?;
        if t.ty.row_bytes(cols).is_none() {
            return Err(ModelError::TensorType { name: name.into(), ty: t.ty });
        }
        Ok(Some(Matrix { info: t.clone(), rows, cols }))
    }

    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        self.matrix_opt(name, rows, cols)?.ok_or_else(|| ModelError::MissingTensor(name.into()))
    }

    /// A matrix of rows of `cols` values whose row count the file decides (at least one), if
    /// present: BERT's token-type table, whose size is a converter's choice.
    pub fn matrix_any_rows_opt(&self, name: &str, cols: usize) -> Result<Option<Matrix>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        match t.dims[..] {
            [c, r] if c == cols as u64 && r >= 1 => match usize::try_from(r) {
                Ok(rows) => self.matrix_opt(name, rows, cols),
                Err(_) => Err(ModelError::TensorShape { name: name.into(), expected: vec![cols as u64, r], got: t.dims.clone() }),
            },
            _ => Err(ModelError::TensorShape { name: name.into(), expected: vec![cols as u64, 1], got: t.dims.clone() }),
        }
    }

    /// A vector of `n` values converted to f32, if present.
    pub fn vector_opt(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
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

    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        self.vector_opt(name, n)?.ok_or_else(|| ModelError::MissingTensor(name.into()))
    }
}

/// The weights of one decoder layer.
pub struct DecoderLayer {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Matrix,
    pub attn_post_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub ffn_gate: Matrix,
    pub ffn_up: Matrix,
    pub ffn_down: Matrix,
    pub ffn_post_norm: Option<Vec<f32>>,
}

/// The weights of a decoder-only model (llama, granite, qwen2, gemma3).
pub struct DecoderWeights {
    pub token_embd: Matrix,
    pub layers: Vec<DecoderLayer>,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or the token embeddings when the model ties them.
    pub output: Matrix,
}

impl DecoderWeights {
    pub fn load(file: &GgufFile, c: &ModelConfig) -> Result<DecoderWeights, ModelError> {
        let l = Loader { file };
        let f = &c.facts;
        let (e, q_out, kv_k, kv_v) = (c.n_embd, c.n_head * c.head_dim_k, c.k_dim(), c.v_dim());
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, e)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let required = |present: bool, name: String, v: Option<Vec<f32>>| -> Result<Option<Vec<f32>>, ModelError> {
                match (present, v) {
                    (true, None) => Err(ModelError::MissingTensor(name)),
                    (_, v) => Ok(v),
                }
            };
            layers.push(DecoderLayer {
                attn_norm: l.vector(&n("attn_norm.weight"), e)?,
                wq: l.matrix(&n("attn_q.weight"), q_out, e)?,
                wk: l.matrix(&n("attn_k.weight"), kv_k, e)?,
                wv: l.matrix(&n("attn_v.weight"), kv_v, e)?,
                bq: l.vector_opt(&n("attn_q.bias"), q_out)?,
                bk: l.vector_opt(&n("attn_k.bias"), kv_k)?,
                bv: l.vector_opt(&n("attn_v.bias"), kv_v)?,
                q_norm: required(f.qk_norm, n("attn_q_norm.weight"), l.vector_opt(&n("attn_q_norm.weight"), c.head_dim_k)?)?,
                k_norm: required(f.qk_norm, n("attn_k_norm.weight"), l.vector_opt(&n("attn_k_norm.weight"), c.head_dim_k)?)?,
                wo: l.matrix(&n("attn_output.weight"), e, c.n_head * c.head_dim_v)?,
                attn_post_norm: required(
                    f.post_norms,
                    n("post_attention_norm.weight"),
                    l.vector_opt(&n("post_attention_norm.weight"), e)?,
                )?,
                ffn_norm: l.vector(&n("ffn_norm.weight"), e)?,
                ffn_gate: l.matrix(&n("ffn_gate.weight"), c.n_ff, e)?,
                ffn_up: l.matrix(&n("ffn_up.weight"), c.n_ff, e)?,
                ffn_down: l.matrix(&n("ffn_down.weight"), e, c.n_ff)?,
                ffn_post_norm: required(f.post_norms, n("post_ffw_norm.weight"), l.vector_opt(&n("post_ffw_norm.weight"), e)?)?,
            });
        }
        let output_norm = l.vector("output_norm.weight", e)?;
        let output = match l.matrix_opt("output.weight", c.n_vocab, e)? {
            Some(m) => m,
            None => token_embd.clone(),
        };
        Ok(DecoderWeights { token_embd, layers, output_norm, output })
    }
}
