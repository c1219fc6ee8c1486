//! The key/value cache: per sequence, a list of fixed-size blocks of positions (every layer's
//! keys and values for those positions), shared between sequences by reference count. Forking a
//! sequence shares its blocks (a shared prefix is computed and stored once); writing into a
//! shared block copies it first (copy on write). The bookkeeping (`blocks.rs`) is the same on
//! every device; the blocks' contents live in the storage of the model's backend. A model with
//! recurrent layers also keeps each sequence's fixed-size states there (`states.rs`): forked
//! like blocks, and truncated only back to a length whose state was kept.

mod blocks;
mod prefix_cache;
mod states;

pub use crate::backend::{KvType, KvTypes, BLOCK_POSITIONS};
pub use blocks::BlockTable;
pub use prefix_cache::{common_prefix, CacheKey, PrefixCache};
pub(crate) use states::PreparedStates;
pub use states::StateTable;

use crate::backend::{BackendError, Device, KvMemory, KvStorage, OwnKvStore};

/// A sequence id, as in llama.cpp's batches.
pub type SeqId = u32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    #[error("sequence {seq} needs {needed} positions but the context holds {n_ctx}")]
    ContextFull { seq: SeqId, needed: usize, n_ctx: usize },
    #[error("sequence {0} does not exist")]
    UnknownSequence(SeqId),
    #[error("KV cache storage: {0}")]
    Storage(String),
}

/// Why positions could not be made ready for writing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KvWriteError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The cache of every sequence of one model, made by `Model::new_kv_cache`.
pub struct KvCache {
    types: KvTypes,
    n_ctx: usize,
    device: Device,
    table: BlockTable,
    /// The recurrent layers' state slots, when the model has such layers.
    states: Option<StateTable>,
    storage: KvMemory,
}

impl KvCache {
    /// A cache over `storage` (of `device`), holding at most `n_ctx` positions per sequence.
    pub fn with_storage(types: impl Into<KvTypes>, n_ctx: usize, device: Device, storage: impl OwnKvStore) -> KvCache {
        let states = (storage.state_bytes() > 0).then(|| StateTable::new(0));
        KvCache { types: types.into(), n_ctx, device, table: BlockTable::default(), states, storage: storage.into_memory() }
    }

    /// Bytes of one sequence's recurrent states (0 without recurrent layers); each snapshot
    /// kept for a rollback takes as much again.
    pub fn state_bytes(&self) -> usize {
        self.storage.state_bytes()
    }

    /// Keeps, from now on, the states after each of the last `n` (at least) lengths a pass
    /// writes, so that a truncation by up to `n` positions (a verification's rejected
    /// proposals) resumes without recomputing. None are kept until a caller asks.
    pub fn keep_states_for(&mut self, n: usize) {
        if let Some(states) = &mut self.states {
            states.set_rollback(states.rollback().max(n));
        }
    }

    /// Keeps the recurrent states of `seq` after `len` positions once a pass reaches that
    /// length (a checkpoint: where the prompt's other choices, and later prompts sharing its
    /// start, resume). Nothing without recurrent states, where every length resumes.
    pub fn keep_state_at(&mut self, seq: SeqId, len: usize) {
        if let Some(states) = &mut self.states {
            states.pin(seq, len);
        }
    }

    /// The longest length of at most `len` that `seq` can be truncated to exactly: `len` itself
    /// without recurrent states; with them, a length whose state was kept (or 0).
    pub fn resumable(&self, seq: SeqId, len: usize) -> usize {
        let seq_len = self.seq_len(seq);
        match &self.states {
            None => len.min(seq_len),
            Some(states) => states.resumable(seq, seq_len, len),
        }
    }

    /// The recurrent-state slots of a pass writing `positions` of `seq` (`None` without
    /// recurrent layers).
    pub(crate) fn prepare_states(&mut self, seq: SeqId, positions: std::ops::Range<usize>) -> Result<Option<PreparedStates>, BackendError> {
        match &mut self.states {
            None => Ok(None),
            Some(states) => states.prepare(seq, positions.start, positions.end, &mut self.storage).map(Some),
        }
    }

    /// The element types of the keys and of the values.
    pub fn kv_types(&self) -> KvTypes {
        self.types
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The device whose memory holds the blocks.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Positions stored for `seq` (0 for a sequence never seen).
    pub fn seq_len(&self, seq: SeqId) -> usize {
        self.table.seq_len(seq)
    }

    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.table.sequences()
    }

    /// Makes room for `seq` to hold `len` positions (blocks are added, none are filled).
    pub fn reserve(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        if len > self.n_ctx {
            return Err(KvError::ContextFull { seq, needed: len, n_ctx: self.n_ctx });
        }
        self.table.reserve(seq, len, &mut self.storage).map_err(|e| KvError::Storage(e.to_string()))
    }

    /// Reserves `positions` of `seq` and makes their blocks its own (a shared block is copied
    /// first), so that the forward pass can write them.
    pub(crate) fn prepare_write(&mut self, seq: SeqId, positions: std::ops::Range<usize>) -> Result<(), KvWriteError> {
        self.reserve(seq, positions.end)?;
        Ok(self.table.prepare_write(seq, positions, &mut self.storage)?)
    }

    /// Sets the number of valid positions of `seq` (after its rows were written).
    pub fn set_len(&mut self, seq: SeqId, len: usize) {
        self.table.set_len(seq, len);
    }

    /// Makes `dst` a copy of `src` that shares its blocks: a common prefix is stored once.
    pub fn fork(&mut self, src: SeqId, dst: SeqId) -> Result<(), KvError> {
        self.table.fork(src, dst, &mut self.storage)?;
        if let Some(states) = &mut self.states {
            states.fork(src, dst, &mut self.storage);
        }
        Ok(())
    }

    /// Keeps the first `len` positions of `seq`, or as many as it can resume from
    /// ([`KvCache::resumable`]: fewer only for a sequence with recurrent states), and returns
    /// how many it kept.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> usize {
        let seq_len = self.seq_len(seq);
        let kept = self.resumable(seq, len);
        if let Some(states) = &mut self.states {
            states.truncate(seq, seq_len, kept, &mut self.storage);
        }
        self.table.truncate(seq, kept, &mut self.storage);
        kept
    }

    pub fn remove(&mut self, seq: SeqId) {
        self.table.remove(seq, &mut self.storage);
        if let Some(states) = &mut self.states {
            states.remove(seq, &mut self.storage);
        }
    }

    pub fn clear(&mut self) {
        self.table.clear(&mut self.storage);
        if let Some(states) = &mut self.states {
            states.clear(&mut self.storage);
        }
    }

    /// The blocks whose bytes `slots` state slots take (rounded up; 0 without recurrent
    /// layers): how a scheduler counting blocks counts states.
    pub fn state_blocks(&self, slots: usize) -> usize {
        (slots * self.state_bytes()).div_ceil(self.block_bytes().max(1))
    }

    /// State slots `seq` holds: its current one and its snapshots (0 without recurrent layers).
    pub fn state_slots(&self, seq: SeqId) -> usize {
        self.states.as_ref().map_or(0, |s| s.slots(seq))
    }

    /// State slots in use (shared ones counted once; 0 without recurrent layers).
    pub fn live_state_slots(&self) -> usize {
        self.states.as_ref().map_or(0, StateTable::live_slots)
    }

    /// Blocks held by all sequences together, a block shared by several counted once: the
    /// cache's real size in blocks.
    pub fn live_blocks(&self) -> usize {
        self.table.live_blocks()
    }

    /// Bytes one block takes (every layer's keys and values for its positions).
    pub fn block_bytes(&self) -> usize {
        self.storage.block_bytes()
    }

    /// Blocks of `seq` shared with another sequence (for tests and diagnostics).
    pub fn shared_blocks(&self, seq: SeqId) -> usize {
        self.table.shared_blocks(seq)
    }

    /// The block tables and the storage, as the backend's own type `S` (`None`: the cache
    /// belongs to another backend).
    pub(crate) fn parts_mut<S: OwnKvStore>(&mut self) -> Option<(&BlockTable, &mut S)> {
        Some((&self.table, S::within(&mut self.storage)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::kv::CpuKvStore;
    use crate::backend::cpu::kv_rows::{KvRow, KvRows};

    fn cpu_cache(ty: KvType, n_layer: usize, k_dim: usize, v_dim: usize, n_ctx: usize) -> KvCache {
        KvCache::with_storage(ty, n_ctx, Device::Cpu, CpuKvStore::new(ty.into(), n_layer, k_dim, v_dim))
    }

    fn get(row: KvRow<'_>) -> Vec<f32> {
        match row {
            KvRow::F32(r) => r.to_vec(),
            KvRow::F16(r) => r.iter().map(|h| h.to_f32()).collect(),
            KvRow::Q8_0(_) | KvRow::Q4_0(_) => unreachable!("these tests store floats"),
        }
    }

    /// Writes as the forward pass does: make the positions writable, then store each row.
    fn write(kv: &mut KvCache, seq: SeqId, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        kv.prepare_write(seq, pos..pos + 1).unwrap();
        let (table, store) = kv.parts_mut::<CpuKvStore>().unwrap();
        let slot = table.slot(seq, pos);
        store.write(slot.block, layer, slot.offset, k, v);
    }

    fn key(kv: &mut KvCache, seq: SeqId, layer: usize, pos: usize) -> Vec<f32> {
        let (table, store) = kv.parts_mut::<CpuKvStore>().unwrap();
        get(store.layer_view(table.table(seq), layer).key(pos))
    }

    fn value(kv: &mut KvCache, seq: SeqId, layer: usize, pos: usize) -> Vec<f32> {
        let (table, store) = kv.parts_mut::<CpuKvStore>().unwrap();
        get(store.layer_view(table.table(seq), layer).value(pos))
    }

    #[test]
    fn fork_shares_then_copies_on_write() {
        let mut kv = cpu_cache(KvType::F32, 2, 4, 4, 100);
        kv.reserve(0, 40).unwrap();
        for p in 0..40 {
            for l in 0..2 {
                write(&mut kv, 0, l, p, &[p as f32; 4], &[-(p as f32); 4]);
            }
        }
        kv.set_len(0, 40);
        kv.fork(0, 1).unwrap();
        assert_eq!(kv.shared_blocks(1), 2);
        kv.truncate(1, 35);
        kv.reserve(1, 36).unwrap();
        write(&mut kv, 1, 0, 35, &[99.0; 4], &[99.0; 4]);
        kv.set_len(1, 36);
        // the write copied block 1 for sequence 1 only
        assert_eq!(key(&mut kv, 0, 0, 35), vec![35.0; 4]);
        assert_eq!(key(&mut kv, 1, 0, 35), vec![99.0; 4]);
        assert_eq!(value(&mut kv, 1, 1, 3), vec![-3.0; 4]);
        // the copy kept the other layer's rows of the copied block
        assert_eq!(value(&mut kv, 1, 1, 34), vec![-34.0; 4]);
        assert_eq!(kv.shared_blocks(1), 1);
        // two blocks of sequence 0, and sequence 1's own copy of the second
        assert_eq!(kv.live_blocks(), 3);
        kv.remove(0);
        assert_eq!(kv.live_blocks(), 2);
        assert_eq!(kv.block_bytes(), 2 * BLOCK_POSITIONS * (4 + 4) * 4);
    }

    #[test]
    fn context_overflow_is_an_error() {
        let mut kv = cpu_cache(KvType::F16, 1, 2, 2, 8);
        assert_eq!(kv.reserve(3, 9), Err(KvError::ContextFull { seq: 3, needed: 9, n_ctx: 8 }));
        kv.reserve(3, 8).unwrap();
        write(&mut kv, 3, 0, 7, &[0.5, 1.5], &[2.5, 3.5]);
        assert_eq!(value(&mut kv, 3, 0, 7), vec![2.5, 3.5]);
        assert_eq!(kv.block_bytes(), BLOCK_POSITIONS * (2 + 2) * 2);
    }

    /// Each backend finds its own store in a cache, and never another's.
    #[test]
    fn another_backends_storage_is_not_handed_out() {
        let mut kv = cpu_cache(KvType::F32, 1, 2, 2, 8);
        assert!(kv.parts_mut::<CpuKvStore>().is_some());
        #[cfg(feature = "sim")]
        {
            use crate::backend::kernel::DeviceKvStore;
            use crate::backend::{Backend, KvValues};
            type SimStore = DeviceKvStore<kernels::host::HostRuntime>;
            assert!(kv.parts_mut::<SimStore>().is_none());
            let sim = crate::backend::kernel::SimBackend::new();
            let mut on_sim =
                KvCache::with_storage(KvType::F32, 8, sim.device(), sim.new_kv_store(KvType::F32.into(), 1, 2, KvValues::Rows(2), 0));
            assert!(on_sim.parts_mut::<SimStore>().is_some());
            assert!(on_sim.parts_mut::<CpuKvStore>().is_none());
        }
    }
}
