//! The recurrent layers' ops of the kernel backend (LFM2's and Mamba-2's causal convolutions,
//! Mamba-2's scan, the gated delta rule): each checks its shapes, finds the state pool's slots
//! and launches over the runs of rows that continue a state.

use kernels::launch;
use kernels::Runtime;

use super::{DeviceKvStore, DeviceTensor, DeviceVector, KernelBackend};
use crate::backend::{BackendError, DeltaShape, SsmShape, StatePart, StateRun};

/// Each run's snapshots as the launchers take them (slots as indices).
fn run_snapshots(runs: &[StateRun]) -> Vec<Vec<(usize, usize)>> {
    runs.iter().map(|r| r.snapshots.iter().map(|&(i, s)| (i, s as usize)).collect()).collect()
}

/// The runs as the launchers take them.
fn conv_runs<'a>(runs: &'a [StateRun], snapshots: &'a [Vec<(usize, usize)>]) -> Vec<launch::ConvRun<'a>> {
    runs.iter().zip(snapshots).map(|(r, snaps)| launch::ConvRun { rows: &r.rows, slot: r.state as usize, snapshots: snaps }).collect()
}

impl<R: Runtime> KernelBackend<R> {
    /// A causal convolution with states (`conv_states`, or LFM2's `short_conv` when `gated`):
    /// rows in no run stay zeros, as on the CPU.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn convolve(
        &self,
        op: &'static str,
        x: &DeviceTensor<R>,
        kernel: &DeviceTensor<R>,
        gated: bool,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        let (d, taps) = (kernel.rows, kernel.cols);
        let width = if gated { 3 * d } else { d };
        if x.cols != width || taps < 2 || part.len != (taps - 1) * d {
            return Err(BackendError::shape(
                op,
                format!("rows of {} for a kernel of {d} x {taps} and a state part of {} values", x.cols, part.len),
            ));
        }
        let (buf, slots, slot_floats) = store.state_pool().ok_or_else(|| BackendError::shape(op, "no state slot is in use"))?;
        let every_row = runs.iter().map(|r| r.rows.len()).sum::<usize>() == x.rows;
        let out = if every_row { self.output(op, x.rows, d)? } else { self.tensor(op, x.rows, d)? };
        let snapshots = run_snapshots(runs);
        let pool = launch::StatePool { buf, slots, slot_floats, part_offset: part.offset };
        launch::conv_states(&*self.rt, x.buf(), x.rows, kernel.buf(), [d, taps], gated, pool, out.buf(), &conv_runs(runs, &snapshots))
            .map_err(self.fail(op))?;
        Ok(out)
    }

    /// [`Backend::ssm_scan`](crate::backend::Backend::ssm_scan): Mamba-2's selective scan over the runs' states.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_states(
        &self,
        [xbc, dt]: [&DeviceTensor<R>; 2],
        [a, d]: [&DeviceVector<R>; 2],
        shape: SsmShape,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        const OP: &str = "ssm_scan";
        let SsmShape { n_head, head_dim, n_group, d_state } = shape;
        let d_inner = n_head * head_dim;
        if xbc.cols != d_inner + 2 * n_group * d_state
            || dt.cols != n_head
            || dt.rows != xbc.rows
            || a.len != n_head
            || d.len != n_head
            || part.len != shape.state_len()
        {
            return Err(BackendError::shape(OP, format!("{shape:?}: rows of {} and {}, a state part of {}", xbc.cols, dt.cols, part.len)));
        }
        let (buf, slots, slot_floats) = store.state_pool().ok_or_else(|| BackendError::shape(OP, "no state slot is in use"))?;
        let every_row = runs.iter().map(|r| r.rows.len()).sum::<usize>() == xbc.rows;
        let out = if every_row { self.output(OP, xbc.rows, d_inner)? } else { self.tensor(OP, xbc.rows, d_inner)? };
        let snapshots = run_snapshots(runs);
        let pool = launch::StatePool { buf, slots, slot_floats, part_offset: part.offset };
        let dims = [n_head, head_dim, n_group, d_state];
        launch::ssm_scan(&*self.rt, [xbc.buf(), dt.buf(), &a.buf, &d.buf], xbc.rows, dims, pool, out.buf(), &conv_runs(runs, &snapshots))
            .map_err(self.fail(OP))?;
        Ok(out)
    }

    /// [`Backend::delta_rule`](crate::backend::Backend::delta_rule): the gated delta rule over the runs' states.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn delta_states(
        &self,
        qkv: &DeviceTensor<R>,
        [alpha, beta]: [&DeviceTensor<R>; 2],
        [dt_bias, a]: [&DeviceVector<R>; 2],
        shape: DeltaShape,
        eps: f32,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        const OP: &str = "delta_rule";
        let DeltaShape { n_k_heads, n_v_heads, head_dim } = shape;
        let fits = qkv.cols == shape.qkv_width()
            && [alpha, beta].iter().all(|t| t.cols == n_v_heads && t.rows == qkv.rows)
            && dt_bias.len == n_v_heads
            && a.len == n_v_heads
            && part.len == shape.state_len();
        if !fits {
            return Err(BackendError::shape(OP, format!("{shape:?}: rows of {}, a state part of {}", qkv.cols, part.len)));
        }
        let (buf, slots, slot_floats) = store.state_pool().ok_or_else(|| BackendError::shape(OP, "no state slot is in use"))?;
        let width = n_v_heads * head_dim;
        let every_row = runs.iter().map(|r| r.rows.len()).sum::<usize>() == qkv.rows;
        let out = if every_row { self.output(OP, qkv.rows, width)? } else { self.tensor(OP, qkv.rows, width)? };
        let snapshots = run_snapshots(runs);
        let pool = launch::StatePool { buf, slots, slot_floats, part_offset: part.offset };
        let bufs = [qkv.buf(), alpha.buf(), beta.buf(), &dt_bias.buf, &a.buf];
        launch::delta_rule(&*self.rt, bufs, qkv.rows, [n_k_heads, n_v_heads, head_dim], eps, pool, out.buf(), &conv_runs(runs, &snapshots))
            .map_err(self.fail(OP))?;
        Ok(out)
    }
}
