//! x86-64 SIMD kernels, one folder per tier. Every function here is only reached through
//! [`super::dispatch`], which hands out a tier's kernels only after detecting its features.

pub mod avx2;
pub mod avx512;
