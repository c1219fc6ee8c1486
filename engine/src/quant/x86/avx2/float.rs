//! AVX2 kernels for the float types: F32, F16 (F16C) and BF16 weights, dotted with f32
//! activations (raw little-endian bytes at any alignment).
//!
//! Dot products run four 8-lane FMA accumulators over 32 values per step, then 8 values per
//! step into the first; a last partial step of fewer than 8 values is copied into a zeroed
//! buffer. The order depends only on the row length. Conversions to f32 are exact.

use core::arch::x86_64::*;
use core::ptr;

use super::legacy::{load128, load_ps, store_ps};
use crate::quant::dispatch::{Kernels, VecDotTileFn, TILE_A, TILE_W};
use crate::quant::x86::common::{dequantize_f32, entry_points, hsum256};
use crate::quant::GgmlType;

pub(super) fn kernels(ty: GgmlType) -> Option<Kernels> {
    Some(match ty {
        GgmlType::F32 => Kernels { dequantize: dequantize_f32, vec_dot: vec_dot_f32 },
        GgmlType::F16 => Kernels { dequantize: dequantize_f16, vec_dot: vec_dot_f16 },
        GgmlType::BF16 => Kernels { dequantize: dequantize_bf16, vec_dot: vec_dot_bf16 },
        _ => return None,
    })
}

// Units are single values: weights of 4 or 2 bytes against f32 activations (4 bytes), or
// dequantized into one f32 each.
entry_points! { "AVX2 + FMA + F16C";
    dot {
        vec_dot_f32 => dot_f32, 4, 4;
        vec_dot_f16 => dot_f16, 2, 4;
        vec_dot_bf16 => dot_bf16, 2, 4;
    }
    dequantize {
        dequantize_f16 => deq_f16, 2, 1;
        dequantize_bf16 => deq_bf16, 2, 1;
    }
}

// Loads of 8 values as f32: every `unsafe fn` below reads through raw pointers, and callers
// guarantee the bytes exist (reads are unaligned) and that the CPU has the enabled features.

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32(p: *const u8) -> __m256 {
    load_ps(p)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(load128(p))
}

/// BF16 is the high half of an f32: widen and shift.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16(p: *const u8) -> __m256 {
    let v = _mm256_cvtepu16_epi32(load128(p));
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
}

/// Defines `$name(w, a, n)`: the dot product of `n` weights of `$size` bytes, read 8 at a
/// time by `$load`, with `n` f32 activations.
macro_rules! dot_rows {
    ($name:ident, $load:ident, $size:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(w: *const u8, a: *const u8, n: usize) -> f32 {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let j = i + 8 * k;
                    *acc = _mm256_fmadd_ps($load(w.add($size * j)), load_ps(a.add(4 * j)), *acc);
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps($load(w.add($size * i)), load_ps(a.add(4 * i)), acc[0]);
                i += 8;
            }
            if i < n {
                let (mut wt, mut at) = ([0u8; 8 * $size], [0u8; 32]);
                ptr::copy_nonoverlapping(w.add($size * i), wt.as_mut_ptr(), $size * (n - i));
                ptr::copy_nonoverlapping(a.add(4 * i), at.as_mut_ptr(), 4 * (n - i));
                acc[0] = _mm256_fmadd_ps($load(wt.as_ptr()), load_ps(at.as_ptr()), acc[0]);
            }
            hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
        }
    };
}

dot_rows!(dot_f32, load_f32, 4);
dot_rows!(dot_f16, load_f16, 2);
dot_rows!(dot_bf16, load_bf16, 2);

/// Defines `$name(w, w_stride, a, a_stride, n, out)`: the dot products of `TILE_W` weight rows
/// with `TILE_A` activation rows (see the AVX-512 tier's `dot_tile!`), each output the bits of
/// `dot_rows!`. Its four accumulators never mix until the final sums, so they are computed one
/// after the other, each over the whole row in its own order: 6 accumulators live instead of
/// 24, which 16 registers hold.
macro_rules! dot_tile {
    ($name:ident, $load:ident, $size:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(w: *const u8, w_stride: usize, a: *const u8, a_stride: usize, n: usize, out: &mut [[f32; TILE_A]; TILE_W]) {
            let mut sums = [[[_mm256_setzero_ps(); 4]; TILE_A]; TILE_W];
            let main = n / 32 * 32;
            for k in 0..4 {
                let mut acc = [[_mm256_setzero_ps(); TILE_A]; TILE_W];
                let mut i = 0;
                while i < main {
                    let j = i + 8 * k;
                    let ws: [__m256; TILE_W] = std::array::from_fn(|r| $load(w.add(r * w_stride + $size * j)));
                    let xs: [__m256; TILE_A] = std::array::from_fn(|c| load_ps(a.add(c * a_stride + 4 * j)));
                    for r in 0..TILE_W {
                        for c in 0..TILE_A {
                            acc[r][c] = _mm256_fmadd_ps(ws[r], xs[c], acc[r][c]);
                        }
                    }
                    i += 32;
                }
                if k == 0 {
                    // the first accumulator goes on with the 8-value steps and the tail
                    while i + 8 <= n {
                        let ws: [__m256; TILE_W] = std::array::from_fn(|r| $load(w.add(r * w_stride + $size * i)));
                        let xs: [__m256; TILE_A] = std::array::from_fn(|c| load_ps(a.add(c * a_stride + 4 * i)));
                        for r in 0..TILE_W {
                            for c in 0..TILE_A {
                                acc[r][c] = _mm256_fmadd_ps(ws[r], xs[c], acc[r][c]);
                            }
                        }
                        i += 8;
                    }
                    if i < n {
                        for r in 0..TILE_W {
                            let mut wt = [0u8; 8 * $size];
                            ptr::copy_nonoverlapping(w.add(r * w_stride + $size * i), wt.as_mut_ptr(), $size * (n - i));
                            let wv = $load(wt.as_ptr());
                            for c in 0..TILE_A {
                                let mut at = [0u8; 32];
                                ptr::copy_nonoverlapping(a.add(c * a_stride + 4 * i), at.as_mut_ptr(), 4 * (n - i));
                                acc[r][c] = _mm256_fmadd_ps(wv, load_ps(at.as_ptr()), acc[r][c]);
                            }
                        }
                    }
                }
                for r in 0..TILE_W {
                    for c in 0..TILE_A {
                        sums[r][c][k] = acc[r][c];
                    }
                }
            }
            for r in 0..TILE_W {
                for c in 0..TILE_A {
                    let s = &sums[r][c];
                    out[r][c] = hsum256(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
                }
            }
        }
    };
}

dot_tile!(tile_f32, load_f32, 4);
dot_tile!(tile_f16, load_f16, 2);
dot_tile!(tile_bf16, load_bf16, 2);

/// This tier's tile kernel for float type `ty` (see [`VecDotTileFn`]).
pub(super) fn dot_tile(ty: GgmlType) -> Option<VecDotTileFn> {
    Some(match ty {
        GgmlType::F32 => vec_dot_tile_f32,
        GgmlType::F16 => vec_dot_tile_f16,
        GgmlType::BF16 => vec_dot_tile_bf16,
        _ => return None,
    })
}

crate::quant::x86::common::tile_entries! { "AVX2 + FMA + F16C";
    vec_dot_tile_f32 => tile_f32, 4;
    vec_dot_tile_f16 => tile_f16, 2;
    vec_dot_tile_bf16 => tile_bf16, 2;
}

/// Defines `$name(x, out, n)`, converting `n` values of `$size` bytes with `$load`.
macro_rules! deq_rows {
    ($name:ident, $load:ident, $size:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(x: *const u8, out: *mut f32, n: usize) {
            let mut i = 0;
            while i + 8 <= n {
                store_ps(out.add(i), $load(x.add($size * i)));
                i += 8;
            }
            if i < n {
                let (mut xt, mut ot) = ([0u8; 8 * $size], [0f32; 8]);
                ptr::copy_nonoverlapping(x.add($size * i), xt.as_mut_ptr(), $size * (n - i));
                store_ps(ot.as_mut_ptr(), $load(xt.as_ptr()));
                ptr::copy_nonoverlapping(ot.as_ptr(), out.add(i), n - i);
            }
        }
    };
}

deq_rows!(deq_f16, load_f16, 2);
deq_rows!(deq_bf16, load_bf16, 2);

#[cfg(test)]
mod tests {
    use super::super::check::check_type;
    use crate::quant::{GgmlType, Isa};

    #[test]
    fn float_kernels_match_the_scalar_reference() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            check_type(ty, Isa::Avx2, super::kernels(ty).expect("a kernel for every float type"));
        }
    }
}
