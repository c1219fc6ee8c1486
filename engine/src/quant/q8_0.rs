//! Q8_0: blocks of 32 values, int8 quants and one f16 scale (`d * q`); a weight type and the
//! activation format of Q4_0 / Q5_0 / Q8_0 weights.

use super::blocks::{f16_le, f16_le_from, BlockQ8_0, QK8_0};

super::row_fns!(BlockQ8_0, BlockQ8_0);

pub fn dequantize_ref(blocks: &[BlockQ8_0], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK8_0);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = f16_le(b.d);
        for (yj, &q) in y.iter_mut().zip(&b.qs) {
            *yj = q as f32 * d;
        }
    }
}

/// Scale and reciprocal of a block whose largest magnitude is `amax` (ggml: `d = amax / 127`,
/// `id = 1 / d`, rounding with `roundf`, i.e. halves away from zero).
#[inline(always)]
pub(crate) fn scale_127(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// ggml's `quantize_row_q8_0_ref`, byte for byte.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ8_0]) {
    debug_assert_eq!(x.len(), blocks.len() * QK8_0);
    for (xb, b) in x.chunks_exact(QK8_0).zip(blocks.iter_mut()) {
        let (d, id) = scale_127(xb);
        b.d = f16_le_from(d);
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
        }
    }
}

/// Scale and reciprocal as llama.cpp's x86 CPU backend computes them for activations
/// (`quantize_row_q8_0` of its AVX2 code): `id = 127 / amax` rather than `1 / d`.
#[inline(always)]
pub(crate) fn scale_127_cpu(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    (amax / 127.0, if amax != 0.0 { 127.0 / amax } else { 0.0 })
}

/// Quantizes matmul activations the way llama.cpp's x86 CPU backend does: `id = 127 / amax`,
/// halves rounded to even. Only a value landing exactly on a half (or the rare `id` that
/// differs from `1 / d` in its last bit) makes it differ from [`quantize_ref`]; matching it
/// keeps the integer dot products, and so the logits, bit-equal to llama.cpp's.
pub fn quantize_activations(x: &[f32], bytes: &mut [u8]) {
    let blocks = bytemuck::cast_slice_mut::<u8, BlockQ8_0>(bytes);
    debug_assert_eq!(x.len(), blocks.len() * QK8_0);
    for (xb, b) in x.chunks_exact(QK8_0).zip(blocks.iter_mut()) {
        let (d, id) = scale_127_cpu(xb);
        b.d = f16_le_from(d);
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
}

/// ggml's Q8_0 dot product on x86 (and llamafile's tinyBLAS, which llama.cpp uses for
/// prompts): eight f32 lanes, lane `l` taking the exact integer sum of products `4l..4l+4` of
/// each block, scaled by `d_w * d_a` and added with one fused multiply-add per block, in block
/// order; then the lanes summed pairwise as [`sum_lanes`] does. Every SIMD tier computes
/// exactly this.
pub fn vec_dot_ref(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut lanes = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let d = f16_le(x.d) * f16_le(y.d);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let sumi: i32 = (4 * l..4 * l + 4).map(|j| x.qs[j] as i32 * y.qs[j] as i32).sum();
            *lane = d.mul_add(sumi as f32, *lane);
        }
    }
    sum_lanes(lanes)
}

/// The sum of eight lanes in the order of an x86 horizontal add: halves, then pairs.
#[inline]
pub(crate) fn sum_lanes(l: [f32; 8]) -> f32 {
    let h = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}
