//! The device-neutral half of the recurrent layers' states: per sequence, the slot holding every
//! recurrent layer's state after its current length, and snapshots of the states after some
//! earlier lengths (the last `rollback` lengths, for truncations after rejected speculative
//! tokens, and the lengths pinned as checkpoints: where a prompt's other choices and later
//! requests sharing its start resume), shared between forked sequences by reference count. A shared current slot is copied
//! before a pass writes it (copy on write); a truncation resumes from the longest snapshot it
//! may keep. The slots' contents live in the storage of the model's backend.

use std::collections::BTreeMap;

use super::SeqId;
use crate::backend::{BackendError, KvStorage, StateId, StateRun};

#[derive(Clone, Debug, Default)]
struct SeqStates {
    /// The state after the sequence's current length (`None`: the length is 0, all zeros).
    current: Option<StateId>,
    /// States after earlier lengths, ascending by length.
    snapshots: Vec<(usize, StateId)>,
    /// Lengths whose state is kept whatever the rollback (checkpoints), once a pass reaches them.
    pinned: Vec<usize>,
}

/// One sequence's state slots in a pass, before the rows are known: the slot to continue and
/// the snapshot slots, each with the length after which it is written.
#[derive(Clone, Debug)]
pub(crate) struct PreparedStates {
    pub state: StateId,
    /// `(length, slot)`: the state after the row at position `length - 1`.
    pub snapshots: Vec<(usize, StateId)>,
}

impl PreparedStates {
    /// The run of `rows` (the sequence's rows of the batch, at positions `start`, `start + 1`,
    /// ...).
    pub fn run(&self, rows: Vec<usize>, start: usize) -> StateRun {
        let snapshots = self.snapshots.iter().map(|&(len, id)| (len - start - 1, id)).collect();
        StateRun { rows, state: self.state, snapshots }
    }
}

/// State slots and reference counts of every sequence of one cache.
#[derive(Debug, Default)]
pub struct StateTable {
    seqs: BTreeMap<SeqId, SeqStates>,
    refs: Vec<u32>,
    free: Vec<StateId>,
    /// How many earlier lengths keep a snapshot.
    rollback: usize,
}

impl StateTable {
    pub fn new(rollback: usize) -> StateTable {
        StateTable { rollback, ..StateTable::default() }
    }

    pub fn rollback(&self) -> usize {
        self.rollback
    }

    pub fn set_rollback(&mut self, rollback: usize) {
        self.rollback = rollback;
    }

    fn acquire(&mut self, storage: &mut dyn KvStorage) -> Result<StateId, BackendError> {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.refs.push(0);
                (self.refs.len() - 1) as StateId
            }
        };
        if let Err(e) = storage.alloc_state(id) {
            self.free.push(id);
            return Err(e);
        }
        self.refs[id as usize] = 1;
        Ok(id)
    }

    fn release(&mut self, id: StateId, storage: &mut dyn KvStorage) {
        let r = &mut self.refs[id as usize];
        *r -= 1;
        if *r == 0 {
            storage.release_state(id);
            self.free.push(id);
        }
    }

    /// A new slot holding a copy of `src`.
    fn copy_of(&mut self, src: StateId, storage: &mut dyn KvStorage) -> Result<StateId, BackendError> {
        let id = self.acquire(storage)?;
        if let Err(e) = storage.copy_state(src, id) {
            self.release(id, storage);
            return Err(e);
        }
        Ok(id)
    }

    /// Makes the slots of a pass writing positions `start..end` of `seq` (whose length is
    /// `start`): its current slot its own (a zeroed one for a new sequence, a copy of a shared
    /// one), and snapshot slots for the lengths among the last `rollback` before `end` (the
    /// state at `start` copied now, the later ones written by the pass). Snapshots too old to
    /// keep are released.
    pub(crate) fn prepare(
        &mut self,
        seq: SeqId,
        start: usize,
        end: usize,
        storage: &mut dyn KvStorage,
    ) -> Result<PreparedStates, BackendError> {
        let keep_from = end.saturating_sub(self.rollback).max(1);
        let mut s = self.seqs.remove(&seq).unwrap_or_default();
        let result = self.prepare_seq(&mut s, start, end, keep_from, storage);
        self.seqs.insert(seq, s);
        result
    }

    fn prepare_seq(
        &mut self,
        s: &mut SeqStates,
        start: usize,
        end: usize,
        keep_from: usize,
        storage: &mut dyn KvStorage,
    ) -> Result<PreparedStates, BackendError> {
        // snapshots at or after `start` belong to positions a truncation dropped
        let pinned = s.pinned.clone();
        let wanted = |len: usize| len >= keep_from || pinned.contains(&len);
        let (kept, old): (Vec<_>, Vec<_>) = s.snapshots.drain(..).partition(|&(len, _)| wanted(len) && len < start);
        s.snapshots = kept;
        old.into_iter().for_each(|(_, id)| self.release(id, storage));
        let current = match s.current {
            None => self.acquire(storage)?,
            Some(id) if self.refs[id as usize] > 1 => {
                let own = self.copy_of(id, storage)?;
                self.release(id, storage);
                own
            }
            Some(id) => id,
        };
        s.current = Some(current);
        if start > 0 && wanted(start) && start < end && !s.snapshots.iter().any(|&(len, _)| len == start) {
            let snap = self.copy_of(current, storage)?;
            s.snapshots.push((start, snap));
        }
        let mut written = Vec::new();
        for len in (start + 1..end).filter(|&len| wanted(len)) {
            match self.acquire(storage) {
                Ok(id) => written.push((len, id)),
                Err(e) => {
                    written.into_iter().for_each(|(_, id)| self.release(id, storage));
                    return Err(e);
                }
            }
        }
        s.snapshots.extend(written.iter().copied());
        s.snapshots.sort_unstable_by_key(|&(len, _)| len);
        Ok(PreparedStates { state: current, snapshots: written })
    }

    /// Keeps the state of `seq` after `len` positions once a pass reaches that length, whatever
    /// the rollback, until a truncation goes below it.
    pub fn pin(&mut self, seq: SeqId, len: usize) {
        let pinned = &mut self.seqs.entry(seq).or_default().pinned;
        if len > 0 && !pinned.contains(&len) {
            pinned.push(len);
        }
    }

    /// Makes `dst` (replacing what it held) share `src`'s slots.
    pub fn fork(&mut self, src: SeqId, dst: SeqId, storage: &mut dyn KvStorage) {
        let s = self.seqs.get(&src).cloned().unwrap_or_default();
        for id in s.current.iter().chain(s.snapshots.iter().map(|(_, id)| id)) {
            self.refs[*id as usize] += 1;
        }
        if let Some(old) = self.seqs.insert(dst, s) {
            self.release_all(old, storage);
        }
    }

    /// The longest length of at most `len` that `seq`, now `seq_len` long, can resume from: its
    /// own length, a snapshot's, or 0.
    pub fn resumable(&self, seq: SeqId, seq_len: usize, len: usize) -> usize {
        if len >= seq_len {
            return seq_len;
        }
        let s = self.seqs.get(&seq);
        s.and_then(|s| s.snapshots.iter().map(|&(l, _)| l).filter(|&l| l <= len).max()).unwrap_or(0)
    }

    /// Returns `seq` (now `seq_len` long) to the state after `len` positions, which must be
    /// [`StateTable::resumable`]: its snapshot becomes the current slot, the later ones go.
    pub fn truncate(&mut self, seq: SeqId, seq_len: usize, len: usize, storage: &mut dyn KvStorage) {
        if len >= seq_len {
            return;
        }
        let Some(mut s) = self.seqs.remove(&seq) else { return };
        let (keep, dropped): (Vec<_>, Vec<_>) = s.snapshots.drain(..).partition(|&(l, _)| l < len);
        s.snapshots = keep;
        s.pinned.retain(|&l| l <= len);
        let mut resumed = None;
        for (l, id) in dropped {
            if l == len {
                resumed = Some(id);
            } else {
                self.release(id, storage);
            }
        }
        if let Some(id) = std::mem::replace(&mut s.current, resumed) {
            self.release(id, storage);
        }
        debug_assert!(len == 0 || s.current.is_some(), "truncated to a length without a state");
        self.seqs.insert(seq, s);
    }

    fn release_all(&mut self, s: SeqStates, storage: &mut dyn KvStorage) {
        for id in s.current.into_iter().chain(s.snapshots.into_iter().map(|(_, id)| id)) {
            self.release(id, storage);
        }
    }

    pub fn remove(&mut self, seq: SeqId, storage: &mut dyn KvStorage) {
        if let Some(s) = self.seqs.remove(&seq) {
            self.release_all(s, storage);
        }
    }

    pub fn clear(&mut self, storage: &mut dyn KvStorage) {
        let seqs: Vec<SeqStates> = std::mem::take(&mut self.seqs).into_values().collect();
        seqs.into_iter().for_each(|s| self.release_all(s, storage));
    }

    /// Slots `seq` holds: its current one and its snapshots (shared ones counted too).
    pub fn slots(&self, seq: SeqId) -> usize {
        self.seqs.get(&seq).map_or(0, |s| usize::from(s.current.is_some()) + s.snapshots.len())
    }

    /// Slots in use (a slot shared by several sequences counted once).
    pub fn live_slots(&self) -> usize {
        self.refs.iter().filter(|&&r| r > 0).count()
    }

    /// The lengths `seq` can resume from besides its own, ascending.
    pub fn snapshot_lengths(&self, seq: SeqId) -> Vec<usize> {
        self.seqs.get(&seq).map_or_else(Vec::new, |s| s.snapshots.iter().map(|&(l, _)| l).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BlockId;

    /// Storage whose state slots each hold one number, recording what the table asks of it.
    #[derive(Default)]
    struct Recorder {
        states: BTreeMap<StateId, i64>,
    }

    impl KvStorage for Recorder {
        fn alloc_block(&mut self, _: BlockId) -> Result<(), BackendError> {
            Ok(())
        }
        fn release_block(&mut self, _: BlockId) {}
        fn copy_block(&mut self, _: BlockId, _: BlockId) -> Result<(), BackendError> {
            Ok(())
        }
        fn block_bytes(&self) -> usize {
            0
        }
        fn alloc_state(&mut self, id: StateId) -> Result<(), BackendError> {
            assert!(self.states.insert(id, 0).is_none(), "slot {id} allocated twice");
            Ok(())
        }
        fn release_state(&mut self, id: StateId) {
            assert!(self.states.remove(&id).is_some(), "slot {id} released while free");
        }
        fn copy_state(&mut self, src: StateId, dst: StateId) -> Result<(), BackendError> {
            let v = self.states[&src];
            *self.states.get_mut(&dst).expect("a slot in use") = v;
            Ok(())
        }
        fn state_bytes(&self) -> usize {
            8
        }
    }

    /// A pass as the model runs it: each row's state is the length it reaches, written to the
    /// current slot and to the snapshot of that length.
    fn pass(t: &mut StateTable, s: &mut Recorder, seq: SeqId, start: usize, end: usize) -> PreparedStates {
        let p = t.prepare(seq, start, end, s).unwrap();
        for (len, id) in &p.snapshots {
            *s.states.get_mut(id).unwrap() = *len as i64;
        }
        *s.states.get_mut(&p.state).unwrap() = end as i64;
        p
    }

    fn current(t: &StateTable, s: &Recorder, seq: SeqId) -> Option<i64> {
        t.seqs[&seq].current.map(|id| s.states[&id])
    }

    #[test]
    fn a_new_sequence_starts_from_zeros_and_keeps_only_its_current_state() {
        let (mut t, mut s) = (StateTable::new(0), Recorder::default());
        let p = pass(&mut t, &mut s, 0, 0, 10);
        assert!(p.snapshots.is_empty());
        pass(&mut t, &mut s, 0, 10, 11);
        assert_eq!(t.live_slots(), 1);
        assert_eq!(current(&t, &s, 0), Some(11));
        // only a length it holds, or 0
        assert_eq!(t.resumable(0, 11, 10), 0);
        assert_eq!(t.resumable(0, 11, 11), 11);
        t.truncate(0, 11, 0, &mut s);
        assert_eq!(t.live_slots(), 0);
        assert_eq!(t.seqs[&0].current, None);
    }

    #[test]
    fn the_rollback_keeps_the_last_lengths_and_a_truncation_resumes_from_one() {
        let (mut t, mut s) = (StateTable::new(3), Recorder::default());
        pass(&mut t, &mut s, 0, 0, 10); // a prompt: snapshots after its last three rows but the last
        assert_eq!(t.snapshot_lengths(0), vec![7, 8, 9]);
        // a verification of 4 proposals: the state at 10 copied before it, 11..14 written by it
        let p = pass(&mut t, &mut s, 0, 10, 15);
        assert_eq!(p.snapshots.iter().map(|&(l, _)| l).collect::<Vec<_>>(), vec![12, 13, 14]);
        assert_eq!(t.snapshot_lengths(0), vec![12, 13, 14]);
        assert_eq!(t.resumable(0, 15, 13), 13);
        assert_eq!(t.resumable(0, 15, 11), 0);
        t.truncate(0, 15, 13, &mut s);
        assert_eq!(current(&t, &s, 0), Some(13));
        assert_eq!(t.snapshot_lengths(0), vec![12]);
        assert_eq!(t.live_slots(), 2);
        // decoding on: each step keeps the state it started from
        pass(&mut t, &mut s, 0, 13, 14);
        assert_eq!(t.snapshot_lengths(0), vec![12, 13]);
        assert_eq!(t.slots(0), 3);
        assert_eq!(s.states.len(), t.live_slots());
    }

    #[test]
    fn pinned_lengths_are_kept_whatever_the_rollback_until_a_truncation_passes_them() {
        let (mut t, mut s) = (StateTable::new(1), Recorder::default());
        t.pin(0, 5);
        t.pin(0, 12);
        let p = pass(&mut t, &mut s, 0, 0, 8); // a chunk writes the state after 5 on its way
        assert_eq!(p.snapshots.iter().map(|&(l, _)| l).collect::<Vec<_>>(), vec![5, 7]);
        pass(&mut t, &mut s, 0, 8, 12);
        pass(&mut t, &mut s, 0, 12, 16); // 12 is the start: copied before the pass
        assert_eq!(t.snapshot_lengths(0), vec![5, 12, 15]);
        t.fork(0, 1, &mut s);
        assert_eq!(t.resumable(1, 16, 14), 12);
        t.pin(1, 14);
        t.truncate(1, 16, 12, &mut s);
        assert_eq!(current(&t, &s, 1), Some(12));
        assert_eq!(t.snapshot_lengths(1), vec![5]);
        // a pin beyond the truncation is gone; the one it returned to is kept as the pass starts
        pass(&mut t, &mut s, 1, 12, 20);
        assert_eq!(t.snapshot_lengths(1), vec![5, 12, 19]);
        assert_eq!(t.snapshot_lengths(0), vec![5, 12, 15]);
    }

    #[test]
    fn a_fork_shares_slots_until_it_writes_and_removal_frees_them() {
        let (mut t, mut s) = (StateTable::new(2), Recorder::default());
        pass(&mut t, &mut s, 0, 0, 6);
        t.fork(0, 1, &mut s);
        assert_eq!(t.live_slots(), 3);
        // the fork writes: its own copy of the current state, the source's untouched
        pass(&mut t, &mut s, 1, 6, 7);
        assert_eq!(current(&t, &s, 0), Some(6));
        assert_eq!(current(&t, &s, 1), Some(7));
        assert_ne!(t.seqs[&0].current, t.seqs[&1].current);
        // the fork returns to a shared snapshot without disturbing the source
        assert_eq!(t.resumable(1, 7, 5), 5);
        t.truncate(1, 7, 5, &mut s);
        assert_eq!(current(&t, &s, 1), Some(5));
        assert_eq!(t.snapshot_lengths(0), vec![4, 5]);
        t.remove(0, &mut s);
        t.remove(1, &mut s);
        assert_eq!(t.live_slots(), 0);
        assert!(s.states.is_empty());
    }
}
