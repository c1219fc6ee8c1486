//! The AVX-512 (VNNI) panel kernels (`x86/panel.rs` has the shared bodies): the integer dot
//! products of the legacy types by `vpdpbusd` (one instruction per 4 values of 8 rows), the
//! K-quant group scales by `vpdpwssd`, on 256-bit vectors like the tier's other kernels; and
//! Q8_0's tile of its own on 512-bit vectors, two activation rows to a vector.

use core::arch::x86_64::*;

use crate::quant::x86::panel::f32_at;
use crate::quant::GgmlType;

/// `init + Σ_k V_k · a[4k..4k+4]` by one `vpdpbusd` per vector (exact in i32), in two chains
/// (even and odd k): a one-row tile has no other row's chain to fill `vpdpbusd`'s latency with.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_legacy(v: &[__m256i; 8], a: *const u8, init: __m256i) -> __m256i {
    let (mut d0, mut d1) = (init, _mm256_setzero_si256());
    for (k, &v) in v.iter().enumerate() {
        if k % 2 == 0 {
            d0 = _mm256_dpbusd_epi32(d0, v, bcast4(a.add(4 * k)));
        } else {
            d1 = _mm256_dpbusd_epi32(d1, v, bcast4(a.add(4 * k)));
        }
    }
    _mm256_add_epi32(d0, d1)
}

/// The IQ4 types' levels go to `dot_levels` as unsigned bytes, level + 128 (1..=241): `vpdpbusd`
/// takes them as they are, exact in i32.
const IQ4_OFFSET: i32 = 128;

/// `init + Σ_k V_k · a[4k..4k+4]` for the IQ4 levels plus 128 (unsigned bytes) by `vpdpbusd`, in
/// two chains (even and odd k: half the dependent latency; the integer sums are exact).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_levels(v: &[__m256i; 8], a: *const u8, init: __m256i) -> __m256i {
    let (mut d0, mut d1) = (init, _mm256_setzero_si256());
    for (k, &v) in v.iter().enumerate() {
        if k % 2 == 0 {
            d0 = _mm256_dpbusd_epi32(d0, v, bcast4(a.add(4 * k)));
        } else {
            d1 = _mm256_dpbusd_epi32(d1, v, bcast4(a.add(4 * k)));
        }
    }
    _mm256_add_epi32(d0, d1)
}

/// `acc + Σ pairs s16 · s` by `vpdpwssd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn madd_acc(acc: __m256i, s16: __m256i, s: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, s16, s)
}

/// `acc + s · Σ_{k in range} V_k · a[4k..4k+4]`: one `vpdpbusd` chain in i32 (exact), then
/// `vpmulld` by the group scale `s32`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_scaled<const I16: usize>(
    acc: __m256i,
    v: &[__m256i; 8],
    a: *const u8,
    range: core::ops::Range<usize>,
    _s16: __m256i,
    s32: __m256i,
) -> __m256i {
    // two chains (even and odd k) halve the dependent latency; integer sums are exact
    let (mut d0, mut d1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for k in range {
        if k % 2 == 0 {
            d0 = _mm256_dpbusd_epi32(d0, v[k], bcast4(a.add(4 * k)));
        } else {
            d1 = _mm256_dpbusd_epi32(d1, v[k], bcast4(a.add(4 * k)));
        }
    }
    _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_add_epi32(d0, d1), s32))
}

/// Q8_0 in ggml's order (see the scalar reference): 8 chains per output, one per lane of 4
/// values. Two activation rows share each 512-bit vector (the low half one row's 8 outputs, the
/// high half the next row's), and each `V_k` is loaded, widened to both halves and split into
/// `|w|` and its sign once per block for all the rows; `|w| · sign(a, w)` by `vpdpbusd` (the
/// 4-value sums exact in i32, as every tier's).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_0_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
    // row pairs (a lone last row is both halves of its vector: the high half's sums unread)
    let pairs = R.div_ceil(2);
    let second = |p: usize| (2 * p + 1).min(R - 1);
    let mut acc = [[_mm512_setzero_ps(); 8]; 2];
    for b in 0..nb {
        let w = panel.add(b * block_bytes::Q8_0);
        prefetch_ahead(w, block_bytes::Q8_0);
        let dw = _mm512_castps256_ps512(f16x8(w.add(at::D)));
        let dw = _mm512_shuffle_f32x4::<0b01_00_01_00>(dw, dw);
        let mut mag = [_mm512_setzero_si512(); 8];
        let mut neg = [0u64; 8];
        for k in 0..8 {
            let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(w.add(at::LEGACY_QUANTS + 32 * k).cast()));
            mag[k] = _mm512_abs_epi8(v);
            neg[k] = _mm512_movepi8_mask(v);
        }
        for (p, acc) in acc.iter_mut().enumerate().take(pairs) {
            let a0 = acts.add(2 * p * stride + b * ACT_LEGACY_BYTES);
            let a1 = acts.add(second(p) * stride + b * ACT_LEGACY_BYTES);
            let da = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f32_at(a0)), _mm512_set1_ps(f32_at(a1)));
            let scale = _mm512_mul_ps(dw, da);
            for (k, acc) in acc.iter_mut().enumerate() {
                let x =
                    _mm512_mask_set1_epi32(_mm512_set1_epi32(i32_at(a0.add(LEGACY_QS + 4 * k))), 0xFF00, i32_at(a1.add(LEGACY_QS + 4 * k)));
                let x = _mm512_mask_sub_epi8(x, neg[k], _mm512_setzero_si512(), x);
                let isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), mag[k], x);
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, *acc);
            }
        }
    }
    for (p, acc) in acc.iter().enumerate().take(pairs) {
        let sum = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
            _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])),
        );
        _mm256_storeu_ps(out[2 * p].as_mut_ptr(), _mm512_castps512_ps256(sum));
        if 2 * p + 1 < R {
            _mm256_storeu_ps(out[2 * p + 1].as_mut_ptr(), _mm512_extractf32x8_ps::<1>(sum));
        }
    }
}

crate::quant::x86::panel::panel_kernels!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c");

#[cfg(test)]
mod tests {
    use crate::quant::panel::tests::{check_pairs, check_tier};
    use crate::quant::Isa;

    #[test]
    fn every_panel_kernel_gives_the_reference_bits() {
        check_tier(Isa::Avx512);
    }

    #[test]
    fn every_pair_kernel_gives_the_reference_bits() {
        check_pairs(Isa::Avx512);
    }
}
