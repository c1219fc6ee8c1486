//! The device-neutral half of the KV cache: which blocks each sequence holds, in position order,
//! and how many sequences share each block. Forking a sequence shares its blocks; a block about
//! to be written while shared is first copied (copy on write); a block no sequence holds any
//! more is released. The storage itself belongs to the backend and is only told what to do.

use std::collections::BTreeMap;

use super::{KvError, SeqId};
use crate::backend::{BackendError, BlockId, KvSlot, KvStorage, BLOCK_POSITIONS};

#[derive(Clone, Debug, Default)]
struct SeqBlocks {
    blocks: Vec<BlockId>,
    /// Positions written and valid.
    len: usize,
}

/// Block tables and reference counts of every sequence of one cache.
#[derive(Debug, Default)]
pub struct BlockTable {
    seqs: BTreeMap<SeqId, SeqBlocks>,
    /// Sequences holding each block id (0: free).
    refs: Vec<u32>,
    /// Ids whose count is 0, reused last freed first.
    free: Vec<BlockId>,
}

impl BlockTable {
    pub fn seq_len(&self, seq: SeqId) -> usize {
        self.seqs.get(&seq).map_or(0, |s| s.len)
    }

    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    /// The blocks of `seq` in position order (empty for a sequence never seen).
    pub fn table(&self, seq: SeqId) -> &[BlockId] {
        self.seqs.get(&seq).map_or(&[], |s| &s.blocks[..])
    }

    fn acquire(&mut self, storage: &mut dyn KvStorage) -> Result<BlockId, BackendError> {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.refs.push(0);
                (self.refs.len() - 1) as BlockId
            }
        };
        if let Err(e) = storage.alloc_block(id) {
            self.free.push(id);
            return Err(e);
        }
        self.refs[id as usize] = 1;
        Ok(id)
    }

    fn release(&mut self, id: BlockId, storage: &mut dyn KvStorage) {
        let r = &mut self.refs[id as usize];
        *r -= 1;
        if *r == 0 {
            storage.release_block(id);
            self.free.push(id);
        }
    }

    /// Gives `seq` blocks for `len` positions (none are filled).
    pub fn reserve(&mut self, seq: SeqId, len: usize, storage: &mut dyn KvStorage) -> Result<(), BackendError> {
        let have = self.seqs.get(&seq).map_or(0, |s| s.blocks.len());
        let mut added = Vec::new();
        for _ in have..len.div_ceil(BLOCK_POSITIONS) {
            match self.acquire(storage) {
                Ok(id) => added.push(id),
                Err(e) => {
                    added.into_iter().for_each(|id| self.release(id, storage));
                    return Err(e);
                }
            }
        }
        self.seqs.entry(seq).or_default().blocks.extend(added);
        Ok(())
    }

    /// Makes the blocks holding `positions` of `seq` its own (copying shared ones), so that
    /// writing them changes no other sequence. The positions must be reserved.
    pub fn prepare_write(
        &mut self,
        seq: SeqId,
        positions: std::ops::Range<usize>,
        storage: &mut dyn KvStorage,
    ) -> Result<(), BackendError> {
        if positions.is_empty() {
            return Ok(());
        }
        let first = positions.start / BLOCK_POSITIONS;
        let last = (positions.end - 1) / BLOCK_POSITIONS;
        for b in first..=last {
            let id = self.seqs[&seq].blocks[b];
            if self.refs[id as usize] > 1 {
                let copy = self.acquire(storage)?;
                if let Err(e) = storage.copy_block(id, copy) {
                    self.release(copy, storage);
                    return Err(e);
                }
                self.release(id, storage);
                self.seqs.get_mut(&seq).expect("the sequence exists").blocks[b] = copy;
            }
        }
        Ok(())
    }

    /// Where position `pos` of `seq` is stored (reserved).
    pub fn slot(&self, seq: SeqId, pos: usize) -> KvSlot {
        KvSlot { block: self.seqs[&seq].blocks[pos / BLOCK_POSITIONS], offset: pos % BLOCK_POSITIONS }
    }

    pub fn set_len(&mut self, seq: SeqId, len: usize) {
        if let Some(s) = self.seqs.get_mut(&seq) {
            s.len = len;
        }
    }

    /// Makes `dst` (replacing what it held) a copy of `src` sharing its blocks.
    pub fn fork(&mut self, src: SeqId, dst: SeqId, storage: &mut dyn KvStorage) -> Result<(), KvError> {
        let s = self.seqs.get(&src).ok_or(KvError::UnknownSequence(src))?.clone();
        for &id in &s.blocks {
            self.refs[id as usize] += 1;
        }
        if let Some(old) = self.seqs.insert(dst, s) {
            old.blocks.into_iter().for_each(|id| self.release(id, storage));
        }
        Ok(())
    }

    /// Keeps the first `len` positions of `seq` and the blocks that hold them.
    pub fn truncate(&mut self, seq: SeqId, len: usize, storage: &mut dyn KvStorage) {
        let Some(s) = self.seqs.get_mut(&seq) else { return };
        s.len = s.len.min(len);
        let dropped = s.blocks.split_off(s.len.div_ceil(BLOCK_POSITIONS).min(s.blocks.len()));
        dropped.into_iter().for_each(|id| self.release(id, storage));
    }

    pub fn remove(&mut self, seq: SeqId, storage: &mut dyn KvStorage) {
        if let Some(s) = self.seqs.remove(&seq) {
            s.blocks.into_iter().for_each(|id| self.release(id, storage));
        }
    }

    pub fn clear(&mut self, storage: &mut dyn KvStorage) {
        let seqs: Vec<SeqId> = self.sequences().collect();
        seqs.into_iter().for_each(|s| self.remove(s, storage));
    }

    /// Blocks in use (a block shared by several sequences counted once).
    pub fn live_blocks(&self) -> usize {
        self.refs.iter().filter(|&&r| r > 0).count()
    }

    /// Blocks of `seq` shared with another sequence.
    pub fn shared_blocks(&self, seq: SeqId) -> usize {
        self.table(seq).iter().filter(|&&id| self.refs[id as usize] > 1).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Storage that records what the table asks of it, each block holding one number.
    #[derive(Default)]
    struct Recorder {
        blocks: BTreeMap<BlockId, i64>,
        copies: Vec<(BlockId, BlockId)>,
        fail_after: Option<usize>,
    }

    impl KvStorage for Recorder {
        fn alloc_block(&mut self, id: BlockId) -> Result<(), BackendError> {
            if self.fail_after.is_some_and(|n| self.blocks.len() >= n) {
                return Err(BackendError::shape("alloc_block", "full"));
            }
            assert!(self.blocks.insert(id, -1).is_none(), "block {id} allocated twice");
            Ok(())
        }
        fn release_block(&mut self, id: BlockId) {
            assert!(self.blocks.remove(&id).is_some(), "block {id} released while free");
        }
        fn copy_block(&mut self, src: BlockId, dst: BlockId) -> Result<(), BackendError> {
            let v = self.blocks[&src];
            self.blocks.insert(dst, v);
            self.copies.push((src, dst));
            Ok(())
        }
        fn block_bytes(&self) -> usize {
            8
        }
    }

    #[test]
    fn fork_shares_blocks_and_a_write_copies_only_the_shared_block_it_touches() {
        let (mut t, mut s) = (BlockTable::default(), Recorder::default());
        t.reserve(0, 70, &mut s).unwrap();
        assert_eq!(t.table(0).len(), 3);
        t.set_len(0, 70);
        t.fork(0, 1, &mut s).unwrap();
        assert_eq!((t.shared_blocks(1), t.live_blocks()), (3, 3));
        // sequence 1 keeps 40 positions and writes position 40: block 1 is copied, block 0 stays shared
        t.truncate(1, 40, &mut s);
        assert_eq!(t.table(1), &t.table(0)[..2]);
        t.prepare_write(1, 40..41, &mut s).unwrap();
        assert_eq!(s.copies, vec![(t.table(0)[1], t.table(1)[1])]);
        assert_eq!(t.table(1)[0], t.table(0)[0]);
        assert_ne!(t.table(1)[1], t.table(0)[1]);
        assert_eq!((t.shared_blocks(1), t.shared_blocks(0), t.live_blocks()), (1, 1, 4));
        // a block held once is written in place
        t.prepare_write(1, 41..64, &mut s).unwrap();
        assert_eq!(s.copies.len(), 1);
        assert_eq!(t.slot(1, 41), KvSlot { block: t.table(1)[1], offset: 9 });
        // removing the original frees its own blocks and leaves the shared one to sequence 1
        t.remove(0, &mut s);
        assert_eq!((t.live_blocks(), s.blocks.len(), t.shared_blocks(1)), (2, 2, 0));
        // freed ids are reused
        t.reserve(2, 1, &mut s).unwrap();
        assert_eq!(t.live_blocks(), 3);
        assert!(t.table(2)[0] < 4);
        t.clear(&mut s);
        assert_eq!((t.live_blocks(), s.blocks.len(), t.sequences().count()), (0, 0, 0));
    }

    #[test]
    fn forking_onto_an_existing_sequence_releases_what_it_held() {
        let (mut t, mut s) = (BlockTable::default(), Recorder::default());
        t.reserve(0, 10, &mut s).unwrap();
        t.reserve(1, 100, &mut s).unwrap();
        assert_eq!(t.live_blocks(), 5);
        t.fork(0, 1, &mut s).unwrap();
        assert_eq!((t.live_blocks(), s.blocks.len(), t.shared_blocks(1)), (1, 1, 1));
        assert_eq!(t.fork(7, 2, &mut s), Err(KvError::UnknownSequence(7)));
    }

    #[test]
    fn a_failed_allocation_keeps_the_table_consistent() {
        let mut s = Recorder { fail_after: Some(2), ..Recorder::default() };
        let mut t = BlockTable::default();
        assert!(t.reserve(0, 100, &mut s).is_err());
        // the blocks taken before the failure are released, none is leaked or counted
        assert_eq!(t.table(0).len(), 0);
        assert_eq!(t.live_blocks(), 0);
        assert_eq!(s.blocks.len(), 0);
    }
}
