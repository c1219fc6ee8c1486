//! Many activation rows against a grid i-quant matrix (or a Q3_K or Q2_K one, in the same
//! unpacked form: `gemm_type`): each weight row is unpacked once per call instead of once per
//! activation row, and the activations are prepared once per input of a product call
//! ([`GridActs`]).
//!
//! The scalar tier (`run_tiles`) expands a tile of [`TILE_ROWS`] weight rows into 16-bit
//! integers, one per value: the signed grid value times its group's scale (`scale · v`; IQ1:
//! `scale · (8 v + shift)`, the shift term folded in), and each block's `d` as f32. Its tile
//! kernel then takes every activation row of Q8_K blocks against the tile: per block and
//! weight row the exact integer sum `W = Σ w · q` (below 2³¹: 256 · 31 · 62 · 127), and the row's
//! running sum gets `(d · d₈) · (W · k)`, `k` = 1, or 1/8 for IQ1. `W · k` equals the row dot's
//! `sumi + shifted / 8` exactly (both are an integer below 2²⁴ over 8), so every output has the
//! bits of `GridType::vec_dot` (and of Q3_K's reference row dot): the
//! same sums in the same order, whatever the batch. The AVX2 and AVX-512 tiers
//! (`x86::grid_lanes`) compute the same `W` with activation rows in vector lanes, and Q2_K's
//! min term beside it.
//!
//! The activation rows are taken `CHUNK_BLOCKS` blocks at a time against the whole tile, so
//! that the tile's part they read (16 rows · 4 blocks · 512 bytes) stays in the L1 cache.

use super::{GridType, Unpacked, GROUP, SHIFT};
use crate::quant::blocks::BlockQ8K;
use crate::quant::{GgmlType, QK_K};

/// Weight rows of one expanded tile.
pub const TILE_ROWS: usize = 16;

/// Blocks of the tile an activation row is taken against at a time.
const CHUNK_BLOCKS: usize = 4;

/// Expands one super-block of `t` into `out` (256 values, see the module docs) and returns its
/// `d`; `u` is scratch.
pub(crate) type ExpandFn = fn(t: &GridType, block: &[u8], u: &mut Unpacked, out: &mut [i16]) -> f32;

/// Adds to `sums` (one per tile row) the blocks of one activation row `act` against the tile's
/// expanded values `w` (block-major: block `b`, row `r` at `(TILE_ROWS · b + r) · 256`) and
/// scales `d` (`TILE_ROWS · b + r`), each block as `(d · d₈) · (W · k)`, in block order.
pub(crate) type GridTileFn = fn(w: &[i16], d: &[f32], act: &[BlockQ8K], k: f32, sums: &mut [f32; TILE_ROWS]);

/// The unpacked form of `ty` that the many-row products take: the grid i-quants', Q3_K's
/// (`k_quants::q3_k::GRID`), whose values and signed scales fit it, and Q2_K's, with its mins.
pub(crate) fn gemm_type(ty: GgmlType) -> Option<&'static GridType> {
    match ty {
        GgmlType::Q2_K => Some(&crate::quant::k_quants::q2_k::GRID),
        GgmlType::Q3_K => Some(&crate::quant::k_quants::q3_k::GRID),
        _ => super::grid_type(ty),
    }
}

/// The `gemm_type`s the expanded tiles take (the scalar tier): all but Q2_K, whose mins only
/// the lane products have.
pub(crate) fn tile_type(ty: GgmlType) -> Option<&'static GridType> {
    gemm_type(ty).filter(|t| !t.mins)
}

/// The activation rows as a tier's product reads them.
pub enum GridActs<'a> {
    /// Rows of Q8_K blocks, as given.
    Rows(&'a [u8]),
    /// Rows in bands of `band` (`x86::grid_lanes`: 16 for AVX-512, 8 for AVX2): block `b` of band
    /// `i` at `(i · nb + b) · 256 · band` in `q`, its 64 vectors of 4 quants (biased to unsigned)
    /// of each of the band's rows; `d[(i · nb + b) · band + j]` the block's scale of the band's
    /// row `j`, and `pair_sums[((i · nb + b) · 8 + p) · band + j]` the sums of its quants
    /// `32 p .. 32 p + 16` and `32 p + 16 .. 32 p + 32` as the low and high i16 (for Q2_K's mins).
    Bands { band: usize, q: Vec<u8>, d: Vec<f32>, pair_sums: Vec<i32> },
}

/// Prepares `batch` rows of Q8_K blocks for a tier's product.
pub(crate) type GridPrepareFn = for<'a> fn(acts: &'a [u8], batch: usize) -> GridActs<'a>;

/// `outs[a][i] = row i of w · activation row a` for grid type `t`: the `rows` weight rows in
/// `w`, the `outs.len()` activation rows in `acts`.
pub(crate) type GridRunFn = fn(t: &GridType, w: &[u8], rows: usize, acts: &GridActs, outs: &mut [&mut [f32]]);

/// One tier's many-row product for one grid type.
#[derive(Clone, Copy)]
pub struct GridGemm {
    pub(crate) ty: &'static GridType,
    pub(crate) prepare: GridPrepareFn,
    pub(crate) run: GridRunFn,
}

impl GridGemm {
    /// The `batch` Q8_K activation rows in `acts` prepared for [`run`](Self::run), once for every
    /// group of weight rows taken against them.
    pub fn prepare<'a>(&self, acts: &'a [u8], batch: usize) -> GridActs<'a> {
        (self.prepare)(acts, batch)
    }

    /// `outs[a][i] = row i of w · activation row a`, for the `rows` weight rows in `w` and the
    /// `outs.len()` activation rows prepared in `acts`.
    pub fn run(&self, w: &[u8], rows: usize, acts: &GridActs, outs: &mut [&mut [f32]]) {
        if rows > 0 {
            (self.run)(self.ty, w, rows, acts, outs)
        }
    }
}

/// The rows as given: the preparation of the tiers that read Q8_K blocks.
pub(crate) fn as_rows(acts: &[u8], _batch: usize) -> GridActs<'_> {
    GridActs::Rows(acts)
}

/// The blocks per row of `w` (`rows` rows of grid type `t`), after checking that they fit
/// `act_blocks` Q8_K blocks of `batch` activation rows.
pub(crate) fn check_shapes(t: &GridType, w: &[u8], rows: usize, act_blocks: usize, batch: usize) -> usize {
    let row_bytes = w.len() / rows;
    let nb = row_bytes / t.block_bytes;
    assert!(
        row_bytes * rows == w.len() && nb * t.block_bytes == row_bytes && act_blocks == nb * batch,
        "grid gemm: {} weight bytes in {rows} rows of {}-byte blocks against {act_blocks} Q8_K blocks for {batch} rows",
        w.len(),
        t.block_bytes,
    );
    nb
}

/// The many-row product through expanded tiles: each tile of [`TILE_ROWS`] weight rows expanded
/// by `expand`, then every activation row taken against it by `tile` (see the module docs).
pub(crate) fn run_tiles(expand: ExpandFn, tile: GridTileFn, t: &GridType, w: &[u8], rows: usize, acts: &GridActs, outs: &mut [&mut [f32]]) {
    let GridActs::Rows(acts) = acts else { panic!("grid gemm: activations prepared for another tier") };
    assert!(!t.mins, "the expanded tiles have no mins");
    let act: &[BlockQ8K] = bytemuck::cast_slice(acts);
    let nb = check_shapes(t, w, rows, act.len(), outs.len());
    let row_bytes = nb * t.block_bytes;
    let k = if t.shifted { SHIFT } else { 1.0 };
    let mut values = vec![0i16; TILE_ROWS * nb * QK_K];
    let mut d = vec![0f32; TILE_ROWS * nb];
    let mut sums = vec![[0f32; TILE_ROWS]; outs.len()];
    let mut u = Unpacked::default();
    for first in (0..rows).step_by(TILE_ROWS) {
        let n = TILE_ROWS.min(rows - first);
        for b in 0..nb {
            for r in 0..TILE_ROWS {
                let at = TILE_ROWS * b + r;
                let out = &mut values[at * QK_K..(at + 1) * QK_K];
                d[at] = if r < n {
                    let block = &w[(first + r) * row_bytes + b * t.block_bytes..][..t.block_bytes];
                    expand(t, block, &mut u, out)
                } else {
                    out.fill(0); // rows past the matrix: zeros, outputs dropped
                    0.0
                };
            }
        }
        sums.iter_mut().for_each(|s| *s = [0.0; TILE_ROWS]);
        for start in (0..nb).step_by(CHUNK_BLOCKS) {
            let end = nb.min(start + CHUNK_BLOCKS);
            let (w_chunk, d_chunk) = (&values[TILE_ROWS * start * QK_K..TILE_ROWS * end * QK_K], &d[TILE_ROWS * start..TILE_ROWS * end]);
            for (a, s) in sums.iter_mut().enumerate() {
                tile(w_chunk, d_chunk, &act[a * nb + start..a * nb + end], k, s);
            }
        }
        for (out, s) in outs.iter_mut().zip(&sums) {
            for (o, &v) in out[first..first + n].iter_mut().zip(s) {
                *o = t.c * v;
            }
        }
    }
}

/// The scalar expansion: the reference the tiers' expansions are tested against.
pub(crate) fn expand_scalar(t: &GridType, block: &[u8], u: &mut Unpacked, out: &mut [i16]) -> f32 {
    (t.unpack)(block, u);
    for (g, ws) in out[..QK_K].chunks_exact_mut(GROUP).enumerate() {
        let scale = i16::from(u.scales[g]);
        for (j, w) in ws.iter_mut().enumerate() {
            let v = i16::from(u.value(g, j));
            *w = if t.shifted { scale * (8 * v + i16::from(u.shifts[g])) } else { scale * v };
        }
    }
    u.d
}

/// The scalar tile kernel.
pub(crate) fn tile_scalar(w: &[i16], d: &[f32], act: &[BlockQ8K], k: f32, sums: &mut [f32; TILE_ROWS]) {
    for (b, a) in act.iter().enumerate() {
        for (r, sum) in sums.iter_mut().enumerate() {
            let at = TILE_ROWS * b + r;
            let dot: i32 = w[at * QK_K..(at + 1) * QK_K].iter().zip(&a.qs).map(|(&x, &q)| i32::from(x) * i32::from(q)).sum();
            *sum += d[at] * a.d() * (dot as f32 * k);
        }
    }
}

/// The scalar tier's many-row product of grid type `t`.
pub(crate) fn scalar_gemm(t: &'static GridType) -> GridGemm {
    GridGemm { ty: t, prepare: as_rows, run: |t, w, rows, acts, outs| run_tiles(expand_scalar, tile_scalar, t, w, rows, acts, outs) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::quant::iq_grid::random_row;
    use crate::quant::{ops_for, GgmlType, Isa};

    /// The types with a many-row product: the grid i-quants and Q3_K.
    pub(crate) const GRID_TYPES: [GgmlType; 8] = [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::Q3_K,
    ];

    /// `batch` rows of `nb` Q8_K blocks from a seeded pattern, some of them at ±127.
    pub(crate) fn q8k_rows(nb: usize, batch: usize, seed: u64) -> Vec<u8> {
        let x: Vec<f32> = (0..batch * nb * QK_K).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 - 500.0) / 77.0).collect();
        let mut act = vec![0u8; batch * nb * 292];
        let quantize = ops_for(GgmlType::Q8_K, Isa::Scalar).unwrap().quantize.unwrap();
        for (x, a) in x.chunks_exact(nb * QK_K).zip(act.chunks_exact_mut(nb * 292)) {
            quantize(x, a);
        }
        act
    }

    /// Every output of `gemm` has the bits of the scalar row dot, for row counts that leave a
    /// partial tile and block counts that leave a partial chunk.
    pub(crate) fn check_gemm(types: &[GgmlType], gemm: impl Fn(GgmlType) -> GridGemm, tier: &str) {
        for &ty in types {
            let t = gemm_type(ty).unwrap();
            let dot = ops_for(ty, Isa::Scalar).unwrap().vec_dot;
            for (rows, nb, batch) in [(1, 1, 1), (16, 4, 3), (21, 5, 2), (40, 9, 5), (9, 2, 17), (24, 3, 33)] {
                let w: Vec<u8> = (0..rows).flat_map(|r| random_row(ty, nb, 7 * r as u64 + nb as u64)).collect();
                let acts = q8k_rows(nb, batch, rows as u64);
                let mut outs = vec![vec![f32::NAN; rows]; batch];
                let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                let gemm = gemm(ty);
                gemm.run(&w, rows, &gemm.prepare(&acts, batch), &mut out_refs);
                let row_bytes = nb * t.block_bytes;
                for (a, out) in outs.iter().enumerate() {
                    for (r, got) in out.iter().enumerate() {
                        let want = dot(&w[r * row_bytes..(r + 1) * row_bytes], &acts[a * nb * 292..(a + 1) * nb * 292]);
                        assert_eq!(got.to_bits(), want.to_bits(), "{tier} {ty}: row {r}, activation row {a} of {rows}x{nb}x{batch}");
                    }
                }
            }
        }
    }

    /// Multiply-accumulates per second of each tier's many-row product, one thread, a 1536 x 1536
    /// matrix against 256 activation rows: `cargo test --release -p engine --lib
    /// grid_gemm_throughput -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn grid_gemm_throughput() {
        let (rows, nb, batch) = (1536, 6, 256);
        for ty in [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ1_M] {
            let w: Vec<u8> = (0..rows).flat_map(|r| random_row(ty, nb, r as u64)).collect();
            let acts = q8k_rows(nb, batch, 1);
            let mut line = format!("{ty:>8}:");
            for isa in Isa::available() {
                let Some(gemm) = crate::quant::grid_gemm_on(ty, isa) else { continue };
                let mut outs = vec![vec![0f32; rows]; batch];
                let start = std::time::Instant::now();
                let mut runs = 0;
                while start.elapsed().as_secs_f64() < 0.5 {
                    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                    gemm.run(&w, rows, &gemm.prepare(&acts, batch), &mut refs);
                    runs += 1;
                }
                let macs = (runs * rows * nb * QK_K * batch) as f64;
                line += &format!("  {isa} {:6.1} GMAC/s", macs / start.elapsed().as_secs_f64() / 1e9);
            }
            eprintln!("{line}");
        }
    }

    #[test]
    fn the_scalar_grid_gemm_gives_the_row_dot_bits() {
        check_gemm(&GRID_TYPES, |ty| scalar_gemm(tile_type(ty).unwrap()), "scalar");
    }

    /// Extreme blocks: every bit set but those of `d` (the largest scales and grid indices, all signs
    /// set) against activations at ±127: the integer sums stay exact on every tier.
    #[test]
    fn the_largest_blocks_keep_the_row_dot_bits() {
        for ty in GRID_TYPES.into_iter().chain([GgmlType::Q2_K]) {
            let t = gemm_type(ty).unwrap();
            let mut w = random_row(ty, 2, 3);
            for b in w.chunks_exact_mut(t.block_bytes) {
                if ty == GgmlType::Q2_K {
                    b[..80].fill(0xff); // the two f16 are last
                } else if ty == GgmlType::Q3_K {
                    b[..108].fill(0xff); // the f16 is last
                } else if ty == GgmlType::IQ1_M {
                    // the f16 is in the top nibbles of the scale words at 48..56
                    b[..48].fill(0xff);
                    for at in (48..56).step_by(2) {
                        b[at] = 0xff;
                        b[at + 1] |= 0x0f;
                    }
                } else {
                    b[2..].fill(0xff);
                }
            }
            let x: Vec<f32> = (0..2 * QK_K).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
            let mut acts = vec![0u8; 2 * 292];
            (ops_for(GgmlType::Q8_K, Isa::Scalar).unwrap().quantize.unwrap())(&x, &mut acts);
            let want = (ops_for(ty, Isa::Scalar).unwrap().vec_dot)(&w, &acts);
            assert!(want.is_finite() && want != 0.0, "{ty}: {want}");
            for isa in Isa::ALL.into_iter().filter(|isa| isa.is_available()) {
                let Some(gemm) = crate::quant::grid_gemm_on(ty, isa) else { continue };
                let mut outs = [[f32::NAN; 1]; 2];
                let acts2 = [acts.as_slice(), acts.as_slice()].concat();
                let [a, b] = &mut outs;
                gemm.run(&w, 1, &gemm.prepare(&acts2, 2), &mut [&mut a[..], &mut b[..]]);
                assert_eq!(outs.map(|o| o[0].to_bits()), [want.to_bits(); 2], "{ty} on {isa:?}: {outs:?} vs {want}");
            }
        }
    }
}
