//! Q5_1: blocks of 32 weights, 5-bit quants with an f16 scale and offset (`d * q + m`).

use super::blocks::{f16_le, f16_le_from, BlockQ5_1, BlockQ8_1, QK5_1};
use super::q4_0::min_max;
use super::q5_0::{pack5, unpack5};

super::row_fns!(BlockQ5_1, BlockQ8_1);

pub fn dequantize_ref(blocks: &[BlockQ5_1], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK5_1);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK5_1)) {
        let (d, m) = (f16_le(b.d), f16_le(b.m));
        for (yj, q) in y.iter_mut().zip(unpack5(&b.qs, b.qh)) {
            *yj = q as f32 * d + m;
        }
    }
}

/// ggml's reference quantizer: the block's range `[min, max]` in 31 steps.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ5_1]) {
    debug_assert_eq!(x.len(), blocks.len() * QK5_1);
    for (xb, b) in x.chunks_exact(QK5_1).zip(blocks.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_from(d);
        b.m = f16_le_from(min);
        let mut q = [0u8; 32];
        for (qj, &v) in q.iter_mut().zip(xb) {
            // Bounded by construction; the clamp only guards against rounding at the top.
            *qj = (((v - min) * id + 0.5) as u8).min(31);
        }
        b.qh = pack5(&q, &mut b.qs);
    }
}

pub fn vec_dot_ref(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let q = unpack5(&x.qs, x.qh);
        let sumi: i32 = q.iter().zip(&y.qs).map(|(&q, &a)| q as i32 * a as i32).sum();
        sum += (f16_le(x.d) * f16_le(y.d)) * sumi as f32 + f16_le(x.m) * f16_le(y.s);
    }
    sum
}
