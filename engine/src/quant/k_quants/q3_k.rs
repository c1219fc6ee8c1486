//! Q3_K: 256 weights in 16 groups of 16; 3-bit signed quants (2 low bits in `qs`, the high bit
//! in `hmask`), a signed 6-bit scale per group over one f16 super-scale: `x = d * sc * q`.

use super::q2_k::{pack2, unpack2};
use super::scales::{fit_signed_scale_descent, nearest_int, signed_max};
use crate::quant::blocks::{f16_le, f16_le_from, BlockQ3K, BlockQ8K};
use crate::quant::iq_grid::{GridType, Unpacked};
use crate::quant::QK_K;

crate::quant::row_fns!(BlockQ3K, BlockQ8K);

/// The 16 signed scales (-32..=31): the low 4 bits are nibbles of bytes 0..8 (groups 0..8 low
/// nibbles, groups 8..16 high nibbles), the high 2 bits sit in bytes 8..12, group `j` in byte
/// `8 + j % 4` at bit `2 (j / 4)`.
#[inline(always)]
pub(crate) fn unpack_scales(s: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0x0F } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// Inverse of [`unpack_scales`] for biased scales `l` in 0..64.
fn pack_scales(l: &[u8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (j, &v) in l.iter().enumerate() {
        if j < 8 {
            s[j] |= v & 0x0F;
        } else {
            s[j - 8] |= (v & 0x0F) << 4;
        }
        s[8 + j % 4] |= (v >> 4) << (2 * (j / 4));
    }
    s
}

/// Signed quants (-4..=3) in element order: the 2-bit field, minus 4 where the `hmask` bit of
/// the element (byte `e % 32`, bit `e / 32`) is clear.
#[inline(always)]
fn unpack(b: &BlockQ3K) -> [i8; QK_K] {
    let low = unpack2(&b.qs);
    std::array::from_fn(|e| {
        let high = (b.hmask[e % 32] >> (e / 32)) & 1;
        low[e] as i8 - if high != 0 { 0 } else { 4 }
    })
}

/// Q3_K in the grid types' unpacked form (`iq_grid::Unpacked`), so that the grid products take
/// it: a value times its scale is `|q| · |sc|` with the sign of `q · sc`, the scale's sign folded
/// into the values' signs. The row dot of this form is [`vec_dot_ref`]'s: the same integer
/// `isum`, then `(d · d₈) · isum` per block in order (its constant `c` is 1).
pub(crate) const GRID: GridType = GridType { block_bytes: 110, unpack: unpack_grid, c: 1.0, shifted: false, scale_values: 16, mins: false };

fn unpack_grid(bytes: &[u8], u: &mut Unpacked) {
    let b: &BlockQ3K = bytemuck::from_bytes(bytes);
    u.d = f16_le(b.d);
    let (q, scales) = (unpack(b), unpack_scales(&b.scales));
    for (g, values) in q.chunks_exact(8).enumerate() {
        let sc = scales[g / 2];
        let (mut magnitudes, mut signs) = (0u64, 0u8);
        for (j, &v) in values.iter().enumerate() {
            magnitudes |= u64::from(v.unsigned_abs()) << (8 * j);
            signs |= u8::from((v < 0) != (sc < 0)) << j;
        }
        u.set_group(g, magnitudes, signs);
        u.scales[g] = sc.unsigned_abs();
    }
}

pub fn dequantize_ref(blocks: &[BlockQ3K], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d_all = f16_le(b.d);
        let q = unpack(b);
        for ((yg, qg), &sc) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).zip(&unpack_scales(&b.scales)) {
            let dl = d_all * sc as f32;
            for (yi, &qi) in yg.iter_mut().zip(qg) {
                *yi = dl * qi as f32;
            }
        }
    }
}

/// ggml's `quantize_row_q3_K_ref` (byte for byte): fit each group's signed scale by
/// coordinate descent, quantize the 16 scales to 6 bits with the largest magnitude at -32,
/// requantize every value against the scales as stored.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ3K]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        // Biased quants 0..8 (value + 4).
        let mut q = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        for (j, xg) in xb.chunks_exact(16).enumerate() {
            scales[j] = fit_signed_scale_descent(xg, 4, &mut q[16 * j..16 * j + 16]);
        }
        let (max_scale, _) = signed_max(&scales);

        b.scales = [0; 12];
        b.d = f16_le_from(0.0);
        if max_scale != 0.0 {
            let iscale = -32.0f32 / max_scale;
            let mut l = [0u8; 16];
            for (lj, &s) in l.iter_mut().zip(&scales) {
                // ggml stores the rounded value in an int8 before clamping.
                *lj = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
            }
            b.scales = pack_scales(&l);
            b.d = f16_le_from(1.0 / iscale);
        }

        // Requantize against the stored scales; a group whose scale is zero keeps its fit.
        let d_all = f16_le(b.d);
        for ((xg, qg), &sc) in xb.chunks_exact(16).zip(q.chunks_exact_mut(16)).zip(&unpack_scales(&b.scales)) {
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue;
            }
            for (qi, &v) in qg.iter_mut().zip(xg) {
                *qi = (nearest_int(v / d).clamp(-4, 3) + 4) as u8;
            }
        }

        b.hmask = [0; QK_K / 8];
        for (e, qi) in q.iter_mut().enumerate() {
            if *qi > 3 {
                b.hmask[e % 32] |= 1 << (e / 32);
                *qi -= 4;
            }
        }
        b.qs = pack2(&q);
    }
}

/// Integer dot per group of 16 times its signed scale; one float multiply per block.
pub fn vec_dot_ref(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let q = unpack(x);
        let scales = unpack_scales(&x.scales);
        let mut isum = 0i32;
        for ((qg, ag), &sc) in q.chunks_exact(16).zip(y.qs.chunks_exact(16)).zip(&scales) {
            let dot: i32 = qg.iter().zip(ag).map(|(&p, &v)| p as i32 * v as i32).sum();
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

    const F: Funcs<BlockQ3K> = Funcs { quantize: quantize_ref, dequantize: dequantize_ref, vec_dot: vec_dot_ref };

    #[test]
    fn scale_packing_round_trips() {
        let l: [u8; 16] = std::array::from_fn(|j| (j * 13 % 64) as u8);
        let s = unpack_scales(&pack_scales(&l));
        for j in 0..16 {
            assert_eq!(s[j] as i32, l[j] as i32 - 32, "group {j}");
        }
    }

    /// Relative RMSE (error RMS / input std) measured on these inputs: 0.1537 (N(0,1)) and
    /// 0.1245 (uniform); typical for this type: ~0.17. ggml's reference quantizer has the
    /// same error: ours is the same algorithm and reproduces llama-quantize's blocks byte for
    /// byte (golden test).
    #[test]
    fn round_trip_error() {
        let (n, u) = check_rmse(&F, 0.16, 0.13);
        eprintln!("Q3_K relative RMSE: normal {n:.4}, uniform {u:.4}");
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
