//! AVX2 products of float weights (F32, F16, BF16) with many activation rows, each output the
//! bits of this tier's row dot (`float.rs`), through the chain order of `quant::float_gemm`.
//!
//! A tile is 6 weight rows by 16 activation rows: per step of a chain, two loads of 8 activation
//! rows' values and six broadcast weights feed 12 fused multiply-adds into 12 accumulators (the
//! tile's 96 outputs' values of that chain), where the row dot's tile needs a load per 1.2 of
//! them. Each chain's sums leave the registers once; the 32 chains of every output are then
//! added in the row dot's order, 8 outputs to a vector.

use core::arch::x86_64::*;

use super::legacy::{load_ps, store_ps};

use crate::quant::float_gemm::{put_tile, ChainLayout, PackedActs, WeightPanels, GEMM_ROWS};
use crate::quant::GgmlType;

/// Weight rows one kernel tile covers (broadcast one at a time).
const GEMM_PANEL: usize = 6;
/// Lanes of the row dot's accumulators, and its chains (4 accumulators).
const LANES: usize = 8;
const CHAINS: usize = 4 * LANES;

crate::quant::float_gemm::float_gemm_entries!(LANES);

/// The product of `rows` weight rows of type `ty` (`w`, row after row) with every packed
/// activation row: the rows widened into chain-ordered panels of 6 once per call, then block
/// after block of activation groups passes over them.
fn gemm(ty: GgmlType, w: &[u8], rows: usize, acts: &PackedActs, outs: &mut [&mut [f32]]) {
    let widen = super::float::kernels(ty).expect("a float type").dequantize;
    let panels = WeightPanels::new(ty, w, rows, acts, outs, LANES, GEMM_PANEL, widen);
    let layout = acts.layout;
    let block = panels.act_block(1);
    let mut tile = [[0.0f32; GEMM_ROWS]; GEMM_PANEL];
    for g0 in (0..acts.groups()).step_by(block) {
        for (r0, live, panel) in panels.panels() {
            for g in g0..(g0 + block).min(acts.groups()) {
                // SAFETY: the CPU has AVX2 and FMA (this tier is handed out only then); the
                // panel and the group hold `total_steps` steps of 6 and 16 values, which the
                // chains' offsets and lengths stay within (`ChainLayout`).
                unsafe { tile_of_chains(&layout, panel, acts.group(g), &mut tile) };
                put_tile(outs, g, r0, live, &tile);
            }
        }
    }
}

/// One tile: `out[r][c]` = weight row `r` of `panel` dotted with activation row `c` of `group`,
/// each chain a fused multiply-add chain in registers, the chains summed as the row dot sums
/// them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_of_chains(layout: &ChainLayout, panel: &[f32], group: &[f32], out: &mut [[f32; GEMM_ROWS]; GEMM_PANEL]) {
    debug_assert!(panel.len() >= layout.total_steps() * GEMM_PANEL && group.len() >= layout.total_steps() * GEMM_ROWS);
    // each chain's sums: [chain][weight row][two vectors of 8 activation rows]
    let mut sums = [[[_mm256_setzero_ps(); 2]; GEMM_PANEL]; CHAINS];
    for (q, chain) in sums.iter_mut().enumerate() {
        let (first, steps) = (layout.offset(q), layout.steps(q));
        let mut w = panel.as_ptr().add(first * GEMM_PANEL);
        let mut a = group.as_ptr().add(first * GEMM_ROWS);
        let mut acc = [[_mm256_setzero_ps(); 2]; GEMM_PANEL];
        for _ in 0..steps {
            let (a0, a1) = (load_ps(a.cast()), load_ps(a.add(8).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                let b = _mm256_broadcast_ss(&*w.add(r));
                acc[0] = _mm256_fmadd_ps(b, a0, acc[0]);
                acc[1] = _mm256_fmadd_ps(b, a1, acc[1]);
            }
            w = w.add(GEMM_PANEL);
            a = a.add(GEMM_ROWS);
        }
        *chain = acc;
    }
    // the row dot's reduction, per output: lane l of (acc0 + acc1) + (acc2 + acc3), then
    // ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), as `hsum256`
    for (r, out_row) in out.iter_mut().enumerate() {
        for (h, dst) in out_row.chunks_exact_mut(8).enumerate() {
            let lane: [__m256; 8] = core::array::from_fn(|l| {
                let s = |k: usize| sums[8 * k + l][r][h];
                _mm256_add_ps(_mm256_add_ps(s(0), s(1)), _mm256_add_ps(s(2), s(3)))
            });
            let even = _mm256_add_ps(_mm256_add_ps(lane[0], lane[4]), _mm256_add_ps(lane[2], lane[6]));
            let odd = _mm256_add_ps(_mm256_add_ps(lane[1], lane[5]), _mm256_add_ps(lane[3], lane[7]));
            store_ps(dst.as_mut_ptr(), _mm256_add_ps(even, odd));
        }
    }
}
