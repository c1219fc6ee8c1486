//! The many-row product of the grid i-quants (`quant::iq_grid::gemm`) with activation rows in the
//! lanes of a vector and each weight row's bytes broadcast, so that no sum is reduced across
//! lanes: the driver, the weight expansion and the activations' layout, over a tier's
//! [`LaneKernel`] (AVX-512 VNNI: 16 rows in a band, `vpdpbusd`; AVX2: 8 rows, `vpmaddubsw` and
//! `vpmaddwd`).
//!
//! - Weights: a tile of `2 · ROWS` rows is expanded block by block into signed bytes `w` (the
//!   grid value with its sign; IQ1: `8 v + shift`), an i32 scale per `scale_values` values, the
//!   block's `d`, and its correction `128 · Σ scale · Σ w`; Q2_K's mins too, in pairs. The grid
//!   i-quants' blocks are read 32 values at a time by the row dot's block readers
//!   (`avx2::grid_blocks`); Q3_K's and Q2_K's go through their unpacked form.
//! - Activations ([`GridActs::Bands`], prepared once per product): the Q8_K quants biased to
//!   unsigned bytes `q + 128` and interleaved, `BAND` rows to a band: one vector holds 4
//!   consecutive quants of each of the band's rows.
//! - A kernel adds to each lane the 4 products `(q + 128) · w` of its row; per scale group the sum
//!   is multiplied by the group's scale, and over the block, minus the correction, this is
//!   `W = Σ scale · Σ w · q` exactly (every partial below 2³¹: 256 · 255 · 62 · 31), the integer
//!   of the scalar tile. The block's float part is the scalar tile's `(d · d₈) · (W · k)` lane by
//!   lane, and each running sum takes the blocks in order: every output has the row dot's bits.
//!   Q2_K's min term `Σ min · Σ q` per 16 values is one multiply-add of i16 pairs per two mins
//!   against the activations' pair sums, and its block adds `(d · d₈) · W - (dmin · d₈) · M` as
//!   its row dot.

use core::arch::x86_64::*;

use super::avx2::grid::signed_values;
use super::avx2::grid_blocks::{GridBlock, Iq1M, Iq1S, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs};
use super::common::hsum256_epi32;
use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::{check_shapes, gemm_type, GridActs, GridGemm, GridRunFn};
use crate::quant::iq_grid::{GridType, Unpacked, SHIFT};
use crate::quant::{GgmlType, QK_K};

/// Pairs of 16-value groups in a block (Q2_K's mins).
pub(super) const MIN_PAIRS: usize = QK_K / 32;

/// A tier's lane kernels.
pub(super) trait LaneKernel {
    /// Activation rows per band (the i32 lanes of one vector).
    const BAND: usize;
    /// Weight rows whose sums for one band a pass holds in registers.
    const ROWS: usize;
    /// Blocks taken per pass over the bands: the tile's part (16 rows · 4 · 256 bytes) and a
    /// band's stay in the L1 cache together.
    const CHUNK: usize = 4;

    /// The `batch` rows of `nb` blocks in bands: `(q, d, pair_sums)` as [`GridActs::Bands`]
    /// holds them, rows past the batch with quants 0 (biased: 128) and scales 0.
    ///
    /// # Safety
    /// Only where the tier's features were detected.
    unsafe fn interleave(act: &[BlockQ8K], batch: usize, nb: usize) -> (Vec<u8>, Vec<f32>, Vec<i32>);

    /// Called once a tile is expanded, before its passes (the AMX tier builds its weight planes
    /// and loads the tile unit's configuration here).
    ///
    /// # Safety
    /// Only where the tier's features were detected; [`LaneKernel::end`] follows.
    unsafe fn begin(_tile: &mut Tile) {}

    /// Called after a tile's last pass.
    ///
    /// # Safety
    /// Only where the tier's features were detected, after [`LaneKernel::begin`].
    unsafe fn end() {}

    /// Blocks `blocks` of tile rows `row0 .. row0 + ROWS` against band `band`, added to those
    /// rows' sums (`sums[at(r) .. at(r) + BAND]` for row `row0 + r`), each block as
    /// `(d · d₈) · (W · k)` (Q2_K: minus its min term). The driver checks the rows, blocks,
    /// band and sums against the tile, the bands and `sums` before it calls a pass.
    ///
    /// # Safety
    /// Only where the tier's features were detected.
    #[allow(clippy::too_many_arguments)]
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
    );
}

/// The activations in bands ([`GridActs::Bands`]).
pub(super) struct Bands<'a> {
    pub q: &'a [u8],
    pub d: &'a [f32],
    pub pair_sums: &'a [i32],
    /// Blocks per row.
    pub nb: usize,
}

/// One expanded tile of `rows` weight rows: block-major, block `b`, row `r` at `rows · b + r`.
pub(super) struct Tile {
    pub rows: usize,
    pub w: Vec<i8>,
    pub scales: Vec<i32>,
    pub correction: Vec<i32>,
    pub d: Vec<f32>,
    /// Q2_K: `dmin`, and its 16 mins per block as 8 pairs of i16 (low: the first of two).
    pub dmin: Vec<f32>,
    pub min_pairs: Vec<i32>,
    /// Scales per block.
    pub groups: usize,
    /// The AMX tier's weight planes (`amx::grid`); empty on the others.
    pub planes: Vec<i8>,
}

/// The many-row product of `ty` (a grid i-quant, Q3_K or Q2_K) on the tier of `L`: the grid
/// i-quants' weights expanded by their block readers, Q3_K's and Q2_K's from their unpacked form.
pub(super) fn gemm<L: LaneKernel>(ty: GgmlType) -> Option<GridGemm> {
    let t = gemm_type(ty)?;
    let run: GridRunFn = match ty {
        GgmlType::IQ2_XXS => run::<L, Read<Iq2Xxs, 66>>,
        GgmlType::IQ2_XS => run::<L, Read<Iq2Xs, 74>>,
        GgmlType::IQ2_S => run::<L, Read<Iq2S, 82>>,
        GgmlType::IQ3_XXS => run::<L, Read<Iq3Xxs, 98>>,
        GgmlType::IQ3_S => run::<L, Read<Iq3S, 110>>,
        GgmlType::IQ1_S => run::<L, Read<Iq1S, 50>>,
        GgmlType::IQ1_M => run::<L, Read<Iq1M, 56>>,
        _ => run::<L, FromUnpacked>,
    };
    Some(GridGemm { ty: t, prepare: prepare::<L>, run })
}

/// How a weight block becomes a tile entry.
trait Expand {
    /// Expands `block` of grid type `t` into the tile's entry `at`; `u` is scratch.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    unsafe fn expand(t: &GridType, block: &[u8], u: &mut Unpacked, tile: &mut Tile, at: usize);
}

/// Through the type's unpacked form (`GridType::unpack`): Q3_K and Q2_K.
struct FromUnpacked;

impl Expand for FromUnpacked {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn expand(t: &GridType, block: &[u8], u: &mut Unpacked, tile: &mut Tile, at: usize) {
        expand_unpacked(t, block, u, tile, at)
    }
}

/// Straight from the block's bytes by its reader, 32 values at a time: the grid i-quants.
struct Read<B, const N: usize>(core::marker::PhantomData<B>);

impl<B: GridBlock<N>, const N: usize> Expand for Read<B, N> {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn expand(t: &GridType, block: &[u8], _u: &mut Unpacked, tile: &mut Tile, at: usize) {
        let block: &[u8; N] = block.try_into().expect("a block of the reader's size");
        let (values, scales) = (&mut tile.w[at * QK_K..][..QK_K], &mut tile.scales[at * tile.groups..][..tile.groups]);
        // a scale per 32 values, or one per 16
        let per_chunk = scales.len() / (QK_K / 32);
        let ones = _mm256_set1_epi8(1);
        let mut weighted = _mm256_setzero_si256(); // Σ scale · Σ w over each 4 values
        for c in 0..QK_K / 32 {
            let chunk = B::chunk(block, c);
            let v = chunk.signed_values(t.shifted);
            _mm256_storeu_si256(values[32 * c..][..32].as_mut_ptr().cast(), v);
            for (h, scale) in scales[per_chunk * c..][..per_chunk].iter_mut().enumerate() {
                *scale = i32::from(chunk.scale_pair[h]);
            }
            weighted = _mm256_add_epi32(weighted, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, v), chunk.scales));
        }
        tile.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS].fill(0);
        tile.correction[at] = 128 * hsum256_epi32(weighted);
        (tile.d[at], tile.dmin[at]) = (B::d(block), 0.0);
    }
}

/// The activations in bands of `L::BAND` rows.
pub(super) fn prepare<L: LaneKernel>(acts: &[u8], batch: usize) -> GridActs<'_> {
    let act: &[BlockQ8K] = bytemuck::cast_slice(acts);
    assert!(batch > 0 && act.len().is_multiple_of(batch), "grid activations: {} Q8_K blocks in {batch} rows", act.len());
    // SAFETY: a tier's grid products are handed out only after its features were detected.
    let (q, d, pair_sums) = unsafe { L::interleave(act, batch, act.len() / batch) };
    GridActs::Bands { band: L::BAND, q, d, pair_sums }
}

/// The many-row product of grid type `t` through the tier's lane kernels, its weights expanded
/// by `E`.
fn run<L: LaneKernel, E: Expand>(t: &GridType, w: &[u8], rows: usize, acts: &GridActs, outs: &mut [&mut [f32]]) {
    let GridActs::Bands { band, q, d, pair_sums } = acts else { panic!("grid gemm: activations prepared for another tier") };
    assert_eq!(*band, L::BAND, "grid gemm: activations in bands of another tier");
    let (batch, tile_rows) = (outs.len(), 2 * L::ROWS);
    let count = batch.div_ceil(L::BAND);
    let nb = check_shapes(t, w, rows, d.len() / L::BAND, count);
    let bands = Bands { q, d, pair_sums, nb };
    let row_bytes = nb * t.block_bytes;
    let groups = QK_K / t.scale_values;
    let mut tile = Tile {
        rows: tile_rows,
        w: vec![0; tile_rows * nb * QK_K],
        scales: vec![0; tile_rows * nb * groups],
        correction: vec![0; tile_rows * nb],
        d: vec![0.0; tile_rows * nb],
        dmin: vec![0.0; tile_rows * nb],
        min_pairs: vec![0; tile_rows * nb * MIN_PAIRS],
        groups,
        planes: Vec::new(),
    };
    // row r's sums for band i at (r · count + i) · BAND
    let mut sums = vec![0f32; tile_rows * count * L::BAND];
    let mut u = Unpacked::default();
    let k = if t.shifted { SHIFT } else { 1.0 };
    for first in (0..rows).step_by(tile_rows) {
        let n = tile_rows.min(rows - first);
        for b in 0..nb {
            for r in 0..tile_rows {
                let at = tile_rows * b + r;
                if r < n {
                    let block = &w[(first + r) * row_bytes + b * t.block_bytes..][..t.block_bytes];
                    // SAFETY: every tier with lane kernels has AVX2, FMA and F16C.
                    unsafe { E::expand(t, block, &mut u, &mut tile, at) };
                } else {
                    tile.clear(at); // rows past the matrix: zeros, outputs dropped
                }
            }
        }
        sums.fill(0.0);
        // SAFETY: as in `prepare`; `end` follows below.
        unsafe { L::begin(&mut tile) };
        for start in (0..nb).step_by(L::CHUNK) {
            let end = nb.min(start.saturating_add(L::CHUNK));
            for band in 0..count {
                for half in 0..n.div_ceil(L::ROWS) {
                    let at = |r: usize| ((half * L::ROWS + r) * count + band) * L::BAND;
                    // the ranges every tier's pass reads, checked here once for all of them
                    let (row0, blocks) = (half * L::ROWS, start..end);
                    assert!(
                        row0 + L::ROWS <= tile.rows && blocks.end <= nb && band < count,
                        "grid band pass: rows {row0}.., blocks {blocks:?} of {nb}"
                    );
                    assert!((0..L::ROWS).all(|r| at(r) + L::BAND <= sums.len()), "grid band pass: sums");
                    // SAFETY: as in `prepare`; the ranges were checked above (and the passes slice what
                    // they read).
                    unsafe { L::pass(t, &tile, &bands, band, row0, blocks, k, &mut sums, &at) };
                }
            }
        }
        // SAFETY: after `begin`.
        unsafe { L::end() };
        // each activation row's outputs for the tile are one run of memory: written in turn
        for (j, out) in outs.iter_mut().enumerate() {
            for (r, o) in out[first..first + n].iter_mut().enumerate() {
                *o = t.c * sums[(r * count + j / L::BAND) * L::BAND + j % L::BAND];
            }
        }
    }
}

impl Tile {
    /// Entry `at` of zeros.
    fn clear(&mut self, at: usize) {
        self.w[at * QK_K..][..QK_K].fill(0);
        self.scales[at * self.groups..][..self.groups].fill(0);
        self.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS].fill(0);
        (self.correction[at], self.d[at], self.dmin[at]) = (0, 0.0, 0.0);
    }
}

/// Expands `block` into the tile's entry `at` through its unpacked form.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn expand_unpacked(t: &GridType, block: &[u8], u: &mut Unpacked, tile: &mut Tile, at: usize) {
    let (values, scales) = (&mut tile.w[at * QK_K..][..QK_K], &mut tile.scales[at * tile.groups..][..tile.groups]);
    let min_pairs = &mut tile.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS];
    (t.unpack)(block, u);
    let per_scale = t.scale_values / 8;
    for (s, scale) in scales.iter_mut().enumerate() {
        *scale = i32::from(u.scales[s * per_scale]);
    }
    for (p, pair) in min_pairs.iter_mut().enumerate() {
        *pair = i32::from(u.mins[2 * p]) | i32::from(u.mins[2 * p + 1]) << 16;
    }
    let ones = _mm256_set1_epi8(1);
    let mut weighted = _mm256_setzero_si256(); // Σ scale · Σ w over each 4 values
    for c in 0..QK_K / 32 {
        let g = 4 * c;
        let mut v = signed_values(u, c);
        if t.shifted {
            // 8 v + shift: the shift by 3 in 16-bit lanes, the bits that crossed into the next
            // byte masked off
            let eight = _mm256_and_si256(_mm256_slli_epi16::<3>(v), _mm256_set1_epi8(0xf8u8 as i8));
            let shift = |k: usize| (u.shifts[g + k] as u8 as u64 * 0x0101_0101_0101_0101) as i64;
            v = _mm256_add_epi8(eight, _mm256_setr_epi64x(shift(0), shift(1), shift(2), shift(3)));
        }
        _mm256_storeu_si256(values.as_mut_ptr().add(32 * c).cast(), v);
        // each group's scale in the 4 i16 lanes of its 8 values' pair sums
        let scale = |k: usize| (i16::from(u.scales[g + k]) as u16 as u64 * 0x0001_0001_0001_0001) as i64;
        let group_scales = _mm256_setr_epi64x(scale(0), scale(1), scale(2), scale(3));
        weighted = _mm256_add_epi32(weighted, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, v), group_scales));
    }
    tile.correction[at] = 128 * hsum256_epi32(weighted);
    (tile.d[at], tile.dmin[at]) = (u.d, u.dmin);
}

/// Row `j` of a band's block `slot` (block `b` of band `i`: `i · nb + b`), bands of `band`
/// rows: its scale and its 8 pairs of 16-quant sums, written at their places in `d` and
/// `pair_sums` (the tiers' interleaves share this; the quants are theirs).
pub(super) fn band_scalars(row: &BlockQ8K, slot: usize, j: usize, band: usize, d: &mut [f32], pair_sums: &mut [i32]) {
    d[slot * band + j] = row.d();
    for p in 0..MIN_PAIRS {
        let pair = (row.bsum(2 * p) as u16 as u32) | (row.bsum(2 * p + 1) as u16 as u32) << 16;
        pair_sums[(slot * MIN_PAIRS + p) * band + j] = pair as i32;
    }
}
