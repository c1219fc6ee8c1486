//! The KV cache's blocks on a kernel device: one pool of keys and one of values, laid out
//! `[block][layer][position][dim]` so that a block is one contiguous range (a copy-on-write is one
//! device copy per pool). The pools grow (doubling, the old contents copied over) when a block id
//! past their end comes into use; the block bookkeeping stays on the host (`kv_cache`).

use std::sync::Arc;

use kernels::launch::PoolArgs;
use kernels::Runtime;

use super::runtime_error;
use crate::backend::{BackendError, BlockId, Device, KvStorage, KvType, BLOCK_POSITIONS};

/// Blocks a new store makes room for before its first growth.
const INITIAL_BLOCKS: usize = 16;

pub struct DeviceKvStore<R: Runtime> {
    rt: Arc<R>,
    device: Device,
    ty: KvType,
    n_layer: usize,
    k_dim: usize,
    v_dim: usize,
    /// Blocks the pools hold (allocated lazily: 0 until the first block is used).
    capacity: usize,
    pools: Option<(R::Buffer, R::Buffer)>,
}

impl<R: Runtime> DeviceKvStore<R> {
    pub(super) fn new(rt: Arc<R>, device: Device, ty: KvType, n_layer: usize, k_dim: usize, v_dim: usize) -> DeviceKvStore<R> {
        DeviceKvStore { rt, device, ty, n_layer, k_dim, v_dim, capacity: 0, pools: None }
    }

    pub(super) fn pool_args(&self, dim: usize) -> PoolArgs {
        PoolArgs { blocks: self.capacity, n_layer: self.n_layer, dim, f16: self.ty == KvType::F16 }
    }

    /// (keys, values, their layouts); `None` before any block was allocated.
    pub(super) fn pools(&self) -> Option<(&R::Buffer, &R::Buffer, PoolArgs, PoolArgs)> {
        self.pools.as_ref().map(|(k, v)| (k, v, self.pool_args(self.k_dim), self.pool_args(self.v_dim)))
    }

    fn bytes_per_block(&self, dim: usize) -> usize {
        self.n_layer * BLOCK_POSITIONS * dim * self.ty.size()
    }

    fn grow_to(&mut self, blocks: usize) -> Result<(), BackendError> {
        let fail = |e| runtime_error(self.device, e);
        let (kb, vb) = (self.bytes_per_block(self.k_dim), self.bytes_per_block(self.v_dim));
        let k = self.rt.alloc_zeroed(blocks * kb).map_err(fail)?;
        let v = self.rt.alloc_zeroed(blocks * vb).map_err(fail)?;
        if let Some((old_k, old_v)) = &self.pools {
            self.rt.copy(old_k, 0, &k, 0, self.capacity * kb).map_err(fail)?;
            self.rt.copy(old_v, 0, &v, 0, self.capacity * vb).map_err(fail)?;
        }
        self.pools = Some((k, v));
        self.capacity = blocks;
        Ok(())
    }
}

impl<R: Runtime> KvStorage for DeviceKvStore<R> {
    fn alloc_block(&mut self, id: BlockId) -> Result<(), BackendError> {
        let need = id as usize + 1;
        if need > self.capacity {
            self.grow_to(need.max(self.capacity * 2).max(INITIAL_BLOCKS))?;
        }
        Ok(())
    }

    fn release_block(&mut self, _id: BlockId) {}

    fn copy_block(&mut self, src: BlockId, dst: BlockId) -> Result<(), BackendError> {
        let (kb, vb) = (self.bytes_per_block(self.k_dim), self.bytes_per_block(self.v_dim));
        let Some((k, v)) = &self.pools else {
            return Err(BackendError::shape("copy_block", "no block was allocated"));
        };
        let (s, d) = (src as usize, dst as usize);
        let fail = |e| runtime_error(self.device, e);
        self.rt.copy(k, s * kb, k, d * kb, kb).map_err(fail)?;
        self.rt.copy(v, s * vb, v, d * vb, vb).map_err(fail)
    }

    fn block_bytes(&self) -> usize {
        self.bytes_per_block(self.k_dim) + self.bytes_per_block(self.v_dim)
    }
}
