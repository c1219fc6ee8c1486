//! Q4_K: 256 weights in 8 groups of 32; 4-bit quants, a 6-bit scale and a 6-bit min per group
//! over the f16 super-scales `d` and `dmin`: `x = d * sc * q - dmin * m`.

use super::scales::{dequantize_scale_min, dot_scale_min, quantize_scale_min_block, MinFit};
use crate::quant::blocks::{BlockQ4K, BlockQ8K};
use crate::quant::QK_K;

crate::quant::row_fns!(BlockQ4K, BlockQ8K);

/// Quants in element order: 32 bytes hold a run of 32 elements in their low nibbles and the
/// next run of 32 in their high nibbles.
#[inline(always)]
pub(crate) fn unpack(qs: &[u8; QK_K / 2]) -> [u8; QK_K] {
    // 64 values per 32 bytes: the low nibbles, then the high ones (whole-chunk loops, which
    // vectorise: repacking a model at load decodes every block)
    let mut q = [0u8; QK_K];
    for (chunk, bytes) in q.chunks_exact_mut(64).zip(qs.chunks_exact(32)) {
        let (low, high) = chunk.split_at_mut(32);
        for ((l, h), &b) in low.iter_mut().zip(high.iter_mut()).zip(bytes) {
            (*l, *h) = (b & 0x0F, b >> 4);
        }
    }
    q
}

pub fn dequantize_ref(blocks: &[BlockQ4K], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        dequantize_scale_min(b.d, b.dmin, &b.scales, &unpack(&b.qs), y);
    }
}

/// ggml's fit for 4-bit groups: 21 candidate scales from `nmax - 1` upwards, squared error.
const FIT: MinFit = MinFit { nmax: 15, rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };

/// ggml's `quantize_row_q4_K_ref`, byte for byte.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ4K]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        let k = quantize_scale_min_block(xb, &FIT);
        b.d = k.d;
        b.dmin = k.dmin;
        b.scales = k.scales;
        for (bytes, q) in b.qs.chunks_exact_mut(32).zip(k.q.chunks_exact(64)) {
            for (l, byte) in bytes.iter_mut().enumerate() {
                *byte = q[l] | (q[l + 32] << 4);
            }
        }
    }
}

pub fn vec_dot_ref(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        sum += dot_scale_min(x.d, x.dmin, &x.scales, &unpack(&x.qs), y);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::k_quants::test_util::{check_edge_cases, check_rmse, check_vec_dot, Funcs};

    const F: Funcs<BlockQ4K> = Funcs { quantize: quantize_ref, dequantize: dequantize_ref, vec_dot: vec_dot_ref };

    /// Relative RMSE (error RMS / input std) measured on these inputs: 0.0710 (N(0,1)) and
    /// 0.0548 (uniform); typical for this type: ~0.08. ggml's reference quantizer has the
    /// same error: ours is the same algorithm and reproduces llama-quantize's blocks byte for
    /// byte (golden test).
    #[test]
    fn round_trip_error() {
        let (n, u) = check_rmse(&F, 0.074, 0.057);
        eprintln!("Q4_K relative RMSE: normal {n:.4}, uniform {u:.4}");
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
