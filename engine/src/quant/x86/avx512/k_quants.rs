//! AVX-512 (+VNNI) kernels for the K-quant weight types, dotted with Q8_K activations.
//!
//! This file holds the tier's shared SIMD pieces (index tables, loads, stores, sums) and
//! Q2_K, Q3_K, Q4_K; Q5_K and Q6_K are in `k_quants_q5q6.rs`. Block sizes, row checks and
//! the scalar scale unpacking are in `x86/common.rs`.
//!
//! Dot products work on 256-bit vectors with the AVX-512 VL/BW/VNNI instructions: on CPUs
//! that split 512-bit operations in two (AMD Zen 4) the cost is the number of 256-bit
//! operations, and 32-byte runs of weights line up with the activations without shuffles.
//! The weight quants are made unsigned (Q3_K and Q6_K get their offset back through the
//! activation block sums) and multiplied with the int8 activations by `vpdpbusd` (exact
//! i32 sums of 4 products). Two such vectors from different groups are packed into the two
//! i16 halves of each i32 lane (every partial sum fits in i16), so that one `vpdpwssd`
//! applies both groups' scales. Each super-block's integer sum is thus exact; one float
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

row_entry_points! { "AVX-512 (F, BW, VL, DQ, VNNI) + AVX2 + FMA + F16C";
    dequantize_q2_k => dequantize_q2_k_impl, vec_dot_q2_k => vec_dot_q2_k_impl, Q2K_BYTES;
    dequantize_q3_k => dequantize_q3_k_impl, vec_dot_q3_k => vec_dot_q3_k_impl, Q3K_BYTES;
    dequantize_q4_k => dequantize_q4_k_impl, vec_dot_q4_k => vec_dot_q4_k_impl, Q4K_BYTES;
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// The 8 scales (bytes 0..8) and 8 mins (bytes 8..16) of a Q4_K / Q5_K super-block from
/// the first 16 bytes of the block (`d`, `dmin`, then the 12 packed bytes `s`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn unpack_scales_mins_q4k(x: *const u8) -> __m128i {
    const Z: i8 = -128;
    let raw = _mm_loadu_si128(x.cast());
    // Low bits: s[0..4] & 63 (scales 0..4), s[8..12] & 15 (scales 4..8), s[4..8] & 63 (mins
    // 0..4), s[8..12] >> 4 (mins 4..8).
    let lo = _mm_shuffle_epi8(raw, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, Z, Z, Z, Z));
    let hi_nibbles = _mm_shuffle_epi8(_mm_srli_epi16::<4>(raw), _mm_setr_epi8(Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, 12, 13, 14, 15));
    let mask = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    let low = _mm_and_si128(_mm_or_si128(lo, hi_nibbles), mask);
    // High 2 bits of groups 4..8: the top bits of s[0..4] (scales) and s[4..8] (mins).
    let top = _mm_shuffle_epi8(raw, _mm_setr_epi8(Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z, 8, 9, 10, 11));
    let top = _mm_srli_epi16::<2>(_mm_and_si128(top, _mm_set1_epi8(-64)));
    _mm_or_si128(low, top)
}

/// Packs two vectors of i32 partial sums into i16 pairs: `lo`'s value in the low half of
/// each lane and `hi >> (16 - SHIFT)` in the high half, where `hi` holds 2^(16 - SHIFT) times
/// the partial sums (multiples of it). Both values must fit in i16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) fn pair_words<const SHIFT: i32>(lo: __m256i, hi: __m256i) -> __m256i {
    // (lo & 0xFFFF) | (hi << SHIFT)
    _mm256_ternarylogic_epi32::<0xF8>(_mm256_slli_epi32::<SHIFT>(hi), lo, _mm256_set1_epi32(0xFFFF))
}

/// `vpermw` indices over 16 i16 scales for a pair of 32-value runs whose 128-bit lanes are
/// 16-value groups: run A has groups `g`, `g + 1` and run B groups `g + 2`, `g + 3`, with
/// `g = 4p`. Word `2m` of the result is A's scale for lane `m / 4`, word `2m + 1` B's.
pub(super) static PAIR16_IDX: [[u16; 16]; 4] = {
    let mut t = [[0u16; 16]; 4];
    let mut p = 0;
    while p < 4 {
        let mut w = 0;
        while w < 16 {
            t[p][w] = (4 * p + w / 8 + 2 * (w % 2)) as u16;
            w += 1;
        }
        p += 1;
    }
    t
};

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_idx(t: &[u16; 16]) -> __m256i {
    _mm256_loadu_si256(t.as_ptr().cast())
}

/// Adds to `sumi` the scaled dot products of four 32-value runs `d` (`vpdpbusd` sums whose
/// 128-bit lanes are 16-value groups `4p..4p + 8` in order, for the index pair `idx` of
/// `PAIR16_IDX[2q..2q + 2]`, `p = 2q`) with the 16 i16 `scales`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_groups16(sumi: __m256i, d: [__m256i; 4], scales: __m256i, idx: [__m256i; 2]) -> __m256i {
    let s01 = _mm256_permutexvar_epi16(idx[0], scales);
    let s23 = _mm256_permutexvar_epi16(idx[1], scales);
    let sumi = _mm256_dpwssd_epi32(sumi, pair_words::<16>(d[0], d[1]), s01);
    _mm256_dpwssd_epi32(sumi, pair_words::<16>(d[2], d[3]), s23)
}

/// `vpdpbusd` of 32 unsigned weight bytes with the 32 activations at `p`, from zero.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot32(q: __m256i, p: *const u8) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, _mm256_loadu_si256(p.cast()))
}

/// Stores `d * q - m` (multiply, then subtract: no FMA) for 16 integer values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn store_dq_min(y: *mut f32, q: __m512i, d: f32, m: f32) {
    let v = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(q));
    _mm512_storeu_ps(y, _mm512_sub_ps(v, _mm512_set1_ps(m)));
}

/// Stores `d * q` for 16 integer values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn store_dq(y: *mut f32, q: __m512i, d: f32) {
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(q)));
}

/// 16 bytes at `p` widened to 16 u32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_u8x16(p: *const u8) -> __m512i {
    _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast()))
}

// ---------------------------------------------------------------------------------------------
// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
// Value 128n + 32j + l (l < 32) is bits 2j..2j+2 of qs[32n + l]; group (16 values) 8n+2j+l/16.

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dequantize_q2_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m3 = _mm512_set1_epi32(3);
    for i in 0..nb {
        let x = w.add(i * Q2K_BYTES);
        let y = out.add(i * QK_K);
        let (d, dmin) = f16_pair(x.add(80));
        for n in 0..2 {
            for h in 0..2 {
                let q = load_u8x16(x.add(16 + 32 * n + 16 * h));
                for j in 0..4 {
                    let sc = *x.add(8 * n + 2 * j + h);
                    let dl = d * (sc & 0xF) as f32;
                    let ml = dmin * (sc >> 4) as f32;
                    let v = _mm512_and_si512(_mm512_srl_epi32(q, _mm_cvtsi32_si128(2 * j as i32)), m3);
                    store_dq_min(y.add(128 * n + 32 * j + 16 * h), v, dl, ml);
                }
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q2_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0F);
    let idx = [load_idx(&PAIR16_IDX[0]), load_idx(&PAIR16_IDX[1]), load_idx(&PAIR16_IDX[2]), load_idx(&PAIR16_IDX[3])];
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

        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            // Run j (values 128n + 32j..) is plane j of qs[32n..32n + 32]: groups 8n + 2j, +1.
            let mut qs = _mm256_loadu_si256(x.add(16 + 32 * n).cast());
            let mut d = [_mm256_setzero_si256(); 4];
            for (j, dj) in d.iter_mut().enumerate() {
                *dj = dot32(_mm256_and_si256(qs, m3), y.add(Q8K_QS + 128 * n + 32 * j));
                qs = _mm256_srli_epi16::<2>(qs);
            }
            sumi = dot_groups16(sumi, d, scales, [idx[2 * n], idx[2 * n + 1]]);
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dequantize_q3_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m3 = _mm512_set1_epi32(3);
    let m1 = _mm512_set1_epi32(1);
    let four = _mm512_set1_epi32(4);
    for i in 0..nb {
        let x = w.add(i * Q3K_BYTES);
        let y = out.add(i * QK_K);
        let (_, d_all) = f16_pair(x.add(106));
        let (lo, hi) = unpack_scales_q3k(x.add(96));
        let scales = (lo as u128 | (hi as u128) << 64).to_le_bytes();
        for h in 0..2 {
            let hm = load_u8x16(x.add(16 * h));
            for n in 0..2 {
                let q = load_u8x16(x.add(32 + 32 * n + 16 * h));
                for j in 0..4 {
                    let dl = d_all * (scales[8 * n + 2 * j + h] as i32 - 32) as f32;
                    let low = _mm512_and_si512(_mm512_srl_epi32(q, _mm_cvtsi32_si128(2 * j as i32)), m3);
                    let hb = _mm512_and_si512(_mm512_srl_epi32(hm, _mm_cvtsi32_si128((4 * n + j) as i32)), m1);
                    // low - (hbit ? 0 : 4) = low + 4 * hbit - 4
                    let v = _mm512_sub_epi32(_mm512_add_epi32(low, _mm512_slli_epi32::<2>(hb)), four);
                    store_dq(y.add(128 * n + 32 * j + 16 * h), v, dl);
                }
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q3_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let idx = [load_idx(&PAIR16_IDX[0]), load_idx(&PAIR16_IDX[1]), load_idx(&PAIR16_IDX[2]), load_idx(&PAIR16_IDX[3])];
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

        let hm = _mm256_loadu_si256(x.cast());
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
        for n in 0..2 {
            // Run j (values 128n + 32j..): plane j of qs[32n..], plane 4n + j of hmask.
            let mut qs = _mm256_loadu_si256(x.add(32 + 32 * n).cast());
            let mut d = [_mm256_setzero_si256(); 4];
            for (j, dj) in d.iter_mut().enumerate() {
                let high = _mm256_test_epi8_mask(hm, _mm256_set1_epi8(1 << (4 * n + j)));
                let q = _mm256_and_si256(qs, m3);
                let q = _mm256_mask_add_epi8(q, high, q, four);
                *dj = dot32(q, y.add(Q8K_QS + 128 * n + 32 * j));
                qs = _mm256_srli_epi16::<2>(qs);
            }
            sumi = dot_groups16(sumi, d, scales, [idx[2 * n], idx[2 * n + 1]]);
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dequantize_q4_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm512_set1_epi32(0x0F);
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
            for h in 0..2 {
                let q = load_u8x16(x.add(16 + 32 * c + 16 * h));
                store_dq_min(y.add(64 * c + 16 * h), _mm512_and_si512(q, m4), d1, m1);
                store_dq_min(y.add(64 * c + 32 + 16 * h), _mm512_srli_epi32::<4>(q), d2, m2);
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q4_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m_lo = _mm256_set1_epi8(0x0F);
    let m_hi = _mm256_set1_epi8(0xF0u8 as i8);
    // Each min twice (i16), for the pair of 16-value bsums of its 32-value group.
    let min_dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q4K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let yd = f32_at(y);
        let (d, dmin) = f16_pair(x);
        let (d, dmin) = (yd * d, yd * dmin);

        let sm = unpack_scales_mins_q4k(x);
        // As i16 words: i32 lane c holds scales 2c (low half) and 2c + 1 (high half).
        let scales = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(sm));
        let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, min_dup));
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let summs = _mm256_madd_epi16(mins, bsums);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc_min);

        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let q = _mm256_loadu_si256(x.add(16 + 32 * c).cast());
            let act = y.add(Q8K_QS + 64 * c);
            let lo = dot32(_mm256_and_si256(q, m_lo), act);
            // 16 times the high nibbles' sums (no shift of the quants), undone by the pairing.
            let hi16 = dot32(_mm256_and_si256(q, m_hi), act.add(32));
            let sc = _mm256_permutexvar_epi32(_mm256_set1_epi32(c as i32), scales);
            sumi = _mm256_dpwssd_epi32(sumi, pair_words::<12>(lo, hi16), sc);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum256(acc) - hsum256(acc_min)
}

#[cfg(test)]
mod tests {
    use crate::quant::x86::avx2::k_quants_tests::check_tier;
    use crate::quant::Isa;

    #[test]
    fn avx512_k_quants_match_reference() {
        check_tier(Isa::Avx512, super::super::kernels);
    }
}
