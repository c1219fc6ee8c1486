//! Activation rows prepared for the panel kernels, once per matmul call: from a Q8_0 row, per
//! block, `d` (f32), the sum of the 32 quants (i32, for the Q4_0 / Q5_0 offsets and the Q8_0
//! kernel's bias) and the quants; from a Q8_K row, per super-block, `d`, the sums of every 32
//! quants (8 x i16, for the Q4_K / Q5_K mins), of every 16 (16 x i16, for Q6_K's offset) and,
//! from byte 64, the quants. Nothing is rounded: the prepared row carries exactly the quantized row's values.

use super::layout::{ACT_K_BYTES, ACT_LEGACY_BYTES};
use crate::quant::blocks::{f16_le, BlockQ8K, BlockQ8_0};
use crate::quant::GgmlType;

/// Offsets in a prepared legacy block.
pub const LEGACY_D: usize = 0;
pub const LEGACY_SUM: usize = 4;
pub const LEGACY_QS: usize = 8;
/// Offsets in a prepared K block.
pub const K_D: usize = 0;
pub const K_SUMS32: usize = 4;
pub const K_SUMS16: usize = 20;
pub const K_QS: usize = 64;

/// Bytes of a prepared row of `blocks` blocks from activations of type `act_ty`.
pub fn prepared_row_bytes(act_ty: GgmlType, blocks: usize) -> usize {
    blocks * if act_ty == GgmlType::Q8_0 { ACT_LEGACY_BYTES } else { ACT_K_BYTES }
}

/// Prepares the quantized activation row `row` (Q8_0 or Q8_K blocks) into `out`.
pub fn prepare_row(act_ty: GgmlType, row: &[u8], out: &mut [u8]) {
    match act_ty {
        GgmlType::Q8_0 => {
            let blocks: &[BlockQ8_0] = bytemuck::cast_slice(row);
            assert_eq!(out.len(), blocks.len() * ACT_LEGACY_BYTES);
            for (b, dst) in blocks.iter().zip(out.chunks_exact_mut(ACT_LEGACY_BYTES)) {
                let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
                dst[LEGACY_D..LEGACY_D + 4].copy_from_slice(&f16_le(b.d).to_le_bytes());
                dst[LEGACY_SUM..LEGACY_SUM + 4].copy_from_slice(&sum.to_le_bytes());
                dst[LEGACY_QS..].copy_from_slice(bytemuck::cast_slice(&b.qs));
            }
        }
        GgmlType::Q8_K => {
            let blocks: &[BlockQ8K] = bytemuck::cast_slice(row);
            assert_eq!(out.len(), blocks.len() * ACT_K_BYTES);
            for (b, dst) in blocks.iter().zip(out.chunks_exact_mut(ACT_K_BYTES)) {
                dst[K_D..K_D + 4].copy_from_slice(&b.d);
                for j in 0..8 {
                    // |sum of 32 quants| <= 32 * 127: an i16
                    let s = b.bsum(2 * j) + b.bsum(2 * j + 1);
                    dst[K_SUMS32 + 2 * j..K_SUMS32 + 2 * j + 2].copy_from_slice(&s.to_le_bytes());
                }
                dst[K_SUMS16..K_SUMS16 + 32].copy_from_slice(&b.bsums);
                dst[K_SUMS16 + 32..K_QS].fill(0);
                dst[K_QS..].copy_from_slice(bytemuck::cast_slice(&b.qs));
            }
        }
        _ => panic!("no prepared layout for {act_ty} activations"),
    }
}

/// A cache line of prepared rows: buffers of them are 64-byte aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Line(pub [u8; 64]);

/// Zeroed bytes on a 64-byte boundary: `len` bytes of [`Line`]s.
pub struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBytes {
    pub fn zeroed(len: usize) -> AlignedBytes {
        AlignedBytes { lines: vec![Line([0; 64]); len.div_ceil(64)], len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}
