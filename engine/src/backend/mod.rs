//! Compute backends behind one seam. The forward passes (`model::decoder`, `model::bert`) are
//! written once over the [`Backend`] trait: the operations they use, over buffers the backend
//! owns (weights uploaded once, activations that stay on the device until the logits or hidden
//! rows are copied to the host at the end of a step, KV block storage). The CPU backend is
//! always built; every backend is checked op by op against the reference by `harness`.

pub mod cpu;
#[cfg(all(test, feature = "cuda"))]
mod cuda_check;
pub mod device;
mod error;
#[cfg(any(test, feature = "sim", feature = "cuda"))]
pub mod harness;
pub(crate) mod indexed;
#[cfg(any(feature = "sim", feature = "cuda"))]
pub mod kernel;
pub mod loaded;
#[cfg(all(test, feature = "sim"))]
mod sim_check;
#[cfg(all(test, feature = "sim"))]
mod sim_fused;
pub mod types;

use std::sync::Arc;

// the backends by name, for the code that picks one (`model`'s dispatch); their kernels stay
// inside their modules
pub use cpu::CpuBackend;
pub use device::{Device, DeviceParseError, DeviceWork};
pub use error::BackendError;
pub(crate) use loaded::{on_backend, on_same_backend};
pub use loaded::{Backends, OnBackend, PerBackend};
pub use types::{
    Activation, AttentionRow, AttentionShape, BlockId, ColumnBlocks, DeltaShape, KvSlot, KvType, KvTypes, KvValues, Rope, RopeKind,
    RowInput, SsmShape, StateId, StatePart, StateRun, Yarn, BLOCK_POSITIONS, KV_QUANT_BLOCK, RECURRENT_CHUNK, SWIGLU_OAI_ALPHA,
    SWIGLU_OAI_LIMIT,
};

use crate::gguf::{GgufFile, TensorInfo};

/// Key/value block storage owned by a backend. The block bookkeeping of `kv_cache` (tables,
/// reference counts, forks, copy-on-write decisions) is the same for every device; it tells the
/// storage which blocks exist and which to copy. A block holds every layer's keys and values of
/// [`BLOCK_POSITIONS`] positions.
pub trait KvStorage: Send + Sync {
    /// Block `id` comes into use (its contents are unspecified until written).
    fn alloc_block(&mut self, id: BlockId) -> Result<(), BackendError>;
    /// Block `id` is no longer used by any sequence.
    fn release_block(&mut self, id: BlockId);
    /// Copies the contents of block `src` into block `dst` (both in use).
    fn copy_block(&mut self, src: BlockId, dst: BlockId) -> Result<(), BackendError>;
    /// Bytes one block takes.
    fn block_bytes(&self) -> usize;
    /// Recurrent-state slot `id` comes into use, all zeros (the state before a sequence's first
    /// position). A store made without states refuses.
    fn alloc_state(&mut self, _id: StateId) -> Result<(), BackendError> {
        Err(BackendError::shape("alloc_state", "this store holds no recurrent states"))
    }
    /// State slot `id` is no longer used.
    fn release_state(&mut self, _id: StateId) {}
    /// Copies state slot `src` into slot `dst` (both in use).
    fn copy_state(&mut self, _src: StateId, _dst: StateId) -> Result<(), BackendError> {
        Err(BackendError::shape("copy_state", "this store holds no recurrent states"))
    }
    /// Bytes one state slot takes (0: the model has no recurrent layers).
    fn state_bytes(&self) -> usize {
        0
    }
}

/// A cache's block memory, as the backend that made it holds it: one variant per backend, so
/// that a forward pass finds its own store by its type, and a cache of another backend is
/// told apart without any cast.
pub enum KvMemory {
    Cpu(cpu::kv::CpuKvStore),
    #[cfg(feature = "sim")]
    Sim(kernel::DeviceKvStore<kernels::host::HostRuntime>),
    #[cfg(feature = "cuda")]
    Cuda(kernel::DeviceKvStore<kernels::cuda::CudaRuntime>),
}

/// A backend's store as its variant of [`KvMemory`].
pub trait OwnKvStore: KvStorage + Sized {
    fn into_memory(self) -> KvMemory;
    /// The store, when `memory` is this backend's.
    fn within(memory: &mut KvMemory) -> Option<&mut Self>;
}

/// [`OwnKvStore`] for backend store type `$store`, variant `$variant` of [`KvMemory`]: one line
/// per backend, beside the enum.
macro_rules! own_kv_store {
    ($store:ty => $variant:ident) => {
        impl OwnKvStore for $store {
            fn into_memory(self) -> KvMemory {
                KvMemory::$variant(self)
            }

            fn within(memory: &mut KvMemory) -> Option<&mut Self> {
                match memory {
                    KvMemory::$variant(s) => Some(s),
                    // the other backends' variants (none when the CPU is the only backend)
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }
    };
}

own_kv_store!(cpu::kv::CpuKvStore => Cpu);
#[cfg(feature = "sim")]
own_kv_store!(kernel::DeviceKvStore<kernels::host::HostRuntime> => Sim);
#[cfg(feature = "cuda")]
own_kv_store!(kernel::DeviceKvStore<kernels::cuda::CudaRuntime> => Cuda);

/// `$body` with `$s` bound to whichever backend's store `$memory` holds.
macro_rules! on_store {
    ($memory:expr, $s:ident => $body:expr) => {
        match $memory {
            KvMemory::Cpu($s) => $body,
            #[cfg(feature = "sim")]
            KvMemory::Sim($s) => $body,
            #[cfg(feature = "cuda")]
            KvMemory::Cuda($s) => $body,
        }
    };
}

impl KvStorage for KvMemory {
    fn alloc_block(&mut self, id: BlockId) -> Result<(), BackendError> {
        on_store!(self, s => s.alloc_block(id))
    }

    fn release_block(&mut self, id: BlockId) {
        on_store!(self, s => s.release_block(id))
    }

    fn copy_block(&mut self, src: BlockId, dst: BlockId) -> Result<(), BackendError> {
        on_store!(self, s => s.copy_block(src, dst))
    }

    fn block_bytes(&self) -> usize {
        on_store!(self, s => s.block_bytes())
    }

    fn alloc_state(&mut self, id: StateId) -> Result<(), BackendError> {
        on_store!(self, s => s.alloc_state(id))
    }

    fn release_state(&mut self, id: StateId) {
        on_store!(self, s => s.release_state(id))
    }

    fn copy_state(&mut self, src: StateId, dst: StateId) -> Result<(), BackendError> {
        on_store!(self, s => s.copy_state(src, dst))
    }

    fn state_bytes(&self) -> usize {
        on_store!(self, s => s.state_bytes())
    }
}

/// Where an attention call reads its keys and values.
pub enum KvSource<'a, B: Backend> {
    /// Layer `layer` of the KV cache; an [`AttentionRow`]'s `kv` indexes `tables` (one block
    /// table per sequence: position `p` lives in block `table[p / BLOCK_POSITIONS]`).
    Cache { store: &'a B::KvStore, layer: usize, tables: &'a [&'a [BlockId]] },
    /// The batch's own rows (an encoder): an [`AttentionRow`]'s `kv` is the batch row of its
    /// sequence's position 0.
    Batch { k: &'a B::Tensor, v: &'a B::Tensor },
    /// One sequence's rows kept by [`Backend::keep_kv`] for many calls (the audio every decoded
    /// token of a Whisper window attends): every [`AttentionRow`]'s `kv` is 0.
    Kept(&'a B::KeptKv),
}

/// [`Backend::matmul_indexed_glu`] as the indexed products and [`Backend::glu`].
pub(crate) fn indexed_products_then_glu<B: Backend>(
    b: &B,
    act: Activation,
    [gate, up]: [&[B::Matrix]; 2],
    ids: &[usize],
    x: &B::Tensor,
) -> Result<B::Tensor, BackendError> {
    let mut ys = b.matmul_indexed(&[gate, up], ids, x)?.into_iter();
    let (mut g, u) = (ys.next().expect("the gate set's products"), ys.next().expect("the up set's products"));
    b.glu(act, &mut g, &u)?;
    Ok(g)
}

/// [`Backend::matmul_glu`] as two products and [`Backend::glu`].
pub(crate) fn products_then_glu<B: Backend>(
    b: &B,
    act: Activation,
    [gate, up]: [&B::Matrix; 2],
    biases: [Option<&B::Vector>; 2],
    x: &B::Tensor,
) -> Result<B::Tensor, BackendError> {
    let mut ys = b.matmul_each(&[gate, up], &biases, x)?.into_iter();
    let (mut g, u) = (ys.next().expect("the gate's product"), ys.next().expect("the up's product"));
    b.glu(act, &mut g, &u)?;
    Ok(g)
}

/// The operations the forward passes are made of. Every operation treats each row of its
/// input alone, in an order that does not depend on the batch, so that a row's results are
/// bitwise the same alone or batched (batch invariance), on every backend.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A weight matrix on the device: rows of the file's type (any type of `quant`).
    type Matrix: Send + Sync;
    /// A small f32 vector on the device (a norm's scale, a bias).
    type Vector: Send + Sync;
    /// Activations on the device: rows of f32 values.
    type Tensor: Send + Sync;
    /// Key/value block storage on the device.
    type KvStore: OwnKvStore;
    /// Keys and values that many attention calls read whole, laid out once as this backend's
    /// attention reads them best ([`Backend::keep_kv`]).
    type KeptKv: Send + Sync;

    fn device(&self) -> Device;

    /// Uploads tensor `info` of `file` as a `rows x cols` matrix (shape and type already checked).
    fn upload_matrix(&self, file: &Arc<GgufFile>, info: &TensorInfo, rows: usize, cols: usize) -> Result<Self::Matrix, BackendError>;
    /// The `n` matrices of `rows` x `cols` stacked in tensor `info` (a mixture's experts), in
    /// order; a backend may keep them together (the kernel backend's indexed products read a
    /// stack by the experts' ids).
    fn upload_stack(
        &self,
        file: &Arc<GgufFile>,
        info: &TensorInfo,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<Self::Matrix>, BackendError> {
        (0..n)
            .map(|e| {
                let part = info
                    .rows((e * rows) as u64, rows as u64)
                    .ok_or_else(|| BackendError::shape("upload_stack", format!("{}: matrix {e} of {n} x {rows} rows", info.name)))?;
                self.upload_matrix(file, &part, rows, cols)
            })
            .collect()
    }
    fn upload_vector(&self, values: &[f32]) -> Result<Self::Vector, BackendError>;
    /// Readies the matrices that products read (not the embedding tables) for them, once, at
    /// load: where a device keeps them in another layout (the CPU's repacked panels) the work
    /// and the memory are then spent before the first request, not inside it.
    fn prepare_products(&self, _matrices: &[&Self::Matrix]) -> Result<(), BackendError> {
        Ok(())
    }
    /// Empty block storage for `n_layer` layers of `k_dim` key values and `values` per position,
    /// and recurrent-state slots of `state_floats` f32 values each (0: none).
    fn new_kv_store(&self, types: KvTypes, n_layer: usize, k_dim: usize, values: KvValues, state_floats: usize) -> Self::KvStore;

    /// Marks the start of one forward pass of `rows` rows on this thread; `shape` tells passes of
    /// different structure apart (rows per sequence, logits, adapters). A device may record a
    /// pass and replay it as one graph when a pass of the same shape comes again (the kernel
    /// backend, for decoding steps: `kernels/src/steps.rs`); the CPU does nothing.
    fn begin_pass(&self, _rows: usize, _shape: u64) {}
    /// Marks the end of the pass this thread began: anything a device held back is issued.
    fn end_pass(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// `rows x cols` zeros.
    fn zeros(&self, rows: usize, cols: usize) -> Result<Self::Tensor, BackendError>;
    /// Host values as `rows x cols` activations.
    fn upload_tensor(&self, rows: usize, cols: usize, values: &[f32]) -> Result<Self::Tensor, BackendError>;
    /// The values of `x`, row after row: the one copy back to the host of a step.
    fn to_host(&self, x: Self::Tensor) -> Result<Vec<f32>, BackendError>;
    /// `(rows, cols)` of `x`.
    fn shape(&self, x: &Self::Tensor) -> (usize, usize);

    /// One row per input: a token's row of `table` dequantized, or the given row.
    fn get_rows(&self, table: &Self::Matrix, inputs: &[RowInput<'_>]) -> Result<Self::Tensor, BackendError>;
    /// `x · wᵀ (+ bias)` for every matrix of `ws` (same input; the q/k/v or gate/up projections
    /// share one conversion of `x` and one pass).
    fn matmul_each(
        &self,
        ws: &[&Self::Matrix],
        biases: &[Option<&Self::Vector>],
        x: &Self::Tensor,
    ) -> Result<Vec<Self::Tensor>, BackendError>;
    /// `out[o] += w · (x[s] · aᵀ) · bᵀ` for every `(s, o, w)` of `pairs` (a LoRA pair's
    /// correction: `a` of `rank` x `n_in`, `b` of `n_out` x `rank`; an `out` row at most once),
    /// each row's values its own alone, the weighted product rounded before the sum. By default
    /// the rows gathered, the two products, then [`Backend::add_weighted_rows`]; a backend whose
    /// general product is slow for so few values per dot has its own.
    fn add_low_rank(
        &self,
        out: &mut Self::Tensor,
        a: &Self::Matrix,
        b: &Self::Matrix,
        x: &Self::Tensor,
        pairs: &[(usize, usize, f32)],
    ) -> Result<(), BackendError> {
        add_low_rank_by_products(self, out, a, b, x, pairs)
    }
    /// [`Backend::add_low_rank`] into several outputs whose pairs share `a` (the parts of a
    /// fused projection), `outs[p]` through `bs[p]`; each part's values those it gets alone. By
    /// default one part after the other; a backend may compute `x · aᵀ` once for all.
    fn add_low_rank_parts(
        &self,
        outs: &mut [&mut Self::Tensor],
        a: &Self::Matrix,
        bs: &[&Self::Matrix],
        x: &Self::Tensor,
        pairs: &[(usize, usize, f32)],
    ) -> Result<(), BackendError> {
        add_low_rank_parts_one_by_one(self, outs, a, bs, x, pairs, Self::add_low_rank)
    }
    /// Indexed products (ggml's `mul_mat_id`): slot `p` of `ids` is multiplied by matrix `ids[p]`
    /// of every set, `outs[s]` row `p` = `x` row `p / (ids.len() / x.rows)` · `sets[s][ids[p]]ᵀ`.
    /// `x` has one row per slot, or one per token whose `ids.len() / x.rows` slots all read it
    /// (a token's chosen experts); the matrices of a set share one shape. Each slot's row has the
    /// bits `matmul_each` gives it, whatever the other slots.
    fn matmul_indexed(&self, sets: &[&[Self::Matrix]], ids: &[usize], x: &Self::Tensor) -> Result<Vec<Self::Tensor>, BackendError>;
    /// `out[r] = x[r] / sqrt(mean(x[r]²) + eps) · w` for every row (`out` of `x`'s shape).
    fn rms_norm(&self, x: &Self::Tensor, w: &Self::Vector, eps: f32, out: &mut Self::Tensor) -> Result<(), BackendError>;
    /// The same in place, for every group of `len(w)` values (whole rows, or single heads).
    fn rms_norm_in_place(&self, x: &mut Self::Tensor, w: &Self::Vector, eps: f32) -> Result<(), BackendError>;
    /// `out[r] = (x[r] - mean) / sqrt(var + eps) · w + b` for every row.
    fn layer_norm(
        &self,
        x: &Self::Tensor,
        w: &Self::Vector,
        b: &Self::Vector,
        eps: f32,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;
    /// Rotates every head of row `r` of `x` for position `positions[r]`.
    fn rope(&self, x: &mut Self::Tensor, rope: &Rope, positions: &[u32]) -> Result<(), BackendError>;
    /// [`Backend::rope`] of `q` and of `k` (a layer's queries and keys, heads of one size), which
    /// a device does in one launch with the same bits.
    fn rope_pair(&self, q: &mut Self::Tensor, k: &mut Self::Tensor, rope: &Rope, positions: &[u32]) -> Result<(), BackendError> {
        self.rope(q, rope, positions)?;
        self.rope(k, rope, positions)
    }
    /// Stores row `r` of `k` and `v` at `slots[r]` of layer `layer`; a store whose values are
    /// the keys' leading columns ([`KvValues::KeyPrefix`]) stores the keys alone (`v` is then
    /// those columns, checked for its width only).
    fn kv_write(
        &self,
        store: &mut Self::KvStore,
        layer: usize,
        slots: &[KvSlot],
        k: &Self::Tensor,
        v: &Self::Tensor,
    ) -> Result<(), BackendError>;
    /// Keeps the keys `k` and values `v` of one sequence (a row per position, all key/value
    /// heads of `shape`) for the attention calls that read them through [`KvSource::Kept`].
    fn keep_kv(&self, k: Self::Tensor, v: Self::Tensor, shape: &AttentionShape) -> Result<Self::KeptKv, BackendError>;
    /// Scaled dot-product attention of every query row of `q` (all heads, grouped-query heads
    /// sharing their key/value head) over the positions its [`AttentionRow`] names; with
    /// `sinks` (one logit per query head, gpt-oss), each head's softmax also takes its sink,
    /// which carries no value.
    fn attention(
        &self,
        q: &Self::Tensor,
        kv: KvSource<'_, Self>,
        rows: &[AttentionRow],
        shape: &AttentionShape,
        sinks: Option<&Self::Vector>,
    ) -> Result<Self::Tensor, BackendError>;
    /// `gate = act(gate) · up`, element by element.
    fn glu(&self, act: Activation, gate: &mut Self::Tensor, up: &Self::Tensor) -> Result<(), BackendError>;
    /// A gated unit: `act(x · gateᵀ (+ bias)) · (x · upᵀ (+ bias))`, the bits of
    /// [`Backend::matmul_each`] of the two then [`Backend::glu`], which is what it does unless a
    /// backend does both at once (the kernel backend's decoding steps: one pass over both
    /// matrices, nothing written between).
    fn matmul_glu(
        &self,
        act: Activation,
        [gate, up]: [&Self::Matrix; 2],
        biases: [Option<&Self::Vector>; 2],
        x: &Self::Tensor,
    ) -> Result<Self::Tensor, BackendError> {
        products_then_glu(self, act, [gate, up], biases, x)
    }
    /// An indexed gated unit: `act(gate slot) · (up slot)` for every slot of
    /// [`Backend::matmul_indexed`] over the gate and up sets, the bits of that then
    /// [`Backend::glu`], which is what it does unless a backend does both at once.
    fn matmul_indexed_glu(
        &self,
        act: Activation,
        [gate, up]: [&[Self::Matrix]; 2],
        ids: &[usize],
        x: &Self::Tensor,
    ) -> Result<Self::Tensor, BackendError> {
        indexed_products_then_glu(self, act, [gate, up], ids, x)
    }
    /// `x = act(x)`, element by element.
    fn activate(&self, act: Activation, x: &mut Self::Tensor) -> Result<(), BackendError>;
    /// `x += y · scale` (`x += y` when the scale is 1).
    fn add_scaled(&self, x: &mut Self::Tensor, y: &Self::Tensor, scale: f32) -> Result<(), BackendError>;
    /// [`Backend::add_scaled`] then [`Backend::rms_norm`] of the sum into `out`: a residual added
    /// as the next layer's norm reads it, which a device does in one pass with the same bits.
    fn add_rms_norm(
        &self,
        x: &mut Self::Tensor,
        y: &Self::Tensor,
        scale: f32,
        w: &Self::Vector,
        eps: f32,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        self.add_scaled(x, y, scale)?;
        self.rms_norm(x, w, eps, out)
    }
    /// `x *= s`.
    fn scale(&self, x: &mut Self::Tensor, s: f32) -> Result<(), BackendError>;
    /// `out[o] += w · src[s]` for every `(s, o, w)` of `pairs`, the product rounded before the
    /// sum: a mixture of experts' outputs added into their tokens' rows. An `out` row appears at
    /// most once in a call, so the order of additions into a row is the order of the calls.
    fn add_weighted_rows(&self, out: &mut Self::Tensor, src: &Self::Tensor, pairs: &[(usize, usize, f32)]) -> Result<(), BackendError>;
    /// `x[r] += b` for every row `r` (a projection's bias added after its scale).
    fn add_bias(&self, x: &mut Self::Tensor, b: &Self::Vector) -> Result<(), BackendError>;
    /// `x = tanh(x / cap) · cap`.
    fn softcap(&self, x: &mut Self::Tensor, cap: f32) -> Result<(), BackendError>;
    /// Every block of `block` values of each row (a power of two dividing the row, at most 1024)
    /// multiplied by the orthonormal Walsh-Hadamard matrix of that order, its own inverse:
    /// butterflies at distances 1, 2, 4, ... (the lower value of a pair gets `a + b`, the upper
    /// `a - b`), then `1 / sqrt(block)`. The rotation a quantized KV cache stores keys and
    /// values under, as llama.cpp does.
    fn hadamard(&self, x: &mut Self::Tensor, block: usize) -> Result<(), BackendError>;
    /// LFM2's gated short convolution, one sequence's rows after the other's state: `bcx` rows of
    /// `3 d` values (`b`, `c`, `x`), `kernel` `d` rows of `L` taps (oldest first). For each run
    /// (a sequence's rows in position order) and row: `u = b ⊙ x`, the channel's window is the
    /// state's `L - 1` earlier `u` rows (`part` of the run's slot, oldest first) then `u`, the
    /// output `c ⊙ Σ_k window[k] · tap[k]` (summed from the oldest tap), and the window's
    /// newest `L - 1` rows become the state; snapshots get the state after their row.
    /// `rows x d`.
    fn short_conv(
        &self,
        bcx: &Self::Tensor,
        kernel: &Self::Tensor,
        store: &mut Self::KvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<Self::Tensor, BackendError>;
    /// A causal depthwise convolution with states (ggml's `ssm_conv`, Mamba-2's): `x` rows of
    /// `ch` values, `kernel` `ch` rows of `L` taps; each run's rows continue the window of `L - 1`
    /// earlier rows its slot holds (`part`), each output the sum from the oldest tap; snapshots
    /// get the state after their row. `rows x ch`.
    fn conv_states(
        &self,
        x: &Self::Tensor,
        kernel: &Self::Tensor,
        store: &mut Self::KvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<Self::Tensor, BackendError>;
    /// Mamba-2's selective scan, each run's rows in order from its slot's state (`part`:
    /// `n_head` x `head_dim` x `d_state`): `xbc` rows of the heads' values then B's and C's groups,
    /// `dt` rows of one step per head (its bias added). Per head `h` and row: `Δ = softplus(dt)`,
    /// the state `s = s · exp(Δ a[h]) + B ⊗ (x Δ)`, the output `s · C + x · d[h]`; snapshots get
    /// the state after their row. `rows x (n_head · head_dim)`.
    #[allow(clippy::too_many_arguments)]
    fn ssm_scan(
        &self,
        xbc: &Self::Tensor,
        dt: &Self::Tensor,
        a: &Self::Vector,
        d: &Self::Vector,
        shape: SsmShape,
        store: &mut Self::KvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<Self::Tensor, BackendError>;
    /// The gated delta rule (Qwen3.5's linear attention), each run's rows in order from its slot's
    /// state (`part`: per value head, `head_dim` rows `j` of `head_dim` values): `qkv` rows of the
    /// query heads, the key heads, then the value heads; `alpha` and `beta` rows of one value
    /// per value head. Per head `h` and row: `q` and `k` (head `h % n_k_heads`) divided by their
    /// L2 norms (ggml's `rms_norm` with `eps / head_dim`, times `1 / sqrt(head_dim)`), the decay
    /// `exp(softplus(alpha + dt_bias[h]) · a[h])`, `β = sigmoid(beta)`; every state row `j`
    /// decays, then `δ = (v[j] - row · k) β`, `row += k δ`, and the output is `(row · q) /
    /// sqrt(head_dim)`; snapshots get the state after their row. `rows x (n_v_heads · head_dim)`.
    #[allow(clippy::too_many_arguments)]
    fn delta_rule(
        &self,
        qkv: &Self::Tensor,
        gates: [&Self::Tensor; 2],
        per_head: [&Self::Vector; 2],
        shape: DeltaShape,
        eps: f32,
        store: &mut Self::KvStore,
        part: StatePart,
        runs: &[StateRun],
    ) -> Result<Self::Tensor, BackendError>;
    /// [`Backend::rms_norm_in_place`] over every group of `group` values of each row, the group
    /// at column `c` scaled by `w[c..c + group]` (`w` one value per column).
    fn rms_norm_groups(&self, x: &mut Self::Tensor, w: &Self::Vector, group: usize, eps: f32) -> Result<(), BackendError>;
    /// The rows `rows` of `x`, in that order.
    fn select_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Result<Self::Tensor, BackendError>;
    /// `out`'s column blocks `to` of every row = `x`'s blocks `from` of the same row (both of one
    /// width and count; `out` and `x` of one row count): a part of every head taken out of a
    /// projection, or heads set side by side (multi-head latent attention).
    fn copy_columns(&self, out: &mut Self::Tensor, to: ColumnBlocks, x: &Self::Tensor, from: ColumnBlocks) -> Result<(), BackendError>;
}

/// One correction of a part's pair (the signature of [`Backend::add_low_rank`]).
pub(crate) type LowRankAdd<B> = fn(
    &B,
    &mut <B as Backend>::Tensor,
    &<B as Backend>::Matrix,
    &<B as Backend>::Matrix,
    &<B as Backend>::Tensor,
    &[(usize, usize, f32)],
) -> Result<(), BackendError>;

/// [`Backend::add_low_rank_parts`] as one `each` (an [`Backend::add_low_rank`]) per part.
pub(crate) fn add_low_rank_parts_one_by_one<B: Backend>(
    backend: &B,
    outs: &mut [&mut B::Tensor],
    a: &B::Matrix,
    bs: &[&B::Matrix],
    x: &B::Tensor,
    pairs: &[(usize, usize, f32)],
    each: LowRankAdd<B>,
) -> Result<(), BackendError> {
    if outs.len() != bs.len() {
        return Err(BackendError::shape("add_low_rank", format!("{} outputs for {} matrices", outs.len(), bs.len())));
    }
    for (out, b) in outs.iter_mut().zip(bs) {
        each(backend, out, a, b, x, pairs)?;
    }
    Ok(())
}

/// [`Backend::add_low_rank`] by the general operations: the rows gathered, the two products,
/// then the weighted adds.
pub(crate) fn add_low_rank_by_products<B: Backend>(
    backend: &B,
    out: &mut B::Tensor,
    a: &B::Matrix,
    b: &B::Matrix,
    x: &B::Tensor,
    pairs: &[(usize, usize, f32)],
) -> Result<(), BackendError> {
    let sources: Vec<usize> = pairs.iter().map(|p| p.0).collect();
    let gathered = backend.select_rows(x, &sources)?;
    let low = backend.matmul_each(&[a], &[None], &gathered)?.pop().expect("one product"); // pairs x rank
    let delta = backend.matmul_each(&[b], &[None], &low)?.pop().expect("one product"); // pairs x n_out
    let placed: Vec<(usize, usize, f32)> = pairs.iter().enumerate().map(|(i, &(_, o, w))| (i, o, w)).collect();
    backend.add_weighted_rows(out, &delta, &placed)
}

/// Why keys of `k` (rows, columns) and values of `v` are not the rows of all key/value heads
/// of `shape`, one row per position, if they are not (a batch's own rows, or rows to keep).
pub(crate) fn kv_rows_misfit(shape: &AttentionShape, k: (usize, usize), v: (usize, usize)) -> Option<String> {
    (k.1 != shape.n_head_kv * shape.head_dim_k || v.1 != shape.n_head_kv * shape.head_dim_v || k.0 != v.0)
        .then(|| format!("keys {}x{} and values {}x{} for {shape:?}", k.0, k.1, v.0, v.1))
}

/// Why `copy_columns` cannot copy `from` of rows of `x_cols` into `to` of rows of `out_cols`
/// (`rows` each), if it cannot.
pub(crate) fn column_copy_misfit(
    rows: (usize, usize),
    to: ColumnBlocks,
    out_cols: usize,
    from: ColumnBlocks,
    x_cols: usize,
) -> Option<String> {
    if rows.0 != rows.1 {
        return Some(format!("{} rows into {}", rows.1, rows.0));
    }
    if (to.width, to.count) != (from.width, from.count) {
        return Some(format!("{from:?} into {to:?}"));
    }
    to.misfit(out_cols).or_else(|| from.misfit(x_cols))
}
