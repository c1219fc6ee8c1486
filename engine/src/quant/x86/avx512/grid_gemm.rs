//! AVX-512 VNNI lane kernels of the grid i-quants' many-row product (`x86::grid_lanes`): 16
//! activation rows in the lanes of one vector, `vpdpbusd` of each weight row's 4 bytes
//! broadcast, Q2_K's min term by `vpdpwssd`.

use core::arch::x86_64::*;

use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::GridGemm;
use crate::quant::iq_grid::GridType;
use crate::quant::x86::grid_lanes::{self, band_scalars, Bands, LaneKernel, Tile, MIN_PAIRS};
use crate::quant::{GgmlType, QK_K};

/// Activation rows in one band (the lanes of a vector of i32).
const BAND: usize = 16;
/// Weight rows whose sums for one band are held in registers.
const ROWS: usize = 8;
/// Bytes of one band's block of interleaved activations.
pub(in crate::quant::x86) const BAND_BLOCK: usize = BAND * QK_K;

/// This tier's many-row product for `ty` (a grid i-quant, Q3_K or Q2_K).
pub(crate) fn gemm(ty: GgmlType) -> Option<GridGemm> {
    grid_lanes::gemm::<Vnni512>(ty)
}

pub(in crate::quant::x86) struct Vnni512;

impl LaneKernel for Vnni512 {
    const BAND: usize = BAND;
    const ROWS: usize = ROWS;

    /// The activation rows in bands (`GridActs::Bands`): each vector of a band's block gathered
    /// from the 16 rows' quants at one offset, biased by flipping the top bit.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn interleave(act: &[BlockQ8K], batch: usize, nb: usize) -> (Vec<u8>, Vec<f32>, Vec<i32>) {
        let count = batch.div_ceil(BAND);
        let mut q = vec![0u8; count * nb * BAND_BLOCK];
        let mut d = vec![0f32; count * nb * BAND];
        let mut pair_sums = vec![0i32; count * nb * MIN_PAIRS * BAND];
        let stride = nb * size_of::<BlockQ8K>();
        let offsets =
            _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(stride as i32));
        let bias = _mm512_set1_epi8(-128);
        for band in 0..count {
            let present = BAND.min(batch - band * BAND);
            let mask: __mmask16 = ((1u32 << present) - 1) as u16;
            for b in 0..nb {
                let first = &act[band * BAND * nb + b];
                for j in 0..present {
                    band_scalars(&act[(band * BAND + j) * nb + b], band * nb + b, j, BAND, &mut d, &mut pair_sums);
                }
                let out = q[(band * nb + b) * BAND_BLOCK..][..BAND_BLOCK].as_mut_ptr();
                for k4 in 0..QK_K / 4 {
                    // SAFETY: lane j reads 4 quants of row band · 16 + j, block b, only for rows present
                    // (the mask); `out` holds the band block's 64 vectors.
                    let v = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, offsets, first.qs.as_ptr().add(4 * k4).cast());
                    _mm512_storeu_si512(out.add(64 * k4).cast(), _mm512_xor_si512(v, bias));
                }
            }
        }
        (q, d, pair_sums)
    }

    /// [`LaneKernel::pass`] of this tier.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
        let mut acc: [__m512; ROWS] = core::array::from_fn(|r| _mm512_loadu_ps(sums[at(r)..][..BAND].as_ptr()));
        let kv = _mm512_set1_ps(k);
        for b in blocks {
            let a = bands.q[(band * nb + b) * BAND_BLOCK..][..BAND_BLOCK].as_ptr();
            let w = tile.w[(tile_rows * b + row0) * QK_K..][..ROWS * QK_K].as_ptr();
            let scales = &tile.scales[(tile_rows * b + row0) * tile.groups..][..ROWS * tile.groups];
            let whole = match t.scale_values {
                16 => block_sums::<16>(a, w, scales),
                _ => block_sums::<32>(a, w, scales),
            };
            let block = BandBlock::new(bands, band, b);
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = block.add_to(*acc, t, tile, tile_rows * b + row0 + r, whole[r], kv);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(sums[at(r)..][..BAND].as_mut_ptr(), *acc);
        }
    }
}

/// One band's block of the activations: its 16 rows' scales and (Q2_K) pair sums.
pub(in crate::quant::x86) struct BandBlock<'a> {
    d8: __m512,
    pair_sums: &'a [i32],
}

impl<'a> BandBlock<'a> {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    pub(in crate::quant::x86) fn new(bands: &'a Bands, band: usize, b: usize) -> Self {
        let slot = band * bands.nb + b;
        // SAFETY: the slice holds the 16 floats read.
        let d8 = unsafe { _mm512_loadu_ps(bands.d[slot * BAND..][..BAND].as_ptr()) };
        BandBlock { d8, pair_sums: &bands.pair_sums[slot * MIN_PAIRS * BAND..][..MIN_PAIRS * BAND] }
    }

    /// `acc` plus the block of tile entry `at` (weight row and block) whose biased sums are
    /// `whole` (`W` plus the entry's correction, per lane): `(d · d₈) · (W · k)`, and for Q2_K
    /// minus `(dmin · d₈) · Σ min · Σ q`, as the row dot adds its block.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    pub(in crate::quant::x86) fn add_to(&self, acc: __m512, t: &GridType, tile: &Tile, at: usize, whole: __m512i, kv: __m512) -> __m512 {
        let dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(whole, _mm512_set1_epi32(tile.correction[at])));
        let scales = _mm512_mul_ps(_mm512_set1_ps(tile.d[at]), self.d8);
        let block = _mm512_mul_ps(scales, _mm512_mul_ps(dots, kv));
        if t.mins {
            // SAFETY: the features are this function's.
            let mins = unsafe { min_sums(self.pair_sums, &tile.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS]) };
            let min_scales = _mm512_mul_ps(_mm512_set1_ps(tile.dmin[at]), self.d8);
            _mm512_add_ps(acc, _mm512_sub_ps(block, _mm512_mul_ps(min_scales, _mm512_cvtepi32_ps(mins))))
        } else {
            _mm512_add_ps(acc, block)
        }
    }
}

/// `Σ min · Σ q` over the 16 groups of 16 of one weight row's block (`min_pairs`, 8 pairs of
/// i16) against a band's pair sums (8 vectors of 16 lanes, two i16 each): exact i32 per lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn min_sums(pair_sums: &[i32], min_pairs: &[i32]) -> __m512i {
    let mut sum = _mm512_setzero_si512();
    for (p, &pair) in min_pairs.iter().enumerate() {
        let sums = _mm512_loadu_si512(pair_sums[p * BAND..][..BAND].as_ptr().cast());
        sum = _mm512_dpwssd_epi32(sum, sums, _mm512_set1_epi32(pair));
    }
    sum
}

/// One block of 8 weight rows (`w`: 256 bytes each, consecutive) against one band's block `a`:
/// per row, `Σ scale · Σ (q + 128) · w` in each lane, the scales per `SUB` values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn block_sums<const SUB: usize>(a: *const u8, w: *const i8, scales: &[i32]) -> [__m512i; ROWS] {
    let groups = QK_K / SUB;
    let mut whole = [_mm512_setzero_si512(); ROWS];
    for s in 0..groups {
        let mut raw = [_mm512_setzero_si512(); ROWS];
        for k4 in s * SUB / 4..(s + 1) * SUB / 4 {
            let q = _mm512_loadu_si512(a.add(64 * k4).cast());
            for (r, raw) in raw.iter_mut().enumerate() {
                let four = w.add(r * QK_K + 4 * k4).cast::<i32>().read_unaligned();
                *raw = _mm512_dpbusd_epi32(*raw, q, _mm512_set1_epi32(four));
            }
        }
        for (r, (whole, raw)) in whole.iter_mut().zip(raw).enumerate() {
            *whole = _mm512_add_epi32(*whole, _mm512_mullo_epi32(raw, _mm512_set1_epi32(scales[r * groups + s])));
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
    fn the_avx512_grid_gemm_gives_the_row_dot_bits() {
        if Isa::Avx512.is_available() {
            check_gemm(&[GRID_TYPES.as_slice(), &[GgmlType::Q2_K]].concat(), |ty| gemm(ty).unwrap(), "avx512");
        }
    }
}
