//! Q4_1: blocks of 32 weights, 4-bit quants with an f16 scale and offset (`d * q + m`).

use super::blocks::{f16_le, f16_le_from, BlockQ4_1, BlockQ8_1, QK4_1};
use super::q4_0::min_max;

super::row_fns!(BlockQ4_1, BlockQ8_1);

pub fn dequantize_ref(blocks: &[BlockQ4_1], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK4_1);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK4_1)) {
        let (d, m) = (f16_le(b.d), f16_le(b.m));
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = (q & 0x0F) as f32 * d + m;
            y[j + QK4_1 / 2] = (q >> 4) as f32 * d + m;
        }
    }
}

/// ggml's reference quantizer: the block's range `[min, max]` in 15 steps.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ4_1]) {
    debug_assert_eq!(x.len(), blocks.len() * QK4_1);
    for (xb, b) in x.chunks_exact(QK4_1).zip(blocks.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_from(d);
        b.m = f16_le_from(min);
        for j in 0..QK4_1 / 2 {
            let q0 = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((xb[j + QK4_1 / 2] - min) * id + 0.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

pub fn vec_dot_ref(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..QK4_1 / 2 {
            sumi += (x.qs[j] & 0x0F) as i32 * y.qs[j] as i32 + (x.qs[j] >> 4) as i32 * y.qs[j + QK4_1 / 2] as i32;
        }
        // The offset term uses the activation block's precomputed `s = d * sum(q)`.
        sum += (f16_le(x.d) * f16_le(y.d)) * sumi as f32 + f16_le(x.m) * f16_le(y.s);
    }
    sum
}
