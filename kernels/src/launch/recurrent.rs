//! Launchers of the hybrids' recurrent layers (`recurrent.cu`): short convolutions, the
//! selective scan and the delta rule, each sequence's rows from its state slot.

use super::{blocks_of, check, dim, go, int, ints, MAX_BLOCK_THREADS, THREADS};
use crate::runtime::{Arg, Runtime, RuntimeError};

/// Positions per chunk of `recurrent.cu`'s chunked recurrences (`ssm_scan`, `delta_rule`).
pub const RECURRENT_CHUNK: usize = 32;
/// The widest key (the delta rule's head size) `delta_rule` takes.
pub const RECURRENT_MAX_KEY: usize = 256;
/// The largest head `ssm_scan` takes (a thread per value of the head: its registers leave room
/// for blocks of 512, not 1024; Mamba-2's heads are of 64).
pub const SSM_SCAN_MAX_HEAD: usize = 512;

/// Values of one head's part of a state slot in `recurrent.cu`'s chunked form: the state at the
/// chunk's start (`rows` x `key_width`), the row count, per row of the chunk its decay, key and
/// value.
pub const fn chunk_head_len(rows: usize, key_width: usize) -> usize {
    rows * key_width + 1 + RECURRENT_CHUNK * (1 + key_width + rows)
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
    if n_group == 0 || !n_head.is_multiple_of(n_group) || head_dim == 0 || head_dim > SSM_SCAN_MAX_HEAD || d_state == 0 {
        return Err(RuntimeError::Device(format!(
            "{K}: {n_head} heads of {head_dim} (at most {SSM_SCAN_MAX_HEAD}) in {n_group} groups, states of {d_state}"
        )));
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
