//! Q4_K and Q6_K weight rows dotted with several Q8_K activation rows at once (the batched
//! matmul of decoding many sequences together). Each weight super-block is unpacked once (quants
//! masked and merged, scales and mins spread) for eight activation rows; every activation row
//! then goes through exactly the integer sums and float steps of the single-row kernel
//! (`vec_dot_q4_k_impl`, `vec_dot_q6_k_impl`), so each result has the same bits as that kernel
//! on that row alone.

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::k_quants::{dot32, load_idx, pair_words, unpack_scales_mins_q4k, PAIR16_IDX};
use super::k_quants_q5q6::q6k_half;
use super::rows_shape;
use crate::quant::dispatch::VecDotRowsFn;
use crate::quant::x86::common::{f16_pair, f32_at, hsum256, Q4K_BYTES, Q6K_BYTES, Q8K_BSUMS, Q8K_BYTES, Q8K_QS};
use crate::quant::GgmlType;

/// Activation rows per pass: a batch of eight (the default number of parallel sequences)
/// unpacks each super-block once; measured faster than four despite the extra register
/// pressure (`cargo bench -p benches --bench batched_matmul -- ffn_down`).
const ROWS: usize = 8;

/// The several-activation-rows kernel of a K-quant type, where this tier has one.
pub(super) fn rows_kernel(ty: GgmlType) -> Option<VecDotRowsFn> {
    match ty {
        GgmlType::Q4_K => Some(vec_dot_rows_q4_k),
        GgmlType::Q6_K => Some(vec_dot_rows_q6_k),
        _ => None,
    }
}

/// `R` results: the Q4_K row of `nb` super-blocks at `w` dotted with the Q8_K rows at
/// `a + r * stride`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q4_k_xn<const R: usize>(w: *const u8, a: *const u8, stride: usize, nb: usize) -> [f32; R] {
    let m_lo = _mm256_set1_epi8(0x0F);
    let m_hi = _mm256_set1_epi8(0xF0u8 as i8);
    let min_dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_min = [_mm256_setzero_ps(); R];
    for i in 0..nb {
        let x = w.add(i * Q4K_BYTES);
        let (dw, dminw) = f16_pair(x);
        let sm = unpack_scales_mins_q4k(x);
        let scales = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(sm));
        let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, min_dup));
        let q: [__m256i; 4] = core::array::from_fn(|c| _mm256_loadu_si256(x.add(16 + 32 * c).cast()));
        let lo: [__m256i; 4] = core::array::from_fn(|c| _mm256_and_si256(q[c], m_lo));
        let hi: [__m256i; 4] = core::array::from_fn(|c| _mm256_and_si256(q[c], m_hi));
        let sc: [__m256i; 4] = core::array::from_fn(|c| _mm256_permutexvar_epi32(_mm256_set1_epi32(c as i32), scales));
        for r in 0..R {
            let y = a.add(r * stride + i * Q8K_BYTES);
            let yd = f32_at(y);
            let (d, dmin) = (yd * dw, yd * dminw);
            let summs = _mm256_madd_epi16(mins, _mm256_loadu_si256(y.add(Q8K_BSUMS).cast()));
            acc_min[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc_min[r]);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                let act = y.add(Q8K_QS + 64 * c);
                let pair = pair_words::<12>(dot32(lo[c], act), dot32(hi[c], act.add(32)));
                sumi = _mm256_dpwssd_epi32(sumi, pair, sc[c]);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    core::array::from_fn(|r| hsum256(acc[r]) - hsum256(acc_min[r]))
}

/// `R` results: the Q6_K row of `nb` super-blocks at `w` dotted with the Q8_K rows at
/// `a + r * stride`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q6_k_xn<const R: usize>(w: *const u8, a: *const u8, stride: usize, nb: usize) -> [f32; R] {
    let idx: [__m256i; 4] = core::array::from_fn(|k| load_idx(&PAIR16_IDX[k]));
    let mut acc = [_mm256_setzero_ps(); R];
    for i in 0..nb {
        let x = w.add(i * Q6K_BYTES);
        let dw = f16_pair(x.add(206)).1;
        let scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(192).cast()));
        // the quants as 0..64, half n in q[n]
        let q = [q6k_half(x, 0), q6k_half(x, 1)];
        let s: [__m256i; 4] = core::array::from_fn(|k| _mm256_permutexvar_epi16(idx[k], scales));
        for r in 0..R {
            let y = a.add(r * stride + i * Q8K_BYTES);
            let d = f32_at(y) * dw;
            let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
            let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scales, bsums));
            let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
            for n in 0..2 {
                let act = y.add(Q8K_QS + 128 * n);
                let p: [__m256i; 4] = core::array::from_fn(|j| dot32(q[n][j], act.add(32 * j)));
                sumi = _mm256_dpwssd_epi32(sumi, pair_words::<16>(p[0], p[1]), s[2 * n]);
                sumi = _mm256_dpwssd_epi32(sumi, pair_words::<16>(p[2], p[3]), s[2 * n + 1]);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    core::array::from_fn(|r| hsum256(acc[r]))
}

/// `out[b * n_w + i]` = weight row `i` of `w` dotted with activation row `b` of `acts`, each
/// weight super-block unpacked once for eight activation rows.
macro_rules! rows_entry {
    ($name:ident, $wb:expr, $dot:ident) => {
        fn $name(w: &[u8], acts: &[u8], stride: usize, out: &mut [f32]) {
            let (nb, n_w, batch) = rows_shape(w, $wb, acts, stride, Q8K_BYTES, out);
            for i in 0..n_w {
                let row = w[i * nb * $wb..].as_ptr();
                for c in 0..batch.div_ceil(ROWS) {
                    let rows = (batch - c * ROWS).min(ROWS);
                    let a = acts[c * ROWS * stride..].as_ptr();
                    let mut dots = [0.0f32; ROWS];
                    // SAFETY: dispatch hands out this tier's kernels only after detecting every
                    // feature they enable; `rows_shape` checked that the weight row and the `rows`
                    // activation rows at `a` hold `nb` whole super-blocks each.
                    unsafe {
                        match rows {
                            8 => dots = $dot::<8>(row, a, stride, nb),
                            7 => dots[..7].copy_from_slice(&$dot::<7>(row, a, stride, nb)),
                            6 => dots[..6].copy_from_slice(&$dot::<6>(row, a, stride, nb)),
                            5 => dots[..5].copy_from_slice(&$dot::<5>(row, a, stride, nb)),
                            4 => dots[..4].copy_from_slice(&$dot::<4>(row, a, stride, nb)),
                            3 => dots[..3].copy_from_slice(&$dot::<3>(row, a, stride, nb)),
                            2 => dots[..2].copy_from_slice(&$dot::<2>(row, a, stride, nb)),
                            _ => dots[..1].copy_from_slice(&$dot::<1>(row, a, stride, nb)),
                        }
                    }
                    for (r, &d) in dots[..rows].iter().enumerate() {
                        out[(c * ROWS + r) * n_w + i] = d;
                    }
                }
            }
        }
    };
}

rows_entry!(vec_dot_rows_q4_k, Q4K_BYTES, dot_q4_k_xn);
rows_entry!(vec_dot_rows_q6_k, Q6K_BYTES, dot_q6_k_xn);

#[cfg(test)]
mod tests {
    use super::super::check_rows_kernel;
    use crate::quant::GgmlType;

    /// Every result equals the single-row kernel's, bit for bit, for one and several
    /// super-blocks, and batches with and without a remainder of eight.
    #[test]
    fn several_rows_give_the_single_row_bits() {
        for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
            check_rows_kernel(ty, &[1, 3, 19], &[1, 4, 6, 8, 9, 17], 11);
        }
    }
}
