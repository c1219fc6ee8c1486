//! Checks of the panel layouts and kernels: every tier bit-equal to the reference, the
//! reference equal to the row kernels' products up to float order, and extreme quants.

use super::layout::{repack, PanelLayout, PANEL_ROWS};
use super::prepared::{prepare_row, prepared_row_bytes};
use super::{kernel_on, scalar, TILE_ROWS};
use crate::quant::{ops_for, GgmlType, Isa};

pub(crate) const TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::MXFP4,
    GgmlType::IQ4_NL,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

fn rng(seed: u32) -> impl FnMut() -> f32 {
    let mut s = seed;
    move || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    }
}

/// A random matrix of `ty` (row-major GGUF bytes) and `batch` prepared activation rows, with
/// the quantized activation rows they came from.
pub(crate) struct Case {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub weights: Vec<u8>,
    pub acts: Vec<u8>,
    pub prepared: Vec<u8>,
}

impl Case {
    pub fn new(ty: GgmlType, rows: usize, blocks: usize, batch: usize, seed: u32) -> Case {
        let l = PanelLayout::of(ty).unwrap();
        let cols = blocks * l.block_values;
        let mut next = rng(seed);
        let ops = ops_for(ty, Isa::Scalar).unwrap();
        let rb = ty.row_bytes(cols).unwrap();
        let mut weights = vec![0u8; rows * rb];
        for dst in weights.chunks_exact_mut(rb) {
            let vals: Vec<f32> = (0..cols).map(|_| next()).collect();
            (ops.quantize.expect("a type with a quantizer"))(&vals, dst);
        }
        let act_ops = ops_for(l.act_ty, Isa::Scalar).unwrap();
        let ab = l.act_ty.row_bytes(cols).unwrap();
        let mut acts = vec![0u8; batch * ab];
        for dst in acts.chunks_exact_mut(ab) {
            let vals: Vec<f32> = (0..cols).map(|_| next() * 3.0).collect();
            (act_ops.quantize_activations)(&vals, dst);
        }
        let pb = prepared_row_bytes(l.act_ty, blocks);
        let mut prepared = vec![0u8; batch * pb];
        for (src, dst) in acts.chunks_exact(ab).zip(prepared.chunks_exact_mut(pb)) {
            prepare_row(l.act_ty, src, dst);
        }
        Case { ty, rows, cols, weights, acts, prepared }
    }

    /// `rows` weight rows of `blocks` blocks of `ty`, every byte `wbyte`, times `batch`
    /// activation rows of `abyte` in every place.
    pub fn uniform(ty: GgmlType, rows: usize, blocks: usize, batch: usize, wbyte: u8, abyte: i8) -> Case {
        let l = PanelLayout::of(ty).unwrap();
        let cols = blocks * l.block_values;
        let weights = vec![wbyte; rows * ty.row_bytes(cols).unwrap()];
        let ab = l.act_ty.row_bytes(cols).unwrap();
        let mut acts = vec![0u8; batch * ab];
        let vals = vec![abyte as f32; cols];
        let pb = prepared_row_bytes(l.act_ty, blocks);
        let mut prepared = vec![0u8; batch * pb];
        for (src, dst) in acts.chunks_exact_mut(ab).zip(prepared.chunks_exact_mut(pb)) {
            (ops_for(l.act_ty, Isa::Scalar).unwrap().quantize_activations)(&vals, src);
            prepare_row(l.act_ty, src, dst);
        }
        Case { ty, rows, cols, weights, acts, prepared }
    }

    /// Every block's scales 1.0 (f16 0x3C00) where its type keeps them: `d`, and the K-quants'
    /// `dmin`; MXFP4's exponent 128 (its doubled levels' scale 1.0).
    pub fn set_unit_scales(&mut self) {
        let bb = self.ty.type_size();
        for blk in self.weights.chunks_exact_mut(bb) {
            if self.ty == GgmlType::MXFP4 {
                blk[0] = 128;
                continue;
            }
            let d_at = match self.ty {
                GgmlType::Q6_K => bb - 2,
                GgmlType::Q4_K | GgmlType::Q5_K => {
                    blk[2..4].copy_from_slice(&[0x00, 0x3C]);
                    0
                }
                _ => 0,
            };
            blk[d_at..d_at + 2].copy_from_slice(&[0x00, 0x3C]);
        }
    }

    /// Every output (activation row x weight row) by `kernel`, tile by tile of `tile` rows.
    pub fn run(&self, kernel: super::PanelKernelFn, tile: usize) -> Vec<f32> {
        let panels = repack(self.ty, self.rows, self.cols, &self.weights).unwrap();
        let batch = self.prepared.len() / prepared_row_bytes(panels.layout.act_ty, panels.blocks);
        let stride = self.prepared.len() / batch;
        let mut out = vec![0.0f32; batch * self.rows];
        for p in 0..panels.panel_count() {
            for b0 in (0..batch).step_by(tile) {
                let n = tile.min(batch - b0);
                let mut tiles = vec![[0.0f32; PANEL_ROWS]; n];
                kernel(panels.panel(p), panels.blocks, &self.prepared[b0 * stride..], stride, &mut tiles);
                for (i, t) in tiles.iter().enumerate() {
                    for (r, &v) in t.iter().enumerate() {
                        if p * PANEL_ROWS + r < self.rows {
                            out[(b0 + i) * self.rows + p * PANEL_ROWS + r] = v;
                        }
                    }
                }
            }
        }
        out
    }
}

impl Case {
    /// Every output by `pair` on panels `p, p + 1` (and `ty`'s kernel on tier `isa` for a lone last
    /// panel), tile by tile of `tile` rows.
    pub fn run_pairs(&self, pair: super::PanelPairKernelFn, ty: GgmlType, isa: Isa, tile: usize) -> Vec<f32> {
        let panels = repack(self.ty, self.rows, self.cols, &self.weights).unwrap();
        let batch = self.prepared.len() / prepared_row_bytes(panels.layout.act_ty, panels.blocks);
        let stride = self.prepared.len() / batch;
        let mut out = vec![0.0f32; batch * self.rows];
        let mut put = |b: usize, p: usize, t: &[f32]| {
            for (r, &v) in t.iter().enumerate().filter(|(r, _)| p * PANEL_ROWS + r < self.rows) {
                out[b * self.rows + p * PANEL_ROWS + r] = v;
            }
        };
        let mut p = 0;
        while p < panels.panel_count() {
            for b0 in (0..batch).step_by(tile) {
                let n = tile.min(batch - b0);
                if p + 1 < panels.panel_count() {
                    let mut tiles = vec![[0.0f32; 2 * PANEL_ROWS]; n];
                    pair(panels.panel_pair(p), panels.blocks, &self.prepared[b0 * stride..], stride, &mut tiles);
                    tiles.iter().enumerate().for_each(|(i, t)| put(b0 + i, p, t));
                } else {
                    let mut tiles = vec![[0.0f32; PANEL_ROWS]; n];
                    kernel_on(ty, isa).unwrap()(panels.panel(p), panels.blocks, &self.prepared[b0 * stride..], stride, &mut tiles);
                    tiles.iter().enumerate().for_each(|(i, t)| put(b0 + i, p, t));
                }
            }
            p += if p + 1 < panels.panel_count() { 2 } else { 1 };
        }
        out
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every type's kernel on `isa` gives the reference's bits, for every tile height, with a
/// partial last panel and one or several blocks.
pub(crate) fn check_tier(isa: Isa) {
    if !isa.is_available() {
        return;
    }
    for ty in TYPES {
        let kernel = kernel_on(ty, isa).unwrap();
        for (rows, blocks, batch) in [(8, 1, 1), (13, 3, 7), (21, 2, 4)] {
            let case = Case::new(ty, rows, blocks, batch, 7 + rows as u32);
            let want = case.run(scalar::kernel(ty).unwrap(), 1);
            for tile in 1..=TILE_ROWS {
                assert_eq!(bits(&case.run(kernel, tile)), bits(&want), "{ty} on {isa}: {rows}x{blocks} blocks, tile {tile}");
            }
        }
    }
}

/// Every pair kernel of `isa` gives the reference's bits for both of its panels, for every tile
/// height, with a partial second panel and a lone last panel.
pub(crate) fn check_pairs(isa: Isa) {
    if !isa.is_available() {
        return;
    }
    for ty in TYPES {
        let Some(pair) = super::pair_kernel_on(ty, isa) else { continue };
        for (rows, blocks, batch) in [(16, 1, 1), (13, 3, 7), (29, 2, 4), (40, 2, 3)] {
            let case = Case::new(ty, rows, blocks, batch, 11 + rows as u32);
            let want = case.run(scalar::kernel(ty).unwrap(), 1);
            for tile in 1..=TILE_ROWS {
                assert_eq!(
                    bits(&case.run_pairs(pair, ty, isa, tile)),
                    bits(&want),
                    "{ty} pairs on {isa}: {rows}x{blocks} blocks, tile {tile}"
                );
            }
        }
    }
}

/// The reference computes each row's dot product: equal to the row kernel's (another float
/// order) within float rounding.
#[test]
fn the_reference_is_the_row_dot_product() {
    for ty in TYPES {
        let case = Case::new(ty, 11, 3, 3, 5);
        let got = case.run(scalar::kernel(ty).unwrap(), 1);
        let ops = ops_for(ty, Isa::Scalar).unwrap();
        let (rb, ab) = (ty.row_bytes(case.cols).unwrap(), ops.vec_dot_type.row_bytes(case.cols).unwrap());
        for (b, a) in case.acts.chunks_exact(ab).enumerate() {
            for (r, w) in case.weights.chunks_exact(rb).enumerate() {
                let want = (ops.vec_dot)(w, a);
                let g = got[b * case.rows + r];
                assert!((g - want).abs() <= 1e-5 * want.abs().max(1.0), "{ty} act {b} row {r}: {g} vs {want}");
            }
        }
    }
}

/// Quants at the ends of their ranges times activations of ±127: the integer sums stay exact
/// on every tier (no i16 saturation), and match the row kernel.
#[test]
fn extreme_quants_stay_exact() {
    for ty in TYPES {
        for (wbyte, abyte) in [(0xFFu8, 127i8), (0xFF, -127), (0x00, 127), (0x80, -127), (0x7F, 127)] {
            let mut case = Case::uniform(ty, 9, 2, 1, wbyte, abyte);
            case.set_unit_scales();
            let rb = ty.row_bytes(case.cols).unwrap();
            let want = case.run(scalar::kernel(ty).unwrap(), 1);
            let ops = ops_for(ty, Isa::Scalar).unwrap();
            for (r, w) in case.weights.chunks_exact(rb).enumerate() {
                let v = (ops.vec_dot)(w, &case.acts);
                assert!((want[r] - v).abs() <= 1e-5 * v.abs().max(1.0), "{ty} {wbyte:#x} x {abyte}: {} vs {v}", want[r]);
            }
            for isa in Isa::available() {
                assert_eq!(bits(&case.run(kernel_on(ty, isa).unwrap(), 1)), bits(&want), "{ty} {wbyte:#x} x {abyte} on {isa}");
                if let Some(pair) = super::pair_kernel_on(ty, isa) {
                    assert_eq!(bits(&case.run_pairs(pair, ty, isa, 1)), bits(&want), "{ty} {wbyte:#x} x {abyte} pairs on {isa}");
                }
            }
        }
    }
}

#[test]
fn repacking_refuses_what_it_cannot_hold() {
    assert!(repack(GgmlType::Q4_1, 8, 32, &[0; 160]).is_none(), "no Q4_1 panels");
    assert!(repack(GgmlType::Q8_0, 2, 32, &[0; 34]).is_none(), "wrong byte count");
}

/// Q8_0 panels keep ggml's order: bit-equal to the row kernel (llama.cpp's chain of 8 lanes).
#[test]
fn q8_0_panels_keep_the_row_kernel_bits() {
    for blocks in [1, 3, 5, 28] {
        let case = Case::new(GgmlType::Q8_0, 11, blocks, 3, 9);
        let got = case.run(scalar::kernel(GgmlType::Q8_0).unwrap(), 1);
        let ops = ops_for(GgmlType::Q8_0, Isa::Scalar).unwrap();
        let (rb, ab) = (GgmlType::Q8_0.row_bytes(case.cols).unwrap(), case.acts.len() / 3);
        for (b, a) in case.acts.chunks_exact(ab).enumerate() {
            for (r, w) in case.weights.chunks_exact(rb).enumerate() {
                assert_eq!(got[b * case.rows + r].to_bits(), (ops.vec_dot)(w, a).to_bits(), "{blocks} blocks, act {b} row {r}");
            }
        }
    }
}

/// MXFP4's exponents across their range, subnormal scales (0 and 1) included: every tier's
/// scales are the reference's `2^(e - 128)`.
#[test]
fn mxfp4_exponents_give_the_reference_scales_on_every_tier() {
    // one exponent per weight row, so that the subnormal rows' sums are not lost beside others
    let exponents = [0u8, 1, 2, 3, 100, 127, 128, 129, 200];
    let mut case = Case::new(GgmlType::MXFP4, exponents.len(), 9, 3, 3);
    let row_bytes = case.weights.len() / exponents.len();
    for (row, &e) in case.weights.chunks_exact_mut(row_bytes).zip(&exponents) {
        row.chunks_exact_mut(GgmlType::MXFP4.type_size()).for_each(|blk| blk[0] = e);
    }
    let want = case.run(scalar::kernel(GgmlType::MXFP4).unwrap(), 1);
    assert!(want.iter().all(|v| v.is_finite() && *v != 0.0), "{want:?}");
    for isa in Isa::available() {
        for tile in 1..=TILE_ROWS {
            assert_eq!(bits(&case.run(kernel_on(GgmlType::MXFP4, isa).unwrap(), tile)), bits(&want), "{isa}, tile {tile}");
            if let Some(pair) = super::pair_kernel_on(GgmlType::MXFP4, isa) {
                assert_eq!(bits(&case.run_pairs(pair, GgmlType::MXFP4, isa, tile)), bits(&want), "{isa} pairs, tile {tile}");
            }
        }
    }
}
