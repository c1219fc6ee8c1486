//! Float-weight products of many activation rows in the order of a tier's float dot product, so
//! that a register-blocked kernel gives every output the bits of its own row dot.
//!
//! The x86 dots (`x86::avx2::float`, `x86::avx512::float`) sum a row of `n` values in 4
//! accumulators of `L` lanes (AVX2 8, AVX-512 16), `4 L` chains: chain `q = L k + l` is lane `l`
//! of accumulator `k`, a fused multiply-add chain over values `4 L i + q` (i = 0, 1, ... while
//! whole `4 L`-value steps last); chains `0..L` (accumulator 0) go on with the `L`-value steps
//! `main + L m + l` and a last partial step whose missing values are zeros; the row's sum is
//! then `(acc0 + acc1) + (acc2 + acc3)` reduced across lanes as the tier's horizontal sum
//! reduces them.
//!
//! [`ChainLayout`] lists each chain's values in its order. Activation rows are packed in that
//! order, [`GEMM_ROWS`] rows side by side per step ([`PackedActs`]), and weight rows the same way
//! a panel at a time: a kernel then runs each chain for a tile of outputs with one vector load
//! per `L` activation rows and one broadcast per weight row, in registers, and sums the chains
//! in the dot's order. Zero-filled places (rows past the batch, values past the row) add `0 · 0`
//! as the dot's zero-padded step does.

/// Activation rows of one packed group (two 8-lane vectors, or one of 16 lanes).
pub const GEMM_ROWS: usize = 16;

/// The chain order of a row of `n` values for a dot of `lanes`-lane accumulators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLayout {
    n: usize,
    /// Lanes of the dot's 4 accumulators (8 or 16).
    lanes: usize,
    /// Whole `4 lanes`-value steps: every chain's first steps.
    main_steps: usize,
    /// Steps chains `0..lanes` take after those: the `lanes`-value steps and the partial one.
    extra_steps: usize,
}

impl ChainLayout {
    pub fn new(n: usize, lanes: usize) -> ChainLayout {
        assert!(lanes == 8 || lanes == 16, "{lanes} lanes");
        let wide = 4 * lanes;
        ChainLayout { n, lanes, main_steps: n / wide, extra_steps: (n % wide).div_ceil(lanes) }
    }

    /// Chains of one row's sum: 4 accumulators' lanes.
    pub fn chains(&self) -> usize {
        4 * self.lanes
    }

    /// Lanes of the dot's accumulators.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// Values in the row.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Steps of chain `q`.
    pub fn steps(&self, q: usize) -> usize {
        self.main_steps + if q < self.lanes { self.extra_steps } else { 0 }
    }

    /// The first step of chain `q` in the packed order (chains one after the other).
    pub fn offset(&self, q: usize) -> usize {
        q * self.main_steps + q.min(self.lanes) * self.extra_steps
    }

    /// Steps of all chains together.
    pub fn total_steps(&self) -> usize {
        self.chains() * self.main_steps + self.lanes * self.extra_steps
    }

    /// The value chain `q` reads at step `s`, or `None` for a zero-filled place.
    pub fn value_index(&self, q: usize, s: usize) -> Option<usize> {
        let wide = self.chains();
        let j = if s < self.main_steps { wide * s + q } else { wide * self.main_steps + self.lanes * (s - self.main_steps) + q };
        (j < self.n).then_some(j)
    }

    /// Writes `row` (`n` values) in chain order to `dst[step * stride + lane]`; `dst` comes
    /// zeroed, and the places past the row stay so.
    pub fn scatter(&self, row: &[f32], dst: &mut [f32], stride: usize, lane: usize) {
        debug_assert_eq!(row.len(), self.n);
        let wide = self.chains();
        let main = wide * self.main_steps;
        // where each chain's first step lands
        let at: Vec<usize> = (0..wide).map(|q| self.offset(q) * stride + lane).collect();
        for (s, step) in row[..main].chunks_exact(wide).enumerate() {
            for (&x, &at) in step.iter().zip(&at) {
                dst[at + s * stride] = x;
            }
        }
        for (m, step) in row[main..].chunks(self.lanes).enumerate() {
            for (&x, &at) in step.iter().zip(&at) {
                dst[at + (self.main_steps + m) * stride] = x;
            }
        }
    }
}

/// Activation rows in chain order, [`GEMM_ROWS`] to a group: group `g` holds rows
/// `g * GEMM_ROWS ..` as `[step][row in group]`, rows past the batch zero.
pub struct PackedActs {
    pub layout: ChainLayout,
    pub rows: usize,
    data: Vec<f32>,
}

impl PackedActs {
    /// Packs `rows` activation rows of `n` values (`x`, row after row) for a dot of `lanes`-lane
    /// accumulators.
    pub fn new(x: &[f32], rows: usize, n: usize, lanes: usize) -> PackedActs {
        use rayon::prelude::*;
        assert_eq!(x.len(), rows * n, "{rows} rows of {n} values");
        let layout = ChainLayout::new(n, lanes);
        let group_len = layout.total_steps() * GEMM_ROWS;
        let mut data = vec![0.0f32; rows.div_ceil(GEMM_ROWS) * group_len];
        data.par_chunks_mut(group_len.max(1)).zip(x.par_chunks(GEMM_ROWS * n.max(1))).for_each(|(group, src)| {
            for (lane, row) in src.chunks_exact(n.max(1)).enumerate() {
                layout.scatter(row, group, GEMM_ROWS, lane);
            }
        });
        PackedActs { layout, rows, data }
    }

    /// Group `g`: `[step][GEMM_ROWS]`.
    pub fn group(&self, g: usize) -> &[f32] {
        let len = self.layout.total_steps() * GEMM_ROWS;
        &self.data[g * len..(g + 1) * len]
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(GEMM_ROWS)
    }
}

/// Outputs of weight rows `w` (whole rows of the matrix's type, `rows` of them) for every packed
/// activation row: `outs[b][i]` = row `i` dotted with activation row `b`, the bits of the tier's
/// row dot.
pub type FloatGemmFn = fn(w: &[u8], rows: usize, acts: &PackedActs, outs: &mut [&mut [f32]]);

/// A tier's many-row product and the accumulator lanes of its row dot, which the activation
/// rows are packed for.
#[derive(Clone, Copy)]
pub struct FloatGemm {
    pub run: FloatGemmFn,
    pub lanes: usize,
}

/// Defines, in a tier's module, `float_gemm(ty)`: an entry point per float type over the
/// tier's `gemm(ty, w, rows, acts, outs)`, its activations packed for `$lanes` lanes.
macro_rules! float_gemm_entries {
    ($lanes:expr) => {
        /// This tier's many-row product for float type `ty`.
        pub(super) fn float_gemm(ty: GgmlType) -> Option<$crate::quant::float_gemm::FloatGemm> {
            use $crate::quant::float_gemm::{FloatGemm, FloatGemmFn, PackedActs};
            fn f32s(w: &[u8], rows: usize, acts: &PackedActs, outs: &mut [&mut [f32]]) {
                gemm(GgmlType::F32, w, rows, acts, outs)
            }
            fn f16s(w: &[u8], rows: usize, acts: &PackedActs, outs: &mut [&mut [f32]]) {
                gemm(GgmlType::F16, w, rows, acts, outs)
            }
            fn bf16s(w: &[u8], rows: usize, acts: &PackedActs, outs: &mut [&mut [f32]]) {
                gemm(GgmlType::BF16, w, rows, acts, outs)
            }
            let run: FloatGemmFn = match ty {
                GgmlType::F32 => f32s,
                GgmlType::F16 => f16s,
                GgmlType::BF16 => bf16s,
                _ => return None,
            };
            Some(FloatGemm { run, lanes: $lanes })
        }
    };
}
pub(crate) use float_gemm_entries;

/// A call's weight rows widened (exactly, by the tier's conversion) into chain-ordered panels:
/// panel `p` holds rows `p * panel_rows ..` as `[step][row in panel]`, rows past the matrix zero.
pub struct WeightPanels {
    data: Vec<f32>,
    panel_rows: usize,
    rows: usize,
    steps: usize,
}

impl WeightPanels {
    /// Checks a product's operands (`rows` weight rows of `ty` in `w`, activations packed for
    /// `lanes` lanes, one output row of `rows` values per activation row), then packs the
    /// weights `panel_rows` to a panel, each row widened by `widen`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ty: crate::quant::GgmlType,
        w: &[u8],
        rows: usize,
        acts: &PackedActs,
        outs: &[&mut [f32]],
        lanes: usize,
        panel_rows: usize,
        widen: crate::quant::dispatch::DequantizeFn,
    ) -> WeightPanels {
        let layout = acts.layout;
        assert_eq!(layout.lanes(), lanes, "activations packed for this tier's dot");
        let n = layout.len();
        let row_bytes = ty.row_bytes(n).expect("float rows have no blocks");
        assert_eq!(w.len(), rows * row_bytes, "{rows} weight rows of {n} values");
        assert_eq!(outs.len(), acts.rows, "one output per activation row");
        assert!(outs.iter().all(|o| o.len() >= rows), "outputs of {rows} values");
        let steps = layout.total_steps();
        let panel_len = steps * panel_rows;
        let mut data = vec![0.0f32; rows.div_ceil(panel_rows) * panel_len];
        let mut row = vec![0.0f32; n];
        for (r, bytes) in w.chunks_exact(row_bytes.max(1)).enumerate() {
            widen(bytes, &mut row);
            layout.scatter(&row, &mut data[r / panel_rows * panel_len..], panel_rows, r % panel_rows);
        }
        WeightPanels { data, panel_rows, rows, steps }
    }

    /// Each panel with its first row and the rows it holds of the matrix.
    pub fn panels(&self) -> impl Iterator<Item = (usize, usize, &[f32])> {
        let len = (self.steps * self.panel_rows).max(1);
        self.data.chunks_exact(len).enumerate().map(|(p, panel)| {
            let r0 = p * self.panel_rows;
            (r0, (self.rows - r0).min(self.panel_rows), panel)
        })
    }

    /// Activation groups per pass over the panels: their packed rows (at most 256 KiB) stay in
    /// the core's L2 while every panel passes over them; at least `min`.
    pub fn act_block(&self, min: usize) -> usize {
        ((256 << 10) / (self.steps * GEMM_ROWS * 4).max(1)).max(min)
    }
}

/// Writes a tile's outputs of activation group `g`: `outs[16 g + c][r0 + i] = tile[i][c]` for
/// the `live` weight rows and the group's rows inside the batch.
pub fn put_tile(outs: &mut [&mut [f32]], g: usize, r0: usize, live: usize, tile: &[[f32; GEMM_ROWS]]) {
    let b0 = g * GEMM_ROWS;
    let end = (b0 + GEMM_ROWS).min(outs.len());
    for (c, out) in outs[b0..end].iter_mut().enumerate() {
        for (i, t) in tile[..live].iter().enumerate() {
            out[r0 + i] = t[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of the row is read exactly once, by the chain and step the dot reads it in.
    #[test]
    fn every_value_is_read_once_in_the_dots_order() {
        for (n, lanes) in [0, 1, 7, 8, 31, 32, 37, 64, 100, 120, 384, 2051].into_iter().flat_map(|n| [(n, 8), (n, 16)]) {
            let layout = ChainLayout::new(n, lanes);
            let mut seen = vec![0; n];
            let mut steps = 0;
            for q in 0..layout.chains() {
                assert_eq!(layout.offset(q), steps, "n={n} q={q}");
                let mut last = None;
                for s in 0..layout.steps(q) {
                    if let Some(j) = layout.value_index(q, s) {
                        seen[j] += 1;
                        // a chain's values rise, in its lane of `lanes` or `4 lanes`
                        assert!(last.is_none_or(|l| j > l) && j % lanes == q % lanes, "n={n} q={q} s={s} j={j}");
                        last = Some(j);
                    }
                }
                steps += layout.steps(q);
            }
            assert_eq!(steps, layout.total_steps());
            assert!(seen.iter().all(|&c| c == 1), "n={n}: {seen:?}");
        }
    }

    /// `scatter` puts each value at its chain's step, in its lane, and leaves the places past
    /// the row zero.
    #[test]
    fn scatter_writes_each_value_where_its_chain_reads_it() {
        for (n, lanes) in [1, 7, 32, 37, 100, 120, 384].into_iter().flat_map(|n| [(n, 8), (n, 16)]) {
            let layout = ChainLayout::new(n, lanes);
            let row: Vec<f32> = (1..=n).map(|v| v as f32).collect();
            let mut dst = vec![0.0; layout.total_steps() * 3];
            layout.scatter(&row, &mut dst, 3, 1);
            for q in 0..layout.chains() {
                for s in 0..layout.steps(q) {
                    let at = (layout.offset(q) + s) * 3;
                    assert_eq!(dst[at + 1], layout.value_index(q, s).map_or(0.0, |j| row[j]), "n={n} q={q} s={s}");
                    assert_eq!((dst[at], dst[at + 2]), (0.0, 0.0), "other lanes untouched");
                }
            }
        }
    }
}
