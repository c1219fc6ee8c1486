//! x86-64 SIMD kernels, one folder per tier, with the tier-independent pieces in `common`.
//! Every function here is only reached through [`super::dispatch`], which hands out a tier's
//! kernels only after detecting its features.

pub mod amx;
pub mod avx2;
pub mod avx512;
mod common;
mod grid_lanes;
mod panel;
pub mod peak;
