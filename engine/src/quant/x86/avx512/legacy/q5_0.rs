//! Q5_0 weights dotted with Q8_0 activations, one activation row (matrices repacked into
//! panels run the panel kernels instead).
//!
//! A group of four blocks is held as two vectors: the first has elements 0..16 of each block
//! (one block per 128-bit lane), the second elements 16..32. One `vpdpbusd` on each adds
//! eight products of one block into every 32-bit lane, so a block's scale covers four lanes
//! and a group takes one conversion, one scale product and one fused multiply-add. The integer
//! sums are exact (activations as unsigned `y + 128`, weights as signed `q - 16`, and
//! `-128 Σ (q - 16)` taken back out).

use core::arch::x86_64::*;

use super::load128;
use crate::quant::x86::common::{le16, le32, Q5_0, Q8_0};

/// The f16 `d` of four consecutive blocks of `bytes` bytes, packed low first.
#[inline]
unsafe fn halves(p: *const u8, bytes: usize) -> u64 {
    le16(p) | le16(p.add(bytes)) << 16 | le16(p.add(2 * bytes)) << 32 | le16(p.add(3 * bytes)) << 48
}

/// Group `g` of the row of `nb` blocks of `bytes` bytes at `p`: in place when whole; the last,
/// partial group is copied into `tail` (zero beyond the copy), as the single-row kernels read it.
#[inline]
unsafe fn group_at(p: *const u8, g: usize, nb: usize, bytes: usize, tail: &mut [u8]) -> *const u8 {
    let (start, rest) = (p.add(g * 4 * bytes), nb - 4 * g);
    if rest >= 4 {
        return start;
    }
    ::core::ptr::copy_nonoverlapping(start, tail.as_mut_ptr(), rest * bytes);
    tail.as_ptr()
}

/// The 16 bytes at `p + k * step` in 128-bit lane `k`, for the four lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn lanes4(p: *const u8, step: usize) -> __m512i {
    let v = _mm512_castsi128_si512(load128(p));
    let v = _mm512_inserti32x4::<1>(v, load128(p.add(step)));
    let v = _mm512_inserti32x4::<2>(v, load128(p.add(2 * step)));
    _mm512_inserti32x4::<3>(v, load128(p.add(3 * step)))
}

/// The four packed f16 of `h` (low first) as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn widen4(h: u64) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi64_si128(h as i64))
}

/// Value `k` of `d` in lanes `4k..4k + 4`: each block's scale over its four lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn spread4(d: __m128) -> __m512 {
    _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_castps128_ps512(d))
}

/// Four weight blocks unpacked: the signed quants `q - 16` of elements 0..16 (`lo`) and
/// 16..32 (`hi`) of each block, and `-128 Σ (q - 16)` over each lane of both, which turns the
/// sums with unsigned activations `y + 128` into `Σ y (q - 16)`.
struct WeightGroup {
    lo: __m512i,
    hi: __m512i,
    minus_128_sums: __m512i,
}

/// The group of four Q5_0 blocks at `x`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn weight_group(x: *const u8) -> WeightGroup {
    let qs = lanes4(x.add(6), Q5_0);
    let nibble = _mm512_set1_epi8(0x0F);
    let lo = _mm512_and_si512(qs, nibble);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(qs), nibble);
    // bit i of a block's `qh` is the fifth bit of element i: the low 16 bits go with `lo`
    let (mut bits_lo, mut bits_hi) = (0u64, 0u64);
    for k in 0..4 {
        let qh = le32(x.add(k * Q5_0 + 2));
        bits_lo |= (qh & 0xFFFF) << (16 * k);
        bits_hi |= (qh >> 16) << (16 * k);
    }
    // q - 16 is the nibble where the fifth bit is set, the nibble less 16 where it is clear
    let sixteen = _mm512_set1_epi8(16);
    let lo = _mm512_mask_sub_epi8(lo, !bits_lo, lo, sixteen);
    let hi = _mm512_mask_sub_epi8(hi, !bits_hi, hi, sixteen);
    let (zero, k128) = (_mm512_setzero_si512(), _mm512_set1_epi8(-128));
    let sums_128 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, k128, lo), k128, hi);
    WeightGroup { lo, hi, minus_128_sums: _mm512_sub_epi32(zero, sums_128) }
}

/// Four Q8_0 activation blocks at `y` laid out as the weights: quants `y + 128` of elements
/// 0..16 and 16..32 of each block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn activation_group(y: *const u8) -> (__m512i, __m512i) {
    let bias = _mm512_set1_epi8(-128);
    (_mm512_xor_si512(lanes4(y.add(2), Q8_0), bias), _mm512_xor_si512(lanes4(y.add(18), Q8_0), bias))
}

/// `Σ y (q - 16)` over the eight elements of each lane, exactly.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_sums(w: &WeightGroup, a_lo: __m512i, a_hi: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(w.minus_128_sums, a_lo, w.lo), a_hi, w.hi)
}

/// One Q5_0 row of `nb` blocks at `w` dotted with one Q8_0 row at `a`. A row's last, partial
/// group is read from zeroed copies (zero blocks add exactly nothing).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_q5_0(w: *const u8, a: *const u8, nb: usize) -> f32 {
    // even groups into one accumulator, odd ones into the other (two independent chains)
    let (mut even, mut odd) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let (mut wt, mut at) = ([0u8; 4 * Q5_0], [0u8; 4 * Q8_0]);
    for g in 0..nb.div_ceil(4) {
        let (x, y) = (group_at(w, g, nb, Q5_0, &mut wt), group_at(a, g, nb, Q8_0, &mut at));
        let weights = weight_group(x);
        let (a_lo, a_hi) = activation_group(y);
        let d = spread4(_mm_mul_ps(widen4(halves(x, Q5_0)), widen4(halves(y, Q8_0))));
        let sums = _mm512_cvtepi32_ps(group_sums(&weights, a_lo, a_hi));
        if g % 2 == 0 {
            even = _mm512_fmadd_ps(sums, d, even);
        } else {
            odd = _mm512_fmadd_ps(sums, d, odd);
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(even, odd))
}
