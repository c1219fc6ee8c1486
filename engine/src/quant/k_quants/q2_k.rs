//! Q2_K: 256 weights in 16 groups of 16; 2-bit quants, a 4-bit scale and a 4-bit min per group
//! over the f16 super-scales `d` and `dmin`: `x = d * sc * q - dmin * m`.

use super::scales::{fit_scale_min, nearest_int, MinFit};
use crate::quant::blocks::{f16_le, f16_le_from, BlockQ2K, BlockQ8K};
use crate::quant::iq_grid::{GridType, Unpacked};
use crate::quant::QK_K;

crate::quant::row_fns!(BlockQ2K, BlockQ8K);

/// The 2-bit fields of Q2_K / Q3_K in element order: element `128 h + 32 k + l` sits in bits
/// `2k..2k+2` of byte `32 h + l`, so 32 consecutive bytes hold 4 runs of 32 elements.
#[inline(always)]
pub(crate) fn unpack2(qs: &[u8; QK_K / 4]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (qh, bytes) in q.chunks_exact_mut(128).zip(qs.chunks_exact(32)) {
        for (k, run) in qh.chunks_exact_mut(32).enumerate() {
            for (qi, &b) in run.iter_mut().zip(bytes) {
                *qi = (b >> (2 * k)) & 3;
            }
        }
    }
    q
}

/// Inverse of [`unpack2`]; quants must be below 4.
pub(crate) fn pack2(q: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for (bytes, qh) in qs.chunks_exact_mut(32).zip(q.chunks_exact(128)) {
        for (l, b) in bytes.iter_mut().enumerate() {
            *b = qh[l] | (qh[l + 32] << 2) | (qh[l + 64] << 4) | (qh[l + 96] << 6);
        }
    }
    qs
}

pub fn dequantize_ref(blocks: &[BlockQ2K], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_le(b.d), f16_le(b.dmin));
        let q = unpack2(&b.qs);
        for ((yg, qg), &sc) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).zip(&b.scales) {
            // As ggml: group factors first, then a separate multiply and subtract per value.
            let dl = d * (sc & 0x0F) as f32;
            let ml = dmin * (sc >> 4) as f32;
            for (yi, &qi) in yg.iter_mut().zip(qg) {
                *yi = dl * qi as f32 - ml;
            }
        }
    }
}

/// ggml's fit for 2-bit groups: error weighted by |x| and measured as absolute difference,
/// 16 candidate scales from `nmax - 0.5` upwards.
const FIT: MinFit = MinFit { nmax: 3, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: true };

/// ggml's `quantize_row_q2_K_ref` (byte for byte): fit each group's scale and min, quantize
/// both to 4 bits against the largest of each kind, requantize against the stored values.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ2K]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        let mut q = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for (j, xg) in xb.chunks_exact(16).enumerate() {
            let mut w = [0.0f32; 16];
            for (wi, &v) in w.iter_mut().zip(xg) {
                *wi = v.abs();
            }
            (scales[j], mins[j]) = fit_scale_min(xg, &w, &FIT, &mut q[16 * j..16 * j + 16]);
            max_scale = if scales[j] > max_scale { scales[j] } else { max_scale };
            max_min = if mins[j] > max_min { mins[j] } else { max_min };
        }

        b.scales = [0; 16];
        b.d = f16_le_from(0.0);
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (s, &v) in b.scales.iter_mut().zip(&scales) {
                *s = nearest_int(iscale * v) as u8;
            }
            b.d = f16_le_from(max_scale / 15.0);
        }
        b.dmin = f16_le_from(0.0);
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (s, &v) in b.scales.iter_mut().zip(&mins) {
                *s |= (nearest_int(iscale * v) << 4) as u8;
            }
            b.dmin = f16_le_from(max_min / 15.0);
        }

        // Requantize against the scales as stored; a group whose scale rounded to zero keeps
        // the quants of its fit (they multiply zero).
        let (d_all, dmin_all) = (f16_le(b.d), f16_le(b.dmin));
        for (j, xg) in xb.chunks_exact(16).enumerate() {
            let d = d_all * (b.scales[j] & 0x0F) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (b.scales[j] >> 4) as f32;
            for (qi, &v) in q[16 * j..16 * j + 16].iter_mut().zip(xg) {
                *qi = nearest_int((v + dm) / d).clamp(0, 3) as u8;
            }
        }
        b.qs = pack2(&q);
    }
}

/// Q2_K in the grid types' unpacked form (`iq_grid::Unpacked`) with its mins, for the AVX-512
/// many-row product: values 0..3, a 4-bit scale and a 4-bit min per 16 values; that product
/// gives [`vec_dot_ref`]'s bits.
pub(crate) const GRID: GridType = GridType { block_bytes: 84, unpack: unpack_grid, c: 1.0, shifted: false, scale_values: 16, mins: true };

fn unpack_grid(bytes: &[u8], u: &mut Unpacked) {
    let b: &BlockQ2K = bytemuck::from_bytes(bytes);
    (u.d, u.dmin) = (f16_le(b.d), f16_le(b.dmin));
    for (g, values) in unpack2(&b.qs).chunks_exact(8).enumerate() {
        u.set_group(g, u64::from_le_bytes(values.try_into().expect("8 values")), 0);
        u.scales[g] = b.scales[g / 2] & 0x0F;
    }
    for (m, &s) in u.mins.iter_mut().zip(&b.scales) {
        *m = s >> 4;
    }
}

/// Integer dot per group of 16 times its 4-bit scale; the mins multiply Q8_K's group sums.
pub fn vec_dot_ref(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let q = unpack2(&x.qs);
        let (mut isum, mut summs) = (0i32, 0i32);
        for (j, (qg, ag)) in q.chunks_exact(16).zip(y.qs.chunks_exact(16)).enumerate() {
            let dot: i32 = qg.iter().zip(ag).map(|(&p, &v)| p as i32 * v as i32).sum();
            isum += (x.scales[j] & 0x0F) as i32 * dot;
            summs += (x.scales[j] >> 4) as i32 * y.bsum(j) as i32;
        }
        let dall = y.d() * f16_le(x.d);
        let dmin = y.d() * f16_le(x.dmin);
        sum += dall * isum as f32 - dmin * summs as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::k_quants::test_util::{check_edge_cases, check_rmse, check_vec_dot, Funcs};

    const F: Funcs<BlockQ2K> = Funcs { quantize: quantize_ref, dequantize: dequantize_ref, vec_dot: vec_dot_ref };

    #[test]
    fn pack2_round_trips() {
        let q: [u8; QK_K] = std::array::from_fn(|i| ((i * 7 + i / 5) % 4) as u8);
        assert_eq!(unpack2(&pack2(&q)), q);
    }

    /// Relative RMSE (error RMS / input std) measured on these inputs: 0.2990 (N(0,1)) and
    /// 0.2344 (uniform); typical for this type: ~0.3. ggml's reference quantizer has the
    /// same error: ours is the same algorithm and reproduces llama-quantize's blocks byte for
    /// byte (golden test).
    #[test]
    fn round_trip_error() {
        let (n, u) = check_rmse(&F, 0.31, 0.245);
        eprintln!("Q2_K relative RMSE: normal {n:.4}, uniform {u:.4}");
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
