//! AVX-512 (+VNNI) kernels for Q5_K and Q6_K (see `k_quants.rs` for the scheme).

use std::arch::x86_64::*;

use super::k_quants::{
    bcast256, f16_at, f32_at, hsum256, hsum512, load_table, load_u8x16, row_entry_points,
    store_dq, store_dq_min, unpack_scales_mins_k4, xmm_u64x2, PLANE_BITS, Q8K_BSUMS, Q8K_BYTES,
    Q8K_QS, SCALE16_IDX, SCALE32_SHUF,
};
use crate::quant::QK_K;

const Q5K_BYTES: usize = 176;
const Q6K_BYTES: usize = 210;

row_entry_points!(dequantize_q5_k, dequantize_q5_k_impl, vec_dot_q5_k, vec_dot_q5_k_impl, Q5K_BYTES);
row_entry_points!(dequantize_q6_k, dequantize_q6_k_impl, vec_dot_q6_k, vec_dot_q6_k_impl, Q6K_BYTES);

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
        let d = f16_at(x);
        let dmin = f16_at(x.add(2));
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
    let m4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(16);
    let nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    let shuf = [
        load_table(&SCALE32_SHUF[0]),
        load_table(&SCALE32_SHUF[1]),
        load_table(&SCALE32_SHUF[2]),
        load_table(&SCALE32_SHUF[3]),
    ];
    let planes = [
        load_table(&PLANE_BITS[0]),
        load_table(&PLANE_BITS[1]),
        load_table(&PLANE_BITS[2]),
        load_table(&PLANE_BITS[3]),
    ];
    let min_shuf = _mm256_setr_epi8(
        8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128, //
        12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128,
    );
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q5K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let yd = f32_at(y);
        let d = yd * f16_at(x);
        let dmin = yd * f16_at(x.add(2));

        let (sc, mn) = unpack_scales_mins_k4(x.add(4));
        let sm = _mm512_broadcast_i32x4(xmm_u64x2(sc, mn));
        let mins = _mm256_shuffle_epi8(_mm512_castsi512_si256(sm), min_shuf);
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let summs = _mm256_madd_epi16(mins, bsums);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc_min);

        let qh = bcast256(x.add(16));
        let mut sumi = _mm512_setzero_si512();
        for c in 0..4 {
            let q = _mm512_and_si512(_mm512_srlv_epi64(bcast256(x.add(48 + 32 * c)), nibble_shift), m4);
            let q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, planes[c]), q, sixteen);
            let act = _mm512_loadu_si512(y.add(Q8K_QS + 64 * c).cast());
            let prod = _mm512_maddubs_epi16(q, act);
            sumi = _mm512_dpwssd_epi32(sumi, prod, _mm512_shuffle_epi8(sm, shuf[c]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum512(acc) - hsum256(acc_min)
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
        let d = f16_at(x.add(208));
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn vec_dot_q6_k_impl(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let m4 = _mm512_set1_epi8(0x0F);
    let m30 = _mm512_set1_epi8(0x30);
    // Bits 0-1 (low 256) and 2-3 (high 256) of qh moved to bits 4-5; and bits 4-5 / 6-7.
    let shl_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
    let shr_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    let idx = [
        load_table(&SCALE16_IDX[0]),
        load_table(&SCALE16_IDX[1]),
        load_table(&SCALE16_IDX[2]),
        load_table(&SCALE16_IDX[3]),
    ];
    let mut acc = _mm512_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q6K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let d = f32_at(y) * f16_at(x.add(208));

        let scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(192).cast()));
        let scales = _mm512_zextsi256_si512(scales16);
        // The quants are used as 0..64; the -32 offset comes back as 32 * sum(scale * bsum).
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scales16, bsums));

        let mut sumi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offset));
        for n in 0..2 {
            let ql = _mm512_loadu_si512(x.add(64 * n).cast());
            let qh = bcast256(x.add(128 + 32 * n));
            let lo = _mm512_and_si512(ql, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4);
            // a | (b & c)
            let q_lo = _mm512_ternarylogic_epi32::<0xF8>(lo, _mm512_sllv_epi64(qh, shl_lo), m30);
            let q_hi = _mm512_ternarylogic_epi32::<0xF8>(hi, _mm512_srlv_epi64(qh, shr_hi), m30);
            let act_lo = _mm512_loadu_si512(y.add(Q8K_QS + 128 * n).cast());
            let act_hi = _mm512_loadu_si512(y.add(Q8K_QS + 128 * n + 64).cast());
            let p_lo = _mm512_maddubs_epi16(q_lo, act_lo);
            let p_hi = _mm512_maddubs_epi16(q_hi, act_hi);
            sumi = _mm512_dpwssd_epi32(sumi, p_lo, _mm512_permutexvar_epi16(idx[2 * n], scales));
            sumi = _mm512_dpwssd_epi32(sumi, p_hi, _mm512_permutexvar_epi16(idx[2 * n + 1], scales));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum512(acc)
}
