//! Q6_K: 256 weights in 16 groups of 16; 6-bit signed quants (4 low bits in `ql`, 2 high bits
//! in `qh`), an int8 scale per group over one f16 super-scale: `x = d * sc * q`.

use super::scales::{fit_signed_scale, nearest_int, signed_max};
use crate::quant::blocks::{f16_le, f16_le_from, BlockQ6K, BlockQ8K};
use crate::quant::QK_K;

crate::quant::row_fns!(BlockQ6K, BlockQ8K);

/// Biased quants (0..64) in element order. Each half of 128 elements uses 64 bytes of `ql`
/// and 32 of `qh`: element `32 k + l` of the half takes the low or high nibble (k < 2 or not)
/// of `ql[32 (k % 2) + l]` and bits `2k..2k+2` of `qh[l]`.
#[inline(always)]
pub(crate) fn unpack(b: &BlockQ6K) -> [u8; QK_K] {
    // half h, quarter k, lane l: a nibble of `ql` (low for k < 2) and bits 2k, 2k + 1 of `qh`
    // (loops over whole quarters, which vectorise)
    let mut q = [0u8; QK_K];
    for (h, half) in q.chunks_exact_mut(128).enumerate() {
        let qh = &b.qh[32 * h..32 * h + 32];
        for (k, quarter) in half.chunks_exact_mut(32).enumerate() {
            let ql = &b.ql[64 * h + 32 * (k % 2)..64 * h + 32 * (k % 2) + 32];
            let shift = if k < 2 { 0 } else { 4 };
            for ((out, &byte), &high) in quarter.iter_mut().zip(ql).zip(qh) {
                *out = ((byte >> shift) & 0x0F) | (((high >> (2 * k)) & 3) << 4);
            }
        }
    }
    q
}

/// Inverse of [`unpack`]; quants must be below 64.
fn pack(q: &[u8; QK_K], ql: &mut [u8; QK_K / 2], qh: &mut [u8; QK_K / 4]) {
    for h in 0..2 {
        let qh_half = &q[128 * h..128 * h + 128];
        for l in 0..32 {
            let v = |k: usize| qh_half[32 * k + l];
            ql[64 * h + l] = (v(0) & 0x0F) | ((v(2) & 0x0F) << 4);
            ql[64 * h + 32 + l] = (v(1) & 0x0F) | ((v(3) & 0x0F) << 4);
            qh[32 * h + l] = (v(0) >> 4) | ((v(1) >> 4) << 2) | ((v(2) >> 4) << 4) | ((v(3) >> 4) << 6);
        }
    }
}

pub fn dequantize_ref(blocks: &[BlockQ6K], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_le(b.d);
        let q = unpack(b);
        for ((yg, qg), &sc) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).zip(&b.scales) {
            // ggml evaluates `d * sc * q` left to right: (d * sc) * q.
            let dl = d * sc as f32;
            for (yi, &qi) in yg.iter_mut().zip(qg) {
                *yi = dl * (qi as i32 - 32) as f32;
            }
        }
    }
}

/// ggml's `quantize_row_q6_K_ref` (byte for byte): fit each group's signed scale, quantize the
/// 16 scales to int8 with the largest magnitude at -128, requantize against the stored scales.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ6K]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        let mut q = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        for (j, xg) in xb.chunks_exact(16).enumerate() {
            scales[j] = fit_signed_scale(xg, 32, &mut q[16 * j..16 * j + 16]);
        }
        let (max_scale, max_abs) = signed_max(&scales);
        if max_abs < 1e-15 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }

        let iscale = -128.0f32 / max_scale;
        b.d = f16_le_from(1.0 / iscale);
        for (s, &v) in b.scales.iter_mut().zip(&scales) {
            *s = nearest_int(iscale * v).min(127) as i8;
        }

        // Requantize against the stored scales; a group whose scale is zero keeps its fit.
        let d_all = f16_le(b.d);
        for ((xg, qg), &sc) in xb.chunks_exact(16).zip(q.chunks_exact_mut(16)).zip(&b.scales) {
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue;
            }
            for (qi, &v) in qg.iter_mut().zip(xg) {
                *qi = (nearest_int(v / d).clamp(-32, 31) + 32) as u8;
            }
        }
        pack(&q, &mut b.ql, &mut b.qh);
    }
}

/// Integer dot per group of 16 times its int8 scale; one float multiply per block.
pub fn vec_dot_ref(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let q = unpack(x);
        let mut isum = 0i32;
        for ((qg, ag), &sc) in q.chunks_exact(16).zip(y.qs.chunks_exact(16)).zip(&x.scales) {
            let dot: i32 = qg.iter().zip(ag).map(|(&p, &v)| (p as i32 - 32) * v as i32).sum();
            isum += sc as i32 * dot;
        }
        sum += (f16_le(x.d) * y.d()) * isum as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::k_quants::test_util::{check_edge_cases, check_rmse, check_vec_dot, Funcs};

    const F: Funcs<BlockQ6K> = Funcs { quantize: quantize_ref, dequantize: dequantize_ref, vec_dot: vec_dot_ref };

    #[test]
    fn pack_round_trips() {
        let q: [u8; QK_K] = std::array::from_fn(|i| ((i * 37 + i / 3) % 64) as u8);
        let mut b: BlockQ6K = bytemuck::Zeroable::zeroed();
        pack(&q, &mut b.ql, &mut b.qh);
        assert_eq!(unpack(&b), q);
    }

    /// Relative RMSE (error RMS / input std) measured on these inputs: 0.0178 (N(0,1)) and
    /// 0.0133 (uniform); typical for this type: ~0.02. ggml's reference quantizer has the
    /// same error: ours is the same algorithm and reproduces llama-quantize's blocks byte for
    /// byte (golden test).
    #[test]
    fn round_trip_error() {
        let (n, u) = check_rmse(&F, 0.0185, 0.014);
        eprintln!("Q6_K relative RMSE: normal {n:.4}, uniform {u:.4}");
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
