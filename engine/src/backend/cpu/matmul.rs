//! `y = W x` for any weight type and a batch of activation rows.
//!
//! The activation rows are converted once per call to the format the weight type dots against
//! (Q8_0 / Q8_1 / Q8_K, or f32 bytes for float weights), then output rows are split across the
//! rayon pool in tasks of equal work. A matrix repacked into panels runs the panel kernels
//! (`matmul_panels`); any other has each output as one `vec_dot` of a weight row with an
//! activation row. Each output is computed by the same kernel in the same order whatever the
//! batch size and thread count, so results are bitwise batch-invariant.

use rayon::prelude::*;

use super::matmul_panels::{prepare_activations, run_panels};
use crate::backend::RowInput;
use crate::quant::float_gemm::{FloatGemm, PackedActs};
use crate::quant::iq_grid::gemm::{GridActs, GridGemm};
use crate::quant::{self, GgmlType, Isa, QuantError, VecDotTileFn, TILE_A, TILE_W};
use crate::quant::{MatmulError, WeightMatrix};

/// The least work a task is given (multiply-adds): less would not pay for its scheduling and,
/// in the several-row kernels, for preparing the activation rows.
const MIN_TASK_MACS: usize = 1 << 18;

/// Tasks per pool thread at most: a few, so that a thread the OS holds back is helped out.
const TASKS_PER_THREAD: usize = 4;

/// Task boundaries inside a matrix fall on multiples of this many rows.
const ROW_ALIGN: usize = 8;

/// Output rows `rows` of matrix `m`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    m: usize,
    rows: std::ops::Range<usize>,
}

/// Splits the output rows of `ws` (`batches[m]` activation rows for matrix `m`) into tasks of
/// about equal work (rows × columns × activation rows), across matrix boundaries, their number a
/// multiple of `threads` whenever there is enough work for every thread: rayon halves the task
/// list between threads, so equal tasks keep every thread busy until the end. A task is one or
/// more row segments, in order.
fn plan_tasks(ws: &[WeightMatrix], batches: &[usize], threads: usize) -> Vec<Vec<Segment>> {
    let row_cost = |m: usize| ws[m].cols * batches[m];
    let total: usize = (0..ws.len()).map(|m| ws[m].rows * row_cost(m)).sum();
    if total == 0 {
        return Vec::new();
    }
    let by_cost = (total / MIN_TASK_MACS).max(1);
    let threads = threads.max(1);
    let n = if by_cost < threads { by_cost } else { by_cost.min(threads * TASKS_PER_THREAD) / threads * threads };
    let mut tasks: Vec<Vec<Segment>> = vec![Vec::new(); n];
    let mut before = 0; // the work of the matrices before `m`
    for (m, w) in ws.iter().enumerate() {
        let cost = row_cost(m);
        if cost == 0 {
            continue; // no work: a zero-column matrix gets its zeros from the caller
        }
        let mut r = 0;
        while r < w.rows {
            // the task whose share of the work this row starts in, and the row that starts the next
            let t = ((before + r * cost) * n / total).min(n - 1);
            let next_task_at = ((t + 1) * total).div_ceil(n);
            let mut end = next_task_at.saturating_sub(before).div_ceil(cost).clamp(r + 1, w.rows);
            if end < w.rows {
                end = end.next_multiple_of(ROW_ALIGN).min(w.rows);
            }
            tasks[t].push(Segment { m, rows: r..end });
            r = end;
        }
        before += w.rows * cost;
    }
    tasks.retain(|t| !t.is_empty());
    tasks
}

/// `y[b * w.rows + r] = Σ_c W[r][c] · x[b * w.cols + c]` for `batch` activation rows.
pub fn matmul(w: &WeightMatrix, x: &[f32], batch: usize, y: &mut [f32]) -> Result<(), MatmulError> {
    matmul_each(&[*w], x, batch, &mut [y])
}

/// [`matmul`] of several matrices with the same activation rows (the q, k and v projections;
/// the gate and up projections): `ys[m]` gets `ws[m]`'s product. The activations are converted
/// once per dot type and the output rows of every matrix share one parallel pass, instead of a
/// conversion and a fork-join per matrix; each output has the bits `matmul` gives it.
pub fn matmul_each(ws: &[WeightMatrix], x: &[f32], batch: usize, ys: &mut [&mut [f32]]) -> Result<(), MatmulError> {
    matmul_each_on(Isa::active(), ws, x, batch, ys)
}

/// [`matmul_each`] with the kernels of tier `isa`.
pub fn matmul_each_on(isa: Isa, ws: &[WeightMatrix], x: &[f32], batch: usize, ys: &mut [&mut [f32]]) -> Result<(), MatmulError> {
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    for (w, y) in ws.iter().zip(ys.iter()) {
        if y.len() != batch * w.rows {
            return Err(MatmulError::Output { expected: batch * w.rows, got: y.len() });
        }
    }
    let outs: Vec<Vec<&mut [f32]>> = ys.iter_mut().zip(ws).map(|(y, w)| y.chunks_exact_mut(w.rows.max(1)).take(batch).collect()).collect();
    matmul_rows_on(isa, ws, &[Rows { x, batch, pick: None }], &vec![0; ws.len()], outs)
}

/// Activation rows of a products pass: `batch` rows of `x` (f32, one after another), or the
/// rows `pick` names (`batch` of them), in that order.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    pub x: &'a [f32],
    pub batch: usize,
    pub pick: Option<&'a [usize]>,
}

impl Rows<'_> {
    /// Activation row `i`, of `cols` values.
    fn row(&self, i: usize, cols: usize) -> &[f32] {
        let r = self.pick.map_or(i, |p| p[i]);
        &self.x[r * cols..(r + 1) * cols]
    }
}

/// Products of matrices that read different activation rows, in one parallel pass: matrix `m`
/// times each row `b` of `inputs[input_of[m]]` into `outs[m][b]` (`ws[m].rows` values). Each input
/// is converted once per dot type for all the matrices that read it (which share its row
/// length); each output has the bits [`matmul`] gives it.
pub fn matmul_rows_on(
    isa: Isa,
    ws: &[WeightMatrix],
    inputs: &[Rows<'_>],
    input_of: &[usize],
    outs: Vec<Vec<&mut [f32]>>,
) -> Result<(), MatmulError> {
    assert_eq!(ws.len(), outs.len(), "outputs for every matrix");
    assert_eq!(ws.len(), input_of.len(), "one input per matrix");
    let batches: Vec<usize> = input_of.iter().map(|&i| inputs[i].batch).collect();
    for (m, (w, &i)) in ws.iter().zip(input_of).enumerate() {
        let Rows { x, batch, pick } = inputs[i];
        let fits = match pick {
            None => x.len() == batch * w.cols,
            Some(p) => p.len() == batch && p.iter().all(|&r| (r + 1) * w.cols <= x.len()),
        };
        if !fits {
            return Err(MatmulError::Activations { batch, cols: w.cols, expected: batch * w.cols, got: x.len() });
        }
        if outs[m].len() != batch || outs[m].iter().any(|o| o.len() != w.rows) {
            return Err(MatmulError::Output { expected: batch * w.rows, got: outs[m].iter().map(|o| o.len()).sum() });
        }
    }
    let ops = ws.iter().map(|w| quant::ops_on(w.ty, isa)).collect::<Result<Vec<_>, _>>()?;

    // Quantized weights get their input converted once per dot type here, rather than once per
    // output row (and prepared once for panel kernels). Float weights read f32 rows in place,
    // from a gathered copy where the input picks its rows.
    let mut converted: Vec<(usize, GgmlType, Vec<u8>)> = Vec::new();
    let mut gathered: Vec<Option<Vec<f32>>> = vec![None; inputs.len()];
    for ((op, &i), w) in ops.iter().zip(input_of).zip(ws) {
        let (act_ty, input) = (op.vec_dot_type, inputs[i]);
        if act_ty == GgmlType::F32 {
            if input.pick.is_some() && gathered[i].is_none() {
                gathered[i] = Some((0..input.batch).flat_map(|b| input.row(b, w.cols)).copied().collect());
            }
            continue;
        }
        if input.batch == 0 || converted.iter().any(|(j, t, _)| (*j, *t) == (i, act_ty)) {
            continue;
        }
        let act_row_bytes = act_ty.row_bytes(w.cols).ok_or(QuantError::PartialBlock { ty: act_ty, n: w.cols })?;
        let quantize = quant::ops_on(act_ty, isa)?.quantize_activations;
        let mut buf = vec![0u8; input.batch * act_row_bytes];
        buf.par_chunks_mut(act_row_bytes).enumerate().for_each(|(b, dst)| quantize(input.row(b, w.cols), dst));
        converted.push((i, act_ty, buf));
    }
    let f32_rows = |i: usize| gathered[i].as_deref().unwrap_or(inputs[i].x);
    let acts: Vec<&[u8]> = ops
        .iter()
        .zip(input_of)
        .map(|(op, &i)| match converted.iter().find(|(j, t, _)| (*j, *t) == (i, op.vec_dot_type)) {
            Some((_, _, buf)) => buf.as_slice(),
            None => bytemuck::cast_slice(f32_rows(i)),
        })
        .collect();
    // panels with too few rows for them: a row dot in their order (see `PanelLayout::min_batch`)
    let panel_order_dots: Vec<Option<quant::dispatch::VecDotFn>> = ws
        .iter()
        .zip(&batches)
        .map(|(w, &batch)| w.panels.filter(|p| batch < p.layout.min_batch).and_then(|_| quant::panel::row_dot_on(w.ty, isa)))
        .collect();
    let rows_instead: Vec<bool> = panel_order_dots.iter().map(Option::is_some).collect();
    let prepared = prepare_activations(ws, &acts, &batches, input_of, &rows_instead);
    let tiles: Vec<Option<VecDotTileFn>> = ws.iter().map(|w| quant::dot_tile_on(w.ty, isa)).collect();
    // grid i-quants against several rows: each weight row unpacked once, not once per row
    let grid_gemms: Vec<Option<GridGemm>> =
        ws.iter().zip(&batches).map(|(w, &batch)| quant::grid_gemm_on(w.ty, isa).filter(|_| batch >= GRID_GEMM_MIN_BATCH)).collect();
    // their activations prepared once per input for every matrix and task that reads it (the
    // preparation is the tier's, whatever the grid type; they all take Q8_K rows)
    let grid_acts: Vec<Option<GridActs>> = (0..inputs.len())
        .map(|i| {
            let m = (0..ws.len()).find(|&m| input_of[m] == i && grid_gemms[m].is_some())?;
            Some(grid_gemms[m].expect("found above").prepare(acts[m], batches[m]))
        })
        .collect();
    // float weights against many rows: each input's rows packed once, in the row dot's chain
    // order, for the register-blocked product (one tier: one chain order, one packing)
    let gemms: Vec<Option<FloatGemm>> =
        ws.iter().zip(&batches).map(|(w, &batch)| quant::float_gemm_on(w.ty, isa).filter(|_| batch >= GEMM_MIN_BATCH)).collect();
    let packed: Vec<Option<PackedActs>> = (0..inputs.len())
        .map(|i| {
            let m = (0..ws.len()).find(|&m| input_of[m] == i && gemms[m].is_some())?;
            Some(PackedActs::new(f32_rows(i), batches[m], ws[m].cols, gemms[m].expect("found above").lanes))
        })
        .collect();

    let mut outs = outs;
    for (w, rows) in ws.iter().zip(outs.iter_mut()) {
        if w.cols == 0 {
            rows.iter_mut().for_each(|o| o.fill(0.0));
        }
    }
    // Each segment's outputs: one slice per activation row, cut from `outs` in segment order.
    let tasks = plan_tasks(ws, &batches, rayon::current_num_threads());
    let mut rests = outs;
    // each task: its segments, each with its output rows
    type Task<'y> = Vec<(Segment, Vec<&'y mut [f32]>)>;
    let work: Vec<Task> = tasks
        .into_iter()
        .map(|segments| {
            segments
                .into_iter()
                .map(|seg| {
                    let outs = rests[seg.m]
                        .iter_mut()
                        .map(|rest| {
                            let (head, tail) = std::mem::take(rest).split_at_mut(seg.rows.len());
                            *rest = tail;
                            head
                        })
                        .collect();
                    (seg, outs)
                })
                .collect()
        })
        .collect();
    work.into_par_iter().for_each(|segments| {
        for (seg, mut outs) in segments {
            let (w, act, op, batch) = (&ws[seg.m], acts[seg.m], &ops[seg.m], batches[seg.m]);
            if let (Some(panels), Some(prepared)) = (w.panels, prepared.for_matrix(seg.m)) {
                run_panels(isa, panels, prepared, batch, seg.rows, &mut outs);
                continue;
            }
            if let (Some(gemm), Some(packed)) = (gemms[seg.m], packed[input_of[seg.m]].as_ref()) {
                let row_bytes = w.row_bytes();
                (gemm.run)(&w.data[seg.rows.start * row_bytes..seg.rows.end * row_bytes], seg.rows.len(), packed, &mut outs);
                continue;
            }
            if let (Some(gemm), Some(grid_acts)) = (&grid_gemms[seg.m], &grid_acts[input_of[seg.m]]) {
                let row_bytes = w.row_bytes();
                gemm.run(&w.data[seg.rows.start * row_bytes..seg.rows.end * row_bytes], seg.rows.len(), grid_acts, &mut outs);
                continue;
            }
            let act_row_bytes = act.len() / batch;
            if let Some(tile) = tiles[seg.m].filter(|_| batch >= TILE_A) {
                dot_tiled(tile, op.vec_dot, w, act, act_row_bytes, seg.rows, &mut outs);
                continue;
            }
            // each weight row, once read, dotted with every activation row (panels with too few
            // rows for them come here, unprepared, for the row dot in their order)
            let dot = panel_order_dots[seg.m].unwrap_or(op.vec_dot);
            for (i, r) in seg.rows.clone().enumerate() {
                quant::prefetch::prefetch(quant::prefetch::row_ahead(w.data, w.row_bytes(), r));
                let row = w.row(r);
                for (out, a) in outs.iter_mut().zip(act.chunks_exact(act_row_bytes)) {
                    out[i] = dot(row, a);
                }
            }
        }
    });
    Ok(())
}

/// Activation rows from which grid i-quant weights are expanded once for all of them
/// (`quant::iq_grid::gemm`) instead of unpacked by each row dot.
const GRID_GEMM_MIN_BATCH: usize = 2;

/// Activation rows from which float weights take the register-blocked product
/// (`quant::float_gemm`), where the tier has one: its tiles are 16 rows, padded.
const GEMM_MIN_BATCH: usize = 16;

/// Activation rows per block of [`dot_tiled`]: a block stays in cache while every weight row
/// of a task passes over it (48 rows of 1,536 f32 are 288 KiB).
const ACT_BLOCK: usize = 16 * TILE_A;

/// Outputs `rows` of `w` for every activation row (`outs[b]` for row `b`, `act_row_bytes` bytes
/// each) by the tile kernel: block after block of activation rows, `TILE_W` weight rows by
/// `TILE_A` activation rows at a time, the rows left over one `dot` each. The tile kernel gives
/// every output the bits `dot` gives it, so how rows fall into tiles changes nothing.
fn dot_tiled(
    tile: VecDotTileFn,
    dot: quant::dispatch::VecDotFn,
    w: &WeightMatrix,
    act: &[u8],
    act_row_bytes: usize,
    rows: std::ops::Range<usize>,
    outs: &mut [&mut [f32]],
) {
    let batch = outs.len();
    let row_bytes = w.row_bytes();
    let act_row = |b: usize| &act[b * act_row_bytes..(b + 1) * act_row_bytes];
    for b0 in (0..batch).step_by(ACT_BLOCK) {
        let b1 = (b0 + ACT_BLOCK).min(batch);
        let mut r = rows.start;
        while r + TILE_W <= rows.end {
            let pair = &w.data[r * row_bytes..(r + TILE_W) * row_bytes];
            let mut b = b0;
            while b + TILE_A <= b1 {
                let mut tile_out = [[0f32; TILE_A]; TILE_W];
                tile(pair, row_bytes, &act[b * act_row_bytes..(b + TILE_A) * act_row_bytes], act_row_bytes, w.cols, &mut tile_out);
                for (i, per_act) in tile_out.iter().enumerate() {
                    for (j, &v) in per_act.iter().enumerate() {
                        outs[b + j][r - rows.start + i] = v;
                    }
                }
                b += TILE_A;
            }
            for (b, out) in outs.iter_mut().enumerate().take(b1).skip(b) {
                for i in 0..TILE_W {
                    out[r - rows.start + i] = dot(w.row(r + i), act_row(b));
                }
            }
            r += TILE_W;
        }
        for r in r..rows.end {
            for (b, out) in outs.iter_mut().enumerate().take(b1).skip(b0) {
                out[r - rows.start] = dot(w.row(r), act_row(b));
            }
        }
    }
}

/// The embedding lookup: one row of `out` (`inputs.len()` rows of `w.cols`) per input, row `id`
/// of `w` dequantized by tier `isa`'s kernel, or an embedding row copied as it is.
pub fn get_rows(isa: Isa, w: &WeightMatrix, inputs: &[RowInput<'_>], out: &mut [f32]) -> Result<(), MatmulError> {
    if out.len() != inputs.len() * w.cols {
        return Err(MatmulError::Output { expected: inputs.len() * w.cols, got: out.len() });
    }
    let dequantize = quant::ops_on(w.ty, isa)?.dequantize;
    for (input, dst) in inputs.iter().zip(out.chunks_exact_mut(w.cols.max(1))) {
        match *input {
            RowInput::Token(id) if (id as usize) < w.rows => dequantize(w.row(id as usize), dst),
            RowInput::Token(id) => return Err(MatmulError::RowId { id, rows: w.rows }),
            RowInput::Embedding(row) if row.len() == w.cols => dst.copy_from_slice(row),
            RowInput::Embedding(row) => return Err(MatmulError::RowLength { got: row.len(), cols: w.cols }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantized(ty: GgmlType, rows: usize, cols: usize, seed: u32) -> (Vec<u8>, Vec<f32>) {
        let mut s = seed;
        let vals: Vec<f32> = (0..rows * cols)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect();
        let ops = quant::ops(ty).unwrap();
        let rb = ty.row_bytes(cols).unwrap();
        let mut bytes = vec![0u8; rb * rows];
        for (dst, src) in bytes.chunks_exact_mut(rb).zip(vals.chunks_exact(cols)) {
            (ops.quantize.expect("a type with a quantizer"))(src, dst);
        }
        (bytes, vals)
    }

    #[test]
    fn batched_outputs_are_bitwise_equal_to_single_rows() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q5_0] {
            let (rows, cols, batch) = (37, 96, 5);
            let (wb, _) = quantized(ty, rows, cols, 1);
            let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
            let (_, x) = quantized(GgmlType::F32, batch, cols, 2);
            let mut y = vec![0.0; batch * rows];
            matmul(&w, &x, batch, &mut y).unwrap();
            for b in 0..batch {
                let mut y1 = vec![0.0; rows];
                matmul(&w, &x[b * cols..(b + 1) * cols], 1, &mut y1).unwrap();
                for r in 0..rows {
                    assert_eq!(y[b * rows + r].to_bits(), y1[r].to_bits(), "{ty} b={b} r={r}");
                }
            }
        }
    }

    /// Float weights on a tier with a tile kernel: every output of a many-row product has the
    /// bits of its own `vec_dot` on that tier (odd weight rows, activation rows past a block and
    /// not a multiple of the tile, row lengths with and without a partial 16-value step).
    #[test]
    fn tiled_float_products_equal_the_row_dots() {
        let mut tested = 0;
        for isa in Isa::available() {
            for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
                if quant::dot_tile_on(ty, isa).is_none() {
                    continue;
                }
                let dot = quant::ops_on(ty, isa).unwrap().vec_dot;
                for (rows, cols, batch) in [(7, 384, 50), (9, 100, 3), (4, 37, 98), (2, 64, 4), (13, 120, 33), (5, 59, 16), (6, 512, 17)] {
                    let (wb, _) = quantized(ty, rows, cols, 5);
                    let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
                    let (_, x) = quantized(GgmlType::F32, batch, cols, 6);
                    let mut y = vec![0.0; batch * rows];
                    matmul_each_on(isa, &[w], &x, batch, &mut [&mut y]).unwrap();
                    for b in 0..batch {
                        let a: &[u8] = bytemuck::cast_slice(&x[b * cols..(b + 1) * cols]);
                        for r in 0..rows {
                            let want = dot(w.row(r), a);
                            assert_eq!(y[b * rows + r].to_bits(), want.to_bits(), "{ty} on {isa}: {rows}x{cols}, b={b} r={r}");
                        }
                    }
                    tested += 1;
                }
            }
        }
        println!("{tested} tiled products checked");
    }

    /// Repacked matrices: every output has the same bits whatever the batch, the thread count
    /// and the SIMD tier (the panel kernels' order is the scalar reference's); batches of 16
    /// and more take the AMX tier's tile path (whole 16-row groups and a remainder).
    #[test]
    fn panel_products_are_batch_thread_and_tier_invariant() {
        use crate::quant::panel::{repack, PanelLayout};
        for ty in crate::quant::panel::tests::TYPES {
            let l = PanelLayout::of(ty).unwrap();
            let (rows, cols) = (21, 2 * l.block_values);
            let (wb, _) = quantized(ty, rows, cols, 3);
            let panels = repack(ty, rows, cols, &wb).unwrap();
            let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap().with_panels(&panels);
            let (_, x) = quantized(GgmlType::F32, 37, cols, 4);
            let alone: Vec<Vec<u32>> = (0..37)
                .map(|b| {
                    let mut y = vec![0.0; rows];
                    matmul_each_on(Isa::Scalar, &[w], &x[b * cols..(b + 1) * cols], 1, &mut [&mut y]).unwrap();
                    y.iter().map(|v| v.to_bits()).collect()
                })
                .collect();
            for isa in Isa::available() {
                for threads in [1, 3] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    for batch in [1, 2, 5, 9, 16, 37] {
                        let mut y = vec![0.0; batch * rows];
                        pool.install(|| matmul_each_on(isa, &[w], &x[..batch * cols], batch, &mut [&mut y]).unwrap());
                        for b in 0..batch {
                            let got: Vec<u32> = y[b * rows..(b + 1) * rows].iter().map(|v| v.to_bits()).collect();
                            assert_eq!(got, alone[b], "{ty} on {isa}, {threads} threads, batch {batch}, row {b}");
                        }
                    }
                }
            }
        }
    }

    /// Matrix-vector throughput in GB/s of weight bytes (the rayon pool's threads, best of 10)
    /// of Q4_K, Q6_K, Q8_0 and MXFP4 with their panels where they have them (as products run
    /// them) and as plain rows, for 1 to 4
    /// activation rows: `MATVEC_ROWS=65536 cargo test --release -p engine --lib
    /// matvec_throughput -- --ignored --nocapture` (16384 rows of 2048 values by default;
    /// `MATVEC_COLS` sets the row length, `MATVEC_TYPES=Q6_K,Q8_0` the types).
    #[test]
    #[ignore = "timing, not a check"]
    fn matvec_throughput() {
        use crate::quant::panel;
        let setting = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        let (rows, cols) = (setting("MATVEC_ROWS", 16384), setting("MATVEC_COLS", 2048));
        let (_, x) = quantized(GgmlType::F32, 4, cols, 1);
        let types: Vec<GgmlType> = match std::env::var("MATVEC_TYPES") {
            Ok(v) => v.split(',').map(|t| GgmlType::from_name(t).expect("a type name")).collect(),
            Err(_) => vec![GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::MXFP4],
        };
        for ty in types {
            let (bytes, _) = quantized(ty, rows, cols, 2);
            let p = panel::repack(ty, rows, cols, &bytes);
            let plain = WeightMatrix::new(ty, rows, cols, &bytes).unwrap();
            let forms = [("panels", p.as_ref().map(|p| plain.with_panels(p))), ("rows", Some(plain))];
            for (name, w) in forms.into_iter().filter_map(|(n, w)| Some((n, w?))) {
                for isa in Isa::available() {
                    let mut line = format!("{ty} {name:>6} {isa:>6}:");
                    for batch in 1..=4 {
                        let mut y = vec![0.0f32; rows * batch];
                        let mut best = f64::MAX;
                        for _ in 0..10 {
                            let t = std::time::Instant::now();
                            matmul_each_on(isa, &[w], &x[..batch * cols], batch, &mut [&mut y]).unwrap();
                            best = best.min(t.elapsed().as_secs_f64());
                        }
                        line += &format!("  {batch} rows {:6.1} GB/s", (rows * w.row_bytes()) as f64 / best / 1e9);
                    }
                    eprintln!("{line}");
                }
            }
        }
    }

    #[test]
    fn several_matrices_at_once_give_each_matmul_bits() {
        let shapes = [(GgmlType::Q5_0, 37), (GgmlType::Q8_0, 11), (GgmlType::F16, 20), (GgmlType::Q4_K, 5)];
        let cols = 256;
        let mats: Vec<(GgmlType, usize, Vec<u8>)> =
            shapes.iter().enumerate().map(|(i, &(ty, rows))| (ty, rows, quantized(ty, rows, cols, 10 + i as u32).0)).collect();
        let ws: Vec<WeightMatrix> = mats.iter().map(|(ty, rows, b)| WeightMatrix::new(*ty, *rows, cols, b).unwrap()).collect();
        for batch in [1, 3, 8] {
            let (_, x) = quantized(GgmlType::F32, batch, cols, 7);
            let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0; batch * w.rows]).collect();
            let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            matmul_each(&ws, &x, batch, &mut refs).unwrap();
            for (w, got) in ws.iter().zip(&outs) {
                let mut want = vec![0.0; batch * w.rows];
                matmul(w, &x, batch, &mut want).unwrap();
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{} batch {batch}",
                    w.ty
                );
            }
        }
    }

    /// Every row of every matrix lands in exactly one task, in order; with enough work the
    /// task count is a multiple of the thread count and no task has much more work than
    /// another.
    #[test]
    fn tasks_cover_every_row_once_with_equal_work() {
        let data = vec![0u8; 151_936 * 896];
        let m = |rows: usize, cols: usize| WeightMatrix::new(GgmlType::F32, rows, cols, &data[..rows * cols * 4]).unwrap();
        let cases: Vec<(Vec<WeightMatrix>, usize)> = vec![
            (vec![m(896, 896), m(128, 896), m(128, 896)], 8),
            (vec![m(896, 896), m(128, 896), m(128, 896)], 1),
            (vec![m(896, 4864)], 8),
            (vec![m(4864, 896), m(4864, 896)], 3),
            (vec![m(37, 96), m(0, 96), m(5, 96)], 2),
            (vec![m(151_936 / 4, 896)], 8),
        ];
        for (ws, batch) in cases {
            for threads in [1, 2, 3, 16] {
                let tasks = plan_tasks(&ws, &vec![batch; ws.len()], threads);
                let segments: Vec<&Segment> = tasks.iter().flatten().collect();
                let mut next = (0, 0);
                for s in &segments {
                    while next.0 < s.m {
                        assert_eq!(next.1, ws[next.0].rows, "matrix {} left unfinished", next.0);
                        next = (next.0 + 1, 0);
                    }
                    assert_eq!((s.m, s.rows.start), next, "{segments:?}");
                    assert!(!s.rows.is_empty());
                    next.1 = s.rows.end;
                }
                assert_eq!(next, (ws.len() - 1, ws.last().unwrap().rows));
                let work: Vec<usize> = tasks.iter().map(|t| t.iter().map(|s| s.rows.len() * ws[s.m].cols).sum()).collect();
                let total: usize = work.iter().sum();
                if total * batch >= MIN_TASK_MACS * threads {
                    assert_eq!(tasks.len() % threads, 0, "{} tasks for {threads} threads", tasks.len());
                    let fair = total / tasks.len();
                    let slack = ROW_ALIGN * ws.iter().map(|w| w.cols).max().unwrap() * 2;
                    assert!(work.iter().all(|&w| w.abs_diff(fair) <= slack), "{work:?} around {fair}");
                }
            }
        }
    }

    /// Outputs of a zero-column matrix are zeros, beside a matrix with work.
    #[test]
    fn empty_rows_give_zeros() {
        let w0 = WeightMatrix::new(GgmlType::F32, 3, 0, &[]).unwrap();
        let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let w1 = WeightMatrix::new(GgmlType::F32, 1, 2, &data).unwrap();
        let (mut y0, mut y1) = (vec![7.0; 3], vec![7.0; 1]);
        matmul_each(&[w0], &[], 1, &mut [&mut y0]).unwrap();
        assert_eq!(y0, [0.0; 3]);
        y0 = vec![7.0; 3];
        let w0b = WeightMatrix::new(GgmlType::F32, 3, 2, &[0u8; 24]).unwrap();
        matmul_each(&[w0b, w1], &[3.0, 4.0], 1, &mut [&mut y0, &mut y1]).unwrap();
        assert_eq!((y0, y1), (vec![0.0; 3], vec![11.0]));
    }

    #[test]
    fn f32_matmul_equals_the_plain_product() {
        let (rows, cols) = (9, 40);
        let (wb, wv) = quantized(GgmlType::F32, rows, cols, 3);
        let w = WeightMatrix::new(GgmlType::F32, rows, cols, &wb).unwrap();
        let (_, x) = quantized(GgmlType::F32, 2, cols, 4);
        let mut y = vec![0.0; 2 * rows];
        matmul(&w, &x, 2, &mut y).unwrap();
        for b in 0..2 {
            for r in 0..rows {
                let want: f64 = (0..cols).map(|c| wv[r * cols + c] as f64 * x[b * cols + c] as f64).sum();
                assert!((y[b * rows + r] as f64 - want).abs() < 1e-5, "b={b} r={r}");
            }
        }
    }

    #[test]
    fn shape_errors_are_reported() {
        let bytes = vec![0u8; 34];
        assert!(matches!(WeightMatrix::new(GgmlType::Q8_0, 2, 32, &bytes), Err(MatmulError::WeightBytes { expected: 68, got: 34, .. })));
        assert!(matches!(WeightMatrix::new(GgmlType::Q8_0, 1, 30, &bytes), Err(MatmulError::PartialBlock { .. })));
        let w = WeightMatrix::new(GgmlType::Q8_0, 1, 32, &bytes).unwrap();
        let mut y = vec![0.0; 1];
        assert!(matches!(matmul(&w, &[0.0; 31], 1, &mut y), Err(MatmulError::Activations { .. })));
        let mut row = vec![0.0; 32];
        assert_eq!(get_rows(Isa::Scalar, &w, &[RowInput::Token(1)], &mut row), Err(MatmulError::RowId { id: 1, rows: 1 }));
    }
}
