//! AVX2 lane kernels of the grid i-quants' many-row product (`x86::grid_lanes`), Q2_K's and
//! Q3_K's too: 8 activation rows in the lanes of one vector; per 4 quants of each lane's row,
//! `vpmaddubsw` of the biased quants and the weight row's 4 bytes broadcast (pairs of products
//! in i16: at most 2 · 255 · 62, so never saturated), then `vpmaddwd` by the group's scale as
//! i16, which is `Σ scale · (q + 128) · w` in i32 without a multiply of its own. Q2_K's min term
//! is `vpmaddwd` of the activations' pair sums by two mins.

use core::arch::x86_64::*;

use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::GridGemm;
use crate::quant::iq_grid::GridType;
use crate::quant::x86::grid_lanes::{self, band_scalars, Bands, LaneKernel, Tile, MIN_PAIRS};
use crate::quant::{GgmlType, QK_K};

/// Activation rows in one band (the lanes of a vector of i32).
const BAND: usize = 8;
/// Weight rows whose sums for one band are held in registers (16 vector registers: 4 integer
/// sums, 4 running float sums, the quants and the temporaries).
const ROWS: usize = 4;
/// Bytes of one band's block of interleaved activations.
const BAND_BLOCK: usize = BAND * QK_K;

/// This tier's many-row product for `ty` (a grid i-quant, Q3_K or Q2_K).
pub(crate) fn gemm(ty: GgmlType) -> Option<GridGemm> {
    grid_lanes::gemm::<Avx2Lanes>(ty)
}

struct Avx2Lanes;

impl LaneKernel for Avx2Lanes {
    const BAND: usize = BAND;
    const ROWS: usize = ROWS;

    /// The activation rows in bands (`GridActs::Bands`): each vector of a band's block gathered
    /// from the 8 rows' quants at one offset, biased by flipping the top bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn interleave(act: &[BlockQ8K], batch: usize, nb: usize) -> (Vec<u8>, Vec<f32>, Vec<i32>) {
        let count = batch.div_ceil(BAND);
        let mut q = vec![0u8; count * nb * BAND_BLOCK];
        let mut d = vec![0f32; count * nb * BAND];
        let mut pair_sums = vec![0i32; count * nb * MIN_PAIRS * BAND];
        let stride = (nb * size_of::<BlockQ8K>()) as i32;
        let offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
        let bias = _mm256_set1_epi8(-128);
        for band in 0..count {
            let present = BAND.min(batch - band * BAND);
            // lanes of the rows present: all bits set
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(present as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            for b in 0..nb {
                let first = &act[band * BAND * nb + b];
                for j in 0..present {
                    band_scalars(&act[(band * BAND + j) * nb + b], band * nb + b, j, BAND, &mut d, &mut pair_sums);
                }
                let out = q[(band * nb + b) * BAND_BLOCK..][..BAND_BLOCK].as_mut_ptr();
                for k4 in 0..QK_K / 4 {
                    // SAFETY: lane j reads 4 quants of row band · 8 + j, block b, only for rows present
                    // (the mask); `out` holds the band block's 64 vectors.
                    let from = first.qs.as_ptr().add(4 * k4).cast::<i32>();
                    let v = _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), from, offsets, mask);
                    _mm256_storeu_si256(out.add(32 * k4).cast(), _mm256_xor_si256(v, bias));
                }
            }
        }
        (q, d, pair_sums)
    }

    /// [`LaneKernel::pass`] of this tier.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pass(
        t: &GridType,
        tile: &Tile,
        bands: &Bands,
        band: usize,
        row0: usize,
        blocks: core::ops::Range<usize>,
        k: f32,
        sums: &mut [f32],
        at: &dyn Fn(usize) -> usize,
    ) {
        let (nb, tile_rows) = (bands.nb, tile.rows);
        let mut acc: [__m256; ROWS] = core::array::from_fn(|r| _mm256_loadu_ps(sums[at(r)..][..BAND].as_ptr()));
        let kv = _mm256_set1_ps(k);
        for b in blocks {
            let a = bands.q[(band * nb + b) * BAND_BLOCK..][..BAND_BLOCK].as_ptr();
            let w = tile.w[(tile_rows * b + row0) * QK_K..][..ROWS * QK_K].as_ptr();
            let scales = &tile.scales[(tile_rows * b + row0) * tile.groups..][..ROWS * tile.groups];
            let whole = match t.scale_values {
                16 => block_sums::<16>(a, w, scales),
                _ => block_sums::<32>(a, w, scales),
            };
            let d8 = _mm256_loadu_ps(bands.d[(band * nb + b) * BAND..][..BAND].as_ptr());
            let pair_sums = &bands.pair_sums[(band * nb + b) * MIN_PAIRS * BAND..][..MIN_PAIRS * BAND];
            for (r, acc) in acc.iter_mut().enumerate() {
                let at = tile_rows * b + row0 + r;
                let dots = _mm256_cvtepi32_ps(_mm256_sub_epi32(whole[r], _mm256_set1_epi32(tile.correction[at])));
                let scales = _mm256_mul_ps(_mm256_set1_ps(tile.d[at]), d8);
                let block = _mm256_mul_ps(scales, _mm256_mul_ps(dots, kv));
                *acc = if t.mins {
                    let mins = min_sums(pair_sums, &tile.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS]);
                    let min_scales = _mm256_mul_ps(_mm256_set1_ps(tile.dmin[at]), d8);
                    _mm256_add_ps(*acc, _mm256_sub_ps(block, _mm256_mul_ps(min_scales, _mm256_cvtepi32_ps(mins))))
                } else {
                    _mm256_add_ps(*acc, block)
                };
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(sums[at(r)..][..BAND].as_mut_ptr(), *acc);
        }
    }
}

/// `Σ min · Σ q` over the 16 groups of 16 of one weight row's block (`min_pairs`, 8 pairs of
/// i16) against a band's pair sums (8 vectors of 8 lanes, two i16 each): exact i32 per lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn min_sums(pair_sums: &[i32], min_pairs: &[i32]) -> __m256i {
    let mut sum = _mm256_setzero_si256();
    for (p, &pair) in min_pairs.iter().enumerate() {
        let sums = _mm256_loadu_si256(pair_sums[p * BAND..][..BAND].as_ptr().cast());
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(sums, _mm256_set1_epi32(pair)));
    }
    sum
}

/// One block of 4 weight rows (`w`: 256 bytes each, consecutive) against one band's block `a`:
/// per row, `Σ scale · Σ (q + 128) · w` in each lane, the scales per `SUB` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_sums<const SUB: usize>(a: *const u8, w: *const i8, scales: &[i32]) -> [__m256i; ROWS] {
    let groups = QK_K / SUB;
    let mut whole = [_mm256_setzero_si256(); ROWS];
    for s in 0..groups {
        // each row's scale in every i16 lane (scales are below 2⁸)
        let scale: [__m256i; ROWS] = core::array::from_fn(|r| _mm256_set1_epi16(scales[r * groups + s] as i16));
        for k4 in s * SUB / 4..(s + 1) * SUB / 4 {
            let q = _mm256_loadu_si256(a.add(32 * k4).cast());
            for (r, whole) in whole.iter_mut().enumerate() {
                let four = w.add(r * QK_K + 4 * k4).cast::<i32>().read_unaligned();
                let pairs = _mm256_maddubs_epi16(q, _mm256_set1_epi32(four));
                *whole = _mm256_add_epi32(*whole, _mm256_madd_epi16(pairs, scale[r]));
            }
        }
    }
    whole
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::iq_grid::gemm::tests::{check_gemm, GRID_TYPES};
    use crate::quant::GgmlType;
    use crate::quant::Isa;

    #[test]
    fn the_avx2_grid_gemm_gives_the_row_dot_bits() {
        if Isa::Avx2.is_available() {
            check_gemm(&[GRID_TYPES.as_slice(), &[GgmlType::Q2_K]].concat(), |ty| gemm(ty).unwrap(), "avx2");
        }
    }
}
