//! AVX2 many-row products of the grid i-quants (`quant::iq_grid::gemm`): the expansion of a
//! super-block into 16-bit values (the AVX-512 tier expands with it too) and the tile kernel.
//!
//! Expansion: the type's own unpack (table reads), then per 32 values the signed bytes of the
//! dot product (`grid::signed_values`), widened to i16 and multiplied by each group's scale (IQ1:
//! `(8 v + shift) · scale`). Tile: 4 weight rows at a time, each 16 activation values widened
//! once and multiplied into the 4 rows' `vpmaddwd` sums; the block's float part as the scalar
//! tile has it (`(d · d₈) · (W · k)`, no fused multiply-add).

use core::arch::x86_64::*;

use super::grid::signed_values;
use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::{as_rows, run_tiles, GridGemm, TILE_ROWS};
use crate::quant::iq_grid::{GridType, Unpacked};
use crate::quant::QK_K;

/// This tier's many-row product for grid type `t`.
pub(crate) fn gemm(t: &'static GridType) -> GridGemm {
    GridGemm { ty: t, prepare: as_rows, run: |t, w, rows, acts, outs| run_tiles(expand, tile, t, w, rows, acts, outs) }
}

/// Checks `out`'s length and runs the AVX2 expansion.
pub(crate) fn expand(t: &GridType, block: &[u8], u: &mut Unpacked, out: &mut [i16]) -> f32 {
    assert!(block.len() == t.block_bytes && out.len() >= QK_K, "grid expansion: {} bytes into {} values", block.len(), out.len());
    (t.unpack)(block, u);
    // SAFETY: this tier's kernels are handed out only after AVX2, FMA and F16C were detected
    // (every AVX-512 CPU has them too); `out` holds the 256 values written.
    unsafe { expand_avx2(t.shifted, u, out) };
    u.d
}

/// `a` in the 8 i16 lanes of one group, then `b` in those of the next.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn two_groups(a: i16, b: i16) -> __m256i {
    _mm256_setr_m128i(_mm_set1_epi16(a), _mm_set1_epi16(b))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn expand_avx2(shifted: bool, u: &Unpacked, out: &mut [i16]) {
    for c in 0..QK_K / 32 {
        let g = 4 * c;
        let v = signed_values(u, c);
        let halves = [_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)];
        for (h, half) in halves.into_iter().enumerate() {
            let (ga, gb) = (g + 2 * h, g + 2 * h + 1);
            let mut v16 = _mm256_cvtepi8_epi16(half);
            if shifted {
                let shifts = two_groups(i16::from(u.shifts[ga]), i16::from(u.shifts[gb]));
                v16 = _mm256_add_epi16(_mm256_slli_epi16::<3>(v16), shifts);
            }
            let w = _mm256_mullo_epi16(v16, two_groups(i16::from(u.scales[ga]), i16::from(u.scales[gb])));
            _mm256_storeu_si256(out.as_mut_ptr().add(32 * c + 16 * h).cast(), w);
        }
    }
}

/// Checks the lengths and runs the AVX2 tile kernel.
fn tile(w: &[i16], d: &[f32], act: &[BlockQ8K], k: f32, sums: &mut [f32; TILE_ROWS]) {
    assert!(w.len() >= act.len() * TILE_ROWS * QK_K && d.len() >= act.len() * TILE_ROWS, "grid tile: {} blocks", act.len());
    // SAFETY: as for `expand`; the assert covers every value and scale of the tile read.
    unsafe { tile_avx2(w, d, act, k, sums) }
}

/// The sums of the eight i32 lanes of each of `v`, as four i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum4(v: [__m256i; 4]) -> __m128i {
    let a = _mm256_hadd_epi32(v[0], v[1]);
    let b = _mm256_hadd_epi32(v[2], v[3]);
    let ab = _mm256_hadd_epi32(a, b); // lanes: rows 0..4 of each 128-bit half
    _mm_add_epi32(_mm256_castsi256_si128(ab), _mm256_extracti128_si256::<1>(ab))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2(w: &[i16], d: &[f32], act: &[BlockQ8K], k: f32, sums: &mut [f32; TILE_ROWS]) {
    let kv = _mm_set1_ps(k);
    for (b, a) in act.iter().enumerate() {
        let da = _mm_set1_ps(a.d());
        for quad in 0..TILE_ROWS / 4 {
            let base = w.as_ptr().add((TILE_ROWS * b + 4 * quad) * QK_K);
            let mut acc = [_mm256_setzero_si256(); 4];
            for i in 0..QK_K / 16 {
                let q = _mm256_cvtepi8_epi16(_mm_loadu_si128(a.qs.as_ptr().add(16 * i).cast()));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(base.add(r * QK_K + 16 * i).cast());
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(x, q));
                }
            }
            let dots = _mm_cvtepi32_ps(hsum4(acc));
            let scales = _mm_mul_ps(_mm_loadu_ps(d.as_ptr().add(TILE_ROWS * b + 4 * quad)), da);
            let at = sums.as_mut_ptr().add(4 * quad);
            _mm_storeu_ps(at, _mm_add_ps(_mm_loadu_ps(at), _mm_mul_ps(scales, _mm_mul_ps(dots, kv))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::iq_grid::gemm::expand_scalar;
    use crate::quant::iq_grid::gemm::gemm_type;
    use crate::quant::iq_grid::gemm::tests::{check_gemm, GRID_TYPES};
    use crate::quant::iq_grid::random_row;
    use crate::quant::Isa;

    #[test]
    fn the_avx2_expansion_equals_the_scalar_one() {
        if !Isa::Avx2.is_available() {
            return;
        }
        for ty in GRID_TYPES {
            let t = gemm_type(ty).unwrap();
            for seed in 0..8 {
                let block = random_row(ty, 1, seed);
                let (mut want, mut got) = ([0i16; QK_K], [0i16; QK_K]);
                let mut u = Unpacked::default();
                let d0 = expand_scalar(t, &block, &mut u, &mut want);
                let d1 = expand(t, &block, &mut u, &mut got);
                assert_eq!((d1.to_bits(), got), (d0.to_bits(), want), "{ty}, seed {seed}");
            }
        }
    }

    #[test]
    fn the_avx2_grid_gemm_gives_the_row_dot_bits() {
        if Isa::Avx2.is_available() {
            check_gemm(&GRID_TYPES, |ty| gemm(gemm_type(ty).unwrap()), "avx2");
        }
    }
}
