//! Scaled dot-product attention of query rows (all heads) over the cached keys and values of
//! their sequence, with grouped-query heads; a block of rows of one sequence shares each tile of
//! keys and values. Every sum runs in one fixed order that depends only on the positions a row
//! attends, never on the batch or the block, so results are batch-invariant.

use super::kv_rows::{InPlaceRows, KvRows};
use super::transpose::transpose;
use crate::backend::types::AttentionShape;
use crate::quant::ggml_expf;

/// Keys and values are visited in tiles of this many positions, aligned to multiples of it.
pub const KV_TILE: usize = 64;

/// Buffers reused between `attend_group` calls of one thread.
#[derive(Default)]
pub struct AttnScratch {
    /// The keys, then the values, of one tile as f32, position after position.
    tile_rows: Vec<f32>,
    /// The keys of one tile, transposed: `keys[d * KV_TILE + t]`.
    keys: Vec<f32>,
    /// The tile's weights of each query head of the group: `weights[j * KV_TILE + t]`.
    weights: Vec<f32>,
    /// Running maximum and sum of each query head's online softmax.
    max: Vec<f32>,
    sum: Vec<f32>,
    /// Whether the tile gives each head any weight at all.
    weighted: Vec<bool>,
}

impl AttnScratch {
    const fn new() -> AttnScratch {
        AttnScratch { tile_rows: Vec::new(), keys: Vec::new(), weights: Vec::new(), max: Vec::new(), sum: Vec::new(), weighted: Vec::new() }
    }
}

thread_local! {
    /// Each thread's buffers, kept from call to call: a fresh set per parallel task would
    /// allocate and zero them again hundreds of times a step.
    static SCRATCH: std::cell::RefCell<AttnScratch> = const { std::cell::RefCell::new(AttnScratch::new()) };
}

/// Runs `f` with this thread's attention buffers (`f` must not call back into it).
pub fn with_scratch<R>(f: impl FnOnce(&mut AttnScratch) -> R) -> R {
    SCRATCH.with_borrow_mut(f)
}

/// One query row of a block that shares a sequence: its heads' values, the positions it
/// attends, and its output for one key/value head's group of query heads.
pub struct Query<'a> {
    pub q: &'a [f32],
    pub positions: std::ops::Range<usize>,
    pub out: &'a mut [f32],
}

/// Attention of the query heads that share key/value head `g` (heads `g * group ..
/// (g + 1) * group`) of query row `q` over `positions` of `kv`, written to `out` (`group *
/// head_dim_v` values, head after head): [`attend_queries`] of one query.
pub fn attend_group(
    q: &[f32],
    g: usize,
    shape: &AttentionShape,
    positions: std::ops::Range<usize>,
    kv: &dyn KvRows,
    out: &mut [f32],
    scratch: &mut AttnScratch,
) {
    attend_group_with(crate::quant::Isa::active(), q, g, shape, positions, kv, out, scratch)
}

/// [`attend_group`] on tier `tier`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_group_with(
    tier: crate::quant::Isa,
    q: &[f32],
    g: usize,
    shape: &AttentionShape,
    positions: std::ops::Range<usize>,
    kv: &dyn KvRows,
    out: &mut [f32],
    scratch: &mut AttnScratch,
) {
    attend_queries_with(tier, &mut [Query { q, positions, out }], g, shape, None, kv, scratch)
}

/// Attention of a block of query rows of one sequence, for the query heads that share key/value
/// head `g`: each query's `out` gets its heads' outputs.
///
/// The arithmetic is that of ggml's tiled CPU flash attention, which llama.cpp runs for prompts
/// (at least 64 tokens per batch): key tiles of 64 aligned positions; each score a sequential
/// fused multiply-add chain, then scaled; an online softmax that rescales the running sum and
/// output whenever a tile raises the maximum (C library `expf`), the tile's weights from ggml's
/// polynomial exp summed per 16 lanes in double; each output element a sequential FMA chain over
/// the tile; a final division by the sum. Matching it bit for bit matters: small random-weight
/// models amplify a one-ulp difference into a visible change of the next token's probability.
/// The queries of the block and the heads of a group read the same keys and values, so each
/// tile is widened from f16 and transposed once for all of them, and (on AVX-512, whose 32
/// registers hold the chains of 4 of them) 4 (query, head) states at a time share every load of
/// a key or value vector; every query's and head's sums keep their own order, so the result is
/// that of one head of one query at a time, bit for bit, whatever the block.
pub fn attend_queries(queries: &mut [Query<'_>], g: usize, shape: &AttentionShape, kv: &dyn KvRows, scratch: &mut AttnScratch) {
    attend_queries_with(crate::quant::Isa::active(), queries, g, shape, None, kv, scratch)
}

/// [`attend_queries`] on tier `tier`, with attention sinks where given: one logit per query
/// head (all heads, not only this group's) that joins every row's softmax without a value
/// (gpt-oss), folded in after the last tile as ggml's flash attention folds it.
pub(crate) fn attend_queries_with(
    tier: crate::quant::Isa,
    queries: &mut [Query<'_>],
    g: usize,
    shape: &AttentionShape,
    sinks: Option<&[f32]>,
    kv: &dyn KvRows,
    scratch: &mut AttnScratch,
) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::quant::Isa;
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        unsafe fn with_avx512(
            queries: &mut [Query<'_>],
            g: usize,
            shape: &AttentionShape,
            sinks: Option<&[f32]>,
            kv: &dyn KvRows,
            scratch: &mut AttnScratch,
        ) {
            attend_queries_body::<4, true>(queries, g, shape, sinks, kv, scratch)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn with_fma(
            queries: &mut [Query<'_>],
            g: usize,
            shape: &AttentionShape,
            sinks: Option<&[f32]>,
            kv: &dyn KvRows,
            scratch: &mut AttnScratch,
        ) {
            // 16 registers: one state's 64 chains (8 vectors) already keep both FMA units busy
            attend_queries_body::<1, true>(queries, g, shape, sinks, kv, scratch)
        }
        if tier >= Isa::Avx512 && Isa::Avx512.is_available() {
            // SAFETY: the CPU has AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C (checked just above).
            return unsafe { with_avx512(queries, g, shape, sinks, kv, scratch) };
        }
        if tier >= Isa::Avx2 && Isa::Avx2.is_available() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { with_fma(queries, g, shape, sinks, kv, scratch) };
        }
    }
    let _ = tier;
    attend_queries_body::<1, false>(queries, g, shape, sinks, kv, scratch)
}

/// The body of [`attend_queries`], `N` (query, head) states at a time; `X86`: through
/// `attention_x86`'s register forms of the inner loops (only in the instances that run on CPUs
/// with AVX2 and FMA, and, for `N` = 4, AVX-512).
#[inline(always)]
fn attend_queries_body<const N: usize, const X86: bool>(
    queries: &mut [Query<'_>],
    g: usize,
    shape: &AttentionShape,
    sinks: Option<&[f32]>,
    kv: &dyn KvRows,
    scratch: &mut AttnScratch,
) {
    let AttnScratch { tile_rows, keys, weights, max, sum, weighted } = scratch;
    let group = shape.n_head / shape.n_head_kv;
    let (dk, dv) = (shape.head_dim_k, shape.head_dim_v);
    let (krange, vrange) = (g * dk..(g + 1) * dk, g * dv..(g + 1) * dv);
    for query in queries.iter_mut() {
        debug_assert_eq!(query.out.len(), group * dv);
        query.out.fill(0.0);
    }
    let attended = queries.iter().map(|x| x.positions.clone()).filter(|p| !p.is_empty());
    let (Some(start), Some(end)) = (attended.clone().map(|p| p.start).min(), attended.map(|p| p.end).max()) else {
        // nothing attended: a sink alone takes the whole softmax, and the output stays zero
        return;
    };
    // state s = i * group + j: query i, head g * group + j
    let rows: Vec<(&[f32], std::ops::Range<usize>)> = queries.iter().map(|x| (x.q, x.positions.clone())).collect();
    let mut heads: Vec<&mut [f32]> = queries.iter_mut().flat_map(|x| x.out.chunks_exact_mut(dv)).collect();
    let q_of = |s: usize| {
        let h = g * group + s % group;
        &rows[s / group].0[h * dk..(h + 1) * dk]
    };
    // positions a tile leaves unwritten (before a window's start, past the last position)
    // hold what an earlier tile left there: their scores are masked to -inf
    if keys.len() < dk * KV_TILE {
        keys.resize(dk * KV_TILE, 0.0);
    }
    // a tile's keys, then its values
    if tile_rows.len() < dk.max(dv) * KV_TILE {
        tile_rows.resize(dk.max(dv) * KV_TILE, 0.0);
    }
    let states = heads.len();
    weights.resize(states * KV_TILE, 0.0);
    max.clear();
    max.resize(states, f32::NEG_INFINITY);
    sum.clear();
    sum.resize(states, 0.0);
    weighted.clear();
    weighted.resize(states, false);
    let live_of = |positions: &std::ops::Range<usize>, tile: usize| tile.max(positions.start)..(tile + KV_TILE).min(positions.end);
    let mut live_states = Vec::with_capacity(states);
    let in_place = kv.in_place();
    for tile in (start / KV_TILE * KV_TILE..end).step_by(KV_TILE) {
        // the positions of the tile any query of the block attends
        let any = tile.max(start)..(tile + KV_TILE).min(end);
        // a whole tile of rows in place is read where it lies; otherwise its attended rows are
        // widened into `tile_rows` (the rest hold what an earlier tile left: masked)
        let rows_in_place = in_place.filter(|r| any.len() == KV_TILE && r.holds_tile(tile, dk));
        // the tile's keys transposed: `tile_keys[d * KV_TILE + t]`
        let tile_keys: &[f32] = match rows_in_place {
            Some(InPlaceRows::Rows { keys: rows, key_stride, .. }) => {
                transpose(&rows[tile * key_stride + krange.start..], KV_TILE, dk, key_stride, keys, KV_TILE);
                keys
            }
            Some(InPlaceRows::Head { keys: tiles, .. }) => &tiles[tile * dk..(tile + KV_TILE) * dk],
            None => {
                for p in any.clone() {
                    kv.key(p).widen_into(krange.clone(), &mut tile_rows[(p - tile) * dk..(p - tile + 1) * dk]);
                }
                transpose(tile_rows, KV_TILE, dk, dk, keys, KV_TILE);
                keys
            }
        };
        weighted.iter_mut().for_each(|w| *w = false);
        live_states.clear();
        live_states.extend((0..states).filter(|&s| !live_of(&rows[s / group].1, tile).is_empty()));
        // the raw scores of the live states, N at a time
        let mut batches = live_states.chunks_exact(N);
        for batch in batches.by_ref() {
            let batch: &[usize; N] = batch.try_into().unwrap();
            if X86 && N == 1 {
                scores_1::<X86>(q_of(batch[0]), tile_keys, batch[0] * KV_TILE, weights);
            } else {
                scores_n::<N, X86>(batch.map(q_of), tile_keys, batch.map(|s| s * KV_TILE), weights);
            }
        }
        for &s in batches.remainder() {
            scores_1::<X86>(q_of(s), tile_keys, s * KV_TILE, weights);
        }
        for &s in &live_states {
            let live = live_of(&rows[s / group].1, tile);
            let w: &mut [f32; KV_TILE] = (&mut weights[s * KV_TILE..(s + 1) * KV_TILE]).try_into().unwrap();
            if live == (tile..tile + KV_TILE) && shape.softcap == 0.0 {
                // the whole tile: one vector loop (the masked one below branches per position)
                w.iter_mut().for_each(|wt| *wt *= shape.scale);
            } else {
                for (t, wt) in w.iter_mut().enumerate() {
                    *wt = if live.contains(&(tile + t)) { shape.score(*wt) } else { f32::NEG_INFINITY };
                }
            }
            let tile_max = w.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            weighted[s] = tile_max != f32::NEG_INFINITY;
            if !weighted[s] {
                continue;
            }
            let new_max = max[s].max(tile_max);
            if new_max > max[s] {
                let rescale = (max[s] - new_max).exp();
                heads[s].iter_mut().for_each(|o| *o *= rescale);
                sum[s] *= rescale;
            }
            max[s] = new_max;
            w.iter_mut().for_each(|x| *x = ggml_expf(*x - new_max));
            let tile_sum: f64 = w.chunks_exact(16).map(|l| f64::from(reduce_16(l))).sum();
            sum[s] = (f64::from(sum[s]) + tile_sum) as f32;
        }
        if !weighted.contains(&true) {
            continue;
        }
        // the tile's values (in place, or widened once for every query and head), then each
        // head's output elements run their FMA chains over the positions in registers, 64 (or
        // 16) at a time, N states at once where they attend the same positions of the tile
        let (tile_values, stride): (&[f32], usize) = match rows_in_place {
            Some(InPlaceRows::Rows { values, value_stride, .. }) => (&values[tile * value_stride + vrange.start..], value_stride),
            Some(InPlaceRows::Head { values, .. }) => (&values[tile * dv..], dv),
            None => {
                for p in any.clone() {
                    kv.value(p).widen_into(vrange.clone(), &mut tile_rows[(p - tile) * dv..(p - tile + 1) * dv]);
                }
                (&tile_rows[..], dv)
            }
        };
        let span = |s: usize| {
            let live = live_of(&rows[s / group].1, tile);
            (live.start.saturating_sub(tile), live.end.saturating_sub(tile))
        };
        live_states.retain(|&s| weighted[s]);
        let mut i = 0;
        while i < live_states.len() {
            let s0 = live_states[i];
            let (first, last) = span(s0);
            let values = &tile_values[first * stride..];
            if N > 1 && i + N <= live_states.len() && live_states[i..i + N].iter().all(|&s| span(s) == (first, last)) {
                let batch: [usize; N] = live_states[i..i + N].try_into().unwrap();
                let ws = batch.map(|s| &weights[s * KV_TILE + first..s * KV_TILE + last]);
                let outs = heads.get_disjoint_mut(batch).expect("distinct states");
                add_weighted_values_n::<N, X86>(outs.map(|o| &mut **o), ws, values, stride);
                i += N;
            } else {
                add_weighted_values::<X86>(heads[s0], &weights[s0 * KV_TILE + first..s0 * KV_TILE + last], values, stride);
                i += 1;
            }
        }
    }
    if let Some(sinks) = sinks {
        // a partial of maximum `sink`, sum 1 and no values, folded in after the tiles
        for (s, oh) in heads.iter_mut().enumerate() {
            let sink = sinks[g * group + s % group];
            if sink > max[s] {
                let rescale = (max[s] - sink).exp();
                oh.iter_mut().for_each(|o| *o *= rescale);
                sum[s] = sum[s] * rescale + 1.0;
                max[s] = sink;
            } else {
                sum[s] += (sink - max[s]).exp();
            }
        }
    }
    for (oh, &s) in heads.iter_mut().zip(sum.iter()) {
        let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
        oh.iter_mut().for_each(|o| *o *= inv);
    }
}

/// The raw scores of `N` states over one tile: `out[at[n] + t] = Σ_d q[n][d] · keys[d][t]`,
/// each a sequential fused multiply-add chain over `d`, the `N` states' 64 chains side by side
/// in registers sharing every load of the keys.
#[inline(always)]
fn scores<const N: usize>(q: [&[f32]; N], keys: &[f32], at: [usize; N], out: &mut [f32]) {
    let mut acc = [[0.0f32; KV_TILE]; N];
    for d in 0..q[0].len() {
        let kd: &[f32; KV_TILE] = keys[d * KV_TILE..(d + 1) * KV_TILE].try_into().unwrap();
        for (acc, q) in acc.iter_mut().zip(&q) {
            let qd = q[d];
            for (a, &k) in acc.iter_mut().zip(kd) {
                *a = qd.mul_add(k, *a);
            }
        }
    }
    for (acc, at) in acc.iter().zip(at) {
        out[at..at + KV_TILE].copy_from_slice(acc);
    }
}

/// [`scores`] of `N` states, for 4 of them on AVX-512 (`X86`) in vector registers.
#[inline(always)]
fn scores_n<const N: usize, const X86: bool>(q: [&[f32]; N], keys: &[f32], at: [usize; N], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if X86 && N == 4 {
        // SAFETY: `X86` with `N` = 4 is set only in the attention's instance for CPUs with
        // AVX-512 (`attend_queries_with`'s `with_avx512`).
        unsafe { super::attention_x86::scores_4(q[..].try_into().unwrap(), keys, at[..].try_into().unwrap(), out) };
        return;
    }
    scores::<N>(q, keys, at, out)
}

/// [`scores`] of one state, on AVX2 (`X86`) in vector registers.
#[inline(always)]
fn scores_1<const X86: bool>(q: &[f32], keys: &[f32], at: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if X86 {
        // SAFETY: `X86` is set only in the attention's instance for CPUs with AVX2 and FMA
        // (`attend_queries_with`'s `with_fma`).
        unsafe { super::attention_x86::scores_1(q, keys, &mut out[at..at + KV_TILE]) };
        return;
    }
    scores::<1>([q], keys, [at], out)
}

/// [`add_weighted_values`] of `N` states with the same positions: each keeps its chains, the
/// loads of the values are shared (for 4 states on AVX-512, `X86`, in vector registers).
#[inline(always)]
fn add_weighted_values_n<const N: usize, const X86: bool>(mut outs: [&mut [f32]; N], ws: [&[f32]; N], values: &[f32], stride: usize) {
    let dv = outs[0].len();
    let wide = dv - dv % 16;
    #[cfg(target_arch = "x86_64")]
    if X86 && N == 4 && wide.is_multiple_of(64) {
        let ws4: [&[f32]; 4] = ws[..].try_into().unwrap();
        for start in (0..wide).step_by(64) {
            let [a, b, c, d] = &mut outs[..] else { unreachable!("N is 4") };
            let chunk = [&mut a[start..start + 64], &mut b[start..start + 64], &mut c[start..start + 64], &mut d[start..start + 64]];
            // SAFETY: as in `scores_n`: the instance for CPUs with AVX-512.
            unsafe { super::attention_x86::chains_4x64(chunk, start, stride, ws4, values) };
        }
        for (o, w) in outs.iter_mut().zip(&ws) {
            chains::<1>(&mut o[wide..], wide, stride, w, values);
        }
        return;
    }
    if wide.is_multiple_of(64) {
        chains_n::<N, 64>(&mut outs, wide, ws, values, stride);
    } else {
        chains_n::<N, 16>(&mut outs, wide, ws, values, stride);
    }
    for (o, w) in outs.iter_mut().zip(&ws) {
        chains::<1>(&mut o[wide..], wide, stride, w, values);
    }
}

/// The chains of [`add_weighted_values_n`] for elements `..wide` of each output, `W` at a time.
#[inline(always)]
fn chains_n<const N: usize, const W: usize>(outs: &mut [&mut [f32]; N], wide: usize, ws: [&[f32]; N], values: &[f32], stride: usize) {
    for start in (0..wide).step_by(W) {
        let mut acc: [[f32; W]; N] = std::array::from_fn(|n| outs[n][start..start + W].try_into().unwrap());
        for t in 0..ws[0].len() {
            let v: &[f32; W] = values[t * stride + start..t * stride + start + W].try_into().unwrap();
            for (acc, w) in acc.iter_mut().zip(&ws) {
                let wt = w[t];
                for (a, &x) in acc.iter_mut().zip(v) {
                    *a = wt.mul_add(x, *a);
                }
            }
        }
        for (o, acc) in outs.iter_mut().zip(&acc) {
            o[start..start + W].copy_from_slice(acc);
        }
    }
}

/// `out[e] += Σ_t w[t] · values[t * stride + e]`, one fused multiply-add chain per element
/// over the positions in order, with `W` chains side by side in a local array (on AVX2, 64 of
/// them in vector registers: `attention_x86`).
#[inline(always)]
fn add_weighted_values<const X86: bool>(out: &mut [f32], w: &[f32], values: &[f32], stride: usize) {
    let dv = out.len();
    let (wide, rest) = out.split_at_mut(dv - dv % 16);
    if wide.len() % 64 == 0 {
        #[cfg(target_arch = "x86_64")]
        if X86 {
            for (c, chunk) in wide.chunks_exact_mut(64).enumerate() {
                // SAFETY: as in `scores_1`: the instance for CPUs with AVX2 and FMA.
                unsafe { super::attention_x86::chains_64(chunk, c * 64, stride, w, values) };
            }
            chains::<1>(rest, dv - dv % 16, stride, w, values);
            return;
        }
        chains::<64>(wide, 0, stride, w, values);
    } else {
        chains::<16>(wide, 0, stride, w, values);
    }
    chains::<1>(rest, dv - dv % 16, stride, w, values);
}

/// The chains of [`add_weighted_values`] for `out` (a multiple of `W` elements starting at
/// element `offset` of each value row, rows `stride` apart).
#[inline(always)]
fn chains<const W: usize>(out: &mut [f32], offset: usize, stride: usize, w: &[f32], values: &[f32]) {
    for (c, oc) in out.chunks_exact_mut(W).enumerate() {
        let mut acc: [f32; W] = oc.try_into().unwrap();
        let start = offset + c * W;
        for (t, &wt) in w.iter().enumerate() {
            let v: &[f32; W] = values[t * stride + start..t * stride + start + W].try_into().unwrap();
            for (a, &x) in acc.iter_mut().zip(v) {
                *a = wt.mul_add(x, *a);
            }
        }
        oc.copy_from_slice(&acc);
    }
}

/// The sum of 16 lanes in the order of an AVX-512 horizontal add: halves, then quarters, then
/// pairs.
#[inline]
fn reduce_16(l: &[f32]) -> f32 {
    let h: [f32; 8] = std::array::from_fn(|i| l[i + 8] + l[i]);
    let q: [f32; 4] = std::array::from_fn(|i| h[i + 4] + h[i]);
    let p = [q[0] + q[2], q[1] + q[3]];
    p[0] + p[1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::kv_rows::KvRow;
    use crate::backend::cpu::packed_head::{PackedHead, PackedRows};
    use crate::quant::Isa;

    struct Rows(Vec<Vec<f32>>, Vec<Vec<f32>>);
    impl KvRows for Rows {
        fn key(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.0[pos])
        }
        fn value(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.1[pos])
        }
    }

    #[test]
    fn attends_to_the_matching_key() {
        // two positions, one head of dim 2: the query matches key 1 strongly
        let kv = Rows(vec![vec![1.0, 0.0], vec![0.0, 1.0]], vec![vec![10.0, 0.0], vec![0.0, 20.0]]);
        let shape = AttentionShape { n_head: 1, n_head_kv: 1, head_dim_k: 2, head_dim_v: 2, scale: 1.0, softcap: 0.0 };
        let mut out = [0.0; 2];
        let mut s = AttnScratch::default();
        attend_group(&[0.0, 50.0], 0, &shape, 0..2, &kv, &mut out, &mut s);
        assert!((out[1] - 20.0).abs() < 1e-3 && out[0].abs() < 1e-3, "{out:?}");
        // only position 0 visible: all weight on it
        attend_group(&[0.0, 50.0], 0, &shape, 0..1, &kv, &mut out, &mut s);
        assert_eq!(out, [10.0, 0.0]);
    }

    /// Plain softmax attention in f64, as the reference for the tiled online computation.
    fn reference(q: &[f32], h: usize, shape: &AttentionShape, positions: std::ops::Range<usize>, kv: &Rows) -> Vec<f64> {
        let g = h / (shape.n_head / shape.n_head_kv);
        let (dk, dv) = (shape.head_dim_k, shape.head_dim_v);
        let scores: Vec<f64> = positions
            .clone()
            .map(|p| (0..dk).map(|d| f64::from(q[h * dk + d]) * f64::from(kv.0[p][g * dk + d])).sum::<f64>() * f64::from(shape.scale))
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = w.iter().sum();
        (0..dv).map(|d| positions.clone().zip(&w).map(|(p, &wi)| wi * f64::from(kv.1[p][g * dv + d])).sum::<f64>() / total).collect()
    }

    /// Head sizes off the 64-element fast paths: keys not a multiple of 16 (transposed
    /// element by element), values in 16-element chains plus a remainder.
    #[test]
    fn odd_head_sizes_match_plain_softmax_on_every_tier() {
        for (dk, dv) in [(40, 24), (80, 80), (64, 72)] {
            let shape = AttentionShape { n_head: 6, n_head_kv: 2, head_dim_k: dk, head_dim_v: dv, scale: 0.2, softcap: 0.0 };
            let n = 150;
            let val = |p: usize, i: usize, salt: usize| (((p * 31 + i * 17 + salt) % 97) as f32 / 97.0 - 0.5) * 2.0;
            let kv = Rows(
                (0..n).map(|p| (0..2 * dk).map(|i| val(p, i, 1)).collect()).collect(),
                (0..n).map(|p| (0..2 * dv).map(|i| val(p, i, 5)).collect()).collect(),
            );
            let q: Vec<f32> = (0..6 * dk).map(|i| val(i, i, 3)).collect();
            for positions in [0..n, 70..n, 3..9] {
                let mut s = AttnScratch::default();
                let mut plain = vec![0.0; 3 * dv];
                attend_group_with(Isa::Scalar, &q, 1, &shape, positions.clone(), &kv, &mut plain, &mut s);
                for tier in Isa::available() {
                    let mut fused = vec![0.0; 3 * dv];
                    attend_group_with(tier, &q, 1, &shape, positions.clone(), &kv, &mut fused, &mut s);
                    assert_eq!(plain, fused, "{dk}/{dv} {positions:?} {tier:?}");
                }
                for (j, got_head) in plain.chunks_exact(dv).enumerate() {
                    for (got, want) in got_head.iter().zip(reference(&q, 3 + j, &shape, positions.clone(), &kv)) {
                        assert!((f64::from(*got) - want).abs() < 1e-5, "{dk}/{dv} {positions:?} head {j}: {got} vs {want}");
                    }
                }
            }
        }
    }

    /// A block of queries with nested, disjoint and empty ranges gives every query the bits it
    /// gets alone, on every tier.
    #[test]
    fn a_block_of_queries_gives_each_query_its_own_bits() {
        // head sizes of 48 (chains 16 wide), 64 and 128 (64 wide); 10 queries of 2 heads each: the
        // AVX-512 tier's batches of 4 states, spans shared and not
        for dv in [48, 64, 128] {
            let shape = AttentionShape { n_head: 4, n_head_kv: 2, head_dim_k: 64, head_dim_v: dv, scale: 0.125, softcap: 0.0 };
            let val = |p: usize, i: usize, salt: usize| (((p * 31 + i * 17 + salt) % 97) as f32 / 97.0 - 0.5) * 3.0;
            let n = 200;
            let kv = Rows(
                (0..n).map(|p| (0..128).map(|i| val(p, i, 1)).collect()).collect(),
                (0..n).map(|p| (0..2 * dv).map(|i| val(p, i, 5)).collect()).collect(),
            );
            let ranges = [0..1, 0..64, 0..65, 0..130, 5..5, 100..200, 63..64, 0..200, 150..151, 0..199, 0..200, 0..130];
            let qs: Vec<Vec<f32>> = (0..ranges.len()).map(|r| (0..256).map(|i| val(r, i, 3)).collect()).collect();
            let mut s = AttnScratch::default();
            for tier in Isa::available() {
                for g in 0..2 {
                    let alone: Vec<Vec<f32>> = ranges
                        .iter()
                        .zip(&qs)
                        .map(|(r, q)| {
                            let mut out = vec![0.0; 2 * dv];
                            attend_group_with(tier, q, g, &shape, r.clone(), &kv, &mut out, &mut s);
                            out
                        })
                        .collect();
                    let mut outs = vec![vec![7.0f32; 2 * dv]; ranges.len()];
                    let mut block: Vec<Query> =
                        ranges.iter().zip(&qs).zip(outs.iter_mut()).map(|((r, q), out)| Query { q, positions: r.clone(), out }).collect();
                    attend_queries_with(tier, &mut block, g, &shape, None, &kv, &mut s);
                    for (i, (got, want)) in outs.iter().zip(&alone).enumerate() {
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(got), bits(want), "{tier:?} dv {dv} group {g} query {i} ({:?})", ranges[i]);
                    }
                }
            }
        }
    }

    /// Rows of all heads in two flat arrays, read in place by whole tiles.
    struct Flat {
        keys: Vec<f32>,
        values: Vec<f32>,
        key_stride: usize,
        value_stride: usize,
    }
    impl KvRows for Flat {
        fn key(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.keys[pos * self.key_stride..(pos + 1) * self.key_stride])
        }
        fn value(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.values[pos * self.value_stride..(pos + 1) * self.value_stride])
        }
        fn in_place(&self) -> Option<InPlaceRows<'_>> {
            let (keys, values) = (&self.keys[..], &self.values[..]);
            Some(InPlaceRows::Rows { keys, key_stride: self.key_stride, values, value_stride: self.value_stride })
        }
    }

    /// Rows read in place, and a head packed from them (its whole tiles' keys transposed, its
    /// values side by side), give the bits of rows copied tile by tile, for whole and partial
    /// tiles, windows that start mid-tile, blocks of several queries, and key and value heads of
    /// different sizes, some off the 16-wide blocks.
    #[test]
    fn rows_read_in_place_or_packed_give_the_bits_of_rows_copied() {
        for (dk, dv) in [(64, 64), (64, 48), (40, 80)] {
            let shape = AttentionShape { n_head: 6, n_head_kv: 3, head_dim_k: dk, head_dim_v: dv, scale: 0.125, softcap: 0.0 };
            let val = |p: usize, i: usize, salt: usize| (((p * 37 + i * 11 + salt) % 89) as f32 / 89.0 - 0.5) * 2.0;
            let n = 221;
            let (key_stride, value_stride) = (3 * dk, 3 * dv);
            let flat = Flat {
                keys: (0..n * key_stride).map(|i| val(i / key_stride, i % key_stride, 1)).collect(),
                values: (0..n * value_stride).map(|i| val(i / value_stride, i % value_stride, 2)).collect(),
                key_stride,
                value_stride,
            };
            let copied = Rows(
                flat.keys.chunks_exact(key_stride).map(<[f32]>::to_vec).collect(),
                flat.values.chunks_exact(value_stride).map(<[f32]>::to_vec).collect(),
            );
            let ranges = [0..n, 0..64, 0..128, 10..n, 64..200, 130..131, 0..n, 5..70];
            let qs: Vec<Vec<f32>> = (0..ranges.len()).map(|r| (0..6 * dk).map(|i| val(r, i, 3)).collect()).collect();
            let mut s = AttnScratch::default();
            for tier in Isa::available() {
                for g in 0..3 {
                    let run = |kv: &dyn KvRows, s: &mut AttnScratch| {
                        let mut outs = vec![vec![0.0f32; 2 * dv]; ranges.len()];
                        let mut block: Vec<Query> = ranges
                            .iter()
                            .zip(&qs)
                            .zip(outs.iter_mut())
                            .map(|((r, q), out)| Query { q, positions: r.clone(), out })
                            .collect();
                        attend_queries_with(tier, &mut block, g, &shape, None, kv, s);
                        outs.concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                    };
                    let want = run(&copied, &mut s);
                    assert_eq!(run(&flat, &mut s), want, "{dk}/{dv} group {g} on {tier:?}");
                    let head = PackedHead::new(tier, g, n, (&flat.keys, key_stride, dk), (&flat.values, value_stride, dv));
                    assert_eq!(run(&PackedRows { rows: &flat, head: &head }, &mut s), want, "{dk}/{dv} group {g} on {tier:?}, packed");
                }
            }
        }
    }

    #[test]
    fn tiled_attention_matches_plain_softmax_and_tiers_agree_bit_for_bit() {
        let shape = AttentionShape { n_head: 4, n_head_kv: 2, head_dim_k: 64, head_dim_v: 64, scale: 0.125, softcap: 0.0 };
        let mut state = 0x9e37_79b9u32;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as f32 / u32::MAX as f32 * 2.0 - 1.0
        };
        let n = 200;
        let kv = Rows(
            (0..n).map(|_| (0..128).map(|_| rnd() * 3.0).collect()).collect(),
            (0..n).map(|_| (0..128).map(|_| rnd()).collect()).collect(),
        );
        let q: Vec<f32> = (0..256).map(|_| rnd() * 3.0).collect();
        // one tile, several tiles (the maximum rises in later ones), a window starting mid-tile
        for positions in [0..40, 0..n, 37..n, 130..131] {
            for g in 0..2 {
                let mut plain = vec![0.0; 128];
                let mut s = AttnScratch::default();
                attend_group_with(Isa::Scalar, &q, g, &shape, positions.clone(), &kv, &mut plain, &mut s);
                for tier in Isa::available() {
                    let mut fused = vec![0.0; 128];
                    attend_group_with(tier, &q, g, &shape, positions.clone(), &kv, &mut fused, &mut s);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&plain), bits(&fused), "{positions:?} group {g} {tier:?}");
                }
                for (j, got_head) in plain.chunks_exact(64).enumerate() {
                    let h = g * 2 + j;
                    for (got, want) in got_head.iter().zip(reference(&q, h, &shape, positions.clone(), &kv)) {
                        assert!((f64::from(*got) - want).abs() < 1e-5, "{positions:?} head {h}: {got} vs {want}");
                    }
                    // a group of one (the heads taken one at a time) gives the same bits
                    let one = AttentionShape { n_head: 1, n_head_kv: 1, ..shape };
                    let qh = &q[h * 64..(h + 1) * 64];
                    let kg = Rows(
                        kv.0.iter().map(|r| r[g * 64..(g + 1) * 64].to_vec()).collect(),
                        kv.1.iter().map(|r| r[g * 64..(g + 1) * 64].to_vec()).collect(),
                    );
                    let mut alone = vec![0.0; 64];
                    attend_group_with(Isa::active(), qh, 0, &one, positions.clone(), &kg, &mut alone, &mut s);
                    assert_eq!(alone, got_head, "{positions:?} head {h} alone");
                }
            }
        }
    }
}
