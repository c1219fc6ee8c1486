//! Many activation rows against a grid i-quant matrix: each weight row is unpacked once per call
//! instead of once per activation row.
//!
//! A tile of [`TILE_ROWS`] weight rows is expanded into 16-bit integers, one per value: the
//! signed grid value times its group's odd scale (`scale · v`; IQ1: `scale · (8 v + shift)`,
//! the shift term folded in), and each block's `d` as f32. A tier's tile kernel then takes
//! every activation row of Q8_K blocks against the tile: per block and weight row the exact
//! integer sum `W = Σ w · q` (below 2³¹: 256 · 31 · 62 · 127), and the row's running sum gets
//! `(d · d₈) · (W · k)`, `k` = 1, or 1/8 for IQ1. `W · k` equals the row dot's
//! `sumi + shifted / 8` exactly (both are an integer below 2²⁴ over 8), so every output has the
//! bits of [`GridType::vec_dot`](super::GridType::vec_dot): the same sums in the same order,
//! whatever the batch.
//!
//! The activation rows are taken [`CHUNK_BLOCKS`] blocks at a time against the whole tile, so
//! that the tile's part they read (16 rows · 4 blocks · 512 bytes) stays in the L1 cache.

use super::{GridType, Unpacked, GROUP, SHIFT};
use crate::quant::blocks::BlockQ8K;
use crate::quant::QK_K;

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

/// One tier's many-row product for one grid type.
#[derive(Clone, Copy)]
pub struct GridGemm {
    pub(crate) ty: &'static GridType,
    pub(crate) expand: ExpandFn,
    pub(crate) tile: GridTileFn,
}

impl GridGemm {
    /// `outs[a][i] = row i of w · activation row a`, for the `rows` weight rows in `w` and the
    /// `outs.len()` Q8_K activation rows in `acts`.
    pub fn run(&self, w: &[u8], rows: usize, acts: &[u8], outs: &mut [&mut [f32]]) {
        let t = self.ty;
        if rows == 0 {
            return;
        }
        let row_bytes = w.len() / rows;
        let nb = row_bytes / t.block_bytes;
        let act: &[BlockQ8K] = bytemuck::cast_slice(acts);
        assert!(
            row_bytes * rows == w.len() && nb * t.block_bytes == row_bytes && act.len() == nb * outs.len(),
            "grid gemm: {} weight bytes in {rows} rows of {}-byte blocks against {} Q8_K blocks for {} rows",
            w.len(),
            t.block_bytes,
            act.len(),
            outs.len()
        );
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
                        (self.expand)(t, block, &mut u, out)
                    } else {
                        out.fill(0); // rows past the matrix: zeros, outputs dropped
                        0.0
                    };
                }
            }
            sums.iter_mut().for_each(|s| *s = [0.0; TILE_ROWS]);
            for start in (0..nb).step_by(CHUNK_BLOCKS) {
                let end = nb.min(start + CHUNK_BLOCKS);
                let (w_chunk, d_chunk) =
                    (&values[TILE_ROWS * start * QK_K..TILE_ROWS * end * QK_K], &d[TILE_ROWS * start..TILE_ROWS * end]);
                for (a, s) in sums.iter_mut().enumerate() {
                    (self.tile)(w_chunk, d_chunk, &act[a * nb + start..a * nb + end], k, s);
                }
            }
            for (out, s) in outs.iter_mut().zip(&sums) {
                for (o, &v) in out[first..first + n].iter_mut().zip(s) {
                    *o = t.c * v;
                }
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
    GridGemm { ty: t, expand: expand_scalar, tile: tile_scalar }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::quant::iq_grid::{grid_type, random_row};
    use crate::quant::{ops_for, GgmlType, Isa};

    pub(crate) const GRID_TYPES: [GgmlType; 7] =
        [GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M];

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
    pub(crate) fn check_gemm(gemm: impl Fn(GgmlType) -> GridGemm, tier: &str) {
        for ty in GRID_TYPES {
            let t = grid_type(ty).unwrap();
            let dot = ops_for(ty, Isa::Scalar).unwrap().vec_dot;
            for (rows, nb, batch) in [(1, 1, 1), (16, 4, 3), (21, 5, 2), (40, 9, 5)] {
                let w: Vec<u8> = (0..rows).flat_map(|r| random_row(ty, nb, 7 * r as u64 + nb as u64)).collect();
                let acts = q8k_rows(nb, batch, rows as u64);
                let mut outs = vec![vec![f32::NAN; rows]; batch];
                let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                gemm(ty).run(&w, rows, &acts, &mut out_refs);
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

    #[test]
    fn the_scalar_grid_gemm_gives_the_row_dot_bits() {
        check_gemm(|ty| scalar_gemm(grid_type(ty).unwrap()), "scalar");
    }

    /// Extreme blocks: every bit set but those of `d` (the largest scales and grid indices, all signs
    /// set) against activations at ±127: the integer sums stay exact.
    #[test]
    fn the_largest_blocks_keep_the_row_dot_bits() {
        for ty in GRID_TYPES {
            let t = grid_type(ty).unwrap();
            let mut w = random_row(ty, 2, 3);
            for b in w.chunks_exact_mut(t.block_bytes) {
                if ty == GgmlType::IQ1_M {
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
            let mut out = [0f32; 1];
            scalar_gemm(t).run(&w, 1, &acts, &mut [&mut out[..]]);
            assert_eq!(out[0].to_bits(), want.to_bits(), "{ty}: {} vs {want}", out[0]);
            assert!(want.is_finite() && want != 0.0, "{ty}: {want}");
        }
    }
}
