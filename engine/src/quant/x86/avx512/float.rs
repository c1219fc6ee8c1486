//! AVX-512 kernels for the float types: F32, F16 and BF16 weights, dotted with f32
//! activations (raw little-endian bytes at any alignment).
//!
//! Dot products run four 16-lane FMA accumulators over 64 values per step, then 16 values per
//! step into the first, and a masked load for the last few (masked-off lanes read nothing and
//! add zero). The order depends only on the row length. Conversions to f32 are exact.

use core::arch::x86_64::*;

use super::legacy::{load256, load_ps, store_ps};
use crate::quant::dispatch::{Kernels, VecDotTileFn, TILE_A, TILE_W};
use crate::quant::x86::common::{dequantize_f32, entry_points};
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
entry_points! { "AVX-512 (F, BW, VL, DQ, VNNI) + AVX2 + FMA + F16C";
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

// Loads of the 16 values at `p` as f32, all of them or the lanes of `k` only (the others read
// nothing and are zero): every `unsafe fn` below reads through raw pointers, and callers
// guarantee the bytes of the lanes read exist (reads are unaligned) and that the CPU has the
// enabled features.

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn f32s(p: *const u8) -> __m512 {
    load_ps(p)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn f32s_masked(p: *const u8, k: __mmask16) -> __m512 {
    _mm512_maskz_loadu_ps(k, p as *const f32)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn f16s(p: *const u8) -> __m512 {
    _mm512_cvtph_ps(load256(p))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn f16s_masked(p: *const u8, k: __mmask16) -> __m512 {
    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p as *const i16))
}

/// BF16 is the high half of an f32: widen and shift.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn bf16_widen(v: __m256i) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn bf16s(p: *const u8) -> __m512 {
    bf16_widen(load256(p))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn bf16s_masked(p: *const u8, k: __mmask16) -> __m512 {
    bf16_widen(_mm256_maskz_loadu_epi16(k, p as *const i16))
}

/// Defines `$name(w, a, n)`: the dot product of `n` weights of `$size` bytes, read 16 at a
/// time by `$load` (`$masked` for the last few), with `n` f32 activations.
macro_rules! dot_rows {
    ($name:ident, $load:ident, $masked:ident, $size:expr) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name(w: *const u8, a: *const u8, n: usize) -> f32 {
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut i = 0;
            while i + 64 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let j = i + 16 * k;
                    *acc = _mm512_fmadd_ps($load(w.add($size * j)), load_ps(a.add(4 * j)), *acc);
                }
                i += 64;
            }
            while i + 16 <= n {
                acc[0] = _mm512_fmadd_ps($load(w.add($size * i)), load_ps(a.add(4 * i)), acc[0]);
                i += 16;
            }
            if i < n {
                let k: __mmask16 = (1 << (n - i)) - 1;
                let x = _mm512_maskz_loadu_ps(k, a.add(4 * i) as *const f32);
                acc[0] = _mm512_fmadd_ps($masked(w.add($size * i), k), x, acc[0]);
            }
            _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])))
        }
    };
}

dot_rows!(dot_f32, f32s, f32s_masked, 4);
dot_rows!(dot_f16, f16s, f16s_masked, 2);
dot_rows!(dot_bf16, bf16s, bf16s_masked, 2);

/// Defines `$name(w, w_stride, a, a_stride, n, out)`: the dot products of `TILE_W` weight rows
/// (`w_stride` bytes apart) with `TILE_A` activation rows (`a_stride` bytes apart), `n` values
/// each, into `out[weight row][activation row]`. Each output runs exactly the operations of
/// `dot_rows!` in the same order (its four accumulators, the 16-value steps, the masked tail, the
/// same final sums), so it has the bits `vec_dot` gives it; sharing each weight load among
/// three activation rows and each activation load among two weight rows is what is gained
/// (24 accumulators and 5 loads in 32 registers).
macro_rules! dot_tile {
    ($name:ident, $load:ident, $masked:ident, $size:expr) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name(w: *const u8, w_stride: usize, a: *const u8, a_stride: usize, n: usize, out: &mut [[f32; TILE_A]; TILE_W]) {
            let mut acc = [[[_mm512_setzero_ps(); 4]; TILE_A]; TILE_W];
            let mut i = 0;
            while i + 64 <= n {
                for k in 0..4 {
                    let j = i + 16 * k;
                    let ws: [__m512; TILE_W] = std::array::from_fn(|r| $load(w.add(r * w_stride + $size * j)));
                    let xs: [__m512; TILE_A] = std::array::from_fn(|c| load_ps(a.add(c * a_stride + 4 * j)));
                    for r in 0..TILE_W {
                        for c in 0..TILE_A {
                            acc[r][c][k] = _mm512_fmadd_ps(ws[r], xs[c], acc[r][c][k]);
                        }
                    }
                }
                i += 64;
            }
            while i + 16 <= n {
                let ws: [__m512; TILE_W] = std::array::from_fn(|r| $load(w.add(r * w_stride + $size * i)));
                let xs: [__m512; TILE_A] = std::array::from_fn(|c| load_ps(a.add(c * a_stride + 4 * i)));
                for r in 0..TILE_W {
                    for c in 0..TILE_A {
                        acc[r][c][0] = _mm512_fmadd_ps(ws[r], xs[c], acc[r][c][0]);
                    }
                }
                i += 16;
            }
            if i < n {
                let k: __mmask16 = (1 << (n - i)) - 1;
                let ws: [__m512; TILE_W] = std::array::from_fn(|r| $masked(w.add(r * w_stride + $size * i), k));
                let xs: [__m512; TILE_A] = std::array::from_fn(|c| _mm512_maskz_loadu_ps(k, a.add(c * a_stride + 4 * i) as *const f32));
                for r in 0..TILE_W {
                    for c in 0..TILE_A {
                        acc[r][c][0] = _mm512_fmadd_ps(ws[r], xs[c], acc[r][c][0]);
                    }
                }
            }
            for r in 0..TILE_W {
                for c in 0..TILE_A {
                    let s = &acc[r][c];
                    out[r][c] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
                }
            }
        }
    };
}

dot_tile!(tile_f32, f32s, f32s_masked, 4);
dot_tile!(tile_f16, f16s, f16s_masked, 2);
dot_tile!(tile_bf16, bf16s, bf16s_masked, 2);

/// This tier's tile kernel for float type `ty` (see [`VecDotTileFn`]).
pub(super) fn dot_tile(ty: GgmlType) -> Option<VecDotTileFn> {
    Some(match ty {
        GgmlType::F32 => vec_dot_tile_f32,
        GgmlType::F16 => vec_dot_tile_f16,
        GgmlType::BF16 => vec_dot_tile_bf16,
        _ => return None,
    })
}

crate::quant::x86::common::tile_entries! { "AVX-512 (F, BW, VL, DQ, VNNI) + AVX2 + FMA + F16C";
    vec_dot_tile_f32 => tile_f32, 4;
    vec_dot_tile_f16 => tile_f16, 2;
    vec_dot_tile_bf16 => tile_bf16, 2;
}

/// Defines `$name(x, out, n)`, converting `n` values of `$size` bytes with `$load`.
macro_rules! deq_rows {
    ($name:ident, $load:ident, $masked:ident, $size:expr) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name(x: *const u8, out: *mut f32, n: usize) {
            let mut i = 0;
            while i + 16 <= n {
                store_ps(out.add(i), $load(x.add($size * i)));
                i += 16;
            }
            if i < n {
                let k: __mmask16 = (1 << (n - i)) - 1;
                _mm512_mask_storeu_ps(out.add(i), k, $masked(x.add($size * i), k));
            }
        }
    };
}

deq_rows!(deq_f16, f16s, f16s_masked, 2);
deq_rows!(deq_bf16, bf16s, bf16s_masked, 2);

#[cfg(test)]
mod tests {
    use crate::quant::x86::avx2::check::check_type;
    use crate::quant::{GgmlType, Isa};

    #[test]
    fn float_kernels_match_the_scalar_reference() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            check_type(ty, Isa::Avx512, super::kernels(ty).expect("a kernel for every float type"));
        }
    }
}
