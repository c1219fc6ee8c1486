//! The element-wise float kernels' tiers (`fma_variants!`) and ggml's polynomial exp: the
//! numbers the CPU backend's kernels and the sampler share.

/// The element-wise kernels written with `f32::mul_add` (attention, SiLU, rope, the softmax's
/// exp) run a copy compiled for the active tier: AVX-512 (16 lanes), AVX2 + FMA (8 lanes), or
/// plain. Every copy computes the same bits: each output element is its own chain of fused
/// multiply-adds, and every reduction is written out in a fixed order, so the vector width
/// changes only how many elements advance at once. Without the target features each
/// `mul_add` is a call to the C library's `fmaf` and no loop vectorises.
///
/// `fma_variants!` defines `$name(args..)`, which runs `$body(args..)` on the active tier, and
/// `$with(tier, args..)`, which runs the copy of `tier` (or of the best tier below it that the
/// CPU has): tests call every copy and compare their bits.
macro_rules! fma_variants {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident, $wvis:vis fn $with:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:ident
    ) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            $with($crate::quant::dispatch::Isa::active(), $($arg),*)
        }

        // the kernel's own arguments and the tier: a struct would only rename them
        #[allow(clippy::too_many_arguments)]
        $wvis fn $with(tier: $crate::quant::dispatch::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::quant::dispatch::Isa;
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
                unsafe fn with_avx512($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn with_fma($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if tier >= Isa::Avx512 && Isa::Avx512.is_available() {
                    // SAFETY: the CPU has AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C (checked just above).
                    return unsafe { with_avx512($($arg),*) };
                }
                if tier >= Isa::Avx2 && Isa::Avx2.is_available() {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { with_fma($($arg),*) };
                }
            }
            let _ = tier;
            $body($($arg),*)
        }
    };
}
pub(crate) use fma_variants;

/// exp(x) exactly as ggml's vectorised `ggml_v_expf` computes it (a degree-5 polynomial after
/// a round-to-nearest range reduction; within 1.5 ulp of the true value). ggml uses it for every
/// full SIMD chunk of SiLU and softmax, so bit-equal results need the same function.
#[inline(always)]
pub fn ggml_expf(x: f32) -> f32 {
    const SHIFT: f32 = 12582912.0; // 0x1.8p23: adding it rounds to an integer
    let c = f32::from_bits;
    let z = x.mul_add(c(0x3fb8_aa3b), SHIFT); // log2(e)
    let n = z - SHIFT;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x)); // ln 2, hi + lo
    let u = b * b;
    let j = c(0x3c07_2010).mul_add(b, c(0x3d2b_9f17)).mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)));
    let j = j.mul_add(u, c(0x3f7f_fff6).mul_add(b, 1.0));
    // j · 2ⁿ rounded once, as `vscalefps` does: the f64 product is exact. Branch-free, so that
    // loops over it vectorise; out-of-range `n` is replaced below.
    // (`n` is a whole number: clamped, then read out of the mantissa of `n + SHIFT`, where a
    // plain `as i32` would be a saturating conversion that does not vectorise)
    let k = ((n.clamp(-1022.0, 1023.0) + SHIFT).to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let two_n = f64::from_bits((k.wrapping_add(1023) as u64) << 52);
    let scaled = (f64::from(j) * two_n) as f32;
    if n.abs() > 192.0 {
        if n <= 0.0 {
            0.0
        } else {
            f32::INFINITY
        }
    } else {
        scaled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's AVX-512 `ggml_v_expf`, transcribed with the same intrinsics, on 16 lanes.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn ggml_v_expf_avx512(x: &[f32; 16]) -> [f32; 16] {
        use std::arch::x86_64::*;
        let c = |v: u32| _mm512_set1_ps(f32::from_bits(v));
        let x = _mm512_loadu_ps(x.as_ptr());
        let r = _mm512_set1_ps(12582912.0);
        let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), x));
        let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(_mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)), u, _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb))),
            u,
            _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        let res = _mm512_scalef_ps(j, n);
        let alt = _mm512_mask_blend_ps(
            _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps()),
            _mm512_set1_ps(f32::INFINITY),
            _mm512_setzero_ps(),
        );
        let mut out = [0.0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mask_blend_ps(d, res, alt));
        out
    }

    fn test_inputs() -> Vec<f32> {
        let mut xs = vec![0.0, -0.0, 1.0, -1.0, 88.0, 88.7, 89.0, -87.0, -100.0, -103.9, -104.5, -150.0, -300.0, 300.0];
        xs.extend([f32::NEG_INFINITY, f32::INFINITY, f32::MIN_POSITIVE, -1e-30]);
        let mut state = 0x2545_f491u32;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            xs.push((state as f32 / u32::MAX as f32) * 220.0 - 120.0);
        }
        xs
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn ggml_expf_is_bit_equal_to_ggml_avx512_code() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        for chunk in test_inputs().chunks_exact(16) {
            let lanes: [f32; 16] = chunk.try_into().unwrap();
            // SAFETY: the CPU has AVX-512 F (checked above).
            let want = unsafe { ggml_v_expf_avx512(&lanes) };
            for (&x, w) in lanes.iter().zip(want) {
                assert_eq!(ggml_expf(x).to_bits(), w.to_bits(), "exp({x:e}): {:e} vs {w:e}", ggml_expf(x));
            }
        }
    }

    #[test]
    fn ggml_expf_is_close_to_exp() {
        for x in test_inputs() {
            let (got, want) = (ggml_expf(x), f64::from(x).exp());
            if want > f64::from(f32::MAX) || want < 1e-37 {
                continue;
            }
            assert!(((f64::from(got) - want) / want).abs() < 3e-7, "exp({x}) = {got} vs {want}");
        }
        assert_eq!(ggml_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(ggml_expf(-200.0), 0.0);
        assert_eq!(ggml_expf(200.0), f32::INFINITY);
        assert!(ggml_expf(f32::NAN).is_nan());
    }
}
