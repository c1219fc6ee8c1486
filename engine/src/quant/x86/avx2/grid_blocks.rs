//! AVX2 super-block readers of the grid i-quants for the one-row dot product: each type reads
//! its indices, signs and scales straight into registers, 32 values at a time (no unpacked
//! block in memory between), and returns its exact integer sums against a Q8_K block as i32
//! lanes. The grid lookups are table reads (the grids are 2 to 16 KiB, in L1); a group's signs
//! become ±1 bytes (a 128-entry table for the 7-bit sign sets, a byte spread and compare for
//! whole sign bytes) that `vpsignb` applies to the activations; `vpmaddubsw` multiplies the
//! magnitudes (below 64) with them (pairs within ±2 · 63 · 127) and `vpmaddwd` weighs each pair
//! by its group's scale. Integer sums are exact whatever their order, so these equal the scalar
//! reference's `Σ scale · Σ value · q` (and IQ1's `Σ scale · shift · Σ q`).

use core::arch::x86_64::*;

use crate::quant::iq_grid::tables::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::quant::iq_grid::{f16_at, iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs, u32_at, u64_at, GridType, SIGNS7};
use crate::quant::QK_K;

/// One grid type's super-block of `N` bytes, read for the dot product.
pub(super) trait GridBlock<const N: usize> {
    /// The type's constants (value factor, shifted or not).
    const TYPE: &'static GridType;

    /// The block's f16 scale `d`.
    fn d(b: &[u8; N]) -> f32 {
        f16_at(b, 0)
    }

    /// The block's integer sums against the activations `q`, each spread over 8 i32 lanes:
    /// `Σ scale · Σ value · q`, and (IQ1) `Σ scale · shift · Σ q`.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    unsafe fn sums(b: &[u8; N], q: &[i8; QK_K]) -> (__m256i, __m256i);
}

/// For each 7-bit sign set, its 8 signs as ±1 bytes (-1 where a bit is set): the sign byte
/// with its parity bit (`iq_grid::SIGNS7`) as a byte mask, each byte's low bit set.
static SIGNS7_PM1: [u64; 128] = {
    let masks = super::grid::sign_masks();
    let mut t = [0u64; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = masks[SIGNS7[b] as usize] | 0x0101_0101_0101_0101;
        b += 1;
    }
    t
};

/// The little-endian u16 at `b[at..]`, widened.
#[inline(always)]
fn u16_at(b: &[u8], at: usize) -> u32 {
    u32::from(crate::quant::iq_grid::u16_at(b, at))
}

/// The ±1 signs of four 7-bit sets, the `k`-th set at bits `7k ..` of `bits`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn signs7x4(bits: u32) -> __m256i {
    signs7_each([bits, bits >> 7, bits >> 14, bits >> 21])
}

/// The ±1 signs of four 7-bit sets, each in the low bits of its word (higher bits ignored).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn signs7_each(sets: [u32; 4]) -> __m256i {
    let s = |k: usize| SIGNS7_PM1[(sets[k] & 127) as usize] as i64;
    _mm256_setr_epi64x(s(0), s(1), s(2), s(3))
}

/// The ±1 signs of four whole sign bytes (the `k`-th byte of `bits` for values `8k .. 8k + 8`):
/// each byte spread over its 8 values, a value negative where its bit is set.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn sign_bytes(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(1))
}

/// 32 activations from `q[32c ..]`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn acts(q: &[i8; QK_K], c: usize) -> __m256i {
    _mm256_loadu_si256(q[32 * c..32 * c + 32].as_ptr().cast())
}

/// `Σ scale · |v| · sign · q` as 8 i32 lanes: magnitudes `v`, ±1 `signs`, activations `q`, each
/// pair's scale in `scales` (i16 lanes).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn scaled_dot(v: __m256i, signs: __m256i, q: __m256i, scales: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_sign_epi8(q, signs)), scales)
}

/// The odd scales `2s + 1` of a byte of two 4-bit `s`, the low one for the first 16 values.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn two_scales(byte: u8) -> __m256i {
    let s = |n: u8| _mm_set1_epi16(i16::from(2 * n + 1));
    _mm256_setr_m128i(s(byte & 15), s(byte >> 4))
}

/// The sum of a block's eight 32-value chunks, `chunk(0) .. chunk(7)`, and no shifted sums.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn chunks(chunk: impl Fn(usize) -> __m256i) -> (__m256i, __m256i) {
    let mut acc = _mm256_setzero_si256();
    for c in 0..8 {
        acc = _mm256_add_epi32(acc, chunk(c));
    }
    (acc, _mm256_setzero_si256())
}

pub(super) struct Iq2Xxs;
impl GridBlock<66> for Iq2Xxs {
    const TYPE: &'static GridType = &iq2_xxs::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 66], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let chunk = |c: usize| {
            // per 32 values, four 8-bit grid indices, then a word of four 7-bit sign sets and a
            // 4-bit scale
            let at = 2 + 8 * c;
            let g = |l: usize| IQ2XXS_GRID[usize::from(b[at + l])] as i64;
            let v = _mm256_setr_epi64x(g(0), g(1), g(2), g(3));
            let aux = u32_at(b, at + 4);
            let scale = _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16);
            scaled_dot(v, signs7x4(aux), acts(q, c), scale)
        };
        chunks(chunk)
    }
}

pub(super) struct Iq2Xs;
impl GridBlock<74> for Iq2Xs {
    const TYPE: &'static GridType = &iq2_xs::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 74], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let chunk = |c: usize| {
            // a u16 per group of 8 (four in a word): a 9-bit grid index and 7 signs
            let w = u64_at(b, 2 + 8 * c);
            let u = |l: u32| (w >> (16 * l)) as u32;
            let g = |l: u32| IQ2XS_GRID[(u(l) & 511) as usize] as i64;
            let v = _mm256_setr_epi64x(g(0), g(1), g(2), g(3));
            let signs = signs7_each([u(0) >> 9, u(1) >> 9, u(2) >> 9, u(3) >> 9]);
            scaled_dot(v, signs, acts(q, c), two_scales(b[66 + c]))
        };
        chunks(chunk)
    }
}

pub(super) struct Iq2S;
impl GridBlock<82> for Iq2S {
    const TYPE: &'static GridType = &iq2_s::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 82], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let chunk = |c: usize| {
            // 10-bit indices: low bytes at 2.., two high bits per group in b[66 + c]
            let high = u32::from(b[66 + c]);
            let g = |l: usize| IQ2S_GRID[(u32::from(b[2 + 4 * c + l]) | (high << (8 - 2 * l)) & 0x300) as usize] as i64;
            let v = _mm256_setr_epi64x(g(0), g(1), g(2), g(3));
            let signs = sign_bytes(u32_at(b, 34 + 4 * c));
            scaled_dot(v, signs, acts(q, c), two_scales(b[74 + c]))
        };
        chunks(chunk)
    }
}

pub(super) struct Iq3Xxs;
impl GridBlock<98> for Iq3Xxs {
    const TYPE: &'static GridType = &iq3_xxs::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 98], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let chunk = |c: usize| {
            // eight 8-bit indices of 4 magnitudes each; four 7-bit sign sets and a 4-bit scale
            let aux = u32_at(b, 66 + 4 * c);
            let g = |k: usize| IQ3XXS_GRID[usize::from(b[2 + 8 * c + k])] as i32;
            let v = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
            let scale = _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16);
            scaled_dot(v, signs7x4(aux), acts(q, c), scale)
        };
        chunks(chunk)
    }
}

pub(super) struct Iq3S;
impl GridBlock<110> for Iq3S {
    const TYPE: &'static GridType = &iq3_s::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 110], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let chunk = |c: usize| {
            // 9-bit indices: low bytes at 2.., the k-th one's high bit is bit k of b[66 + c]
            let high = u32::from(b[66 + c]);
            let g = |k: usize| IQ3S_GRID[(u32::from(b[2 + 8 * c + k]) | (high >> k & 1) << 8) as usize] as i32;
            let v = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
            let nibble = b[106 + c / 2] >> (4 * (c % 2)) & 15;
            let scale = _mm256_set1_epi16(i16::from(2 * nibble + 1));
            scaled_dot(v, sign_bytes(u32_at(b, 74 + 4 * c)), acts(q, c), scale)
        };
        chunks(chunk)
    }
}

/// The IQ1 sums of 32 values: signed grid values `v` (-1, 0, 1) times `q`, each pair weighed by
/// `scales`; the activations' pair sums weighed by `shifts` (scale · shift per pair).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn iq1_dot(v: __m256i, q: __m256i, scales: __m256i, shifts: __m256i) -> (__m256i, __m256i) {
    let ones = _mm256_set1_epi8(1);
    let values = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, _mm256_sign_epi8(q, v)), scales);
    (values, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), shifts))
}

pub(super) struct Iq1S;
impl GridBlock<50> for Iq1S {
    const TYPE: &'static GridType = &iq1_s::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 50], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let (mut acc, mut acc_shift) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..8 {
            // per 32 values a u16: the indices' high bits (3 each), a 3-bit scale, the shift's sign
            let qh = u16_at(b, 34 + 2 * c);
            let g = |l: usize| IQ1S_GRID[(u32::from(b[2 + 4 * c + l]) | (qh >> (3 * l) & 7) << 8) as usize] as i64;
            let v = _mm256_setr_epi64x(g(0), g(1), g(2), g(3));
            let scale = (2 * (qh >> 12 & 7) + 1) as i16;
            let shift = if qh & 0x8000 != 0 { -scale } else { scale };
            let (values, shifted) = iq1_dot(v, acts(q, c), _mm256_set1_epi16(scale), _mm256_set1_epi16(shift));
            acc = _mm256_add_epi32(acc, values);
            acc_shift = _mm256_add_epi32(acc_shift, shifted);
        }
        (acc, acc_shift)
    }
}

pub(super) struct Iq1M;
impl GridBlock<56> for Iq1M {
    const TYPE: &'static GridType = &iq1_m::TYPE;

    /// The f16 `d` from the top nibbles of the four scale words.
    fn d(b: &[u8; 56]) -> f32 {
        let sc = |i: usize| u16_at(b, 48 + 2 * i);
        let bits = (sc(0) >> 12) | (sc(1) >> 8) & 0x00f0 | (sc(2) >> 4) & 0x0f00 | sc(3) & 0xf000;
        f16_at(&(bits as u16).to_le_bytes(), 0)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; 56], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let (mut acc, mut acc_shift) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..8 {
            // 3-bit scales per 16 values, 6 bits per 32 in the scale words
            let s = u16_at(b, 48 + 2 * (c / 2)) >> (6 * (c % 2));
            let scale = [(2 * (s & 7) + 1) as i16, (2 * (s >> 3 & 7) + 1) as i16];
            // a byte per two groups: each group's 3 high index bits and its shift's sign
            let qh = |l: usize| u32::from(b[32 + 2 * c + l / 2]) >> (4 * (l % 2));
            let g = |l: usize| IQ1S_GRID[(u32::from(b[4 * c + l]) | (qh(l) & 7) << 8) as usize] as i64;
            let v = _mm256_setr_epi64x(g(0), g(1), g(2), g(3));
            // scale · shift in the 4 i16 lanes of each group
            let shift = |l: usize| {
                let s = if qh(l) & 8 != 0 { -scale[l / 2] } else { scale[l / 2] };
                (s as u16 as u64 * 0x0001_0001_0001_0001) as i64
            };
            let scales = _mm256_setr_m128i(_mm_set1_epi16(scale[0]), _mm_set1_epi16(scale[1]));
            let shifts = _mm256_setr_epi64x(shift(0), shift(1), shift(2), shift(3));
            let (values, shifted) = iq1_dot(v, acts(q, c), scales, shifts);
            acc = _mm256_add_epi32(acc, values);
            acc_shift = _mm256_add_epi32(acc_shift, shifted);
        }
        (acc, acc_shift)
    }
}
