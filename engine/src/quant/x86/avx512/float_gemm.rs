//! AVX-512 products of float weights (F32, F16, BF16) with many activation rows, each output the
//! bits of this tier's row dot (`float.rs`: 4 accumulators of 16 lanes), through the chain order
//! of `quant::float_gemm`.
//!
//! A tile is 12 weight rows by 32 activation rows (two packed groups; a last lone group is 16):
//! per step of a chain, two loads of 16 activation rows' values and twelve broadcast weights
//! feed 24 fused multiply-adds into 24 accumulators, where the row dot's tile needs nearly a load
//! per multiply-add. Each chain's sums leave the registers once; the 64 chains of every output
//! are then added in the row dot's order: per lane `l`, `(c_l + c_16+l) + (c_32+l + c_48+l)`,
//! then the lanes as the tier's horizontal sum adds them (halves, quarters, pairs), 16 outputs
//! to a vector.

use core::arch::x86_64::*;

use crate::quant::float_gemm::{put_tile, ChainLayout, PackedActs, WeightPanels, GEMM_ROWS};
use crate::quant::GgmlType;

/// Weight rows one kernel tile covers (broadcast one at a time).
const GEMM_PANEL: usize = 12;
/// Lanes of the row dot's accumulators.
const LANES: usize = 16;

crate::quant::float_gemm::float_gemm_entries!(LANES);

/// The product of `rows` weight rows of type `ty` (`w`, row after row) with every packed
/// activation row: the rows widened into chain-ordered panels of 12 once per call, then block
/// after block of activation groups passes over them, two groups to a tile.
fn gemm(ty: GgmlType, w: &[u8], rows: usize, acts: &PackedActs, outs: &mut [&mut [f32]]) {
    let widen = super::float::kernels(ty).expect("a float type").dequantize;
    let panels = WeightPanels::new(ty, w, rows, acts, outs, LANES, GEMM_PANEL, widen);
    let layout = acts.layout;
    let block = panels.act_block(2);
    // made once per call: zeroing 30 KiB per tile cost a tenth of the tile's time
    let mut sums = vec![[[_zero(); 2]; GEMM_PANEL]; LANES + 4];
    let mut tile = [[[0.0f32; GEMM_ROWS]; GEMM_PANEL]; 2];
    for g0 in (0..acts.groups()).step_by(block) {
        let g_end = (g0 + block).min(acts.groups());
        for (r0, live, panel) in panels.panels() {
            let mut g = g0;
            while g < g_end {
                if g + 1 < g_end {
                    // SAFETY: the CPU has AVX-512 (this tier is handed out only then); the
                    // panel and the groups hold `total_steps` steps of 12 and 16 values, which
                    // the chains' offsets and lengths stay within (`ChainLayout`).
                    unsafe { tile_of_chains::<2>(&layout, panel, [acts.group(g), acts.group(g + 1)], &mut sums, &mut tile) };
                    put_tile(outs, g, r0, live, &tile[0]);
                    put_tile(outs, g + 1, r0, live, &tile[1]);
                    g += 2;
                } else {
                    // SAFETY: as above, one group.
                    unsafe { tile_of_chains::<1>(&layout, panel, [acts.group(g)], &mut sums, &mut tile) };
                    put_tile(outs, g, r0, live, &tile[0]);
                    g += 1;
                }
            }
        }
    }
}

/// A zero vector (for initialising the sums' storage).
fn _zero() -> __m512 {
    // SAFETY: all-zero bits are a valid __m512 (16 zero floats); no instruction runs.
    unsafe { core::mem::zeroed() }
}

/// Per weight row, the sums of one chain (or lane) for two groups of activation rows.
type ChainSums = [[__m512; 2]; GEMM_PANEL];

/// One tile: `out[j][r][c]` = weight row `r` of `panel` dotted with activation row `c` of
/// `groups[j]` (`j < G`), each chain a fused multiply-add chain in registers, the chains summed
/// as the row dot sums them; `sums` (`LANES + 4` entries) holds them on the way.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_of_chains<const G: usize>(
    layout: &ChainLayout,
    panel: &[f32],
    groups: [&[f32]; G],
    sums: &mut [ChainSums],
    out: &mut [[[f32; GEMM_ROWS]; GEMM_PANEL]; 2],
) {
    debug_assert!(panel.len() >= layout.total_steps() * GEMM_PANEL);
    debug_assert!(groups.iter().all(|g| g.len() >= layout.total_steps() * GEMM_ROWS));
    // per lane l: (c_l + c_16+l) + (c_32+l + c_48+l), [lane][weight row][group]; then the 4
    // chains of the lane being summed
    let (lanes, chains) = sums.split_at_mut(LANES);
    let chains: &mut [ChainSums; 4] = chains.try_into().expect("4 chains' sums");
    for (l, lane) in lanes.iter_mut().enumerate() {
        for (k, chain) in chains.iter_mut().enumerate() {
            let q = LANES * k + l;
            let (first, steps) = (layout.offset(q), layout.steps(q));
            let mut w = panel.as_ptr().add(first * GEMM_PANEL);
            // named vectors, not arrays of them: LLVM then keeps all 24 sums and both loads
            // in registers (the array form spilled a load per step)
            let a0 = groups[0].as_ptr().add(first * GEMM_ROWS);
            let a1 = groups[G - 1].as_ptr().add(first * GEMM_ROWS);
            let mut acc = [[_mm512_setzero_ps(); 2]; GEMM_PANEL];
            for s in 0..steps {
                let x0 = _mm512_loadu_ps(a0.add(s * GEMM_ROWS));
                let x1 = if G == 2 { _mm512_loadu_ps(a1.add(s * GEMM_ROWS)) } else { x0 };
                for (r, acc) in acc.iter_mut().enumerate() {
                    let b = _mm512_set1_ps(*w.add(r));
                    acc[0] = _mm512_fmadd_ps(b, x0, acc[0]);
                    if G == 2 {
                        acc[1] = _mm512_fmadd_ps(b, x1, acc[1]);
                    }
                }
                w = w.add(GEMM_PANEL);
            }
            *chain = acc;
        }
        for (r, lane) in lane.iter_mut().enumerate() {
            for (j, lane) in lane.iter_mut().enumerate().take(G) {
                let c = |k: usize| chains[k][r][j];
                *lane = _mm512_add_ps(_mm512_add_ps(c(0), c(1)), _mm512_add_ps(c(2), c(3)));
            }
        }
    }
    // the horizontal sum's order over the lanes: halves, quarters, pairs
    for (j, out) in out.iter_mut().enumerate().take(G) {
        for (r, out) in out.iter_mut().enumerate() {
            let t = |l: usize| lanes[l][r][j];
            let mut h = [_mm512_setzero_ps(); 8];
            for (i, h) in h.iter_mut().enumerate() {
                *h = _mm512_add_ps(t(i), t(i + 8));
            }
            let q = [_mm512_add_ps(h[0], h[4]), _mm512_add_ps(h[1], h[5]), _mm512_add_ps(h[2], h[6]), _mm512_add_ps(h[3], h[7])];
            let p = [_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3])];
            _mm512_storeu_ps(out.as_mut_ptr(), _mm512_add_ps(p[0], p[1]));
        }
    }
}
