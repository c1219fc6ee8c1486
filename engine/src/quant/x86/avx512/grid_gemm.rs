//! AVX-512 tile kernel of the grid i-quants' many-row products (`quant::iq_grid::gemm`); the
//! expansion is the AVX2 tier's.
//!
//! Per block, each 32 of the activation row's quants are widened once into a vector of i16 and
//! taken by a `vpdpwssd` into each of the 16 tile rows' accumulators; the 16 accumulators are
//! reduced together into one vector of 16 exact sums (integer sums: any order gives the same),
//! and the block's float part is the scalar tile's `(d · d₈) · (W · k)`, lane per row.

use core::arch::x86_64::*;

use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::{GridGemm, TILE_ROWS};
use crate::quant::iq_grid::GridType;
use crate::quant::x86::avx2::grid_gemm::expand;
use crate::quant::QK_K;

const _: () = assert!(TILE_ROWS == 16, "one row per lane of a 16-lane vector");

/// This tier's many-row product for grid type `t`.
pub(crate) fn gemm(t: &'static GridType) -> GridGemm {
    GridGemm { ty: t, expand, tile }
}

/// Checks the lengths and runs the AVX-512 tile kernel.
fn tile(w: &[i16], d: &[f32], act: &[BlockQ8K], k: f32, sums: &mut [f32; TILE_ROWS]) {
    assert!(w.len() >= act.len() * TILE_ROWS * QK_K && d.len() >= act.len() * TILE_ROWS, "grid tile: {} blocks", act.len());
    // SAFETY: this tier's kernels are handed out only after AVX-512 F/BW/VL/DQ/VNNI (and AVX2)
    // were detected; the assert covers every value and scale of the tile read.
    unsafe { tile_avx512(w, d, act, k, sums) }
}

/// Pairs of vectors → one whose 128-bit lanes hold partial sums of both, interleaved.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn fold32(a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn fold64(a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
}

/// Sums across 128-bit lanes: lanes (0, 1) and (2, 3) of `a`, then of `b`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn fold128(a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(_mm512_shuffle_i32x4::<0b10_00_10_00>(a, b), _mm512_shuffle_i32x4::<0b11_01_11_01>(a, b))
}

/// Lane `r` of the result: the sum of the lanes of `v[r]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn reduce16(v: &[__m512i; 16]) -> __m512i {
    // after fold32 and fold64, 128-bit lane l of q[i] holds rows 4i..4i + 4's sums over lane l
    let p: [__m512i; 8] = core::array::from_fn(|i| fold32(v[2 * i], v[2 * i + 1]));
    let q: [__m512i; 4] = core::array::from_fn(|i| fold64(p[2 * i], p[2 * i + 1]));
    // then rows 0..8 as (lanes 0+1, 2+3 of q0, of q1), rows 8..16 likewise
    let lo = fold128(q[0], q[1]);
    let hi = fold128(q[2], q[3]);
    fold128(lo, hi)
}

/// `acc + Σ pairs of a · b` as one `vpdpwssd`: written out because the compiler otherwise splits
/// it into `vpmaddwd` and `vpaddd` (twice the instructions in the loop that bounds the kernel).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: register operands only; the caller's target features include AVX512-VNNI.
    unsafe {
        core::arch::asm!("vpdpwssd {acc}, {a}, {b}", acc = inout(zmm_reg) acc, a = in(zmm_reg) a, b = in(zmm_reg) b, options(pure, nomem, nostack));
    }
    acc
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_avx512(w: &[i16], d: &[f32], act: &[BlockQ8K], k: f32, sums: &mut [f32; TILE_ROWS]) {
    let kv = _mm512_set1_ps(k);
    let mut total = _mm512_loadu_ps(sums.as_ptr());
    for (b, a) in act.iter().enumerate() {
        let base = w.as_ptr().add(TILE_ROWS * b * QK_K);
        // one widened vector of quants at a time against the 16 rows' accumulators (registers)
        let mut acc = [_mm512_setzero_si512(); TILE_ROWS];
        for i in 0..QK_K / 32 {
            let q = _mm512_cvtepi8_epi16(_mm256_loadu_si256(a.qs.as_ptr().add(32 * i).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = dpwssd(*acc, _mm512_loadu_si512(base.add(r * QK_K + 32 * i).cast()), q);
            }
        }
        let dots = _mm512_cvtepi32_ps(reduce16(&acc));
        let scales = _mm512_mul_ps(_mm512_loadu_ps(d.as_ptr().add(TILE_ROWS * b)), _mm512_set1_ps(a.d()));
        total = _mm512_add_ps(total, _mm512_mul_ps(scales, _mm512_mul_ps(dots, kv)));
    }
    _mm512_storeu_ps(sums.as_mut_ptr(), total);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::iq_grid::gemm::tests::check_gemm;
    use crate::quant::iq_grid::grid_type;
    use crate::quant::Isa;

    #[test]
    fn the_avx512_grid_gemm_gives_the_row_dot_bits() {
        if Isa::Avx512.is_available() {
            check_gemm(|ty| gemm(grid_type(ty).unwrap()), "avx512");
        }
    }
}
