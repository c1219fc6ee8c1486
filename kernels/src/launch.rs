//! Typed launchers, one per kernel: each checks that its buffers hold what the launch geometry
//! makes the kernel read and write, uploads the small index arrays it is given from the host
//! (checking their values), and launches. They are safe to call: a size or an index that does
//! not fit is an error, never an out-of-bounds access on the device.

use crate::runtime::{Arg, Launch, Runtime, RuntimeError};

/// Threads per block of the element-wise and row kernels.
const THREADS: u32 = 256;
/// Threads per block of the matrix kernels.
const MULMAT_THREADS: usize = 128;
/// Output columns per block of the float matrix kernels (warps of `mulmat.cuh`).
const MULMAT_WARPS: usize = 4;
/// Activation rows per block of `mul_mat_f`.
pub const MULMAT_TILE: usize = 8;
/// Activation rows per block of `mul_mat_vec_q_rows` (`matvec.cu`), which takes batches of 2 up
/// to the tiled kernels' (one row: `mul_mat_vec_q`).
pub const MATVEC_ROWS: usize = 8;
/// Chunks of 32 values per segment of a quantized product's sums (`mulmat.cuh`).
pub const SEGMENT_CHUNKS: usize = 8;
/// Weight rows and activation rows per block of `mul_mat_q`'s tensor-core tiles (`matmul.cu`).
const MMA_W: usize = 64;
const MMA_X: usize = 32;

/// Lanes per output of the quantized matrix-vector body (`mulmat.cuh`) for rows of `n_chunks`
/// chunks: one per segment up to a warp, a power of two. The bits do not depend on it.
fn lanes_per_output(n_chunks: usize) -> usize {
    n_chunks.div_ceil(SEGMENT_CHUNKS).next_power_of_two().min(32)
}
/// The largest head size `attention`'s usual kernels take.
pub const ATTENTION_MAX_HEAD: usize = 256;
/// The widest key and value the `_wide` kernels take (multi-head latent attention's absorbed
/// form: the 512-value latent and a 64-value rotary key).
pub const ATTENTION_WIDE_KEY: usize = 576;
pub const ATTENTION_WIDE_VALUE: usize = 512;
/// Positions per split of a row's keys in `attention` (`attention.cu`): a row's positions are
/// cut at its multiples.
pub const ATTENTION_SPLIT: usize = 256;
/// Launches of fewer (row, head) blocks than this run each split as a block of its own
/// (`attention_split` + `attention_fold`), when the partials take at most
/// [`SPLIT_PARTIALS_MAX_BYTES`]: the same bits as one block per row, more blocks in flight.
const SPLIT_BELOW_BLOCKS: usize = 1024;
const SPLIT_PARTIALS_MAX_BYTES: usize = 64 << 20;
/// Positions per KV block (`kv.cu`, `attention.cu`).
pub const KV_BLOCK_POSITIONS: usize = 32;

/// The fewest entries a step's block tables are uploaded in (see [`attention`]).
const TABLE_ENTRIES_MIN: usize = 16;
/// Positions per chunk of `recurrent.cu`'s chunked recurrences (`ssm_scan`, `delta_rule`).
pub const RECURRENT_CHUNK: usize = 32;
/// The widest key (the delta rule's head size) `delta_rule` takes.
pub const RECURRENT_MAX_KEY: usize = 256;

/// Values of one head's part of a state slot in `recurrent.cu`'s chunked form: the state at the
/// chunk's start (`rows` x `key_width`), the row count, per row of the chunk its decay, key and
/// value.
pub const fn chunk_head_len(rows: usize, key_width: usize) -> usize {
    rows * key_width + 1 + RECURRENT_CHUNK * (1 + key_width + rows)
}

/// Bytes of a Q8_1 block of 32 values.
pub const Q8_1_BYTES: usize = 36;

fn check<R: Runtime>(rt: &R, kernel: &str, what: &str, buf: &R::Buffer, bytes: usize) -> Result<(), RuntimeError> {
    let have = rt.len(buf);
    if have < bytes {
        return Err(RuntimeError::Device(format!("{kernel}: {what} holds {have} bytes, the launch needs {bytes}")));
    }
    Ok(())
}

fn dim(kernel: &str, what: &str, v: usize) -> Result<u32, RuntimeError> {
    u32::try_from(v).ok().filter(|&v| v < 1 << 31).ok_or_else(|| RuntimeError::Device(format!("{kernel}: {what} {v} is out of range")))
}

fn int(kernel: &str, what: &str, v: usize) -> Result<i32, RuntimeError> {
    i32::try_from(v).map_err(|_| RuntimeError::Device(format!("{kernel}: {what} {v} is out of range")))
}

/// An index array for a launch to read (see [`Runtime::upload_read_only`]), from the caller's
/// place in the source (a recorded step shares index arrays by it).
#[track_caller]
fn ints<R: Runtime>(rt: &R, v: &[i32]) -> Result<std::sync::Arc<R::Buffer>, RuntimeError> {
    rt.upload_read_only(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

/// CUDA's limits on a launch (every GPU since compute capability 3.0): blocks along x, along y
/// and z, and threads per block.
pub const MAX_GRID_X: u32 = (1 << 31) - 1;
pub const MAX_GRID_YZ: u32 = 65_535;
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// Launches, unless the grid is empty (nothing to compute: no rows, no values). A grid beyond
/// CUDA's limits is an error here, naming the kernel, rather than the driver's bare
/// `CUDA_ERROR_INVALID_VALUE`.
fn go<R: Runtime>(rt: &R, kernel: &'static str, grid: [u32; 3], block: u32, args: &[Arg<'_, R::Buffer>]) -> Result<(), RuntimeError> {
    if grid.contains(&0) {
        return Ok(());
    }
    if grid[0] > MAX_GRID_X || grid[1] > MAX_GRID_YZ || grid[2] > MAX_GRID_YZ || block > MAX_BLOCK_THREADS {
        return Err(RuntimeError::Device(format!(
            "{kernel}: a grid of {}x{}x{} blocks of {block} threads is beyond CUDA's limits ({MAX_GRID_X} blocks along x, \
             {MAX_GRID_YZ} along y and z, {MAX_BLOCK_THREADS} threads); split the batch",
            grid[0], grid[1], grid[2]
        )));
    }
    // SAFETY: every caller below passes the kernel's parameters in order with their C types
    // (pointers as buffers, `int` as I32, `int64_t` as I64, `float` as F32), and has checked
    // that each buffer and index covers what this geometry touches.
    unsafe { rt.launch(Launch { kernel, grid, block }, args) }
}

fn blocks_of(n: usize) -> usize {
    n.div_ceil(THREADS as usize)
}

/// `x[i] += y[i] · scale` over `n` f32 values.
pub fn add_scaled<R: Runtime>(rt: &R, x: &R::Buffer, y: &R::Buffer, scale: f32, n: usize) -> Result<(), RuntimeError> {
    check(rt, "add_scaled", "x", x, n * 4)?;
    check(rt, "add_scaled", "y", y, n * 4)?;
    go(
        rt,
        "add_scaled",
        [dim("add_scaled", "blocks", blocks_of(n))?, 1, 1],
        THREADS,
        &[Arg::Buf(x), Arg::Buf(y), Arg::F32(scale), Arg::I64(n as i64)],
    )
}

/// `x[i] *= s` (`scale`) or `x[i] = tanh(x[i] / s) · s` (`softcap`) over `n` values.
/// `x` row r += `b` for every row of `cols` values (`n` values in all).
pub fn add_bias<R: Runtime>(rt: &R, x: &R::Buffer, b: &R::Buffer, cols: usize, n: usize) -> Result<(), RuntimeError> {
    const K: &str = "add_bias";
    check(rt, K, "x", x, n * 4)?;
    check(rt, K, "b", b, cols * 4)?;
    go(
        rt,
        K,
        [dim(K, "blocks", blocks_of(n))?, 1, 1],
        THREADS,
        &[Arg::Buf(x), Arg::Buf(b), Arg::I32(int(K, "cols", cols)?), Arg::I64(n as i64)],
    )
}

pub fn scale_or_cap<R: Runtime>(rt: &R, kernel: &'static str, x: &R::Buffer, s: f32, n: usize) -> Result<(), RuntimeError> {
    assert!(kernel == "scale" || kernel == "softcap", "scale_or_cap: {kernel}");
    check(rt, kernel, "x", x, n * 4)?;
    go(rt, kernel, [dim(kernel, "blocks", blocks_of(n))?, 1, 1], THREADS, &[Arg::Buf(x), Arg::F32(s), Arg::I64(n as i64)])
}

/// Every block of `block` values of `x` (`n` values in all) rotated by the orthonormal
/// Walsh-Hadamard matrix of that order (a power of two, at most 1024).
pub fn hadamard<R: Runtime>(rt: &R, x: &R::Buffer, block: usize, n: usize) -> Result<(), RuntimeError> {
    const K: &str = "hadamard";
    if !block.is_power_of_two() || block > MAX_BLOCK_THREADS as usize || !n.is_multiple_of(block) {
        return Err(RuntimeError::Device(format!("{K}: blocks of {block} (a power of two up to {MAX_BLOCK_THREADS}) over {n} values")));
    }
    check(rt, K, "x", x, n * 4)?;
    let scale = 1.0 / (block as f32).sqrt();
    go(rt, K, [dim(K, "blocks", n / block)?, 1, 1], block as u32, &[Arg::Buf(x), Arg::I32(block as i32), Arg::F32(scale)])
}

/// The most taps `conv_states` takes (`recurrent.cu`).
pub const SHORT_CONV_MAX_TAPS: usize = 8;

/// One sequence's rows for a recurrent kernel: the batch rows in position order, the state slot they
/// continue, and `(i, slot)`: the slot that gets the state after `rows[i]`, in row order.
pub struct ConvRun<'a> {
    pub rows: &'a [usize],
    pub slot: usize,
    pub snapshots: &'a [(usize, usize)],
}

/// The state pool and where one layer's state lies in a slot.
pub struct StatePool<'a, B> {
    pub buf: &'a B,
    pub slots: usize,
    pub slot_floats: usize,
    pub part_offset: usize,
}

/// The runs of a recurrent kernel as its index arrays: each run's rows, slot and snapshots
/// (checked: rows below `n_rows` and in one run each, slots below `slots` and used once,
/// snapshots after rows of their run in row order). `None` when the runs have no row.
struct RunArrays<B> {
    run_rows: std::sync::Arc<B>,
    rows: std::sync::Arc<B>,
    run_state: std::sync::Arc<B>,
    run_snaps: std::sync::Arc<B>,
    snap_row: std::sync::Arc<B>,
    snap_slot: std::sync::Arc<B>,
}

impl<B> RunArrays<B> {
    fn args(&self) -> [Arg<'_, B>; 6] {
        [
            Arg::Buf(&self.run_rows),
            Arg::Buf(&self.rows),
            Arg::Buf(&self.run_state),
            Arg::Buf(&self.run_snaps),
            Arg::Buf(&self.snap_row),
            Arg::Buf(&self.snap_slot),
        ]
    }
}

fn run_arrays<R: Runtime>(
    rt: &R,
    kernel: &str,
    n_rows: usize,
    slots: usize,
    runs: &[ConvRun<'_>],
) -> Result<Option<RunArrays<R::Buffer>>, RuntimeError> {
    let bad = |why: String| Err(RuntimeError::Device(format!("{kernel}: {why}")));
    let (mut row_seen, mut slot_seen) = (vec![false; n_rows], std::collections::HashSet::new());
    let (mut run_rows, mut rows, mut run_state, mut run_snaps, mut snap_row, mut snap_slot) =
        (vec![0i32], Vec::new(), Vec::new(), vec![0i32], Vec::new(), Vec::new());
    for run in runs {
        for &r in run.rows {
            if r >= n_rows || std::mem::replace(&mut row_seen[r], true) {
                return bad(format!("row {r} of {n_rows} is out of range or in two runs"));
            }
            rows.push(int(kernel, "row", r)?);
        }
        let mut last = None;
        for &(i, slot) in run.snapshots {
            if i >= run.rows.len() || last.is_some_and(|l| i <= l) {
                return bad(format!("a snapshot after row {i} of a run of {} (in row order)", run.rows.len()));
            }
            last = Some(i);
            snap_row.push(int(kernel, "snapshot row", i)?);
            snap_slot.push(int(kernel, "snapshot slot", slot)?);
        }
        for slot in std::iter::once(run.slot).chain(run.snapshots.iter().map(|&(_, s)| s)) {
            if slot >= slots || !slot_seen.insert(slot) {
                return bad(format!("state slot {slot} of {slots} is out of range or used twice"));
            }
        }
        run_state.push(int(kernel, "slot", run.slot)?);
        run_rows.push(int(kernel, "rows", rows.len())?);
        run_snaps.push(int(kernel, "snapshots", snap_row.len())?);
    }
    if rows.is_empty() {
        return Ok(None);
    }
    // index arrays of at least one value each (an empty upload is no buffer)
    snap_row.push(0);
    snap_slot.push(0);
    Ok(Some(RunArrays {
        run_rows: ints(rt, &run_rows)?,
        rows: ints(rt, &rows)?,
        run_state: ints(rt, &run_state)?,
        run_snaps: ints(rt, &run_snaps)?,
        snap_row: ints(rt, &snap_row)?,
        snap_slot: ints(rt, &snap_slot)?,
    }))
}

/// A causal depthwise convolution with states (`recurrent.cu`'s `conv_states`): `input` of
/// `n_rows` rows of `d` channels, or of `3 d` when `gated` (LFM2's `b`, `c`, `x`: the
/// convolution of `b · x` gated by `c`), `kernel` `d` x `taps`, `out` `n_rows` x `d`, each run's
/// rows continuing its slot's state in `pool`. Rows and slots may each appear once.
#[allow(clippy::too_many_arguments)]
pub fn conv_states<R: Runtime>(
    rt: &R,
    input: &R::Buffer,
    n_rows: usize,
    kernel: &R::Buffer,
    [d, taps]: [usize; 2],
    gated: bool,
    pool: StatePool<'_, R::Buffer>,
    out: &R::Buffer,
    runs: &[ConvRun<'_>],
) -> Result<(), RuntimeError> {
    const K: &str = "conv_states";
    if !(2..=SHORT_CONV_MAX_TAPS).contains(&taps) || d == 0 {
        return Err(RuntimeError::Device(format!("{K}: {taps} taps over {d} channels (2 to {SHORT_CONV_MAX_TAPS} taps)")));
    }
    if pool.part_offset + (taps - 1) * d > pool.slot_floats {
        return Err(RuntimeError::Device(format!(
            "{K}: a state of {} values from {} in slots of {}",
            (taps - 1) * d,
            pool.part_offset,
            pool.slot_floats
        )));
    }
    let width = if gated { 3 * d } else { d };
    check(rt, K, "input", input, n_rows * width * 4)?;
    check(rt, K, "kernel", kernel, d * taps * 4)?;
    check(rt, K, "out", out, n_rows * d * 4)?;
    check(rt, K, "states", pool.buf, pool.slots * pool.slot_floats * 4)?;
    let Some(arrays) = run_arrays(rt, K, n_rows, pool.slots, runs)? else { return Ok(()) };
    let mut args = vec![Arg::Buf(input), Arg::Buf(kernel), Arg::Buf(pool.buf), Arg::Buf(out)];
    args.extend(arrays.args());
    args.extend([
        Arg::I32(int(K, "d", d)?),
        Arg::I32(int(K, "taps", taps)?),
        Arg::I64(pool.slot_floats as i64),
        Arg::I64(pool.part_offset as i64),
        Arg::I32(i32::from(gated)),
    ]);
    go(rt, K, [dim(K, "blocks", blocks_of(d))?, dim(K, "runs", runs.len())?, 1], THREADS, &args)
}

/// Mamba-2's selective scan (`recurrent.cu`'s `ssm_scan`): `xbc` of `n_rows` rows of the heads'
/// values then B's and C's groups, `dt` of `n_rows` x `n_head`, `a` and `d` one per head, `out`
/// `n_rows` x `n_head · head_dim`, each run's rows continuing its slot's state (per head its chunk:
/// [`chunk_head_len`]`(head_dim, d_state)`) in `pool`.
#[allow(clippy::too_many_arguments)]
pub fn ssm_scan<R: Runtime>(
    rt: &R,
    [xbc, dt, a, d]: [&R::Buffer; 4],
    n_rows: usize,
    [n_head, head_dim, n_group, d_state]: [usize; 4],
    pool: StatePool<'_, R::Buffer>,
    out: &R::Buffer,
    runs: &[ConvRun<'_>],
) -> Result<(), RuntimeError> {
    const K: &str = "ssm_scan";
    let d_inner = n_head * head_dim;
    let cols = d_inner + 2 * n_group * d_state;
    if n_group == 0 || !n_head.is_multiple_of(n_group) || head_dim == 0 || head_dim > MAX_BLOCK_THREADS as usize || d_state == 0 {
        return Err(RuntimeError::Device(format!("{K}: {n_head} heads of {head_dim} in {n_group} groups, states of {d_state}")));
    }
    let state = n_head * chunk_head_len(head_dim, d_state);
    if pool.part_offset + state > pool.slot_floats {
        return Err(RuntimeError::Device(format!(
            "{K}: a state of {state} values from {} in slots of {}",
            pool.part_offset, pool.slot_floats
        )));
    }
    check(rt, K, "xbc", xbc, n_rows * cols * 4)?;
    check(rt, K, "dt", dt, n_rows * n_head * 4)?;
    check(rt, K, "a", a, n_head * 4)?;
    check(rt, K, "d", d, n_head * 4)?;
    check(rt, K, "out", out, n_rows * d_inner * 4)?;
    check(rt, K, "states", pool.buf, pool.slots * pool.slot_floats * 4)?;
    let Some(arrays) = run_arrays(rt, K, n_rows, pool.slots, runs)? else { return Ok(()) };
    let mut args = vec![Arg::Buf(xbc), Arg::Buf(dt), Arg::Buf(a), Arg::Buf(d), Arg::Buf(pool.buf), Arg::Buf(out)];
    args.extend(arrays.args());
    args.extend([
        Arg::I32(int(K, "n_head", n_head)?),
        Arg::I32(int(K, "head_dim", head_dim)?),
        Arg::I32(int(K, "n_group", n_group)?),
        Arg::I32(int(K, "d_state", d_state)?),
        Arg::I32(int(K, "cols", cols)?),
        Arg::I64(pool.slot_floats as i64),
        Arg::I64(pool.part_offset as i64),
    ]);
    go(rt, K, [dim(K, "heads", n_head)?, dim(K, "runs", runs.len())?, 1], head_dim as u32, &args)
}

/// Qwen3.5's gated delta rule (`recurrent.cu`'s `delta_rule`): `qkv` of `n_rows` rows of the
/// query, key and value heads, `alpha` and `beta` of `n_rows` x `n_v_heads`, `dt_bias` and `a`
/// one per value head, `out` `n_rows` x `n_v_heads · head_dim`, each run's rows continuing its
/// slot's state (per value head its chunk: [`chunk_head_len`]`(head_dim, head_dim)`) in `pool`.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule<R: Runtime>(
    rt: &R,
    [qkv, alpha, beta, dt_bias, a]: [&R::Buffer; 5],
    n_rows: usize,
    [n_k_heads, n_v_heads, head_dim]: [usize; 3],
    eps: f32,
    pool: StatePool<'_, R::Buffer>,
    out: &R::Buffer,
    runs: &[ConvRun<'_>],
) -> Result<(), RuntimeError> {
    const K: &str = "delta_rule";
    if n_k_heads == 0
        || !n_v_heads.is_multiple_of(n_k_heads)
        || head_dim == 0
        || head_dim > RECURRENT_MAX_KEY.min(MAX_BLOCK_THREADS as usize)
    {
        return Err(RuntimeError::Device(format!("{K}: {n_v_heads} value heads over {n_k_heads} key heads of {head_dim}")));
    }
    let state = n_v_heads * chunk_head_len(head_dim, head_dim);
    if pool.part_offset + state > pool.slot_floats {
        return Err(RuntimeError::Device(format!(
            "{K}: a state of {state} values from {} in slots of {}",
            pool.part_offset, pool.slot_floats
        )));
    }
    check(rt, K, "qkv", qkv, n_rows * (2 * n_k_heads + n_v_heads) * head_dim * 4)?;
    check(rt, K, "alpha", alpha, n_rows * n_v_heads * 4)?;
    check(rt, K, "beta", beta, n_rows * n_v_heads * 4)?;
    check(rt, K, "dt_bias", dt_bias, n_v_heads * 4)?;
    check(rt, K, "a", a, n_v_heads * 4)?;
    check(rt, K, "out", out, n_rows * n_v_heads * head_dim * 4)?;
    check(rt, K, "states", pool.buf, pool.slots * pool.slot_floats * 4)?;
    let Some(arrays) = run_arrays(rt, K, n_rows, pool.slots, runs)? else { return Ok(()) };
    let mut args = vec![Arg::Buf(qkv), Arg::Buf(alpha), Arg::Buf(beta), Arg::Buf(dt_bias), Arg::Buf(a), Arg::Buf(pool.buf), Arg::Buf(out)];
    args.extend(arrays.args());
    args.extend([
        Arg::I32(int(K, "n_k_heads", n_k_heads)?),
        Arg::I32(int(K, "n_v_heads", n_v_heads)?),
        Arg::I32(int(K, "head_dim", head_dim)?),
        Arg::F32(eps),
        Arg::I64(pool.slot_floats as i64),
        Arg::I64(pool.part_offset as i64),
    ]);
    go(rt, K, [dim(K, "heads", n_v_heads)?, dim(K, "runs", runs.len())?, 1], head_dim as u32, &args)
}

/// `out` row `out_rows[i]` += `weights[i]` · `src` row `src_rows[i]`, for `src` of `src_len` rows
/// and `out` of `out_len` rows of `cols`; an `out` row may appear only once.
#[allow(clippy::too_many_arguments)]
pub fn add_weighted_rows<R: Runtime>(
    rt: &R,
    out: &R::Buffer,
    out_len: usize,
    src: &R::Buffer,
    src_len: usize,
    pairs: &[(usize, usize, f32)],
    cols: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "add_weighted_rows";
    let mut seen = std::collections::HashSet::new();
    if let Some(&(s, o, _)) = pairs.iter().find(|&&(s, o, _)| s >= src_len || o >= out_len || !seen.insert(o)) {
        return Err(RuntimeError::Device(format!("{K}: source row {s} of {src_len} into row {o} of {out_len} (each once)")));
    }
    check(rt, K, "out", out, out_len * cols * 4)?;
    check(rt, K, "src", src, src_len * cols * 4)?;
    let src_rows: Vec<i32> = pairs.iter().map(|p| p.0 as i32).collect();
    let out_rows: Vec<i32> = pairs.iter().map(|p| p.1 as i32).collect();
    let weights: Vec<u8> = pairs.iter().flat_map(|p| p.2.to_le_bytes()).collect();
    let (src_rows, out_rows, weights) = (ints(rt, &src_rows)?, ints(rt, &out_rows)?, rt.upload_read_only(&weights)?);
    let grid = [dim(K, "blocks", blocks_of(cols))?, dim(K, "pairs", pairs.len())?, 1];
    let args =
        [Arg::Buf(out), Arg::Buf(src), Arg::Buf(&src_rows), Arg::Buf(&out_rows), Arg::Buf(&weights), Arg::I32(int(K, "cols", cols)?)];
    go(rt, K, grid, THREADS, &args)
}

/// Column blocks of a row: the first at `start`, each `stride` after the one before.
#[derive(Clone, Copy, Debug)]
pub struct Blocks {
    pub start: usize,
    pub stride: usize,
}

/// For each of `rows` rows and each of `count` blocks of `width` values: `out`'s block = `x`'s
/// block (`out` and `x` with their row widths and blocks; the caller checked that they fit).
pub fn copy_columns<R: Runtime>(
    rt: &R,
    (out, out_cols, to): (&R::Buffer, usize, Blocks),
    (x, x_cols, from): (&R::Buffer, usize, Blocks),
    rows: usize,
    width: usize,
    count: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "copy_columns";
    check(rt, K, "x", x, rows * x_cols * 4)?;
    check(rt, K, "out", out, rows * out_cols * 4)?;
    let n = width * count;
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let i = |what: &str, v: usize| int(K, what, v).map(Arg::I32);
    let args = [
        Arg::Buf(out),
        Arg::Buf(x),
        i("out_cols", out_cols)?,
        i("x_cols", x_cols)?,
        i("to_start", to.start)?,
        i("to_stride", to.stride)?,
        i("from_start", from.start)?,
        i("from_stride", from.stride)?,
        i("width", width)?,
        i("n", n)?,
    ];
    go(rt, K, [dim(K, "blocks", blocks_of(n))?, dim(K, "rows", rows)?, 1], THREADS, &args)
}

/// `out` row r = `x` row `pick[r]`; `x` has `rows` rows of `cols`.
pub fn select_rows<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    rows: usize,
    pick: &[usize],
    out: &R::Buffer,
    cols: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "select_rows";
    if let Some(&bad) = pick.iter().find(|&&r| r >= rows) {
        return Err(RuntimeError::Device(format!("{K}: row {bad} of {rows}")));
    }
    check(rt, K, "x", x, rows * cols * 4)?;
    check(rt, K, "out", out, pick.len() * cols * 4)?;
    let idx: Vec<i32> = pick.iter().map(|&r| r as i32).collect();
    let idx = ints(rt, &idx)?;
    let grid = [dim(K, "blocks", blocks_of(cols))?, dim(K, "rows", pick.len())?, 1];
    go(rt, K, grid, THREADS, &[Arg::Buf(x), Arg::Buf(&idx), Arg::Buf(out), Arg::I32(int(K, "cols", cols)?)])
}

/// RMS norm of every group of `n` values (`groups` of them) by `w`, into `y` (may be `x`).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    w: &R::Buffer,
    y: &R::Buffer,
    groups: usize,
    n: usize,
    eps: f32,
    w_groups: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "rms_norm";
    if w_groups == 0 {
        return Err(RuntimeError::Device(format!("{K}: a scale of no group")));
    }
    check(rt, K, "x", x, groups * n * 4)?;
    check(rt, K, "y", y, groups * n * 4)?;
    check(rt, K, "w", w, w_groups * n * 4)?;
    let args = [Arg::Buf(x), Arg::Buf(w), Arg::Buf(y), Arg::I32(int(K, "n", n)?), Arg::F32(eps), Arg::I32(int(K, "w_groups", w_groups)?)];
    go(rt, K, [dim(K, "groups", groups)?, 1, 1], THREADS, &args)
}

/// Layer norm of every row of `n` values by `w` and `b`, into `y`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    w: &R::Buffer,
    b: &R::Buffer,
    y: &R::Buffer,
    rows: usize,
    n: usize,
    eps: f32,
) -> Result<(), RuntimeError> {
    const K: &str = "layer_norm";
    check(rt, K, "x", x, rows * n * 4)?;
    check(rt, K, "y", y, rows * n * 4)?;
    check(rt, K, "w", w, n * 4)?;
    check(rt, K, "b", b, n * 4)?;
    let args = [Arg::Buf(x), Arg::Buf(w), Arg::Buf(b), Arg::Buf(y), Arg::I32(int(K, "n", n)?), Arg::F32(eps)];
    go(rt, K, [dim(K, "rows", rows)?, 1, 1], THREADS, &args)
}

/// The rotation of one `rope` launch.
#[derive(Clone, Copy, Debug)]
pub struct RopeArgs<'a> {
    pub n_head: usize,
    pub head_dim: usize,
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub neox: bool,
    /// Divisors of the pairs' angles (at least `n_dims / 2`), uploaded with the positions.
    pub factors: Option<&'a [f32]>,
    /// YaRN's extrapolation share and correction dims, when it applies.
    pub yarn: Option<(f32, [f32; 2])>,
    /// Scale of every cosine and sine.
    pub attn_factor: f32,
}

/// Rotates every head of row r of `x` for position `positions[r]`.
pub fn rope<R: Runtime>(rt: &R, x: &R::Buffer, positions: &[u32], a: RopeArgs) -> Result<(), RuntimeError> {
    const K: &str = "rope";
    if a.n_dims > a.head_dim || !a.n_dims.is_multiple_of(2) || a.factors.is_some_and(|f| f.len() < a.n_dims / 2) {
        return Err(RuntimeError::Device(format!(
            "{K}: {} rotated values of heads of {}, {:?} factors",
            a.n_dims,
            a.head_dim,
            a.factors.map(<[f32]>::len)
        )));
    }
    check(rt, K, "x", x, positions.len() * a.n_head * a.head_dim * 4)?;
    let pos: Vec<i32> = positions.iter().map(|&p| int(K, "position", p as usize)).collect::<Result<_, _>>()?;
    let pos = ints(rt, &pos)?;
    // a launch reads no factor when it has none, but its argument must still be a buffer
    let factors = rt.upload_read_only(&a.factors.unwrap_or(&[0.0]).iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())?;
    let (ext_factor, [corr_low, corr_high]) = a.yarn.unwrap_or((0.0, [0.0, 0.0]));
    let args = [
        Arg::Buf(x),
        Arg::Buf(&pos),
        Arg::Buf(&factors),
        Arg::I32(int(K, "heads", a.n_head)?),
        Arg::I32(int(K, "head size", a.head_dim)?),
        Arg::I32(int(K, "dims", a.n_dims)?),
        Arg::F32(a.freq_base),
        Arg::F32(a.freq_scale),
        Arg::F32(ext_factor),
        Arg::F32(corr_low),
        Arg::F32(corr_high),
        Arg::F32(a.attn_factor),
        Arg::I32(i32::from(a.neox)),
        Arg::I32(i32::from(a.factors.is_some())),
        Arg::I32(i32::from(a.yarn.is_some())),
    ];
    go(rt, K, [dim(K, "rows", positions.len())?, 1, 1], THREADS, &args)
}

/// `gate = act(gate) · up` over `rows` rows of `n` (act: 0 SiLU, 1 GELU, 2 exact GELU).
pub fn glu<R: Runtime>(rt: &R, gate: &R::Buffer, up: &R::Buffer, rows: usize, n: usize, act: i32) -> Result<(), RuntimeError> {
    const K: &str = "glu";
    check(rt, K, "gate", gate, rows * n * 4)?;
    check(rt, K, "up", up, rows * n * 4)?;
    let grid = [dim(K, "blocks", blocks_of(n))?, dim(K, "rows", rows)?, 1];
    go(rt, K, grid, THREADS, &[Arg::Buf(gate), Arg::Buf(up), Arg::I32(int(K, "n", n)?), Arg::I32(act)])
}

/// `x = act(x)` over `n` values.
pub fn activate<R: Runtime>(rt: &R, x: &R::Buffer, n: usize, act: i32) -> Result<(), RuntimeError> {
    const K: &str = "activate";
    check(rt, K, "x", x, n * 4)?;
    go(rt, K, [dim(K, "blocks", blocks_of(n))?, 1, 1], THREADS, &[Arg::Buf(x), Arg::I64(n as i64), Arg::I32(act)])
}

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
fn matmul_operands<'a, B>(
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
    let kernels = match (tiled, batch) {
        (true, _) => ("mul_mat_q", "mul_mat_f"),
        (false, 1) => ("mul_mat_vec_q", "mul_mat_vec_f"),
        (false, _) => ("mul_mat_vec_q_rows", "mul_mat_vec_f"),
    };
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
        "mul_mat_vec_q_rows" => {
            (MULMAT_THREADS / lanes, MATVEC_ROWS, vec![w_arg, row_bytes, ty, n_inner, lanes_arg, Arg::Buf(xb), n_batch])
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
/// bias))` for one row of Q8_1 activations (`slots` none), or for every slot of an indexed
/// product (no biases); `gate` and `up` (byte offsets into their buffers, an expert stack's
/// first) of the same type and shape `m`. The bits of two [`mul_mat`]s (or [`mul_mat_id`]s) then
/// [`glu`] (`act` as its).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_glu<R: Runtime>(
    rt: &R,
    (gate, gate_at): (&R::Buffer, usize),
    (up, up_at): (&R::Buffer, usize),
    m: MatrixArgs,
    xq: &R::Buffer,
    slots: Option<GluSlots<'_>>,
    biases: Option<(&R::Buffer, &R::Buffer)>,
    out: &R::Buffer,
    act: i32,
) -> Result<(), RuntimeError> {
    const K: &str = "mul_mat_vec_q_glu";
    let rows = slots.map_or(1, |s| s.ids.len().div_ceil(s.per_row.max(1)));
    let outs = slots.map_or(1, |s| s.ids.len());
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
    let grid = [dim(K, "blocks", m.rows.div_ceil(MULMAT_THREADS / lanes))?, dim(K, "slots", outs)?, 1];
    // unused pointers when there are no biases or ids
    let (bg, bu) = biases.unwrap_or((gate, gate));
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

/// Whether [`mul_mat_id`] runs `ids` (slots choosing among `count` experts) by expert tiles (a
/// prompt's slots), where [`mul_mat_glu`]'s slot by slot would read each expert once per slot.
pub fn expert_tiles_pay(ids: &[u32], count: usize) -> bool {
    ExpertTiles::worth_it(ids, count).is_some()
}

/// Checks an indexed product's expert ids (each below `count`) and its stack's stride (room for
/// one matrix `m` per expert).
fn check_experts(kernel: &str, ids: &[u32], count: usize, stride: usize, m: MatrixArgs) -> Result<(), RuntimeError> {
    if let Some(bad) = ids.iter().find(|&&e| e as usize >= count) {
        return Err(RuntimeError::Device(format!("{kernel}: expert {bad} of {count}")));
    }
    if count > 0 && stride < m.rows * m.row_bytes {
        return Err(RuntimeError::Device(format!("{kernel}: experts {stride} bytes apart hold {} each", m.rows * m.row_bytes)));
    }
    Ok(())
}

/// The bytes from a stack's first expert to the end of its last (`count` of `m`, `stride` apart).
fn stack_bytes(count: usize, stride: usize, m: MatrixArgs) -> usize {
    count.saturating_sub(1) * stride + m.rows * m.row_bytes
}

/// Experts stacked in one buffer for [`mul_mat_id`]: `count` matrices of `m`'s shape, expert
/// `e` from byte `at + e · stride`.
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub m: MatrixArgs,
    pub at: usize,
    pub stride: usize,
    pub count: usize,
}

/// Indexed products (ggml's `mul_mat_id`): out row `p` (of `s.m.rows` values) = activation row
/// `p / per_row` of `x` times expert `ids[p]` of the stack `w`, for every slot `p` of `ids`; each
/// slot has the bits `mul_mat` gives its row.
pub fn mul_mat_id<R: Runtime>(
    rt: &R,
    w: &R::Buffer,
    s: Stack,
    x: MatmulInput<'_, R::Buffer>,
    ids: &[u32],
    per_row: usize,
    out: &R::Buffer,
) -> Result<(), RuntimeError> {
    let m = s.m;
    let rows = ids.len().div_ceil(per_row.max(1));
    let (kernel, xb, inner, x_bytes) = matmul_operands(("mul_mat_vec_q", "mul_mat_vec_f"), x, m, rows)?;
    check_experts(kernel, ids, s.count, s.stride, m)?;
    if ids.is_empty() {
        return Ok(());
    }
    check(rt, kernel, "w", w, s.at + stack_bytes(s.count, s.stride, m))?;
    check(rt, kernel, "x", xb, x_bytes)?;
    check(rt, kernel, "out", out, ids.len() * m.rows * 4)?;
    let quantized = kernel == "mul_mat_vec_q";
    if quantized {
        if let Some(tiles) = ExpertTiles::worth_it(ids, s.count) {
            return mul_mat_id_tiles(rt, w, s, xb, inner, &tiles, per_row, out);
        }
    }
    let idx: Vec<i32> = ids.iter().map(|&e| e as i32).collect();
    let idx = ints(rt, &idx)?;
    let lanes = lanes_per_output(inner);
    let columns = if quantized { MULMAT_THREADS / lanes } else { MULMAT_WARPS };
    let grid = [dim(kernel, "blocks", m.rows.div_ceil(columns))?, dim(kernel, "slots", ids.len())?, 1];
    let mut args = vec![
        Arg::BufAt(w, s.at),
        Arg::I64(s.stride as i64),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
        Arg::I32(int(kernel, "inner size", inner)?),
    ];
    if quantized {
        args.push(Arg::I32(lanes as i32));
    }
    // no bias: `out` stands in for its pointer
    args.extend([
        Arg::Buf(xb),
        Arg::I32(int(kernel, "slots", ids.len())?),
        Arg::Buf(&idx),
        Arg::I32(int(kernel, "slots per row", per_row)?),
        Arg::Buf(out),
        Arg::Buf(out),
        Arg::I32(int(kernel, "outputs", m.rows)?),
        Arg::I32(0),
    ]);
    go(rt, kernel, grid, MULMAT_THREADS as u32, &args)
}

/// The slots of an indexed product grouped by expert into tiles of `MMA_X` (`matmul.cu`'s
/// `mul_mat_q` over expert tiles): tile `y` takes expert `experts[y]` and the slots
/// `slots[y · MMA_X ..][.. MMA_X]` (in slot order, -1 past the expert's last).
struct ExpertTiles {
    experts: Vec<i32>,
    slots: Vec<i32>,
}

impl ExpertTiles {
    /// The tiles, when the slots read each expert they choose at least twice on average (a
    /// prompt's rows): then reading an expert's weights once per tile pays for the tiles. Fewer
    /// (decoding) stay one slot per block. The bits are the same either way.
    fn worth_it(ids: &[u32], count: usize) -> Option<ExpertTiles> {
        let mut by_expert: Vec<Vec<i32>> = vec![Vec::new(); count];
        for (p, &e) in ids.iter().enumerate() {
            by_expert[e as usize].push(p as i32);
        }
        let chosen = by_expert.iter().filter(|s| !s.is_empty()).count();
        if ids.len() < 2 * chosen {
            return None;
        }
        let mut tiles = ExpertTiles { experts: Vec::new(), slots: Vec::new() };
        for (e, slots) in by_expert.iter().enumerate() {
            for part in slots.chunks(MMA_X) {
                tiles.experts.push(e as i32);
                tiles.slots.extend(part);
                tiles.slots.resize(tiles.experts.len() * MMA_X, -1);
            }
        }
        Some(tiles)
    }
}

/// [`mul_mat_id`] of quantized experts by `mul_mat_q`'s expert tiles: `x` holds Q8_1 rows of
/// `n_chunks` blocks (checked by the caller, as the stack, `ids` and `out`).
#[allow(clippy::too_many_arguments)]
fn mul_mat_id_tiles<R: Runtime>(
    rt: &R,
    w: &R::Buffer,
    s: Stack,
    xq: &R::Buffer,
    n_chunks: usize,
    tiles: &ExpertTiles,
    per_row: usize,
    out: &R::Buffer,
) -> Result<(), RuntimeError> {
    const K: &str = "mul_mat_q";
    let m = s.m;
    let (experts, slots) = (ints(rt, &tiles.experts)?, ints(rt, &tiles.slots)?);
    let grid = [dim(K, "blocks", m.rows.div_ceil(MMA_W))?, dim(K, "tiles", tiles.experts.len())?, 1];
    // no bias: `out` stands in for its pointer
    let args = [
        Arg::BufAt(w, s.at),
        Arg::I64(s.stride as i64),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
        Arg::I32(int(K, "inner size", n_chunks)?),
        Arg::Buf(xq),
        Arg::I32(0),
        Arg::Buf(&experts),
        Arg::Buf(&slots),
        Arg::I32(int(K, "slots per row", per_row)?),
        Arg::Buf(out),
        Arg::Buf(out),
        Arg::I32(int(K, "outputs", m.rows)?),
        Arg::I32(0),
    ];
    go(rt, K, grid, MULMAT_THREADS as u32, &args)
}

/// How a KV pool stores its values, as `kvcache.cuh` numbers the types: floats, or rows of
/// ggml's blocks of 32 quants with an f16 scale (the last block of a row padded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolElement {
    F32 = 0,
    F16 = 1,
    Q8_0 = 2,
    Q4_0 = 3,
}

impl PoolElement {
    /// Bytes of one row of `dim` values.
    pub fn row_bytes(self, dim: usize) -> usize {
        match self {
            PoolElement::F32 => 4 * dim,
            PoolElement::F16 => 2 * dim,
            PoolElement::Q8_0 => dim.div_ceil(32) * 34,
            PoolElement::Q4_0 => dim.div_ceil(32) * 18,
        }
    }

    fn code(self) -> i32 {
        self as i32
    }
}

/// A KV pool: `blocks` blocks of `n_layer` layers of 32 positions of `dim` values.
#[derive(Clone, Copy, Debug)]
pub struct PoolArgs {
    pub blocks: usize,
    pub n_layer: usize,
    pub dim: usize,
    pub element: PoolElement,
}

impl PoolArgs {
    pub fn bytes(&self) -> usize {
        self.blocks * self.n_layer * KV_BLOCK_POSITIONS * self.element.row_bytes(self.dim)
    }
}

/// Row r of `src` (rows of `pool.dim`) to position `slots[r].1` of block `slots[r].0`, layer `layer`.
pub fn kv_write<R: Runtime>(
    rt: &R,
    src: &R::Buffer,
    slots: &[(u32, usize)],
    pool_buf: &R::Buffer,
    pool: PoolArgs,
    layer: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "kv_write";
    if let Some(bad) = slots.iter().find(|&&(b, o)| b as usize >= pool.blocks || o >= KV_BLOCK_POSITIONS) {
        return Err(RuntimeError::Device(format!("{K}: slot {bad:?} outside {} blocks", pool.blocks)));
    }
    if layer >= pool.n_layer {
        return Err(RuntimeError::Device(format!("{K}: layer {layer} of {}", pool.n_layer)));
    }
    check(rt, K, "src", src, slots.len() * pool.dim * 4)?;
    check(rt, K, "pool", pool_buf, pool.bytes())?;
    let (bs, os): (Vec<i32>, Vec<i32>) = slots.iter().map(|&(b, o)| (b as i32, o as i32)).unzip();
    let (bs, os) = (ints(rt, &bs)?, ints(rt, &os)?);
    let args = [
        Arg::Buf(src),
        Arg::Buf(&bs),
        Arg::Buf(&os),
        Arg::Buf(pool_buf),
        Arg::I32(int(K, "dim", pool.dim)?),
        Arg::I32(int(K, "layers", pool.n_layer)?),
        Arg::I32(layer as i32),
        Arg::I32(pool.element.code()),
    ];
    // a quantized row is written a whole quant block per warp, the padding included
    let threads = if matches!(pool.element, PoolElement::F32 | PoolElement::F16) { pool.dim } else { pool.dim.div_ceil(32) * 32 };
    go(rt, K, [dim(K, "blocks", blocks_of(threads))?, dim(K, "rows", slots.len())?, 1], THREADS, &args)
}

/// The heads of an attention launch.
#[derive(Clone, Copy, Debug)]
pub struct HeadArgs {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub dk: usize,
    pub dv: usize,
    pub scale: f32,
    /// The scores' soft cap (0: none).
    pub softcap: f32,
}

/// Where `attention` reads keys and values.
pub enum KvArgs<'a, B> {
    /// Layer `layer` of two pools (keys, values); `tables` the block tables one after another.
    Pool { k: &'a B, v: &'a B, k_pool: PoolArgs, v_pool: PoolArgs, layer: usize, tables: &'a [u32] },
    /// f32 rows of the batch, `rows` of them.
    Rows { k: &'a B, v: &'a B, rows: usize },
}

/// One query row: its keys start at `kv` (a table's offset in `tables`, or a batch row) and it
/// attends to `positions`.
#[derive(Clone, Debug)]
pub struct QueryRow {
    pub kv: usize,
    pub positions: std::ops::Range<usize>,
}

/// `c = start + a · bᵀ` by the tensor cores' mma.sync m16n8k`k` (`selftest.cu`; `k` 32 or 16):
/// `a` 16 rows and `b` 8 rows of `k` signed bytes, `c` 16 x 8 `int32`, `start` each lane's
/// accumulators before the product (see the kernel).
pub fn mma_s8_check<R: Runtime>(rt: &R, a: &R::Buffer, b: &R::Buffer, c: &R::Buffer, k: usize) -> Result<(), RuntimeError> {
    const K: &str = "mma_s8_check";
    if k != 16 && k != 32 {
        return Err(RuntimeError::Device(format!("{K}: k {k} is neither 16 nor 32")));
    }
    check(rt, K, "a", a, 16 * k)?;
    check(rt, K, "b", b, 8 * k)?;
    check(rt, K, "c", c, 16 * 8 * 4)?;
    go(rt, K, [1, 1, 1], 32, &[Arg::Buf(a), Arg::Buf(b), Arg::Buf(c), Arg::I32(k as i32)])
}

/// How `attention` runs a row's splits: chosen by the launch's size (`Auto`), or one of the two
/// ways, which give the same bits (for the tests that show it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionPath {
    Auto,
    /// One block per (row, head) walks every split (`attention`).
    Whole,
    /// One block per (row, head, split), then the fold (`attention_split`, `attention_fold`).
    Split,
}

/// How many query heads `attention`'s blocks take: those sharing a KV head together, up to
/// [`ATTENTION_GROUP_MAX`] (the kernel's warps; the same bits either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadGrouping {
    /// The largest divisor of the heads per KV head up to [`ATTENTION_GROUP_MAX`].
    Shared,
    /// One head per block.
    One,
}

/// The most query heads (warps) in one block of `attention` (`ATTN_GROUP_MAX`).
pub const ATTENTION_GROUP_MAX: usize = 8;

impl HeadGrouping {
    fn heads_per_block(self, n_head: usize, n_head_kv: usize) -> usize {
        let group = n_head / n_head_kv;
        match self {
            HeadGrouping::One => 1,
            HeadGrouping::Shared => (1..=ATTENTION_GROUP_MAX.min(group)).rev().find(|d| group.is_multiple_of(*d)).unwrap_or(1),
        }
    }
}

/// Attention of every query row of `q` over its positions, into `out`.
pub fn attention<R: Runtime>(
    rt: &R,
    q: &R::Buffer,
    kv: KvArgs<'_, R::Buffer>,
    rows: &[QueryRow],
    h: HeadArgs,
    sinks: Option<&R::Buffer>,
    out: &R::Buffer,
) -> Result<(), RuntimeError> {
    attention_by(rt, q, kv, rows, h, sinks, out, AttentionPath::Auto, HeadGrouping::Shared)
}

/// [`attention`], its splits run the way `path` says and its heads grouped as `grouping` says.
/// `sinks`: one f32 logit per query head that joins each head's softmax without a value, folded
/// in once after a row's last split.
#[allow(clippy::too_many_arguments)]
pub fn attention_by<R: Runtime>(
    rt: &R,
    q: &R::Buffer,
    kv: KvArgs<'_, R::Buffer>,
    rows: &[QueryRow],
    h: HeadArgs,
    sinks: Option<&R::Buffer>,
    out: &R::Buffer,
    path: AttentionPath,
    grouping: HeadGrouping,
) -> Result<(), RuntimeError> {
    const K: &str = "attention";
    if h.dk > ATTENTION_WIDE_KEY || h.dv > ATTENTION_WIDE_VALUE || h.n_head_kv == 0 || !h.n_head.is_multiple_of(h.n_head_kv) {
        return Err(RuntimeError::Device(format!(
            "{K}: heads {}/{} of {}/{} (keys of at most {ATTENTION_WIDE_KEY}, values of at most {ATTENTION_WIDE_VALUE})",
            h.n_head, h.n_head_kv, h.dk, h.dv
        )));
    }
    // the kernels of the heads' width: the wide ones hold twice the accumulators per lane
    let [whole, split_k, fold_k] = if h.dk > ATTENTION_MAX_HEAD || h.dv > ATTENTION_MAX_HEAD {
        ["attention_wide", "attention_split_wide", "attention_fold_wide"]
    } else {
        ["attention", "attention_split", "attention_fold"]
    };
    check(rt, K, "q", q, rows.len() * h.n_head * h.dk * 4)?;
    check(rt, K, "out", out, rows.len() * h.n_head * h.dv * 4)?;
    if let Some(s) = sinks {
        check(rt, K, "sinks", s, h.n_head * 4)?;
    }
    // a null sinks pointer: none
    let sinks_arg = match sinks {
        Some(s) => Arg::Buf(s),
        None => Arg::I64(0),
    };
    for r in rows {
        if r.positions.is_empty() {
            return Err(RuntimeError::Device(format!("{K}: a query row attends to no position")));
        }
    }
    let info: Vec<i32> = rows.iter().flat_map(|r| [r.kv as i32, r.positions.start as i32, r.positions.end as i32]).collect();
    let info = ints(rt, &info)?;
    // the pools (or the batch's rows) and their arguments after `out` or `parts`
    let (k, v, tables, tail, v_row) = match kv {
        KvArgs::Pool { k, v, k_pool, v_pool, layer, tables } => {
            // value rows of their own, or the key rows (each value head a key head's start)
            let own_rows = v_pool.dim == h.n_head_kv * h.dv;
            let in_keys = v_pool.dim == k_pool.dim && h.dv <= h.dk;
            if k_pool.dim != h.n_head_kv * h.dk || !(own_rows || in_keys) || layer >= k_pool.n_layer {
                return Err(RuntimeError::Device(format!("{K}: the pools do not hold these heads")));
            }
            check(rt, K, "k pool", k, k_pool.bytes())?;
            check(rt, K, "v pool", v, v_pool.bytes())?;
            if let Some(bad) = tables.iter().find(|&&b| b as usize >= k_pool.blocks.min(v_pool.blocks)) {
                return Err(RuntimeError::Device(format!("{K}: block {bad} outside the pool")));
            }
            for r in rows {
                if r.kv + r.positions.end.div_ceil(KV_BLOCK_POSITIONS) > tables.len() {
                    return Err(RuntimeError::Device(format!("{K}: positions {:?} beyond the block table", r.positions)));
                }
            }
            // padded to a power of two (entries past the rows' own are never read), so that a
            // step's upload keeps its size while the sequences' tables grow, block by block,
            // and a recorded step replays (`steps.rs`)
            let mut t: Vec<i32> = tables.iter().map(|&b| b as i32).collect();
            t.resize(t.len().next_power_of_two().max(TABLE_ENTRIES_MIN), 0);
            let v_row = int(K, "value row", v_pool.dim)?;
            (k, v, Some(ints(rt, &t)?), [k_pool.element.code(), v_pool.element.code(), k_pool.n_layer as i32, layer as i32], v_row)
        }
        KvArgs::Rows { k, v, rows: n } => {
            if let Some(r) = rows.iter().find(|r| r.kv + r.positions.end > n) {
                return Err(RuntimeError::Device(format!("{K}: positions {:?} from row {} beyond {n} rows", r.positions, r.kv)));
            }
            check(rt, K, "k", k, n * h.n_head_kv * h.dk * 4)?;
            check(rt, K, "v", v, n * h.n_head_kv * h.dv * 4)?;
            (k, v, None, [PoolElement::F32.code(), PoolElement::F32.code(), 1, 0], (h.n_head_kv * h.dv) as i32)
        }
    };
    let heads = [
        Arg::I32(h.n_head as i32),
        Arg::I32(h.n_head_kv as i32),
        Arg::I32(h.dk as i32),
        Arg::I32(h.dv as i32),
        Arg::I32(v_row),
        Arg::F32(h.scale),
        Arg::F32(h.softcap),
        Arg::I32(tail[0]),
        Arg::I32(tail[1]),
        Arg::I32(tail[2]),
        Arg::I32(tail[3]),
    ];
    // a null table pointer selects the batch rows
    let table_arg = match &tables {
        Some(t) => Arg::Buf(&**t),
        None => Arg::I64(0),
    };
    let grid = [dim(K, "heads", h.n_head)?, dim(K, "rows", rows.len())?, 1];
    let heads_per_block = grouping.heads_per_block(h.n_head, h.n_head_kv);
    let (grouped, threads) = ([grid[0] / heads_per_block as u32, grid[1], 1], 32 * heads_per_block as u32);
    // padded to a power of two, so that the split launch's grid and the partials' size stay
    // the same while the rows grow from split to split, and a recorded step replays
    // (`steps.rs`); the blocks past a row's own splits leave at once, and the fold reads only
    // the row's own
    let max_splits = rows
        .iter()
        .map(|r| (r.positions.end - 1) / ATTENTION_SPLIT + 1 - r.positions.start / ATTENTION_SPLIT)
        .max()
        .unwrap_or(1)
        .next_power_of_two();
    let parts_bytes = rows.len() * h.n_head * max_splits * (2 + h.dv) * 4;
    let split = match path {
        AttentionPath::Auto => max_splits > 1 && rows.len() * h.n_head < SPLIT_BELOW_BLOCKS && parts_bytes <= SPLIT_PARTIALS_MAX_BYTES,
        AttentionPath::Whole => false,
        AttentionPath::Split => true,
    };
    if !split {
        let mut args = vec![Arg::Buf(q), Arg::Buf(k), Arg::Buf(v), Arg::Buf(&*info), table_arg, sinks_arg, Arg::Buf(out)];
        args.extend(heads);
        return go(rt, whole, grouped, threads, &args);
    }
    // every partial the fold reads is written by the split launch
    let parts = rt.alloc(parts_bytes)?;
    let splits = int("attention_split", "splits", max_splits)?;
    let mut args = vec![Arg::Buf(q), Arg::Buf(k), Arg::Buf(v), Arg::Buf(&*info), table_arg, Arg::Buf(&parts), Arg::I32(splits)];
    args.extend(heads);
    go(rt, split_k, [grouped[0], grouped[1], dim("attention_split", "splits", max_splits)?], threads, &args)?;
    let args =
        [Arg::Buf(&*info), Arg::Buf(&parts), Arg::I32(splits), sinks_arg, Arg::Buf(out), Arg::I32(h.n_head as i32), Arg::I32(h.dv as i32)];
    go(rt, fold_k, grid, 32, &args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn the_sources_sizes_are_the_launchers() {
        let define = |file: &str, name: &str| -> usize {
            let code = crate::sources::SOURCES.iter().chain(crate::sources::HEADERS).find(|s| s.name == file).expect("a source").code;
            let line = code.lines().find(|l| l.starts_with(&format!("#define {name} "))).expect("the define");
            line.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect("a number")
        };
        assert_eq!(define("recurrent.cu", "RECURRENT_CHUNK"), RECURRENT_CHUNK);
        assert_eq!(define("recurrent.cu", "RECURRENT_MAX_KEY"), RECURRENT_MAX_KEY);
        assert_eq!(define("attention.cu", "ATTN_SPLIT"), ATTENTION_SPLIT);
        assert_eq!(define("attention.cu", "ATTN_MAX_HEAD"), ATTENTION_MAX_HEAD);
        assert_eq!(define("attention.cu", "ATTN_WIDE_KEY"), ATTENTION_WIDE_KEY);
        assert_eq!(define("attention.cu", "ATTN_WIDE_VALUE"), ATTENTION_WIDE_VALUE);
        assert_eq!(define("attention.cu", "KV_BLOCK_POSITIONS"), KV_BLOCK_POSITIONS);
        assert_eq!(define("attention.cu", "ATTN_GROUP_MAX"), ATTENTION_GROUP_MAX);
        assert_eq!(define("mulmat.cuh", "MULMAT_THREADS"), MULMAT_THREADS);
        assert_eq!(define("mulmat.cuh", "MULMAT_WARPS"), MULMAT_WARPS);
        assert_eq!(define("matmul.cu", "MULMAT_TILE"), MULMAT_TILE);
        assert_eq!(define("mulmat.cuh", "SEGMENT_CHUNKS"), SEGMENT_CHUNKS);
        assert_eq!(define("matmul.cu", "MMA_W"), MMA_W);
        assert_eq!(define("matmul.cu", "MMA_X"), MMA_X);
        assert_eq!(define("matvec.cu", "MATVEC_ROWS"), MATVEC_ROWS);
    }

    #[test]
    fn attention_blocks_take_the_heads_of_a_kv_head_up_to_eight() {
        let per_block = |n_head, n_head_kv| HeadGrouping::Shared.heads_per_block(n_head, n_head_kv);
        // Llama-3-8B 32/8, Qwen2.5-0.5B 14/2, multi-head 16/16, 16 on one KV head (latent
        // attention), 12 on one
        assert_eq!([per_block(32, 8), per_block(14, 2), per_block(16, 16), per_block(16, 1), per_block(12, 1)], [4, 7, 1, 8, 6]);
        assert_eq!(HeadGrouping::One.heads_per_block(32, 8), 1);
    }

    #[test]
    fn a_prompts_slots_are_grouped_by_expert_into_tiles_and_a_decoding_steps_are_not() {
        // one token choosing 4 experts: one slot each, no tiles
        assert!(ExpertTiles::worth_it(&[3, 0, 7, 1], 8).is_none());
        // 40 slots on expert 2 and 3 on expert 5: two tiles of expert 2 (32 + 8), one of expert 5
        let ids: Vec<u32> = (0..43).map(|p| if p % 10 == 9 && p < 30 { 5 } else { 2 }).collect();
        let tiles = ExpertTiles::worth_it(&ids, 6).expect("tiles");
        assert_eq!(tiles.experts, [2, 2, 5]);
        assert_eq!(tiles.slots.len(), 3 * MMA_X);
        let on_2: Vec<i32> = (0..43).filter(|&p| ids[p as usize] == 2).collect();
        assert_eq!(tiles.slots[..MMA_X], on_2[..MMA_X]);
        assert_eq!(tiles.slots[MMA_X..MMA_X + 8], on_2[MMA_X..]);
        assert!(tiles.slots[MMA_X + 8..2 * MMA_X].iter().all(|&p| p == -1));
        assert_eq!(tiles.slots[2 * MMA_X..2 * MMA_X + 3], [9, 19, 29]);
        assert!(tiles.slots[2 * MMA_X + 3..].iter().all(|&p| p == -1));
    }

    /// Host buffers and a record of launches, no kernel run: for the checks made before one.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<Launch>>);

    impl Runtime for Recorder {
        type Buffer = Vec<u8>;
        fn alloc_zeroed(&self, bytes: usize) -> Result<Vec<u8>, RuntimeError> {
            Ok(vec![0; bytes])
        }
        fn upload(&self, data: &[u8]) -> Result<Vec<u8>, RuntimeError> {
            Ok(data.to_vec())
        }
        fn download(&self, buf: &Vec<u8>, out: &mut [u8]) -> Result<(), RuntimeError> {
            out.copy_from_slice(&buf[..out.len()]);
            Ok(())
        }
        fn copy(&self, _: &Vec<u8>, _: usize, _: &Vec<u8>, _: usize, _: usize) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn len(&self, buf: &Vec<u8>) -> usize {
            buf.len()
        }
        fn free_memory(&self) -> Option<usize> {
            None
        }
        unsafe fn launch(&self, launch: Launch, _: &[Arg<'_, Vec<u8>>]) -> Result<(), RuntimeError> {
            self.0.lock().unwrap().push(launch);
            Ok(())
        }
    }

    #[test]
    fn a_grid_beyond_cudas_limits_is_refused_before_the_launch() {
        let rt = Recorder::default();
        let (gate, up) = (vec![0u8; 70_000 * 4], vec![0u8; 70_000 * 4]);
        // one row per grid row along y: 65,535 rows launch, 65,536 do not
        glu(&rt, &gate, &up, 65_535, 1, 0).unwrap();
        let err = glu(&rt, &gate, &up, 65_536, 1, 0).unwrap_err().to_string();
        assert!(err.starts_with("glu: a grid of 1x65536x1 blocks"), "{err}");
        assert!(err.contains("65535 along y and z"), "{err}");
        let launched = rt.0.lock().unwrap();
        assert_eq!(launched.len(), 1);
        assert_eq!(launched[0].grid, [1, 65_535, 1]);
    }
}
