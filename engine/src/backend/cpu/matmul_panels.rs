//! The matmul's panel path: weights repacked into 8-row panels (`quant::panel`) times prepared
//! activation rows, tile by tile of 8 weight rows by up to `TILE_ROWS` activation rows.

use rayon::prelude::*;

use super::matmul::WeightMatrix;
use crate::quant::panel::prepared::prepared_row_bytes;
use crate::quant::panel::{self, prepare_row, Panels, PANEL_ROWS, TILE_ROWS};
use crate::quant::{GgmlType, Isa};

/// The activation rows of one matmul call prepared for the panel kernels, once per activation
/// type, and which buffer each matrix reads.
pub(super) struct PreparedActs {
    bufs: Vec<(GgmlType, Vec<u8>)>,
    /// Per matrix: its buffer's index, if it has panels.
    of_matrix: Vec<Option<usize>>,
}

impl PreparedActs {
    pub(super) fn for_matrix(&self, m: usize) -> Option<&[u8]> {
        self.of_matrix[m].map(|i| self.bufs[i].1.as_slice())
    }
}

/// Prepares the quantized activation rows `acts[m]` of every matrix `ws[m]` that has panels.
pub(super) fn prepare_activations(ws: &[WeightMatrix], acts: &[&[u8]], batch: usize) -> PreparedActs {
    let mut bufs: Vec<(GgmlType, Vec<u8>)> = Vec::new();
    let of_matrix = ws
        .iter()
        .zip(acts)
        .map(|(w, act)| {
            let panels = w.panels?;
            let act_ty = panels.layout.act_ty;
            if let Some(i) = bufs.iter().position(|(t, _)| *t == act_ty) {
                return Some(i);
            }
            let row = prepared_row_bytes(act_ty, panels.blocks);
            let mut buf = vec![0u8; batch * row];
            let src_row = act.len() / batch;
            buf.par_chunks_mut(row).zip(act.par_chunks(src_row)).for_each(|(dst, src)| prepare_row(act_ty, src, dst));
            bufs.push((act_ty, buf));
            Some(bufs.len() - 1)
        })
        .collect();
    PreparedActs { bufs, of_matrix }
}

/// Output rows `rows` (starting on a panel boundary) of `panels` for every prepared activation
/// row: `outs[b]` receives activation row `b`'s values of those rows.
pub(super) fn run_panels(isa: Isa, panels: &Panels, prepared: &[u8], batch: usize, rows: std::ops::Range<usize>, outs: &mut [&mut [f32]]) {
    assert!(rows.start.is_multiple_of(PANEL_ROWS) && rows.end <= panels.rows, "rows {rows:?} of {}", panels.rows);
    let kernel = panel::kernel_on(panels.layout.ty, isa).expect("every repacked type has a panel kernel");
    let stride = prepared.len() / batch;
    // activation rows in blocks that stay in the core's L2 while every panel of the task runs
    // over them (a prompt's prepared rows of a wide matrix are megabytes: streamed once per
    // panel, they would come from memory 8 weight rows at a time)
    let block_rows = (ACT_BLOCK_BYTES / stride.max(1)).max(TILE_ROWS) / TILE_ROWS * TILE_ROWS;
    let mut tile = [[0.0f32; PANEL_ROWS]; TILE_ROWS];
    for block in (0..batch).step_by(block_rows) {
        let block_end = (block + block_rows).min(batch);
        for p in rows.start / PANEL_ROWS..rows.end.div_ceil(PANEL_ROWS) {
            let first = p * PANEL_ROWS - rows.start;
            let valid = (rows.end - p * PANEL_ROWS).min(PANEL_ROWS);
            for b0 in (block..block_end).step_by(TILE_ROWS) {
                let n = TILE_ROWS.min(block_end - b0);
                kernel(panels.panel(p), panels.blocks, &prepared[b0 * stride..], stride, &mut tile[..n]);
                for (out, t) in outs[b0..b0 + n].iter_mut().zip(&tile) {
                    out[first..first + valid].copy_from_slice(&t[..valid]);
                }
            }
        }
    }
}

/// Bytes of prepared activation rows one pass over a task's panels reads (a fraction of a
/// core's L2: the panels stream through beside them).
const ACT_BLOCK_BYTES: usize = 256 << 10;
