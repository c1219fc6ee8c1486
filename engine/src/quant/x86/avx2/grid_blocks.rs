//! AVX2 super-block readers of the grid i-quants: each type reads its indices, signs and scales
//! straight into registers, 32 values at a time ([`Chunk`]: no unpacked block in memory
//! between). The one-row dot product takes a block's exact integer sums against a Q8_K block
//! from them as i32 lanes ([`GridBlock::sums`]); the many-row product's weight expansion
//! (`x86::grid_lanes`) stores their signed values. The grid lookups are table reads (the grids
//! are 2 to 16 KiB, in L1); a group's signs become ±1 bytes (a 128-entry table for the 7-bit
//! sign sets, a byte spread and compare for whole sign bytes) that `vpsignb` applies to the
//! activations; `vpmaddubsw` multiplies the magnitudes (below 64) with them (pairs within
//! ±2 · 63 · 127) and `vpmaddwd` weighs each pair by its group's scale. Integer sums are exact
//! whatever their order, so these equal the scalar reference's `Σ scale · Σ value · q` (and
//! IQ1's `Σ scale · shift · Σ q`).

use core::arch::x86_64::*;

use crate::quant::iq_grid::tables::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::quant::iq_grid::{f16_at, iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs, u32_at, u64_at, GridType, SIGNS7};
use crate::quant::QK_K;

/// One grid type's super-block of `N` bytes, read 32 values at a time.
pub(in crate::quant::x86) trait GridBlock<const N: usize> {
    /// The type's constants (value factor, shifted or not).
    const TYPE: &'static GridType;

    /// The block's f16 scale `d`.
    #[inline]
    fn d(b: &[u8; N]) -> f32 {
        f16_at(b, 0)
    }

    /// Values `32c .. 32c + 32` of the block.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    unsafe fn chunk(b: &[u8; N], c: usize) -> Chunk;

    /// The block's integer sums against the activations `q`, each spread over 8 i32 lanes:
    /// `Σ scale · Σ value · q`, and (IQ1) `Σ scale · shift · Σ q`.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sums(b: &[u8; N], q: &[i8; QK_K]) -> (__m256i, __m256i) {
        let (mut acc, mut acc_shift) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        // a count the compiler cannot see keeps the loop rolled: unrolled, it hoists every
        // chunk's table reads together and spills (IQ2_S's row dot was 25% slower)
        for c in 0..core::hint::black_box(QK_K / 32) {
            let chunk = Self::chunk(b, c);
            let q = acts(q, c);
            if Self::TYPE.shifted {
                // IQ1: signed values (-1, 0, 1) times q, and q's pair sums weighed by scale · shift
                let ones = _mm256_set1_epi8(1);
                let values = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, _mm256_sign_epi8(q, chunk.v)), chunk.scales);
                acc_shift = _mm256_add_epi32(acc_shift, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), chunk.scaled_shifts));
                acc = _mm256_add_epi32(acc, values);
            } else {
                acc = _mm256_add_epi32(acc, scaled_dot(chunk.v, chunk.signs, q, chunk.scales));
            }
        }
        (acc, acc_shift)
    }
}

/// 32 values of a super-block as its reader decodes them.
pub(in crate::quant::x86) struct Chunk {
    /// IQ2, IQ3: the magnitudes (below 64), whose signs are `signs`; IQ1: the grid values
    /// themselves (-1, 0, 1).
    pub v: __m256i,
    /// Each value's sign as ±1 (IQ1: unused).
    pub signs: __m256i,
    /// The scale of each pair of values as i16: the first 16 values' in the low half.
    pub scales: __m256i,
    /// The scales of the first and the second 16 values (equal where a scale covers 32).
    pub scale_pair: [i16; 2],
    /// IQ1: each value's shift as ±1 (0 for the other types).
    pub shifts: __m256i,
    /// IQ1: each pair's scale times its shift as i16 (0 for the other types).
    pub scaled_shifts: __m256i,
}

impl Chunk {
    /// The chunk of an IQ2 or IQ3 block whose 32 values share one scale.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn one_scale(v: __m256i, signs: __m256i, scale: i16) -> Chunk {
        Chunk::with_scales(v, signs, _mm256_set1_epi16(scale), [scale, scale])
    }

    /// The chunk of an IQ2 block with a scale per 16 values: the two 4-bit `s` of `byte`, as
    /// `2s + 1`, the low one for the first 16.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn two_scales(v: __m256i, signs: __m256i, byte: u8) -> Chunk {
        let pair = [i16::from(2 * (byte & 15) + 1), i16::from(2 * (byte >> 4) + 1)];
        Chunk::with_scales(v, signs, _mm256_setr_m128i(_mm_set1_epi16(pair[0]), _mm_set1_epi16(pair[1])), pair)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn with_scales(v: __m256i, signs: __m256i, scales: __m256i, scale_pair: [i16; 2]) -> Chunk {
        Chunk { v, signs, scales, scale_pair, shifts: _mm256_setzero_si256(), scaled_shifts: _mm256_setzero_si256() }
    }

    /// The 32 values as signed bytes: IQ2 and IQ3 their signed grid values; IQ1 `8 v + shift`
    /// (the many-row product's form, `iq_grid::gemm`).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant::x86) unsafe fn signed_values(&self, shifted: bool) -> __m256i {
        if shifted {
            _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), self.v), self.shifts)
        } else {
            _mm256_sign_epi8(self.v, self.signs)
        }
    }
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

/// The odd scale `2s + 1` of a 4-bit `s`.
fn odd(s: u32) -> i16 {
    (2 * (s & 15) + 1) as i16
}

pub(in crate::quant::x86) struct Iq2Xxs;
impl GridBlock<66> for Iq2Xxs {
    const TYPE: &'static GridType = &iq2_xxs::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 66], c: usize) -> Chunk {
        // per 32 values, four 8-bit grid indices, then a word of four 7-bit sign sets and a
        // 4-bit scale
        let at = 2 + 8 * c;
        let g = |l: usize| IQ2XXS_GRID[usize::from(b[at + l])] as i64;
        let aux = u32_at(b, at + 4);
        Chunk::one_scale(_mm256_setr_epi64x(g(0), g(1), g(2), g(3)), signs7x4(aux), odd(aux >> 28))
    }
}

pub(in crate::quant::x86) struct Iq2Xs;
impl GridBlock<74> for Iq2Xs {
    const TYPE: &'static GridType = &iq2_xs::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 74], c: usize) -> Chunk {
        // a u16 per group of 8 (four in a word): a 9-bit grid index and 7 signs
        let w = u64_at(b, 2 + 8 * c);
        let u = |l: u32| (w >> (16 * l)) as u32;
        let g = |l: u32| IQ2XS_GRID[(u(l) & 511) as usize] as i64;
        let signs = signs7_each([u(0) >> 9, u(1) >> 9, u(2) >> 9, u(3) >> 9]);
        Chunk::two_scales(_mm256_setr_epi64x(g(0), g(1), g(2), g(3)), signs, b[66 + c])
    }
}

pub(in crate::quant::x86) struct Iq2S;
impl GridBlock<82> for Iq2S {
    const TYPE: &'static GridType = &iq2_s::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 82], c: usize) -> Chunk {
        // 10-bit indices: low bytes at 2.., two high bits per group in b[66 + c]
        let high = u32::from(b[66 + c]);
        let g = |l: usize| IQ2S_GRID[(u32::from(b[2 + 4 * c + l]) | (high << (8 - 2 * l)) & 0x300) as usize] as i64;
        let signs = sign_bytes(u32_at(b, 34 + 4 * c));
        Chunk::two_scales(_mm256_setr_epi64x(g(0), g(1), g(2), g(3)), signs, b[74 + c])
    }
}

pub(in crate::quant::x86) struct Iq3Xxs;
impl GridBlock<98> for Iq3Xxs {
    const TYPE: &'static GridType = &iq3_xxs::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 98], c: usize) -> Chunk {
        // eight 8-bit indices of 4 magnitudes each; four 7-bit sign sets and a 4-bit scale
        let aux = u32_at(b, 66 + 4 * c);
        let g = |k: usize| IQ3XXS_GRID[usize::from(b[2 + 8 * c + k])] as i32;
        let v = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
        Chunk::one_scale(v, signs7x4(aux), odd(aux >> 28))
    }
}

pub(in crate::quant::x86) struct Iq3S;
impl GridBlock<110> for Iq3S {
    const TYPE: &'static GridType = &iq3_s::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 110], c: usize) -> Chunk {
        // 9-bit indices: low bytes at 2.., the k-th one's high bit is bit k of b[66 + c]
        let high = u32::from(b[66 + c]);
        let g = |k: usize| IQ3S_GRID[(u32::from(b[2 + 8 * c + k]) | (high >> k & 1) << 8) as usize] as i32;
        let v = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
        let nibble = b[106 + c / 2] >> (4 * (c % 2));
        Chunk::one_scale(v, sign_bytes(u32_at(b, 74 + 4 * c)), odd(u32::from(nibble)))
    }
}

/// The chunk of an IQ1 block: signed grid values `v` (-1, 0, 1), the two halves' scales, each
/// value's shift (±1 bytes) and each pair's scale times its shift (i16).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn iq1_chunk(v: __m256i, scale_pair: [i16; 2], shifts: __m256i, scaled_shifts: __m256i) -> Chunk {
    let scales = _mm256_setr_m128i(_mm_set1_epi16(scale_pair[0]), _mm_set1_epi16(scale_pair[1]));
    Chunk { v, signs: _mm256_setzero_si256(), scales, scale_pair, shifts, scaled_shifts }
}

pub(in crate::quant::x86) struct Iq1S;
impl GridBlock<50> for Iq1S {
    const TYPE: &'static GridType = &iq1_s::TYPE;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 50], c: usize) -> Chunk {
        // per 32 values a u16: the indices' high bits (3 each), a 3-bit scale, the shift's sign
        let qh = u16_at(b, 34 + 2 * c);
        let g = |l: usize| IQ1S_GRID[(u32::from(b[2 + 4 * c + l]) | (qh >> (3 * l) & 7) << 8) as usize] as i64;
        let scale = odd(qh >> 12 & 7);
        let negative = qh & 0x8000 != 0;
        let (shift, scaled) = if negative { (-1, -scale) } else { (1, scale) };
        iq1_chunk(_mm256_setr_epi64x(g(0), g(1), g(2), g(3)), [scale, scale], _mm256_set1_epi8(shift), _mm256_set1_epi16(scaled))
    }
}

pub(in crate::quant::x86) struct Iq1M;
impl GridBlock<56> for Iq1M {
    const TYPE: &'static GridType = &iq1_m::TYPE;

    /// The f16 `d` from the top nibbles of the four scale words.
    #[inline]
    fn d(b: &[u8; 56]) -> f32 {
        let sc = |i: usize| u16_at(b, 48 + 2 * i);
        let bits = (sc(0) >> 12) | (sc(1) >> 8) & 0x00f0 | (sc(2) >> 4) & 0x0f00 | sc(3) & 0xf000;
        f16_at(&(bits as u16).to_le_bytes(), 0)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk(b: &[u8; 56], c: usize) -> Chunk {
        // 3-bit scales per 16 values, 6 bits per 32 in the scale words
        let s = u16_at(b, 48 + 2 * (c / 2)) >> (6 * (c % 2));
        // a byte per two groups: each group's 3 high index bits and its shift's sign
        let qh = |l: usize| u32::from(b[32 + 2 * c + l / 2]) >> (4 * (l % 2));
        let g = |l: usize| IQ1S_GRID[(u32::from(b[4 * c + l]) | (qh(l) & 7) << 8) as usize] as i64;
        let scale_pair = [odd(s & 7), odd(s >> 3 & 7)];
        // each group's shift sign in its 8 bytes, and times its scale in its 4 i16 lanes
        let negative = |l: usize| qh(l) & 8 != 0;
        let shift = |l: usize| if negative(l) { -1i64 } else { 0x0101_0101_0101_0101 };
        let scaled = |l: usize| {
            let s = if negative(l) { -scale_pair[l / 2] } else { scale_pair[l / 2] };
            (s as u16 as u64 * 0x0001_0001_0001_0001) as i64
        };
        let shifts = _mm256_setr_epi64x(shift(0), shift(1), shift(2), shift(3));
        let scaled_shifts = _mm256_setr_epi64x(scaled(0), scaled(1), scaled(2), scaled(3));
        iq1_chunk(_mm256_setr_epi64x(g(0), g(1), g(2), g(3)), scale_pair, shifts, scaled_shifts)
    }
}
