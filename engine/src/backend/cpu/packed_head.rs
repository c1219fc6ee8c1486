//! One key/value head of a batch's own rows (an encoder's keys and values) laid out once as
//! attention reads it, for the many blocks of query rows that read it: the keys of each whole
//! tile transposed, the values of the head side by side. Read in place, a head's rows lie a
//! whole row of all heads apart (a power of two of bytes for most models), so a cache holds only
//! a few of its sets' worth of them, and every block of rows transposed every tile again.
//! Packing is exact data movement: attention over it gives the bits of attention over the rows.
//! Rows kept for many calls (`KeptRows`, a Whisper window's audio) are packed once for all.

use rayon::prelude::*;

use super::attention::KV_TILE;
use super::backend::HostTensor;
use super::kv_rows::{InPlaceRows, KvRow, KvRows};
use super::transpose::transpose_on;
use crate::backend::{kv_rows_misfit, AttentionShape, BackendError};
use crate::quant::Isa;

/// Head `g`'s whole tiles of positions `0..n` of rows `k`, `v` (all heads' f32 rows).
pub struct PackedHead {
    /// Tile `i`'s keys transposed at `[i * dk * KV_TILE..]`: `[d * KV_TILE + t]`.
    keys: Vec<f32>,
    /// Position `p`'s value at `[p * dv..]`.
    values: Vec<f32>,
}

impl PackedHead {
    /// `keys`: `n` rows of `key_stride` (head `g` at `g * dk..`), `values` the same with
    /// `value_stride` and `dv`; positions past the last whole tile are left out.
    pub fn new(
        tier: Isa,
        g: usize,
        n: usize,
        (keys, key_stride, dk): (&[f32], usize, usize),
        (values, value_stride, dv): (&[f32], usize, usize),
    ) -> PackedHead {
        let tiles = n / KV_TILE;
        let mut packed_keys = vec![0.0; tiles * dk * KV_TILE];
        for (i, tile) in packed_keys.chunks_exact_mut(dk * KV_TILE).enumerate() {
            transpose_on(tier, &keys[i * KV_TILE * key_stride + g * dk..], KV_TILE, dk, key_stride, tile, KV_TILE);
        }
        let mut packed_values = Vec::with_capacity(tiles * KV_TILE * dv);
        for p in 0..tiles * KV_TILE {
            packed_values.extend_from_slice(&values[p * value_stride + g * dv..p * value_stride + (g + 1) * dv]);
        }
        PackedHead { keys: packed_keys, values: packed_values }
    }
}

/// Rows read by position from `rows`, and their whole tiles from `head` (the same head's).
pub struct PackedRows<'a, R: KvRows> {
    pub rows: R,
    pub head: &'a PackedHead,
}

impl<R: KvRows> KvRows for PackedRows<'_, R> {
    fn key(&self, pos: usize) -> KvRow<'_> {
        self.rows.key(pos)
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        self.rows.value(pos)
    }

    fn in_place(&self) -> Option<InPlaceRows<'_>> {
        Some(InPlaceRows::Head { keys: &self.head.keys, values: &self.head.values })
    }
}

/// [`Backend::keep_kv`](crate::backend::Backend::keep_kv)'s keys and values on the CPU: the
/// rows, and every key/value head of them packed.
pub struct KeptRows {
    pub k: HostTensor,
    pub v: HostTensor,
    pub heads: Vec<PackedHead>,
}

impl KeptRows {
    /// Checks `k` and `v` against `shape` and packs their heads (in parallel).
    pub fn new(tier: Isa, k: HostTensor, v: HostTensor, shape: &AttentionShape) -> Result<KeptRows, BackendError> {
        let (dk, dv) = (shape.head_dim_k, shape.head_dim_v);
        if let Some(why) = kv_rows_misfit(shape, (k.rows, k.cols), (v.rows, v.cols)) {
            return Err(BackendError::shape("keep_kv", why));
        }
        let heads = (0..shape.n_head_kv)
            .into_par_iter()
            .map(|g| PackedHead::new(tier, g, k.rows, (&k.data, k.cols, dk), (&v.data, v.cols, dv)))
            .collect();
        Ok(KeptRows { k, v, heads })
    }
}
