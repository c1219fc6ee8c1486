//! AVX2 kernels for Q5_K and Q6_K (see `k_quants.rs` for the scheme).

#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::k_quants::{load_table, load_u8x8, store_dq, store_dq_min, PAIR_SHUF, WORD_SHUF};
use crate::quant::x86::common::{
    blockwise_entry, f16_pair, f32_at, hsum256, row_entry_points, unpack_scales_mins_k4, xmm_u64x2, BlockSums, Q5K_BYTES, Q6K_BYTES,
    Q8K_BSUMS, Q8K_BYTES, Q8K_QS,
};
use crate::quant::QK_K;

row_entry_points! { "AVX2 + FMA + F16C";
    dequantize_q5_k => dequantize_q5_k_impl, vec_dot_q5_k => vec_dot_q5_k_impl, Q5K_BYTES;
    dequantize_q6_k => dequantize_q6_k_impl, vec_dot_q6_k => vec_dot_q6_k_impl, Q6K_BYTES;
}

// ---------------------------------------------------------------------------------------------
// Q5_K: d, dmin, scales[12], qh[32], qs[128]. As Q4_K, plus 16 where bit 2c (values
// 64c + l) or 2c + 1 (values 64c + 32 + l) of qh[l] is set.

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_q5_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm256_set1_epi32(0x0F);
    let m16 = _mm256_set1_epi32(0x10);
    for i in 0..nb {
        let x = w.add(i * Q5K_BYTES);
        let y = out.add(i * QK_K);
        let (d, dmin) = f16_pair(x);
        let (sc, mn) = unpack_scales_mins_k4(x.add(4));
        let (sc, mn) = (sc.to_le_bytes(), mn.to_le_bytes());
        // qh[8e..8e+8] shifted so that plane 2c sits at bit 4 in chunk c.
        let mut qh = [_mm256_setzero_si256(); 4];
        for (e, h) in qh.iter_mut().enumerate() {
            *h = _mm256_slli_epi32::<4>(load_u8x8(x.add(16 + 8 * e)));
        }
        for c in 0..4 {
            let d1 = d * sc[2 * c] as f32;
            let m1 = dmin * mn[2 * c] as f32;
            let d2 = d * sc[2 * c + 1] as f32;
            let m2 = dmin * mn[2 * c + 1] as f32;
            for (e, h) in qh.iter_mut().enumerate() {
                let q = load_u8x8(x.add(48 + 32 * c + 8 * e));
                let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(*h, m16));
                let hi = _mm256_or_si256(_mm256_srli_epi32::<4>(q), _mm256_and_si256(_mm256_srli_epi32::<1>(*h), m16));
                store_dq_min(y.add(64 * c + 8 * e), lo, d1, m1);
                store_dq_min(y.add(64 * c + 32 + 8 * e), hi, d2, m2);
                *h = _mm256_srli_epi32::<2>(*h);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_q5_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let m16 = _mm256_set1_epi8(0x10);
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
    let min_shuf = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q5K_BYTES);
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
        let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));

        // Planes 2c and 2c + 1 of qh are bits 0 and 1 of every byte of `qh` in chunk c.
        let mut qh = _mm256_loadu_si256(x.add(16).cast());
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let q = _mm256_loadu_si256(x.add(48 + 32 * c).cast());
            let h_lo = _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m16);
            let h_hi = _mm256_and_si256(_mm256_slli_epi16::<3>(qh), m16);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), h_lo);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q), m4), h_hi);
            let act_lo = _mm256_loadu_si256(y.add(Q8K_QS + 64 * c).cast());
            let act_hi = _mm256_loadu_si256(y.add(Q8K_QS + 64 * c + 32).cast());
            let p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, act_lo), _mm256_shuffle_epi8(scales, shuf[2 * c]));
            let p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, act_hi), _mm256_shuffle_epi8(scales, shuf[2 * c + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
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

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_q6_k_impl(w: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm256_set1_epi32(0x0F);
    let m30 = _mm256_set1_epi32(0x30);
    let m32 = _mm256_set1_epi32(32);
    for i in 0..nb {
        let x = w.add(i * Q6K_BYTES);
        let y = out.add(i * QK_K);
        let (_, d) = f16_pair(x.add(206));
        let sc = x.add(192).cast::<i8>();
        for n in 0..2 {
            for e in 0..4 {
                let l0 = load_u8x8(x.add(64 * n + 8 * e));
                let l1 = load_u8x8(x.add(64 * n + 32 + 8 * e));
                let h = load_u8x8(x.add(128 + 32 * n + 8 * e));
                let q1 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi32::<4>(h), m30));
                let q2 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi32::<2>(h), m30));
                let q3 = _mm256_or_si256(_mm256_srli_epi32::<4>(l0), _mm256_and_si256(h, m30));
                let q4 = _mm256_or_si256(_mm256_srli_epi32::<4>(l1), _mm256_and_si256(_mm256_srli_epi32::<2>(h), m30));
                let yy = y.add(128 * n + 8 * e);
                let g = 8 * n + e / 2;
                // ggml multiplies d by the scale first, then by the quant.
                store_dq(yy, _mm256_sub_epi32(q1, m32), d * *sc.add(g) as f32);
                store_dq(yy.add(32), _mm256_sub_epi32(q2, m32), d * *sc.add(g + 2) as f32);
                store_dq(yy.add(64), _mm256_sub_epi32(q3, m32), d * *sc.add(g + 4) as f32);
                store_dq(yy.add(96), _mm256_sub_epi32(q4, m32), d * *sc.add(g + 6) as f32);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_q6_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    vec_dot_q6_k_in::<false>(w, a, nb)
}

/// Q6_K's row dot in ggml's order (`BLOCKWISE` false: eight lanes of float sums, added at the
/// end) or in the panel kernels' (true: each block's exact integer sum, then one fused
/// multiply-add per block; see `quant::panel::row_dot_on`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_q6_k_in<const BLOCKWISE: bool>(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let shuf = [load_table(&PAIR_SHUF[0]), load_table(&PAIR_SHUF[1]), load_table(&PAIR_SHUF[2]), load_table(&PAIR_SHUF[3])];
    let mut acc = BlockSums::<BLOCKWISE>::new();
    for i in 0..nb {
        let x = w.add(i * Q6K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let d = f32_at(y) * f16_pair(x.add(206)).1;

        let scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(192).cast()));
        // The quants are used as 0..64; the -32 offset comes back as 32 * sum(scale * bsum).
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scales, bsums));
        let halves = [_mm256_permute2x128_si256::<0x00>(scales, scales), _mm256_permute2x128_si256::<0x11>(scales, scales)];

        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), offset);
        for n in 0..2 {
            let l0 = _mm256_loadu_si256(x.add(64 * n).cast());
            let l1 = _mm256_loadu_si256(x.add(64 * n + 32).cast());
            let h = _mm256_loadu_si256(x.add(128 + 32 * n).cast());
            let q = [
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(h), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(h), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4), _mm256_and_si256(h, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4), _mm256_and_si256(_mm256_srli_epi16::<2>(h), m30)),
            ];
            for (r, &q) in q.iter().enumerate() {
                let act = _mm256_loadu_si256(y.add(Q8K_QS + 128 * n + 32 * r).cast());
                let prod = _mm256_maddubs_epi16(q, act);
                let sc = _mm256_shuffle_epi8(halves[n], shuf[r]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, sc));
            }
        }
        acc.add(sumi, d);
    }
    acc.sum()
}

blockwise_entry!(vec_dot_q6_k_blockwise => vec_dot_q6_k_in, Q6K_BYTES);
