//! Whisper's weights, shape-checked and uploaded to a backend: the encoder (two convolutions,
//! sinusoidal positions, pre-norm transformer layers) and the decoder (token and learned
//! position embeddings, layers with self- and cross-attention; the output projection is the
//! token embedding table).

use std::sync::Arc;

use super::config::WhisperConfig;
use crate::backend::Backend;
use crate::gguf::{GgufFile, TensorInfo};
use crate::model::bert::LayerNorm;
use crate::model::blocks::Linear;
use crate::model::error::ModelError;
use crate::model::weights::Loader;

/// Attention's projections: q, k (no bias in Whisper), v, and the output.
pub struct AttentionWeights<B: Backend> {
    pub q: Linear<B>,
    pub k: Linear<B>,
    pub v: Linear<B>,
    pub out: Linear<B>,
}

/// A layer of either stack; `cross` only in the decoder's.
pub struct Layer<B: Backend> {
    pub attn_norm: LayerNorm<B>,
    pub attn: AttentionWeights<B>,
    pub cross_norm: Option<LayerNorm<B>>,
    pub cross: Option<AttentionWeights<B>>,
    pub ffn_norm: LayerNorm<B>,
    pub ffn_up: Linear<B>,
    pub ffn_down: Linear<B>,
}

pub struct EncoderWeights<B: Backend> {
    /// `[n_state, n_mels · 3]`: a convolution of kernel 3 as a matrix over (channel, tap) rows.
    pub conv1: Linear<B>,
    /// `[n_state, n_state · 3]`, stride 2.
    pub conv2: Linear<B>,
    /// `[n_ctx, n_state]` on the host: added once per window.
    pub position: Vec<f32>,
    pub layers: Vec<Layer<B>>,
    pub output_norm: LayerNorm<B>,
}

pub struct DecoderWeights<B: Backend> {
    /// `[n_vocab, n_state]`: the embeddings, and the output projection.
    pub token_embd: B::Matrix,
    /// `[n_ctx, n_state]`.
    pub position: B::Matrix,
    pub layers: Vec<Layer<B>>,
    pub output_norm: LayerNorm<B>,
}

pub struct WhisperWeights<B: Backend> {
    pub encoder: EncoderWeights<B>,
    pub decoder: DecoderWeights<B>,
}

fn linear<B: Backend>(l: &Loader<B>, name: &str, rows: usize, cols: usize) -> Result<Linear<B>, ModelError> {
    Ok(Linear {
        w: l.matrix(&format!("{name}.weight"), rows, cols)?,
        b: l.vector_opt(&format!("{name}.bias"), rows)?,
        scale: None,
        site: None,
    })
}

fn norm<B: Backend>(l: &Loader<B>, name: &str, n: usize) -> Result<LayerNorm<B>, ModelError> {
    Ok(LayerNorm { weight: l.vector(&format!("{name}.weight"), n)?, bias: l.vector(&format!("{name}.bias"), n)? })
}

/// A convolution's `[kernel, in, out]` weights as the matrix `[out, in · kernel]` (the same
/// bytes: a row is one output channel's taps, channel-major).
fn conv<B: Backend>(l: &Loader<B>, name: &str, n_in: usize, n_out: usize) -> Result<Linear<B>, ModelError> {
    const KERNEL: u64 = 3;
    let wname = format!("{name}.weight");
    let t = l.file.tensor(&wname).ok_or_else(|| ModelError::MissingTensor(wname.clone()))?;
    let expected = vec![KERNEL, n_in as u64, n_out as u64];
    if t.dims != expected {
        return Err(ModelError::TensorShape { name: wname, expected, got: t.dims.clone() });
    }
    let cols = n_in * KERNEL as usize;
    let flat = TensorInfo::new(wname.clone(), vec![cols as u64, n_out as u64], t.ty, t.offset)
        .map_err(|p| ModelError::BadKey { key: wname.clone(), reason: p.to_string() })?;
    if t.ty.row_bytes(cols).is_none() {
        return Err(ModelError::TensorType { name: wname, ty: t.ty });
    }
    Ok(Linear {
        w: l.backend.upload_matrix(l.file, &flat, n_out, cols)?,
        b: Some(l.vector(&format!("{name}.bias"), n_out)?),
        scale: None,
        site: None,
    })
}

fn attention<B: Backend>(l: &Loader<B>, prefix: &str, d: usize) -> Result<AttentionWeights<B>, ModelError> {
    let p = |s: &str| format!("{prefix}_{s}");
    Ok(AttentionWeights {
        q: linear(l, &p("q"), d, d)?,
        k: linear(l, &p("k"), d, d)?,
        v: linear(l, &p("v"), d, d)?,
        out: linear(l, &p("out"), d, d)?,
    })
}

fn layers<B: Backend>(l: &Loader<B>, side: &str, n_layer: usize, d: usize, cross: bool) -> Result<Vec<Layer<B>>, ModelError> {
    (0..n_layer)
        .map(|i| {
            let n = |s: &str| format!("{side}.blk.{i}.{s}");
            Ok(Layer {
                attn_norm: norm(l, &n("attn_norm"), d)?,
                attn: attention(l, &n("attn"), d)?,
                cross_norm: if cross { Some(norm(l, &n("cross_norm"), d)?) } else { None },
                cross: if cross { Some(attention(l, &n("cross"), d)?) } else { None },
                ffn_norm: norm(l, &n("ffn_norm"), d)?,
                ffn_up: linear(l, &n("ffn_up"), 4 * d, d)?,
                ffn_down: linear(l, &n("ffn_down"), d, 4 * d)?,
            })
        })
        .collect()
}

impl<B: Backend> WhisperWeights<B> {
    pub(crate) fn load(file: &Arc<GgufFile>, backend: &B, c: &WhisperConfig) -> Result<WhisperWeights<B>, ModelError> {
        let l = Loader::new(file, backend);
        let (e, d) = (&c.encoder, &c.decoder);
        let position = l.host_matrix("enc.position", e.n_ctx, e.n_state)?;
        let encoder = EncoderWeights {
            conv1: conv(&l, "enc.conv1", c.n_mels, e.n_state)?,
            conv2: conv(&l, "enc.conv2", e.n_state, e.n_state)?,
            position,
            layers: layers(&l, "enc", e.n_layer, e.n_state, false)?,
            output_norm: norm(&l, "enc.output_norm", e.n_state)?,
        };
        let decoder = DecoderWeights {
            token_embd: l.matrix("dec.token_embd.weight", c.n_vocab, d.n_state)?,
            position: l.matrix("dec.position", d.n_ctx, d.n_state)?,
            layers: layers(&l, "dec", d.n_layer, d.n_state, true)?,
            output_norm: norm(&l, "dec.output_norm", d.n_state)?,
        };
        Ok(WhisperWeights { encoder, decoder })
    }
}
