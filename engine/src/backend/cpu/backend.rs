//! The CPU implementation of the [`Backend`] trait: weights are views into the memory map,
//! activations are host vectors, and the operations run the kernels of this module on the
//! rayon pool (matmul tasks of equal work, attention one task per block of a sequence's rows and
//! key/value head, over heads packed once where many blocks read them, the gated activations row
//! by row).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use rayon::prelude::*;

use super::activation::{gelu, gelu_erf_row_with, sigmoid, silu, swiglu_oai, swiglu_row_with};
use super::attention::{attend_queries_with, with_scratch, Query, KV_TILE};
use super::kv::CpuKvStore;
use super::kv_rows::{InPlaceRows, KvRow, KvRows};
use super::matmul::{get_rows, matmul_each_on};
use super::matmul_indexed::matmul_indexed_on;
use super::norm::{layer_norm, rms_norm, rms_norm_in_place};
use super::packed_head::{KeptRows, PackedHead, PackedRows};
use super::rope::rope_with;
use crate::backend::indexed::{indexed_misfit, IndexedPlan};
use crate::backend::{
    column_copy_misfit, kv_rows_misfit, Activation, AttentionRow, AttentionShape, Backend, BackendError, ColumnBlocks, DeltaShape, Device,
    KvSlot, KvSource, KvTypes, KvValues, Rope, RowInput, SsmShape, StatePart, StateRun,
};
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant::panel::{self, Panels};
use crate::quant::Isa;
use crate::quant::WeightMatrix;

/// The CPU backend: the kernels of one SIMD tier, run on rayon's current pool.
#[derive(Clone, Copy, Debug)]
pub struct CpuBackend {
    isa: Isa,
}

impl CpuBackend {
    /// The backend of the active tier ([`Isa::active`]: the best the CPU has, or `ENGINE_ISA`).
    pub fn new() -> CpuBackend {
        CpuBackend { isa: Isa::active() }
    }

    /// The backend of tier `isa` (or of the best tier below it the CPU has), so that every tier
    /// can be checked in one process.
    pub fn with_isa(isa: Isa) -> CpuBackend {
        let isa = Isa::available().into_iter().filter(|&t| t <= isa).max().unwrap_or(Isa::Scalar);
        CpuBackend { isa }
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

/// Query rows of one sequence that share each tile of keys and values in one attention task:
/// a prompt's rows come in blocks of this many (causal rows attend nested ranges, so they share
/// all but the last tile).
const QUERY_BLOCK: usize = 16;

/// The same for rows that attend their own batch (an encoder's, which every row attends whole):
/// widening and transposing a tile costs about what 16 rows' scores of it cost, so a block of
/// a whole tile's worth of rows spends most of its time on the scores.
const BATCH_QUERY_BLOCK: usize = 64;

/// The heads of the sequences of a batch's own rows that more than one block of query rows
/// reads (an encoder's: every row attends the whole sequence), packed once for all of them
/// (`PackedHead`), by (the sequence's first batch row, key/value head).
fn pack_read_heads(
    isa: Isa,
    k: &HostTensor,
    v: &HostTensor,
    rows: &[AttentionRow],
    blocks: &[std::ops::Range<usize>],
    shape: &AttentionShape,
) -> HashMap<(usize, usize), PackedHead> {
    // (sequence start, blocks of it, positions its rows attend up to): a sequence's blocks
    // come one after another
    let mut seqs: Vec<(usize, usize, usize)> = Vec::new();
    for b in blocks {
        let end = rows[b.clone()].iter().map(|r| r.positions.end).max().unwrap_or(0);
        match seqs.last_mut().filter(|s| s.0 == rows[b.start].kv) {
            Some(s) => (s.1, s.2) = (s.1 + 1, s.2.max(end)),
            None => seqs.push((rows[b.start].kv, 1, end)),
        }
    }
    let (dk, dv) = (shape.head_dim_k, shape.head_dim_v);
    seqs.into_iter()
        .filter(|&(start, blocks, end)| blocks > 1 && end >= KV_TILE && start + end <= k.rows)
        .flat_map(|(start, _, end)| (0..shape.n_head_kv).map(move |g| (start, end, g)))
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(start, n, g)| {
            let keys = (&k.data[start * k.cols..], k.cols, dk);
            let values = (&v.data[start * v.cols..], v.cols, dv);
            ((start, g), PackedHead::new(isa, g, n, keys, values))
        })
        .collect()
}

/// A weight matrix in the memory map of its file, and, for the types with a panel layout,
/// repacked into 8-row panels the first time it takes part in a product (a matrix only ever
/// read as an embedding table, like tied token embeddings, is never repacked).
pub struct CpuMatrix {
    file: Arc<GgufFile>,
    info: TensorInfo,
    rows: usize,
    cols: usize,
    panels: OnceLock<Option<Panels>>,
    /// As a LoRA pair's matrix (`add_low_rank`): widened or transposed, once read so.
    pub(super) low_rank: super::low_rank::LowRankCache,
}

impl CpuMatrix {
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The matrix's rows in place.
    pub fn view(&self) -> WeightMatrix<'_> {
        WeightMatrix::new(self.info.ty, self.rows, self.cols, self.file.tensor_data(&self.info))
            .expect("shape and size were checked at upload")
    }

    /// Hands the matrix's mapped pages back to the kernel, once what reads it reads a copy (a
    /// later read of `view` maps them again from the file).
    pub(super) fn release_mapped_pages(&self) -> bool {
        self.file.release_pages(&self.info)
    }

    /// The matrix as products read it: with its panels where its type has a layout.
    pub fn product_view(&self) -> WeightMatrix<'_> {
        let view = self.view();
        let panels = self.panels.get_or_init(|| {
            let panels = panel::repack(view.ty, view.rows, view.cols, view.data)?;
            tracing::debug!(tensor = %self.info.name, bytes = panels.bytes(), "repacked into 8-row panels");
            Some(panels)
        });
        match panels {
            Some(p) => view.with_panels(p),
            None => view,
        }
    }
}

/// Activations in host memory: `rows` rows of `cols` values.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl HostTensor {
    pub fn zeros(rows: usize, cols: usize) -> HostTensor {
        HostTensor { rows, cols, data: vec![0.0; rows * cols] }
    }

    fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

fn same_shape(op: &'static str, a: &HostTensor, b: &HostTensor) -> Result<(), BackendError> {
    if (a.rows, a.cols) != (b.rows, b.cols) {
        return Err(BackendError::shape(op, format!("{}x{} against {}x{}", a.rows, a.cols, b.rows, b.cols)));
    }
    Ok(())
}

fn whole_groups(op: &'static str, x: &HostTensor, n: usize) -> Result<(), BackendError> {
    if n == 0 || !x.cols.is_multiple_of(n) {
        return Err(BackendError::shape(op, format!("rows of {} values are not whole groups of {n}", x.cols)));
    }
    Ok(())
}

/// The keys and values of one sequence of the batch, by position within the sequence.
struct SeqRows<'a> {
    k: &'a HostTensor,
    v: &'a HostTensor,
    start: usize,
}

impl KvRows for SeqRows<'_> {
    fn key(&self, pos: usize) -> KvRow<'_> {
        KvRow::F32(self.k.row(self.start + pos))
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        KvRow::F32(self.v.row(self.start + pos))
    }

    fn in_place(&self) -> Option<InPlaceRows<'_>> {
        let (k, v) = (self.k, self.v);
        Some(InPlaceRows::Rows {
            keys: &k.data[self.start * k.cols..],
            key_stride: k.cols,
            values: &v.data[self.start * v.cols..],
            value_stride: v.cols,
        })
    }
}

impl Backend for CpuBackend {
    type Matrix = CpuMatrix;
    type Vector = Vec<f32>;
    type Tensor = HostTensor;
    type KvStore = CpuKvStore;
    type KeptKv = KeptRows;

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn upload_matrix(&self, file: &Arc<GgufFile>, info: &TensorInfo, rows: usize, cols: usize) -> Result<CpuMatrix, BackendError> {
        WeightMatrix::new(info.ty, rows, cols, file.tensor_data(info))?;
        Ok(CpuMatrix { file: Arc::clone(file), info: info.clone(), rows, cols, panels: OnceLock::new(), low_rank: Default::default() })
    }

    fn prepare_products(&self, matrices: &[&CpuMatrix]) -> Result<(), BackendError> {
        let start = std::time::Instant::now();
        // matrices in parallel as well as the panels within each (small matrices would leave
        // the threads idle one after another)
        // products read a repacked matrix's panels only (unless its layout leaves one or two
        // rows to the row dots, Q6_K's): its mapped bytes go back to the kernel as
        // soon as it is repacked, so the model costs its file size once, not twice, even while
        // loading (the embedding table's rows, which `get_rows` reads where the output shares
        // them, come back as they are touched)
        let (bytes, released) = matrices
            .par_iter()
            .map(|m| match m.product_view().panels {
                Some(p) if p.layout.min_batch > 1 => (p.bytes(), 0),
                Some(p) => (p.bytes(), usize::from(m.file.release_pages(&m.info))),
                None => (0, 0),
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        if bytes > 0 {
            tracing::info!(
                matrices = matrices.len(),
                mib = bytes >> 20,
                released,
                ms = start.elapsed().as_millis() as u64,
                "weights repacked into panels for the matmul kernels (their mapped pages released)"
            );
        }
        Ok(())
    }

    fn upload_vector(&self, values: &[f32]) -> Result<Vec<f32>, BackendError> {
        Ok(values.to_vec())
    }

    fn new_kv_store(&self, types: KvTypes, n_layer: usize, k_dim: usize, values: KvValues, state_floats: usize) -> CpuKvStore {
        CpuKvStore::with_states(types, n_layer, k_dim, values, state_floats)
    }

    fn zeros(&self, rows: usize, cols: usize) -> Result<HostTensor, BackendError> {
        Ok(HostTensor::zeros(rows, cols))
    }

    fn upload_tensor(&self, rows: usize, cols: usize, values: &[f32]) -> Result<HostTensor, BackendError> {
        if values.len() != rows * cols {
            return Err(BackendError::shape("upload_tensor", format!("{} values for {rows}x{cols}", values.len())));
        }
        Ok(HostTensor { rows, cols, data: values.to_vec() })
    }

    fn to_host(&self, x: HostTensor) -> Result<Vec<f32>, BackendError> {
        Ok(x.data)
    }

    fn shape(&self, x: &HostTensor) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn get_rows(&self, table: &CpuMatrix, inputs: &[RowInput<'_>]) -> Result<HostTensor, BackendError> {
        let w = table.view();
        let mut out = HostTensor::zeros(inputs.len(), w.cols);
        get_rows(self.isa, &w, inputs, &mut out.data)?;
        Ok(out)
    }

    fn matmul_each(&self, ws: &[&CpuMatrix], biases: &[Option<&Vec<f32>>], x: &HostTensor) -> Result<Vec<HostTensor>, BackendError> {
        assert_eq!(ws.len(), biases.len(), "one bias (or none) per matrix");
        let views: Vec<WeightMatrix> = ws.iter().map(|m| m.product_view()).collect();
        let mut ys: Vec<HostTensor> = views.iter().map(|w| HostTensor::zeros(x.rows, w.rows)).collect();
        let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.data.as_mut_slice()).collect();
        matmul_each_on(self.isa, &views, &x.data, x.rows, &mut outs)?;
        for (y, bias) in ys.iter_mut().zip(biases) {
            if let Some(b) = bias {
                if b.len() != y.cols {
                    return Err(BackendError::shape("matmul_each", format!("a bias of {} for rows of {}", b.len(), y.cols)));
                }
                for row in y.data.chunks_exact_mut(y.cols) {
                    row.iter_mut().zip(b.iter()).for_each(|(v, &c)| *v += c);
                }
            }
        }
        Ok(ys)
    }

    fn add_low_rank(
        &self,
        out: &mut HostTensor,
        a: &CpuMatrix,
        b: &CpuMatrix,
        x: &HostTensor,
        pairs: &[(usize, usize, f32)],
    ) -> Result<(), BackendError> {
        self.add_low_rank_parts(&mut [out], a, &[b], x, pairs)
    }

    fn add_low_rank_parts(
        &self,
        outs: &mut [&mut HostTensor],
        a: &CpuMatrix,
        bs: &[&CpuMatrix],
        x: &HostTensor,
        pairs: &[(usize, usize, f32)],
    ) -> Result<(), BackendError> {
        if a.rows() > super::low_rank::MAX_RANK {
            // a rank this kernel does not hold: the general products, part by part
            let each = crate::backend::add_low_rank_by_products;
            return crate::backend::add_low_rank_parts_one_by_one(self, outs, a, bs, x, pairs, each);
        }
        super::low_rank::add_low_rank_parts(self.isa, outs, a, bs, x, pairs)
    }

    fn matmul_indexed(&self, sets: &[&[CpuMatrix]], ids: &[usize], x: &HostTensor) -> Result<Vec<HostTensor>, BackendError> {
        let shapes: Vec<Vec<(usize, usize)>> = sets.iter().map(|set| set.iter().map(|m| (m.rows, m.cols)).collect()).collect();
        if let Some(why) = indexed_misfit(&shapes, ids, x.rows, x.cols) {
            return Err(BackendError::shape("matmul_indexed", why));
        }
        let plan = IndexedPlan::new(ids, shapes.first().map_or(0, Vec::len), x.rows);
        // views (and panels) of the used matrices only
        let views: Vec<Vec<Option<WeightMatrix>>> = sets
            .iter()
            .map(|set| {
                let mut v: Vec<Option<WeightMatrix>> = vec![None; set.len()];
                plan.used.iter().for_each(|&e| v[e] = Some(set[e].product_view()));
                v
            })
            .collect();
        let mut ys: Vec<HostTensor> = shapes.iter().map(|set| HostTensor::zeros(ids.len(), set.first().map_or(0, |s| s.0))).collect();
        let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.data.as_mut_slice()).collect();
        matmul_indexed_on(self.isa, &views, &plan, &x.data, &mut outs)?;
        Ok(ys)
    }

    fn rms_norm(&self, x: &HostTensor, w: &Vec<f32>, eps: f32, out: &mut HostTensor) -> Result<(), BackendError> {
        same_shape("rms_norm", x, out)?;
        if w.len() != x.cols {
            return Err(BackendError::shape("rms_norm", format!("a scale of {} for rows of {}", w.len(), x.cols)));
        }
        rms_norm(&x.data, w, eps, &mut out.data);
        Ok(())
    }

    fn rms_norm_in_place(&self, x: &mut HostTensor, w: &Vec<f32>, eps: f32) -> Result<(), BackendError> {
        whole_groups("rms_norm_in_place", x, w.len())?;
        rms_norm_in_place(&mut x.data, w, eps);
        Ok(())
    }

    fn layer_norm(&self, x: &HostTensor, w: &Vec<f32>, b: &Vec<f32>, eps: f32, out: &mut HostTensor) -> Result<(), BackendError> {
        same_shape("layer_norm", x, out)?;
        if w.len() != x.cols || b.len() != x.cols {
            return Err(BackendError::shape("layer_norm", format!("scale {} and shift {} for rows of {}", w.len(), b.len(), x.cols)));
        }
        layer_norm(&x.data, w, b, eps, &mut out.data);
        Ok(())
    }

    fn rope(&self, x: &mut HostTensor, r: &Rope, positions: &[u32]) -> Result<(), BackendError> {
        whole_groups("rope", x, r.head_dim)?;
        if positions.len() != x.rows
            || r.n_dims > r.head_dim
            || !r.n_dims.is_multiple_of(2)
            || r.factors.as_ref().is_some_and(|f| f.len() < r.n_dims / 2)
        {
            return Err(BackendError::shape(
                "rope",
                format!(
                    "{} positions, {} rows, {} of {} dims, {:?} factors",
                    positions.len(),
                    x.rows,
                    r.n_dims,
                    r.head_dim,
                    r.factors.as_ref().map(|f| f.len())
                ),
            ));
        }
        let cols = x.cols;
        for (row, &pos) in x.data.chunks_exact_mut(cols).zip(positions) {
            rope_with(self.isa, row, r, pos);
        }
        Ok(())
    }

    fn kv_write(&self, store: &mut CpuKvStore, layer: usize, slots: &[KvSlot], k: &HostTensor, v: &HostTensor) -> Result<(), BackendError> {
        if slots.len() != k.rows || slots.len() != v.rows {
            return Err(BackendError::shape("kv_write", format!("{} slots for {} keys and {} values", slots.len(), k.rows, v.rows)));
        }
        let (kd, vd) = store.dims();
        if k.cols != kd || v.cols != vd {
            return Err(BackendError::shape("kv_write", format!("rows of {}/{} for a cache of {kd}/{vd}", k.cols, v.cols)));
        }
        for (r, slot) in slots.iter().enumerate() {
            store.write(slot.block, layer, slot.offset, k.row(r), v.row(r));
        }
        Ok(())
    }

    fn keep_kv(&self, k: HostTensor, v: HostTensor, shape: &AttentionShape) -> Result<KeptRows, BackendError> {
        KeptRows::new(self.isa, k, v, shape)
    }

    fn attention(
        &self,
        q: &HostTensor,
        kv: KvSource<'_, Self>,
        rows: &[AttentionRow],
        shape: &AttentionShape,
        sinks: Option<&Vec<f32>>,
    ) -> Result<HostTensor, BackendError> {
        let (qd, hv, group) = (shape.q_dim(), shape.head_dim_v, shape.group());
        if q.cols != qd || rows.len() != q.rows || shape.n_head_kv == 0 || !shape.n_head.is_multiple_of(shape.n_head_kv) {
            return Err(BackendError::shape("attention", format!("{}x{} queries, {} rows, {shape:?}", q.rows, q.cols, rows.len())));
        }
        if let Some(s) = sinks.filter(|s| s.len() != shape.n_head) {
            return Err(BackendError::shape("attention", format!("{} sinks for {} heads", s.len(), shape.n_head)));
        }
        let sinks = sinks.map(Vec::as_slice);
        let mut out = HostTensor::zeros(q.rows, shape.out_dim());
        // one task per block of consecutive rows of one sequence and key/value head: the rows
        // and the query heads sharing that head widen and transpose each tile of keys once
        let n_kv = shape.n_head_kv;
        let mut chunks: Vec<Option<&mut [f32]>> = out.data.chunks_mut(group * hv).map(Some).collect();
        // (key/value head, the rows' sequence: its block table or first batch row, the rows)
        let mut tasks: Vec<(usize, usize, Vec<Query>)> = Vec::new();
        let mut blocks = Vec::new();
        let block = if matches!(kv, KvSource::Cache { .. }) { QUERY_BLOCK } else { BATCH_QUERY_BLOCK };
        let mut i = 0;
        while i < rows.len() {
            let end = (i + block).min(rows.len());
            let end = (i + 1..end).find(|&e| rows[e].kv != rows[i].kv).unwrap_or(end);
            for g in 0..n_kv {
                let queries = (i..end)
                    .map(|r| Query { q: q.row(r), positions: rows[r].positions.clone(), out: chunks[r * n_kv + g].take().unwrap() })
                    .collect();
                tasks.push((g, rows[i].kv, queries));
            }
            blocks.push(i..end);
            i = end;
        }
        let run = |g: usize, queries: &mut [Query], view: &dyn KvRows| {
            with_scratch(|scratch| attend_queries_with(self.isa, queries, g, shape, sinks, view, scratch));
        };
        match kv {
            KvSource::Cache { store, layer, tables } => tasks.into_par_iter().for_each(|(g, seq, mut queries)| {
                let view = store.layer_view(tables[seq], layer);
                run(g, &mut queries, &view);
            }),
            KvSource::Batch { k, v } => {
                if let Some(why) = kv_rows_misfit(shape, (k.rows, k.cols), (v.rows, v.cols)) {
                    return Err(BackendError::shape("attention", why));
                }
                let packed = pack_read_heads(self.isa, k, v, rows, &blocks, shape);
                tasks.into_par_iter().for_each(|(g, start, mut queries)| {
                    let view = SeqRows { k, v, start };
                    match packed.get(&(start, g)) {
                        Some(head) => run(g, &mut queries, &PackedRows { rows: view, head }),
                        None => run(g, &mut queries, &view),
                    }
                });
            }
            KvSource::Kept(kept) => {
                if let Some(r) = rows.iter().find(|r| r.kv != 0 || r.positions.end > kept.k.rows) {
                    return Err(BackendError::shape(
                        "attention",
                        format!("row of sequence {} attends {:?} of {} kept rows", r.kv, r.positions, kept.k.rows),
                    ));
                }
                tasks.into_par_iter().for_each(|(g, _, mut queries)| {
                    let view = PackedRows { rows: SeqRows { k: &kept.k, v: &kept.v, start: 0 }, head: &kept.heads[g] };
                    run(g, &mut queries, &view);
                });
            }
        }
        Ok(out)
    }

    fn glu(&self, act: Activation, gate: &mut HostTensor, up: &HostTensor) -> Result<(), BackendError> {
        same_shape("glu", gate, up)?;
        let n = gate.cols.max(1);
        // row by row across the pool: with many rows this is no longer negligible
        let rows = gate.data.par_chunks_exact_mut(n).zip(up.data.par_chunks_exact(n));
        match act {
            Activation::Silu => rows.for_each(|(a, b)| swiglu_row_with(self.isa, a, b)),
            Activation::Gelu => rows.for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a = gelu(*a) * b)),
            Activation::GeluErf => rows.for_each(|(a, b)| gelu_erf_row_with(self.isa, a, Some(b))),
            Activation::SwigluOai => rows.for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a = swiglu_oai(*a, b))),
            Activation::Sigmoid => rows.for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a = sigmoid(*a) * b)),
        }
        Ok(())
    }

    fn activate(&self, act: Activation, x: &mut HostTensor) -> Result<(), BackendError> {
        let f: fn(f32) -> f32 = match act {
            Activation::GeluErf => {
                x.data.par_chunks_mut(4096).for_each(|row| gelu_erf_row_with(self.isa, row, None));
                return Ok(());
            }
            Activation::Gelu => gelu,
            Activation::Silu => silu,
            Activation::Sigmoid => sigmoid,
            Activation::SwigluOai => return Err(BackendError::shape("activate", "SwigluOai is a gated unit: glu only")),
        };
        x.data.par_iter_mut().for_each(|a| *a = f(*a));
        Ok(())
    }

    fn add_scaled(&self, x: &mut HostTensor, y: &HostTensor, scale: f32) -> Result<(), BackendError> {
        same_shape("add_scaled", x, y)?;
        if scale == 1.0 {
            x.data.iter_mut().zip(&y.data).for_each(|(a, &b)| *a += b);
        } else {
            x.data.iter_mut().zip(&y.data).for_each(|(a, &b)| *a += b * scale);
        }
        Ok(())
    }

    fn scale(&self, x: &mut HostTensor, s: f32) -> Result<(), BackendError> {
        x.data.iter_mut().for_each(|v| *v *= s);
        Ok(())
    }

    fn add_weighted_rows(&self, out: &mut HostTensor, src: &HostTensor, pairs: &[(usize, usize, f32)]) -> Result<(), BackendError> {
        let mut seen = std::collections::HashSet::new();
        if out.cols != src.cols || pairs.iter().any(|&(s, o, _)| s >= src.rows || o >= out.rows || !seen.insert(o)) {
            return Err(BackendError::shape(
                "add_weighted_rows",
                format!("{} pairs from {}x{} into {}x{} (each row once)", pairs.len(), src.rows, src.cols, out.rows, out.cols),
            ));
        }
        let cols = out.cols;
        for &(s, o, w) in pairs {
            let from = &src.data[s * cols..(s + 1) * cols];
            out.data[o * cols..(o + 1) * cols].iter_mut().zip(from).for_each(|(a, &v)| *a += v * w);
        }
        Ok(())
    }

    fn add_bias(&self, x: &mut HostTensor, b: &Vec<f32>) -> Result<(), BackendError> {
        if b.len() != x.cols {
            return Err(BackendError::shape("add_bias", format!("a bias of {} for rows of {}", b.len(), x.cols)));
        }
        x.data.chunks_exact_mut(x.cols).for_each(|row| row.iter_mut().zip(b).for_each(|(v, &c)| *v += c));
        Ok(())
    }

    fn softcap(&self, x: &mut HostTensor, cap: f32) -> Result<(), BackendError> {
        x.data.iter_mut().for_each(|v| *v = (*v / cap).tanh() * cap);
        Ok(())
    }

    fn hadamard(&self, x: &mut HostTensor, block: usize) -> Result<(), BackendError> {
        if !block.is_power_of_two() || block > 1024 || !x.cols.is_multiple_of(block) {
            return Err(BackendError::shape("hadamard", format!("blocks of {block} in rows of {}", x.cols)));
        }
        let scale = 1.0 / (block as f32).sqrt();
        for values in x.data.chunks_exact_mut(block) {
            let mut s = 1;
            while s < block {
                for lo in (0..block).filter(|i| i & s == 0) {
                    let (a, b) = (values[lo], values[lo | s]);
                    values[lo] = a + b;
                    values[lo | s] = a - b;
                }
                s <<= 1;
            }
            values.iter_mut().for_each(|v| *v *= scale);
        }
        Ok(())
    }

    fn short_conv(
        &self,
        bcx: &HostTensor,
        kernel: &HostTensor,
        store: &mut CpuKvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<HostTensor, BackendError> {
        super::recurrent::short_conv(bcx, kernel, store, part, runs)
    }

    fn conv_states(
        &self,
        x: &HostTensor,
        kernel: &HostTensor,
        store: &mut CpuKvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<HostTensor, BackendError> {
        super::recurrent::conv_states(x, kernel, store, part, runs)
    }

    fn ssm_scan(
        &self,
        xbc: &HostTensor,
        dt: &HostTensor,
        a: &Vec<f32>,
        d: &Vec<f32>,
        shape: SsmShape,
        store: &mut CpuKvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<HostTensor, BackendError> {
        super::chunked::ssm_scan(self.isa, xbc, dt, a, d, shape, store, part, runs)
    }

    fn delta_rule(
        &self,
        qkv: &HostTensor,
        gates: [&HostTensor; 2],
        [dt_bias, a]: [&Vec<f32>; 2],
        shape: DeltaShape,
        eps: f32,
        store: &mut CpuKvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<HostTensor, BackendError> {
        super::chunked::delta_rule(self.isa, qkv, gates, [dt_bias, a], shape, eps, store, part, runs)
    }

    fn rms_norm_groups(&self, x: &mut HostTensor, w: &Vec<f32>, group: usize, eps: f32) -> Result<(), BackendError> {
        if group == 0 || w.len() != x.cols || !x.cols.is_multiple_of(group) {
            return Err(BackendError::shape("rms_norm_groups", format!("groups of {group} in rows of {} scaled by {}", x.cols, w.len())));
        }
        for row in x.data.chunks_exact_mut(x.cols) {
            for (values, w) in row.chunks_exact_mut(group).zip(w.chunks_exact(group)) {
                rms_norm_in_place(values, w, eps);
            }
        }
        Ok(())
    }

    fn copy_columns(&self, out: &mut HostTensor, to: ColumnBlocks, x: &HostTensor, from: ColumnBlocks) -> Result<(), BackendError> {
        if let Some(why) = column_copy_misfit((out.rows, x.rows), to, out.cols, from, x.cols) {
            return Err(BackendError::shape("copy_columns", why));
        }
        let (oc, xc) = (out.cols, x.cols);
        for (o, s) in out.data.chunks_exact_mut(oc).zip(x.data.chunks_exact(xc)) {
            for j in 0..to.count {
                let (a, b) = (to.start + j * to.stride, from.start + j * from.stride);
                o[a..a + to.width].copy_from_slice(&s[b..b + to.width]);
            }
        }
        Ok(())
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> Result<HostTensor, BackendError> {
        let mut data = Vec::with_capacity(rows.len() * x.cols);
        for &r in rows {
            if r >= x.rows {
                return Err(BackendError::shape("select_rows", format!("row {r} of {}", x.rows)));
            }
            data.extend_from_slice(x.row(r));
        }
        Ok(HostTensor { rows: rows.len(), cols: x.cols, data })
    }
}

#[cfg(test)]
mod tests {
    /// The op table every backend answers to, on the CPU backend itself (the reference the
    /// device backends are compared with elsewhere is checked against plain f64 math here).
    #[test]
    fn the_cpu_backend_passes_the_op_table() {
        let failed = crate::backend::harness::failures(&super::CpuBackend::new(), "cpu");
        assert!(failed.is_empty(), "{failed:#?}");
    }
}
