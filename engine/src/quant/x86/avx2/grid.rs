//! AVX2 dot products of the grid i-quants (`quant::iq_grid`) with Q8_K activations; the
//! AVX-512 tier runs them too. A super-block is unpacked by the type's own (scalar) function,
//! the grid lookups being table reads; the rest is vector work: each 32 values' signs become a
//! byte mask (`SIGN_MASKS`), the signed values times the activations go through
//! `|v| · sign(q, v)` and `vpmaddubsw` (magnitudes below 64, quants within ±127: every i16 pair
//! below 2 · 63 · 127), `vpmaddwd` makes i32 sums of 4 products, lanes 2k and 2k+1 being the
//! k-th group of 8, and each lane is multiplied by its group's scale. The integer sums are
//! exact, so they equal the scalar reference's, and the block's float part is the scalar
//! reference's expression: the same bits. Dequantization is the scalar function on every tier.

use core::arch::x86_64::*;

use crate::quant::blocks::BlockQ8K;
use crate::quant::dispatch::Kernels;
use crate::quant::iq_grid::{self, GridType, Unpacked};
use crate::quant::x86::common::dot_blocks;
use crate::quant::{GgmlType, QK_K};

/// For each sign byte, the 8 bytes that are 0xFF where its bit is set.
static SIGN_MASKS: [u64; 256] = sign_masks();

const fn sign_masks() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            if s >> j & 1 == 1 {
                t[s] |= 0xff << (8 * j);
            }
            j += 1;
        }
        s += 1;
    }
    t
}

pub(crate) fn kernels(ty: GgmlType) -> Option<Kernels> {
    use iq_grid::{iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs};
    macro_rules! grid {
        ($m:ident) => {
            Kernels { dequantize: $m::dequantize_row, vec_dot: |w, a| dot(&$m::TYPE, w, a) }
        };
    }
    Some(match ty {
        GgmlType::IQ2_XXS => grid!(iq2_xxs),
        GgmlType::IQ2_XS => grid!(iq2_xs),
        GgmlType::IQ2_S => grid!(iq2_s),
        GgmlType::IQ3_XXS => grid!(iq3_xxs),
        GgmlType::IQ3_S => grid!(iq3_s),
        GgmlType::IQ1_S => grid!(iq1_s),
        GgmlType::IQ1_M => grid!(iq1_m),
        _ => return None,
    })
}

/// Checks the row lengths and runs the AVX2 + FMA + F16C kernel.
fn dot(t: &GridType, w: &[u8], a: &[u8]) -> f32 {
    let nb = dot_blocks(w, a, t.block_bytes);
    let act = bytemuck::cast_slice::<u8, BlockQ8K>(a);
    // SAFETY: dispatch hands out this tier's kernels only after detecting AVX2, FMA and F16C;
    // `dot_blocks` checked that `w` holds `nb` blocks and `a` as many Q8_K blocks, all the
    // kernel reads.
    unsafe { dot_avx2(t, w, act, nb) }
}

/// The sum of the eight i32 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// The 32 values of groups `4c .. 4c + 4` of `u` as signed bytes: each group's signs as a byte
/// mask `m` (`SIGN_MASKS`), applied as `(v ^ m) - m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn signed_values(u: &Unpacked, c: usize) -> __m256i {
    let g = 4 * c;
    let m = _mm256_loadu_si256(u.values.as_ptr().add(g).cast());
    let s = _mm256_setr_epi64x(
        SIGN_MASKS[usize::from(u.signs[g])] as i64,
        SIGN_MASKS[usize::from(u.signs[g + 1])] as i64,
        SIGN_MASKS[usize::from(u.signs[g + 2])] as i64,
        SIGN_MASKS[usize::from(u.signs[g + 3])] as i64,
    );
    _mm256_sub_epi8(_mm256_xor_si256(m, s), s)
}

/// Four groups' values (lanes 2k, 2k + 1: group k) as i32 lanes, each a pair of groups' entry.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn per_group(v: [u8; 4]) -> __m256i {
    let [a, b, c, d] = v.map(i32::from);
    _mm256_setr_epi32(a, a, b, b, c, c, d, d)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(t: &GridType, w: &[u8], act: &[BlockQ8K], nb: usize) -> f32 {
    let mut u = Unpacked::default();
    let ones16 = _mm256_set1_epi16(1);
    let ones8 = _mm256_set1_epi8(1);
    let mut sum = 0.0f32;
    for (block, a) in w.chunks_exact(t.block_bytes).zip(act).take(nb) {
        (t.unpack)(block, &mut u);
        let (mut acc, mut acc_shift) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..QK_K / 32 {
            let g = 4 * c;
            let v = signed_values(&u, c);
            let q = _mm256_loadu_si256(a.qs.as_ptr().add(32 * c).cast());
            let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q, v));
            let p32 = _mm256_madd_epi16(p16, ones16); // sums of 4 products
            let scales = per_group([u.scales[g], u.scales[g + 1], u.scales[g + 2], u.scales[g + 3]]);
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p32, scales));
            if t.shifted {
                // Σ scale · shift · Σ q over each group of 8
                let q32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
                let shifts: [i32; 4] = core::array::from_fn(|k| i32::from(u.scales[g + k]) * i32::from(u.shifts[g + k]));
                let sh = _mm256_setr_epi32(shifts[0], shifts[0], shifts[1], shifts[1], shifts[2], shifts[2], shifts[3], shifts[3]);
                acc_shift = _mm256_add_epi32(acc_shift, _mm256_mullo_epi32(q32, sh));
            }
        }
        let sumi = hsum_i32(acc);
        sum +=
            if t.shifted { u.d * a.d() * (sumi as f32 + iq_grid::SHIFT * hsum_i32(acc_shift) as f32) } else { u.d * a.d() * sumi as f32 };
    }
    t.c * sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{ops_for, Isa};

    /// Random super-blocks (every byte random but the f16 scales) against random activations:
    /// this tier's dot product gives the scalar reference's bits.
    #[test]
    fn grid_dot_products_equal_the_scalar_reference() {
        if !Isa::Avx2.is_available() {
            return;
        }
        for ty in
            [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M]
        {
            let scalar = ops_for(ty, Isa::Scalar).unwrap();
            let simd = kernels(ty).unwrap();
            for seed in 0..20u64 {
                let n = 1 + (seed as usize % 4);
                let w = iq_grid::random_row(ty, n, seed);
                let x: Vec<f32> = (0..n * QK_K).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 - 500.0) / 77.0).collect();
                let mut act = vec![0u8; n * 292];
                (ops_for(GgmlType::Q8_K, Isa::Scalar).unwrap().quantize.unwrap())(&x, &mut act);
                let (want, got) = ((scalar.vec_dot)(&w, &act), (simd.vec_dot)(&w, &act));
                assert_eq!(got.to_bits(), want.to_bits(), "{ty}, {n} blocks, seed {seed}: {got} vs {want}");
            }
        }
    }
}
