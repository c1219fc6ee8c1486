//! The key/value cache: per sequence, a list of fixed-size blocks of positions (every layer's
//! keys and values for those positions), shared between sequences by reference count. Forking a
//! sequence shares its blocks (a shared prefix is computed and stored once); writing into a
//! shared block copies it first (copy on write). Values are stored as f32 or f16.

use std::collections::BTreeMap;
use std::sync::Arc;

use half::f16;

use crate::backend::cpu::attention::{KvRow, KvRows};

/// A sequence id, as in llama.cpp's batches.
pub type SeqId = u32;

/// Positions per block.
const BLOCK: usize = 32;

/// Positions per block: the unit in which cache space is allocated and shared.
pub const BLOCK_POSITIONS: usize = BLOCK;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    F32,
    F16,
}

impl KvType {
    pub fn from_name(s: &str) -> Option<KvType> {
        match s {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    #[error("sequence {seq} needs {needed} positions but the context holds {n_ctx}")]
    ContextFull { seq: SeqId, needed: usize, n_ctx: usize },
    #[error("sequence {0} does not exist")]
    UnknownSequence(SeqId),
}

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

/// Keys and values of `BLOCK` positions for every layer: `[layer][position][dim]`.
#[derive(Clone)]
struct Block {
    k: Storage,
    v: Storage,
}

#[derive(Clone, Default)]
struct SeqKv {
    blocks: Vec<Arc<Block>>,
    len: usize,
}

/// The cache of every sequence of one model.
pub struct KvCache {
    ty: KvType,
    n_layer: usize,
    k_dim: usize,
    v_dim: usize,
    n_ctx: usize,
    seqs: BTreeMap<SeqId, SeqKv>,
}

impl KvCache {
    /// A cache for `n_layer` layers of `k_dim` / `v_dim` values per position (all KV heads) and
    /// at most `n_ctx` positions per sequence.
    pub fn new(ty: KvType, n_layer: usize, k_dim: usize, v_dim: usize, n_ctx: usize) -> KvCache {
        KvCache { ty, n_layer, k_dim, v_dim, n_ctx, seqs: BTreeMap::new() }
    }

    pub fn kv_type(&self) -> KvType {
        self.ty
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Positions stored for `seq` (0 for a sequence never seen).
    pub fn seq_len(&self, seq: SeqId) -> usize {
        self.seqs.get(&seq).map_or(0, |s| s.len)
    }

    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    /// Makes room for `seq` to hold `len` positions (blocks are added, none are filled).
    pub fn reserve(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        if len > self.n_ctx {
            return Err(KvError::ContextFull { seq, needed: len, n_ctx: self.n_ctx });
        }
        let (ty, kn, vn) = (self.ty, self.n_layer * BLOCK * self.k_dim, self.n_layer * BLOCK * self.v_dim);
        let s = self.seqs.entry(seq).or_default();
        while s.blocks.len() * BLOCK < len {
            s.blocks.push(Arc::new(Block { k: Storage::zeros(ty, kn), v: Storage::zeros(ty, vn) }));
        }
        Ok(())
    }

    /// Stores the key and value rows of `layer` at `pos` of `seq` (space must be reserved). A
    /// block shared with another sequence is copied first.
    pub fn write(&mut self, seq: SeqId, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        debug_assert!(k.len() == self.k_dim && v.len() == self.v_dim);
        let (kd, vd) = (self.k_dim, self.v_dim);
        let s = self.seqs.get_mut(&seq).expect("write after reserve");
        let block = Arc::make_mut(&mut s.blocks[pos / BLOCK]);
        let i = pos % BLOCK;
        block.k.write((layer * BLOCK + i) * kd, k);
        block.v.write((layer * BLOCK + i) * vd, v);
    }

    /// Sets the number of valid positions of `seq` (after its rows were written).
    pub fn set_len(&mut self, seq: SeqId, len: usize) {
        if let Some(s) = self.seqs.get_mut(&seq) {
            s.len = len;
        }
    }

    /// Makes `dst` a copy of `src` that shares its blocks: a common prefix is stored once.
    pub fn fork(&mut self, src: SeqId, dst: SeqId) -> Result<(), KvError> {
        let s = self.seqs.get(&src).ok_or(KvError::UnknownSequence(src))?.clone();
        self.seqs.insert(dst, s);
        Ok(())
    }

    /// Keeps the first `len` positions of `seq`.
    pub fn truncate(&mut self, seq: SeqId, len: usize) {
        if let Some(s) = self.seqs.get_mut(&seq) {
            s.len = s.len.min(len);
            s.blocks.truncate(s.len.div_ceil(BLOCK));
        }
    }

    pub fn remove(&mut self, seq: SeqId) {
        self.seqs.remove(&seq);
    }

    pub fn clear(&mut self) {
        self.seqs.clear();
    }

    /// The rows of one layer of one sequence, for attention.
    pub fn layer_view(&self, seq: SeqId, layer: usize) -> LayerView<'_> {
        LayerView { blocks: self.seqs.get(&seq).map_or(&[], |s| &s.blocks[..]), layer, k_dim: self.k_dim, v_dim: self.v_dim }
    }

    /// Blocks held by all sequences together, a block shared by several counted once: the
    /// cache's real size in blocks.
    pub fn live_blocks(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        self.seqs.values().flat_map(|s| s.blocks.iter()).filter(|b| seen.insert(Arc::as_ptr(b))).count()
    }

    /// Bytes one block takes (every layer's keys and values for its positions).
    pub fn block_bytes(&self) -> usize {
        let elem = match self.ty {
            KvType::F32 => 4,
            KvType::F16 => 2,
        };
        self.n_layer * BLOCK * (self.k_dim + self.v_dim) * elem
    }

    /// Blocks of `seq` shared with another sequence (for tests and diagnostics).
    pub fn shared_blocks(&self, seq: SeqId) -> usize {
        self.seqs.get(&seq).map_or(0, |s| s.blocks.iter().filter(|b| Arc::strong_count(b) > 1).count())
    }
}

/// One layer of one sequence.
pub struct LayerView<'a> {
    blocks: &'a [Arc<Block>],
    layer: usize,
    k_dim: usize,
    v_dim: usize,
}

impl KvRows for LayerView<'_> {
    fn key(&self, pos: usize) -> KvRow<'_> {
        let b = &self.blocks[pos / BLOCK];
        b.k.row((self.layer * BLOCK + pos % BLOCK) * self.k_dim, self.k_dim)
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        let b = &self.blocks[pos / BLOCK];
        b.v.row((self.layer * BLOCK + pos % BLOCK) * self.v_dim, self.v_dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(row: KvRow<'_>) -> Vec<f32> {
        match row {
            KvRow::F32(r) => r.to_vec(),
            KvRow::F16(r) => r.iter().map(|h| h.to_f32()).collect(),
        }
    }

    #[test]
    fn fork_shares_then_copies_on_write() {
        let mut kv = KvCache::new(KvType::F32, 2, 4, 4, 100);
        kv.reserve(0, 40).unwrap();
        for p in 0..40 {
            for l in 0..2 {
                kv.write(0, l, p, &[p as f32; 4], &[-(p as f32); 4]);
            }
        }
        kv.set_len(0, 40);
        kv.fork(0, 1).unwrap();
        assert_eq!(kv.shared_blocks(1), 2);
        kv.truncate(1, 35);
        kv.reserve(1, 36).unwrap();
        kv.write(1, 0, 35, &[99.0; 4], &[99.0; 4]);
        kv.set_len(1, 36);
        // the write copied block 1 for sequence 1 only
        assert_eq!(get(kv.layer_view(0, 0).key(35)), vec![35.0; 4]);
        assert_eq!(get(kv.layer_view(1, 0).key(35)), vec![99.0; 4]);
        assert_eq!(get(kv.layer_view(1, 1).value(3)), vec![-3.0; 4]);
        assert_eq!(kv.shared_blocks(1), 1);
        // two blocks of sequence 0, and sequence 1's own copy of the second
        assert_eq!(kv.live_blocks(), 3);
        kv.remove(0);
        assert_eq!(kv.live_blocks(), 2);
        assert_eq!(kv.block_bytes(), 2 * BLOCK * (4 + 4) * 4);
    }

    #[test]
    fn context_overflow_is_an_error() {
        let mut kv = KvCache::new(KvType::F16, 1, 2, 2, 8);
        assert_eq!(kv.reserve(3, 9), Err(KvError::ContextFull { seq: 3, needed: 9, n_ctx: 8 }));
        kv.reserve(3, 8).unwrap();
        kv.write(3, 0, 7, &[0.5, 1.5], &[2.5, 3.5]);
        assert_eq!(get(kv.layer_view(3, 0).value(7)), vec![2.5, 3.5]);
    }
}
