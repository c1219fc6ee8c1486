//! The cached key and value rows attention reads: one row as stored (f32, f16, or Q8_0 / Q4_0
//! blocks) widened to f32 exactly as ggml dequantizes it, and the trait through which a KV store
//! hands a sequence's rows to attention by position.

use half::f16;

use crate::backend::types::KV_QUANT_BLOCK;
use crate::quant::blocks::{BlockQ4_0, BlockQ8_0};

/// One cached key or value row.
#[derive(Clone, Copy)]
pub enum KvRow<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    /// The row's values in blocks of 32 (the last one padded).
    Q8_0(&'a [BlockQ8_0]),
    Q4_0(&'a [BlockQ4_0]),
}

impl<'a> KvRow<'a> {
    /// `range` of the row as f32, written to `out` (of the range's length). Inlined into each
    /// tier's copy of the attention, where the widening loop vectorises.
    #[inline(always)]
    pub(super) fn widen_into(self, range: std::ops::Range<usize>, out: &mut [f32]) {
        match self {
            KvRow::F32(r) => out.copy_from_slice(&r[range]),
            KvRow::F16(r) => out.iter_mut().zip(&r[range]).for_each(|(o, h)| *o = widen_f16(h.to_bits())),
            KvRow::Q8_0(blocks) => widen_blocks(blocks, range, out, |b, y| {
                let d = widen_f16(u16::from_le_bytes(b.d));
                y.iter_mut().zip(&b.qs).for_each(|(y, &q)| *y = f32::from(q) * d);
            }),
            KvRow::Q4_0(blocks) => widen_blocks(blocks, range, out, |b, y| {
                let d = widen_f16(u16::from_le_bytes(b.d));
                let (low, high) = y.split_at_mut(KV_QUANT_BLOCK / 2);
                for ((lo, hi), &q) in low.iter_mut().zip(high).zip(&b.qs) {
                    *lo = f32::from(i16::from(q & 0x0F) - 8) * d;
                    *hi = f32::from(i16::from(q >> 4) - 8) * d;
                }
            }),
        }
    }
}

impl KvRow<'_> {
    /// The row as stored, little-endian (for comparing a device's stores with the CPU's).
    #[cfg(all(test, feature = "sim"))]
    pub(crate) fn bytes(self) -> Vec<u8> {
        match self {
            KvRow::F32(r) => r.iter().flat_map(|v| v.to_le_bytes()).collect(),
            KvRow::F16(r) => r.iter().flat_map(|v| v.to_le_bytes()).collect(),
            KvRow::Q8_0(b) => bytemuck::cast_slice(b).to_vec(),
            KvRow::Q4_0(b) => bytemuck::cast_slice(b).to_vec(),
        }
    }
}

/// Values `range` of a row of quant blocks, each block decoded by `decode` (as ggml dequantizes
/// it: the quant times the scale, one rounding), written to `out`: whole blocks in place, the
/// ends of a range that starts or stops inside a block through a block on the stack.
#[inline(always)]
fn widen_blocks<B>(blocks: &[B], range: std::ops::Range<usize>, out: &mut [f32], decode: impl Fn(&B, &mut [f32; KV_QUANT_BLOCK])) {
    let (mut at, mut o) = (range.start, 0);
    while at < range.end {
        let (b, j) = (at / KV_QUANT_BLOCK, at % KV_QUANT_BLOCK);
        let n = (KV_QUANT_BLOCK - j).min(range.end - at);
        if n == KV_QUANT_BLOCK {
            decode(&blocks[b], (&mut out[o..o + KV_QUANT_BLOCK]).try_into().expect("a whole block"));
        } else {
            let mut block = [0.0f32; KV_QUANT_BLOCK];
            decode(&blocks[b], &mut block);
            out[o..o + n].copy_from_slice(&block[j..j + n]);
        }
        at += n;
        o += n;
    }
}

/// The f16 with bits `h` as an f32, exactly (as F16C's conversion), in plain integer and float
/// steps that vectorise: the exponent and mantissa shifted into place and rescaled by 2^112
/// (exact, subnormals included), infinities and NaNs given the all-ones exponent, then the sign.
#[inline(always)]
fn widen_f16(h: u16) -> f32 {
    let magnitude = u32::from(h & 0x7FFF) << 13;
    let value = if magnitude >= 0x7C00 << 13 {
        f32::from_bits(magnitude | 0x7F80_0000)
    } else {
        f32::from_bits(magnitude) * f32::from_bits(0x7780_0000)
    };
    f32::from_bits(value.to_bits() | u32::from(h & 0x8000) << 16)
}

/// Keys and values of one layer of one sequence, by position.
pub trait KvRows: Sync {
    fn key(&self, pos: usize) -> KvRow<'_>;
    fn value(&self, pos: usize) -> KvRow<'_>;
    /// The keys and values as f32 rows where they lie, when the store holds them so (a batch's
    /// own rows, as an encoder's or the audio of Whisper's cross-attention): whole tiles are
    /// then read in place instead of copied position by position.
    fn in_place(&self) -> Option<InPlaceRows<'_>> {
        None
    }
}

impl<R: KvRows + ?Sized> KvRows for &R {
    fn key(&self, pos: usize) -> KvRow<'_> {
        (**self).key(pos)
    }

    fn value(&self, pos: usize) -> KvRow<'_> {
        (**self).value(pos)
    }

    fn in_place(&self) -> Option<InPlaceRows<'_>> {
        (**self).in_place()
    }
}

/// Keys and values that attention reads where they lie, without copying them tile by tile.
#[derive(Clone, Copy)]
pub enum InPlaceRows<'a> {
    /// f32 rows of all key/value heads: position `p`'s key at `keys[p * key_stride..]`, its
    /// value at `values[p * value_stride..]`.
    Rows { keys: &'a [f32], key_stride: usize, values: &'a [f32], value_stride: usize },
    /// One key/value head's whole tiles laid out as attention reads them (`PackedHead`): tile
    /// `i`'s keys transposed at `keys[i * head_dim_k * KV_TILE..]` (`[d * KV_TILE + t]`),
    /// position `p`'s value at `values[p * head_dim_v..]`; positions past the last whole tile
    /// are read by position.
    Head { keys: &'a [f32], values: &'a [f32] },
}

impl InPlaceRows<'_> {
    /// Whether the whole tile at position `tile` (a multiple of `KV_TILE`) lies here, for
    /// keys of `head_dim_k` values.
    pub fn holds_tile(&self, tile: usize, head_dim_k: usize) -> bool {
        match self {
            InPlaceRows::Rows { .. } => true,
            InPlaceRows::Head { keys, .. } => (tile / super::attention::KV_TILE + 1) * head_dim_k * super::attention::KV_TILE <= keys.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of the 65,536 halves widens to the value F16C (through `half`) gives.
    #[test]
    fn f16_widening_is_exact() {
        for bits in 0..=u16::MAX {
            let (got, want) = (widen_f16(bits), f16::from_bits(bits).to_f32());
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#06x}: {got} vs {want}");
        }
    }

    /// Any range of a quantized row, whole blocks or cut inside them, widens to ggml's reference
    /// dequantization of those values.
    #[test]
    fn quantized_rows_widen_to_the_reference_dequantization() {
        use crate::quant::{q4_0, q8_0};
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 6.0).collect();
        let mut b8 = vec![bytemuck::Zeroable::zeroed(); 3];
        q8_0::quantize_ref(&x, &mut b8);
        let mut b4 = vec![bytemuck::Zeroable::zeroed(); 3];
        q4_0::quantize_ref(&x, &mut b4);
        let (mut want8, mut want4) = (vec![0.0; 96], vec![0.0; 96]);
        q8_0::dequantize_ref(&b8, &mut want8);
        q4_0::dequantize_ref(&b4, &mut want4);
        for (row, want) in [(KvRow::Q8_0(&b8), &want8), (KvRow::Q4_0(&b4), &want4)] {
            for range in [0..96, 0..32, 32..64, 5..27, 20..70, 31..33, 64..96, 40..41, 0..0] {
                let mut got = vec![f32::NAN; range.len()];
                row.widen_into(range.clone(), &mut got);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want[range.clone()]), "{range:?}");
            }
        }
    }
}
