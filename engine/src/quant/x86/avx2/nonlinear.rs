//! AVX2 kernels for the table-level 4-bit types: IQ4_NL and MXFP4 (32-value blocks, Q8_0
//! activations) and IQ4_XS (256-value super-blocks, Q8_K activations). The AVX-512 tier runs
//! them too.
//!
//! A block's 16 index bytes become its 32 signed levels with one `vpshufb` into the type's
//! 16-entry table (the same table in both 128-bit lanes: low nibbles give values 0..16 in the
//! low lane, high nibbles 16..32 in the high lane). Levels times activation quants go through
//! `|x| * sign(y, x)` and `vpmaddubsw`: both sides lie in -127..=127, so every i16 pair stays
//! below 2 * 127 * 127 and the integer part of each block is exact. IQ4_XS multiplies each
//! group's i16 pairs by its scale (-32..=31) with `vpmaddwd`; a super-block's i32 lanes stay
//! below 2^24, so their conversion to f32 is exact as well. The scaled blocks are chained into
//! one f32 accumulator in order; the 32-value types take four blocks a step, their scales
//! converted together.
//!
//! Dequantization computes `d * level` (IQ4_XS: `(d * scale) * level`) with a single multiply,
//! bit for bit the scalar reference.

use core::arch::x86_64::*;
use core::mem::size_of;

use super::legacy::{lane, load, load128, scales_d, store_ps};
use crate::quant::blocks::{BlockIQ4NL, BlockIQ4XS, BlockMXFP4};
use crate::quant::dispatch::Kernels;
use crate::quant::x86::common::{
    entry_points, f32_at, hsum256, le16, legacy_deq_rows, legacy_dot_rows, row_entry_points, Chain, Q8K_BYTES, Q8K_QS, Q8_0,
};
use crate::quant::{iq4, mxfp4, GgmlType};

const IQ4_NL: usize = size_of::<BlockIQ4NL>();
const IQ4_XS: usize = size_of::<BlockIQ4XS>();
const MXFP4: usize = size_of::<BlockMXFP4>();

pub(crate) fn kernels(ty: GgmlType) -> Option<Kernels> {
    Some(match ty {
        GgmlType::IQ4_NL => Kernels { dequantize: dequantize_iq4_nl, vec_dot: vec_dot_iq4_nl },
        GgmlType::IQ4_XS => Kernels { dequantize: dequantize_iq4_xs, vec_dot: vec_dot_iq4_xs },
        GgmlType::MXFP4 => Kernels { dequantize: dequantize_mxfp4, vec_dot: vec_dot_mxfp4 },
        _ => return None,
    })
}

entry_points! { "AVX2 + FMA + F16C";
    dot {
        vec_dot_iq4_nl => dot_iq4_nl, IQ4_NL, Q8_0;
        vec_dot_mxfp4 => dot_mxfp4, MXFP4, Q8_0;
    }
    dequantize {
        dequantize_iq4_nl => deq_iq4_nl, IQ4_NL, 32;
        dequantize_mxfp4 => deq_mxfp4, MXFP4, 32;
    }
}

row_entry_points! { "AVX2 + FMA + F16C";
    dequantize_iq4_xs => deq_iq4_xs, vec_dot_iq4_xs => dot_iq4_xs, IQ4_XS;
}

/// A 16-entry level table in both 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn table(levels: &[i8; 16]) -> __m256i {
    _mm256_broadcastsi128_si256(load128(levels.as_ptr().cast()))
}

/// The 32 levels of the 16 index bytes at `p`, in value order (low nibbles, then high ones).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn levels(table: __m256i, p: *const u8) -> __m256i {
    let v = _mm256_broadcastsi128_si256(load128(p));
    let v = _mm256_srlv_epi32(v, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0));
    _mm256_shuffle_epi8(table, _mm256_and_si256(v, _mm256_set1_epi8(0x0F)))
}

/// `x * y` of 32 signed bytes (both in -127..=127) summed in pairs to i16, exactly.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pair_products(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// The f16 at `p` as an f32 (exact), converted from a general register moved in whole (`vmovq`
/// zero-extends): a 16-bit insert would merge into whatever its register last held, and could
/// chain each block's scale to the previous block's sum.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_set_epi64x(0, le16(p) as i64)))
}

// Dot products of the 32-value types, four blocks per step (the row loop is
// `common::legacy_dot_rows`), the blocks chained into one accumulator in order.
legacy_dot_rows! { "avx2,fma,f16c", Chain;
    dot_iq4_nl => group_iq4_nl, IQ4_NL, Q8_0;
    dot_mxfp4 => group_mxfp4, MXFP4, Q8_0;
}

/// IQ4_NL (`d`, 16 index bytes) x Q8_0: `Σ level · y` per block, scaled by `d_w · d_a`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_iq4_nl(x: *const u8, y: *const u8, acc: &mut Chain) {
    let t = table(&iq4::LEVELS);
    let d = scales_d(x, IQ4_NL, y, Q8_0);
    for k in 0..4 {
        let p = pair_products(levels(t, x.add(k * IQ4_NL + 2)), load(y.add(k * Q8_0 + 2)));
        acc.add(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), lane(d, k as i32));
    }
}

/// MXFP4 (E8M0 `e`, 16 code bytes) x Q8_0: `Σ level · y` per block, scaled by
/// `d_a · 2^(e - 128)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_mxfp4(x: *const u8, y: *const u8, acc: &mut Chain) {
    let t = table(&mxfp4::LEVELS);
    let hy = le16(y) | le16(y.add(Q8_0)) << 16 | le16(y.add(2 * Q8_0)) << 32 | le16(y.add(3 * Q8_0)) << 48;
    let e = |k: usize| u32::from(*x.add(k * MXFP4)) << (8 * k);
    let d = _mm_mul_ps(_mm_cvtph_ps(_mm_set_epi64x(0, hy as i64)), e8m0_half4(e(0) | e(1) | e(2) | e(3)));
    let d = _mm256_castps128_ps256(d);
    for k in 0..4 {
        let p = pair_products(levels(t, x.add(k * MXFP4 + 1)), load(y.add(k * Q8_0 + 2)));
        acc.add(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), lane(d, k as i32));
    }
}

/// [`mxfp4::e8m0_half`] of the four exponents in the bytes of `e` (lowest first), in lanes 0..4:
/// `(e - 1) << 23` as an f32's bits, or `0x00200000 << e` (a subnormal) for `e` below 2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn e8m0_half4(e: u32) -> __m128 {
    let e = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(e as i32));
    let normal = _mm_slli_epi32::<23>(_mm_sub_epi32(e, _mm_set1_epi32(1)));
    let subnormal = _mm_sllv_epi32(_mm_set1_epi32(0x0020_0000), e);
    _mm_castsi128_ps(_mm_blendv_epi8(normal, subnormal, _mm_cmplt_epi32(e, _mm_set1_epi32(2))))
}

/// IQ4_XS x Q8_K: per super-block, the eight groups' pair products times their scales summed
/// in i32 lanes, then scaled by `d_w * d_a` into the chain.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_iq4_xs(w: *const u8, a: *const u8, nb: usize) -> f32 {
    let t = table(&iq4::LEVELS);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (x, y) = (w.add(i * IQ4_XS), a.add(i * Q8K_BYTES));
        let mut sumi = [_mm256_setzero_si256(); 2];
        for g in 0..8 {
            let scale = _mm256_set1_epi16(group_scale(x, g) as i16);
            let p = pair_products(levels(t, x.add(8 + 16 * g)), load(y.add(Q8K_QS + 32 * g)));
            sumi[g % 2] = _mm256_add_epi32(sumi[g % 2], _mm256_madd_epi16(p, scale));
        }
        let d = _mm256_set1_ps(f16_at(x) * f32_at(y));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_add_epi32(sumi[0], sumi[1])), acc);
    }
    hsum256(acc)
}

/// The scale of group `g` of the IQ4_XS super-block at `x`, less 32.
#[inline(always)]
unsafe fn group_scale(x: *const u8, g: usize) -> i32 {
    let low = (*x.add(4 + g / 2) >> (4 * (g % 2))) & 0x0F;
    let high = (le16(x.add(2)) >> (2 * g)) & 3;
    (i32::from(low) | ((high as i32) << 4)) - 32
}

/// Stores `d * level` for the 32 signed levels of `q` (one multiply, as the reference).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn put_levels(out: *mut f32, q: __m256i, d: __m256) {
    let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
    for (h, v) in halves.into_iter().enumerate() {
        for (e, v) in [v, _mm_unpackhi_epi64(v, v)].into_iter().enumerate() {
            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
            store_ps(out.add(16 * h + 8 * e), _mm256_mul_ps(d, f));
        }
    }
}

legacy_deq_rows!("avx2,fma,f16c", deq_iq4_nl, IQ4_NL, |x, out| {
    put_levels(out, levels(table(&iq4::LEVELS), x.add(2)), _mm256_set1_ps(f16_at(x)))
});

legacy_deq_rows!("avx2,fma,f16c", deq_mxfp4, MXFP4, |x, out| {
    put_levels(out, levels(table(&mxfp4::LEVELS), x.add(1)), _mm256_set1_ps(mxfp4::e8m0_half(*x)))
});

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn deq_iq4_xs(w: *const u8, out: *mut f32, nb: usize) {
    let t = table(&iq4::LEVELS);
    for i in 0..nb {
        let x = w.add(i * IQ4_XS);
        let d = f16_at(x);
        for g in 0..8 {
            let dl = _mm256_set1_ps(d * group_scale(x, g) as f32);
            put_levels(out.add(256 * i + 32 * g), levels(t, x.add(8 + 16 * g)), dl);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::check_type;
    use crate::quant::{GgmlType, Isa};

    #[test]
    fn four_exponents_at_once_are_the_scalar_conversion() {
        if !crate::quant::Isa::Avx2.is_available() {
            return;
        }
        for base in (0u32..=252).step_by(4) {
            let packed = base | (base + 1) << 8 | (base + 2) << 16 | (base + 3) << 24;
            // SAFETY: AVX2, FMA and F16C checked above.
            let v: [f32; 4] = unsafe { core::mem::transmute(super::e8m0_half4(packed)) };
            for (k, &got) in v.iter().enumerate() {
                assert_eq!(got.to_bits(), crate::quant::mxfp4::e8m0_half((base + k as u32) as u8).to_bits(), "e = {}", base + k as u32);
            }
        }
    }

    #[test]
    fn table_level_kernels_match_the_scalar_reference() {
        for ty in [GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4] {
            check_type(ty, Isa::Avx2, super::kernels(ty).expect("a kernel for every table-level type"));
        }
    }
}
