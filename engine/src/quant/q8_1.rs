//! Q8_1: blocks of 32 activations, int8 quants, f16 scale and `s = d * sum(q)`; the activation
//! format of Q4_1 / Q5_1 weights (whose offset `m` multiplies the block sum).

use super::blocks::{f16_le, f16_le_from, BlockQ8_1, QK8_1};
use super::q8_0::Q8Rounding;

super::row_fns!(BlockQ8_1, BlockQ8_1);

pub fn dequantize_ref(blocks: &[BlockQ8_1], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK8_1);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_1)) {
        let d = f16_le(b.d);
        for (yj, &q) in y.iter_mut().zip(&b.qs) {
            *yj = q as f32 * d;
        }
    }
}

#[inline(always)]
fn quantize_with(rounding: Q8Rounding, x: &[f32], blocks: &mut [BlockQ8_1]) {
    debug_assert_eq!(x.len(), blocks.len() * QK8_1);
    for (xb, b) in x.chunks_exact(QK8_1).zip(blocks.iter_mut()) {
        let d = rounding.quantize_block(xb, &mut b.qs);
        b.d = f16_le_from(d);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.s = f16_le_from(sum as f32 * d);
    }
}

/// ggml's `quantize_row_q8_1_ref`, byte for byte: `s` is computed from the unrounded f32 `d`.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ8_1]) {
    quantize_with(Q8Rounding::Reference, x, blocks)
}

/// Quantizes matmul activations the way llama.cpp's x86 CPU backend does
/// (`Q8Rounding::X86Backend`); `s` as the reference computes it.
pub fn quantize_activations(x: &[f32], bytes: &mut [u8]) {
    quantize_with(Q8Rounding::X86Backend, x, bytemuck::cast_slice_mut::<u8, BlockQ8_1>(bytes))
}

/// Q8_1 is an activation format; as a weight it dots against itself (`s` is not needed).
pub fn vec_dot_ref(w: &[BlockQ8_1], a: &[BlockQ8_1]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 = x.qs.iter().zip(&y.qs).map(|(&p, &q)| p as i32 * q as i32).sum();
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}
