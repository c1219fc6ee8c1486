//! AVX-512 (+VNNI) kernels for Q5_K and Q6_K (see `k_quants.rs` for the scheme).

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::k_quants::{dot32, dot_groups16, load_idx, load_u8x16, pair_words, store_dq, store_dq_min, unpack_scales_mins_q4k, PAIR16_IDX};
use crate::quant::x86::common::{
    blockwise_entry, f16_pair, f32_at, hsum256, row_entry_points, unpack_scales_mins_k4, BlockSums, Q5K_BYTES, Q6K_BYTES, Q8K_BSUMS,
    Q8K_BYTES, Q8K_QS,
};
use crate::quant::QK_K;

row_entry_points! { "AVX-512 (F, BW, VL, DQ, VNNI) + AVX2 + FMA + F16C";
    dequantize_q5_k => dequantize_q5_k_impl, vec_dot_q5_k => vec_dot_q5_k_impl, Q5K_BYTES;
    dequantize_q6_k => dequantize_q6_k_impl, vec_dot_q6_k => vec_dot_q6_k_impl, Q6K_BYTES;
}

// ---------------------------------------------------------------------------------------------
// Q5_K: d, dmin, scales[12], qh[32], qs[128]. As Q4_K, plus 16 where bit 2c (values
// 64c + l) or 2c + 1 (values 64c + 32 + l) of qh[l] is set.

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dequantize_q5_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm512_set1_epi32(0x0F);
    let sixteen = _mm512_set1_epi32(16);
    for i in 0..nb {
        let x = w.add(i * Q5K_BYTES);
        let y = out.add(i * QK_K);
        let (d, dmin) = f16_pair(x);
        let (sc, mn) = unpack_scales_mins_k4(x.add(4));
        let (sc, mn) = (sc.to_le_bytes(), mn.to_le_bytes());
        let qh = [load_u8x16(x.add(16)), load_u8x16(x.add(32))];
        for c in 0..4 {
            let d1 = d * sc[2 * c] as f32;
            let m1 = dmin * mn[2 * c] as f32;
            let d2 = d * sc[2 * c + 1] as f32;
            let m2 = dmin * mn[2 * c + 1] as f32;
            let bit_lo = _mm512_set1_epi32(1 << (2 * c));
            let bit_hi = _mm512_set1_epi32(2 << (2 * c));
            for h in 0..2 {
                let q = load_u8x16(x.add(48 + 32 * c + 16 * h));
                let lo = _mm512_and_si512(q, m4);
                let lo = _mm512_mask_add_epi32(lo, _mm512_test_epi32_mask(qh[h], bit_lo), lo, sixteen);
                let hi = _mm512_srli_epi32::<4>(q);
                let hi = _mm512_mask_add_epi32(hi, _mm512_test_epi32_mask(qh[h], bit_hi), hi, sixteen);
                store_dq_min(y.add(64 * c + 16 * h), lo, d1, m1);
                store_dq_min(y.add(64 * c + 32 + 16 * h), hi, d2, m2);
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q5_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m_lo = _mm256_set1_epi8(0x0F);
    let m16 = _mm256_set1_epi8(0x10);
    let min_dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q5K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let yd = f32_at(y);
        let (d, dmin) = f16_pair(x);
        let (d, dmin) = (yd * d, yd * dmin);

        let sm = unpack_scales_mins_q4k(x);
        let scales = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(sm));
        let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, min_dup));
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let summs = _mm256_madd_epi16(mins, bsums);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc_min);

        // Planes 2c and 2c + 1 of qh are bits 0 and 1 of every byte of `qh` in chunk c.
        let mut qh = _mm256_loadu_si256(x.add(16).cast());
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let q = _mm256_loadu_si256(x.add(48 + 32 * c).cast());
            let act = y.add(Q8K_QS + 64 * c);
            // (a & 0x0F) | b, with b the fifth bit (16) alone.
            let h_lo = _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m16);
            let h_hi = _mm256_and_si256(_mm256_slli_epi16::<3>(qh), m16);
            let lo = _mm256_ternarylogic_epi32::<0xEC>(q, h_lo, m_lo);
            let hi = _mm256_ternarylogic_epi32::<0xEC>(_mm256_srli_epi16::<4>(q), h_hi, m_lo);
            let sc = _mm256_permutexvar_epi32(_mm256_set1_epi32(c as i32), scales);
            sumi = _mm256_dpwssd_epi32(sumi, pair_words::<16>(dot32(lo, act), dot32(hi, act.add(32))), sc);
            qh = _mm256_srli_epi16::<2>(qh);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum256(acc) - hsum256(acc_min)
}

// ---------------------------------------------------------------------------------------------
// Q6_K: ql[128], qh[64], scales[16] (i8), d. In half n, for l < 32 (with L = ql[64n..],
// H = qh[32n..]): value 128n + l is L[l] low nibble + H[l] bits 0-1, +32 is L[32 + l] low
// nibble + bits 2-3, +64 is L[l] high nibble + bits 4-5, +96 is L[32 + l] high nibble + bits
// 6-7; minus 32. Group 8n + (value - 128n) / 16.

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dequantize_q6_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm512_set1_epi32(0x0F);
    let m3 = _mm512_set1_epi32(0x03);
    let m3_2 = _mm512_set1_epi32(0x0C);
    let m3_4 = _mm512_set1_epi32(0x30);
    let m3_6 = _mm512_set1_epi32(0xC0);
    let m32 = _mm512_set1_epi32(32);
    for i in 0..nb {
        let x = w.add(i * Q6K_BYTES);
        let y = out.add(i * QK_K);
        let (_, d) = f16_pair(x.add(206));
        let sc = x.add(192).cast::<i8>();
        for n in 0..2 {
            for p in 0..2 {
                let l0 = load_u8x16(x.add(64 * n + 16 * p));
                let l1 = load_u8x16(x.add(64 * n + 32 + 16 * p));
                let h = load_u8x16(x.add(128 + 32 * n + 16 * p));
                // Bits 2k..2k+2 of qh moved to bits 4-5.
                let h0 = _mm512_slli_epi32::<4>(_mm512_and_si512(h, m3));
                let h1 = _mm512_slli_epi32::<2>(_mm512_and_si512(h, m3_2));
                let h2 = _mm512_and_si512(h, m3_4);
                let h3 = _mm512_srli_epi32::<2>(_mm512_and_si512(h, m3_6));
                let q1 = _mm512_or_si512(_mm512_and_si512(l0, m4), h0);
                let q2 = _mm512_or_si512(_mm512_and_si512(l1, m4), h1);
                let q3 = _mm512_or_si512(_mm512_srli_epi32::<4>(l0), h2);
                let q4 = _mm512_or_si512(_mm512_srli_epi32::<4>(l1), h3);
                let yy = y.add(128 * n + 16 * p);
                let g = 8 * n + p;
                // ggml multiplies d by the scale first, then by the quant.
                store_dq(yy, _mm512_sub_epi32(q1, m32), d * *sc.add(g) as f32);
                store_dq(yy.add(32), _mm512_sub_epi32(q2, m32), d * *sc.add(g + 2) as f32);
                store_dq(yy.add(64), _mm512_sub_epi32(q3, m32), d * *sc.add(g + 4) as f32);
                store_dq(yy.add(96), _mm512_sub_epi32(q4, m32), d * *sc.add(g + 6) as f32);
            }
        }
    }
}

/// The 128 quants of half `n` of the Q6_K super-block at `x`, as unsigned 0..64 (the -32 offset
/// is the caller's), in its four 32-value runs: values `128n + 32j ..` in run `j`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn q6k_half(x: *const u8, n: usize) -> [__m256i; 4] {
    let m_lo = _mm256_set1_epi8(0x0F);
    let m33 = _mm256_set1_epi8(0x33);
    let mcc = _mm256_set1_epi8(0xCCu8 as i8);
    let l0 = _mm256_loadu_si256(x.add(64 * n).cast());
    let l1 = _mm256_loadu_si256(x.add(64 * n + 32).cast());
    let h = _mm256_loadu_si256(x.add(128 + 32 * n).cast());
    // qh bits 0-1 and 4-5 (h33), 2-3 and 6-7 (hcc): shifted so that the wanted pair lands on
    // bits 4-5 with zeros above, then merged under the low-nibble mask (`m_lo ? a : b`).
    let h33 = _mm256_and_si256(h, m33);
    let hcc = _mm256_and_si256(h, mcc);
    [
        _mm256_ternarylogic_epi32::<0xE4>(l0, _mm256_slli_epi16::<4>(h33), m_lo),
        _mm256_ternarylogic_epi32::<0xE4>(l1, _mm256_slli_epi16::<2>(hcc), m_lo),
        _mm256_ternarylogic_epi32::<0xE4>(_mm256_srli_epi16::<4>(l0), h33, m_lo),
        _mm256_ternarylogic_epi32::<0xE4>(_mm256_srli_epi16::<4>(l1), _mm256_srli_epi16::<2>(hcc), m_lo),
    ]
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q6_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    vec_dot_q6_k_in::<false>(w, a, nb)
}

/// Q6_K's row dot in ggml's order (`BLOCKWISE` false: eight lanes of float sums, added at the
/// end) or in the panel kernels' (true: each block's exact integer sum, then one fused
/// multiply-add per block; see `quant::panel::row_dot_on`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q6_k_in<const BLOCKWISE: bool>(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let idx = [load_idx(&PAIR16_IDX[0]), load_idx(&PAIR16_IDX[1]), load_idx(&PAIR16_IDX[2]), load_idx(&PAIR16_IDX[3])];
    let mut acc = BlockSums::<BLOCKWISE>::new();
    for i in 0..nb {
        let x = w.add(i * Q6K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let d = f32_at(y) * f16_pair(x.add(206)).1;

        let scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(192).cast()));
        // The quants are used as 0..64; the -32 offset comes back as 32 * sum(scale * bsum).
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scales, bsums));

        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
        for n in 0..2 {
            let [q1, q2, q3, q4] = q6k_half(x, n);
            let act = y.add(Q8K_QS + 128 * n);
            let d = [dot32(q1, act), dot32(q2, act.add(32)), dot32(q3, act.add(64)), dot32(q4, act.add(96))];
            sumi = dot_groups16(sumi, d, scales, [idx[2 * n], idx[2 * n + 1]]);
        }
        acc.add(sumi, d);
    }
    acc.sum()
}

blockwise_entry!(vec_dot_q6_k_blockwise => vec_dot_q6_k_in, Q6K_BYTES);
