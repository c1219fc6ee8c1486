//! Q5_K: 256 weights in 8 groups of 32; 5-bit quants (4 low bits in `qs`, the fifth in `qh`),
//! a 6-bit scale and a 6-bit min per group over f16 `d` and `dmin`: `x = d * sc * q - dmin * m`.

use super::scales::{dequantize_scale_min, dot_scale_min, quantize_scale_min_block, MinFit};
use crate::quant::blocks::{BlockQ5K, BlockQ8K};
use crate::quant::QK_K;

crate::quant::row_fns!(BlockQ5K, BlockQ8K);

/// Quants in element order: the nibbles as in Q4_K, plus 16 where bit `e / 32` of
/// `qh[e % 32]` is set.
#[inline(always)]
pub(crate) fn unpack(b: &BlockQ5K) -> [u8; QK_K] {
    // chunk c of 64 values: the low nibbles of its 32 bytes with bit 2c of `qh`, then the high
    // nibbles with bit 2c + 1 (whole-chunk loops, which vectorise)
    let mut q = [0u8; QK_K];
    for (c, (chunk, bytes)) in q.chunks_exact_mut(64).zip(b.qs.chunks_exact(32)).enumerate() {
        let (low, high) = chunk.split_at_mut(32);
        for (((l, h), &byte), &qh) in low.iter_mut().zip(high.iter_mut()).zip(bytes).zip(&b.qh) {
            *l = (byte & 0x0F) | (((qh >> (2 * c)) & 1) << 4);
            *h = (byte >> 4) | (((qh >> (2 * c + 1)) & 1) << 4);
        }
    }
    q
}

pub fn dequantize_ref(blocks: &[BlockQ5K], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        dequantize_scale_min(b.d, b.dmin, &b.scales, &unpack(b), y);
    }
}

/// ggml's fit for 5-bit groups: 16 candidate scales from `nmax - 0.5` upwards, squared error.
const FIT: MinFit = MinFit { nmax: 31, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: false };

/// ggml's `quantize_row_q5_K_ref`, byte for byte.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ5K]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        let k = quantize_scale_min_block(xb, &FIT);
        b.d = k.d;
        b.dmin = k.dmin;
        b.scales = k.scales;
        b.qh = [0; QK_K / 8];
        for (e, &q) in k.q.iter().enumerate() {
            b.qh[e % 32] |= (q >> 4) << (e / 32);
        }
        for (bytes, q) in b.qs.chunks_exact_mut(32).zip(k.q.chunks_exact(64)) {
            for (l, byte) in bytes.iter_mut().enumerate() {
                *byte = (q[l] & 0x0F) | ((q[l + 32] & 0x0F) << 4);
            }
        }
    }
}

pub fn vec_dot_ref(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        sum += dot_scale_min(x.d, x.dmin, &x.scales, &unpack(x), y);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::k_quants::test_util::{check_edge_cases, check_rmse, check_vec_dot, Funcs};

    const F: Funcs<BlockQ5K> = Funcs { quantize: quantize_ref, dequantize: dequantize_ref, vec_dot: vec_dot_ref };

    /// Relative RMSE (error RMS / input std) measured on these inputs: 0.0361 (N(0,1)) and
    /// 0.0279 (uniform); typical for this type: ~0.04. ggml's reference quantizer has the
    /// same error: ours is the same algorithm and reproduces llama-quantize's blocks byte for
    /// byte (golden test).
    #[test]
    fn round_trip_error() {
        let (n, u) = check_rmse(&F, 0.038, 0.029);
        eprintln!("Q5_K relative RMSE: normal {n:.4}, uniform {u:.4}");
    }

    #[test]
    fn dot_matches_exact_math() {
        check_vec_dot(&F);
    }

    #[test]
    fn edge_cases() {
        check_edge_cases(&F);
    }
}
