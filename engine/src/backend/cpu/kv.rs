//! The CPU's KV block storage: each block in use is its own allocation holding every layer's
//! keys and values of `BLOCK_POSITIONS` positions, `[layer][position][dim]`, as f32 or f16. A
//! released block's memory goes back to the allocator at once.

use half::f16;

use super::attention::{KvRow, KvRows};
use crate::backend::{BackendError, BlockId, KvStorage, KvType, BLOCK_POSITIONS};

#[derive(Clone)]
enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Storage {
    fn zeros(ty: KvType, n: usize) -> Storage {
        match ty {
            KvType::F32 => Storage::F32(vec![0.0; n]),
            KvType::F16 => Storage::F16(vec![f16::ZERO; n]),
        }
    }

    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Storage::F32(d) => d[at..at + src.len()].copy_from_slice(src),
            Storage::F16(d) => d[at..at + src.len()].iter_mut().zip(src).for_each(|(o, &v)| *o = f16::from_f32(v)),
        }
    }

    fn row(&self, at: usize, n: usize) -> KvRow<'_> {
        match self {
            Storage::F32(d) => KvRow::F32(&d[at..at + n]),
            Storage::F16(d) => KvRow::F16(&d[at..at + n]),
        }
    }
}

/// Keys and values of `BLOCK_POSITIONS` positions for every layer.
#[derive(Clone)]
struct Block {
    k: Storage,
    v: Storage,
}

/// Block storage in host memory, indexed by block id.
pub struct CpuKvStore {
    ty: KvType,
    n_layer: usize,
    k_dim: usize,
    v_dim: usize,
    blocks: Vec<Option<Box<Block>>>,
}

impl CpuKvStore {
    pub fn new(ty: KvType, n_layer: usize, k_dim: usize, v_dim: usize) -> CpuKvStore {
        CpuKvStore { ty, n_layer, k_dim, v_dim, blocks: Vec::new() }
    }

    fn block(&self, id: BlockId) -> &Block {
        self.blocks[id as usize].as_deref().expect("a block in use")
    }

    /// Stores the key and value rows of `layer` at `offset` of block `id`.
    pub(crate) fn write(&mut self, id: BlockId, layer: usize, offset: usize, k: &[f32], v: &[f32]) {
        debug_assert!(k.len() == self.k_dim && v.len() == self.v_dim && offset < BLOCK_POSITIONS);
        let (kd, vd) = (self.k_dim, self.v_dim);
        let block = self.blocks[id as usize].as_deref_mut().expect("a block in use");
        block.k.write((layer * BLOCK_POSITIONS + offset) * kd, k);
        block.v.write((layer * BLOCK_POSITIONS + offset) * vd, v);
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
        let (kn, vn) = (self.n_layer * BLOCK_POSITIONS * self.k_dim, self.n_layer * BLOCK_POSITIONS * self.v_dim);
        self.blocks[i] = Some(Box::new(Block { k: Storage::zeros(self.ty, kn), v: Storage::zeros(self.ty, vn) }));
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
        self.n_layer * BLOCK_POSITIONS * (self.k_dim + self.v_dim) * self.ty.size()
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
        let (b, kd) = (self.store.block(self.table[pos / BLOCK_POSITIONS]), self.store.k_dim);
        b.k.row((self.layer * BLOCK_POSITIONS + pos % BLOCK_POSITIONS) * kd, kd)
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        let (b, vd) = (self.store.block(self.table[pos / BLOCK_POSITIONS]), self.store.v_dim);
        b.v.row((self.layer * BLOCK_POSITIONS + pos % BLOCK_POSITIONS) * vd, vd)
    }
}
