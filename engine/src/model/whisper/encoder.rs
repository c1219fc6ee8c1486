//! Whisper's encoder: one 30-second log-mel window (`n_mels x 3000`) to `n_ctx` (1500) audio
//! states, and each decoder layer's cross-attention keys and values of them (computed once per
//! window, read by every decoding step).
//!
//! The convolutions run as matrix products over im2col rows built on the host: output frame
//! `t` of a kernel-3 convolution with stride `s` and padding 1 reads input frames
//! `s·t - 1 ..= s·t + 1` of every channel.

use super::config::WhisperConfig;
use super::weights::{AttentionWeights, Layer, WhisperWeights};
use crate::backend::{Activation, AttentionRow, AttentionShape, Backend, KvSource};
use crate::model::blocks::Linear;
use crate::model::blocks::{attention_out, plain_ffn, project, project_each};
use crate::model::error::ModelError;

/// The encoder's output for one window and the cross-attention keys and values of every
/// decoder layer.
pub struct EncodedAudio<B: Backend> {
    /// The keys and values per decoder layer (each `n_ctx x n_state`), kept for the decoding
    /// steps' cross-attention.
    pub cross_kv: Vec<B::KeptKv>,
}

/// im2col of a kernel-3, padding-1 convolution: `input` is `[n_frames][n_channels]` (a frame's
/// channels contiguous); the result has `n_out` rows of `n_channels · 3` values (channel-major,
/// tap-minor, as the weight rows are).
fn im2col(input: &[f32], n_frames: usize, n_channels: usize, stride: usize, n_out: usize) -> Vec<f32> {
    let mut cols = vec![0f32; n_out * n_channels * 3];
    for t in 0..n_out {
        let row = &mut cols[t * n_channels * 3..(t + 1) * n_channels * 3];
        for tap in 0..3 {
            let Some(src) = (stride * t + tap).checked_sub(1).filter(|&f| f < n_frames) else { continue };
            let frame = &input[src * n_channels..(src + 1) * n_channels];
            for (c, &x) in frame.iter().enumerate() {
                row[c * 3 + tap] = x;
            }
        }
    }
    cols
}

/// `gelu(conv(x))` for an im2col input of `rows` rows.
fn conv_gelu<B: Backend>(b: &B, conv: &Linear<B>, cols: &[f32], rows: usize) -> Result<B::Tensor, ModelError> {
    let x = b.upload_tensor(rows, cols.len() / rows, cols)?;
    let mut y = project(b, &conv.w, conv.b.as_ref(), &x)?;
    b.activate(Activation::GeluErf, &mut y)?;
    Ok(y)
}

/// Pre-norm self-attention and feed-forward of one encoder layer (Whisper's, and a ViT's), in
/// place on `x`: layer norm, biased q/k/v, attention over the batch's own rows, output
/// projection, residual; layer norm, `act` feed-forward, residual.
pub(crate) fn pre_norm_layer<B: Backend>(
    b: &B,
    layer: &Layer<B>,
    shape: &AttentionShape,
    eps: f32,
    act: Activation,
    x: &mut B::Tensor,
    rows: &[AttentionRow],
) -> Result<(), ModelError> {
    let (n, d) = b.shape(x);
    let mut h = b.zeros(n, d)?;
    b.layer_norm(x, &layer.attn_norm.weight, &layer.attn_norm.bias, eps, &mut h)?;
    let a: &AttentionWeights<B> = &layer.attn;
    let [q, k, v] = project_each(b, [&a.q.w, &a.k.w, &a.v.w], [a.q.b.as_ref(), a.k.b.as_ref(), a.v.b.as_ref()], &h)?;
    let o = attention_out(b, &q, KvSource::Batch { k: &k, v: &v }, rows, shape, &a.out.w, a.out.b.as_ref())?;
    b.add_scaled(x, &o, 1.0)?;
    b.layer_norm(x, &layer.ffn_norm.weight, &layer.ffn_norm.bias, eps, &mut h)?;
    let f = plain_ffn(b, act, (&layer.ffn_up.w, layer.ffn_up.b.as_ref()), (&layer.ffn_down.w, layer.ffn_down.b.as_ref()), &h)?;
    b.add_scaled(x, &f, 1.0)?;
    Ok(())
}

/// Encodes one window: `mel` is `[n_mels][2 · n_ctx]` (band-major, as `audio::LogMel` holds it).
pub fn encode<B: Backend>(b: &B, c: &WhisperConfig, w: &WhisperWeights<B>, mel: &[f32]) -> Result<EncodedAudio<B>, ModelError> {
    let e = &c.encoder;
    let n_frames = 2 * e.n_ctx;
    if mel.len() != c.n_mels * n_frames {
        return Err(ModelError::BadBatch(format!("a window is {} x {n_frames} mel values, got {}", c.n_mels, mel.len())));
    }
    // frame-major copy of the mel: [n_frames][n_mels]
    let mut frames = vec![0f32; mel.len()];
    for m in 0..c.n_mels {
        for t in 0..n_frames {
            frames[t * c.n_mels + m] = mel[m * n_frames + t];
        }
    }
    let h1 = conv_gelu(b, &w.encoder.conv1, &im2col(&frames, n_frames, c.n_mels, 1, n_frames), n_frames)?; // 3000 x d
    let h1 = b.to_host(h1)?;
    let mut x = conv_gelu(b, &w.encoder.conv2, &im2col(&h1, n_frames, e.n_state, 2, e.n_ctx), e.n_ctx)?; // 1500 x d
    b.add_scaled(&mut x, &b.upload_tensor(e.n_ctx, e.n_state, &w.encoder.position)?, 1.0)?;

    let rows = vec![AttentionRow { kv: 0, positions: 0..e.n_ctx }; e.n_ctx];
    let shape = e.attention_shape();
    for layer in &w.encoder.layers {
        pre_norm_layer(b, layer, &shape, c.eps, Activation::GeluErf, &mut x, &rows)?;
    }
    let mut out = b.zeros(e.n_ctx, e.n_state)?;
    b.layer_norm(&x, &w.encoder.output_norm.weight, &w.encoder.output_norm.bias, c.eps, &mut out)?;

    let cross_kv = w
        .decoder
        .layers
        .iter()
        .map(|layer| {
            let a = layer.cross.as_ref().expect("decoder layers have cross-attention");
            let [k, v] = project_each(b, [&a.k.w, &a.v.w], [a.k.b.as_ref(), a.v.b.as_ref()], &out)?;
            Ok(b.keep_kv(k, v, &c.decoder.attention_shape())?)
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    Ok(EncodedAudio { cross_kv })
}

#[cfg(test)]
mod tests {
    use super::im2col;

    #[test]
    fn im2col_reads_the_neighbouring_frames_with_zero_padding() {
        // 4 frames of 2 channels: frame t = [t, 10 + t]
        let input: Vec<f32> = (0..4).flat_map(|t| [t as f32, 10.0 + t as f32]).collect();
        let cols = im2col(&input, 4, 2, 1, 4);
        // output 0: taps at frames -1 (zero), 0, 1; channel-major
        assert_eq!(&cols[..6], &[0.0, 0.0, 1.0, 0.0, 10.0, 11.0]);
        assert_eq!(&cols[18..24], &[2.0, 3.0, 0.0, 12.0, 13.0, 0.0]);
        // stride 2: output 1 reads frames 1, 2, 3
        let cols = im2col(&input, 4, 2, 2, 2);
        assert_eq!(&cols[6..12], &[1.0, 2.0, 3.0, 11.0, 12.0, 13.0]);
    }
}
