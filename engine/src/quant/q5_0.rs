//! Q5_0: blocks of 32 weights, 5-bit quants around 16 (fifth bits in `qh`), one f16 scale.

use super::blocks::{f16_le, f16_le_from, BlockQ5_0, BlockQ8_0, QK5_0};
use super::k_quants::scales::signed_max;

super::row_fns!(BlockQ5_0, BlockQ8_0);

/// The 5-bit quants of a block, in element order (low nibbles first, then high nibbles).
#[inline(always)]
pub(crate) fn unpack5(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

/// Packs 5-bit quants (element order) into `qs` nibbles and the `qh` bit field.
#[inline(always)]
pub(crate) fn pack5(q: &[u8; 32], qs: &mut [u8; 16]) -> [u8; 4] {
    let mut qh = 0u32;
    for j in 0..16 {
        qs[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
        qh |= (((q[j] >> 4) & 1) as u32) << j;
        qh |= (((q[j + 16] >> 4) & 1) as u32) << (j + 16);
    }
    qh.to_le_bytes()
}

pub fn dequantize_ref(blocks: &[BlockQ5_0], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK5_0);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK5_0)) {
        let d = f16_le(b.d);
        for (yj, q) in y.iter_mut().zip(unpack5(&b.qs, b.qh)) {
            *yj = (q as i32 - 16) as f32 * d;
        }
    }
}

/// ggml's reference quantizer: the value of largest magnitude maps to -16 exactly.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ5_0]) {
    debug_assert_eq!(x.len(), blocks.len() * QK5_0);
    for (xb, b) in x.chunks_exact(QK5_0).zip(blocks.iter_mut()) {
        let (max, _) = signed_max(xb);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_from(d);
        let mut q = [0u8; 32];
        for (qj, &v) in q.iter_mut().zip(xb) {
            *qj = ((v * id + 16.5) as i8).min(31) as u8;
        }
        b.qh = pack5(&q, &mut b.qs);
    }
}

pub fn vec_dot_ref(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let q = unpack5(&x.qs, x.qh);
        let sumi: i32 = q.iter().zip(&y.qs).map(|(&q, &a)| (q as i32 - 16) * a as i32).sum();
        sum += (f16_le(x.d) * f16_le(y.d)) * sumi as f32;
    }
    sum
}
