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
use crate::backend::{AttentionShape, BackendError};
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
        if k.cols != shape.n_head_kv * dk || v.cols != shape.n_head_kv * dv || k.rows != v.rows {
            return Err(BackendError::shape(
                "keep_kv",
                format!("keys {}x{} and values {}x{} for {shape:?}", k.rows, k.cols, v.rows, v.cols),
            ));
        }
        let heads = (0..shape.n_head_kv)
            .into_par_iter()
            .map(|g| PackedHead::new(tier, g, k.rows, (&k.data, k.cols, dk), (&v.data, v.cols, dv)))
            .collect();
        Ok(KeptRows { k, v, heads })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::attention::{attend_queries_with, AttnScratch, Query};

    /// All heads' rows side by side, read in place.
    struct Flat {
        keys: Vec<f32>,
        key_stride: usize,
        values: Vec<f32>,
        value_stride: usize,
    }

    impl KvRows for Flat {
        fn key(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.keys[pos * self.key_stride..(pos + 1) * self.key_stride])
        }
        fn value(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.values[pos * self.value_stride..(pos + 1) * self.value_stride])
        }
        fn in_place(&self) -> Option<InPlaceRows<'_>> {
            Some(InPlaceRows::Rows { keys: &self.keys, key_stride: self.key_stride, values: &self.values, value_stride: self.value_stride })
        }
    }

    /// Attention over a packed head gives the bits of attention over the rows it was packed
    /// from, on every tier: whole tiles and the part after them, windows that start mid-tile,
    /// blocks of several queries, head sizes off the 16-wide blocks.
    #[test]
    fn a_packed_head_gives_the_bits_of_its_rows() {
        for (dk, dv) in [(64, 64), (64, 48), (40, 80)] {
            let shape = AttentionShape { n_head: 6, n_head_kv: 3, head_dim_k: dk, head_dim_v: dv, scale: 0.125, softcap: 0.0 };
            let val = |p: usize, i: usize, salt: usize| (((p * 37 + i * 11 + salt) % 89) as f32 / 89.0 - 0.5) * 2.0;
            let n = 221;
            let (key_stride, value_stride) = (3 * dk, 3 * dv);
            let flat = || Flat {
                keys: (0..n * key_stride).map(|i| val(i / key_stride, i % key_stride, 1)).collect(),
                key_stride,
                values: (0..n * value_stride).map(|i| val(i / value_stride, i % value_stride, 2)).collect(),
                value_stride,
            };
            let ranges = [0..n, 0..64, 0..128, 10..n, 64..200, 130..131, 0..n, 5..70];
            let qs: Vec<Vec<f32>> = (0..ranges.len()).map(|r| (0..6 * dk).map(|i| val(r, i, 3)).collect()).collect();
            let mut s = AttnScratch::default();
            for tier in Isa::available() {
                for g in 0..3 {
                    let rows = flat();
                    let head = PackedHead::new(tier, g, n, (&rows.keys, key_stride, dk), (&rows.values, value_stride, dv));
                    assert_eq!((head.keys.len(), head.values.len()), (3 * 64 * dk, 3 * 64 * dv), "whole tiles only");
                    let packed = PackedRows { rows, head: &head };
                    let run = |kv: &dyn KvRows, s: &mut AttnScratch| {
                        let mut outs = vec![vec![0.0f32; 2 * dv]; ranges.len()];
                        let mut block: Vec<Query> = ranges
                            .iter()
                            .zip(&qs)
                            .zip(outs.iter_mut())
                            .map(|((r, q), out)| Query { q, positions: r.clone(), out })
                            .collect();
                        attend_queries_with(tier, &mut block, g, &shape, None, kv, s);
                        outs.concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                    };
                    assert_eq!(run(&packed, &mut s), run(&packed.rows, &mut s), "{dk}/{dv} group {g} on {tier:?}");
                }
            }
        }
    }
}
