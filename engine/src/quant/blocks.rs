//! Block layouts of every quantized type, byte for byte as ggml stores them.
//!
//! Every struct is `#[repr(C)]` with alignment 1 (half-precision and f32 scales are kept as
//! little-endian byte arrays), so a block slice can be viewed straight out of a memory-mapped
//! file at any offset, and a `Vec<u8>` of activations can be viewed as blocks without copies.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::QK_K;

/// Elements per block of the legacy (non-K) quant types.
pub const QK4_0: usize = 32;
pub const QK4_1: usize = 32;
pub const QK5_0: usize = 32;
pub const QK5_1: usize = 32;
pub const QK8_0: usize = 32;
pub const QK8_1: usize = 32;
pub const QK4_NL: usize = 32;
pub const QK_MXFP4: usize = 32;
/// Bytes of packed 6-bit scales and mins in Q4_K / Q5_K (and 3.x-bit scales in Q3_K).
pub const K_SCALE_SIZE: usize = 12;

/// Reads a little-endian IEEE half stored as two bytes.
#[inline(always)]
pub fn f16_le(b: [u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(b)).to_f32()
}

/// Encodes an f32 as a little-endian IEEE half, rounding to nearest even as ggml does.
#[inline(always)]
pub fn f16_le_from(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_bits().to_le_bytes()
}

macro_rules! blocks {
    ($($(#[$doc:meta])* $name:ident ($bytes:expr) { $($field:ident : $ty:ty),* $(,)? })*) => {$(
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
        pub struct $name { $(pub $field: $ty),* }
        const _: () = assert!(std::mem::size_of::<$name>() == $bytes);
        const _: () = assert!(std::mem::align_of::<$name>() == 1);
    )*};
}

blocks! {
    /// 32 weights: 4-bit quants `q`, value `d * (q - 8)`.
    BlockQ4_0 (18) { d: [u8; 2], qs: [u8; QK4_0 / 2] }
    /// 32 weights: 4-bit quants, value `d * q + m`.
    BlockQ4_1 (20) { d: [u8; 2], m: [u8; 2], qs: [u8; QK4_1 / 2] }
    /// 32 weights: 5-bit quants (high bits in `qh`), value `d * (q - 16)`.
    BlockQ5_0 (22) { d: [u8; 2], qh: [u8; 4], qs: [u8; QK5_0 / 2] }
    /// 32 weights: 5-bit quants, value `d * q + m`.
    BlockQ5_1 (24) { d: [u8; 2], m: [u8; 2], qh: [u8; 4], qs: [u8; QK5_1 / 2] }
    /// 32 values: 8-bit quants, value `d * q`.
    BlockQ8_0 (34) { d: [u8; 2], qs: [i8; QK8_0] }
    /// 32 activations: 8-bit quants plus `s = d * sum(q)` for the offset of Q4_1 / Q5_1.
    BlockQ8_1 (36) { d: [u8; 2], s: [u8; 2], qs: [i8; QK8_1] }
    /// 256 weights in 16 groups of 16: 2-bit quants, 4-bit scale and min per group.
    BlockQ2K (84) { scales: [u8; QK_K / 16], qs: [u8; QK_K / 4], d: [u8; 2], dmin: [u8; 2] }
    /// 256 weights in 16 groups of 16: 3-bit quants (high bit in `hmask`), 6-bit scales.
    BlockQ3K (110) { hmask: [u8; QK_K / 8], qs: [u8; QK_K / 4], scales: [u8; 12], d: [u8; 2] }
    /// 256 weights in 8 groups of 32: 4-bit quants, 6-bit scale and min per group.
    BlockQ4K (144) { d: [u8; 2], dmin: [u8; 2], scales: [u8; K_SCALE_SIZE], qs: [u8; QK_K / 2] }
    /// 256 weights in 8 groups of 32: 5-bit quants, 6-bit scale and min per group.
    BlockQ5K (176) {
        d: [u8; 2], dmin: [u8; 2], scales: [u8; K_SCALE_SIZE], qh: [u8; QK_K / 8],
        qs: [u8; QK_K / 2],
    }
    /// 256 weights in 16 groups of 16: 6-bit quants (low 4 in `ql`, high 2 in `qh`), int8 scales.
    BlockQ6K (210) { ql: [u8; QK_K / 2], qh: [u8; QK_K / 4], scales: [i8; QK_K / 16], d: [u8; 2] }
    /// 256 activations: f32 scale, 8-bit quants, and the sum of every 16 quants.
    BlockQ8K (292) { d: [u8; 4], qs: [i8; QK_K], bsums: [u8; 32] }
    /// 32 weights: 4-bit indices into the non-linear IQ4 levels, value `d * level`.
    BlockIQ4NL (18) { d: [u8; 2], qs: [u8; QK4_NL / 2] }
    /// 256 weights in 8 groups of 32: IQ4 level indices, a 6-bit scale per group (low 4 bits
    /// in `scales_l`, high 2 in `scales_h`), value `d * (scale - 32) * level`.
    BlockIQ4XS (136) { d: [u8; 2], scales_h: [u8; 2], scales_l: [u8; QK_K / 64], qs: [u8; QK_K / 2] }
    /// 32 weights: 4-bit E2M1 codes (doubled, see `mxfp4`) and a shared E8M0 exponent `e`.
    BlockMXFP4 (17) { e: u8, qs: [u8; QK_MXFP4 / 2] }
}

impl BlockQ8K {
    #[inline(always)]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    /// The sum of quants `16 * i .. 16 * i + 16`.
    #[inline(always)]
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * i], self.bsums[2 * i + 1]])
    }

    #[inline(always)]
    pub fn set_bsum(&mut self, i: usize, v: i16) {
        self.bsums[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;

    /// The CUDA kernels' `blocks.cuh` asserts each block's size; those sizes must be these.
    #[test]
    fn the_cuda_block_layouts_have_the_rust_sizes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/cuda/blocks.cuh");
        let header = std::fs::read_to_string(&path).expect("kernels/cuda/blocks.cuh");
        let rust = [
            ("block_q4_0", size_of::<BlockQ4_0>()),
            ("block_q4_1", size_of::<BlockQ4_1>()),
            ("block_q5_0", size_of::<BlockQ5_0>()),
            ("block_q5_1", size_of::<BlockQ5_1>()),
            ("block_q8_0", size_of::<BlockQ8_0>()),
            ("block_q8_1", size_of::<BlockQ8_1>()),
            ("block_q2_K", size_of::<BlockQ2K>()),
            ("block_q3_K", size_of::<BlockQ3K>()),
            ("block_q4_K", size_of::<BlockQ4K>()),
            ("block_q5_K", size_of::<BlockQ5K>()),
            ("block_q6_K", size_of::<BlockQ6K>()),
            ("block_q8_K", size_of::<BlockQ8K>()),
            ("block_iq4_nl", size_of::<BlockIQ4NL>()),
            ("block_iq4_xs", size_of::<BlockIQ4XS>()),
            ("block_mxfp4", size_of::<BlockMXFP4>()),
            // the grid i-quants are read as bytes (quant/iq_grid), with their GGUF sizes
            ("block_iq2_xxs", GgmlType::IQ2_XXS.type_size()),
            ("block_iq2_xs", GgmlType::IQ2_XS.type_size()),
            ("block_iq2_s", GgmlType::IQ2_S.type_size()),
            ("block_iq3_xxs", GgmlType::IQ3_XXS.type_size()),
            ("block_iq3_s", GgmlType::IQ3_S.type_size()),
            ("block_iq1_s", GgmlType::IQ1_S.type_size()),
            ("block_iq1_m", GgmlType::IQ1_M.type_size()),
        ];
        let asserted: Vec<(String, usize)> = header
            .lines()
            .filter_map(|l| l.trim().strip_prefix("static_assert(sizeof("))
            .map(|rest| {
                let (name, rest) = rest.split_once(") == ").expect("static_assert(sizeof(name) == size");
                (name.to_string(), rest.split(',').next().unwrap().trim().parse().expect("a size"))
            })
            .collect();
        assert_eq!(asserted.len(), rust.len(), "one assertion per block type: {asserted:?}");
        for (name, size) in rust {
            assert_eq!(asserted.iter().find(|(n, _)| n == name).map(|(_, s)| *s), Some(size), "{name}");
        }
    }
}
