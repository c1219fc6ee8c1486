//! AVX2 dot products of the grid i-quants (`quant::iq_grid`) with Q8_K activations; the
//! AVX-512 tiers run them too. Each type's block reader (`grid_blocks`) gives a super-block's
//! exact integer sums in vector lanes; this file adds them up and does the block's float part
//! as the scalar reference does (`d · d₈ · sumi`, blocks left to right): the same bits. It also
//! keeps the unpacked form's signed values, from which the many-row product expands Q3_K and
//! Q2_K (`x86::grid_lanes`).
//! Dequantization is the scalar function on every tier.

use core::arch::x86_64::*;

use super::grid_blocks::{GridBlock, Iq1M, Iq1S, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs};
use crate::quant::blocks::BlockQ8K;
use crate::quant::dispatch::Kernels;
use crate::quant::iq_grid::{self, Unpacked};
use crate::quant::x86::common::{dot_blocks, hsum256_epi32};
use crate::quant::GgmlType;

/// For each sign byte, the 8 bytes that are 0xFF where its bit is set.
static SIGN_MASKS: [u64; 256] = sign_masks();

pub(super) const fn sign_masks() -> [u64; 256] {
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
        ($m:ident, $block:ty) => {
            Kernels { dequantize: $m::dequantize_row, vec_dot: |w, a| dot::<$block, { $m::TYPE.block_bytes }>(w, a) }
        };
    }
    Some(match ty {
        GgmlType::IQ2_XXS => grid!(iq2_xxs, Iq2Xxs),
        GgmlType::IQ2_XS => grid!(iq2_xs, Iq2Xs),
        GgmlType::IQ2_S => grid!(iq2_s, Iq2S),
        GgmlType::IQ3_XXS => grid!(iq3_xxs, Iq3Xxs),
        GgmlType::IQ3_S => grid!(iq3_s, Iq3S),
        GgmlType::IQ1_S => grid!(iq1_s, Iq1S),
        GgmlType::IQ1_M => grid!(iq1_m, Iq1M),
        _ => return None,
    })
}

/// Checks the row lengths and runs the AVX2 + FMA + F16C kernel of block reader `B`.
fn dot<B: GridBlock<N>, const N: usize>(w: &[u8], a: &[u8]) -> f32 {
    let nb = dot_blocks(w, a, N);
    let act = bytemuck::cast_slice::<u8, BlockQ8K>(a);
    // SAFETY: dispatch hands out this tier's kernels only after detecting AVX2, FMA and F16C;
    // `dot_blocks` checked that `w` holds `nb` blocks and `a` as many Q8_K blocks.
    unsafe { dot_avx2::<B, N>(w, &act[..nb]) }
}

/// The 32 values of groups `4c .. 4c + 4` of `u` as signed bytes: each group's signs as a byte
/// mask `m` (`SIGN_MASKS`), applied as `(v ^ m) - m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant::x86) unsafe fn signed_values(u: &Unpacked, c: usize) -> __m256i {
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

/// The dot product in the scalar reference's float order: per block `d · d₈ · sumi` (IQ1:
/// `d · d₈ · (sumi + shift · shifted)`) added left to right, times the type's constant.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2<B: GridBlock<N>, const N: usize>(w: &[u8], act: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (block, a) in w.chunks_exact(N).zip(act) {
        let block: &[u8; N] = block.try_into().expect("chunks of N bytes");
        let (acc, acc_shift) = B::sums(block, &a.qs);
        let (d, sumi) = (B::d(block), hsum256_epi32(acc) as f32);
        sum += if B::TYPE.shifted { d * a.d() * (sumi + iq_grid::SHIFT * hsum256_epi32(acc_shift) as f32) } else { d * a.d() * sumi };
    }
    B::TYPE.c * sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{ops_for, Isa, QK_K};

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
