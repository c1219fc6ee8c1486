//! Quantized number formats: block layouts, scalar reference math, SIMD variants, dispatch.
//!
//! Every type has a scalar module (`*_ref` functions, always built, the ground truth) and, for
//! weight types, SIMD variants under `x86/` chosen once at run time by [`dispatch`].

/// Defines a type module's byte-level row functions (the signatures [`TypeOps`] holds) over its
/// typed `dequantize_ref`, `quantize_ref` and `vec_dot_ref`. Lengths are the caller's contract
/// (the matmul checks shapes once per call); a mismatch is a programming error and panics.
macro_rules! row_fns {
    ($block:ty, $act:ty) => {
        /// Dequantizes the blocks in `bytes` into `out` (`out.len()` values).
        pub fn dequantize_row(bytes: &[u8], out: &mut [f32]) {
            dequantize_ref(bytemuck::cast_slice::<u8, $block>(bytes), out)
        }

        /// Quantizes `x` into the blocks of `bytes`.
        pub fn quantize_row(x: &[f32], bytes: &mut [u8]) {
            quantize_ref(x, bytemuck::cast_slice_mut::<u8, $block>(bytes))
        }

        /// Dot product of a weight row with an activation row, both as raw blocks.
        pub fn vec_dot_row(w: &[u8], a: &[u8]) -> f32 {
            vec_dot_ref(bytemuck::cast_slice::<u8, $block>(w), bytemuck::cast_slice::<u8, $act>(a))
        }
    };
}
pub(crate) use row_fns;

pub mod blocks;
pub mod dispatch;
pub mod float;
pub mod float_gemm;
mod fma;
pub mod iq4;
pub mod iq_grid;
pub mod k_quants;
mod matrix;
pub mod mxfp4;
pub mod panel;
pub mod prefetch;
pub mod q4_0;
pub mod q4_1;
pub mod q5_0;
pub mod q5_1;
pub mod q8_0;
pub mod q8_1;
pub mod requantize;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use dispatch::{dot_tile_on, float_gemm_on, grid_gemm_on, ops, ops_for, ops_on, Isa, TypeOps, VecDotTileFn, TILE_A, TILE_W};
pub(crate) use fma::fma_variants;
pub use fma::ggml_expf;
pub use matrix::{MatmulError, WeightMatrix};
// the ggml type table is the file format's (`gguf::types`); every type module reads it
pub use crate::gguf::{GgmlType, QK_K};

/// A request the quant layer cannot serve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("tensor type {0} is not supported by this engine")]
    Unsupported(GgmlType),
    #[error("{n} elements is not a whole number of {ty} blocks ({} elements each)", ty.block_size())]
    PartialBlock { ty: GgmlType, n: usize },
    #[error("{what}: expected {expected} bytes, got {got}")]
    Length { what: &'static str, expected: usize, got: usize },
    #[error("instruction set {0} is not available on this CPU")]
    IsaUnavailable(Isa),
}
