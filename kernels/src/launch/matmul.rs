//! Launchers of the matrix products (`matvec.cu`, `matmul.cu`): the rows of a weight matrix
//! gathered and dequantized, activations quantized to Q8_1, dense products and a decoding
//! step's gated unit in one launch, and the tensor cores' self-check.

use super::experts::{check_experts, stack_bytes};
use super::{blocks_of, check, dim, go, int, ints, THREADS};
use crate::runtime::{Arg, Runtime, RuntimeError};

/// Threads per block of the matrix kernels.
pub(super) const MULMAT_THREADS: usize = 128;
/// Output columns per block of the float matrix kernels (warps of `mulmat.cuh`).
pub(super) const MULMAT_WARPS: usize = 4;
/// Activation rows per block of `mul_mat_f`.
pub const MULMAT_TILE: usize = 8;
/// Activation rows per block of the `_rows` matrix-vector kernels (`matvec.cu`), which take
/// batches of 2 up to the tiled kernels' (one row: `mul_mat_vec_q`).
pub const MATVEC_ROWS: usize = 8;
/// Chunks of 32 values per segment of a quantized product's sums (`mulmat.cuh`).
pub const SEGMENT_CHUNKS: usize = 8;
/// Weight rows and activation rows per block of `mul_mat_q`'s tensor-core tiles (`matmul.cu`).
pub(super) const MMA_W: usize = 64;
pub(super) const MMA_X: usize = 32;

/// Lanes per output of the quantized matrix-vector body (`mulmat.cuh`) for rows of `n_chunks`
/// chunks: one per segment up to a warp, a power of two. The bits do not depend on it.
pub(super) fn lanes_per_output(n_chunks: usize) -> usize {
    n_chunks.div_ceil(SEGMENT_CHUNKS).next_power_of_two().min(32)
}

/// Bytes of a Q8_1 block of 32 values.
pub const Q8_1_BYTES: usize = 36;

/// A weight matrix on the device: `rows` rows of `row_bytes` bytes of ggml type `ty` (its id).
#[derive(Clone, Copy, Debug)]
pub struct MatrixArgs {
    pub ty: u32,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

/// Row r of `out` (rows of `cols`) = row `ids[r]` of `table` (from byte `at` of its buffer)
/// dequantized; `None` leaves row r as it is.
pub fn get_rows<R: Runtime>(
    rt: &R,
    table: &R::Buffer,
    at: usize,
    m: MatrixArgs,
    ids: &[Option<u32>],
    out: &R::Buffer,
) -> Result<(), RuntimeError> {
    const K: &str = "get_rows";
    if let Some(bad) = ids.iter().flatten().find(|&&id| id as usize >= m.rows) {
        return Err(RuntimeError::Device(format!("{K}: row {bad} of {}", m.rows)));
    }
    check(rt, K, "table", table, at + m.rows * m.row_bytes)?;
    check(rt, K, "out", out, ids.len() * m.cols * 4)?;
    let idx: Vec<i32> = ids.iter().map(|id| id.map_or(-1, |v| v as i32)).collect();
    let idx = ints(rt, &idx)?;
    let args = [
        Arg::BufAt(table, at),
        Arg::Buf(&idx),
        Arg::Buf(out),
        Arg::I32(int(K, "cols", m.cols)?),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
    ];
    go(rt, K, [dim(K, "blocks", blocks_of(m.cols))?, dim(K, "rows", ids.len())?, 1], THREADS, &args)
}

/// `n_blocks` blocks of 32 f32 values of `x` as Q8_1 blocks into `out`.
pub fn quantize_q8_1<R: Runtime>(rt: &R, x: &R::Buffer, out: &R::Buffer, n_blocks: usize) -> Result<(), RuntimeError> {
    const K: &str = "quantize_q8";
    check(rt, K, "x", x, n_blocks * 32 * 4)?;
    check(rt, K, "out", out, n_blocks * Q8_1_BYTES)?;
    // one warp per block: 8 per block of 256 threads
    go(
        rt,
        K,
        [dim(K, "blocks", n_blocks.div_ceil(8))?, 1, 1],
        THREADS,
        &[Arg::Buf(x), Arg::Buf(out), Arg::I64(n_blocks as i64), Arg::I32(1)],
    )
}

/// The activations of a matrix product: Q8_1 blocks (quantized weights) or f32 rows (float
/// weights), `batch` rows of `m.cols` values.
pub enum MatmulInput<'a, B> {
    Q8_1(&'a B),
    F32(&'a B),
}

/// The kernel (of the quantized and float pair `kernels`) for input `x`, its buffer, the row's
/// inner size (Q8_1 blocks or values) and the bytes `rows` activation rows take.
pub(super) fn matmul_operands<'a, B>(
    kernels: (&'static str, &'static str),
    x: MatmulInput<'a, B>,
    m: MatrixArgs,
    rows: usize,
) -> Result<(&'static str, &'a B, usize, usize), RuntimeError> {
    Ok(match x {
        MatmulInput::Q8_1(b) => {
            if !m.cols.is_multiple_of(32) {
                return Err(RuntimeError::Device(format!("{}: {} columns are not whole blocks of 32", kernels.0, m.cols)));
            }
            (kernels.0, b, m.cols / 32, rows * m.cols / 32 * Q8_1_BYTES)
        }
        MatmulInput::F32(b) => (kernels.1, b, m.cols, rows * m.cols * 4),
    })
}

/// `out = x · wᵀ (+ bias)`: `batch` rows of `m.rows` outputs, the weights from byte `w_at` of
/// `w` (a whole number of rows into it). `tiled` picks `mul_mat_*` (8 rows per block) over
/// `mul_mat_vec_*` (one); an output's value is the same either way.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat<R: Runtime>(
    rt: &R,
    w: &R::Buffer,
    w_at: usize,
    m: MatrixArgs,
    x: MatmulInput<'_, R::Buffer>,
    batch: usize,
    bias: Option<&R::Buffer>,
    out: &R::Buffer,
    tiled: bool,
) -> Result<(), RuntimeError> {
    if let (false, 2.., MatmulInput::Q8_1(xq)) = (tiled, batch, &x) {
        // a few rows: the sets' kernel with one product (one body of 8-row tiles to compile)
        return mul_mat_vec_sets(rt, &[ProductSet { w, at: w_at, m, bias, out }], xq, batch);
    }
    let kernels = if tiled { ("mul_mat_q", "mul_mat_f") } else { ("mul_mat_vec_q", "mul_mat_vec_f") };
    let (kernel, xb, inner, x_bytes) = matmul_operands(kernels, x, m, batch)?;
    check(rt, kernel, "w", w, w_at + m.rows * m.row_bytes)?;
    check(rt, kernel, "x", xb, x_bytes)?;
    check(rt, kernel, "out", out, batch * m.rows * 4)?;
    if let Some(b) = bias {
        check(rt, kernel, "bias", b, m.rows * 4)?;
    }
    let lanes = lanes_per_output(inner);
    let (w_arg, row_bytes, ty, n_inner, n_batch) = (
        Arg::BufAt(w, w_at),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
        Arg::I32(int(kernel, "inner size", inner)?),
        Arg::I32(int(kernel, "batch", batch)?),
    );
    // the batch's rows: no experts (null id arrays: the slots' ids, or the tiles' experts and
    // slots; no stride; one row per slot)
    let (no_stride, no_ids, one, lanes_arg) = (Arg::I64(0), Arg::I64(0), Arg::I32(1), Arg::I32(lanes as i32));
    // per kernel: the outputs and rows a block takes, and the arguments before the common tail
    let (columns, rows, mut args) = match kernel {
        "mul_mat_q" => (MMA_W, MMA_X, vec![w_arg, no_stride, row_bytes, ty, n_inner, Arg::Buf(xb), n_batch, no_ids, Arg::I64(0), one]),
        "mul_mat_vec_q" => {
            (MULMAT_THREADS / lanes, 1, vec![w_arg, no_stride, row_bytes, ty, n_inner, lanes_arg, Arg::Buf(xb), n_batch, no_ids, one])
        }
        "mul_mat_f" => (MULMAT_WARPS, MULMAT_TILE, vec![w_arg, row_bytes, ty, n_inner, Arg::Buf(xb), n_batch]),
        _ => (MULMAT_WARPS, 1, vec![w_arg, no_stride, row_bytes, ty, n_inner, Arg::Buf(xb), n_batch, no_ids, one]),
    };
    let grid = [dim(kernel, "blocks", m.rows.div_ceil(columns))?, dim(kernel, "row tiles", batch.div_ceil(rows))?, 1];
    // an unused pointer when there is no bias
    let tail = [Arg::Buf(bias.unwrap_or(w)), Arg::Buf(out), Arg::I32(int(kernel, "outputs", m.rows)?), Arg::I32(i32::from(bias.is_some()))];
    args.extend(tail);
    go(rt, kernel, grid, MULMAT_THREADS as u32, &args)
}

/// One product of [`mul_mat_vec_sets`]: matrix `m` from byte `at` of `w`, its bias, its output.
#[derive(Clone, Copy)]
pub struct ProductSet<'a, B> {
    pub w: &'a B,
    pub at: usize,
    pub m: MatrixArgs,
    pub bias: Option<&'a B>,
    pub out: &'a B,
}

/// The most products [`mul_mat_vec_sets`] runs in one launch.
pub const PRODUCT_SETS_MAX: usize = 3;

/// `batch` rows of Q8_1 activations `xq` (a decoding step's, up to [`MATVEC_ROWS`] per block)
/// times up to [`PRODUCT_SETS_MAX`] matrices of one quantized type and row size (the query, key
/// and value projections) in one launch, each output with the bits [`mul_mat`] gives it alone.
pub fn mul_mat_vec_sets<R: Runtime>(rt: &R, sets: &[ProductSet<'_, R::Buffer>], xq: &R::Buffer, batch: usize) -> Result<(), RuntimeError> {
    let (kernel, tiles) = if batch == 1 { ("mul_mat_vec_q_sets", 1) } else { ("mul_mat_vec_q_sets_rows", batch.div_ceil(MATVEC_ROWS)) };
    const K: &str = "mul_mat_vec_q_sets";
    let Some(first) = sets.first() else { return Ok(()) };
    let m0 = first.m;
    if sets.len() > PRODUCT_SETS_MAX || sets.iter().any(|s| (s.m.ty, s.m.cols, s.m.row_bytes) != (m0.ty, m0.cols, m0.row_bytes)) {
        return Err(RuntimeError::Device(format!("{K}: 1 to {PRODUCT_SETS_MAX} matrices of one type and row size")));
    }
    let (_, xq, n_chunks, x_bytes) = matmul_operands((K, K), MatmulInput::Q8_1(xq), m0, batch)?;
    check(rt, K, "x", xq, x_bytes)?;
    for s in sets {
        check(rt, K, "w", s.w, s.at + s.m.rows * s.m.row_bytes)?;
        check(rt, K, "out", s.out, batch * s.m.rows * 4)?;
        if let Some(b) = s.bias {
            check(rt, K, "bias", b, s.m.rows * 4)?;
        }
    }
    let lanes = lanes_per_output(n_chunks);
    let per_block = MULMAT_THREADS / lanes;
    // absent sets: no outputs (their pointers never read), null biases
    let at = |i: usize| sets.get(i).unwrap_or(first);
    let rows = |i: usize| sets.get(i).map_or(0, |s| s.m.rows);
    let bias = |i: usize| match sets.get(i).and_then(|s| s.bias) {
        Some(b) => Arg::Buf(b),
        None => Arg::I64(0),
    };
    let blocks: usize = (0..PRODUCT_SETS_MAX).map(|i| rows(i).div_ceil(per_block)).sum();
    let mut args = vec![
        Arg::BufAt(at(0).w, at(0).at),
        Arg::BufAt(at(1).w, at(1).at),
        Arg::BufAt(at(2).w, at(2).at),
        Arg::I64(m0.row_bytes as i64),
        Arg::I32(m0.ty as i32),
        Arg::I32(int(K, "inner size", n_chunks)?),
        Arg::I32(lanes as i32),
        Arg::Buf(xq),
    ];
    if batch > 1 {
        args.push(Arg::I32(int(K, "rows", batch)?));
    }
    args.extend([
        bias(0),
        bias(1),
        bias(2),
        Arg::Buf(at(0).out),
        Arg::Buf(at(1).out),
        Arg::Buf(at(2).out),
        Arg::I32(int(K, "outputs", rows(0))?),
        Arg::I32(int(K, "outputs", rows(1))?),
        Arg::I32(int(K, "outputs", rows(2))?),
    ]);
    go(rt, kernel, [dim(K, "blocks", blocks)?, dim(K, "row tiles", tiles)?, 1], MULMAT_THREADS as u32, &args)
}

/// The slots of an indexed gated unit ([`mul_mat_glu`]): slot `p` is activation row
/// `p / per_row` times expert `ids[p]` of both stacks, whose experts lie `stride` bytes apart.
#[derive(Clone, Copy, Debug)]
pub struct GluSlots<'a> {
    pub ids: &'a [u32],
    pub count: usize,
    pub stride: usize,
    pub per_row: usize,
}

/// A gated unit's decoding step in one launch: `out = glu(act, x · gateᵀ (+ bias), x · upᵀ (+
/// bias))` for `batch` rows of Q8_1 activations (`slots` none; up to [`MATVEC_ROWS`] per block),
/// or for every slot of an indexed product (no biases; `batch` unused); `gate` and `up` (byte
/// offsets into their buffers, an expert stack's first) of the same type and shape `m`. The
/// bits of two [`mul_mat`]s (or [`mul_mat_id`](super::mul_mat_id)s) then [`glu`](super::glu)
/// (`act` as its).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_glu<R: Runtime>(
    rt: &R,
    (gate, gate_at): (&R::Buffer, usize),
    (up, up_at): (&R::Buffer, usize),
    m: MatrixArgs,
    (xq, batch): (&R::Buffer, usize),
    slots: Option<GluSlots<'_>>,
    biases: Option<(&R::Buffer, &R::Buffer)>,
    out: &R::Buffer,
    act: i32,
) -> Result<(), RuntimeError> {
    const K: &str = "mul_mat_vec_q_glu";
    let rows = slots.map_or(batch, |s| s.ids.len().div_ceil(s.per_row.max(1)));
    let outs = slots.map_or(batch, |s| s.ids.len());
    let (_, xb, inner, x_bytes) = matmul_operands((K, K), MatmulInput::Q8_1(xq), m, rows)?;
    let weights = slots.map_or(m.rows * m.row_bytes, |s| stack_bytes(s.count, s.stride, m));
    check(rt, K, "gate", gate, gate_at + weights)?;
    check(rt, K, "up", up, up_at + weights)?;
    check(rt, K, "x", xb, x_bytes)?;
    check(rt, K, "out", out, outs * m.rows * 4)?;
    if let Some((bg, bu)) = biases {
        if slots.is_some() {
            return Err(RuntimeError::Device(format!("{K}: biases of an indexed product")));
        }
        check(rt, K, "gate bias", bg, m.rows * 4)?;
        check(rt, K, "up bias", bu, m.rows * 4)?;
    }
    if let Some(s) = slots {
        check_experts(K, s.ids, s.count, s.stride, m)?;
        if s.ids.is_empty() {
            return Ok(());
        }
    }
    let ids = match slots {
        Some(s) => Some(ints(rt, &s.ids.iter().map(|&e| e as i32).collect::<Vec<i32>>())?),
        None => None,
    };
    let lanes = lanes_per_output(inner);
    let blocks = dim(K, "blocks", m.rows.div_ceil(MULMAT_THREADS / lanes))?;
    // unused pointers when there are no biases or ids
    let (bg, bu) = biases.unwrap_or((gate, gate));
    if slots.is_none() && batch > 1 {
        // a few sequences' rows, MATVEC_ROWS to a block
        let args = [
            Arg::BufAt(gate, gate_at),
            Arg::BufAt(up, up_at),
            Arg::I64(m.row_bytes as i64),
            Arg::I32(m.ty as i32),
            Arg::I32(int(K, "inner size", inner)?),
            Arg::I32(lanes as i32),
            Arg::Buf(xb),
            Arg::I32(int(K, "rows", batch)?),
            Arg::Buf(bg),
            Arg::Buf(bu),
            Arg::Buf(out),
            Arg::I32(int(K, "outputs", m.rows)?),
            Arg::I32(i32::from(biases.is_some())),
            Arg::I32(act),
        ];
        let tiles = dim(K, "row tiles", batch.div_ceil(MATVEC_ROWS))?;
        return go(rt, "mul_mat_vec_q_glu_rows", [blocks, tiles, 1], MULMAT_THREADS as u32, &args);
    }
    let grid = [blocks, dim(K, "slots", outs)?, 1];
    let args = [
        Arg::BufAt(gate, gate_at),
        Arg::BufAt(up, up_at),
        Arg::I64(slots.map_or(0, |s| s.stride) as i64),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
        Arg::I32(int(K, "inner size", inner)?),
        Arg::I32(lanes as i32),
        Arg::Buf(xb),
        ids.as_deref().map_or(Arg::I64(0), Arg::Buf),
        Arg::I32(int(K, "slots per row", slots.map_or(1, |s| s.per_row.max(1)))?),
        Arg::Buf(bg),
        Arg::Buf(bu),
        Arg::Buf(out),
        Arg::I32(int(K, "outputs", m.rows)?),
        Arg::I32(i32::from(biases.is_some())),
        Arg::I32(act),
    ];
    go(rt, K, grid, MULMAT_THREADS as u32, &args)
}
