//! Mamba-2's selective scan and the gated delta rule (Qwen3.5) on the CPU in their chunked form
//! ([`RECURRENT_CHUNK`]): per head, a slot holds the state at the start of the current chunk and
//! the chunk's rows so far; a row's output is read from those by one formula, and the state moves
//! on only when its chunk is complete. A prompt's rows and a decoded row go through the same code,
//! so a row's bits do not depend on where its pass began.
//!
//! With `cum_t` the log-decays summed from the chunk's start to row `t` (`Γ_t = exp(cum_t)`,
//! `w_i = exp(cum_t - cum_i)`), `S_0` the state at the chunk's start, keys `k_i` and values
//! `u_i`: the state after row `t` is `Γ_t S_0 + Σ_{i ≤ t} w_i u_i k_iᵀ`, so a read of it with a
//! query `q` is `Γ_t (S_0 q) + Σ_i w_i (k_i · q) u_i`. Mamba-2's keys are B, its values `x · Δ`,
//! its query C; the delta rule's keys are the normalised keys, its values the corrections
//! `u_t = β (v_t - S_{t-1}' k_t)` (the state before row `t`, decayed), its query the
//! normalised query.

use rayon::prelude::*;

use super::backend::HostTensor;
use super::kv::CpuKvStore;
use super::low_rank::dot;
use super::recurrent::{check_runs, put_slots, take_slots, RunSlots};
use crate::backend::{BackendError, DeltaShape, SsmShape, StatePart, StateRun, RECURRENT_CHUNK};
use crate::quant::Isa;

/// One head's part of a state slot (the layout [`crate::backend::types::chunk_head_len`] counts).
struct ChunkHead<'a> {
    /// The state at the chunk's start: `rows` rows of `key_width` values.
    start: &'a mut [f32],
    /// The chunk's rows so far (a whole number below [`RECURRENT_CHUNK`]).
    count: &'a mut f32,
    /// Per row of the chunk: its cumulative log-decay from the chunk's start.
    decay: &'a mut [f32],
    /// Per row: its key, `key_width` values.
    keys: &'a mut [f32],
    /// Per row: its value, `rows` values.
    values: &'a mut [f32],
    key_width: usize,
    rows: usize,
}

impl<'a> ChunkHead<'a> {
    #[inline(always)]
    fn new(head: &'a mut [f32], rows: usize, key_width: usize) -> ChunkHead<'a> {
        let (start, rest) = head.split_at_mut(rows * key_width);
        let (count, rest) = rest.split_first_mut().expect("a head's row count");
        let (decay, rest) = rest.split_at_mut(RECURRENT_CHUNK);
        let (keys, values) = rest.split_at_mut(RECURRENT_CHUNK * key_width);
        ChunkHead { start, count, decay, keys, values, key_width, rows }
    }

    /// Places the next row in the chunk with its log-decay: its place `t` and `Γ_t`; `weights`
    /// becomes `w_i` for the rows `i < t`, then 1 for the row itself.
    #[inline(always)]
    fn begin_row(&mut self, log_decay: f32, weights: &mut Vec<f32>) -> (usize, f32) {
        // a count is only ever written below the chunk's size; min() keeps a damaged slot in bounds
        let t = (*self.count as usize).min(RECURRENT_CHUNK - 1);
        let cum = if t == 0 { log_decay } else { self.decay[t - 1] + log_decay };
        self.decay[t] = cum;
        weights.clear();
        weights.extend(self.decay[..t].iter().map(|&c| (cum - c).exp()));
        weights.push(1.0);
        (t, cum.exp())
    }

    #[inline(always)]
    fn key(&self, i: usize) -> &[f32] {
        &self.keys[i * self.key_width..(i + 1) * self.key_width]
    }

    #[inline(always)]
    fn set_row(&mut self, t: usize, key: &[f32], value: &[f32]) {
        self.keys[t * self.key_width..(t + 1) * self.key_width].copy_from_slice(key);
        self.values[t * self.rows..(t + 1) * self.rows].copy_from_slice(value);
    }

    /// `coefs[i] = weights[i] · (k_i · query)` for the first `coefs.len()` rows.
    #[inline(always)]
    fn coefficients(&self, query: &[f32], weights: &[f32], coefs: &mut [f32]) {
        for (i, c) in coefs.iter_mut().enumerate() {
            *c = weights[i] * dot(self.key(i), query);
        }
    }

    /// `out[r] = Γ · (S_0 row r · query) + Σ_i coefs[i] · u_i[r]`, the rows `i` in order.
    #[inline(always)]
    fn read(&self, gamma: f32, query: &[f32], coefs: &[f32], out: &mut [f32]) {
        for (o, row) in out.iter_mut().zip(self.start.chunks_exact(self.key_width)) {
            *o = gamma * dot(row, query);
        }
        for (&c, value) in coefs.iter().zip(self.values.chunks_exact(self.rows)) {
            out.iter_mut().zip(value).for_each(|(o, &v)| *o += c * v);
        }
    }

    /// Ends row `t`: the chunk complete, `S_0` becomes the state after it (`Γ_t S_0`, then the
    /// rows' `w_i u_i[r] k_i` added in order) and the count starts again.
    #[inline(always)]
    fn end_row(&mut self, t: usize, gamma: f32, weights: &[f32]) {
        if t + 1 < RECURRENT_CHUNK {
            *self.count = (t + 1) as f32;
            return;
        }
        let (kw, rows) = (self.key_width, self.rows);
        for (r, row) in self.start.chunks_exact_mut(kw).enumerate() {
            row.iter_mut().for_each(|s| *s *= gamma);
            for (i, &w) in weights[..=t].iter().enumerate() {
                let c = w * self.values[i * rows + r];
                row.iter_mut().zip(&self.keys[i * kw..(i + 1) * kw]).for_each(|(s, &k)| *s += c * k);
            }
        }
        *self.count = 0.0;
    }
}

/// A head's work in a recurrent op: its run's rows, its index, its part of the slot, its
/// snapshots' parts, and its outputs per row.
struct HeadTask<'a> {
    run: &'a StateRun,
    h: usize,
    head: &'a mut [f32],
    snapshot_heads: Vec<&'a mut [f32]>,
    width: usize,
}

/// Every (run, head) of the slots' `part`, cut into heads of `part.len / n_heads` values:
/// disjoint parts of the slots, so that the heads run in parallel.
fn head_tasks<'a>(slots: &'a mut [RunSlots], runs: &'a [StateRun], part: StatePart, n_heads: usize, width: usize) -> Vec<HeadTask<'a>> {
    let per_head = part.len / n_heads;
    let mut tasks = Vec::new();
    for (run, slot) in runs.iter().zip(slots.iter_mut()) {
        let mut snaps: Vec<std::slice::ChunksExactMut<'_, f32>> =
            slot.snapshots.iter_mut().map(|sn| sn[part.offset..part.offset + part.len].chunks_exact_mut(per_head)).collect();
        for (h, head) in slot.state[part.offset..part.offset + part.len].chunks_exact_mut(per_head).enumerate() {
            let snapshot_heads: Vec<&mut [f32]> = snaps.iter_mut().map(|c| c.next().expect("a head's part")).collect();
            tasks.push(HeadTask { run, h, head, snapshot_heads, width });
        }
    }
    tasks
}

/// A head task's buffers, reused from row to row: the chunk's weights and coefficients, and
/// three vectors of a head's width.
struct Scratch {
    weights: Vec<f32>,
    coefs: Vec<f32>,
    vectors: [Vec<f32>; 3],
}

/// Computes batch row `r`'s `width` outputs of head `h` from its part of the slot.
trait HeadRow: Sync {
    fn row(&self, r: usize, h: usize, head: &mut [f32], out: &mut [f32], scratch: &mut Scratch);
}

/// One head task's rows in order, its snapshots copied after their rows: the outputs, `width`
/// per row.
#[inline(always)]
fn head_rows(op: &impl HeadRow, task: HeadTask<'_>) -> Vec<f32> {
    let HeadTask { run, h, head, mut snapshot_heads, width } = task;
    let mut scratch = Scratch {
        weights: Vec::with_capacity(RECURRENT_CHUNK),
        coefs: vec![0.0; RECURRENT_CHUNK],
        vectors: [vec![0.0; width], vec![0.0; width], vec![0.0; width]],
    };
    let mut y = vec![0.0f32; run.rows.len() * width];
    let mut next_snapshot = 0;
    for (i, (&r, out)) in run.rows.iter().zip(y.chunks_exact_mut(width)).enumerate() {
        op.row(r, h, head, out, &mut scratch);
        if run.snapshots.get(next_snapshot).is_some_and(|&(at, _)| at == i) {
            snapshot_heads[next_snapshot].copy_from_slice(head);
            next_snapshot += 1;
        }
    }
    y
}

/// [`head_rows`] compiled for the widest vectors of tier `tier` the CPU has: the same
/// operations in the same order (no fused multiply-adds), so the same bits on every tier.
fn head_rows_on(tier: Isa, op: &impl HeadRow, task: HeadTask<'_>) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2")]
        unsafe fn with_avx512(op: &impl HeadRow, task: HeadTask<'_>) -> Vec<f32> {
            head_rows(op, task)
        }
        #[target_feature(enable = "avx2")]
        unsafe fn with_avx2(op: &impl HeadRow, task: HeadTask<'_>) -> Vec<f32> {
            head_rows(op, task)
        }
        if tier >= Isa::Avx512 && Isa::Avx512.is_available() {
            // SAFETY: the CPU has AVX-512 F/BW/VL/DQ and AVX2 (checked just above).
            return unsafe { with_avx512(op, task) };
        }
        if tier >= Isa::Avx2 && Isa::Avx2.is_available() {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { with_avx2(op, task) };
        }
    }
    let _ = tier;
    head_rows(op, task)
}

/// Runs `op` over every (run, head) of `part` in parallel on tier `tier`, each head's rows in
/// order, copying a head's part into its snapshots after their rows; the outputs at their batch
/// rows, head `h` at columns `h · width ..`: `n_rows x (n_heads · width)`, rows in no run zeros.
#[allow(clippy::too_many_arguments)]
fn run_heads(
    tier: Isa,
    store: &mut CpuKvStore,
    part: StatePart,
    runs: &[StateRun],
    n_rows: usize,
    n_heads: usize,
    width: usize,
    op: &'static str,
    rows: &impl HeadRow,
) -> Result<HostTensor, BackendError> {
    check_runs(op, n_rows, runs)?;
    let mut slots = take_slots(store, runs)?;
    if slots.iter().any(|sl| sl.state.len() < part.offset + part.len) {
        put_slots(store, runs, slots);
        return Err(BackendError::shape(op, "the state part lies outside the slots"));
    }
    let outputs: Vec<Vec<f32>> =
        head_tasks(&mut slots, runs, part, n_heads, width).into_par_iter().map(|task| head_rows_on(tier, rows, task)).collect();
    put_slots(store, runs, slots);
    let cols = n_heads * width;
    let mut y = HostTensor::zeros(n_rows, cols);
    for (t, out) in outputs.into_iter().enumerate() {
        let (run, h) = (&runs[t / n_heads], t % n_heads);
        for (&r, values) in run.rows.iter().zip(out.chunks_exact(width)) {
            y.data[r * cols + h * width..r * cols + (h + 1) * width].copy_from_slice(values);
        }
    }
    Ok(y)
}

/// ggml's softplus: `ln(1 + e^x)`, or `x` itself past 20.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// [`crate::backend::Backend::ssm_scan`] on the CPU, in the chunked form.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ssm_scan(
    tier: Isa,
    xbc: &HostTensor,
    dt: &HostTensor,
    a: &[f32],
    d_skip: &[f32],
    shape: SsmShape,
    store: &mut CpuKvStore,
    part: StatePart,
    runs: &[StateRun],
) -> Result<HostTensor, BackendError> {
    const OP: &str = "ssm_scan";
    let SsmShape { n_head, head_dim, n_group, d_state } = shape;
    let d_inner = n_head * head_dim;
    if n_group == 0
        || !n_head.is_multiple_of(n_group)
        || xbc.cols != d_inner + 2 * n_group * d_state
        || dt.cols != n_head
        || dt.rows != xbc.rows
        || a.len() != n_head
        || d_skip.len() != n_head
        || part.len != shape.state_len()
    {
        return Err(BackendError::shape(
            OP,
            format!(
                "{shape:?}: rows of {} and {}, {} decays, {} skips, a state part of {}",
                xbc.cols,
                dt.cols,
                a.len(),
                d_skip.len(),
                part.len
            ),
        ));
    }
    run_heads(tier, store, part, runs, xbc.rows, n_head, head_dim, OP, &ScanRows { xbc, dt, a, d_skip, shape })
}

/// Mamba-2's scan of one row of one head: the keys are B, the values `x · Δ`, the query C.
struct ScanRows<'a> {
    xbc: &'a HostTensor,
    dt: &'a HostTensor,
    a: &'a [f32],
    d_skip: &'a [f32],
    shape: SsmShape,
}

impl HeadRow for ScanRows<'_> {
    #[inline(always)]
    fn row(&self, r: usize, h: usize, head: &mut [f32], y: &mut [f32], scratch: &mut Scratch) {
        let SsmShape { n_head, head_dim, n_group, d_state } = self.shape;
        let (bc_at, g) = (n_head * head_dim, h / (n_head / n_group)); // B then C after the heads' values
        let mut head = ChunkHead::new(head, head_dim, d_state);
        let row = &self.xbc.data[r * self.xbc.cols..(r + 1) * self.xbc.cols];
        let x = &row[h * head_dim..(h + 1) * head_dim];
        let b = &row[bc_at + g * d_state..bc_at + (g + 1) * d_state];
        let c = &row[bc_at + (n_group + g) * d_state..bc_at + (n_group + g + 1) * d_state];
        let dt_soft = softplus(self.dt.data[r * n_head + h]);
        let (t, gamma) = head.begin_row(dt_soft * self.a[h], &mut scratch.weights);
        let x_dt = &mut scratch.vectors[0];
        x_dt.iter_mut().zip(x).for_each(|(o, &v)| *o = v * dt_soft);
        head.set_row(t, b, x_dt);
        let coefs = &mut scratch.coefs[..t + 1];
        head.coefficients(c, &scratch.weights, coefs);
        head.read(gamma, c, coefs, y);
        y.iter_mut().zip(x).for_each(|(y, &x)| *y += x * self.d_skip[h]);
        head.end_row(t, gamma, &scratch.weights);
    }
}

/// A query or key head divided by its L2 norm as llama.cpp's delta nets compute it: ggml's
/// `rms_norm` with `eps / n` (the squares summed in f64), then times `1 / sqrt(n)`.
pub(crate) fn l2_normalized(x: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f32;
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps / n).sqrt();
    let after = 1.0 / n.sqrt();
    out.iter_mut().zip(x).for_each(|(o, &v)| *o = (v * scale) * after);
}

/// [`crate::backend::Backend::delta_rule`] on the CPU, in the chunked form.
#[allow(clippy::too_many_arguments)]
pub(crate) fn delta_rule(
    tier: Isa,
    qkv: &HostTensor,
    [alpha, beta]: [&HostTensor; 2],
    [dt_bias, a]: [&[f32]; 2],
    shape: DeltaShape,
    eps: f32,
    store: &mut CpuKvStore,
    part: StatePart,
    runs: &[StateRun],
) -> Result<HostTensor, BackendError> {
    const OP: &str = "delta_rule";
    let DeltaShape { n_k_heads, n_v_heads, head_dim: s } = shape;
    let fits = n_k_heads > 0
        && n_v_heads.is_multiple_of(n_k_heads)
        && qkv.cols == shape.qkv_width()
        && [alpha, beta].iter().all(|t| t.cols == n_v_heads && t.rows == qkv.rows)
        && dt_bias.len() == n_v_heads
        && a.len() == n_v_heads
        && part.len == shape.state_len();
    if !fits {
        return Err(BackendError::shape(OP, format!("{shape:?}: rows of {}, a state part of {}", qkv.cols, part.len)));
    }
    run_heads(tier, store, part, runs, qkv.rows, n_v_heads, s, OP, &RuleRows { qkv, alpha, beta, dt_bias, a, shape, eps })
}

/// The delta rule on one row of one value head: the keys are the normalised keys, the values the
/// corrections `u = β (v - S' k)` (`S'` the state before the row, decayed), the query the
/// normalised query.
struct RuleRows<'a> {
    qkv: &'a HostTensor,
    alpha: &'a HostTensor,
    beta: &'a HostTensor,
    dt_bias: &'a [f32],
    a: &'a [f32],
    shape: DeltaShape,
    eps: f32,
}

impl HeadRow for RuleRows<'_> {
    #[inline(always)]
    fn row(&self, r: usize, h: usize, head: &mut [f32], y: &mut [f32], scratch: &mut Scratch) {
        let DeltaShape { n_k_heads, n_v_heads, head_dim: s } = self.shape;
        let (key_at, kh) = (n_k_heads * s, h % n_k_heads);
        let mut head = ChunkHead::new(head, s, s);
        let row = &self.qkv.data[r * self.qkv.cols..(r + 1) * self.qkv.cols];
        let [q, k, u] = &mut scratch.vectors;
        l2_normalized(&row[kh * s..(kh + 1) * s], self.eps, q);
        l2_normalized(&row[key_at + kh * s..key_at + (kh + 1) * s], self.eps, k);
        let v = &row[2 * key_at + h * s..2 * key_at + (h + 1) * s];
        let log_decay = softplus(self.alpha.data[r * n_v_heads + h] + self.dt_bias[h]) * self.a[h];
        let b = 1.0 / (1.0 + (-self.beta.data[r * n_v_heads + h]).exp());
        let (t, gamma) = head.begin_row(log_decay, &mut scratch.weights);
        // u = β (v - S' k): the state before this row, decayed, read with the key
        let coefs = &mut scratch.coefs[..t + 1];
        head.coefficients(k, &scratch.weights, &mut coefs[..t]);
        head.read(gamma, k, &coefs[..t], u);
        u.iter_mut().zip(v).for_each(|(u, &v)| *u = (v - *u) * b);
        head.set_row(t, k, u);
        // the output: the state after this row read with the query
        head.coefficients(q, &scratch.weights, coefs);
        head.read(gamma, q, coefs, y);
        let scale = 1.0 / (s as f32).sqrt();
        y.iter_mut().for_each(|y| *y *= scale);
        head.end_row(t, gamma, &scratch.weights);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{KvStorage, KvType, KvValues};

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// An op's call over some rows of a slot, on a tier: their outputs.
    type PassCall<'a> = dyn Fn(&mut CpuKvStore, std::ops::Range<usize>, StatePart, Isa) -> Vec<f32> + 'a;

    /// Runs `call` over `n` rows of a fresh slot split into passes of the `cuts` lengths, one
    /// run each: the outputs of every row, in order.
    fn in_passes(state_len: usize, n: usize, cuts: &[usize], call: &PassCall<'_>, tier: Isa) -> Vec<f32> {
        let part = StatePart { offset: 3, len: state_len };
        let mut store = CpuKvStore::with_states(KvType::F32.into(), 1, 4, KvValues::Rows(4), state_len + 5);
        store.alloc_state(0).unwrap();
        let (mut at, mut out) = (0, Vec::new());
        for &len in cuts.iter().chain(std::iter::once(&(n - cuts.iter().sum::<usize>()))) {
            out.extend(call(&mut store, at..at + len, part, tier));
            at += len;
        }
        out
    }

    /// Rows `rows` of `t`.
    fn rows_of(t: &HostTensor, rows: &std::ops::Range<usize>) -> HostTensor {
        HostTensor { rows: rows.len(), cols: t.cols, data: t.data[rows.start * t.cols..rows.end * t.cols].to_vec() }
    }

    /// One run of `n` rows continuing slot 0.
    fn one_run(n: usize) -> StateRun {
        StateRun { rows: (0..n).collect(), state: 0, snapshots: vec![] }
    }

    /// The outputs of `n` rows in one pass on the scalar tier, after checking that on every tier
    /// the rows one at a time, and in passes of the `cuts` lengths, give the same bits.
    fn same_bits_however_passed(state_len: usize, n: usize, cuts: &[usize], call: &PassCall<'_>) -> Vec<f32> {
        let whole = in_passes(state_len, n, &[], call, Isa::Scalar);
        for tier in Isa::available() {
            let one_at_a_time = in_passes(state_len, n, &vec![1; n - 1], call, tier);
            let ragged = in_passes(state_len, n, cuts, call, tier);
            assert!(whole == one_at_a_time && whole == ragged, "{tier:?}: a row's bits depend on its pass or its tier");
        }
        whole
    }

    /// The recurrence in its step-by-step form in f64, for one head of the delta rule.
    fn delta_steps(q: &[Vec<f32>], k: &[Vec<f32>], v: &[Vec<f32>], decay: &[f32], beta: &[f32]) -> Vec<f64> {
        let s = q[0].len();
        let mut state = vec![0.0f64; s * s];
        let mut out = Vec::new();
        for t in 0..q.len() {
            state.iter_mut().for_each(|x| *x *= f64::from(decay[t]).exp());
            for j in 0..s {
                let row = &mut state[j * s..(j + 1) * s];
                let dot: f64 = row.iter().zip(&k[t]).map(|(&x, &k)| x * f64::from(k)).sum();
                let delta = (f64::from(v[t][j]) - dot) * f64::from(beta[t]);
                row.iter_mut().zip(&k[t]).for_each(|(x, &k)| *x += f64::from(k) * delta);
                out.push(row.iter().zip(&q[t]).map(|(&x, &q)| x * f64::from(q)).sum::<f64>() / (s as f64).sqrt());
            }
        }
        out
    }

    #[test]
    fn the_delta_rule_in_chunks_is_the_recurrence_and_gives_the_same_bits_however_its_rows_are_passed() {
        // heads wider than the dot products' 64 lanes, so the vector code's lanes and rest both run
        let shape = DeltaShape { n_k_heads: 1, n_v_heads: 2, head_dim: 72 };
        let (s, heads, n) = (72, 2, 2 * RECURRENT_CHUNK + 7); // three chunks, the last partial
        let qkv = HostTensor { rows: n, cols: shape.qkv_width(), data: values(n * shape.qkv_width(), 5) };
        let alpha = HostTensor { rows: n, cols: heads, data: values(n * heads, 9) };
        let beta = HostTensor { rows: n, cols: heads, data: values(n * heads, 13) };
        let (dt_bias, a) = ([0.3f32, -0.2], [-0.4f32, -1.1]);
        let call = |store: &mut CpuKvStore, rows: std::ops::Range<usize>, part: StatePart, tier: Isa| {
            let (take, run) = (|t: &HostTensor| rows_of(t, &rows), one_run(rows.len()));
            delta_rule(tier, &take(&qkv), [&take(&alpha), &take(&beta)], [&dt_bias, &a], shape, 1e-6, store, part, &[run]).unwrap().data
        };
        let whole = same_bits_however_passed(shape.state_len(), n, &[5, RECURRENT_CHUNK, 1, 20], &call);
        // against the step-by-step recurrence
        for h in 0..heads {
            let (mut q, mut k, mut v, mut decay, mut b) = (vec![], vec![], vec![], vec![], vec![]);
            for r in 0..n {
                let row = &qkv.data[r * qkv.cols..(r + 1) * qkv.cols];
                let (mut qn, mut kn) = (vec![0.0; s], vec![0.0; s]);
                l2_normalized(&row[..s], 1e-6, &mut qn);
                l2_normalized(&row[s..2 * s], 1e-6, &mut kn);
                q.push(qn);
                k.push(kn);
                v.push(row[2 * s + h * s..2 * s + (h + 1) * s].to_vec());
                decay.push(softplus(alpha.data[r * heads + h] + dt_bias[h]) * a[h]);
                b.push(1.0 / (1.0 + (-beta.data[r * heads + h]).exp()));
            }
            let want = delta_steps(&q, &k, &v, &decay, &b);
            for r in 0..n {
                for j in 0..s {
                    let (got, want) = (f64::from(whole[r * heads * s + h * s + j]), want[r * s + j]);
                    assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "row {r} head {h} value {j}: {got} against {want}");
                }
            }
        }
    }

    #[test]
    fn the_scan_in_chunks_is_the_recurrence_and_gives_the_same_bits_however_its_rows_are_passed() {
        let shape = SsmShape { n_head: 2, head_dim: 4, n_group: 1, d_state: 70 };
        let (p, nst, n) = (4, 70, 3 * RECURRENT_CHUNK + 2);
        let cols = 2 * p + 2 * nst;
        let xbc = HostTensor { rows: n, cols, data: values(n * cols, 21) };
        let dt = HostTensor { rows: n, cols: 2, data: values(n * 2, 23) };
        let (a, d) = ([-0.5f32, -1.3], [0.7f32, -0.2]);
        let call = |store: &mut CpuKvStore, rows: std::ops::Range<usize>, part: StatePart, tier: Isa| {
            let (take, run) = (|t: &HostTensor| rows_of(t, &rows), one_run(rows.len()));
            ssm_scan(tier, &take(&xbc), &take(&dt), &a, &d, shape, store, part, &[run]).unwrap().data
        };
        let whole = same_bits_however_passed(shape.state_len(), n, &[RECURRENT_CHUNK - 1, 2, 50, 3], &call);
        // against the step-by-step recurrence, in f64
        let mut state = vec![0.0f64; 2 * p * nst];
        for r in 0..n {
            let row = &xbc.data[r * cols..(r + 1) * cols];
            let (b, c) = (&row[2 * p..2 * p + nst], &row[2 * p + nst..]);
            for h in 0..2 {
                let step = f64::from(softplus(dt.data[r * 2 + h]));
                for k in 0..p {
                    let x = f64::from(row[h * p + k]);
                    let st = &mut state[(h * p + k) * nst..(h * p + k + 1) * nst];
                    let mut sum = 0.0;
                    for j in 0..nst {
                        st[j] = st[j] * (step * f64::from(a[h])).exp() + f64::from(b[j]) * x * step;
                        sum += st[j] * f64::from(c[j]);
                    }
                    let want = sum + x * f64::from(d[h]);
                    let got = f64::from(whole[r * 2 * p + h * p + k]);
                    assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "row {r} head {h} value {k}: {got} against {want}");
                }
            }
        }
    }
}
