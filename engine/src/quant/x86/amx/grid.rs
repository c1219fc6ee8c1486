//! The grid i-quants' many-row product on the tile unit (and Q3_K's and Q2_K's, which share its
//! unpacked form): the AVX-512 lanes product (`x86::grid_lanes`, `avx512::grid_gemm`) with its
//! integer sums from `tdpbsud` instead of `vpdpbusd`.
//!
//! The group scales go into the weights, as in the K-quant tile GEMM (`k_quants`): once a tile
//! of 32 weight rows is expanded, each signed value times its group's scale (`w s`, |w s| at
//! most 62 · 31) is split into a high plane `w s >> 7` and a low plane `w s & 127` of signed
//! bytes, each weight row's block a 256-byte row of each. A block of 16 weight rows against a
//! band of 16 activation rows is then 4 steps of 64 values, each a `tdpbsud` of the high and of
//! the low plane (16 weight rows by 64 values, signed) by the band's 16 vectors of 4 biased
//! quants (the lanes product's own layout, unsigned), into two 16 x 16 sums:
//! `128 hi + lo = Σ w s (q + 128)`, exactly the biased `W` the lanes kernel builds (below 2³¹:
//! 256 · 1922 · 255). What follows, per weight row, is the AVX-512 kernel's float step
//! (`BandBlock::add_to`) over the same lanes: every output has the row dot's bits.

use core::arch::x86_64::*;

use super::{release, tile, TileConfig};
use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::GridGemm;
use crate::quant::iq_grid::GridType;
use crate::quant::x86::avx512::grid_gemm::{BandBlock, Vnni512, BAND_BLOCK};
use crate::quant::x86::grid_lanes::{self, Bands, LaneKernel, Tile, MIN_PAIRS};
use crate::quant::{GgmlType, QK_K};

/// Activation rows of a band: two of the AVX-512 tier's bands of 16, each the 16 columns of a
/// sums tile, so that a block's planes, once loaded, serve 32 rows.
const BAND: usize = 32;
/// Activation rows of one sums tile (the AVX-512 tier's band).
const HALF: usize = 16;
/// Weight rows of a pass: the 16 rows of a sums tile.
const ROWS: usize = 16;
/// Bytes of one tile entry's planes: the high row of 256 values, then the low one.
const ENTRY_PLANES: usize = 2 * QK_K;

/// This tier's many-row product for `ty` (a grid i-quant, Q3_K or Q2_K).
pub(crate) fn gemm(ty: GgmlType) -> Option<GridGemm> {
    grid_lanes::gemm::<TileUnit>(ty)
}

struct TileUnit;

impl LaneKernel for TileUnit {
    const BAND: usize = BAND;
    const ROWS: usize = ROWS;
    /// Every block of the rows in one pass: a pass's fixed costs (its running sums loaded and
    /// stored, the tile products' pipeline filled and drained) once per band and half, not once
    /// per 4 blocks (`grid_gemm_throughput`: 2-10% at 6 blocks per row, 8-13% at 35; on the
    /// AVX-512 tier the same gave 3%, on AVX2 -2% to +4%, and they keep the default).
    const CHUNK: usize = usize::MAX;

    /// The AVX-512 tier's bands of 16 rows, which are the tile unit's B operand as they are,
    /// in an even number: band `i` of 32 rows is its bands `2i` and `2i + 1` (a last one of
    /// quants 0, biased to 128, and scales 0 where the batch leaves it out).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn interleave(act: &[BlockQ8K], batch: usize, nb: usize) -> (Vec<u8>, Vec<f32>, Vec<i32>) {
        let (mut q, mut d, mut pair_sums) = Vnni512::interleave(act, batch, nb);
        if batch.div_ceil(HALF) % 2 == 1 {
            q.resize(q.len() + nb * BAND_BLOCK, 128);
            d.resize(d.len() + nb * HALF, 0.0);
            pair_sums.resize(pair_sums.len() + nb * MIN_PAIRS * HALF, 0);
        }
        (q, d, pair_sums)
    }

    /// Builds the tile's planes (entry `at` at `at · ENTRY_PLANES`) and loads the tile
    /// configuration.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn begin(tile: &mut Tile) {
        let entries = tile.d.len();
        tile.planes.resize(entries * ENTRY_PLANES, 0);
        let (per_scale, groups) = (tile.groups / (QK_K / 32), tile.groups);
        let low7 = _mm512_set1_epi16(127);
        for at in 0..entries {
            let (w, scales) = (&tile.w[at * QK_K..][..QK_K], &tile.scales[at * groups..][..groups]);
            let planes = tile.planes[at * ENTRY_PLANES..][..ENTRY_PLANES].as_mut_ptr();
            for c in 0..QK_K / 32 {
                // the 32 values' scales as i16 (one group of 32, or two of 16)
                let s = |g: usize| _mm256_set1_epi16(scales[g] as i16);
                let s = if per_scale == 1 {
                    _mm512_broadcast_i64x4(s(c))
                } else {
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(s(2 * c)), s(2 * c + 1))
                };
                let ws = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(w[32 * c..].as_ptr().cast())), s);
                _mm256_storeu_si256(planes.add(32 * c).cast(), _mm512_cvtepi16_epi8(_mm512_srai_epi16::<7>(ws)));
                _mm256_storeu_si256(planes.add(QK_K + 32 * c).cast(), _mm512_cvtepi16_epi8(_mm512_and_si512(ws, low7)));
            }
        }
        TileConfig::load(&tile::config());
    }

    unsafe fn end() {
        release();
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
        assert_eq!(tile.planes.len(), tile_rows * nb * ENTRY_PLANES, "grid tile pass: the planes of another tile");
        // row r's running sums: the first 16 activation rows' lanes, then the second's
        let mut acc: [[__m512; 2]; ROWS] =
            core::array::from_fn(|r| core::array::from_fn(|h| _mm512_loadu_ps(sums[at(r) + HALF * h..][..HALF].as_ptr())));
        let kv = _mm512_set1_ps(k);
        let mut out = Sums([[[0; 16]; 16]; 4]);
        for b in blocks {
            // the two bands of 16 rows: 2 · band and 2 · band + 1 in the 16-row layout
            let half_band = |h: usize| (2 * band + h) * nb + b;
            let a: [*const u8; 2] = core::array::from_fn(|h| bands.q[half_band(h) * BAND_BLOCK..][..BAND_BLOCK].as_ptr());
            let first = tile_rows * b + row0;
            let planes = tile.planes[first * ENTRY_PLANES..][..ROWS * ENTRY_PLANES].as_ptr();
            tile::grid_block(planes.cast(), a[0], a[1], out.0.as_mut_ptr().cast());
            for h in 0..2 {
                let block = BandBlock::new(bands, 2 * band + h, b);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let hi = _mm512_load_si512(out.0[2 * h][r].as_ptr().cast());
                    let lo = _mm512_load_si512(out.0[2 * h + 1][r].as_ptr().cast());
                    acc[h] = block.add_to(acc[h], t, tile, first + r, _mm512_add_epi32(_mm512_slli_epi32::<7>(hi), lo), kv);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (h, acc) in acc.iter().enumerate() {
                _mm512_storeu_ps(sums[at(r) + HALF * h..][..HALF].as_mut_ptr(), *acc);
            }
        }
    }
}

/// The high and the low plane's 16 x 16 sums of a block against the first 16 activation rows,
/// then against the second, as the tile unit stores them: row `r` a weight row, lane `j` an
/// activation row.
#[repr(C, align(64))]
struct Sums([[[i32; 16]; 16]; 4]);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::iq_grid::gemm::tests::{check_gemm, GRID_TYPES};
    use crate::quant::GgmlType;

    #[test]
    fn the_tile_unit_grid_gemm_gives_the_row_dot_bits() {
        if crate::quant::Isa::Amx.is_available() {
            check_gemm(&[GRID_TYPES.as_slice(), &[GgmlType::Q2_K]].concat(), |ty| gemm(ty).unwrap(), "amx");
        }
    }
}
