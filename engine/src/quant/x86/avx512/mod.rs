//! The AVX512 tier: float, legacy-quant and K-quant row kernels.

use crate::quant::dispatch::Kernels;
use crate::quant::GgmlType;

mod float;
mod k_quants;
mod k_quants_q5q6;
mod k_quants_rows;
mod legacy;

/// This tier's kernels for `ty`, or `None` where the scalar ones serve.
pub(crate) fn kernels(ty: GgmlType) -> Option<Kernels> {
    float::kernels(ty).or_else(|| legacy::kernels(ty)).or_else(|| k_quants::kernels(ty))
}

/// This tier's kernel dotting one weight row of `ty` with several activation rows, if any.
pub(crate) fn rows_kernel(ty: GgmlType) -> Option<crate::quant::dispatch::VecDotRowsFn> {
    legacy::rows_kernel(ty).or_else(|| k_quants_rows::rows_kernel(ty))
}
