//! AVX-512 (+VNNI) kernels for the K-quant weight types, dotted with Q8_K activations.
//!
//! This file holds the shared pieces (row checks, scale unpacking, index tables) and Q2_K,
//! Q3_K, Q4_K; Q5_K and Q6_K are in `k_quants_q5q6.rs`.
//!
//! Dot products: the weight quants are made unsigned (Q3_K and Q6_K get their offset back
//! through the activation block sums), multiplied with the int8 activations by `vpmaddubsw`
//! into i16 pairs, and weighted by the per-group scales with the VNNI `vpdpwssd`, so each
//! super-block's integer sum is exact; one float multiply-add per super-block then
//! accumulates it into 16 lanes, reduced in a fixed order at the end of the row.
//!
//! Dequantization does ggml's float operations in ggml's order with separate multiply and
//! subtract (never FMA), so it is bit-exact with the scalar reference.

use std::arch::x86_64::*;

use super::k_quants_q5q6 as q5q6;
use crate::quant::dispatch::Kernels;
use crate::quant::{GgmlType, QK_K};

/// Bytes of one Q8_K activation block: f32 `d`, 256 `qs`, 16 i16 `bsums`.
pub(super) const Q8K_BYTES: usize = 292;
/// Offset of `qs` and of `bsums` in a Q8_K block.
pub(super) const Q8K_QS: usize = 4;
pub(super) const Q8K_BSUMS: usize = 260;

const Q2K_BYTES: usize = 84;
const Q3K_BYTES: usize = 110;
const Q4K_BYTES: usize = 144;

pub(super) fn kernels(ty: GgmlType) -> Option<Kernels> {
    let (dequantize, vec_dot): (fn(&[u8], &mut [f32]), fn(&[u8], &[u8]) -> f32) = match ty {
        GgmlType::Q2_K => (dequantize_q2_k, vec_dot_q2_k),
        GgmlType::Q3_K => (dequantize_q3_k, vec_dot_q3_k),
        GgmlType::Q4_K => (dequantize_q4_k, vec_dot_q4_k),
        GgmlType::Q5_K => (q5q6::dequantize_q5_k, q5q6::vec_dot_q5_k),
        GgmlType::Q6_K => (q5q6::dequantize_q6_k, q5q6::vec_dot_q6_k),
        _ => return None,
    };
    Some(Kernels { dequantize, vec_dot })
}

/// Super-blocks in a dequantize call; panics unless `w` is whole blocks of `block_bytes` and
/// `out` has exactly their values (the kernels read and write through raw pointers).
pub(super) fn dequant_blocks(w: &[u8], out: &[f32], block_bytes: usize) -> usize {
    let nb = w.len() / block_bytes;
    assert!(
        w.len() % block_bytes == 0 && out.len() == nb * QK_K,
        "dequantize: {} bytes of {block_bytes}-byte blocks into {} values",
        w.len(),
        out.len()
    );
    nb
}

/// Super-blocks in a dot-product call; panics unless `w` is whole blocks of `block_bytes` and
/// `a` holds as many Q8_K blocks.
pub(super) fn dot_blocks(w: &[u8], a: &[u8], block_bytes: usize) -> usize {
    let nb = w.len() / block_bytes;
    assert!(
        w.len() % block_bytes == 0 && a.len() == nb * Q8K_BYTES,
        "vec_dot: {} weight bytes of {block_bytes}-byte blocks against {} Q8_K bytes",
        w.len(),
        a.len()
    );
    nb
}

/// Generates the safe row entry points around a pair of `unsafe` AVX-512 kernels.
macro_rules! row_entry_points {
    ($deq:ident, $deq_impl:ident, $dot:ident, $dot_impl:ident, $bytes:expr) => {
        pub(super) fn $deq(w: &[u8], out: &mut [f32]) {
            let nb = super::k_quants::dequant_blocks(w, out, $bytes);
            // SAFETY: dispatch hands out this tier's kernels only after detecting every
            // feature they enable; `dequant_blocks` checked that `w` holds `nb` blocks and
            // `out` `nb * QK_K` values, which is all the kernel reads and writes.
            unsafe { $deq_impl(w.as_ptr(), out.as_mut_ptr(), nb) }
        }

        pub(super) fn $dot(w: &[u8], a: &[u8]) -> f32 {
            let nb = super::k_quants::dot_blocks(w, a, $bytes);
            // SAFETY: as above; `dot_blocks` checked that `w` and `a` hold `nb` blocks each.
            unsafe { $dot_impl(w.as_ptr(), a.as_ptr(), nb) }
        }
    };
}
pub(super) use row_entry_points;

row_entry_points!(dequantize_q2_k, dequantize_q2_k_impl, vec_dot_q2_k, vec_dot_q2_k_impl, Q2K_BYTES);
row_entry_points!(dequantize_q3_k, dequantize_q3_k_impl, vec_dot_q3_k, vec_dot_q3_k_impl, Q3K_BYTES);
row_entry_points!(dequantize_q4_k, dequantize_q4_k_impl, vec_dot_q4_k, vec_dot_q4_k_impl, Q4K_BYTES);

// ---------------------------------------------------------------------------------------------
// Shared helpers

#[inline(always)]
pub(super) unsafe fn rd_u32(p: *const u8) -> u32 {
    u32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// The little-endian f32 at `p` (a Q8_K `d`).
#[inline(always)]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    f32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// The little-endian IEEE half at `p`, widened exactly.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes(p.cast::<[u8; 2]>().read_unaligned());
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The 8 scales and 8 mins (6 bits each) of a Q4_K / Q5_K super-block from its 12 packed
/// bytes at `p`, as the bytes of two little-endian u64s.
#[inline(always)]
pub(super) unsafe fn unpack_scales_mins_k4(p: *const u8) -> (u64, u64) {
    let (s0, s1, s2) = (rd_u32(p), rd_u32(p.add(4)), rd_u32(p.add(8)));
    // Groups 0..4 keep the low 6 bits of bytes 0..4 (scales) and 4..8 (mins); groups 4..8
    // take 4 low bits from bytes 8..12 and their top 2 bits from the tops of bytes 0..8.
    let sc_lo = s0 & 0x3f3f_3f3f;
    let mn_lo = s1 & 0x3f3f_3f3f;
    let sc_hi = (s2 & 0x0f0f_0f0f) | (((s0 >> 6) & 0x0303_0303) << 4);
    let mn_hi = ((s2 >> 4) & 0x0f0f_0f0f) | (((s1 >> 6) & 0x0303_0303) << 4);
    (sc_lo as u64 | (sc_hi as u64) << 32, mn_lo as u64 | (mn_hi as u64) << 32)
}

/// The 16 6-bit scales of a Q3_K super-block from its 12 packed bytes at `p`, unsigned
/// (0..64, the stored value is this minus 32), as the bytes of two little-endian u64s.
#[inline(always)]
pub(super) unsafe fn unpack_scales_q3k(p: *const u8) -> (u64, u64) {
    let (a0, a1, t) = (rd_u32(p), rd_u32(p.add(4)), rd_u32(p.add(8)));
    // Low 4 bits: nibbles of bytes 0..8 (low nibbles for scales 0..8, high for 8..16);
    // high 2 bits: the four 2-bit fields of bytes 8..12.
    let s0 = (a0 & 0x0f0f_0f0f) | ((t & 0x0303_0303) << 4);
    let s1 = (a1 & 0x0f0f_0f0f) | (((t >> 2) & 0x0303_0303) << 4);
    let s2 = ((a0 >> 4) & 0x0f0f_0f0f) | (((t >> 4) & 0x0303_0303) << 4);
    let s3 = ((a1 >> 4) & 0x0f0f_0f0f) | (((t >> 6) & 0x0303_0303) << 4);
    (s0 as u64 | (s1 as u64) << 32, s2 as u64 | (s3 as u64) << 32)
}

/// The 16 bytes of two u64s (low first) in an xmm register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) fn xmm_u64x2(lo: u64, hi: u64) -> __m128i {
    _mm_set_epi64x(hi as i64, lo as i64)
}

/// `vpermw` indices putting i16 scale `4k + j` in every word of 128-bit lane `j`: for a
/// 64-value chunk `k` whose four 16-value groups fill one lane each.
pub(super) static SCALE16_IDX: [[u16; 32]; 4] = {
    let mut t = [[0u16; 32]; 4];
    let mut k = 0;
    while k < 4 {
        let mut w = 0;
        while w < 32 {
            t[k][w] = (4 * k + w / 8) as u16;
            w += 1;
        }
        k += 1;
    }
    t
};

/// `vpshufb` controls turning bytes 0..8 of every 128-bit lane (eight u8 scales) into i16
/// words: scale `2c` in the low 256 bits and `2c + 1` in the high 256 bits, for a 64-value
/// chunk `c` of 32-value groups.
pub(super) static SCALE32_SHUF: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut b = 0;
        while b < 64 {
            t[c][b] = if b % 2 == 1 { 0x80 } else { (2 * c + b / 32) as u8 };
            b += 1;
        }
        c += 1;
    }
    t
};

/// Bit masks selecting high-bit plane `2k` (low 256 bits) and `2k + 1` (high 256 bits).
pub(super) static PLANE_BITS: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let mut k = 0;
    while k < 4 {
        let mut b = 0;
        while b < 64 {
            t[k][b] = 1u8 << (2 * k + b / 32);
            b += 1;
        }
        k += 1;
    }
    t
};

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_table<T>(t: &T) -> __m512i {
    _mm512_loadu_si512((t as *const T).cast())
}

/// 32 bytes at `p` in both halves of a zmm register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn bcast256(p: *const u8) -> __m512i {
    _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()))
}

/// Sum of 8 f32 lanes in a fixed order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Sum of 16 f32 lanes in a fixed order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) fn hsum512(v: __m512) -> f32 {
    hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v)))
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
        let d = f16_at(x.add(80));
        let dmin = f16_at(x.add(82));
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
    let m3 = _mm512_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0F);
    // Chunk k = 2n + p: planes 2p (low half) and 2p + 1 (high half) of qs[32n..32n + 32].
    let shifts = [_mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4)];
    let idx = [
        load_table(&SCALE16_IDX[0]),
        load_table(&SCALE16_IDX[1]),
        load_table(&SCALE16_IDX[2]),
        load_table(&SCALE16_IDX[3]),
    ];
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q2K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let yd = f32_at(y);
        let d = yd * f16_at(x.add(80));
        let dmin = yd * f16_at(x.add(82));

        let packed = _mm_loadu_si128(x.cast());
        let scales = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, m4)));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let summs = _mm256_madd_epi16(mins, bsums);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc_min);

        let mut sumi = _mm512_setzero_si512();
        for n in 0..2 {
            let qb = bcast256(x.add(16 + 32 * n));
            for p in 0..2 {
                let k = 2 * n + p;
                let q = _mm512_and_si512(_mm512_srlv_epi64(qb, shifts[p]), m3);
                let act = _mm512_loadu_si512(y.add(Q8K_QS + 64 * k).cast());
                let prod = _mm512_maddubs_epi16(q, act);
                sumi = _mm512_dpwssd_epi32(sumi, prod, _mm512_permutexvar_epi16(idx[k], scales));
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum512(acc) - hsum256(acc_min)
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
        let d_all = f16_at(x.add(108));
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
    let m3 = _mm512_set1_epi8(3);
    let four = _mm512_set1_epi8(4);
    let shifts = [_mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4)];
    let idx = [
        load_table(&SCALE16_IDX[0]),
        load_table(&SCALE16_IDX[1]),
        load_table(&SCALE16_IDX[2]),
        load_table(&SCALE16_IDX[3]),
    ];
    let planes = [
        load_table(&PLANE_BITS[0]),
        load_table(&PLANE_BITS[1]),
        load_table(&PLANE_BITS[2]),
        load_table(&PLANE_BITS[3]),
    ];
    let mut acc = _mm512_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q3K_BYTES);
        let y = a.add(i * Q8K_BYTES);
        let d = f32_at(y) * f16_at(x.add(108));

        let (lo, hi) = unpack_scales_q3k(x.add(96));
        let scales16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(xmm_u64x2(lo, hi), _mm_set1_epi8(32)));
        let scales = _mm512_zextsi256_si512(scales16);
        // The quants are used as 0..8 (low bits + 4 * high bit); the -4 offset comes back as
        // 4 * sum(scale * bsum).
        let bsums = _mm256_loadu_si256(y.add(Q8K_BSUMS).cast());
        let offset = _mm256_slli_epi32::<2>(_mm256_madd_epi16(scales16, bsums));

        let hm = bcast256(x);
        let mut sumi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offset));
        for n in 0..2 {
            let qb = bcast256(x.add(32 + 32 * n));
            for p in 0..2 {
                let k = 2 * n + p;
                let q = _mm512_and_si512(_mm512_srlv_epi64(qb, shifts[p]), m3);
                // Plane 4n + j of hmask is plane 2k (low half) and 2k + 1 (high half).
                let high = _mm512_test_epi8_mask(hm, planes[k]);
                let q = _mm512_mask_add_epi8(q, high, q, four);
                let act = _mm512_loadu_si512(y.add(Q8K_QS + 64 * k).cast());
                let prod = _mm512_maddubs_epi16(q, act);
                sumi = _mm512_dpwssd_epi32(sumi, prod, _mm512_permutexvar_epi16(idx[k], scales));
            }
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum512(acc)
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
        let d = f16_at(x);
        let dmin = f16_at(x.add(2));
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
    let m4 = _mm512_set1_epi8(0x0F);
    // Low 256 bits: low nibbles (group 2c); high 256 bits: high nibbles (group 2c + 1).
    let nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    let shuf = [
        load_table(&SCALE32_SHUF[0]),
        load_table(&SCALE32_SHUF[1]),
        load_table(&SCALE32_SHUF[2]),
        load_table(&SCALE32_SHUF[3]),
    ];
    // Each min twice (i16), for the pair of 16-value bsums of its 32-value group.
    let min_shuf = _mm256_setr_epi8(
        8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128, //
        12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128,
    );
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.add(i * Q4K_BYTES);
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

        let mut sumi = _mm512_setzero_si512();
        for c in 0..4 {
            let q = _mm512_and_si512(_mm512_srlv_epi64(bcast256(x.add(16 + 32 * c)), nibble_shift), m4);
            let act = _mm512_loadu_si512(y.add(Q8K_QS + 64 * c).cast());
            let prod = _mm512_maddubs_epi16(q, act);
            sumi = _mm512_dpwssd_epi32(sumi, prod, _mm512_shuffle_epi8(sm, shuf[c]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    hsum512(acc) - hsum256(acc_min)
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
