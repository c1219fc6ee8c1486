//! Shape-checked weight loading: every tensor a model uses is looked up by name, its shape
//! compared with what the hyperparameters imply and its type checked computable, once, at load,
//! then uploaded to the model's backend (the CPU keeps matrices in the memory map). Norm vectors
//! and biases (small) are converted to f32 first.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use super::arch::QkNorm;
use super::arch::Recurrent;
use super::blocks::Linear;
use super::config::ModelConfig;
use super::delta_net::DeltaNet;
use super::error::ModelError;
use super::lora::{AdapterInfo, AdapterWeights, EmbeddingShape, LoraSite};
use super::mamba2::Mamba2;
use super::mla::LatentAttention;
use super::moe::Experts;
use super::short_conv::ShortConv;
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

/// The vector `name` of `n` values converted to f32 on the host, if the file has it.
pub(crate) fn host_vector(file: &GgufFile, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
    let Some(t) = file.tensor(name) else { return Ok(None) };
    if t.n_elements != n as u64 || t.dims.iter().filter(|&&d| d != 1).count() > 1 {
        return Err(ModelError::TensorShape { name: name.into(), expected: vec![n as u64], got: t.dims.clone() });
    }
    let ops = quant::ops(t.ty).map_err(|_| ModelError::TensorType { name: t.name.clone(), ty: t.ty })?;
    if t.ty.row_bytes(n).is_none() {
        return Err(ModelError::TensorType { name: name.into(), ty: t.ty });
    }
    let mut out = vec![0.0f32; n];
    (ops.dequantize)(file.tensor_data(t), &mut out);
    Ok(Some(out))
}

pub(crate) struct Loader<'a, B: Backend> {
    pub file: &'a Arc<GgufFile>,
    pub backend: &'a B,
    /// The names of the tensors looked up that the file has.
    found: RefCell<HashSet<String>>,
    /// The projections loaded as [`Linear`]s, which LoRA adapters may correct.
    sites: RefCell<Vec<LoraSite>>,
}

impl<'a, B: Backend> Loader<'a, B> {
    pub fn new(file: &'a Arc<GgufFile>, backend: &'a B) -> Loader<'a, B> {
        Loader { file, backend, found: RefCell::default(), sites: RefCell::default() }
    }

    /// Registers rows `rows` of the `total_rows` x `cols` tensor `tensor` as a correctable
    /// projection, returning its site.
    fn site(&self, tensor: String, rows: std::ops::Range<usize>, total_rows: usize, cols: usize) -> usize {
        let mut sites = self.sites.borrow_mut();
        sites.push(LoraSite { tensor, rows, total_rows, cols, expert: None });
        sites.len() - 1
    }

    /// Registers rows `rows` of each of the `n` stacked `total_rows` x `cols` matrices of the
    /// expert stack `tensor` as correctable projections, one site per expert, returning the
    /// first expert's (expert `e`'s is that plus `e`).
    pub fn expert_sites(&self, tensor: &str, n: usize, rows: std::ops::Range<usize>, total_rows: usize, cols: usize) -> usize {
        let mut sites = self.sites.borrow_mut();
        let first = sites.len();
        for e in 0..n {
            sites.push(LoraSite { tensor: tensor.to_string(), rows: rows.clone(), total_rows, cols, expert: Some((e, n)) });
        }
        first
    }

    /// The correctable projections loaded so far, in site order.
    pub fn sites(&self) -> Vec<LoraSite> {
        self.sites.borrow().clone()
    }

    fn info(&self, name: &str) -> Option<&TensorInfo> {
        let t = self.file.tensor(name)?;
        self.found.borrow_mut().insert(name.to_string());
        Some(t)
    }

    /// An error naming the first tensor of the file no lookup asked for, other than those
    /// `ignored` accepts: a file with a part the graph does not compute would otherwise run
    /// and give wrong results.
    pub fn refuse_unused(&self, arch: &str, ignored: impl Fn(&str) -> bool) -> Result<(), ModelError> {
        let found = self.found.borrow();
        match self.file.tensors().iter().find(|t| !found.contains(&t.name) && !ignored(&t.name)) {
            Some(t) => Err(ModelError::UnusedTensor { name: t.name.clone(), arch: arch.to_string() }),
            None => Ok(()),
        }
    }

    /// The 3-D tensor `name` of `n` stacked `rows` x `cols` matrices (a mixture's experts, latent
    /// attention's heads), as one matrix per expert over the same bytes; a stack of one may be
    /// written as a 2-D tensor.
    pub fn expert_matrices(&self, name: &str, n: usize, rows: usize, cols: usize) -> Result<Vec<B::Matrix>, ModelError> {
        let t = self.stack_info(name, n, rows, cols)?.ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        Ok(self.backend.upload_stack(self.file, t, n, rows, cols)?)
    }

    /// The 3-D tensor `name` if present, checked to be `n` stacked `rows` x `cols` matrices (a
    /// stack of one may be written as a 2-D tensor) of a computable type.
    fn stack_info(&self, name: &str, n: usize, rows: usize, cols: usize) -> Result<Option<&TensorInfo>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        let expected = vec![cols as u64, rows as u64, n as u64];
        if t.dims != expected && !(n == 1 && t.dims == expected[..2]) {
            return Err(ModelError::TensorShape { name: name.into(), expected, got: t.dims.clone() });
        }
        self.check_type(t)?;
        Ok(Some(t))
    }

    /// The 3-D tensor `name` of `n` stacked matrices of `2 · rows` x `cols`, if present, each
    /// taken apart into its first and its second `rows` rows: fused experts (`ffn_gate_up_exps`,
    /// gate first), as one list of matrices per half.
    pub fn expert_matrix_halves(&self, name: &str, n: usize, rows: usize, cols: usize) -> Result<Option<[Vec<B::Matrix>; 2]>, ModelError> {
        let Some(t) = self.stack_info(name, n, 2 * rows, cols)? else { return Ok(None) };
        let parts = self.backend.upload_stack(self.file, t, 2 * n, rows, cols)?;
        let (mut first, mut second) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (i, m) in parts.into_iter().enumerate() {
            if i % 2 == 0 {
                first.push(m)
            } else {
                second.push(m)
            }
        }
        Ok(Some([first, second]))
    }

    /// The vector `name` of `cols` values, if present, as a matrix of one row (a projection to
    /// one value per token: a shared expert's gate).
    pub fn row_matrix_opt(&self, name: &str, cols: usize) -> Result<Option<B::Matrix>, ModelError> {
        let Some(t) = self.info(name) else { return Ok(None) };
        if t.n_elements != cols as u64 || t.row_len() != cols as u64 {
            return Err(ModelError::TensorShape { name: name.into(), expected: vec![cols as u64], got: t.dims.clone() });
        }
        self.check_type(t)?;
        Ok(self.upload_parts(t, [1], cols)?.pop())
    }

    /// Consecutive runs of `t`'s rows (of `cols` values), `parts` rows each, uploaded as matrices
    /// of their own over the same bytes.
    fn upload_parts(&self, t: &TensorInfo, parts: impl IntoIterator<Item = usize>, cols: usize) -> Result<Vec<B::Matrix>, ModelError> {
        let mut start = 0;
        parts
            .into_iter()
            .map(|rows| {
                let part = t
                    .rows(start as u64, rows as u64)
                    .ok_or_else(|| ModelError::MissingTensor(format!("{}: rows {start}..{}", t.name, start + rows)))?;
                start += rows;
                Ok(self.backend.upload_matrix(self.file, &part, rows, cols)?)
            })
            .collect()
    }

    /// The first `keep` rows of the `total` x `cols` matrix `name`, if present: only those rows
    /// are read, uploaded or repacked.
    pub fn leading_rows(&self, name: &str, total: usize, keep: usize, cols: usize) -> Result<Option<B::Matrix>, ModelError> {
        let Some(t) = self.matrix_info(name, total, cols)? else { return Ok(None) };
        Ok(self.upload_parts(t, [keep], cols)?.pop())
    }

    /// The per-tensor scale `name` (one value), if present.
    pub fn scalar_opt(&self, name: &str) -> Result<Option<f32>, ModelError> {
        Ok(self.host_vector_opt(name, 1)?.map(|v| v[0]))
    }

    /// The projection `prefix.weight` of `rows` x `cols`, with its optional `prefix.bias` and
    /// `prefix.scale`, if the file has the matrix.
    pub fn linear_opt(&self, prefix: &str, rows: usize, cols: usize) -> Result<Option<Linear<B>>, ModelError> {
        let name = format!("{prefix}.weight");
        let Some(w) = self.matrix_opt(&name, rows, cols)? else { return Ok(None) };
        let (b, scale) = (self.vector_opt(&format!("{prefix}.bias"), rows)?, self.scalar_opt(&format!("{prefix}.scale"))?);
        Ok(Some(Linear { w, b, scale, site: Some(self.site(name, 0..rows, rows, cols)) }))
    }

    pub fn linear(&self, prefix: &str, rows: usize, cols: usize) -> Result<Linear<B>, ModelError> {
        self.linear_opt(prefix, rows, cols)?.ok_or_else(|| ModelError::MissingTensor(format!("{prefix}.weight")))
    }

    /// The fused projection `prefix.weight` of `parts.iter().sum()` x `cols`, if present, taken
    /// apart into one projection per part (its rows in order, over the same bytes), each with
    /// its share of the bias and the whole projection's scale.
    pub fn linear_parts<const N: usize>(&self, prefix: &str, parts: [usize; N], cols: usize) -> Result<Option<[Linear<B>; N]>, ModelError> {
        let name = format!("{prefix}.weight");
        let Some(ws) = self.matrix_parts(&name, parts, cols)? else { return Ok(None) };
        let mut bs = self.vector_parts(&format!("{prefix}.bias"), parts)?.into_iter().flatten();
        let scale = self.scalar_opt(&format!("{prefix}.scale"))?;
        let total = parts.iter().sum();
        let mut start = 0;
        let mut sites = parts
            .map(|n| {
                start += n;
                self.site(name.clone(), start - n..start, total, cols)
            })
            .into_iter();
        Ok(Some(ws.map(|w| Linear { w, b: bs.next(), scale, site: sites.next() })))
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

    /// The matrix `name` of `parts.iter().sum()` x `cols`, if present, as one matrix per part
    /// (its rows in order) over the same bytes: a fused projection (`attn_qkv`, or `ffn_up`
    /// holding gate and up) taken apart.
    pub fn matrix_parts<const N: usize>(&self, name: &str, parts: [usize; N], cols: usize) -> Result<Option<[B::Matrix; N]>, ModelError> {
        let Some(t) = self.matrix_info(name, parts.iter().sum(), cols)? else { return Ok(None) };
        let ms = self.upload_parts(t, parts, cols)?;
        Ok(Some(ms.try_into().unwrap_or_else(|_| unreachable!("one matrix per part"))))
    }

    /// The vector `name` of `parts.iter().sum()` values, if present, as one vector per part: a
    /// fused projection's bias taken apart.
    pub fn vector_parts<const N: usize>(&self, name: &str, parts: [usize; N]) -> Result<Option<[B::Vector; N]>, ModelError> {
        let Some(all) = self.host_vector_opt(name, parts.iter().sum())? else { return Ok(None) };
        let mut rest = &all[..];
        let mut out = Vec::with_capacity(N);
        for n in parts {
            let (part, tail) = rest.split_at(n);
            out.push(self.backend.upload_vector(part)?);
            rest = tail;
        }
        Ok(Some(out.try_into().unwrap_or_else(|_| unreachable!("one vector per part"))))
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

    /// [`Loader::host_matrix`] of a tensor the file may lack.
    pub fn host_matrix_opt(&self, name: &str, rows: usize, cols: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if self.info(name).is_none() {
            return Ok(None);
        }
        self.host_matrix(name, rows, cols).map(Some)
    }

    /// A vector of `n` values converted to f32 on the host, if present.
    pub fn host_vector_opt(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if self.info(name).is_none() {
            return Ok(None);
        }
        host_vector(self.file, name, n)
    }

    /// An `n_expert` x `n` matrix of f32 values, if present, as one tensor on the backend (the
    /// experts' biases, `ffn_*_exps.bias`: gpt-oss; row `e` is expert `e`'s).
    pub fn expert_rows_opt(&self, name: &str, n_expert: usize, n: usize) -> Result<Option<B::Tensor>, ModelError> {
        if self.info(name).is_none() {
            return Ok(None);
        }
        let all = self.host_matrix(name, n_expert, n)?;
        Ok(Some(self.backend.upload_tensor(n_expert, n, &all)?))
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

    /// The tensor `name` of exactly the dimensions `dims` as one vector of all its values on the
    /// backend (Mamba-2's per-head `{1, heads}` and per-group `{size, groups}` tensors).
    pub fn shaped_vector(&self, name: &str, dims: &[u64]) -> Result<B::Vector, ModelError> {
        let t = self.info(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        if t.dims != dims {
            return Err(ModelError::TensorShape { name: name.into(), expected: dims.to_vec(), got: t.dims.clone() });
        }
        let n = dims.iter().product::<u64>() as usize;
        let ops = quant::ops(t.ty).map_err(|_| ModelError::TensorType { name: name.into(), ty: t.ty })?;
        if t.ty.row_bytes(n).is_none() {
            return Err(ModelError::TensorType { name: name.into(), ty: t.ty });
        }
        let mut values = vec![0.0f32; n];
        (ops.dequantize)(self.file.tensor_data(t), &mut values);
        Ok(self.backend.upload_vector(&values)?)
    }
}

/// The weights of one decoder layer.
pub struct DecoderLayer<B: Backend> {
    /// `None` where the architecture has no pre-norms (OLMo 2).
    pub attn_norm: Option<B::Vector>,
    /// What mixes the sequence's positions: attention, or a recurrent block.
    pub mixer: Mixer<B>,
    pub attn_post_norm: Option<B::Vector>,
    pub ffn_norm: Option<B::Vector>,
    pub ffn: FeedForward<B>,
    pub ffn_post_norm: Option<B::Vector>,
}

/// A layer's mixer of positions.
pub enum Mixer<B: Backend> {
    Attention {
        /// How the layer makes its queries, keys and values.
        projections: Projections<B>,
        o: Linear<B>,
        /// One logit per query head that joins the attention softmax without a value (gpt-oss).
        sinks: Option<B::Vector>,
    },
    /// LFM2's gated short convolution, with a state per sequence.
    ShortConv(Box<ShortConv<B>>),
    /// Mamba-2's selective state space, with its states per sequence.
    Mamba2(Box<Mamba2<B>>),
    /// The gated delta net's linear attention, with its states per sequence.
    DeltaNet(Box<DeltaNet<B>>),
}

impl<B: Backend> Mixer<B> {
    fn matrices(&self) -> Vec<&B::Matrix> {
        match self {
            Mixer::Attention { projections, o, .. } => projections.matrices().into_iter().chain([&o.w]).collect(),
            Mixer::ShortConv(w) => w.matrices(),
            Mixer::Mamba2(w) => w.matrices(),
            Mixer::DeltaNet(w) => w.matrices(),
        }
    }
}

/// A layer's query, key and value projections: one per kind, with optional per-head norms of
/// the queries and keys, or multi-head latent attention's.
pub enum Projections<B: Backend> {
    /// `norm_after_rope`: the q/k norms apply to the rotated heads (Llama 4's, of weights 1).
    Heads {
        q: Linear<B>,
        k: Linear<B>,
        v: Linear<B>,
        q_norm: Option<B::Vector>,
        k_norm: Option<B::Vector>,
        norm_after_rope: bool,
    },
    Latent(Box<LatentAttention<B>>),
}

impl<B: Backend> Projections<B> {
    fn matrices(&self) -> Vec<&B::Matrix> {
        match self {
            Projections::Heads { q, k, v, .. } => vec![&q.w, &k.w, &v.w],
            Projections::Latent(l) => l.matrices(),
        }
    }
}

/// A layer's feed-forward block: one gated block, or a mixture of experts.
pub enum FeedForward<B: Backend> {
    Dense { gate: Linear<B>, up: Linear<B>, down: Linear<B> },
    Experts(Box<Experts<B>>),
}

impl<B: Backend> FeedForward<B> {
    fn matrices(&self) -> Vec<&B::Matrix> {
        match self {
            FeedForward::Dense { gate, up, down } => vec![&gate.w, &up.w, &down.w],
            FeedForward::Experts(x) => x.matrices().collect(),
        }
    }
}

/// The weights of a decoder-only model (llama, granite, qwen2, qwen3, ...).
pub struct DecoderWeights<B: Backend> {
    pub token_embd: B::Matrix,
    pub layers: Vec<DecoderLayer<B>>,
    pub output_norm: B::Vector,
    /// `output.weight`, or the token embeddings when the model ties them.
    pub output: Linear<B>,
    /// Token ids the output gives logits for: the whole vocabulary, or its first ids where a
    /// draft model keeps a head of those only (`DecoderWeights::limit_logits`).
    pub n_logits: usize,
    /// The projections LoRA adapters may correct (each [`Linear`]'s `site`).
    pub sites: Vec<LoraSite>,
    /// The adapters loaded beside the weights, in load order.
    pub(crate) adapters: Vec<AdapterWeights<B>>,
}

/// Tensors a decoder file may carry that its graph does not read here: per-input scales of
/// FP8 conversions (llama.cpp loads them and leaves them unused too), a classifier head
/// (`cls.*`: reranking, not generation), and the RoPE factors (read by the configuration).
fn ignored_by_decoders(name: &str) -> bool {
    name.ends_with(".input_scale")
        || name.starts_with("cls.")
        || matches!(name, "rope_freqs.weight" | "rope_factors_long.weight" | "rope_factors_short.weight")
}

/// The output's first `n` rows (`n` below the vocabulary), with their share of its bias and its
/// scale: `output.*`, or the token embeddings it is tied to. Only those rows are read. No LoRA
/// site: an adapter's correction of the output would be of the whole vocabulary.
fn head<B: Backend>(l: &Loader<'_, B>, c: &ModelConfig, n: usize) -> Result<Linear<B>, ModelError> {
    if n == 0 {
        return Err(ModelError::Head("it needs at least one token id".into()));
    }
    let name = if l.file.tensor("output.weight").is_some() { "output" } else { "token_embd" };
    let w = l
        .leading_rows(&format!("{name}.weight"), c.n_vocab, n, c.n_embd)?
        .ok_or_else(|| ModelError::MissingTensor(format!("{name}.weight")))?;
    let b = l.vector_parts(&format!("{name}.bias"), [n, c.n_vocab - n])?.map(|[b, _]| b);
    let scale = if name == "output" { l.scalar_opt("output.scale")? } else { None };
    Ok(Linear { w, b, scale, site: None })
}

impl<B: Backend> DecoderWeights<B> {
    /// The decoder's weights, its output giving logits for the token ids below `n_logits` (the
    /// whole vocabulary when it is at least its size; see [`DecoderWeights::limit_logits`]).
    pub(crate) fn load(file: &Arc<GgufFile>, backend: &B, c: &ModelConfig, n_logits: usize) -> Result<DecoderWeights<B>, ModelError> {
        let l = Loader::new(file, backend);
        let f = &c.facts;
        let (e, q_out, kv_k, kv_v) = (c.n_embd, c.n_head * c.head_dim_k, c.k_dim(), c.v_dim());
        let token_embd = l.matrix("token_embd.weight", c.n_vocab, e)?;
        // a norm over each head, or over the whole row of heads
        let (q_norm_len, k_norm_len) = match f.qk_norm {
            QkNorm::AcrossHeads => (q_out, kv_k),
            QkNorm::PerHead | QkNorm::PerHeadIfPresent | QkNorm::None => (c.head_dim_k, c.head_dim_k),
        };
        // a norm the architecture has is required; one it has not is not read (GLM-4.5 names its
        // FFN input norm `post_attention_norm`)
        let pre_norm = |name: &str| if f.pre_norms { l.vector(name, e).map(Some) } else { Ok(None) };
        let post_norm = |name: &str| if f.post_norms { l.vector(name, e).map(Some) } else { Ok(None) };
        let qk_norm = |name: &str, n: usize| match f.qk_norm {
            QkNorm::None => Ok(None),
            QkNorm::PerHeadIfPresent => l.vector_opt(name, n),
            QkNorm::PerHead | QkNorm::AcrossHeads => l.vector(name, n).map(Some),
        };
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let attention = |l: &Loader<'_, B>| -> Result<Projections<B>, ModelError> {
                Ok(match &c.latent {
                    Some(latent) => Projections::Latent(Box::new(LatentAttention::load(l, i, latent, c.n_head, e)?)),
                    None => {
                        // q, k and v as three projections, or one fused `attn_qkv` (Phi-3, GLM-4) taken apart
                        let [q, k, v] = match l.linear_parts(&n("attn_qkv"), [q_out, kv_k, kv_v], e)? {
                            Some(qkv) => qkv,
                            // a gated attention's queries carry each head's gate after its queries
                            None => {
                                let q_rows = if f.gated_attention { 2 * q_out } else { q_out };
                                [l.linear(&n("attn_q"), q_rows, e)?, l.linear(&n("attn_k"), kv_k, e)?, l.linear(&n("attn_v"), kv_v, e)?]
                            }
                        };
                        if c.unit_qk_norm_after_rope && c.layer_rotates(i) {
                            // llama.cpp's unweighted RMS norm: times weights of 1, the same bits
                            let ones = || l.backend.upload_vector(&vec![1.0; c.head_dim_k]);
                            return Ok(Projections::Heads { q, k, v, q_norm: Some(ones()?), k_norm: Some(ones()?), norm_after_rope: true });
                        }
                        let q_norm = qk_norm(&n("attn_q_norm.weight"), q_norm_len)?;
                        let k_norm = qk_norm(&n("attn_k_norm.weight"), k_norm_len)?;
                        Projections::Heads { q, k, v, q_norm, k_norm, norm_after_rope: false }
                    }
                })
            };
            let mixer = match (c.recurrent_layers[i], f.recurrent, c.short_conv_taps, &c.ssm) {
                (true, Recurrent::ShortConv, Some(taps), _) => Mixer::ShortConv(Box::new(ShortConv::load(&l, i, taps, e)?)),
                (true, Recurrent::Mamba2, _, Some(ssm)) => Mixer::Mamba2(Box::new(Mamba2::load(&l, i, ssm, e)?)),
                (true, Recurrent::DeltaNet, _, Some(ssm)) => Mixer::DeltaNet(Box::new(DeltaNet::load(&l, i, ssm, e)?)),
                _ => Mixer::Attention {
                    projections: attention(&l)?,
                    o: l.linear(&n("attn_output"), e, c.n_head * c.latent.map_or(c.head_dim_v, |l| l.v_head))?,
                    sinks: if f.attention_sinks { Some(l.vector(&n("attn_sinks.weight"), c.n_head)?) } else { None },
                },
            };
            let experts = match &c.experts {
                Some(x) => Experts::load(&l, i, x, e)?,
                None => None,
            };
            let ffn = match experts {
                Some(x) => FeedForward::Experts(Box::new(x)),
                None => {
                    // gate and up as two projections, or one `ffn_up` of both (gate first: Phi-3, GLM-4)
                    let [gate, up] = match l.linear_opt(&n("ffn_gate"), c.n_ff, e)? {
                        Some(gate) => [gate, l.linear(&n("ffn_up"), c.n_ff, e)?],
                        None => l
                            .linear_parts(&n("ffn_up"), [c.n_ff, c.n_ff], e)?
                            .ok_or_else(|| ModelError::MissingTensor(n("ffn_gate.weight")))?,
                    };
                    FeedForward::Dense { gate, up, down: l.linear(&n("ffn_down"), e, c.n_ff)? }
                }
            };
            layers.push(DecoderLayer {
                attn_norm: pre_norm(&n("attn_norm.weight"))?,
                mixer,
                attn_post_norm: post_norm(&n("post_attention_norm.weight"))?,
                ffn_norm: pre_norm(&n(&format!("{}.weight", f.ffn_norm_name)))?,
                ffn,
                ffn_post_norm: post_norm(&n("post_ffw_norm.weight"))?,
            });
        }
        let output_norm = l.vector(&format!("{}.weight", f.output_norm_name), e)?;
        // a model that ties its output to the token embeddings reads the same tensor (on the
        // CPU the same bytes of the map)
        let output = if n_logits < c.n_vocab {
            head(&l, c, n_logits)?
        } else {
            match l.linear_opt("output", c.n_vocab, e)? {
                Some(m) => m,
                // no site: an adapter of `token_embd` corrects the input rows only
                None => Linear { w: l.matrix("token_embd.weight", c.n_vocab, e)?, b: None, scale: None, site: None },
            }
        };
        // the blocks after the last layer are multi-token-prediction layers generation skips
        let mtp_block = |name: &str| {
            name.strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= c.n_layer)
        };
        l.refuse_unused(&c.arch, |name| ignored_by_decoders(name) || mtp_block(name))?;
        let products: Vec<&B::Matrix> =
            layers.iter().flat_map(|l| l.mixer.matrices().into_iter().chain(l.ffn.matrices())).chain([&output.w]).collect();
        backend.prepare_products(&products)?;
        Ok(DecoderWeights {
            token_embd,
            layers,
            output_norm,
            output,
            n_logits: n_logits.min(c.n_vocab),
            sites: l.sites(),
            adapters: Vec::new(),
        })
    }

    /// Keeps the output's first `n` rows only, so that logits are computed for token ids below
    /// `n` (the whole vocabulary when `n` is at least its size). A draft model's proposals need
    /// no more: the target checks every one, so a head of the ids a vocabulary ranks first
    /// costs a draft pass less without changing what is generated. The rows are a view of the
    /// same tensor; the whole output's repacked panels are dropped.
    pub(crate) fn limit_logits(&mut self, file: &Arc<GgufFile>, backend: &B, c: &ModelConfig, n: usize) -> Result<(), ModelError> {
        if n == 0 {
            return Err(ModelError::Head("it needs at least one token id".into()));
        }
        if !self.adapters.is_empty() {
            return Err(ModelError::Adapter("the logits of a model with adapters cannot be limited: they correct the whole output".into()));
        }
        if n >= c.n_vocab || n == self.n_logits {
            return Ok(());
        }
        let output = head(&Loader::new(file, backend), c, n)?;
        backend.prepare_products(&[&output.w])?;
        self.output = output;
        self.n_logits = n;
        Ok(())
    }

    /// Loads the LoRA adapter `file` beside the weights (it becomes adapter
    /// `self.adapters.len()`).
    pub(crate) fn load_adapter(&mut self, file: &Arc<GgufFile>, backend: &B, c: &ModelConfig) -> Result<AdapterInfo, ModelError> {
        if self.n_logits < c.n_vocab {
            return Err(ModelError::Adapter(format!(
                "the model's logits are limited to its first {} token ids: adapters need the whole output",
                self.n_logits
            )));
        }
        // a tied output reads the token embeddings: their adapter would have to correct both
        let embedding = self.output.site.map(|_| EmbeddingShape { n_vocab: c.n_vocab, n_embd: c.n_embd });
        let (weights, info) = super::lora::load(file, backend, &c.arch, c.n_vocab, &self.sites, embedding)?;
        self.adapters.push(weights);
        Ok(info)
    }
}
