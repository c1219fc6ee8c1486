//! AVX-512 kernels for the legacy quant types: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.
//!
//! Dot products take two 32-value blocks per 512-bit vector and four blocks per step (Q5_0,
//! the type of most matrices of models whose rows do not fit K-quant blocks, has its own
//! layout in `q5_0`: four blocks per vector). The integer part of each block is exact: the
//! weight quants are made unsigned (`q`), `vpdpbusd`
//! multiplies them with the signed activation quants into i32 lanes, and the offset of the
//! signed types (`8`, `16`) is taken back out as `offset * Σy`, which is exact for every byte
//! value. Each block's lanes are then scaled by `d_w * d_a` and added into f32 accumulators in
//! an order fixed by the row length alone, so a row dotted with the same activations always
//! gives the same bits. Q8_0 instead follows ggml's order exactly (one eight-lane accumulator,
//! `|x| * sign(y, x)` per block), bit-equal to the scalar reference and to llama.cpp. A row's last partial group of four blocks is
//! copied into a zeroed buffer (zero blocks add exactly nothing) so every group takes one path.
//!
//! Dequantization computes `(q - offset) * d` or `q * d + m` with separate multiply and add,
//! bit for bit what the scalar reference computes.

use core::arch::x86_64::*;

use crate::quant::dispatch::Kernels;
use crate::quant::x86::common::{entry_points, le16, le32, legacy_deq_rows, legacy_dot_rows, Chain, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1};
use crate::quant::GgmlType;

mod q5_0;

use q5_0::dot_q5_0;

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

entry_points! { "AVX-512 (F, BW, VL, DQ, VNNI) + AVX2 + FMA + F16C";
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
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn load128(p: *const u8) -> __m128i {
    core::mem::transmute(*(p as *const [u8; 16]))
}

/// The 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    core::mem::transmute(*(p as *const [u8; 32]))
}

/// The 16 f32s in the 64 bytes at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_ps(p: *const u8) -> __m512 {
    core::mem::transmute(*(p as *const [u8; 64]))
}

/// Stores 16 f32s at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn store_ps(p: *mut f32, v: __m512) {
    *(p as *mut [u8; 64]) = core::mem::transmute::<__m512, [u8; 64]>(v);
}

/// The f16 at `p` as an f32 (exact), broadcast.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn f16_splat(p: *const u8) -> __m512 {
    _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(le16(p) as i32))))
}

/// Lane `k` of `v` in lanes 0..8 and lane `l` in lanes 8..16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn spread(v: __m512, k: i32, l: i32) -> __m512 {
    _mm512_permutexvar_ps(_mm512_set_epi32(l, l, l, l, l, l, l, l, k, k, k, k, k, k, k, k), v)
}

/// Per-lane scales `d_w * d_a` of four consecutive blocks (f16 `d` first in both block
/// types): blocks 0 and 1 in the first vector, 2 and 3 in the second, eight lanes each.
///
/// The eight scattered halves are packed with scalar loads and shifts into two vector moves:
/// on the Zen 4 this was tuned on, that beat gathering them with word permutations of
/// 64-byte loads, gather instructions, or a pre-pass through memory (the vector pipes, not
/// the scalar ones, are the bottleneck of these loops).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn scales_d(x: *const u8, xb: usize, y: *const u8, yb: usize) -> (__m512, __m512) {
    let hx = le16(x) | le16(x.add(xb)) << 16 | le16(x.add(2 * xb)) << 32 | le16(x.add(3 * xb)) << 48;
    let hy = le16(y) | le16(y.add(yb)) << 16 | le16(y.add(2 * yb)) << 32 | le16(y.add(3 * yb)) << 48;
    scales_from_halves(hx, hy)
}

/// [`scales_d`] from the packed halves of the weight's and the activations' four `d`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn scales_from_halves(hx: u64, hy: u64) -> (__m512, __m512) {
    let v = _mm256_cvtph_ps(_mm_set_epi64x(hy as i64, hx as i64));
    let d = _mm_mul_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let d = _mm512_castps128_ps512(d);
    (spread(d, 0, 1), spread(d, 2, 3))
}

/// Like [`scales_d`] for weights with `(d, m)` and Q8_1 activations with `(d, s)` in their
/// first four bytes; also returns `[d0, m0*s0, d1, m1*s1, ...]`, whose odd lanes are the
/// offset terms of the four blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn scales_dm(x: *const u8, xb: usize, y: *const u8, yb: usize) -> (__m512, __m512, __m256) {
    let hx = _mm_set_epi64x((le32(x.add(2 * xb)) | le32(x.add(3 * xb)) << 32) as i64, (le32(x) | le32(x.add(xb)) << 32) as i64);
    let hy = _mm_set_epi64x((le32(y.add(2 * yb)) | le32(y.add(3 * yb)) << 32) as i64, (le32(y) | le32(y.add(yb)) << 32) as i64);
    let p = _mm256_mul_ps(_mm256_cvtph_ps(hx), _mm256_cvtph_ps(hy));
    let p5 = _mm512_castps256_ps512(p);
    (spread(p5, 0, 2), spread(p5, 4, 6), p)
}

/// The 4-bit quants of two blocks whose 16 packed bytes start at `a` and `b`: 64 values in
/// 0..=15 in element order (a's low nibbles, a's high nibbles, then b's).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles2(a: *const u8, b: *const u8) -> __m512i {
    let v = _mm512_broadcast_i32x4(load128(a));
    let v = _mm512_mask_broadcast_i32x4(v, 0xFF00, load128(b));
    // 128-bit lanes 1 and 3 (16-bit elements 8..16 and 24..32) take the high nibbles.
    let v = _mm512_mask_srli_epi16::<4>(v, 0xFF00_FF00, v);
    _mm512_and_si512(v, _mm512_set1_epi8(0x0F))
}

/// Adds 16 to each quant of [`nibbles2`] whose fifth bit is set: bit `i` of the little-endian
/// `qh` words at `a` and `b` belongs to element `i` of that block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn fifth_bits2(q: __m512i, a: *const u8, b: *const u8) -> __m512i {
    _mm512_mask_add_epi8(q, le32(a) | le32(b) << 32, q, _mm512_set1_epi8(16))
}

/// 32 bytes at `a` followed by 32 bytes at `b`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn bytes2(a: *const u8, b: *const u8) -> __m512i {
    let lo = _mm512_castsi256_si512(load256(a));
    _mm512_inserti64x4::<1>(lo, load256(b))
}

/// `Σ (q - off) * y` over each 4-byte lane, exactly, for unsigned `q` and signed `y` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_off(q: __m512i, y: __m512i, off: u8) -> __m512i {
    let z = _mm512_setzero_si512();
    _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, y), _mm512_dpbusd_epi32(z, _mm512_set1_epi8(off as i8), y))
}

/// `Σ q * y` over each 4-byte lane, for unsigned `q` and signed `y` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_u(q: __m512i, y: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y)
}

/// Running sums of a dot product: one vector per block pair of a group, and the offset terms
/// `m * s` of the Q4_1 / Q5_1 blocks (odd lanes).
struct Acc {
    pair: [__m512; 2],
    min: __m256,
}

impl Acc {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn new() -> Acc {
        Acc { pair: [_mm512_setzero_ps(); 2], min: _mm256_setzero_ps() }
    }

    /// Adds the exact integer lane sums of a block pair, scaled per lane.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn add(&mut self, k: usize, sumi: __m512i, scale: __m512) {
        self.pair[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), scale, self.pair[k]);
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn sum(self) -> f32 {
        let mins = _mm512_zextps256_ps512(_mm256_maskz_mov_ps(0xAA, self.min));
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(self.pair[0], self.pair[1]), mins))
    }
}

// ---------------------------------------------------------------------------------------------
// Dot products, four blocks per step (the row loop is `common::legacy_dot_rows`).

legacy_dot_rows! { "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", Acc;
    dot_q4_0 => group_q4_0, Q4_0, Q8_0;
    dot_q4_1 => group_q4_1, Q4_1, Q8_1;
    dot_q5_1 => group_q5_1, Q5_1, Q8_1;
}

legacy_dot_rows! { "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", Chain;
    dot_q8_0 => group_q8_0, Q8_0, Q8_0;
}

/// Q4_0 (`d`, 16 bytes of nibbles) x Q8_0 (`d`, 32 quants): `Σ (q - 8) y` per block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_q4_0(x: *const u8, y: *const u8, acc: &mut Acc) {
    let sc = scales_d(x, Q4_0, y, Q8_0);
    for (k, scale) in [sc.0, sc.1].into_iter().enumerate() {
        let (x0, y0) = (x.add(2 * k * Q4_0), y.add(2 * k * Q8_0));
        let q = nibbles2(x0.add(2), x0.add(Q4_0 + 2));
        let v = bytes2(y0.add(2), y0.add(Q8_0 + 2));
        acc.add(k, dot_off(q, v, 8), scale);
    }
}

/// Q4_1 (`d`, `m`, 16 bytes of nibbles) x Q8_1 (`d`, `s`, 32 quants): `d Σ q y + m s`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_q4_1(x: *const u8, y: *const u8, acc: &mut Acc) {
    let (s01, s23, ms) = scales_dm(x, Q4_1, y, Q8_1);
    acc.min = _mm256_add_ps(acc.min, ms);
    for (k, scale) in [s01, s23].into_iter().enumerate() {
        let (x0, y0) = (x.add(2 * k * Q4_1), y.add(2 * k * Q8_1));
        let q = nibbles2(x0.add(4), x0.add(Q4_1 + 4));
        let v = bytes2(y0.add(4), y0.add(Q8_1 + 4));
        acc.add(k, dot_u(q, v), scale);
    }
}

/// Q5_1 (`d`, `m`, `qh`, 16 bytes of nibbles) x Q8_1: `d Σ q y + m s`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_q5_1(x: *const u8, y: *const u8, acc: &mut Acc) {
    let (s01, s23, ms) = scales_dm(x, Q5_1, y, Q8_1);
    acc.min = _mm256_add_ps(acc.min, ms);
    for (k, scale) in [s01, s23].into_iter().enumerate() {
        let (x0, y0) = (x.add(2 * k * Q5_1), y.add(2 * k * Q8_1));
        let q = nibbles2(x0.add(8), x0.add(Q5_1 + 8));
        let q = fifth_bits2(q, x0.add(4), x0.add(Q5_1 + 4));
        let v = bytes2(y0.add(4), y0.add(Q8_1 + 4));
        acc.add(k, dot_u(q, v), scale);
    }
}

/// Q8_0 x Q8_0: `|x| * sign(y, x)` (exact for activations in -127..=127) through `vpdpbusd`,
/// block by block into the one chained accumulator.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_q8_0(x: *const u8, y: *const u8, acc: &mut Chain) {
    let hx = le16(x) | le16(x.add(Q8_0)) << 16 | le16(x.add(2 * Q8_0)) << 32 | le16(x.add(3 * Q8_0)) << 48;
    let hy = le16(y) | le16(y.add(Q8_0)) << 16 | le16(y.add(2 * Q8_0)) << 32 | le16(y.add(3 * Q8_0)) << 48;
    let v = _mm256_cvtph_ps(_mm_set_epi64x(hy as i64, hx as i64));
    let d = _mm256_castps128_ps256(_mm_mul_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)));
    for k in 0..4 {
        let (q, v) = (load256(x.add(k * Q8_0 + 2)), load256(y.add(k * Q8_0 + 2)));
        let sumi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(v, q));
        acc.add(sumi, _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(k as i32)));
    }
}

// ---------------------------------------------------------------------------------------------
// Dequantization, one block at a time (the row loop is `common::legacy_deq_rows`).

/// Stores `(q - off) * d` for 16 unsigned byte quants (multiply only, as the reference).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn put_off(out: *mut f32, q: __m128i, off: i32, d: __m512) {
    let v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(off));
    store_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(v), d));
}

/// Stores `q * d + m` for 16 unsigned byte quants (separate multiply and add, as the reference).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn put_min(out: *mut f32, q: __m128i, d: __m512, m: __m512) {
    let v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q));
    store_ps(out, _mm512_add_ps(_mm512_mul_ps(v, d), m));
}

/// The low and high nibbles of the 16 packed bytes at `p` (elements 0..16 and 16..32), with
/// the fifth bits of the little-endian `qh` word at `qh` added when it is given.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8, qh: Option<*const u8>) -> (__m128i, __m128i) {
    let v = load128(p);
    let m = _mm_set1_epi8(0x0F);
    let (lo, hi) = (_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16::<4>(v), m));
    match qh {
        None => (lo, hi),
        Some(qh) => {
            let (bits, s) = (le32(qh), _mm_set1_epi8(16));
            (_mm_mask_add_epi8(lo, bits as u16, lo, s), _mm_mask_add_epi8(hi, (bits >> 16) as u16, hi, s))
        }
    }
}

legacy_deq_rows!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", deq_q4_0, Q4_0, |x, out| {
    let d = f16_splat(x);
    let (lo, hi) = nibbles(x.add(2), None);
    put_off(out, lo, 8, d);
    put_off(out.add(16), hi, 8, d);
});

legacy_deq_rows!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", deq_q4_1, Q4_1, |x, out| {
    let (d, m) = (f16_splat(x), f16_splat(x.add(2)));
    let (lo, hi) = nibbles(x.add(4), None);
    put_min(out, lo, d, m);
    put_min(out.add(16), hi, d, m);
});

legacy_deq_rows!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", deq_q5_0, Q5_0, |x, out| {
    let d = f16_splat(x);
    let (lo, hi) = nibbles(x.add(6), Some(x.add(2)));
    put_off(out, lo, 16, d);
    put_off(out.add(16), hi, 16, d);
});

legacy_deq_rows!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", deq_q5_1, Q5_1, |x, out| {
    let (d, m) = (f16_splat(x), f16_splat(x.add(2)));
    let (lo, hi) = nibbles(x.add(8), Some(x.add(4)));
    put_min(out, lo, d, m);
    put_min(out.add(16), hi, d, m);
});

legacy_deq_rows!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c", deq_q8_0, Q8_0, |x, out| {
    let d = f16_splat(x);
    for h in 0..2 {
        let q = _mm512_cvtepi8_epi32(load128(x.add(2 + 16 * h)));
        store_ps(out.add(16 * h), _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
    }
});

#[cfg(test)]
mod tests {
    use crate::quant::x86::avx2::check::check_type;
    use crate::quant::{GgmlType, Isa};

    #[test]
    fn legacy_kernels_match_the_scalar_reference() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0] {
            check_type(ty, Isa::Avx512, super::kernels(ty).expect("a kernel for every legacy type"));
        }
    }
}
