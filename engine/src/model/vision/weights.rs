//! A projector file's weights, shape-checked and uploaded to a backend: the SigLIP ViT (patch
//! embedding as a matrix over flattened patches, learned positions, pre-norm blocks, the final
//! norm) and the projector's own tensors.

use std::sync::Arc;

use super::config::{Projector, VisionConfig};
use crate::backend::Backend;
use crate::gguf::{GgufFile, GgufWriter, TensorInfo};
use crate::model::bert::LayerNorm;
use crate::model::blocks::Linear;
use crate::model::error::ModelError;
use crate::model::weights::Loader;
use crate::model::whisper::weights::{AttentionWeights, Layer};
use crate::quant::{self, GgmlType};

pub enum ProjectorWeights<B: Backend> {
    /// `mm.model.fc`: `[n_embd_out, n_embd · scale²]`, no bias.
    Idefics3 { fc: B::Matrix },
    /// `mm.soft_emb_norm` (`n_embd`, as the file stores it) and `mm.input_projection`
    /// transposed to `[n_embd_out, n_embd]` (the file stores it `[n_embd, n_embd_out]`).
    Gemma3 { norm: B::Vector, projection: B::Matrix },
}

pub struct VisionWeights<B: Backend> {
    /// `[n_embd, 3 · patch²]`: the patch convolution, a row per output channel over
    /// (channel, y, x) of a patch.
    pub patch: Linear<B>,
    /// The patch rows are rounded to F16 before the product (ggml's `conv_2d` builds them in
    /// F16 unless the kernel is BF16).
    pub patch_input_f16: bool,
    /// `[n_patches, n_embd]` on the host: added once per tile.
    pub position: Vec<f32>,
    /// Pre-norm blocks (`ln1` / `ln2` as the layer's attention and feed-forward norms; no
    /// cross-attention).
    pub blocks: Vec<Layer<B>>,
    pub post_norm: LayerNorm<B>,
    pub projector: ProjectorWeights<B>,
}

fn linear<B: Backend>(l: &Loader<B>, name: &str, rows: usize, cols: usize, bias: bool) -> Result<Linear<B>, ModelError> {
    let b = if bias { Some(l.vector(&format!("{name}.bias"), rows)?) } else { l.vector_opt(&format!("{name}.bias"), rows)? };
    Ok(Linear { w: l.matrix(&format!("{name}.weight"), rows, cols)?, b, scale: None, site: None })
}

fn norm<B: Backend>(l: &Loader<B>, name: &str, n: usize) -> Result<LayerNorm<B>, ModelError> {
    Ok(LayerNorm { weight: l.vector(&format!("{name}.weight"), n)?, bias: l.vector(&format!("{name}.bias"), n)? })
}

/// The patch convolution's `[patch, patch, 3, n_embd]` weights as the matrix
/// `[n_embd, 3 · patch²]` (the same layout). ggml's `conv_2d` builds its patch rows in F16 and
/// dots them in F16 (unless the kernel is BF16): the matrix is F16 (the file's bytes when the
/// file's are F16), so the product rounds the pixels to F16 as the reference does.
fn patch_matrix<B: Backend>(l: &Loader<B>, c: &VisionConfig) -> Result<B::Matrix, ModelError> {
    let name = "v.patch_embd.weight";
    let t = l.file.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let p = c.patch_size as u64;
    let expected = vec![p, p, 3, c.n_embd as u64];
    if t.dims != expected {
        return Err(ModelError::TensorShape { name: name.into(), expected, got: t.dims.clone() });
    }
    let cols = 3 * c.patch_size * c.patch_size;
    if t.ty.row_bytes(cols).is_none() {
        return Err(ModelError::TensorType { name: name.into(), ty: t.ty });
    }
    let flat = TensorInfo::new(name, vec![cols as u64, c.n_embd as u64], t.ty, t.offset)
        .map_err(|p| ModelError::BadKey { key: name.into(), reason: p.to_string() })?;
    if matches!(t.ty, GgmlType::F16 | GgmlType::BF16) {
        return Ok(l.backend.upload_matrix(l.file, &flat, c.n_embd, cols)?);
    }
    let mut values = vec![0f32; c.n_embd * cols];
    (quant::ops(t.ty)?.dequantize)(l.file.tensor_data(t), &mut values);
    host_matrix(l.backend, name, c.n_embd, cols, &values, GgmlType::F16)
}

/// A matrix made on the host (`rows x cols` values, stored as `ty`: F32 or F16) and uploaded
/// like a file's: it goes through a small GGUF held in memory, the one way a backend takes
/// matrices.
fn host_matrix<B: Backend>(b: &B, name: &str, rows: usize, cols: usize, values: &[f32], ty: GgmlType) -> Result<B::Matrix, ModelError> {
    let bytes: Vec<u8> = match ty {
        GgmlType::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        _ => bytemuck::cast_slice(values).to_vec(),
    };
    let mut w = GgufWriter::new();
    w.add_tensor(name, &[cols as u64, rows as u64], ty, bytes)?;
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes()?)?);
    let info = file.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?.clone();
    Ok(b.upload_matrix(&file, &info, rows, cols)?)
}

impl<B: Backend> VisionWeights<B> {
    pub(crate) fn load(file: &Arc<GgufFile>, backend: &B, c: &VisionConfig) -> Result<VisionWeights<B>, ModelError> {
        let l = Loader::new(file, backend);
        let d = c.n_embd;
        // older converters wrote SigLIP's fc1 / fc2 under each other's names; llama.cpp swaps
        // them back when `ffn_down` has rows of n_embd values (which a correct file's has not)
        let swapped = c.n_ff != d && file.tensor("v.blk.0.ffn_down.weight").is_some_and(|t| t.dims.first() == Some(&(d as u64)));
        let (up, down) = if swapped { ("ffn_down", "ffn_up") } else { ("ffn_up", "ffn_down") };
        let blocks = (0..c.n_layer)
            .map(|i| {
                let n = |s: &str| format!("v.blk.{i}.{s}");
                Ok(Layer {
                    attn_norm: norm(&l, &n("ln1"), d)?,
                    attn: AttentionWeights {
                        q: linear(&l, &n("attn_q"), d, d, true)?,
                        k: linear(&l, &n("attn_k"), d, d, true)?,
                        v: linear(&l, &n("attn_v"), d, d, true)?,
                        out: linear(&l, &n("attn_out"), d, d, true)?,
                    },
                    cross_norm: None,
                    cross: None,
                    ffn_norm: norm(&l, &n("ln2"), d)?,
                    ffn_up: linear(&l, &n(up), c.n_ff, d, true)?,
                    ffn_down: linear(&l, &n(down), d, c.n_ff, true)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let projector = match c.projector {
            Projector::Idefics3 { scale } => {
                ProjectorWeights::Idefics3 { fc: l.matrix("mm.model.fc.weight", c.n_embd_out, d * scale * scale)? }
            }
            Projector::Gemma3 { .. } => {
                // stored [n_embd][n_embd_out] (HF's x · W): rows of n_embd_out, transposed here,
                // kept F16 when the file's are (the product then rounds its input to F16 too)
                let name = "mm.input_projection.weight";
                let ty = match file.tensor(name).map(|t| t.ty) {
                    Some(GgmlType::F16) => GgmlType::F16,
                    _ => GgmlType::F32,
                };
                let w = l.host_matrix(name, d, c.n_embd_out)?;
                let mut t = vec![0f32; w.len()];
                for (i, row) in w.chunks_exact(c.n_embd_out).enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        t[j * d + i] = v;
                    }
                }
                ProjectorWeights::Gemma3 {
                    norm: l.vector("mm.soft_emb_norm.weight", d)?,
                    projection: host_matrix(backend, name, c.n_embd_out, d, &t, ty)?,
                }
            }
        };
        Ok(VisionWeights {
            patch: Linear { w: patch_matrix(&l, c)?, b: Some(l.vector("v.patch_embd.bias", d)?), scale: None, site: None },
            patch_input_f16: file.tensor("v.patch_embd.weight").is_some_and(|t| t.ty != GgmlType::BF16),
            position: l.host_matrix("v.position_embd.weight", c.n_patches(), d)?,
            blocks,
            post_norm: norm(&l, "v.post_ln", d)?,
            projector,
        })
    }
}
