//! The recurrent layers' causal depthwise convolutions on the CPU (LFM2's gated short
//! convolution, Mamba-2's and the delta nets'), over each sequence's rows in position order,
//! continuing the window its slot holds, and the slot handling the chunked recurrences share. A
//! row's output depends only on its own inputs and its sequence's earlier ones, in a fixed order,
//! so it has the same bits whether the row runs alone (decode), in a prompt's chunk, or beside
//! other sequences.

use rayon::prelude::*;

use super::backend::HostTensor;
use super::kv::CpuKvStore;
use crate::backend::{BackendError, StatePart, StateRun};

/// The slots a run reads and writes, taken out of the store while the kernel runs.
pub(super) struct RunSlots {
    pub(super) state: Box<[f32]>,
    pub(super) snapshots: Vec<Box<[f32]>>,
}

/// Checks the runs against `n_rows` rows: each row at most once, every index in range.
pub(super) fn check_runs(op: &'static str, n_rows: usize, runs: &[StateRun]) -> Result<(), BackendError> {
    let mut seen = vec![false; n_rows];
    for run in runs {
        for &r in &run.rows {
            if r >= n_rows || std::mem::replace(&mut seen[r], true) {
                return Err(BackendError::shape(op, format!("row {r} of {n_rows} is out of range or in two runs")));
            }
        }
        if run.snapshots.iter().any(|&(i, _)| i >= run.rows.len()) {
            return Err(BackendError::shape(op, "a snapshot after a row the run does not have"));
        }
    }
    Ok(())
}

/// Takes every slot of `runs` out of `store` (or none, on an error).
pub(super) fn take_slots(store: &mut CpuKvStore, runs: &[StateRun]) -> Result<Vec<RunSlots>, BackendError> {
    let mut taken: Vec<RunSlots> = Vec::with_capacity(runs.len());
    let result = runs.iter().try_for_each(|run| {
        let state = store.take_state(run.state)?;
        let mut snapshots = Vec::with_capacity(run.snapshots.len());
        for &(_, id) in &run.snapshots {
            match store.take_state(id) {
                Ok(s) => snapshots.push(s),
                Err(e) => {
                    put_slots(store, &runs[taken.len()..=taken.len()], vec![RunSlots { state, snapshots }]);
                    return Err(e);
                }
            }
        }
        taken.push(RunSlots { state, snapshots });
        Ok(())
    });
    if let Err(e) = result {
        put_slots(store, &runs[..taken.len()], taken);
        return Err(e);
    }
    Ok(taken)
}

/// Puts the slots of `runs` back into `store`.
pub(super) fn put_slots(store: &mut CpuKvStore, runs: &[StateRun], slots: Vec<RunSlots>) {
    for (run, slots) in runs.iter().zip(slots) {
        store.put_state(run.state, slots.state);
        for (&(_, id), s) in run.snapshots.iter().zip(slots.snapshots) {
            store.put_state(id, s);
        }
    }
}

/// The causal depthwise convolution of every run: row `r`'s new values `u` (`input` fills
/// them), the channel's window of the state's `taps - 1` earlier rows then `u`, the sums from the
/// oldest tap (`emit` turns row `r`'s sums into its output row of `out_cols`); the runs in
/// parallel, each one's rows in order, snapshots after their rows.
#[allow(clippy::too_many_arguments)]
fn convolve(
    op: &'static str,
    n_rows: usize,
    kernel: &HostTensor,
    store: &mut CpuKvStore,
    part: StatePart,
    runs: &[StateRun],
    out_cols: usize,
    input: impl Fn(usize, &mut [f32]) + Sync,
    emit: impl Fn(usize, &[f32], &mut [f32]) + Sync,
) -> Result<HostTensor, BackendError> {
    let (ch, taps) = (kernel.rows, kernel.cols);
    if taps < 2 || part.len != (taps - 1) * ch {
        return Err(BackendError::shape(op, format!("a kernel of {ch} x {taps} and a state part of {} values", part.len)));
    }
    check_runs(op, n_rows, runs)?;
    let mut slots = take_slots(store, runs)?;
    if slots.iter().any(|s| s.state.len() < part.offset + part.len) {
        put_slots(store, runs, slots);
        return Err(BackendError::shape(op, "the state part lies outside the slots"));
    }
    // one run's outputs, its rows in order
    let outputs: Vec<Vec<f32>> = runs
        .par_iter()
        .zip(slots.par_iter_mut())
        .map(|(run, slots)| {
            let window = &mut slots.state[part.offset..part.offset + part.len]; // (taps - 1) x ch, oldest first
            let mut out = vec![0.0f32; run.rows.len() * out_cols];
            let (mut u, mut sums) = (vec![0.0f32; ch], vec![0.0f32; ch]);
            let mut next_snapshot = run.snapshots.iter().zip(slots.snapshots.iter_mut()).peekable();
            for (i, (&r, y)) in run.rows.iter().zip(out.chunks_exact_mut(out_cols)).enumerate() {
                input(r, &mut u);
                for (c, sum) in sums.iter_mut().enumerate() {
                    let tap = &kernel.data[c * taps..(c + 1) * taps];
                    let mut acc = 0.0f32;
                    for (k, &t) in tap[..taps - 1].iter().enumerate() {
                        acc += window[k * ch + c] * t;
                    }
                    *sum = acc + u[c] * tap[taps - 1];
                }
                emit(r, &sums, y);
                // the window moves one row on: the oldest row out, `u` in
                window.copy_within(ch.., 0);
                window[(taps - 2) * ch..].copy_from_slice(&u);
                if let Some(((_, _), snapshot)) = next_snapshot.next_if(|((at, _), _)| *at == i) {
                    snapshot[part.offset..part.offset + part.len].copy_from_slice(window);
                }
            }
            out
        })
        .collect();
    put_slots(store, runs, slots);
    Ok(scatter(n_rows, out_cols, runs, outputs))
}

/// Each run's output rows put back at their batch rows (rows in no run stay zeros).
fn scatter(n_rows: usize, cols: usize, runs: &[StateRun], outputs: Vec<Vec<f32>>) -> HostTensor {
    let mut y = HostTensor::zeros(n_rows, cols);
    for (run, out) in runs.iter().zip(outputs) {
        for (&r, values) in run.rows.iter().zip(out.chunks_exact(cols)) {
            y.data[r * cols..(r + 1) * cols].copy_from_slice(values);
        }
    }
    y
}

/// [`crate::backend::Backend::short_conv`] on the CPU.
pub(crate) fn short_conv(
    bcx: &HostTensor,
    kernel: &HostTensor,
    store: &mut CpuKvStore,
    part: StatePart,
    runs: &[StateRun],
) -> Result<HostTensor, BackendError> {
    let d = kernel.rows;
    if bcx.cols != 3 * d {
        return Err(BackendError::shape("short_conv", format!("rows of {} for a kernel of {d} channels", bcx.cols)));
    }
    let row = |r: usize| &bcx.data[r * 3 * d..(r + 1) * 3 * d];
    let input = |r: usize, u: &mut [f32]| {
        let (b, x) = (&row(r)[..d], &row(r)[2 * d..]);
        u.iter_mut().zip(b.iter().zip(x)).for_each(|(u, (&b, &x))| *u = b * x);
    };
    let emit = |r: usize, sums: &[f32], y: &mut [f32]| {
        let c = &row(r)[d..2 * d];
        y.iter_mut().zip(c.iter().zip(sums)).for_each(|(y, (&c, &s))| *y = c * s);
    };
    convolve("short_conv", bcx.rows, kernel, store, part, runs, d, input, emit)
}

/// [`crate::backend::Backend::conv_states`] on the CPU.
pub(crate) fn conv_states(
    x: &HostTensor,
    kernel: &HostTensor,
    store: &mut CpuKvStore,
    part: StatePart,
    runs: &[StateRun],
) -> Result<HostTensor, BackendError> {
    let ch = kernel.rows;
    if x.cols != ch {
        return Err(BackendError::shape("conv_states", format!("rows of {} for a kernel of {ch} channels", x.cols)));
    }
    let input = |r: usize, u: &mut [f32]| u.copy_from_slice(&x.data[r * ch..(r + 1) * ch]);
    let emit = |_: usize, sums: &[f32], y: &mut [f32]| y.copy_from_slice(sums);
    convolve("conv_states", x.rows, kernel, store, part, runs, ch, input, emit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{KvStorage, KvType, KvValues};

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// The convolution written out from its definition: every row's window read from the full
    /// history of `u` rows (zeros before the first).
    fn reference(bcx: &[f32], kernel: &[f32], d: usize, taps: usize) -> Vec<f32> {
        let n = bcx.len() / (3 * d);
        let u: Vec<f32> = (0..n * d).map(|i| bcx[(i / d) * 3 * d + i % d] * bcx[(i / d) * 3 * d + 2 * d + i % d]).collect();
        let mut y = vec![0.0f32; n * d];
        for t in 0..n {
            for ch in 0..d {
                let mut sum = 0.0f32;
                for k in 0..taps {
                    let back = taps - 1 - k; // tap k reads `back` rows before t
                    let v = if t >= back { u[(t - back) * d + ch] } else { 0.0 };
                    sum += v * kernel[ch * taps + k];
                }
                y[t * d + ch] = bcx[t * 3 * d + d + ch] * sum;
            }
        }
        y
    }

    #[test]
    fn rows_one_at_a_time_or_together_give_the_definitions_bits_and_snapshots_hold_the_states() {
        let (d, taps, n) = (8, 3, 5);
        let part = StatePart { offset: d, len: (taps - 1) * d }; // a second layer's part
        let bcx = HostTensor { rows: n, cols: 3 * d, data: values(n * 3 * d, 7) };
        let kernel = HostTensor { rows: d, cols: taps, data: values(d * taps, 11) };
        let want = reference(&bcx.data, &kernel.data, d, taps);
        let mut store = CpuKvStore::with_states(KvType::F32.into(), 1, 4, KvValues::Rows(4), 4 * d);
        for id in 0..4 {
            store.alloc_state(id).unwrap();
        }
        // all rows in one run, snapshots after rows 1 and 3
        let run = StateRun { rows: (0..n).collect(), state: 0, snapshots: vec![(1, 2), (3, 3)] };
        let y = short_conv(&bcx, &kernel, &mut store, part, &[run]).unwrap();
        assert_eq!(y.data, want);
        // one row per call continues the state: the same bits, and the same states on the way
        for r in 0..n {
            let one = HostTensor { rows: 1, cols: 3 * d, data: bcx.data[r * 3 * d..(r + 1) * 3 * d].to_vec() };
            let y = short_conv(&one, &kernel, &mut store, part, &[StateRun { rows: vec![0], state: 1, snapshots: vec![] }]).unwrap();
            assert_eq!(y.data, want[r * d..(r + 1) * d], "row {r}");
            if r == 1 || r == 3 {
                let snapshot = if r == 1 { 2 } else { 3 };
                assert_eq!(store.state(1), store.state(snapshot), "the state after row {r}");
            }
        }
        assert_eq!(store.state(0), store.state(1));
        // values outside the part are left alone
        assert!(store.state(0)[..d].iter().chain(&store.state(0)[3 * d..]).all(|&v| v == 0.0));
        // a row in two runs, or a slot not in use, is refused and the store keeps its slots
        let twice = [StateRun { rows: vec![0], state: 0, snapshots: vec![] }, StateRun { rows: vec![0], state: 1, snapshots: vec![] }];
        assert!(short_conv(&bcx, &kernel, &mut store, part, &twice).is_err());
        let missing = [StateRun { rows: vec![0], state: 0, snapshots: vec![(0, 9)] }];
        assert!(short_conv(&bcx, &kernel, &mut store, part, &missing).is_err());
        assert_eq!(store.state(0), store.state(1));
    }
}
