//! AVX2 kernels for the K-quant weight types, dotted with Q8_K activations.
//!
//! This file holds the tier's shared SIMD pieces (shuffle tables, loads, stores, sums) and
//! Q2_K, Q3_K, Q4_K; Q5_K and Q6_K are in `k_quants_q5q6.rs`. Block sizes, row checks and
//! the scalar scale unpacking are in `x86/common.rs`.
//!
//! Dot products: the weight quants are made unsigned (Q3_K and Q6_K get their offset back
//! through the activation block sums), multiplied with the int8 activations by `vpmaddubsw`
//! into i16 pairs (no saturation: |q| < 64, |a| <= 128), and weighted by the per-group
//! scales with `vpmaddwd`, so each super-block's integer sum is exact; one float
//! multiply-add per super-block accumulates it into 8 lanes, reduced in a fixed order at the
//! end of the row. Q2_K and Q3_K instead sum each block's lanes exactly and take the scalar
//! reference's float steps, whose bits their many-row product (`iq_grid::gemm`) gives too.
//!
//! Dequantization does ggml's float operations in ggml's order with separate multiply and
//! subtract (never FMA), so it is bit-exact with the scalar reference.

// Index loops follow the block layout (chunk n, plane j) and are fully unrolled.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::k_quants_q5q6 as q5q6;
use crate::quant::dispatch::Kernels;
use crate::quant::x86::common::{
    f16_pair, f32_at, hsum256, hsum256_epi32, hsum256_epi32_pair, row_entry_points, unpack_scales_mins_k4, unpack_scales_q3k, xmm_u64x2,
    Q2K_BYTES, Q3K_BYTES, Q4K_BYTES, Q8K_BSUMS, Q8K_BYTES, Q8K_QS,
};
use crate::quant::{GgmlType, QK_K};

pub(super) fn kernels(ty: GgmlType) -> Option<Kernels> {
    Some(match ty {
        GgmlType::Q2_K => Kernels { dequantize: dequantize_q2_k, vec_dot: vec_dot_q2_k },
        GgmlType::Q3_K => Kernels { dequantize: dequantize_q3_k, vec_dot: vec_dot_q3_k },
        GgmlType::Q4_K => Kernels { dequantize: dequantize_q4_k, vec_dot: vec_dot_q4_k },
        GgmlType::Q5_K => Kernels { dequantize: q5q6::dequantize_q5_k, vec_dot: q5q6::vec_dot_q5_k },
        GgmlType::Q6_K => Kernels { dequantize: q5q6::dequantize_q6_k, vec_dot: q5q6::vec_dot_q6_k },
        _ => return None,
    })
}

row_entry_points! { "AVX2 + FMA + F16C";
    dequantize_q2_k => dequantize_q2_k_impl, vec_dot_q2_k => vec_dot_q2_k_impl, Q2K_BYTES;
    dequantize_q3_k => dequantize_q3_k_impl, vec_dot_q3_k => vec_dot_q3_k_impl, Q3K_BYTES;
    dequantize_q4_k => dequantize_q4_k_impl, vec_dot_q4_k => vec_dot_q4_k_impl, Q4K_BYTES;
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// `vpshufb` controls over 8 i16 scales (in each 128-bit lane) giving scale `2j` in the low
/// lane and `2j + 1` in the high lane: for 32 values that span two 16-value groups.
pub(super) static PAIR_SHUF: [[u8; 32]; 4] = {
    let mut t = [[0u8; 32]; 4];
    let mut j = 0;
    while j < 4 {
        let mut b = 0;
        while b < 32 {
            t[j][b] = (4 * j + 2 * (b / 16) + b % 2) as u8;
            b += 1;
        }
        j += 1;
    }
    t
};

/// `vpshufb` controls over 8 i16 scales (in each 128-bit lane) broadcasting scale `g`: for 32
/// values of one group.
pub(super) static WORD_SHUF: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    let mut g = 0;
    while g < 8 {
        let mut b = 0;
        while b < 32 {
            t[g][b] = (2 * g + b % 2) as u8;
            b += 1;
        }
        g += 1;
    }
    t
};

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_table<T>(t: &T) -> __m256i {
    _mm256_loadu_si256((t as *const T).cast())
}

/// Stores `d * q - m` (multiply, then subtract: no FMA) for 8 integer values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_dq_min(y: *mut f32, q: __m256i, d: f32, m: f32) {
    let v = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q));
    _mm256_storeu_ps(y, _mm256_sub_ps(v, _mm256_set1_ps(m)));
}

/// Stores `d * q` for 8 integer values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_dq(y: *mut f32, q: __m256i, d: f32) {
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q)));
}

/// 8 bytes at `p` widened to 8 u32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_u8x8(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast()))
}

// ---------------------------------------------------------------------------------------------
// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
// Value 128n + 32j + l (l < 32) is bits 2j..2j+2 of qs[32n + l]; group (16 values) 8n+2j+l/16.

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_q2_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m3 = _mm256_set1_epi32(3);
    for i in 0..nb {
        let x = w.add(i * Q2K_BYTES);
        let y = out.add(i * QK_K);
        let (d, dmin) = f16_pair(x.add(80));
        for n in 0..2 {
            for e in 0..4 {
                // 8 values at l = 8e..8e+8 of every plane j.
                let mut q = load_u8x8(x.add(16 + 32 * n + 8 * e));
                for j in 0..4 {
                    let sc = *x.add(8 * n + 2 * j + e / 2);
                    let dl = d * (sc & 0xF) as f32;
                    let ml = dmin * (sc >> 4) as f32;
                    store_dq_min(y.add(128 * n + 32 * j + 8 * e), _mm256_and_si256(q, m3), dl, ml);
                    q = _mm256_srli_epi32::<2>(q);
                }
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_q2_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0F);
    let shuf = [load_table(&PAIR_SHUF[0]), load_table(&PAIR_SHUF[1]), load_table(&PAIR_SHUF[2]), load_table(&PAIR_SHUF[3])];
    let mut sum = 0.0f32;
    for i in 0..nb {
        let x = w.add(i * Q2K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let yd = f32_at(y);
        let (d, dmin) = f16_pair(x.add(80));
        let (d, dmin) = (yd * d, yd * dmin);

        let packed = _mm_loadu_si128(x.cast());
        let scales = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let summs = _mm256_madd_epi16(mins, bsums);
        // Scales of groups 8n..8n+8 in both lanes.
        let halves = [_mm256_permute2x128_si256::<0x00>(scales, scales), _mm256_permute2x128_si256::<0x11>(scales, scales)];

        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let mut qs = _mm256_loadu_si256(x.add(16 + 32 * n).cast());
            for j in 0..4 {
                let q = _mm256_and_si256(qs, m3);
                let act = _mm256_loadu_si256(y.add(Q8K_QS + 128 * n + 32 * j).cast());
                let prod = _mm256_maddubs_epi16(q, act);
                let sc = _mm256_shuffle_epi8(halves[n], shuf[j]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, sc));
                qs = _mm256_srli_epi16::<2>(qs);
            }
        }
        // the block's exact integer sums, then the scalar reference's float steps: the bits
        // of every row of the many-row product (`iq_grid::gemm`, which takes Q2_K)
        let (isum, msum) = hsum256_epi32_pair(sumi, summs);
        sum += d * isum as f32 - dmin * msum as f32;
    }
    sum
}

// ---------------------------------------------------------------------------------------------
// Q3_K: hmask[32], qs[64], scales[12], d. Value 128n + 32j + l: low 2 bits from bits 2j..2j+2
// of qs[32n + l], minus 4 unless bit 4n + j of hmask[l] is set; group 8n + 2j + l/16 with
// scale (6-bit) - 32.

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_q3_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m3 = _mm256_set1_epi32(3);
    let m4 = _mm256_set1_epi32(4);
    let four = _mm256_set1_epi32(4);
    for i in 0..nb {
        let x = w.add(i * Q3K_BYTES);
        let y = out.add(i * QK_K);
        let (_, d_all) = f16_pair(x.add(106));
        let (lo, hi) = unpack_scales_q3k(x.add(96));
        let scales = (lo as u128 | (hi as u128) << 64).to_le_bytes();
        for e in 0..4 {
            // 8 values at l = 8e..8e+8 of every plane; the hmask bit moved to bit 2.
            let mut hm = _mm256_slli_epi32::<2>(load_u8x8(x.add(8 * e)));
            for n in 0..2 {
                let mut q = load_u8x8(x.add(32 + 32 * n + 8 * e));
                for j in 0..4 {
                    let dl = d_all * (scales[8 * n + 2 * j + e / 2] as i32 - 32) as f32;
                    // low - (hbit ? 0 : 4) = low + 4 * hbit - 4
                    let u = _mm256_add_epi32(_mm256_and_si256(q, m3), _mm256_and_si256(hm, m4));
                    store_dq(y.add(128 * n + 32 * j + 8 * e), _mm256_sub_epi32(u, four), dl);
                    q = _mm256_srli_epi32::<2>(q);
                    hm = _mm256_srli_epi32::<1>(hm);
                }
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_q3_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm256_set1_epi8(4);
    let shuf = [load_table(&PAIR_SHUF[0]), load_table(&PAIR_SHUF[1]), load_table(&PAIR_SHUF[2]), load_table(&PAIR_SHUF[3])];
    let mut sum = 0.0f32;
    for i in 0..nb {
        let x = w.add(i * Q3K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let d = f32_at(y) * f16_pair(x.add(106)).1;

        let (lo, hi) = unpack_scales_q3k(x.add(96));
        let scales = _mm256_cvtepi8_epi16(_mm_sub_epi8(xmm_u64x2(lo, hi), _mm_set1_epi8(32)));
        // The quants are used as 0..8 (low bits + 4 * high bit); the -4 offset comes back as
        // 4 * sum(scale * bsum).
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let offset = _mm256_slli_epi32::<2>(_mm256_madd_epi16(scales, bsums));
        let halves = [_mm256_permute2x128_si256::<0x00>(scales, scales), _mm256_permute2x128_si256::<0x11>(scales, scales)];

        // Plane 4n + j of hmask is bit 0 of every byte of `hm` in chunk (n, j).
        let mut hm = _mm256_loadu_si256(x.cast());
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
        for n in 0..2 {
            let mut qs = _mm256_loadu_si256(x.add(32 + 32 * n).cast());
            for j in 0..4 {
                let h = _mm256_and_si256(_mm256_slli_epi16::<2>(hm), m4);
                let q = _mm256_or_si256(_mm256_and_si256(qs, m3), h);
                let act = _mm256_loadu_si256(y.add(Q8K_QS + 128 * n + 32 * j).cast());
                let prod = _mm256_maddubs_epi16(q, act);
                let sc = _mm256_shuffle_epi8(halves[n], shuf[j]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, sc));
                qs = _mm256_srli_epi16::<2>(qs);
                hm = _mm256_srli_epi16::<1>(hm);
            }
        }
        // the block's exact integer sum, then the scalar reference's float steps: the bits of
        // every row of the many-row product (`iq_grid::gemm`, which takes Q3_K)
        sum += d * hsum256_epi32(sumi) as f32;
    }
    sum
}

// ---------------------------------------------------------------------------------------------
// Q4_K: d, dmin, scales[12], qs[128]. Values 64c..64c+32 are the low nibbles of
// qs[32c..32c+32] (group 2c), values 64c+32..64c+64 their high nibbles (group 2c+1).

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_q4_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm256_set1_epi32(0x0F);
    for i in 0..nb {
        let x = w.add(i * Q4K_BYTES);
        let y = out.add(i * QK_K);
        let (d, dmin) = f16_pair(x);
        let (sc, mn) = unpack_scales_mins_k4(x.add(4));
        let (sc, mn) = (sc.to_le_bytes(), mn.to_le_bytes());
        for c in 0..4 {
            let d1 = d * sc[2 * c] as f32;
            let m1 = dmin * mn[2 * c] as f32;
            let d2 = d * sc[2 * c + 1] as f32;
            let m2 = dmin * mn[2 * c + 1] as f32;
            for e in 0..4 {
                let q = load_u8x8(x.add(16 + 32 * c + 8 * e));
                store_dq_min(y.add(64 * c + 8 * e), _mm256_and_si256(q, m4), d1, m1);
                store_dq_min(y.add(64 * c + 32 + 8 * e), _mm256_srli_epi32::<4>(q), d2, m2);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_q4_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let shuf = [
        load_table(&WORD_SHUF[0]),
        load_table(&WORD_SHUF[1]),
        load_table(&WORD_SHUF[2]),
        load_table(&WORD_SHUF[3]),
        load_table(&WORD_SHUF[4]),
        load_table(&WORD_SHUF[5]),
        load_table(&WORD_SHUF[6]),
        load_table(&WORD_SHUF[7]),
    ];
    // Each min twice, for the pair of 16-value bsums of its 32-value group.
    let min_shuf = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q4K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let yd = f32_at(y);
        let (d, dmin) = f16_pair(x);
        let (d, dmin) = (yd * d, yd * dmin);

        let (sc, mn) = unpack_scales_mins_k4(x.add(4));
        let sm = xmm_u64x2(sc, mn);
        let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, min_shuf));
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let summs = _mm256_madd_epi16(mins, bsums);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc_min);
        // The 8 scales as i16 in both lanes.
        let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));

        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let q = _mm256_loadu_si256(x.add(16 + 32 * c).cast());
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
            let act_lo = _mm256_loadu_si256(y.add(Q8K_QS + 64 * c).cast());
            let act_hi = _mm256_loadu_si256(y.add(Q8K_QS + 64 * c + 32).cast());
            let p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, act_lo), _mm256_shuffle_epi8(scales, shuf[2 * c]));
            let p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, act_hi), _mm256_shuffle_epi8(scales, shuf[2 * c + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum256(acc) - hsum256(acc_min)
}

#[cfg(test)]
mod tests {
    use super::super::k_quants_tests::check_tier;
    use crate::quant::Isa;

    #[test]
    fn avx2_k_quants_match_reference() {
        check_tier(Isa::Avx2, super::super::kernels);
    }
}
