//! The CPU's KV block storage: each block in use is its own allocation holding every layer's
//! keys and values of `BLOCK_POSITIONS` positions, `[layer][position][dim]`, as f32, f16, or
//! rows of Q8_0 / Q4_0 blocks (quantized as llama.cpp's x86 CPU backend stores them); values
//! that are the keys' leading columns (`KvValues::KeyPrefix`) are read from the key rows. A
//! released block's memory goes back to the allocator at once.

use half::f16;

use super::kv_rows::{KvRow, KvRows};
use crate::backend::{BackendError, BlockId, KvStorage, KvType, KvTypes, KvValues, StateId, BLOCK_POSITIONS, KV_QUANT_BLOCK};
use crate::quant::blocks::{BlockQ4_0, BlockQ8_0};
use crate::quant::{q4_0, q8_0};

/// The rows of one block, keys or values: `rows` rows of `dim` values each.
#[derive(Clone)]
enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q8_0(Vec<BlockQ8_0>),
    Q4_0(Vec<BlockQ4_0>),
}

impl Storage {
    fn zeros(ty: KvType, rows: usize, dim: usize) -> Storage {
        let blocks = rows * dim.div_ceil(KV_QUANT_BLOCK);
        match ty {
            KvType::F32 => Storage::F32(vec![0.0; rows * dim]),
            KvType::F16 => Storage::F16(vec![f16::ZERO; rows * dim]),
            KvType::Q8_0 => Storage::Q8_0(vec![bytemuck::Zeroable::zeroed(); blocks]),
            KvType::Q4_0 => Storage::Q4_0(vec![bytemuck::Zeroable::zeroed(); blocks]),
        }
    }

    /// Stores `src` (one row) as row `row`.
    fn write(&mut self, row: usize, src: &[f32]) {
        let (dim, per_row) = (src.len(), src.len().div_ceil(KV_QUANT_BLOCK));
        match self {
            Storage::F32(d) => d[row * dim..(row + 1) * dim].copy_from_slice(src),
            Storage::F16(d) => d[row * dim..(row + 1) * dim].iter_mut().zip(src).for_each(|(o, &v)| *o = f16::from_f32(v)),
            Storage::Q8_0(d) => quantize_padded(src, &mut d[row * per_row..(row + 1) * per_row], |x, b| {
                q8_0::quantize_activations(x, bytemuck::cast_slice_mut(b))
            }),
            Storage::Q4_0(d) => quantize_padded(src, &mut d[row * per_row..(row + 1) * per_row], q4_0::quantize_ref),
        }
    }

    /// Row `row` of `dim` values.
    fn row(&self, row: usize, dim: usize) -> KvRow<'_> {
        self.row_prefix(row, dim, dim)
    }

    /// The leading `len` values of row `row` of `dim` values (`len` a multiple of the block
    /// for the quantized types).
    fn row_prefix(&self, row: usize, dim: usize, len: usize) -> KvRow<'_> {
        let per_row = dim.div_ceil(KV_QUANT_BLOCK);
        let blocks = row * per_row..row * per_row + len.div_ceil(KV_QUANT_BLOCK);
        match self {
            Storage::F32(d) => KvRow::F32(&d[row * dim..row * dim + len]),
            Storage::F16(d) => KvRow::F16(&d[row * dim..row * dim + len]),
            Storage::Q8_0(d) => KvRow::Q8_0(&d[blocks]),
            Storage::Q4_0(d) => KvRow::Q4_0(&d[blocks]),
        }
    }
}

/// Quantizes one row into `blocks` with `quantize`, a last partial block padded with zeros.
fn quantize_padded<B>(src: &[f32], blocks: &mut [B], quantize: impl Fn(&[f32], &mut [B])) {
    let whole = src.len() / KV_QUANT_BLOCK;
    let (head, tail) = src.split_at(whole * KV_QUANT_BLOCK);
    quantize(head, &mut blocks[..whole]);
    if !tail.is_empty() {
        let mut padded = [0.0f32; KV_QUANT_BLOCK];
        padded[..tail.len()].copy_from_slice(tail);
        quantize(&padded, &mut blocks[whole..]);
    }
}

/// Keys and values (none when they are the keys' leading columns) of `BLOCK_POSITIONS`
/// positions for every layer.
#[derive(Clone)]
struct Block {
    k: Storage,
    v: Option<Storage>,
}

/// Block storage in host memory, indexed by block id.
pub struct CpuKvStore {
    types: KvTypes,
    n_layer: usize,
    k_dim: usize,
    values: KvValues,
    blocks: Vec<Option<Box<Block>>>,
    /// Values of one recurrent-state slot (every recurrent layer's state), and the slots.
    state_floats: usize,
    states: Vec<Option<Box<[f32]>>>,
}

impl CpuKvStore {
    pub fn new(types: KvTypes, n_layer: usize, k_dim: usize, v_dim: usize) -> CpuKvStore {
        CpuKvStore::with_states(types, n_layer, k_dim, KvValues::Rows(v_dim), 0)
    }

    /// A store that also holds recurrent-state slots of `state_floats` values; values in the
    /// keys take the keys' type.
    pub fn with_states(types: KvTypes, n_layer: usize, k_dim: usize, values: KvValues, state_floats: usize) -> CpuKvStore {
        CpuKvStore { types: values.kept_types(types), n_layer, k_dim, values, blocks: Vec::new(), state_floats, states: Vec::new() }
    }

    /// State slot `id`, taken out of the store (for a kernel to work on several at once); put
    /// back with [`CpuKvStore::put_state`].
    pub(crate) fn take_state(&mut self, id: StateId) -> Result<Box<[f32]>, BackendError> {
        self.states
            .get_mut(id as usize)
            .and_then(Option::take)
            .ok_or_else(|| BackendError::shape("state", format!("state slot {id} is not in use")))
    }

    pub(crate) fn put_state(&mut self, id: StateId, state: Box<[f32]>) {
        self.states[id as usize] = Some(state);
    }

    /// The values of state slot `id` (tests).
    #[cfg(test)]
    pub(crate) fn state(&self, id: StateId) -> &[f32] {
        self.states[id as usize].as_deref().expect("a state slot in use")
    }

    fn block(&self, id: BlockId) -> &Block {
        self.blocks[id as usize].as_deref().expect("a block in use")
    }

    /// Stores the key and value rows of `layer` at `offset` of block `id`.
    pub(crate) fn write(&mut self, id: BlockId, layer: usize, offset: usize, k: &[f32], v: &[f32]) {
        debug_assert!(k.len() == self.k_dim && v.len() == self.values.dim() && offset < BLOCK_POSITIONS);
        let block = self.blocks[id as usize].as_deref_mut().expect("a block in use");
        block.k.write(layer * BLOCK_POSITIONS + offset, k);
        if let Some(values) = &mut block.v {
            values.write(layer * BLOCK_POSITIONS + offset, v);
        }
    }

    /// Key and value widths.
    pub(crate) fn dims(&self) -> (usize, usize) {
        (self.k_dim, self.values.dim())
    }

    /// One layer of the sequence whose blocks are `table`, for attention.
    pub(crate) fn layer_view<'a>(&'a self, table: &'a [BlockId], layer: usize) -> LayerView<'a> {
        LayerView { store: self, table, layer }
    }
}

impl KvStorage for CpuKvStore {
    fn alloc_block(&mut self, id: BlockId) -> Result<(), BackendError> {
        let i = id as usize;
        if self.blocks.len() <= i {
            self.blocks.resize_with(i + 1, || None);
        }
        let rows = self.n_layer * BLOCK_POSITIONS;
        let k = Storage::zeros(self.types.key, rows, self.k_dim);
        let v = match self.values {
            KvValues::Rows(dim) => Some(Storage::zeros(self.types.value, rows, dim)),
            KvValues::KeyPrefix(_) => None,
        };
        self.blocks[i] = Some(Box::new(Block { k, v }));
        Ok(())
    }

    fn release_block(&mut self, id: BlockId) {
        self.blocks[id as usize] = None;
    }

    fn copy_block(&mut self, src: BlockId, dst: BlockId) -> Result<(), BackendError> {
        let copy = self.block(src).clone();
        self.blocks[dst as usize] = Some(Box::new(copy));
        Ok(())
    }

    fn block_bytes(&self) -> usize {
        self.n_layer * BLOCK_POSITIONS * (self.types.key.row_bytes(self.k_dim) + self.values.stored_row_bytes(self.types.value))
    }

    fn alloc_state(&mut self, id: StateId) -> Result<(), BackendError> {
        if self.state_floats == 0 {
            return Err(BackendError::shape("alloc_state", "this store holds no recurrent states"));
        }
        let i = id as usize;
        if self.states.len() <= i {
            self.states.resize_with(i + 1, || None);
        }
        self.states[i] = Some(vec![0.0; self.state_floats].into_boxed_slice());
        Ok(())
    }

    fn release_state(&mut self, id: StateId) {
        self.states[id as usize] = None;
    }

    fn copy_state(&mut self, src: StateId, dst: StateId) -> Result<(), BackendError> {
        let copy =
            self.states[src as usize].clone().ok_or_else(|| BackendError::shape("copy_state", format!("slot {src} is not in use")))?;
        self.states[dst as usize] = Some(copy);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.state_floats * 4
    }
}

/// One layer of one sequence.
pub(crate) struct LayerView<'a> {
    store: &'a CpuKvStore,
    table: &'a [BlockId],
    layer: usize,
}

impl KvRows for LayerView<'_> {
    fn key(&self, pos: usize) -> KvRow<'_> {
        let b = self.store.block(self.table[pos / BLOCK_POSITIONS]);
        b.k.row(self.layer * BLOCK_POSITIONS + pos % BLOCK_POSITIONS, self.store.k_dim)
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        let b = self.store.block(self.table[pos / BLOCK_POSITIONS]);
        let (row, dim) = (self.layer * BLOCK_POSITIONS + pos % BLOCK_POSITIONS, self.store.values.dim());
        match &b.v {
            Some(values) => values.row(row, dim),
            None => b.k.row_prefix(row, self.store.k_dim, dim),
        }
    }
}
