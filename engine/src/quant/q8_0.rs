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

pub fn vec_dot_ref(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 = x.qs.iter().zip(&y.qs).map(|(&p, &q)| p as i32 * q as i32).sum();
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}
