//! Q4_0: blocks of 32 weights, 4-bit quants around 8 and one f16 scale (`d * (q - 8)`).

use super::blocks::{f16_le, f16_le_from, BlockQ4_0, BlockQ8_0, QK4_0};
use super::k_quants::scales::signed_max;

super::row_fns!(BlockQ4_0, BlockQ8_0);

pub fn dequantize_ref(blocks: &[BlockQ4_0], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK4_0);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK4_0)) {
        let d = f16_le(b.d);
        for (j, &q) in b.qs.iter().enumerate() {
            // Separate multiply (no FMA) so the values match ggml bit for bit, -0.0 included.
            y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            y[j + QK4_0 / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// ggml's reference quantizer: the value of largest magnitude maps to -8 exactly.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ4_0]) {
    debug_assert_eq!(x.len(), blocks.len() * QK4_0);
    for (xb, b) in x.chunks_exact(QK4_0).zip(blocks.iter_mut()) {
        let (max, _) = signed_max(xb);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_from(d);
        for j in 0..QK4_0 / 2 {
            // `as i8` saturates like the C cast does on these finite, bounded values.
            let q0 = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((xb[j + QK4_0 / 2] * id + 8.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

pub fn vec_dot_ref(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..QK4_0 / 2 {
            let v0 = (x.qs[j] & 0x0F) as i32 - 8;
            let v1 = (x.qs[j] >> 4) as i32 - 8;
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + QK4_0 / 2] as i32;
        }
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}

/// The smallest and largest element.
pub(crate) fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}
