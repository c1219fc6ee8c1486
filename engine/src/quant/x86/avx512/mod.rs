//! The AVX512 tier: float, legacy-quant and K-quant row kernels (and the AVX2 tier's table-level ones).

use crate::quant::dispatch::Kernels;
use crate::quant::GgmlType;

mod float;
mod float_gemm;
pub(in crate::quant::x86) mod grid_gemm;
mod k_quants;
mod k_quants_q5q6;
pub(crate) use k_quants_q5q6::vec_dot_q6_k_blockwise;
mod legacy;
mod panel;
mod panel_pair;

pub(crate) use panel::panel_kernel;
pub(crate) use panel_pair::pair_kernel;

/// This tier's kernels for `ty`, or `None` where the scalar ones serve. The table-level types
/// (IQ4_NL, IQ4_XS, MXFP4) and the grid i-quants run the AVX2 tier's kernels: every AVX-512 CPU
/// has their features.
pub(crate) fn kernels(ty: GgmlType) -> Option<Kernels> {
    float::kernels(ty)
        .or_else(|| legacy::kernels(ty))
        .or_else(|| k_quants::kernels(ty))
        .or_else(|| super::avx2::nonlinear::kernels(ty))
        .or_else(|| super::avx2::grid::kernels(ty))
}

/// This tier's many-row product for grid i-quant `ty`, or `None`.
pub(crate) fn grid_gemm(ty: GgmlType) -> Option<crate::quant::iq_grid::gemm::GridGemm> {
    grid_gemm::gemm(ty)
}

/// This tier's many-row product for float type `ty`, or `None`.
pub(crate) fn float_gemm(ty: GgmlType) -> Option<crate::quant::float_gemm::FloatGemm> {
    float_gemm::float_gemm(ty)
}

/// This tier's tile kernel for float type `ty`, or `None` (the quantized types' many-row
/// products run on their panels).
pub(crate) fn dot_tile(ty: GgmlType) -> Option<crate::quant::dispatch::VecDotTileFn> {
    float::dot_tile(ty)
}
