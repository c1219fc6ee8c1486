//! The backend that runs the `kernels` crate's CUDA C kernels, written once over the crate's
//! [`Runtime`]: on a GPU through the CUDA driver (`CudaBackend`, feature `cuda`), and on host
//! threads through the CPU execution harness ([`SimBackend`], feature `sim`), so that every
//! line of this file — buffer sizes, index arrays, launch choices — runs in the tests of a
//! machine without a GPU. Weights are uploaded once as the file stores them; activations stay
//! on the device until `to_host`.

mod attention;
mod kv;
mod recurrent;
mod tensor;

use std::sync::Arc;

use kernels::launch::{self, MatmulInput, MatrixArgs, RopeArgs, Stack, Q8_1_BYTES};
use kernels::{Runtime, RuntimeError};

pub use kv::DeviceKvStore;
pub use tensor::DeviceTensor;

use crate::backend::indexed::{indexed_misfit, IndexedPlan};
use crate::backend::{
    column_copy_misfit, Activation, AttentionRow, AttentionShape, Backend, BackendError, ColumnBlocks, DeltaShape, Device, KvSlot,
    KvSource, KvTypes, KvValues, Rope, RopeKind, RowInput, SsmShape, StatePart, StateRun,
};
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant::GgmlType;
use crate::quant::WeightMatrix;

/// Batches of at most this many rows (decoding, up to 8 sequences: llama.cpp's mmvq takes as
/// many) use the matrix-vector kernels, which read each weight once per block of up to 8 rows
/// over many blocks; larger ones the tiled matrix kernels (the tensor cores' for quantized
/// weights), whose blocks of 64 outputs are too few for a decoding step. An output's value is
/// the same either way (see `kernels/cuda/mulmat.cuh`).
const MATVEC_MAX_ROWS: usize = launch::MATVEC_ROWS;

/// Passes of at most this many rows (decoding steps, a few sequences' speculative checks) are
/// recorded and replayed as graphs (`Backend::begin_pass`): each recording keeps its pass's
/// activations, which for these rows are small.
const GRAPH_MAX_ROWS: usize = 16;

// The kernels' chunked recurrences keep the same chunks and head layout as the CPU's, so that a
// state slot means the same on every backend.
const _: () = assert!(launch::RECURRENT_CHUNK == crate::backend::RECURRENT_CHUNK);
const _: () = assert!(launch::chunk_head_len(5, 7) == crate::backend::types::chunk_head_len(5, 7));

/// A runtime's error as the backend's, naming the operation (`op`) that met it.
pub(crate) fn runtime_error(device: Device, op: &'static str, e: RuntimeError) -> BackendError {
    match e {
        RuntimeError::OutOfMemory { bytes } => BackendError::OutOfMemory { device, op, bytes },
        e => BackendError::Device { device, message: format!("{op}: {e}") },
    }
}

/// The kernel backend on runtime `R`.
pub struct KernelBackend<R: Runtime> {
    rt: Arc<R>,
    device: Device,
}

/// A weight matrix on the device, rows as the file stores them, from byte `at` of its buffer
/// (experts of one tensor share one buffer: [`Backend::upload_stack`]).
pub struct DeviceMatrix<R: Runtime> {
    buf: Arc<R::Buffer>,
    at: usize,
    args: MatrixArgs,
    ty: GgmlType,
}

/// An f32 vector on the device.
pub struct DeviceVector<R: Runtime> {
    buf: R::Buffer,
    len: usize,
}

fn as_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn act_code(act: Activation) -> i32 {
    match act {
        Activation::Silu => 0,
        Activation::Gelu => 1,
        Activation::GeluErf => 2,
        Activation::SwigluOai => 3,
        Activation::Sigmoid => 4,
    }
}

/// The rotation of `x`'s heads by `r` at `positions`, checked against its shape.
fn rope_args<'a, R: Runtime>(x: &DeviceTensor<R>, r: &'a Rope, positions: &[u32]) -> Result<RopeArgs<'a>, BackendError> {
    if r.head_dim == 0 || !x.cols.is_multiple_of(r.head_dim) || positions.len() != x.rows {
        return Err(BackendError::shape(
            "rope",
            format!("{} positions, {}x{} rows, heads of {}", positions.len(), x.rows, x.cols, r.head_dim),
        ));
    }
    Ok(RopeArgs {
        n_head: x.cols / r.head_dim,
        head_dim: r.head_dim,
        n_dims: r.n_dims,
        freq_base: r.freq_base,
        freq_scale: r.freq_scale,
        neox: r.kind == RopeKind::Neox,
        factors: r.factors.as_deref(),
        yarn: r.yarn.map(|y| (y.ext_factor, y.corr_dims)),
        attn_factor: r.attn_factor,
    })
}

fn same_shape<R: Runtime>(op: &'static str, a: &DeviceTensor<R>, b: &DeviceTensor<R>) -> Result<(), BackendError> {
    if (a.rows, a.cols) != (b.rows, b.cols) {
        return Err(BackendError::shape(op, format!("{}x{} against {}x{}", a.rows, a.cols, b.rows, b.cols)));
    }
    Ok(())
}

impl<R: Runtime> KernelBackend<R> {
    /// The backend over `rt`, named `device`.
    pub fn with_runtime(rt: R, device: Device) -> KernelBackend<R> {
        KernelBackend { rt: Arc::new(rt), device }
    }

    pub fn runtime(&self) -> &R {
        &self.rt
    }

    fn fail(&self, op: &'static str) -> impl Fn(RuntimeError) -> BackendError + '_ {
        move |e| runtime_error(self.device, op, e)
    }

    /// `rows x cols` zeros for operation `op`.
    fn tensor(&self, op: &'static str, rows: usize, cols: usize) -> Result<DeviceTensor<R>, BackendError> {
        let buf = self.rt.alloc_zeroed(rows * cols * 4).map_err(self.fail(op))?;
        Ok(DeviceTensor::new(buf, rows, cols))
    }

    /// `rows x cols` values for operation `op` that its launch writes whole: not zeroed first.
    fn output(&self, op: &'static str, rows: usize, cols: usize) -> Result<DeviceTensor<R>, BackendError> {
        let buf = self.rt.alloc(rows * cols * 4).map_err(self.fail(op))?;
        Ok(DeviceTensor::new(buf, rows, cols))
    }
}

impl<R: Runtime> KernelBackend<R> {
    /// What a product with weights of type `ty` reads of `x`: its f32 rows for float weights, else
    /// its Q8_1 blocks: those written with `x` (a norm's output), or converted on the first call
    /// and kept in `quantized` for the call's other matrices (one conversion of `x` for every
    /// quantized matrix of a call).
    fn matmul_input<'a>(
        &self,
        op: &'static str,
        ty: GgmlType,
        x: &'a DeviceTensor<R>,
        quantized: &'a mut Option<R::Buffer>,
    ) -> Result<MatmulInput<'a, R::Buffer>, BackendError> {
        if matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            return Ok(MatmulInput::F32(x.buf()));
        }
        if let Some(q) = x.q8_1() {
            return Ok(MatmulInput::Q8_1(q)); // written with the values (a norm's output)
        }
        if quantized.is_none() {
            let blocks = x.rows * x.cols / 32;
            let q = self.rt.alloc(blocks * Q8_1_BYTES).map_err(self.fail(op))?;
            launch::quantize_q8_1(&*self.rt, x.buf(), &q, blocks).map_err(self.fail(op))?;
            *quantized = Some(q);
        }
        Ok(MatmulInput::Q8_1(quantized.as_ref().expect("quantized above")))
    }

    /// [`Backend::matmul_indexed`] over experts stacked in one buffer per set: one kernel per
    /// set reads the slots' expert ids, `x` converted to Q8_1 once for the quantized sets.
    fn matmul_stacked(
        &self,
        sets: &[&[DeviceMatrix<R>]],
        stacks: &[Stack],
        ids: &[usize],
        x: &DeviceTensor<R>,
    ) -> Result<Vec<DeviceTensor<R>>, BackendError> {
        let ids32: Vec<u32> = ids.iter().map(|&e| e as u32).collect();
        let per_row = ids.len().checked_div(x.rows).unwrap_or(1);
        let mut quantized: Option<R::Buffer> = None;
        let mut outs = Vec::with_capacity(sets.len());
        for (set, &stack) in sets.iter().zip(stacks) {
            let out = self.output("matmul_indexed", ids.len(), stack.m.rows)?;
            if ids.is_empty() {
                outs.push(out);
                continue;
            }
            let input = self.matmul_input("matmul_indexed", set[0].ty, x, &mut quantized)?;
            launch::mul_mat_id(&*self.rt, &set[0].buf, stack, input, &ids32, per_row, out.buf()).map_err(self.fail("matmul_indexed"))?;
            outs.push(out);
        }
        Ok(outs)
    }
}

/// The stack a set of matrices forms, if it is one: every matrix of one shape and type in one
/// buffer, evenly spaced (what [`Backend::upload_stack`] uploads, or every other matrix of it:
/// fused gate and up experts).
pub(crate) fn stack_of<R: Runtime>(set: &[DeviceMatrix<R>]) -> Option<Stack> {
    let first = set.first()?;
    let bytes = first.args.rows * first.args.row_bytes;
    let stride = set.get(1).map_or(bytes, |m| m.at.wrapping_sub(first.at));
    let same = |m: &DeviceMatrix<R>| {
        (m.args.ty, m.args.rows, m.args.cols, m.args.row_bytes) == (first.args.ty, first.args.rows, first.args.cols, first.args.row_bytes)
    };
    let even = set.iter().enumerate().all(|(e, m)| Arc::ptr_eq(&m.buf, &first.buf) && m.at == first.at + e * stride && same(m));
    (even && stride >= bytes).then_some(Stack { m: first.args, at: first.at, stride, count: set.len() })
}

impl<R: Runtime> Backend for KernelBackend<R>
where
    DeviceKvStore<R>: crate::backend::OwnKvStore,
{
    type Matrix = DeviceMatrix<R>;
    type Vector = DeviceVector<R>;
    type Tensor = DeviceTensor<R>;
    type KvStore = DeviceKvStore<R>;
    type KeptKv = attention::KeptRows<R>;

    fn device(&self) -> Device {
        self.device
    }

    fn upload_matrix(&self, file: &Arc<GgufFile>, info: &TensorInfo, rows: usize, cols: usize) -> Result<DeviceMatrix<R>, BackendError> {
        let data = file.tensor_data(info);
        // the same shape and size checks as the CPU's view of the bytes
        WeightMatrix::new(info.ty, rows, cols, data)?;
        if !GgmlType::WEIGHT_TYPES.contains(&info.ty) && !GgmlType::GRID_TYPES.contains(&info.ty) {
            return Err(BackendError::shape("upload_matrix", format!("{}: no kernel computes with {}", info.name, info.ty)));
        }
        let row_bytes =
            info.ty.row_bytes(cols).ok_or_else(|| BackendError::shape("upload_matrix", format!("{cols} columns of {}", info.ty)))?;
        let buf = Arc::new(self.rt.upload(&data[..rows * row_bytes]).map_err(self.fail("upload_matrix"))?);
        Ok(DeviceMatrix { buf, at: 0, args: MatrixArgs { ty: info.ty.id(), rows, cols, row_bytes }, ty: info.ty })
    }

    fn upload_stack(
        &self,
        file: &Arc<GgufFile>,
        info: &TensorInfo,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<DeviceMatrix<R>>, BackendError> {
        // one upload of the whole stack, each matrix a view into it: `matmul_indexed` then runs
        // one kernel that reads the experts' ids
        let all = self.upload_matrix(file, info, n * rows, cols)?;
        let stride = rows * all.args.row_bytes;
        Ok((0..n)
            .map(|e| DeviceMatrix { buf: Arc::clone(&all.buf), at: e * stride, args: MatrixArgs { rows, ..all.args }, ty: all.ty })
            .collect())
    }

    fn upload_vector(&self, values: &[f32]) -> Result<DeviceVector<R>, BackendError> {
        Ok(DeviceVector { buf: self.rt.upload(&as_bytes(values)).map_err(self.fail("upload_vector"))?, len: values.len() })
    }

    fn new_kv_store(&self, types: KvTypes, n_layer: usize, k_dim: usize, values: KvValues, state_floats: usize) -> DeviceKvStore<R> {
        DeviceKvStore::new(Arc::clone(&self.rt), self.device, types, n_layer, k_dim, values, state_floats)
    }

    fn zeros(&self, rows: usize, cols: usize) -> Result<DeviceTensor<R>, BackendError> {
        self.tensor("zeros", rows, cols)
    }

    fn upload_tensor(&self, rows: usize, cols: usize, values: &[f32]) -> Result<DeviceTensor<R>, BackendError> {
        if values.len() != rows * cols {
            return Err(BackendError::shape("upload_tensor", format!("{} values for {rows}x{cols}", values.len())));
        }
        Ok(DeviceTensor::new(self.rt.upload(&as_bytes(values)).map_err(self.fail("upload_tensor"))?, rows, cols))
    }

    fn begin_pass(&self, rows: usize, shape: u64) {
        // decoding steps come back in the same shape every token; a prompt's rows would keep
        // every activation of the pass alive in its recording
        if rows <= GRAPH_MAX_ROWS {
            self.rt.begin_step(shape);
        }
    }

    fn end_pass(&self) -> Result<(), BackendError> {
        self.rt.end_step().map_err(self.fail("end of a pass"))
    }

    fn to_host(&self, x: DeviceTensor<R>) -> Result<Vec<f32>, BackendError> {
        let mut bytes = vec![0u8; x.rows * x.cols * 4];
        self.rt.download(x.buf(), &mut bytes).map_err(self.fail("to_host"))?;
        Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    fn shape(&self, x: &DeviceTensor<R>) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn get_rows(&self, table: &DeviceMatrix<R>, inputs: &[RowInput<'_>]) -> Result<DeviceTensor<R>, BackendError> {
        let cols = table.args.cols;
        // given rows go up with the upload and the kernel fills the tokens' rows around them;
        // with token rows only (every decode step) there is nothing to upload
        let mut given: Option<Vec<f32>> = None;
        let mut ids = Vec::with_capacity(inputs.len());
        for (r, input) in inputs.iter().enumerate() {
            match *input {
                RowInput::Token(t) => ids.push(Some(t)),
                RowInput::Embedding(row) => {
                    if row.len() != cols {
                        return Err(BackendError::shape("get_rows", format!("an embedding row of {} for rows of {cols}", row.len())));
                    }
                    let host = given.get_or_insert_with(|| vec![0.0f32; inputs.len() * cols]);
                    host[r * cols..(r + 1) * cols].copy_from_slice(row);
                    ids.push(None);
                }
            }
        }
        let out = match given {
            Some(host) => self.upload_tensor(inputs.len(), cols, &host)?,
            // every row is a token's, written by the kernel
            None => self.output("get_rows", inputs.len(), cols)?,
        };
        launch::get_rows(&*self.rt, &table.buf, table.at, table.args, &ids, out.buf()).map_err(self.fail("get_rows"))?;
        Ok(out)
    }

    fn matmul_each(
        &self,
        ws: &[&DeviceMatrix<R>],
        biases: &[Option<&DeviceVector<R>>],
        x: &DeviceTensor<R>,
    ) -> Result<Vec<DeviceTensor<R>>, BackendError> {
        assert_eq!(ws.len(), biases.len(), "one bias (or none) per matrix");
        let mut quantized: Option<R::Buffer> = None;
        let tiled = x.rows > MATVEC_MAX_ROWS;
        for (w, bias) in ws.iter().zip(biases) {
            if w.args.cols != x.cols {
                return Err(BackendError::shape("matmul_each", format!("{}x{} weights for rows of {}", w.args.rows, w.args.cols, x.cols)));
            }
            if let Some(b) = bias.filter(|b| b.len != w.args.rows) {
                return Err(BackendError::shape("matmul_each", format!("a bias of {} for rows of {}", b.len, w.args.rows)));
            }
        }
        let mut outs = Vec::with_capacity(ws.len());
        while outs.len() < ws.len() {
            let (i, w) = (outs.len(), ws[outs.len()]);
            let input = self.matmul_input("matmul", w.ty, x, &mut quantized)?;
            // a decoding step's rows by several matrices of one quantized type and row size (the
            // query, key and value): up to three products in one launch, the same bits
            let same = |v: &&&DeviceMatrix<R>| (v.ty, v.args.row_bytes) == (w.ty, w.args.row_bytes);
            let run = ws[i..].iter().take(launch::PRODUCT_SETS_MAX).take_while(same).count();
            match input {
                MatmulInput::Q8_1(xq) if !tiled && run > 1 => {
                    let group: Vec<DeviceTensor<R>> =
                        ws[i..i + run].iter().map(|v| self.output("matmul", x.rows, v.args.rows)).collect::<Result<_, _>>()?;
                    let sets: Vec<launch::ProductSet<'_, R::Buffer>> = (i..i + run)
                        .zip(&group)
                        .map(|(k, out)| launch::ProductSet {
                            w: &*ws[k].buf,
                            at: ws[k].at,
                            m: ws[k].args,
                            bias: biases[k].map(|b| &b.buf),
                            out: out.buf(),
                        })
                        .collect();
                    launch::mul_mat_vec_sets(&*self.rt, &sets, xq, x.rows).map_err(self.fail("matmul"))?;
                    outs.extend(group);
                }
                input => {
                    let out = self.output("matmul", x.rows, w.args.rows)?;
                    launch::mul_mat(&*self.rt, &w.buf, w.at, w.args, input, x.rows, biases[i].map(|b| &b.buf), out.buf(), tiled)
                        .map_err(self.fail("matmul"))?;
                    outs.push(out);
                }
            }
        }
        Ok(outs)
    }

    fn matmul_glu(
        &self,
        act: Activation,
        [gate, up]: [&DeviceMatrix<R>; 2],
        biases: [Option<&DeviceVector<R>>; 2],
        x: &DeviceTensor<R>,
    ) -> Result<DeviceTensor<R>, BackendError> {
        let same =
            gate.ty == up.ty && (gate.args.rows, gate.args.cols, gate.args.row_bytes) == (up.args.rows, up.args.cols, up.args.row_bytes);
        let both_biases = biases.iter().all(Option::is_some) || biases.iter().all(Option::is_none);
        let fits = biases.iter().flatten().all(|b| b.len == gate.args.rows) && gate.args.cols == x.cols;
        if !(same && both_biases && fits && x.rows <= MATVEC_MAX_ROWS) {
            // a prompt's rows (the tiles), one bias without the other: the two products
            return crate::backend::products_then_glu(self, act, [gate, up], biases, x);
        }
        let mut q8 = None;
        let xq = match self.matmul_input("matmul_glu", gate.ty, x, &mut q8)? {
            MatmulInput::Q8_1(xq) => xq,
            // float weights
            MatmulInput::F32(_) => return crate::backend::products_then_glu(self, act, [gate, up], biases, x),
        };
        let out = self.output("matmul_glu", x.rows, gate.args.rows)?;
        let bias_bufs = match biases {
            [Some(g), Some(u)] => Some((&g.buf, &u.buf)),
            _ => None,
        };
        let (gate_at, up_at, x_rows) = ((&*gate.buf, gate.at), (&*up.buf, up.at), (xq, x.rows));
        launch::mul_mat_glu(&*self.rt, gate_at, up_at, gate.args, x_rows, None, bias_bufs, out.buf(), act_code(act))
            .map_err(self.fail("matmul_glu"))?;
        Ok(out)
    }

    fn matmul_indexed_glu(
        &self,
        act: Activation,
        [gate, up]: [&[DeviceMatrix<R>]; 2],
        ids: &[usize],
        x: &DeviceTensor<R>,
    ) -> Result<DeviceTensor<R>, BackendError> {
        let (gs, us) = match (stack_of(gate), stack_of(up)) {
            (Some(g), Some(u)) => (g, u),
            _ => return crate::backend::indexed_products_then_glu(self, act, [gate, up], ids, x),
        };
        let ids32: Vec<u32> = ids.iter().map(|&e| e as u32).collect();
        let same = gate[0].ty == up[0].ty
            && (gs.m.rows, gs.m.cols, gs.m.row_bytes, gs.stride, gs.count) == (us.m.rows, us.m.cols, us.m.row_bytes, us.stride, us.count);
        let fits = gs.m.cols == x.cols && !ids.is_empty() && ids.len().is_multiple_of(x.rows.max(1));
        if !(same && fits) || launch::expert_tiles_pay(&ids32, gs.count) {
            // a prompt's slots (the expert tiles), unlike sets: the products, then the unit
            return crate::backend::indexed_products_then_glu(self, act, [gate, up], ids, x);
        }
        let mut q8 = None;
        let xq = match self.matmul_input("matmul_indexed_glu", gate[0].ty, x, &mut q8)? {
            MatmulInput::Q8_1(xq) => xq,
            // float weights
            MatmulInput::F32(_) => return crate::backend::indexed_products_then_glu(self, act, [gate, up], ids, x),
        };
        let out = self.output("matmul_indexed_glu", ids.len(), gs.m.rows)?;
        let slots = launch::GluSlots { ids: &ids32, count: gs.count, stride: gs.stride, per_row: ids.len() / x.rows };
        launch::mul_mat_glu(
            &*self.rt,
            (&gate[0].buf, gs.at),
            (&up[0].buf, us.at),
            gs.m,
            (xq, x.rows),
            Some(slots),
            None,
            out.buf(),
            act_code(act),
        )
        .map_err(self.fail("matmul_indexed_glu"))?;
        Ok(out)
    }

    fn matmul_indexed(
        &self,
        sets: &[&[DeviceMatrix<R>]],
        ids: &[usize],
        x: &DeviceTensor<R>,
    ) -> Result<Vec<DeviceTensor<R>>, BackendError> {
        let shapes: Vec<Vec<(usize, usize)>> = sets.iter().map(|set| set.iter().map(|m| (m.args.rows, m.args.cols)).collect()).collect();
        if let Some(why) = indexed_misfit(&shapes, ids, x.rows, x.cols) {
            return Err(BackendError::shape("matmul_indexed", why));
        }
        if let Some(stacks) = sets.iter().map(|set| stack_of(set)).collect::<Option<Vec<Stack>>>() {
            return self.matmul_stacked(sets, &stacks, ids, x);
        }
        // matrices uploaded one by one: each distinct list of rows gathered once; each used
        // matrix's sets in one matmul pass; its rows added (weight 1, onto zeros: the same bits
        // but for a zero's sign) into their slots
        let plan = IndexedPlan::new(ids, shapes.first().map_or(0, Vec::len), x.rows);
        let sources: Vec<DeviceTensor<R>> = plan.sources.iter().map(|rows| self.select_rows(x, rows)).collect::<Result<_, _>>()?;
        let mut outs: Vec<DeviceTensor<R>> =
            shapes.iter().map(|set| self.zeros(ids.len(), set.first().map_or(0, |s| s.0))).collect::<Result<_, _>>()?;
        for ((&e, slots), &source) in plan.used.iter().zip(&plan.slots).zip(&plan.source_of) {
            let ws: Vec<&DeviceMatrix<R>> = sets.iter().map(|set| &set[e]).collect();
            let ys = self.matmul_each(&ws, &vec![None; ws.len()], &sources[source])?;
            let pairs: Vec<(usize, usize, f32)> = slots.iter().enumerate().map(|(i, &p)| (i, p, 1.0)).collect();
            for (out, y) in outs.iter_mut().zip(&ys) {
                self.add_weighted_rows(out, y, &pairs)?;
            }
        }
        Ok(outs)
    }

    fn rms_norm(&self, x: &DeviceTensor<R>, w: &DeviceVector<R>, eps: f32, out: &mut DeviceTensor<R>) -> Result<(), BackendError> {
        same_shape("rms_norm", x, out)?;
        if w.len != x.cols {
            return Err(BackendError::shape("rms_norm", format!("a scale of {} for rows of {}", w.len, x.cols)));
        }
        // the normed rows are products' inputs (every caller's): their Q8_1 blocks in the same
        // pass, for the quantized products that read them next
        let (y, q) = out.written_with_q8_1(Q8_1_BYTES, |bytes| self.rt.alloc(bytes)).map_err(self.fail("rms_norm"))?;
        launch::rms_norm(&*self.rt, x.buf(), &w.buf, y, x.rows, x.cols, eps, 1, q).map_err(self.fail("rms_norm"))
    }

    fn add_rms_norm(
        &self,
        x: &mut DeviceTensor<R>,
        y: &DeviceTensor<R>,
        scale: f32,
        w: &DeviceVector<R>,
        eps: f32,
        out: &mut DeviceTensor<R>,
    ) -> Result<(), BackendError> {
        same_shape("add_rms_norm", x, y)?;
        same_shape("add_rms_norm", x, out)?;
        if w.len != x.cols {
            return Err(BackendError::shape("add_rms_norm", format!("a scale of {} for rows of {}", w.len, x.cols)));
        }
        let (rows, cols) = (x.rows, x.cols);
        // as rms_norm: the normed rows with their Q8_1 blocks
        let (normed, q) = out.written_with_q8_1(Q8_1_BYTES, |bytes| self.rt.alloc(bytes)).map_err(self.fail("add_rms_norm"))?;
        launch::add_rms_norm(&*self.rt, x.written(), y.buf(), scale, &w.buf, normed, rows, cols, eps, q).map_err(self.fail("add_rms_norm"))
    }

    fn rms_norm_in_place(&self, x: &mut DeviceTensor<R>, w: &DeviceVector<R>, eps: f32) -> Result<(), BackendError> {
        if w.len == 0 || !x.cols.is_multiple_of(w.len) {
            return Err(BackendError::shape("rms_norm_in_place", format!("rows of {} values are not whole groups of {}", x.cols, w.len)));
        }
        let groups = x.rows * x.cols / w.len;
        let x = x.written();
        launch::rms_norm(&*self.rt, x, &w.buf, x, groups, w.len, eps, 1, None).map_err(self.fail("rms_norm_in_place"))
    }

    fn layer_norm(
        &self,
        x: &DeviceTensor<R>,
        w: &DeviceVector<R>,
        b: &DeviceVector<R>,
        eps: f32,
        out: &mut DeviceTensor<R>,
    ) -> Result<(), BackendError> {
        same_shape("layer_norm", x, out)?;
        if w.len != x.cols || b.len != x.cols {
            return Err(BackendError::shape("layer_norm", format!("scale {} and shift {} for rows of {}", w.len, b.len, x.cols)));
        }
        launch::layer_norm(&*self.rt, x.buf(), &w.buf, &b.buf, out.written(), x.rows, x.cols, eps).map_err(self.fail("layer_norm"))
    }

    fn rope(&self, x: &mut DeviceTensor<R>, r: &Rope, positions: &[u32]) -> Result<(), BackendError> {
        let args = rope_args(x, r, positions)?;
        launch::rope(&*self.rt, x.written(), positions, args).map_err(self.fail("rope"))
    }

    fn rope_pair(&self, q: &mut DeviceTensor<R>, k: &mut DeviceTensor<R>, r: &Rope, positions: &[u32]) -> Result<(), BackendError> {
        let (args, k_heads) = (rope_args(q, r, positions)?, rope_args(k, r, positions)?.n_head);
        launch::rope_pair(&*self.rt, q.written(), k.written(), k_heads, positions, args).map_err(self.fail("rope"))
    }

    fn kv_write(
        &self,
        store: &mut DeviceKvStore<R>,
        layer: usize,
        slots: &[KvSlot],
        k: &DeviceTensor<R>,
        v: &DeviceTensor<R>,
    ) -> Result<(), BackendError> {
        if slots.len() != k.rows || slots.len() != v.rows {
            return Err(BackendError::shape("kv_write", format!("{} slots for {} keys and {} values", slots.len(), k.rows, v.rows)));
        }
        let (kd, vd) = store.dims();
        if k.cols != kd || v.cols != vd {
            return Err(BackendError::shape("kv_write", format!("rows of {}/{} for a cache of {kd}/{vd}", k.cols, v.cols)));
        }
        let Some((kp, vp, ka, va)) = store.pools() else {
            return Err(BackendError::shape("kv_write", "no block was allocated"));
        };
        let at: Vec<(u32, usize)> = slots.iter().map(|s| (s.block, s.offset)).collect();
        let keys = launch::KvRowsInto { src: k.buf(), pool_buf: kp, pool: ka };
        let values = launch::KvRowsInto { src: v.buf(), pool_buf: vp, pool: va };
        // values held in the keys' rows are written with them
        let parts: &[_] = if store.values_in_keys() { &[keys] } else { &[keys, values] };
        launch::kv_write(&*self.rt, parts, &at, layer).map_err(self.fail("kv_write"))
    }

    fn keep_kv(&self, k: DeviceTensor<R>, v: DeviceTensor<R>, shape: &AttentionShape) -> Result<attention::KeptRows<R>, BackendError> {
        self.keep(k, v, shape)
    }

    fn attention(
        &self,
        q: &DeviceTensor<R>,
        kv: KvSource<'_, Self>,
        rows: &[AttentionRow],
        shape: &AttentionShape,
        sinks: Option<&DeviceVector<R>>,
    ) -> Result<DeviceTensor<R>, BackendError> {
        self.attend(q, kv, rows, shape, sinks)
    }

    fn glu(&self, act: Activation, gate: &mut DeviceTensor<R>, up: &DeviceTensor<R>) -> Result<(), BackendError> {
        same_shape("glu", gate, up)?;
        let (rows, cols) = (gate.rows, gate.cols);
        launch::glu(&*self.rt, gate.written(), up.buf(), rows, cols, act_code(act)).map_err(self.fail("glu"))
    }

    fn activate(&self, act: Activation, x: &mut DeviceTensor<R>) -> Result<(), BackendError> {
        let n = x.rows * x.cols;
        launch::activate(&*self.rt, x.written(), n, act_code(act)).map_err(self.fail("activate"))
    }

    fn add_scaled(&self, x: &mut DeviceTensor<R>, y: &DeviceTensor<R>, scale: f32) -> Result<(), BackendError> {
        same_shape("add_scaled", x, y)?;
        let n = x.rows * x.cols;
        launch::add_scaled(&*self.rt, x.written(), y.buf(), scale, n).map_err(self.fail("add_scaled"))
    }

    fn scale(&self, x: &mut DeviceTensor<R>, s: f32) -> Result<(), BackendError> {
        let n = x.rows * x.cols;
        launch::scale_or_cap(&*self.rt, "scale", x.written(), s, n).map_err(self.fail("scale"))
    }

    fn add_weighted_rows(
        &self,
        out: &mut DeviceTensor<R>,
        src: &DeviceTensor<R>,
        pairs: &[(usize, usize, f32)],
    ) -> Result<(), BackendError> {
        if out.cols != src.cols {
            return Err(BackendError::shape("add_weighted_rows", format!("rows of {} into rows of {}", src.cols, out.cols)));
        }
        let (rows, cols) = (out.rows, out.cols);
        launch::add_weighted_rows(&*self.rt, out.written(), rows, src.buf(), src.rows, pairs, cols).map_err(self.fail("add_weighted_rows"))
    }

    fn add_bias(&self, x: &mut DeviceTensor<R>, b: &DeviceVector<R>) -> Result<(), BackendError> {
        if b.len != x.cols {
            return Err(BackendError::shape("add_bias", format!("a bias of {} for rows of {}", b.len, x.cols)));
        }
        let (cols, n) = (x.cols, x.rows * x.cols);
        launch::add_bias(&*self.rt, x.written(), &b.buf, cols, n).map_err(self.fail("add_bias"))
    }

    fn softcap(&self, x: &mut DeviceTensor<R>, cap: f32) -> Result<(), BackendError> {
        let n = x.rows * x.cols;
        launch::scale_or_cap(&*self.rt, "softcap", x.written(), cap, n).map_err(self.fail("softcap"))
    }

    fn hadamard(&self, x: &mut DeviceTensor<R>, block: usize) -> Result<(), BackendError> {
        if !block.is_power_of_two() || block > 1024 || !x.cols.is_multiple_of(block) {
            return Err(BackendError::shape("hadamard", format!("blocks of {block} in rows of {}", x.cols)));
        }
        let n = x.rows * x.cols;
        launch::hadamard(&*self.rt, x.written(), block, n).map_err(self.fail("hadamard"))
    }

    fn conv_states(
        &self,
        x: &DeviceTensor<R>,
        kernel: &DeviceTensor<R>,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        self.convolve("conv_states", x, kernel, false, store, part, runs)
    }

    fn ssm_scan(
        &self,
        xbc: &DeviceTensor<R>,
        dt: &DeviceTensor<R>,
        a: &DeviceVector<R>,
        d: &DeviceVector<R>,
        shape: SsmShape,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        self.scan_states([xbc, dt], [a, d], shape, store, part, runs)
    }

    fn delta_rule(
        &self,
        qkv: &DeviceTensor<R>,
        gates: [&DeviceTensor<R>; 2],
        vectors: [&DeviceVector<R>; 2],
        shape: DeltaShape,
        eps: f32,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        self.delta_states(qkv, gates, vectors, shape, eps, store, part, runs)
    }

    fn rms_norm_groups(&self, x: &mut DeviceTensor<R>, w: &DeviceVector<R>, group: usize, eps: f32) -> Result<(), BackendError> {
        if group == 0 || w.len != x.cols || !x.cols.is_multiple_of(group) {
            return Err(BackendError::shape("rms_norm_groups", format!("groups of {group} in rows of {} scaled by {}", x.cols, w.len)));
        }
        let groups = x.rows * x.cols / group;
        let w_groups = x.cols / group;
        let x = x.written();
        launch::rms_norm(&*self.rt, x, &w.buf, x, groups, group, eps, w_groups, None).map_err(self.fail("rms_norm_groups"))
    }

    fn short_conv(
        &self,
        bcx: &DeviceTensor<R>,
        kernel: &DeviceTensor<R>,
        store: &mut DeviceKvStore<R>,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<DeviceTensor<R>, BackendError> {
        self.convolve("short_conv", bcx, kernel, true, store, part, runs)
    }

    fn copy_columns(
        &self,
        out: &mut DeviceTensor<R>,
        to: ColumnBlocks,
        x: &DeviceTensor<R>,
        from: ColumnBlocks,
    ) -> Result<(), BackendError> {
        if let Some(why) = column_copy_misfit((out.rows, x.rows), to, out.cols, from, x.cols) {
            return Err(BackendError::shape("copy_columns", why));
        }
        let blocks = |c: ColumnBlocks| launch::Blocks { start: c.start, stride: c.stride };
        let out_cols = out.cols;
        launch::copy_columns(&*self.rt, (out.written(), out_cols, blocks(to)), (x.buf(), x.cols, blocks(from)), x.rows, to.width, to.count)
            .map_err(self.fail("copy_columns"))
    }

    fn select_rows(&self, x: &DeviceTensor<R>, rows: &[usize]) -> Result<DeviceTensor<R>, BackendError> {
        let out = self.output("select_rows", rows.len(), x.cols)?;
        launch::select_rows(&*self.rt, x.buf(), x.rows, rows, out.buf(), x.cols).map_err(self.fail("select_rows"))?;
        Ok(out)
    }
}

/// The kernels run by the CPU execution harness, standing for GPU 0.
#[cfg(feature = "sim")]
pub type SimBackend = KernelBackend<kernels::host::HostRuntime>;

#[cfg(feature = "sim")]
impl SimBackend {
    pub fn new() -> SimBackend {
        KernelBackend::with_runtime(kernels::host::HostRuntime::default(), Device::Cuda(0))
    }
}

#[cfg(feature = "sim")]
impl Default for SimBackend {
    fn default() -> Self {
        SimBackend::new()
    }
}

/// The kernels on a CUDA GPU.
#[cfg(feature = "cuda")]
pub type CudaBackend = KernelBackend<kernels::cuda::CudaRuntime>;

#[cfg(feature = "cuda")]
impl CudaBackend {
    /// GPU `ordinal`: a one-line error when the driver, NVRTC or the GPU is missing.
    pub fn open(ordinal: u32) -> Result<CudaBackend, BackendError> {
        let device = Device::Cuda(ordinal);
        let rt = kernels::cuda::CudaRuntime::open(ordinal as usize).map_err(|e| runtime_error(device, "open", e))?;
        Ok(KernelBackend::with_runtime(rt, device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_failure_names_the_operation_that_met_it() {
        let oom = runtime_error(Device::Cuda(0), "matmul", RuntimeError::OutOfMemory { bytes: 4096 });
        assert_eq!(oom.to_string(), "device cuda:0: out of memory in matmul (4096 bytes asked for)");
        let fault = runtime_error(Device::Cuda(1), "to_host", RuntimeError::Device("download: CUDA_ERROR_ILLEGAL_ADDRESS".into()));
        assert_eq!(fault.to_string(), "device cuda:1: to_host: download: CUDA_ERROR_ILLEGAL_ADDRESS");
    }
}
