//! AVX2 kernels for the legacy quant types: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.
//!
//! Dot products take one 32-value block per 256-bit vector and four blocks per step. The
//! integer part of each block is exact: unsigned weight quants times signed activation quants
//! with `vpmaddubsw` (pairs stay far from i16 saturation), the offset of Q4_0 / Q5_0 taken back
//! out as `offset * Σy`, then `vpmaddwd` into i32 lanes. Q8_0 weights are signed, so they use
//! `|x| * sign(y, x)`, exact whenever the activations lie in -127..=127 (which the Q8
//! quantizers guarantee: `round(v * 127 / amax)`). Each block's lanes are scaled by
//! `d_w * d_a` and added into f32 accumulators in an order fixed by the row length alone; for
//! Q8_0 that order is ggml's (one eight-lane accumulator, block after block), so its dot
//! products are bit-equal to the scalar reference and to llama.cpp.
//! A row's last partial group of four blocks is copied into a zeroed buffer (zero blocks add
//! exactly nothing), so every group takes one path.
//!
//! Dequantization computes `(q - offset) * d` or `q * d + m` with separate multiply and add,
//! bit for bit what the scalar reference computes.

use core::arch::x86_64::*;

use crate::quant::dispatch::Kernels;
use crate::quant::x86::common::{
    entry_points, hsum256, le16, le32, le64, legacy_deq_rows, legacy_dot_rows, Chain, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
};
use crate::quant::GgmlType;

pub(super) fn kernels(ty: GgmlType) -> Option<Kernels> {
    Some(match ty {
        GgmlType::Q4_0 => Kernels { dequantize: dequantize_q4_0, vec_dot: vec_dot_q4_0 },
        GgmlType::Q4_1 => Kernels { dequantize: dequantize_q4_1, vec_dot: vec_dot_q4_1 },
        GgmlType::Q5_0 => Kernels { dequantize: dequantize_q5_0, vec_dot: vec_dot_q5_0 },
        GgmlType::Q5_1 => Kernels { dequantize: dequantize_q5_1, vec_dot: vec_dot_q5_1 },
        GgmlType::Q8_0 => Kernels { dequantize: dequantize_q8_0, vec_dot: vec_dot_q8_0 },
        _ => return None,
    })
}

entry_points! { "AVX2 + FMA + F16C";
    dot {
        vec_dot_q4_0 => dot_q4_0, Q4_0, Q8_0;
        vec_dot_q4_1 => dot_q4_1, Q4_1, Q8_1;
        vec_dot_q5_0 => dot_q5_0, Q5_0, Q8_0;
        vec_dot_q5_1 => dot_q5_1, Q5_1, Q8_1;
        vec_dot_q8_0 => dot_q8_0, Q8_0, Q8_0;
    }
    dequantize {
        dequantize_q4_0 => deq_q4_0, Q4_0, 32;
        dequantize_q4_1 => deq_q4_1, Q4_1, 32;
        dequantize_q5_0 => deq_q5_0, Q5_0, 32;
        dequantize_q5_1 => deq_q5_1, Q5_1, 32;
        dequantize_q8_0 => deq_q8_0, Q8_0, 32;
    }
}

// ---------------------------------------------------------------------------------------------
// Shared pieces. Every `unsafe fn` below reads through raw pointers: callers guarantee the
// blocks named exist (all reads are unaligned) and that the CPU has the enabled features.

// Unaligned loads and stores go through byte arrays: plain moves, without the precondition
// checks that the `loadu` / `storeu` intrinsics (built on `copy_nonoverlapping`) carry in
// builds with debug assertions, where they would cost more than the arithmetic.

/// The 16 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    core::mem::transmute(*(p as *const [u8; 16]))
}

/// The 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    core::mem::transmute(*(p as *const [u8; 32]))
}

/// The 8 f32s in the 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_ps(p: *const u8) -> __m256 {
    core::mem::transmute(*(p as *const [u8; 32]))
}

/// Stores 8 f32s at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_ps(p: *mut f32, v: __m256) {
    *(p as *mut [u8; 32]) = core::mem::transmute::<__m256, [u8; 32]>(v);
}

/// The f16 at `p` as an f32 (exact), broadcast.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_splat(p: *const u8) -> __m256 {
    _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(le16(p) as i32))))
}

/// Lane `k` of `v`, broadcast.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn lane(v: __m256, k: i32) -> __m256 {
    _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k))
}

/// Scales `d_w * d_a` of four consecutive blocks (f16 `d` first in both block types), in
/// lanes 0..4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scales_d(x: *const u8, xb: usize, y: *const u8, yb: usize) -> __m256 {
    let hx = le16(x) | le16(x.add(xb)) << 16 | le16(x.add(2 * xb)) << 32 | le16(x.add(3 * xb)) << 48;
    let hy = le16(y) | le16(y.add(yb)) << 16 | le16(y.add(2 * yb)) << 32 | le16(y.add(3 * yb)) << 48;
    let v = _mm256_cvtph_ps(_mm_set_epi64x(hy as i64, hx as i64));
    _mm256_castps128_ps256(_mm_mul_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)))
}

/// For weights with `(d, m)` and Q8_1 activations with `(d, s)` in their first four bytes:
/// `[d0, m0*s0, d1, m1*s1, ...]` of four consecutive blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_dm(x: *const u8, xb: usize, y: *const u8, yb: usize) -> __m256 {
    let hx = _mm_set_epi64x((le32(x.add(2 * xb)) | le32(x.add(3 * xb)) << 32) as i64, (le32(x) | le32(x.add(xb)) << 32) as i64);
    let hy = _mm_set_epi64x((le32(y.add(2 * yb)) | le32(y.add(3 * yb)) << 32) as i64, (le32(y) | le32(y.add(yb)) << 32) as i64);
    _mm256_mul_ps(_mm256_cvtph_ps(hx), _mm256_cvtph_ps(hy))
}

/// The 32 4-bit quants of the 16 packed bytes at `p`, in element order (low nibbles, then
/// high nibbles), as bytes 0..=15.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let v = _mm256_broadcastsi128_si256(load128(p));
    let v = _mm256_srlv_epi32(v, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0));
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

/// 16 in every byte `i` whose bit `i` is set in the little-endian word at `p` (the fifth
/// bits of a Q5 block), 0 elsewhere.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(p: *const u8) -> __m256i {
    let qh = _mm256_set1_epi32(le32(p) as i32);
    // Byte i takes byte i / 8 of the word, then tests bit i % 8.
    let spread = _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let v = _mm256_and_si256(_mm256_shuffle_epi8(qh, spread), bit);
    _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16))
}

/// `Σ (q - off) * y` in i32 lanes (pairs of pairs), exactly, for quants `q` in 0..=31, `off`
/// in {0, 8, 16} and any signed `y`: every i16 pair stays within ±2 * 31 * 128.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_off(q: __m256i, y: __m256i, off: i8) -> __m256i {
    let mut p = _mm256_maddubs_epi16(q, y);
    if off != 0 {
        p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(off), y));
    }
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Running sums of a dot product: one vector per block of a group, and the offset terms
/// `m * s` of the Q4_1 / Q5_1 blocks (odd lanes).
struct Acc {
    block: [__m256; 4],
    min: __m256,
}

impl Acc {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn new() -> Acc {
        Acc { block: [_mm256_setzero_ps(); 4], min: _mm256_setzero_ps() }
    }

    /// Adds the exact integer lane sums of block `k` of the group, scaled.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn add(&mut self, k: usize, sumi: __m256i, scale: __m256) {
        self.block[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), scale, self.block[k]);
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn sum(self) -> f32 {
        let [a, b, c, d] = self.block;
        let mins = _mm256_blend_ps::<0xAA>(_mm256_setzero_ps(), self.min);
        hsum256(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)), mins))
    }
}

// ---------------------------------------------------------------------------------------------
// Dot products, four blocks per step (the row loop is `common::legacy_dot_rows`).

legacy_dot_rows! { "avx2,fma,f16c", Acc;
    dot_q4_0 => group_q4_0, Q4_0, Q8_0;
    dot_q4_1 => group_q4_1, Q4_1, Q8_1;
    dot_q5_0 => group_q5_0, Q5_0, Q8_0;
    dot_q5_1 => group_q5_1, Q5_1, Q8_1;
}

legacy_dot_rows! { "avx2,fma,f16c", Chain;
    dot_q8_0 => group_q8_0, Q8_0, Q8_0;
}

/// Q4_0 (`d`, 16 bytes of nibbles) x Q8_0 (`d`, 32 quants): `Σ (q - 8) y` per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q4_0(x: *const u8, y: *const u8, acc: &mut Acc) {
    let d = scales_d(x, Q4_0, y, Q8_0);
    for k in 0..4 {
        let (x0, y0) = (x.add(k * Q4_0), y.add(k * Q8_0));
        acc.add(k, dot_off(nibbles(x0.add(2)), load(y0.add(2)), 8), lane(d, k as i32));
    }
}

/// Q4_1 (`d`, `m`, 16 bytes of nibbles) x Q8_1 (`d`, `s`, 32 quants): `d Σ q y + m s`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q4_1(x: *const u8, y: *const u8, acc: &mut Acc) {
    let d = scales_dm(x, Q4_1, y, Q8_1);
    acc.min = _mm256_add_ps(acc.min, d);
    for k in 0..4 {
        let (x0, y0) = (x.add(k * Q4_1), y.add(k * Q8_1));
        acc.add(k, dot_off(nibbles(x0.add(4)), load(y0.add(4)), 0), lane(d, 2 * k as i32));
    }
}

/// Q5_0 (`d`, `qh`, 16 bytes of nibbles) x Q8_0: `Σ (q - 16) y` per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q5_0(x: *const u8, y: *const u8, acc: &mut Acc) {
    let d = scales_d(x, Q5_0, y, Q8_0);
    for k in 0..4 {
        let (x0, y0) = (x.add(k * Q5_0), y.add(k * Q8_0));
        let q = _mm256_or_si256(nibbles(x0.add(6)), fifth_bits(x0.add(2)));
        acc.add(k, dot_off(q, load(y0.add(2)), 16), lane(d, k as i32));
    }
}

/// Q5_1 (`d`, `m`, `qh`, 16 bytes of nibbles) x Q8_1: `d Σ q y + m s`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q5_1(x: *const u8, y: *const u8, acc: &mut Acc) {
    let d = scales_dm(x, Q5_1, y, Q8_1);
    acc.min = _mm256_add_ps(acc.min, d);
    for k in 0..4 {
        let (x0, y0) = (x.add(k * Q5_1), y.add(k * Q8_1));
        let q = _mm256_or_si256(nibbles(x0.add(8)), fifth_bits(x0.add(4)));
        acc.add(k, dot_off(q, load(y0.add(4)), 0), lane(d, 2 * k as i32));
    }
}

/// Q8_0 x Q8_0: `|x| * sign(y, x)`, exact for activations in -127..=127 (see the module docs),
/// the four blocks chained into one accumulator.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q8_0(x: *const u8, y: *const u8, acc: &mut Chain) {
    let d = scales_d(x, Q8_0, y, Q8_0);
    for k in 0..4 {
        let (q, v) = (load(x.add(k * Q8_0 + 2)), load(y.add(k * Q8_0 + 2)));
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(v, q));
        acc.add(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), lane(d, k as i32));
    }
}

// ---------------------------------------------------------------------------------------------
// Dequantization, one block at a time (the row loop is `common::legacy_deq_rows`).

/// Stores `(q - off) * d` for the 32 byte quants of `q` (multiply only, as the reference).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn put_off(out: *mut f32, q: __m256i, off: i32, d: __m256) {
    let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
    for (h, v) in halves.into_iter().enumerate() {
        for (e, v) in [v, _mm_unpackhi_epi64(v, v)].into_iter().enumerate() {
            let i = _mm256_sub_epi32(_mm256_cvtepu8_epi32(v), _mm256_set1_epi32(off));
            store_ps(out.add(16 * h + 8 * e), _mm256_mul_ps(_mm256_cvtepi32_ps(i), d));
        }
    }
}

/// Stores `q * d + m` for the 32 byte quants of `q` (separate multiply and add).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn put_min(out: *mut f32, q: __m256i, d: __m256, m: __m256) {
    let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
    for (h, v) in halves.into_iter().enumerate() {
        for (e, v) in [v, _mm_unpackhi_epi64(v, v)].into_iter().enumerate() {
            let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            store_ps(out.add(16 * h + 8 * e), _mm256_add_ps(_mm256_mul_ps(f, d), m));
        }
    }
}

legacy_deq_rows!("avx2,fma,f16c", deq_q4_0, Q4_0, |x, out| { put_off(out, nibbles(x.add(2)), 8, f16_splat(x)) });

legacy_deq_rows!("avx2,fma,f16c", deq_q4_1, Q4_1, |x, out| { put_min(out, nibbles(x.add(4)), f16_splat(x), f16_splat(x.add(2))) });

legacy_deq_rows!("avx2,fma,f16c", deq_q5_0, Q5_0, |x, out| {
    let q = _mm256_or_si256(nibbles(x.add(6)), fifth_bits(x.add(2)));
    put_off(out, q, 16, f16_splat(x))
});

legacy_deq_rows!("avx2,fma,f16c", deq_q5_1, Q5_1, |x, out| {
    let q = _mm256_or_si256(nibbles(x.add(8)), fifth_bits(x.add(4)));
    put_min(out, q, f16_splat(x), f16_splat(x.add(2)))
});

legacy_deq_rows!("avx2,fma,f16c", deq_q8_0, Q8_0, |x, out| {
    let d = f16_splat(x);
    for e in 0..4 {
        let q = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(le64(x.add(2 + 8 * e))));
        store_ps(out.add(8 * e), _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
});

#[cfg(test)]
mod tests {
    use super::super::check::check_type;
    use crate::quant::{GgmlType, Isa};

    #[test]
    fn legacy_kernels_match_the_scalar_reference() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0] {
            check_type(ty, Isa::Avx2, super::kernels(ty).expect("a kernel for every legacy type"));
        }
    }
}
