//! AVX-512 VNNI many-row product of the grid i-quants (`quant::iq_grid::gemm`): 16 activation
//! rows in the lanes of one vector and each weight row's bytes broadcast, so that no sum is
//! reduced across lanes.
//!
//! - Weights: a tile of [`TILE`] rows is expanded block by block into signed bytes `w` (the grid
//!   value with its sign; IQ1: `8 v + shift`), an i32 scale per `scale_values` values, the
//!   block's `d`, and its correction `128 · Σ scale · Σ w`; Q2_K's mins too, in pairs.
//! - Activations ([`GridActs::Bands`], prepared once per product): the Q8_K quants biased to
//!   unsigned bytes `q + 128` and interleaved, 16 rows to a band: one 64-byte vector holds 4
//!   consecutive quants of each of the band's rows.
//! - `vpdpbusd` adds to each lane the 4 products `(q + 128) · w` of its row; per scale group
//!   the sum is multiplied by the group's scale, and over the block, minus the correction, this
//!   is `W = Σ scale · Σ w · q` exactly (every partial below 2³¹: 256 · 255 · 62 · 31), the integer
//!   of the scalar tile. The block's float part is the scalar tile's `(d · d₈) · (W · k)` lane by
//!   lane, and each running sum takes the blocks in order: every output has the row dot's bits.
//!   Q2_K's min term `Σ min · Σ q` per 16 values is one `vpdpwssd` per two mins against the
//!   activations' pair sums, and its block adds `(d · d₈) · W - (dmin · d₈) · M` as its row dot.

use core::arch::x86_64::*;

use crate::quant::blocks::BlockQ8K;
use crate::quant::iq_grid::gemm::{check_shapes, GridActs, GridGemm};
use crate::quant::iq_grid::{GridType, Unpacked, SHIFT};
use crate::quant::x86::avx2::grid::signed_values;
use crate::quant::x86::common::hsum256_epi32;
use crate::quant::QK_K;

/// Activation rows in one band (the lanes of a vector of i32).
const BAND: usize = 16;
/// Weight rows whose sums for one band are held in registers at a time.
const ROWS: usize = 8;
/// Weight rows expanded at a time.
const TILE: usize = 2 * ROWS;
/// Blocks taken per pass over the bands: the tile's part (16 rows · 4 · 256 bytes) and a band's
/// (4 · 4 KiB) stay in the L1 cache together.
const CHUNK: usize = 4;
/// Bytes of one band's block of interleaved activations.
const BAND_BLOCK: usize = BAND * QK_K;
/// Pairs of 16-value groups in a block (Q2_K's mins).
const MIN_PAIRS: usize = QK_K / 32;

/// This tier's many-row product for grid type `t`.
pub(crate) fn gemm(t: &'static GridType) -> GridGemm {
    GridGemm { ty: t, prepare, run }
}

/// The activations in bands ([`GridActs::Bands`]): rows past the batch have quants 0 (biased:
/// 128) and scales 0.
struct Bands<'a> {
    q: &'a [u8],
    d: &'a [f32],
    pair_sums: &'a [i32],
    count: usize,
}

/// One expanded tile: block-major, block `b`, row `r` at `TILE · b + r`.
struct Tile {
    w: Vec<i8>,
    scales: Vec<i32>,
    correction: Vec<i32>,
    d: Vec<f32>,
    /// Q2_K: `dmin`, and its 16 mins per block as 8 pairs of i16 (low: the first of two).
    dmin: Vec<f32>,
    min_pairs: Vec<i32>,
    /// Scales per block.
    groups: usize,
}

/// The activations in bands.
fn prepare(acts: &[u8], batch: usize) -> GridActs<'_> {
    let act: &[BlockQ8K] = bytemuck::cast_slice(acts);
    assert!(batch > 0 && act.len().is_multiple_of(batch), "grid activations: {} Q8_K blocks in {batch} rows", act.len());
    // SAFETY: this tier's kernels are handed out only after AVX-512 F/BW/VL/DQ/VNNI (and AVX2)
    // were detected.
    let (q, d, pair_sums) = unsafe { interleave(act, batch, act.len() / batch) };
    GridActs::Bands { q, d, pair_sums }
}

fn run(t: &GridType, w: &[u8], rows: usize, acts: &GridActs, outs: &mut [&mut [f32]]) {
    let GridActs::Bands { q, d, pair_sums } = acts else { panic!("grid gemm: activations prepared for another tier") };
    let batch = outs.len();
    let count = batch.div_ceil(BAND);
    let nb = check_shapes(t, w, rows, d.len() / BAND, count);
    let bands = Bands { q, d, pair_sums, count };
    let row_bytes = nb * t.block_bytes;
    let groups = QK_K / t.scale_values;
    let mut tile = Tile {
        w: vec![0; TILE * nb * QK_K],
        scales: vec![0; TILE * nb * groups],
        correction: vec![0; TILE * nb],
        d: vec![0.0; TILE * nb],
        dmin: vec![0.0; TILE * nb],
        min_pairs: vec![0; TILE * nb * MIN_PAIRS],
        groups,
    };
    let mut sums = vec![[0f32; BAND]; TILE * count];
    let mut u = Unpacked::default();
    let k = if t.shifted { SHIFT } else { 1.0 };
    for first in (0..rows).step_by(TILE) {
        let n = TILE.min(rows - first);
        for b in 0..nb {
            for r in 0..TILE {
                let block = (r < n).then(|| &w[(first + r) * row_bytes + b * t.block_bytes..][..t.block_bytes]);
                // SAFETY: as in `prepare`.
                unsafe { expand(t, block, &mut u, &mut tile, TILE * b + r) };
            }
        }
        sums.iter_mut().for_each(|s| *s = [0.0; BAND]);
        for start in (0..nb).step_by(CHUNK) {
            let end = nb.min(start + CHUNK);
            for band in 0..count {
                for half in 0..n.div_ceil(ROWS) {
                    let at = |r: usize| (half * ROWS + r) * count + band;
                    // SAFETY: as in `prepare`; `pass` checks the ranges it reads.
                    unsafe { pass(t, &tile, &bands, band, half * ROWS, start..end, nb, k, &mut sums, at) };
                }
            }
        }
        // each activation row's outputs for the tile are one run of memory: written in turn
        for (j, out) in outs.iter_mut().enumerate() {
            for (r, o) in out[first..first + n].iter_mut().enumerate() {
                *o = t.c * sums[r * count + j / BAND][j % BAND];
            }
        }
    }
}

/// The activation rows in bands ([`GridActs::Bands`]): each vector of a band's block gathered
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
                let row = &act[(band * BAND + j) * nb + b];
                d[(band * nb + b) * BAND + j] = row.d();
                for p in 0..MIN_PAIRS {
                    let pair = (row.bsum(2 * p) as u16 as u32) | (row.bsum(2 * p + 1) as u16 as u32) << 16;
                    pair_sums[((band * nb + b) * MIN_PAIRS + p) * BAND + j] = pair as i32;
                }
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

/// Expands `block` (none: a row past the matrix, zeros) into the tile's entry `at`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn expand(t: &GridType, block: Option<&[u8]>, u: &mut Unpacked, tile: &mut Tile, at: usize) {
    let (values, scales) = (&mut tile.w[at * QK_K..][..QK_K], &mut tile.scales[at * tile.groups..][..tile.groups]);
    let min_pairs = &mut tile.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS];
    let Some(block) = block else {
        values.fill(0);
        scales.fill(0);
        min_pairs.fill(0);
        (tile.correction[at], tile.d[at], tile.dmin[at]) = (0, 0.0, 0.0);
        return;
    };
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

/// Blocks `blocks` of tile rows `row0 .. row0 + 8` against band `band`, added to those rows' sums
/// (`sums[at(r)]` for row `row0 + r`), each block as `(d · d₈) · (W · k)`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pass(
    t: &GridType,
    tile: &Tile,
    bands: &Bands,
    band: usize,
    row0: usize,
    blocks: core::ops::Range<usize>,
    nb: usize,
    k: f32,
    sums: &mut [[f32; BAND]],
    at: impl Fn(usize) -> usize,
) {
    assert!(row0 + ROWS <= TILE && blocks.end <= nb && band < bands.count, "grid band pass: rows {row0}.., blocks {blocks:?} of {nb}");
    let mut acc: [__m512; ROWS] = core::array::from_fn(|r| _mm512_loadu_ps(sums[at(r)].as_ptr()));
    let kv = _mm512_set1_ps(k);
    for b in blocks {
        let a = bands.q[(band * nb + b) * BAND_BLOCK..][..BAND_BLOCK].as_ptr();
        let w = tile.w[(TILE * b + row0) * QK_K..][..ROWS * QK_K].as_ptr();
        let scales = &tile.scales[(TILE * b + row0) * tile.groups..][..ROWS * tile.groups];
        let whole = match t.scale_values {
            16 => block_sums::<16>(a, w, scales),
            _ => block_sums::<32>(a, w, scales),
        };
        let d8 = _mm512_loadu_ps(bands.d[(band * nb + b) * BAND..][..BAND].as_ptr());
        let pair_sums = &bands.pair_sums[(band * nb + b) * MIN_PAIRS * BAND..][..MIN_PAIRS * BAND];
        for (r, acc) in acc.iter_mut().enumerate() {
            let at = TILE * b + row0 + r;
            let dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(whole[r], _mm512_set1_epi32(tile.correction[at])));
            let scales = _mm512_mul_ps(_mm512_set1_ps(tile.d[at]), d8);
            let block = _mm512_mul_ps(scales, _mm512_mul_ps(dots, kv));
            *acc = if t.mins {
                let mins = min_sums(pair_sums, &tile.min_pairs[at * MIN_PAIRS..][..MIN_PAIRS]);
                let min_scales = _mm512_mul_ps(_mm512_set1_ps(tile.dmin[at]), d8);
                _mm512_add_ps(*acc, _mm512_sub_ps(block, _mm512_mul_ps(min_scales, _mm512_cvtepi32_ps(mins))))
            } else {
                _mm512_add_ps(*acc, block)
            };
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        _mm512_storeu_ps(sums[at(r)].as_mut_ptr(), *acc);
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
    use crate::quant::iq_grid::gemm::gemm_type;
    use crate::quant::iq_grid::gemm::tests::{check_gemm, GRID_TYPES};
    use crate::quant::GgmlType;
    use crate::quant::Isa;

    #[test]
    fn the_avx512_grid_gemm_gives_the_row_dot_bits() {
        if Isa::Avx512.is_available() {
            check_gemm(&[GRID_TYPES.as_slice(), &[GgmlType::Q2_K]].concat(), |ty| gemm(gemm_type(ty).unwrap()), "avx512");
        }
    }
}
