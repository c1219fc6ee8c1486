//! `y = W x` for any weight type and a batch of activation rows.
//!
//! The activation rows are converted once per call to the format the weight type dots against
//! (Q8_0 / Q8_1 / Q8_K, or f32 bytes for float weights), then output rows are split across the
//! rayon pool and each output is one `vec_dot` of a weight row with an activation row. Each
//! output is computed by the same kernel in the same order whatever the batch size and thread
//! count, so results are bitwise batch-invariant.

use rayon::prelude::*;

use crate::quant::{self, GgmlType, QuantError};

/// A shape or type problem with a matmul's operands.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MatmulError {
    #[error("weight matrix {rows}x{cols} of {ty} needs {expected} bytes, got {got}")]
    WeightBytes { ty: GgmlType, rows: usize, cols: usize, expected: usize, got: usize },
    #[error("weight row length {cols} is not a whole number of {ty} blocks")]
    PartialBlock { ty: GgmlType, cols: usize },
    #[error("activations: expected {expected} values ({batch} rows of {cols}), got {got}")]
    Activations { batch: usize, cols: usize, expected: usize, got: usize },
    #[error("output: expected {expected} values, got {got}")]
    Output { expected: usize, got: usize },
    #[error("row id {id} is out of range for a matrix of {rows} rows")]
    RowId { id: u32, rows: usize },
    #[error(transparent)]
    Quant(#[from] QuantError),
}

/// A row-major weight matrix of `rows` rows of `cols` elements, viewed in place.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    row_bytes: usize,
}

impl<'a> WeightMatrix<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` elements of `ty`.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, MatmulError> {
        let row_bytes = ty.row_bytes(cols).ok_or(MatmulError::PartialBlock { ty, cols })?;
        let expected = row_bytes.checked_mul(rows);
        if expected != Some(data.len()) {
            let expected = expected.unwrap_or(usize::MAX);
            return Err(MatmulError::WeightBytes { ty, rows, cols, expected, got: data.len() });
        }
        Ok(WeightMatrix { ty, rows, cols, data, row_bytes })
    }

    /// The bytes of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }
}

/// Output rows per rayon task: small enough to balance the pool, large enough that a task
/// amortises its scheduling cost.
fn rows_per_task(rows: usize, batch: usize) -> usize {
    let tasks = rayon::current_num_threads() * 8;
    let by_balance = rows.div_ceil(tasks.max(1));
    // Below ~4k dot products a task is not worth splitting further.
    let by_cost = 4096usize.div_ceil(batch.max(1));
    by_balance.max(by_cost.min(rows)).max(1)
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
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    for (w, y) in ws.iter().zip(ys.iter()) {
        let expected = batch * w.cols;
        if x.len() != expected {
            return Err(MatmulError::Activations { batch, cols: w.cols, expected, got: x.len() });
        }
        if y.len() != batch * w.rows {
            return Err(MatmulError::Output { expected: batch * w.rows, got: y.len() });
        }
    }
    if batch == 0 {
        return Ok(());
    }
    let ops = ws.iter().map(|w| quant::ops(w.ty)).collect::<Result<Vec<_>, _>>()?;

    // Float weights read the f32 activations in place; quantized weights get them converted
    // once here, rather than once per output row.
    let mut converted: Vec<(GgmlType, Vec<u8>)> = Vec::new();
    for (w, op) in ws.iter().zip(&ops) {
        let act_ty = op.vec_dot_type;
        if act_ty == GgmlType::F32 || converted.iter().any(|(t, _)| *t == act_ty) {
            continue;
        }
        let act_row_bytes = act_ty.row_bytes(w.cols).ok_or(QuantError::PartialBlock { ty: act_ty, n: w.cols })?;
        let quantize = quant::ops(act_ty)?.quantize_activations;
        let mut buf = vec![0u8; batch * act_row_bytes];
        buf.par_chunks_mut(act_row_bytes).zip(x.par_chunks(w.cols)).for_each(|(dst, src)| quantize(src, dst));
        converted.push((act_ty, buf));
    }
    let acts: Vec<&[u8]> = ops
        .iter()
        .map(|op| match converted.iter().find(|(t, _)| *t == op.vec_dot_type) {
            Some((_, buf)) => buf.as_slice(),
            None => bytemuck::cast_slice(x),
        })
        .collect();

    if batch == 1 {
        // every task writes its output rows in place
        let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
        for (m, y) in ys.iter_mut().enumerate() {
            let chunk = rows_per_task(ws[m].rows, 1);
            tasks.extend(y.chunks_mut(chunk).enumerate().map(|(c, out)| (m, c * chunk, out)));
        }
        tasks.into_par_iter().for_each(|(m, r0, out)| {
            let (w, act, vec_dot) = (&ws[m], acts[m], ops[m].vec_dot);
            for (i, yr) in out.iter_mut().enumerate() {
                *yr = vec_dot(w.row(r0 + i), act);
            }
        });
        return Ok(());
    }
    // Each task computes a block of output rows for the whole batch (the weight row stays in
    // cache while every activation row passes over it), then the blocks are scattered.
    let tasks: Vec<(usize, usize, usize)> = ws
        .iter()
        .enumerate()
        .flat_map(|(m, w)| {
            let chunk = rows_per_task(w.rows, batch);
            (0..w.rows.div_ceil(chunk)).map(move |c| (m, c * chunk, ((c + 1) * chunk).min(w.rows)))
        })
        .collect();
    let blocks: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(m, r0, r1)| {
            let (w, act, op) = (&ws[m], acts[m], &ops[m]);
            let act_row_bytes = act.len() / batch;
            let mut out = vec![0.0f32; (r1 - r0) * batch];
            match op.vec_dot_rows {
                // the block of weight rows against the whole batch at once (same bits)
                Some(rows) => rows(&w.data[r0 * w.row_bytes()..r1 * w.row_bytes()], act, act_row_bytes, &mut out),
                None => {
                    for r in r0..r1 {
                        let wr = w.row(r);
                        for (b, a) in act.chunks_exact(act_row_bytes).enumerate() {
                            out[b * (r1 - r0) + (r - r0)] = (op.vec_dot)(wr, a);
                        }
                    }
                }
            }
            out
        })
        .collect();
    for (&(m, r0, r1), out) in tasks.iter().zip(&blocks) {
        let (rows, n) = (ws[m].rows, r1 - r0);
        for b in 0..batch {
            ys[m][b * rows + r0..b * rows + r0 + n].copy_from_slice(&out[b * n..(b + 1) * n]);
        }
    }
    Ok(())
}

/// Dequantizes the rows `ids` of `w` into `out` (`ids.len()` rows of `w.cols`): the embedding
/// lookup.
pub fn get_rows(w: &WeightMatrix, ids: &[u32], out: &mut [f32]) -> Result<(), MatmulError> {
    if out.len() != ids.len() * w.cols {
        return Err(MatmulError::Output { expected: ids.len() * w.cols, got: out.len() });
    }
    let dequantize = quant::ops(w.ty)?.dequantize;
    for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(w.cols.max(1))) {
        if id as usize >= w.rows {
            return Err(MatmulError::RowId { id, rows: w.rows });
        }
        dequantize(w.row(id as usize), dst);
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
            (ops.quantize)(src, dst);
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
                assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{} batch {batch}", w.ty);
            }
        }
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
        assert!(matches!(
            WeightMatrix::new(GgmlType::Q8_0, 2, 32, &bytes),
            Err(MatmulError::WeightBytes { expected: 68, got: 34, .. })
        ));
        assert!(matches!(WeightMatrix::new(GgmlType::Q8_0, 1, 30, &bytes), Err(MatmulError::PartialBlock { .. })));
        let w = WeightMatrix::new(GgmlType::Q8_0, 1, 32, &bytes).unwrap();
        let mut y = vec![0.0; 1];
        assert!(matches!(matmul(&w, &[0.0; 31], 1, &mut y), Err(MatmulError::Activations { .. })));
        let mut row = vec![0.0; 32];
        assert_eq!(get_rows(&w, &[1], &mut row), Err(MatmulError::RowId { id: 1, rows: 1 }));
    }
}
