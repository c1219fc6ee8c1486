//! The exact-erf GELU over a row on AVX2, four values at a time (AVX-512: eight): the scalar `gelu_erf`'s
//! operations in the same order and precision (f32 around it, f64 inside erf, multiplies and
//! adds never fused), each lane's branch taken by blending and its interval's Taylor
//! coefficients gathered from the table: the same bits. The scalar form spent ~45 cycles a
//! value (a branch, a table walk, a division), most of Whisper's feed-forward time outside the
//! matrix products.

use core::arch::x86_64::*;

use super::activation::{erf_taylor, gelu_erf, ERF_DEGREE, ERF_SERIES, ERF_STEP};
use crate::quant::Isa;

/// Terms of the Maclaurin series below 1/8 (`erf_series`: 12 + ⌈4.5 t²⌉ with t² < 1/64; at
/// t = 0 one term fewer, but the result is 0 either way).
const SERIES_TERMS: usize = 13;

/// `a[i] = gelu_erf(a[i])`, times `gate[i]` where given, on tier `tier` (AVX2: 4 at a time,
/// AVX-512 and up: 8, then 4).
pub(super) fn gelu_erf_row(tier: Isa, a: &mut [f32], gate: Option<&[f32]>) {
    if let Some(g) = gate {
        assert_eq!(a.len(), g.len(), "a row and its gate");
    }
    let eights = a.len() / 8 * 8;
    if eights > 0 && tier >= Isa::Avx512 && Isa::Avx512.is_available() {
        // SAFETY: the CPU has the AVX-512 tier's features, AVX2 and FMA among them (checked just
        // above); the loop reads and writes `a[..eights]` and `gate[..eights]`, in bounds.
        unsafe { gelu_erf_avx512(&mut a[..eights], gate.map(|g| &g[..eights])) };
        let rest = gate.map(|g| &g[eights..]);
        return gelu_erf_row(Isa::Avx2.min(tier), &mut a[eights..], rest);
    }
    let whole = a.len() / 4 * 4;
    if whole > 0 && tier >= Isa::Avx2 && Isa::Avx2.is_available() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); the vector loop reads and
        // writes `a[..whole]` and `gate[..whole]`, in bounds (asserted equal lengths).
        unsafe { gelu_erf_avx2(&mut a[..whole], gate.map(|g| &g[..whole])) };
    } else if whole > 0 {
        scalar(&mut a[..whole], gate.map(|g| &g[..whole]));
    }
    scalar(&mut a[whole..], gate.map(|g| &g[whole..]));
}

fn scalar(a: &mut [f32], gate: Option<&[f32]>) {
    match gate {
        Some(g) => a.iter_mut().zip(g).for_each(|(a, &g)| *a = gelu_erf(*a) * g),
        None => a.iter_mut().for_each(|a| *a = gelu_erf(*a)),
    }
}

/// # Safety
/// The CPU has AVX2 and FMA; `a.len()` is a multiple of 4 and `gate` (if any) as long.
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_erf_avx2(a: &mut [f32], gate: Option<&[f32]>) {
    let table = erf_taylor().as_ptr() as *const f64;
    let sqrt_pi = _mm256_set1_pd(std::f64::consts::PI.sqrt());
    let (zero, one, two, eighth) = (_mm256_setzero_pd(), _mm256_set1_pd(1.0), _mm256_set1_pd(2.0), _mm256_set1_pd(ERF_STEP));
    let (four, half) = (_mm256_set1_pd(4.0), _mm256_set1_pd(0.5));
    let sign = _mm256_set1_pd(-0.0);
    for i in (0..a.len()).step_by(4) {
        let x = _mm_loadu_ps(a.as_ptr().add(i));
        // erf's argument, in f32 as the scalar form rounds it, then widened
        let y = _mm256_cvtps_pd(_mm_mul_ps(x, _mm_set1_ps(std::f32::consts::FRAC_1_SQRT_2)));
        let t = _mm256_andnot_pd(sign, y);
        let in_series = _mm256_cmp_pd::<_CMP_LT_OQ>(t, eighth);
        let in_taylor = _mm256_andnot_pd(in_series, _mm256_cmp_pd::<_CMP_LT_OQ>(t, four));
        // from 4 on (and NaN, as the scalar comparisons fall through): 1
        let mut r = one;
        if _mm256_movemask_pd(in_taylor) != 0 {
            // lanes outside the Taylor range (their result is not taken) read interval 1
            let t = _mm256_blendv_pd(eighth, t, in_taylor);
            let interval = _mm256_cvttpd_epi32(_mm256_div_pd(t, eighth));
            let centre = _mm256_mul_pd(_mm256_add_pd(_mm256_cvtepi32_pd(interval), half), eighth);
            let d = _mm256_sub_pd(t, centre);
            let row = _mm_mullo_epi32(interval, _mm_set1_epi32(ERF_DEGREE as i32 + 1));
            let mut p = zero;
            for k in (0..=ERF_DEGREE).rev() {
                let c = _mm256_i32gather_pd::<8>(table, _mm_add_epi32(row, _mm_set1_epi32(k as i32)));
                p = _mm256_add_pd(_mm256_mul_pd(p, d), c);
            }
            r = _mm256_blendv_pd(r, p, in_taylor);
        }
        if _mm256_movemask_pd(in_series) != 0 {
            let u = _mm256_mul_pd(t, t);
            let mut p = zero;
            for &c in ERF_SERIES[..SERIES_TERMS].iter().rev() {
                p = _mm256_add_pd(_mm256_mul_pd(p, u), _mm256_set1_pd(c));
            }
            let s = _mm256_div_pd(_mm256_mul_pd(_mm256_mul_pd(t, p), two), sqrt_pi);
            r = _mm256_blendv_pd(r, s, in_series);
        }
        let negative = _mm256_cmp_pd::<_CMP_LT_OQ>(y, zero);
        let r = _mm256_xor_pd(r, _mm256_and_pd(negative, sign));
        let e = _mm256_cvtpd_ps(r);
        let mut g = _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(0.5), x), _mm_add_ps(_mm_set1_ps(1.0), e));
        if let Some(gate) = gate {
            g = _mm_mul_ps(g, _mm_loadu_ps(gate.as_ptr().add(i)));
        }
        _mm_storeu_ps(a.as_mut_ptr().add(i), g);
    }
}

/// The AVX2 form's operations on eight values at a time (f64 lanes of a zmm register; the
/// branches as lane masks).
///
/// # Safety
/// The CPU has AVX-512 F and DQ, AVX2 and FMA; `a.len()` is a multiple of 8 and `gate` (if any)
/// as long.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn gelu_erf_avx512(a: &mut [f32], gate: Option<&[f32]>) {
    let table = erf_taylor().as_ptr() as *const f64;
    let sqrt_pi = _mm512_set1_pd(std::f64::consts::PI.sqrt());
    let (zero, one, two, eighth) = (_mm512_setzero_pd(), _mm512_set1_pd(1.0), _mm512_set1_pd(2.0), _mm512_set1_pd(ERF_STEP));
    let (four, half) = (_mm512_set1_pd(4.0), _mm512_set1_pd(0.5));
    let sign = _mm512_set1_pd(-0.0);
    for i in (0..a.len()).step_by(8) {
        let x = _mm256_loadu_ps(a.as_ptr().add(i));
        // erf's argument, in f32 as the scalar form rounds it, then widened
        let y = _mm512_cvtps_pd(_mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2)));
        let t = _mm512_andnot_pd(sign, y);
        let in_series = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(t, eighth);
        let in_taylor = !in_series & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(t, four);
        // from 4 on (and NaN, as the scalar comparisons fall through): 1
        let mut r = one;
        if in_taylor != 0 {
            // lanes outside the Taylor range (their result is not taken) read interval 1
            let t = _mm512_mask_blend_pd(in_taylor, eighth, t);
            let interval = _mm512_cvttpd_epi32(_mm512_div_pd(t, eighth));
            let centre = _mm512_mul_pd(_mm512_add_pd(_mm512_cvtepi32_pd(interval), half), eighth);
            let d = _mm512_sub_pd(t, centre);
            let row = _mm256_mullo_epi32(interval, _mm256_set1_epi32(ERF_DEGREE as i32 + 1));
            let mut p = zero;
            for k in (0..=ERF_DEGREE).rev() {
                let c = _mm512_i32gather_pd::<8>(_mm256_add_epi32(row, _mm256_set1_epi32(k as i32)), table);
                p = _mm512_add_pd(_mm512_mul_pd(p, d), c);
            }
            r = _mm512_mask_blend_pd(in_taylor, r, p);
        }
        if in_series != 0 {
            let u = _mm512_mul_pd(t, t);
            let mut p = zero;
            for &c in ERF_SERIES[..SERIES_TERMS].iter().rev() {
                p = _mm512_add_pd(_mm512_mul_pd(p, u), _mm512_set1_pd(c));
            }
            let s = _mm512_div_pd(_mm512_mul_pd(_mm512_mul_pd(t, p), two), sqrt_pi);
            r = _mm512_mask_blend_pd(in_series, r, s);
        }
        let negative = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(y, zero);
        let r = _mm512_mask_xor_pd(r, negative, r, sign);
        let e = _mm512_cvtpd_ps(r);
        let mut g = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), x), _mm256_add_ps(_mm256_set1_ps(1.0), e));
        if let Some(gate) = gate {
            g = _mm256_mul_ps(g, _mm256_loadu_ps(gate.as_ptr().add(i)));
        }
        _mm256_storeu_ps(a.as_mut_ptr().add(i), g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row form gives the scalar form's bits on every tier: every seam of the Taylor intervals and its
    /// neighbours, the series' range and its end, 4 and past it, zeros, infinities, NaN,
    /// subnormals, and a dense sweep, each with and without a gate.
    #[test]
    fn the_row_form_gives_the_scalar_bits() {
        let mut xs: Vec<f32> = vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40, -1e-40, f32::MIN_POSITIVE, 1e30, -1e30];
        let root2 = std::f32::consts::SQRT_2;
        for k in 0..=40 {
            // erf's argument is x / √2: its seams k/8 sit at x = k √2 / 8
            let seam = k as f32 / 8.0 * root2;
            for ulps in -3i32..=3 {
                let v = f32::from_bits((seam.to_bits() as i32 + ulps).max(0) as u32);
                xs.extend([v, -v]);
            }
        }
        xs.extend((0..20_000).map(|i| -9.0 + 18.0 * i as f32 / 20_000.0));
        xs.push(0.3); // an odd length: the scalar tail too
        let gate: Vec<f32> = (0..xs.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let want: Vec<f32> = xs.iter().map(|&x| gelu_erf(x)).collect();
        let want_gated: Vec<f32> = xs.iter().zip(&gate).map(|(&x, &g)| gelu_erf(x) * g).collect();
        for tier in Isa::available() {
            let mut row = xs.clone();
            gelu_erf_row(tier, &mut row, None);
            assert_eq!(bits(&row), bits(&want), "{tier:?}");
            let mut row = xs.clone();
            gelu_erf_row(tier, &mut row, Some(&gate));
            assert_eq!(bits(&row), bits(&want_gated), "{tier:?}, gated");
        }
    }
}
