//! The matmul's panel path: weights repacked into 8-row panels (`quant::panel`) times prepared
//! activation rows, tile by tile of 8 weight rows by up to `TILE_ROWS` activation rows.

use rayon::prelude::*;

use crate::quant::panel::prepared::{prepared_row_bytes, AlignedBytes};
use crate::quant::panel::{self, prepare_row, Panels, PANEL_ROWS, TILE_ROWS};
#[cfg(target_arch = "x86_64")]
use crate::quant::x86::amx;
use crate::quant::WeightMatrix;
use crate::quant::{GgmlType, Isa};

/// The activation rows of one matmul call prepared for the panel kernels, once per input and
/// activation type, and which buffer each matrix reads.
pub(super) struct PreparedActs {
    bufs: Vec<(usize, GgmlType, AlignedBytes)>,
    /// Per matrix: its buffer's index, if it has panels.
    of_matrix: Vec<Option<usize>>,
}

impl PreparedActs {
    pub(super) fn for_matrix(&self, m: usize) -> Option<&[u8]> {
        self.of_matrix[m].map(|i| self.bufs[i].2.as_slice())
    }
}

/// Prepares the quantized activation rows `acts[m]` (`batches[m]` rows of input `input_of[m]`)
/// of every matrix `ws[m]` that has panels, unless `rows_instead[m]` (its few rows go to a row
/// dot in the panels' order).
pub(super) fn prepare_activations(
    ws: &[WeightMatrix],
    acts: &[&[u8]],
    batches: &[usize],
    input_of: &[usize],
    rows_instead: &[bool],
) -> PreparedActs {
    let mut bufs: Vec<(usize, GgmlType, AlignedBytes)> = Vec::new();
    let of_matrix = (0..ws.len())
        .map(|m| {
            let panels = ws[m].panels?;
            let (input, act_ty, batch) = (input_of[m], panels.layout.act_ty, batches[m]);
            if batch == 0 || rows_instead[m] {
                return None;
            }
            if let Some(i) = bufs.iter().position(|(j, t, _)| (*j, *t) == (input, act_ty)) {
                return Some(i);
            }
            let row = prepared_row_bytes(act_ty, panels.blocks);
            // zero rows after the batch's, up to what the tile unit's groups read
            let mut buf = AlignedBytes::zeroed(prepared_rows(batch) * row);
            let src_row = acts[m].len() / batch;
            buf.as_mut_slice().par_chunks_mut(row).zip(acts[m].par_chunks(src_row)).for_each(|(dst, src)| prepare_row(act_ty, src, dst));
            bufs.push((input, act_ty, buf));
            Some(bufs.len() - 1)
        })
        .collect();
    PreparedActs { bufs, of_matrix }
}

/// The rows a prepared buffer of `batch` activation rows holds: on x86, from 16 rows, a
/// multiple of 16 (zero rows after the batch's), so that the AMX tier's groups of 16 read whole
/// groups; otherwise the batch's.
fn prepared_rows(batch: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if batch >= amx::PAIR_ROWS {
        return batch.next_multiple_of(amx::PAIR_ROWS);
    }
    batch
}

/// Output rows `rows` (starting on a panel boundary) of `panels` for the `batch` prepared
/// activation rows (and the zero rows after them, [`prepared_rows`]): `outs[b]` receives
/// activation row `b`'s values of those rows.
pub(super) fn run_panels(isa: Isa, panels: &Panels, prepared: &[u8], batch: usize, rows: std::ops::Range<usize>, outs: &mut [&mut [f32]]) {
    assert!(rows.start.is_multiple_of(PANEL_ROWS) && rows.end <= panels.rows, "rows {rows:?} of {}", panels.rows);
    let stride = prepared_row_bytes(panels.layout.act_ty, panels.blocks);
    assert_eq!(prepared.len(), prepared_rows(batch) * stride, "prepared rows of {batch}");
    let kernel = panel::kernel_on(panels.layout.ty, isa).expect("every repacked type has a panel kernel");
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Amx && batch >= amx::PAIR_ROWS {
        if let Some(pair) = amx::pair_kernel(panels.layout.ty) {
            return run_pairs(pair, kernel, panels, prepared, stride, batch, rows, outs);
        }
    }
    let pair = if batch >= PAIR_MIN_BATCH { panel::pair_kernel_on(panels.layout.ty, isa) } else { None };
    // activation rows in blocks that stay in the core's L2 while every panel of the task runs
    // over them (a prompt's prepared rows of a wide matrix are megabytes: streamed once per
    // panel, they would come from memory 8 weight rows at a time)
    let block_rows = (ACT_BLOCK_BYTES / stride.max(1)).max(TILE_ROWS) / TILE_ROWS * TILE_ROWS;
    let panel_end = rows.end.div_ceil(PANEL_ROWS);
    for block in (0..batch).step_by(block_rows) {
        let block_end = (block + block_rows).min(batch);
        let mut p = rows.start / PANEL_ROWS;
        while p < panel_end {
            match pair {
                // two panels at a time where the tier has a pair kernel (the same bits)
                Some(pair) if p + 1 < panel_end => {
                    tiles(pair, panels.panel_pair(p), panels, p, &rows, prepared, stride, block..block_end, outs);
                    p += 2;
                }
                _ => {
                    tiles(kernel, panels.panel(p), panels, p, &rows, prepared, stride, block..block_end, outs);
                    p += 1;
                }
            }
        }
    }
}

/// A panel kernel of `N` weight rows: a [`panel::PanelKernelFn`] (8) or a
/// [`panel::PanelPairKernelFn`] (16).
type TileFn<const N: usize> = fn(&[u8], usize, &[u8], usize, &mut [[f32; N]]);

/// Panel `p` (`N` = 8 rows, `weights` its bytes) or panels `p` and `p + 1` (`N` = 16) of
/// `panels` times the activation rows `acts`, up to `TILE_ROWS` at a time by `kernel`; output
/// rows `rows` of the matrix land in `outs`.
#[allow(clippy::too_many_arguments)]
fn tiles<const N: usize>(
    kernel: TileFn<N>,
    weights: &[u8],
    panels: &Panels,
    p: usize,
    rows: &std::ops::Range<usize>,
    prepared: &[u8],
    stride: usize,
    acts: std::ops::Range<usize>,
    outs: &mut [&mut [f32]],
) {
    let first = p * PANEL_ROWS - rows.start;
    let valid = (rows.end - p * PANEL_ROWS).min(N);
    let mut tile = [[0.0f32; N]; TILE_ROWS];
    for b0 in acts.clone().step_by(TILE_ROWS) {
        let n = TILE_ROWS.min(acts.end - b0);
        kernel(weights, panels.blocks, &prepared[b0 * stride..], stride, &mut tile[..n]);
        for (out, t) in outs[b0..b0 + n].iter_mut().zip(&tile) {
            put(out, first, t, valid);
        }
    }
}

/// The AMX tier's path: panel pairs times 16 activation rows at a time on the tile unit (each
/// pair unpacked once per block of activation rows), the panel left over by the vector tile,
/// which gives the same bits. Rows past a multiple of 16 run on the tile unit too, beside the
/// zero rows that pad the prepared rows to 16 ([`prepared_rows`]; their outputs are dropped):
/// once a pair is unpacked, another 16 rows cost it a few tile products, where the vector tile
/// would read the pair again for them (72 rows took about as long as 80 before).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn run_pairs(
    pair: amx::PairKernelFn,
    kernel: panel::PanelKernelFn,
    panels: &Panels,
    prepared: &[u8],
    stride: usize,
    batch: usize,
    rows: std::ops::Range<usize>,
    outs: &mut [&mut [f32]],
) {
    let padded_batch = prepared_rows(batch);
    let block_rows = (AMX_ACT_BLOCK_BYTES / stride.max(1)).max(amx::PAIR_ROWS) / amx::PAIR_ROWS * amx::PAIR_ROWS;
    let mut scratch = amx::PairScratch::default();
    let mut pair_out = vec![[0.0f32; 2 * PANEL_ROWS]; block_rows.min(padded_batch)];
    let panel_end = rows.end.div_ceil(PANEL_ROWS);
    for block in (0..padded_batch).step_by(block_rows) {
        let block_end = (block + block_rows).min(padded_batch);
        let valid_end = block_end.min(batch);
        let mut p = rows.start / PANEL_ROWS;
        while p < panel_end {
            if p + 1 == panel_end {
                tiles(kernel, panels.panel(p), panels, p, &rows, prepared, stride, block..valid_end, outs);
                p += 1;
                continue;
            }
            let out = &mut pair_out[..block_end - block];
            pair(panels.panel(p), panels.panel(p + 1), panels.blocks, &prepared[block * stride..], stride, &mut scratch, out);
            let first = p * PANEL_ROWS - rows.start;
            let valid = (rows.end - p * PANEL_ROWS).min(2 * PANEL_ROWS);
            for (dst, t) in outs[block..valid_end].iter_mut().zip(out.iter()) {
                put(dst, first, t, valid);
            }
            p += 2;
        }
    }
}

/// `out[first..first + valid] = tile[..valid]`: a whole tile row as a fixed-size copy (a few
/// vector moves), not a call to `memcpy` per row and panel.
#[inline(always)]
fn put<const N: usize>(out: &mut [f32], first: usize, tile: &[f32; N], valid: usize) {
    match out.get_mut(first..first + N) {
        Some(dst) if valid == N => {
            let dst: &mut [f32; N] = dst.try_into().expect("N values");
            *dst = *tile;
        }
        _ => out[first..first + valid].copy_from_slice(&tile[..valid]),
    }
}

/// The fewest activation rows a product takes the pair kernels for. Measured on the 2-core Zen
/// 5 (two threads, `matvec_throughput` in `matmul.rs`, 65536 x 2048): with 1 to 4 rows the pair
/// kernels are the slower, Q4_K 21-25 GB/s against 35-45 for the 8-row tiles, MXFP4 22-35
/// against 48-55; a 512-row prompt runs about 1.4 times faster with them (Qwen3-1.7B-shaped
/// Q4_K_M, `engine-cli bench -p 512`: 217-233 t/s against 171).
const PAIR_MIN_BATCH: usize = 16;

/// Bytes of prepared activation rows one pass over a task's panels reads (a fraction of a
/// core's L2: the panels stream through beside them).
const ACT_BLOCK_BYTES: usize = 256 << 10;

/// The AMX path's blocks are larger: every block unpacks each panel pair again.
#[cfg(target_arch = "x86_64")]
const AMX_ACT_BLOCK_BYTES: usize = 1 << 20;
