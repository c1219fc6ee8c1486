//! The SigLIP ViT and the two projectors: one tile of normalised pixels to the language
//! model's embedding rows, in the operations and order of llama.cpp's `clip.cpp`
//! (`build_vit`, `build_patch_merge_permute`, the Gemma 3 pooling).
//!
//! Patch `p` (row-major over the `side x side` grid) is the matrix product of its flattened
//! pixels (channel, y, x) with the patch convolution's rows, plus the bias and its learned
//! position; then pre-norm blocks (layer norm, biased q/k/v, attention over all patches both
//! ways, output projection, residual; layer norm, GELU feed-forward, residual) and a final
//! layer norm.

use super::config::{Projector, VisionConfig};
use super::weights::{ProjectorWeights, VisionWeights};
use crate::backend::{AttentionRow, Backend};
use crate::model::blocks::project;
use crate::model::error::ModelError;
use crate::model::whisper::encoder::pre_norm_layer;

/// The patches of a `3 x size x size` planar image as rows of `3 · patch²` values, row-major
/// over the patch grid (what the strided convolution reads).
fn patch_rows(pixels: &[f32], size: usize, patch: usize) -> Vec<f32> {
    let side = size / patch;
    let cols = 3 * patch * patch;
    let mut rows = vec![0f32; side * side * cols];
    for (p, row) in rows.chunks_exact_mut(cols).enumerate() {
        let (py, px) = (p / side, p % side);
        for c in 0..3 {
            for y in 0..patch {
                let src = c * size * size + (py * patch + y) * size + px * patch;
                let dst = c * patch * patch + y * patch;
                row[dst..dst + patch].copy_from_slice(&pixels[src..src + patch]);
            }
        }
    }
    rows
}

/// The ViT's output for one tile: `n_patches x n_embd` on the host.
pub fn vit<B: Backend>(b: &B, c: &VisionConfig, w: &VisionWeights<B>, pixels: &[f32]) -> Result<Vec<f32>, ModelError> {
    let size = c.image_size;
    if pixels.len() != 3 * size * size {
        return Err(ModelError::BadBatch(format!("a tile is 3 x {size} x {size} values, got {}", pixels.len())));
    }
    let n = c.n_patches();
    let cols = 3 * c.patch_size * c.patch_size;
    let mut rows = patch_rows(pixels, size, c.patch_size);
    if w.patch_input_f16 {
        rows.iter_mut().for_each(|v| *v = half::f16::from_f32(*v).to_f32());
    }
    let patches = b.upload_tensor(n, cols, &rows)?;
    let mut x = project(b, &w.patch.w, w.patch.b.as_ref(), &patches)?; // n x d
    b.add_scaled(&mut x, &b.upload_tensor(n, c.n_embd, &w.position)?, 1.0)?;
    let rows = vec![AttentionRow { kv: 0, positions: 0..n }; n];
    let shape = c.attention_shape();
    for layer in &w.blocks {
        pre_norm_layer(b, layer, &shape, c.eps, c.activation, &mut x, &rows)?;
    }
    let mut out = b.zeros(n, c.n_embd)?;
    b.layer_norm(&x, &w.post_norm.weight, &w.post_norm.bias, c.eps, &mut out)?;
    Ok(b.to_host(out)?)
}

/// Pixel shuffle (idefics3): each `scale x scale` square of patches becomes one row of
/// `scale² · d` values, `(dy, dx, channel)` order, rows row-major over the squares.
pub fn pixel_shuffle(states: &[f32], side: usize, d: usize, scale: usize) -> Vec<f32> {
    let out_side = side / scale;
    let width = scale * scale * d;
    let mut out = vec![0f32; out_side * out_side * width];
    for (r, row) in out.chunks_exact_mut(width).enumerate() {
        let (oy, ox) = (r / out_side, r % out_side);
        for dy in 0..scale {
            for dx in 0..scale {
                let p = (oy * scale + dy) * side + ox * scale + dx;
                let dst = (dy * scale + dx) * d;
                row[dst..dst + d].copy_from_slice(&states[p * d..(p + 1) * d]);
            }
        }
    }
    out
}

/// Average pooling (Gemma 3): each `k x k` square of patches becomes their mean, summed row by
/// row in f32 and divided by `k²` (ggml's `pool_2d`), rows row-major over the squares.
pub fn average_pool(states: &[f32], side: usize, d: usize, k: usize) -> Vec<f32> {
    let out_side = side / k;
    let mut out = vec![0f32; out_side * out_side * d];
    for (r, row) in out.chunks_exact_mut(d).enumerate() {
        let (oy, ox) = (r / out_side, r % out_side);
        for (ch, v) in row.iter_mut().enumerate() {
            let mut sum = 0f32;
            for ky in 0..k {
                for kx in 0..k {
                    sum += states[((oy * k + ky) * side + ox * k + kx) * d + ch];
                }
            }
            *v = sum / (k * k) as f32;
        }
    }
    out
}

/// One tile's embedding rows for the language model: `rows_per_tile x n_embd_out`.
pub fn encode_tile<B: Backend>(b: &B, c: &VisionConfig, w: &VisionWeights<B>, pixels: &[f32]) -> Result<Vec<f32>, ModelError> {
    let states = vit(b, c, w, pixels)?;
    let (side, d) = (c.patches_per_side(), c.n_embd);
    let (merged, width) = match c.projector {
        Projector::Idefics3 { scale } => (pixel_shuffle(&states, side, d, scale), scale * scale * d),
        Projector::Gemma3 { pool } => (average_pool(&states, side, d, pool), d),
    };
    let n = merged.len() / width;
    let x = b.upload_tensor(n, width, &merged)?;
    let y = match &w.projector {
        ProjectorWeights::Idefics3 { fc } => project(b, fc, None, &x)?,
        ProjectorWeights::Gemma3 { norm, projection } => {
            let mut h = b.zeros(n, width)?;
            b.rms_norm(&x, norm, c.eps, &mut h)?;
            project(b, projection, None, &h)?
        }
    };
    Ok(b.to_host(y)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_are_read_channel_then_row_then_column() {
        // 3 x 4 x 4 image, patch 2: value = c·100 + y·10 + x
        let px: Vec<f32> = (0..3).flat_map(|c| (0..4).flat_map(move |y| (0..4).map(move |x| (c * 100 + y * 10 + x) as f32))).collect();
        let rows = patch_rows(&px, 4, 2);
        // patch 1 (top right): channel 0 rows y 0..2, x 2..4, then channel 1...
        assert_eq!(&rows[12..24], &[2.0, 3.0, 12.0, 13.0, 102.0, 103.0, 112.0, 113.0, 202.0, 203.0, 212.0, 213.0]);
        // patch 2 (bottom left)
        assert_eq!(&rows[24..28], &[20.0, 21.0, 30.0, 31.0]);
    }

    #[test]
    fn pixel_shuffle_gathers_each_square_row_by_row() {
        // 4 x 4 patches of d = 1, value = index; scale 2
        let states: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let out = pixel_shuffle(&states, 4, 1, 2);
        assert_eq!(out, vec![0.0, 1.0, 4.0, 5.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 12.0, 13.0, 10.0, 11.0, 14.0, 15.0]);
    }

    #[test]
    fn average_pool_takes_each_squares_mean() {
        let states: Vec<f32> = (0..16).flat_map(|v| [v as f32, 1.0]).collect(); // d = 2
        let out = average_pool(&states, 4, 2, 2);
        assert_eq!(out, vec![2.5, 1.0, 4.5, 1.0, 10.5, 1.0, 12.5, 1.0]);
    }
}
