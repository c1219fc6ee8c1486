//! The KV cache's blocks on a kernel device: one pool of keys and one of values, laid out
//! `[block][layer][position][dim]` so that a block is one contiguous range (a copy-on-write is one
//! device copy per pool). The pools grow (doubling, the old contents copied over) when a block id
//! past their end comes into use; the block bookkeeping stays on the host (`kv_cache`). Values
//! that are the keys' leading columns (`KvValues::KeyPrefix`) have no pool: the kernels read them
//! from the key pool. The recurrent layers' state slots are a third pool, `[slot][value]` in f32,
//! grown the same way.

use std::sync::Arc;

use kernels::launch::{PoolArgs, PoolElement};
use kernels::Runtime;

use super::runtime_error;
use crate::backend::{BackendError, BlockId, Device, KvStorage, KvType, KvTypes, KvValues, StateId, BLOCK_POSITIONS};

/// Blocks a new store makes room for before its first growth.
const INITIAL_BLOCKS: usize = 16;

pub struct DeviceKvStore<R: Runtime> {
    rt: Arc<R>,
    device: Device,
    types: KvTypes,
    n_layer: usize,
    k_dim: usize,
    values: KvValues,
    /// Blocks the pools hold (allocated lazily: 0 until the first block is used).
    capacity: usize,
    /// The key pool and the value pool (none for values in the keys).
    pools: Option<(R::Buffer, Option<R::Buffer>)>,
    /// f32 values of one state slot (0: no recurrent layers), the slots the state pool holds,
    /// the pool, and one slot of zeros that a new slot is copied from.
    state_floats: usize,
    state_capacity: usize,
    states: Option<(R::Buffer, R::Buffer)>,
}

impl<R: Runtime> DeviceKvStore<R> {
    pub(super) fn new(
        rt: Arc<R>,
        device: Device,
        types: KvTypes,
        n_layer: usize,
        k_dim: usize,
        values: KvValues,
        state_floats: usize,
    ) -> DeviceKvStore<R> {
        let types = values.kept_types(types);
        DeviceKvStore { rt, device, types, n_layer, k_dim, values, capacity: 0, pools: None, state_floats, state_capacity: 0, states: None }
    }

    /// The state pool (`[slot][state_floats]` f32 values), its slots and a slot's values;
    /// `None` before any slot was used.
    pub(super) fn state_pool(&self) -> Option<(&R::Buffer, usize, usize)> {
        self.states.as_ref().map(|(pool, _)| (pool, self.state_capacity, self.state_floats))
    }

    fn grow_states_to(&mut self, slots: usize) -> Result<(), BackendError> {
        let fail = |e| runtime_error(self.device, "recurrent states", e);
        let bytes = self.state_floats * 4;
        let pool = self.rt.alloc_zeroed(slots * bytes).map_err(fail)?;
        let zeros = match self.states.take() {
            Some((old, zeros)) => {
                self.rt.copy(&old, 0, &pool, 0, self.state_capacity * bytes).map_err(fail)?;
                zeros
            }
            None => self.rt.alloc_zeroed(bytes).map_err(fail)?,
        };
        self.states = Some((pool, zeros));
        self.state_capacity = slots;
        Ok(())
    }

    /// The layouts of the key pool and of the value pool (the key pool's for values in the keys).
    pub(super) fn pool_args(&self) -> (PoolArgs, PoolArgs) {
        let args = |dim, ty| PoolArgs { blocks: self.capacity, n_layer: self.n_layer, dim, element: element(ty) };
        let keys = args(self.k_dim, self.types.key);
        match self.values {
            KvValues::Rows(dim) => (keys, args(dim, self.types.value)),
            KvValues::KeyPrefix(_) => (keys, keys),
        }
    }

    /// (keys, values, their layouts: for values in the keys, the key pool twice); `None` before
    /// any block was allocated.
    pub(super) fn pools(&self) -> Option<(&R::Buffer, &R::Buffer, PoolArgs, PoolArgs)> {
        let (k_args, v_args) = self.pool_args();
        self.pools.as_ref().map(|(k, v)| (k, v.as_ref().unwrap_or(k), k_args, v_args))
    }

    /// Key and value widths.
    pub(super) fn dims(&self) -> (usize, usize) {
        (self.k_dim, self.values.dim())
    }

    /// Whether the values are the keys' leading columns (no pool of their own).
    pub(super) fn values_in_keys(&self) -> bool {
        self.values.in_keys()
    }

    /// Bytes of one block in the key pool and in the value pool (0: no value pool).
    fn bytes_per_block(&self) -> (usize, usize) {
        let rows = self.n_layer * BLOCK_POSITIONS;
        (rows * self.types.key.row_bytes(self.k_dim), rows * self.values.stored_row_bytes(self.types.value))
    }

    fn grow_to(&mut self, blocks: usize) -> Result<(), BackendError> {
        let fail = |e| runtime_error(self.device, "kv cache", e);
        let (kb, vb) = self.bytes_per_block();
        let k = self.rt.alloc_zeroed(blocks * kb).map_err(fail)?;
        let v = if vb > 0 { Some(self.rt.alloc_zeroed(blocks * vb).map_err(fail)?) } else { None };
        if let Some((old_k, old_v)) = &self.pools {
            self.rt.copy(old_k, 0, &k, 0, self.capacity * kb).map_err(fail)?;
            if let (Some(old_v), Some(v)) = (old_v, &v) {
                self.rt.copy(old_v, 0, v, 0, self.capacity * vb).map_err(fail)?;
            }
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
        let (kb, vb) = self.bytes_per_block();
        let Some((k, v)) = &self.pools else {
            return Err(BackendError::shape("copy_block", "no block was allocated"));
        };
        let (s, d) = (src as usize, dst as usize);
        let fail = |e| runtime_error(self.device, "copy_block", e);
        self.rt.copy(k, s * kb, k, d * kb, kb).map_err(fail)?;
        match v {
            Some(v) => self.rt.copy(v, s * vb, v, d * vb, vb).map_err(fail),
            None => Ok(()),
        }
    }

    fn block_bytes(&self) -> usize {
        let (kb, vb) = self.bytes_per_block();
        kb + vb
    }

    fn alloc_state(&mut self, id: StateId) -> Result<(), BackendError> {
        if self.state_floats == 0 {
            return Err(BackendError::shape("alloc_state", "this store holds no recurrent states"));
        }
        let need = id as usize + 1;
        if need > self.state_capacity {
            self.grow_states_to(need.max(self.state_capacity * 2).max(INITIAL_BLOCKS))?;
        }
        let bytes = self.state_floats * 4;
        let (pool, zeros) = self.states.as_ref().expect("grown above");
        self.rt.copy(zeros, 0, pool, id as usize * bytes, bytes).map_err(|e| runtime_error(self.device, "alloc_state", e))
    }

    fn copy_state(&mut self, src: StateId, dst: StateId) -> Result<(), BackendError> {
        let bytes = self.state_floats * 4;
        let Some((pool, _)) = &self.states else {
            return Err(BackendError::shape("copy_state", "no state slot was allocated"));
        };
        let fail = |e| runtime_error(self.device, "copy_state", e);
        self.rt.copy(pool, src as usize * bytes, pool, dst as usize * bytes, bytes).map_err(fail)
    }

    fn state_bytes(&self) -> usize {
        self.state_floats * 4
    }
}

/// The kernels' code for an element type.
fn element(ty: KvType) -> PoolElement {
    match ty {
        KvType::F32 => PoolElement::F32,
        KvType::F16 => PoolElement::F16,
        KvType::Q8_0 => PoolElement::Q8_0,
        KvType::Q4_0 => PoolElement::Q4_0,
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use super::*;
    use kernels::host::HostRuntime;

    fn bytes(rt: &HostRuntime, buf: &<HostRuntime as Runtime>::Buffer) -> Vec<u8> {
        let mut out = vec![0u8; rt.len(buf)];
        rt.download(buf, &mut out).unwrap();
        out
    }

    #[test]
    fn the_pool_grows_keeping_its_blocks_and_copies_whole_blocks() {
        let rt = Arc::new(HostRuntime::default());
        let mut s = DeviceKvStore::new(Arc::clone(&rt), Device::Cuda(0), KvType::F16.into(), 2, 8, KvValues::Rows(4), 0);
        assert!(s.pools().is_none());
        s.alloc_block(3).unwrap();
        assert_eq!(s.capacity, INITIAL_BLOCKS);
        let (kb, vb) = s.bytes_per_block();
        assert_eq!(s.block_bytes(), kb + vb);
        let key: Vec<u8> = (0..kb).map(|i| (i % 251) as u8).collect();
        let value: Vec<u8> = (0..vb).map(|i| (i % 13 + 100) as u8).collect();
        {
            let (k, v) = s.pools.as_ref().unwrap();
            let v = v.as_ref().unwrap();
            rt.copy(&rt.upload(&key).unwrap(), 0, k, 3 * kb, kb).unwrap();
            rt.copy(&rt.upload(&value).unwrap(), 0, v, 3 * vb, vb).unwrap();
        }
        // a block past the end: the pools grow, block 3 comes along
        s.alloc_block(40).unwrap();
        assert_eq!(s.capacity, 41);
        s.copy_block(3, 40).unwrap();
        let (k, v) = s.pools.as_ref().unwrap();
        let (kall, vall) = (bytes(&rt, k), bytes(&rt, v.as_ref().unwrap()));
        assert_eq!(kall.len(), 41 * kb);
        for b in [3usize, 40] {
            assert_eq!(&kall[b * kb..(b + 1) * kb], &key[..], "keys of block {b}");
            assert_eq!(&vall[b * vb..(b + 1) * vb], &value[..], "values of block {b}");
        }
        assert!(kall[..3 * kb].iter().all(|&x| x == 0), "the other blocks are untouched");
    }
}
