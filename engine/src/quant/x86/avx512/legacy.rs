//! AVX512 kernels for the legacy types.

use crate::quant::dispatch::Kernels;
use crate::quant::GgmlType;

pub(super) fn kernels(_ty: GgmlType) -> Option<Kernels> {
    None
}
