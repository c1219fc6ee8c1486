//! The AVX2 panel kernels (`x86/panel.rs` has the shared bodies): integer dot products by
//! `vpmaddubsw` (unsigned quants times signed activations, pairs in i16) and `vpmaddwd`.

use core::arch::x86_64::*;

use crate::quant::x86::panel::sum16;
use crate::quant::GgmlType;

/// `init + Σ_k V_k · a[4k..4k+4]` for quants below 32: four `vpmaddubsw` summed in i16 at a
/// time (at most 4 · 2 · 31 · 127 = 31496), then widened by `vpmaddwd` with ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_legacy(v: &[__m256i; 8], a: *const u8, init: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let lo = _mm256_madd_epi16(sum16(v, a, 0..4), ones);
    let hi = _mm256_madd_epi16(sum16(v, a, 4..8), ones);
    _mm256_add_epi32(init, _mm256_add_epi32(lo, hi))
}

/// The IQ4 types' levels go to `dot_levels` signed: an offset into unsigned bytes (up to 241)
/// would overflow `vpmaddubsw`'s i16 pairs.
const IQ4_OFFSET: i32 = 0;

/// `init + Σ_k V_k · a[4k..4k+4]` for the IQ4 levels as signed bytes (-127..=113):
/// `|v| · sign(a, v)` by `vpmaddubsw` (pairs at most 2 · 127 · 127), widened per vector by
/// `vpmaddwd` with ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_levels(v: &[__m256i; 8], a: *const u8, init: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let mut s = init;
    for (k, &v) in v.iter().enumerate() {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(bcast4(a.add(4 * k)), v));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    s
}

/// `acc + vpmaddwd(s16, s)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn madd_acc(acc: __m256i, s16: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(s16, s))
}

/// `acc + s · Σ_{k in range} V_k · a[4k..4k+4]`: `I16` vectors summed in i16 at a time (the
/// caller's bound keeps them in range), each sum widened and scaled by `vpmaddwd` with `s16`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_scaled<const I16: usize>(
    mut acc: __m256i,
    v: &[__m256i; 8],
    a: *const u8,
    range: core::ops::Range<usize>,
    s16: __m256i,
    _s32: __m256i,
) -> __m256i {
    let mut k = range.start;
    while k < range.end {
        let end = (k + I16).min(range.end);
        acc = madd_acc(acc, sum16(v, a, k..end), s16);
        k = end;
    }
    acc
}

/// Q8_0 in ggml's order (see the scalar reference): 8 chains per output, one per lane
/// of 4 values, as the lanes of 8 vectors (one per `V_k`, each holding the 8 weight
/// rows); `|w| · sign(a, w)` by `vpmaddubsw` (at most 2 · 128 · 127 in i16), widened at
/// once. An activation row at a time, so its 8 accumulators stay in registers.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
    let ones = _mm256_set1_epi16(1);
    for (r, out) in out.iter_mut().enumerate().take(R) {
        let mut acc = [_mm256_setzero_ps(); 8];
        for b in 0..nb {
            let w = panel.add(b * block_bytes::Q8_0);
            prefetch_ahead(w, block_bytes::Q8_0);
            let a = acts.add(r * stride + b * ACT_LEGACY_BYTES);
            let scale = _mm256_mul_ps(f16x8(w.add(at::D)), f32_splat(a));
            for (k, acc) in acc.iter_mut().enumerate() {
                let v = _mm256_loadu_si256(w.add(at::LEGACY_QUANTS + 32 * k).cast());
                let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(bcast4(a.add(LEGACY_QS + 4 * k)), v));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), scale, *acc);
            }
        }
        let sum = _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
            _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])),
        );
        _mm256_storeu_ps(out.as_mut_ptr(), sum);
    }
}

crate::quant::x86::panel::panel_kernels!("avx2,fma,f16c");

#[cfg(test)]
mod tests {
    use crate::quant::panel::tests::check_tier;
    use crate::quant::Isa;

    #[test]
    fn every_panel_kernel_gives_the_reference_bits() {
        check_tier(Isa::Avx2);
    }
}
