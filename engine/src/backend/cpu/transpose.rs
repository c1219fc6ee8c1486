//! Transposing a tile of attention keys (positions × dimensions into dimensions × positions),
//! so that the scores of a whole tile run as side-by-side chains. It is exact data movement:
//! every tier gives the same result: AVX-512 moves 16 × 16 blocks and AVX2 8 × 8 blocks through
//! registers where the plain loop stores one element at a time.

/// `dst[d * cols_out + t] = src[t * stride + d]` for `t < rows`, `d < dim` (`stride >= dim`,
/// `cols_out >= rows`): the source rows may lie apart, as one head's part of rows of all heads.
pub fn transpose(src: &[f32], rows: usize, dim: usize, stride: usize, dst: &mut [f32], cols_out: usize) {
    transpose_on(crate::quant::Isa::active(), src, rows, dim, stride, dst, cols_out)
}

/// [`transpose`] on tier `tier` (or the plain loop where the shape is off its blocks).
pub(crate) fn transpose_on(tier: crate::quant::Isa, src: &[f32], rows: usize, dim: usize, stride: usize, dst: &mut [f32], cols_out: usize) {
    assert!(
        stride >= dim
            && rows.checked_sub(1).is_none_or(|last| src.len() >= last * stride + dim)
            && cols_out >= rows
            && dst.len() >= dim * cols_out,
        "transpose: buffers too small"
    );
    #[cfg(target_arch = "x86_64")]
    {
        use crate::quant::Isa;
        let blocks_of = |n: usize| rows.is_multiple_of(n) && dim.is_multiple_of(n) && cols_out.is_multiple_of(n);
        if tier >= Isa::Avx512 && blocks_of(16) && Isa::Avx512.is_available() {
            // SAFETY: the CPU has AVX-512 F (checked just above); the assertion above and the
            // multiples of 16 keep every 16 × 16 block inside `src` and `dst`.
            unsafe { transpose_avx512(src, rows, dim, stride, dst, cols_out) };
            return;
        }
        if tier >= Isa::Avx2 && blocks_of(8) && Isa::Avx2.is_available() {
            // SAFETY: the CPU has AVX (checked just above: AVX2 implies it); the assertion above
            // and the multiples of 8 keep every 8 × 8 block inside `src` and `dst`.
            unsafe { transpose_avx2(src, rows, dim, stride, dst, cols_out) };
            return;
        }
    }
    let _ = tier;
    transpose_plain(src, rows, dim, stride, dst, cols_out);
}

fn transpose_plain(src: &[f32], rows: usize, dim: usize, stride: usize, dst: &mut [f32], cols_out: usize) {
    for t in 0..rows {
        for (d, &x) in src[t * stride..t * stride + dim].iter().enumerate() {
            dst[d * cols_out + t] = x;
        }
    }
}

/// Blocks of 16 × 16: sixteen rows loaded, four rounds of shuffles (pairs of elements, of
/// two, of four, of eight), sixteen columns stored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_avx512(src: &[f32], rows: usize, dim: usize, stride: usize, dst: &mut [f32], cols_out: usize) {
    use core::arch::x86_64::*;
    for t0 in (0..rows).step_by(16) {
        for d0 in (0..dim).step_by(16) {
            let r: [__m512; 16] = core::array::from_fn(|i| _mm512_loadu_ps(src.as_ptr().add((t0 + i) * stride + d0)));
            // elements 2i, 2i+1 of rows (a, b) side by side
            let a: [__m512; 16] = core::array::from_fn(|i| {
                let (x, y) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm512_unpacklo_ps(x, y)
                } else {
                    _mm512_unpackhi_ps(x, y)
                }
            });
            // four rows' elements in each 128-bit lane
            let b: [__m512; 16] = core::array::from_fn(|i| {
                let (x, y) = (a[(i & !3) | (i & 1)], a[(i & !3) | (i & 1) | 2]);
                if i & 2 == 0 {
                    _mm512_shuffle_ps::<0x44>(x, y)
                } else {
                    _mm512_shuffle_ps::<0xEE>(x, y)
                }
            });
            // 128-bit lanes of rows 0-3 with 4-7 (and 8-11 with 12-15)
            let c: [__m512; 16] = core::array::from_fn(|i| {
                let (x, y) = (b[(i & !7) | (i & 3)], b[(i & !7) | (i & 3) | 4]);
                if i & 4 == 0 {
                    _mm512_shuffle_f32x4::<0x88>(x, y)
                } else {
                    _mm512_shuffle_f32x4::<0xDD>(x, y)
                }
            });
            // rows 0-7 with 8-15
            let e: [__m512; 16] = core::array::from_fn(|i| {
                let (x, y) = (c[i & 7], c[(i & 7) | 8]);
                if i & 8 == 0 {
                    _mm512_shuffle_f32x4::<0x88>(x, y)
                } else {
                    _mm512_shuffle_f32x4::<0xDD>(x, y)
                }
            });
            for (i, v) in e.iter().enumerate() {
                _mm512_storeu_ps(dst.as_mut_ptr().add((d0 + COLUMN_OF[i]) * cols_out + t0), *v);
            }
        }
    }
}

/// Blocks of 8 × 8: eight rows loaded, three rounds of shuffles (pairs of elements, of two, the
/// 128-bit halves), eight columns stored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_avx2(src: &[f32], rows: usize, dim: usize, stride: usize, dst: &mut [f32], cols_out: usize) {
    use core::arch::x86_64::*;
    for t0 in (0..rows).step_by(8) {
        for d0 in (0..dim).step_by(8) {
            let r: [__m256; 8] = core::array::from_fn(|i| _mm256_loadu_ps(src.as_ptr().add((t0 + i) * stride + d0)));
            // rows (2m, 2m + 1) interleaved: elements 0, 1, 4, 5 (lo) and 2, 3, 6, 7 (hi)
            let a: [__m256; 8] = core::array::from_fn(|i| {
                let (x, y) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(x, y)
                } else {
                    _mm256_unpackhi_ps(x, y)
                }
            });
            // four rows' element d (and d + 4) in each 128-bit half
            let b: [__m256; 8] = core::array::from_fn(|i| {
                let (x, y) = (a[(i & !3) | (i & 1)], a[(i & !3) | (i & 1) | 2]);
                if i & 2 == 0 {
                    _mm256_shuffle_ps::<0x44>(x, y)
                } else {
                    _mm256_shuffle_ps::<0xEE>(x, y)
                }
            });
            // rows 0-3 with rows 4-7: the low halves give columns 0-3, the high halves 4-7
            for i in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(b[i], b[i | 4]);
                let hi = _mm256_permute2f128_ps::<0x31>(b[i], b[i | 4]);
                _mm256_storeu_ps(dst.as_mut_ptr().add((d0 + COLUMN_OF_8[i]) * cols_out + t0), lo);
                _mm256_storeu_ps(dst.as_mut_ptr().add((d0 + COLUMN_OF_8[i] + 4) * cols_out + t0), hi);
            }
        }
    }
}

/// The column that the low half of AVX2 shuffle output `i` holds (the high half holds the
/// column 4 further on); the test checks it against the plain loop.
#[cfg(target_arch = "x86_64")]
const COLUMN_OF_8: [usize; 4] = [0, 2, 1, 3];

/// The column (dimension within the block) that shuffle output `i` holds, worked out from the
/// four rounds above; the test checks it against the plain loop.
#[cfg(target_arch = "x86_64")]
const COLUMN_OF: [usize; 16] = [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tier_moves_every_element_to_its_place() {
        // (rows, dim, the source's row stride, cols_out); a stride past `dim` reads one head's
        // part of rows of several heads, and the source ends right after the last row's part
        for (rows, dim, stride, cols_out) in [
            (64, 64, 64, 64),
            (64, 128, 128, 64),
            (16, 16, 16, 16),
            (32, 256, 256, 64),
            (5, 7, 7, 8),
            (64, 80, 80, 64),
            (8, 8, 8, 8),
            (24, 40, 40, 32),
            (64, 64, 512, 64),
            (16, 16, 48, 16),
            (8, 8, 20, 8),
            (5, 7, 9, 8),
        ] {
            let src: Vec<f32> = (0..(rows - 1) * stride + dim).map(|i| i as f32).collect();
            let mut want = vec![-1.0; dim * cols_out];
            transpose_plain(&src, rows, dim, stride, &mut want, cols_out);
            for t in 0..rows {
                for d in 0..dim {
                    assert_eq!(want[d * cols_out + t], src[t * stride + d]);
                }
            }
            for tier in crate::quant::Isa::available() {
                let mut got = vec![-1.0; dim * cols_out];
                transpose_on(tier, &src, rows, dim, stride, &mut got, cols_out);
                assert_eq!(got, want, "{rows} x {dim} (stride {stride}) on {tier:?}");
            }
        }
    }
}
