//! The AVX2 tier: float, legacy-quant, K-quant, table-level (IQ4, MXFP4) and grid i-quant row
//! kernels.

use crate::quant::dispatch::Kernels;
use crate::quant::GgmlType;

#[cfg(test)]
pub(crate) mod check;
mod float;
mod float_gemm;
pub(in crate::quant::x86) mod grid;
pub(in crate::quant::x86) mod grid_blocks;
mod grid_gemm;
mod k_quants;
mod k_quants_q5q6;
pub(crate) use k_quants_q5q6::vec_dot_q6_k_blockwise;
#[cfg(test)]
pub(crate) mod k_quants_tests;
mod legacy;
pub(in crate::quant::x86) mod nonlinear;
mod panel;
pub(crate) mod q8_k;

pub(crate) use panel::panel_kernel;

/// This tier's kernels for `ty`, or `None` where the scalar ones serve.
pub(crate) fn kernels(ty: GgmlType) -> Option<Kernels> {
    float::kernels(ty)
        .or_else(|| legacy::kernels(ty))
        .or_else(|| k_quants::kernels(ty))
        .or_else(|| nonlinear::kernels(ty))
        .or_else(|| grid::kernels(ty))
}

/// This tier's many-row product for grid i-quant `ty` (or Q2_K, Q3_K), or `None`.
pub(crate) fn grid_gemm(ty: GgmlType) -> Option<crate::quant::iq_grid::gemm::GridGemm> {
    grid_gemm::gemm(ty)
}

/// This tier's many-row product for `ty` (float weights only), or `None`.
pub(crate) fn float_gemm(ty: GgmlType) -> Option<crate::quant::float_gemm::FloatGemm> {
    float_gemm::float_gemm(ty)
}

/// This tier's tile kernel for float type `ty`, or `None` (the quantized types' many-row
/// products run on their panels).
pub(crate) fn dot_tile(ty: GgmlType) -> Option<crate::quant::dispatch::VecDotTileFn> {
    float::dot_tile(ty)
}
