//! The low-rank corrections of LoRA adapters on the CPU: `out[o] += w · (x[s] · aᵀ) · bᵀ` for
//! the rows of a batch that use an adapter, `a` of `rank` x `n_in` and `b` of `n_out` x `rank`
//! with `rank` small (8 to 64). The general matmul would spend its time packing activations and
//! reducing: the second product has only `rank` values per dot, one horizontal sum per output,
//! and its result would be a fresh tensor added afterwards. Here each row takes `rank` dots of
//! `n_in` values against `a`, then a tile of its outputs sums `rank` scaled values of `bᵀ` in
//! registers (no reduction) and is added into the row in place. The loops are plain
//! lane-parallel f32 code (multiplies and adds, never fused) whose order depends on nothing but
//! the row: compiled for each tier's vector width, the same bits on every tier, alone or
//! batched, and the same as the products then `add_weighted_rows` up to the order of the
//! sums. The matrices stay in their file's F16 or BF16 (as adapters are written: half the bytes
//! of f32), widened exactly by the tier's conversion as the loops read them: `a` in its mapped
//! rows, `bᵀ` transposed once into a copy of that type, after which `b`'s mapped pages go back
//! to the kernel. Many rows take each matrix widened whole once per call instead, so that the
//! widening is not repeated per block of rows. A matrix of another type (a quantized one) is
//! widened to f32 once and kept.

use std::borrow::Cow;
use std::sync::OnceLock;

use rayon::prelude::*;

use super::backend::{CpuMatrix, HostTensor};
use crate::backend::BackendError;
use crate::quant::dispatch::DequantizeFn;
use crate::quant::{self, GgmlType, Isa};

/// Lanes of the dot: four 16-lane vectors, so that the adds do not wait on each other.
const LANES: usize = 64;
/// The largest rank this kernel takes (a larger one goes through the general products).
pub(super) const MAX_RANK: usize = 64;
/// Rows of a block: they share each load of `bᵀ`.
const BLOCK: usize = 4;
/// Outputs of a tile: a block's tile of sums stays in registers (4 x 64 f32).
const TILE: usize = 64;
/// Outputs per task when a few rows split their outputs between threads.
const SPLIT: usize = 4 * TILE;

/// Values of a pair's matrix as the loops read them: f32, or F16 / BF16 bytes widened (exactly)
/// where read by the type's dequantization on the tier (the hardware conversion where it has one).
#[derive(Clone, Copy)]
enum Floats<'a> {
    F32(&'a [f32]),
    Half(&'a [u8], DequantizeFn),
}

impl<'a> Floats<'a> {
    /// `bytes` of type `ty` as the loops of tier `tier` read them: f32 in place where aligned,
    /// F16 and BF16 through their widening; `None` for any other type.
    fn new(ty: GgmlType, bytes: &'a [u8], tier: Isa) -> Result<Option<Floats<'a>>, BackendError> {
        Ok(match ty {
            GgmlType::F32 => bytemuck::try_cast_slice(bytes).ok().map(Floats::F32),
            GgmlType::F16 | GgmlType::BF16 => Some(Floats::Half(bytes, widening(ty, tier)?)),
            _ => None,
        })
    }

    /// Values `at .. at + buf.len()` as f32: in place, or widened into `buf`.
    #[inline(always)]
    fn read<'b>(&'b self, at: usize, buf: &'b mut [f32]) -> &'b [f32] {
        let n = buf.len();
        match self {
            Floats::F32(v) => &v[at..at + n],
            Floats::Half(bytes, widen) => {
                widen(&bytes[2 * at..2 * (at + n)], buf);
                buf
            }
        }
    }
}

/// Type `ty`'s dequantization on tier `tier`.
fn widening(ty: GgmlType, tier: Isa) -> Result<DequantizeFn, BackendError> {
    Ok(quant::ops_on(ty, tier).map_err(|e| BackendError::shape("low_rank", e.to_string()))?.dequantize)
}

/// A pair's `bᵀ` (column after column of `b`): F16 and BF16 bytes as they are, other types
/// widened to f32.
pub(super) enum Transposed {
    F32(Vec<f32>),
    Half(GgmlType, Vec<u8>),
}

impl Transposed {
    fn floats(&self, tier: Isa) -> Result<Floats<'_>, BackendError> {
        Ok(match self {
            Transposed::F32(v) => Floats::F32(v),
            Transposed::Half(ty, bytes) => Floats::Half(bytes, widening(*ty, tier)?),
        })
    }
}

/// A pair's matrices, kept by `CpuMatrix` once `add_low_rank` has read them.
#[derive(Default)]
pub(super) struct LowRankCache {
    /// `a` widened to f32, where its type is not a float type read in place.
    widened: OnceLock<Vec<f32>>,
    /// `b` transposed.
    transposed: OnceLock<Transposed>,
}

/// The matrix widened to f32, row after row, by its type's dequantization.
fn widen_rows(m: &CpuMatrix) -> Result<Vec<f32>, BackendError> {
    let view = m.view();
    let widen = quant::ops(view.ty).map_err(|e| BackendError::shape("low_rank", e.to_string()))?.dequantize;
    let mut out = vec![0.0f32; view.rows * view.cols];
    for (r, row) in out.chunks_exact_mut(view.cols).enumerate() {
        widen(view.row(r), row);
    }
    Ok(out)
}

impl CpuMatrix {
    /// The matrix's values row after row as tier `tier` reads them: its mapped bytes where they
    /// are floats, else widened to f32 once.
    fn low_rank_rows(&self, tier: Isa) -> Result<Floats<'_>, BackendError> {
        let view = self.view();
        if let Some(floats) = Floats::new(view.ty, view.data, tier)? {
            return Ok(floats);
        }
        if let Some(d) = self.low_rank.widened.get() {
            return Ok(Floats::F32(d));
        }
        let out = widen_rows(self)?;
        Ok(Floats::F32(self.low_rank.widened.get_or_init(|| out)))
    }

    /// The matrix transposed, column after column, F16 and BF16 values as they are, others
    /// widened to f32 (computed once; the mapped pages are then released).
    fn low_rank_transposed(&self, tier: Isa) -> Result<Floats<'_>, BackendError> {
        if let Some(t) = self.low_rank.transposed.get() {
            return t.floats(tier);
        }
        let view = self.view();
        let (rows, cols) = (view.rows, view.cols);
        // value `i` of the matrix (row after row) at column `i % cols`, row `i / cols`
        fn transpose<T: Copy + Default, const N: usize>(rows: usize, cols: usize, value: impl Fn(usize) -> [T; N]) -> Vec<T> {
            let mut out = vec![T::default(); rows * cols * N];
            for r in 0..rows {
                for c in 0..cols {
                    out[(c * rows + r) * N..][..N].copy_from_slice(&value(r * cols + c));
                }
            }
            out
        }
        let t = match view.ty {
            GgmlType::F16 | GgmlType::BF16 => {
                Transposed::Half(view.ty, transpose(rows, cols, |i| [view.data[2 * i], view.data[2 * i + 1]]))
            }
            _ => {
                let widened = widen_rows(self)?;
                Transposed::F32(transpose(rows, cols, |i| [widened[i]]))
            }
        };
        let t = self.low_rank.transposed.get_or_init(|| t);
        self.release_mapped_pages();
        t.floats(tier)
    }
}

/// `Σ x[i] · w[i]` in `LANES` chains (value `i` on chain `i % LANES` while whole steps last, the
/// rest one chain after), the chains then summed pairwise.
#[inline(always)]
pub(super) fn dot(x: &[f32], w: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (xs, ws) = (x.chunks_exact(LANES), w.chunks_exact(LANES));
    let (x_rest, w_rest) = (xs.remainder(), ws.remainder());
    for (a, b) in xs.zip(ws) {
        for l in 0..LANES {
            acc[l] += a[l] * b[l];
        }
    }
    let mut rest = 0.0f32;
    for (a, b) in x_rest.iter().zip(w_rest) {
        rest += a * b;
    }
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0] + rest
}

/// Outputs of one row (all, or a range of them) with the weight its correction is added at.
type Piece<'a> = (&'a mut [f32], f32);
/// A block of rows: their inputs and, per part, their output pieces.
type RowBlock<'a> = (Vec<&'a [f32]>, Vec<Vec<Piece<'a>>>);

/// A block's low products: `t[r][k]`, row `r`'s dot with `a`'s row `k`.
type Lows = [[f32; MAX_RANK]; BLOCK];

/// The low products of the rows `xs` (at most [`BLOCK`], of `n_in`) with `a` (`rank` rows of
/// `n_in`): each row of `a` widened once for all of them.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `k` is also the offset of `a`'s row
fn lows_body(a: Floats, rank: usize, n_in: usize, xs: &[&[f32]]) -> Lows {
    let mut t = [[0.0f32; MAX_RANK]; BLOCK];
    let mut buf = vec![0.0f32; n_in];
    for k in 0..rank {
        let a_k = a.read(k * n_in, &mut buf);
        for (r, row) in xs.iter().enumerate() {
            t[r][k] = dot(row, a_k);
        }
    }
    t
}

/// Adds `w · Σ_k t[r][k] · bᵀ[k][c]` into each output piece (row `r`'s outputs `c` from
/// `start`, with its weight `w`): each sum `((0 + t₀ c₀) + t₁ c₁) + ...` in `k` order, rounded
/// times `w`, then added.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `k` is also the offset of `bᵀ`'s row
fn spread_body(t: &Lows, outs: &mut [(&mut [f32], f32)], bt: Floats, rank: usize, n_out: usize, start: usize) {
    let width = outs.first().map_or(0, |(piece, _)| piece.len());
    let mut buf = [0.0f32; TILE];
    let mut o = 0;
    while o < width {
        let w = TILE.min(width - o);
        let mut acc = [[0.0f32; TILE]; BLOCK];
        for k in 0..rank {
            let c = bt.read(k * n_out + start + o, &mut buf[..w]);
            for (r, acc) in acc.iter_mut().enumerate().take(outs.len()) {
                let tk = t[r][k];
                acc[..w].iter_mut().zip(c).for_each(|(v, &c)| *v += tk * c);
            }
        }
        for ((piece, weight), acc) in outs.iter_mut().zip(&acc) {
            piece[o..o + w].iter_mut().zip(&acc[..w]).for_each(|(v, &d)| *v += d * *weight);
        }
        o += w;
    }
}

/// `$body` compiled for the widest vectors of tier `$tier` the CPU has (the code is the same
/// on every tier: multiplies and adds are never fused, so the bits are too).
macro_rules! on_tier {
    ($tier:expr, $ret:ty, |$($arg:ident: $ty:ty),*| $body:expr) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx2")]
            unsafe fn with_avx512($($arg: $ty),*) -> $ret {
                $body
            }
            #[target_feature(enable = "avx2")]
            unsafe fn with_avx2($($arg: $ty),*) -> $ret {
                $body
            }
            if $tier >= Isa::Avx512 && Isa::Avx512.is_available() {
                // SAFETY: the CPU has AVX-512 F and AVX2 (checked just above).
                unsafe { with_avx512($($arg),*) }
            } else if $tier >= Isa::Avx2 && Isa::Avx2.is_available() {
                // SAFETY: the CPU has AVX2 (checked just above).
                unsafe { with_avx2($($arg),*) }
            } else {
                $body
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = $tier;
            $body
        }
    }};
}

/// All of `m` as f32: in place, or widened into a fresh buffer.
fn widen_whole(m: Floats<'_>) -> Cow<'_, [f32]> {
    match m {
        Floats::F32(v) => Cow::Borrowed(v),
        Floats::Half(bytes, _) => {
            let mut wide = vec![0.0f32; bytes.len() / 2];
            m.read(0, &mut wide);
            Cow::Owned(wide)
        }
    }
}

fn lows_with(tier: Isa, a: Floats, rank: usize, n_in: usize, xs: &[&[f32]]) -> Lows {
    on_tier!(tier, Lows, |a: Floats, rank: usize, n_in: usize, xs: &[&[f32]]| lows_body(a, rank, n_in, xs))
}

fn spread_with(tier: Isa, t: &Lows, outs: &mut [(&mut [f32], f32)], bt: Floats, rank: usize, n_out: usize, start: usize) {
    on_tier!(tier, (), |t: &Lows, outs: &mut [(&mut [f32], f32)], bt: Floats, rank: usize, n_out: usize, start: usize| {
        spread_body(t, outs, bt, rank, n_out, start)
    })
}

/// `outs[p][o] += w · (x[s] · aᵀ) · bs[p]ᵀ` for every `(s, o, w)` of `pairs` on tier `tier`:
/// one output, or several that share `a` (the parts of a fused projection), each row's low
/// products computed once for all parts; every part's values are those it gets alone.
pub(super) fn add_low_rank_parts(
    tier: Isa,
    outs: &mut [&mut HostTensor],
    a: &CpuMatrix,
    bs: &[&CpuMatrix],
    x: &HostTensor,
    pairs: &[(usize, usize, f32)],
) -> Result<(), BackendError> {
    let (rank, n_in) = (a.rows(), a.cols());
    if outs.len() != bs.len() {
        return Err(BackendError::shape("add_low_rank", format!("{} outputs for {} matrices", outs.len(), bs.len())));
    }
    for (out, b) in outs.iter().zip(bs) {
        let mut seen = vec![false; out.rows];
        let misfit = x.cols != n_in
            || out.cols != b.rows()
            || b.cols() != rank
            || rank > MAX_RANK
            || pairs.iter().any(|&(s, o, _)| s >= x.rows || o >= out.rows || std::mem::replace(&mut seen[o], true));
        if misfit {
            let what = format!(
                "{} pairs of rows of {} through {rank} x {n_in} then {} x {} into rows of {}",
                pairs.len(),
                x.cols,
                b.rows(),
                b.cols(),
                out.cols
            );
            return Err(BackendError::shape("add_low_rank", what));
        }
    }
    let a = a.low_rank_rows(tier)?;
    let bts: Vec<Floats> = bs.iter().map(|b| b.low_rank_transposed(tier)).collect::<Result<_, _>>()?;
    let n_outs: Vec<usize> = bs.iter().map(|b| b.rows()).collect();
    // per part, its output rows (distinct: each taken out once)
    let mut slots: Vec<Vec<Option<&mut [f32]>>> =
        outs.iter_mut().zip(&n_outs).map(|(out, &n_out)| out.data.chunks_mut(n_out).map(Some).collect()).collect();
    // blocks of rows, each with its inputs and, per part, its output rows
    let blocks: Vec<RowBlock<'_>> = pairs
        .chunks(BLOCK)
        .map(|block| {
            let xs = block.iter().map(|&(s, _, _)| &x.data[s * n_in..(s + 1) * n_in]).collect();
            let outs = slots
                .iter_mut()
                .map(|part| block.iter().map(|&(_, o, w)| (part[o].take().expect("each output row once"), w)).collect())
                .collect();
            (xs, outs)
        })
        .collect();
    if pairs.len() >= BLOCK * rayon::current_num_threads() {
        // many rows: each matrix widened whole once for all their blocks (not kept)
        let a_wide = widen_whole(a);
        let bts_wide: Vec<Cow<[f32]>> = bts.iter().map(|&bt| widen_whole(bt)).collect();
        let a = Floats::F32(&a_wide);
        let bts: Vec<Floats> = bts_wide.iter().map(|bt| Floats::F32(bt)).collect();
        blocks.into_par_iter().for_each(|(xs, parts)| {
            let t = lows_with(tier, a, rank, n_in, &xs);
            for ((mut outs, &bt), &n_out) in parts.into_iter().zip(&bts).zip(&n_outs) {
                spread_with(tier, &t, &mut outs, bt, rank, n_out, 0);
            }
        });
        return Ok(());
    }
    // few rows (decoding): a block's low products once, then its outputs split between threads
    for (xs, parts) in blocks {
        let t = lows_with(tier, a, rank, n_in, &xs);
        // (part, first output, pieces of every row)
        let mut tasks: Vec<(usize, usize, Vec<Piece<'_>>)> = Vec::new();
        for (p, rows) in parts.into_iter().enumerate() {
            let first = tasks.len();
            tasks.extend((0..n_outs[p].div_ceil(SPLIT)).map(|i| (p, i * SPLIT, Vec::new())));
            for (row, w) in rows {
                for (task, piece) in tasks[first..].iter_mut().zip(row.chunks_mut(SPLIT)) {
                    task.2.push((piece, w));
                }
            }
        }
        tasks.into_par_iter().for_each(|(p, start, mut pieces)| spread_with(tier, &t, &mut pieces, bts[p], rank, n_outs[p], start));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::{Backend, CpuBackend};
    use crate::gguf::{GgufFile, GgufWriter};
    use crate::quant::GgmlType;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    /// A rank-12 pair over rows of 100 into 37 values, `a` in F16 and `b` in F32.
    fn pair(b: &CpuBackend) -> (CpuMatrix, CpuMatrix) {
        let (rank, n_in, n_out) = (12u64, 100u64, 37u64);
        let mut w = GgufWriter::new();
        let halves: Vec<u8> = values((rank * n_in) as usize, 1).iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        w.add_tensor("a", &[n_in, rank], GgmlType::F16, halves).unwrap();
        let floats: Vec<u8> = values((rank * n_out) as usize, 2).iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor("b", &[rank, n_out], GgmlType::F32, floats).unwrap();
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
        let (ia, ib) = (file.tensor("a").unwrap().clone(), file.tensor("b").unwrap().clone());
        (b.upload_matrix(&file, &ia, 12, 100).unwrap(), b.upload_matrix(&file, &ib, 37, 12).unwrap())
    }

    /// A `b` of `n_out` x 12, F32.
    fn wide_b(b: &CpuBackend, n_out: u64) -> CpuMatrix {
        let mut w = GgufWriter::new();
        let floats: Vec<u8> = values((12 * n_out) as usize, 5).iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor("b", &[12, n_out], GgmlType::F32, floats).unwrap();
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
        let ib = file.tensor("b").unwrap().clone();
        b.upload_matrix(&file, &ib, n_out as usize, 12).unwrap()
    }

    /// `out[o] += w · (x[s] · aᵀ) · bᵀ` by the f64 reference.
    fn reference(a: &CpuMatrix, b: &CpuMatrix, x: &HostTensor, out: &mut [f64], pairs: &[(usize, usize, f32)]) {
        let (ad, bd) = (widen_rows(a).unwrap(), widen_rows(b).unwrap());
        for &(s, o, w) in pairs {
            let t: Vec<f64> =
                (0..12).map(|k| (0..100).map(|i| f64::from(x.data[s * 100 + i]) * f64::from(ad[k * 100 + i])).sum()).collect();
            for c in 0..37 {
                out[o * 37 + c] += f64::from(w) * (0..12).map(|k| t[k] * f64::from(bd[c * 12 + k])).sum::<f64>();
            }
        }
    }

    /// A `b` of 37 x 12 holding F16-exact values, in `ty`.
    fn b_in(backend: &CpuBackend, ty: GgmlType) -> CpuMatrix {
        let exact: Vec<f32> = values(12 * 37, 2).iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
        let bytes: Vec<u8> = match ty {
            GgmlType::F32 => exact.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => exact.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
            _ => exact.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        };
        let mut w = GgufWriter::new();
        w.add_tensor("b", &[12, 37], ty, bytes).unwrap();
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
        let ib = file.tensor("b").unwrap().clone();
        backend.upload_matrix(&file, &ib, 37, 12).unwrap()
    }

    /// A `b` in F16 or BF16 stays in its type, transposed, and gives the bits of the same values
    /// in F32 on every tier, read where used (6 rows) or widened whole (70 rows).
    #[test]
    fn half_precision_pairs_stay_half_and_give_the_f32_bits() {
        let backend = CpuBackend::new();
        let (a, _) = pair(&backend);
        let f32_b = b_in(&backend, GgmlType::F32);
        for ty in [GgmlType::F16, GgmlType::BF16] {
            let b = b_in(&backend, ty);
            for n in [6, 70] {
                let x = HostTensor { rows: n, cols: 100, data: values(n * 100, 3) };
                let pairs: Vec<(usize, usize, f32)> = (0..n).map(|s| (s, s, 0.75)).collect();
                let mut want = HostTensor::zeros(n, 37);
                backend.add_low_rank(&mut want, &a, &f32_b, &x, &pairs).unwrap();
                assert!(want.data.iter().all(|v| v.is_finite()) && want.data.iter().any(|&v| v != 0.0));
                for tier in Isa::available() {
                    let mut got = HostTensor::zeros(n, 37);
                    add_low_rank_parts(tier, &mut [&mut got], &a, &[&b], &x, &pairs).unwrap();
                    assert_eq!(got.data, want.data, "{ty}, {n} rows on {tier:?}");
                }
            }
            let kept = match b.low_rank.transposed.get() {
                Some(Transposed::Half(kept, bytes)) if *kept == ty => bytes.len(),
                _ => panic!("{ty}: bᵀ not kept in its type"),
            };
            assert_eq!(kept, 2 * 12 * 37);
        }
        // `a` in F16 is read in place: nothing widened is kept
        assert!(a.low_rank.widened.get().is_none());
    }

    #[test]
    fn low_rank_corrections_match_the_f64_reference_and_keep_each_rows_bits() {
        let backend = CpuBackend::new();
        let (a, b) = pair(&backend);
        // 5 rows: outputs split between threads; 21: blocks of rows in parallel
        for n in [5usize, 21] {
            let x = HostTensor { rows: n, cols: 100, data: values(n * 100, n as u32) };
            let start = values(n * 37, 9);
            // every other row, into the rows in reverse, weights of both signs
            let pairs: Vec<(usize, usize, f32)> = (0..n).step_by(2).map(|s| (s, n - 1 - s, if s % 4 == 0 { 0.5 } else { -2.0 })).collect();
            let mut out = HostTensor { rows: n, cols: 37, data: start.clone() };
            backend.add_low_rank(&mut out, &a, &b, &x, &pairs).unwrap();
            let mut want: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
            reference(&a, &b, &x, &mut want, &pairs);
            for (i, (g, w)) in out.data.iter().zip(&want).enumerate() {
                assert!((f64::from(*g) - w).abs() <= 1e-5 * (1.0 + w.abs()), "{n} rows, value {i}: {g} vs {w}");
            }
            for tier in Isa::available() {
                let mut again = HostTensor { rows: n, cols: 37, data: start.clone() };
                add_low_rank_parts(tier, &mut [&mut again], &a, &[&b], &x, &pairs).unwrap();
                assert_eq!(again.data, out.data, "{tier:?}: the same bits on every tier");
            }
            // a row alone has the bits it has in the batch
            for &(s, o, w) in &pairs {
                let alone = HostTensor { rows: 1, cols: 100, data: x.data[s * 100..(s + 1) * 100].to_vec() };
                let mut one = HostTensor { rows: 1, cols: 37, data: start[o * 37..(o + 1) * 37].to_vec() };
                backend.add_low_rank(&mut one, &a, &b, &alone, &[(0, 0, w)]).unwrap();
                assert_eq!(one.data, out.data[o * 37..(o + 1) * 37], "{n} rows: row {s} alone");
            }
            // parts sharing `a` (a narrow one and one split between threads): each part the
            // bits it gets alone
            let wide = wide_b(&backend, 300);
            let (mut p0, mut p1) = (HostTensor { rows: n, cols: 37, data: start.clone() }, HostTensor::zeros(n, 300));
            backend.add_low_rank_parts(&mut [&mut p0, &mut p1], &a, &[&b, &wide], &x, &pairs).unwrap();
            let mut alone = HostTensor::zeros(n, 300);
            backend.add_low_rank(&mut alone, &a, &wide, &x, &pairs).unwrap();
            assert_eq!((&p0.data, &p1.data), (&out.data, &alone.data), "{n} rows: parts");
            assert!(p1.data.iter().any(|&v| v != 0.0));
            // the trait's default (gathered rows, two products, weighted adds): the same values
            // up to the order of the sums
            let mut general = HostTensor { rows: n, cols: 37, data: start.clone() };
            crate::backend::add_low_rank_by_products(&backend, &mut general, &a, &b, &x, &pairs).unwrap();
            for (g, w) in out.data.iter().zip(&general.data) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
            }
        }
        let x = HostTensor { rows: 2, cols: 100, data: vec![0.0; 200] };
        let mut out = HostTensor::zeros(2, 37);
        for bad in [&[(2, 0, 1.0)][..], &[(0, 2, 1.0)], &[(0, 1, 1.0), (1, 1, 1.0)]] {
            assert!(backend.add_low_rank(&mut out, &a, &b, &x, bad).is_err(), "{bad:?}");
        }
        let narrow = HostTensor { rows: 1, cols: 99, data: vec![0.0; 99] };
        assert!(backend.add_low_rank(&mut out, &a, &b, &narrow, &[(0, 0, 1.0)]).is_err());
    }
}
