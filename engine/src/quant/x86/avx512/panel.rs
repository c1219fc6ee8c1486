//! The AVX-512 (VNNI) panel kernels (`x86/panel.rs` has the shared bodies): the integer dot
//! products of the legacy types by `vpdpbusd` (one instruction per 4 values of 8 rows), the
//! K-quant group scales by `vpdpwssd`, on 256-bit vectors like the tier's other kernels.

use core::arch::x86_64::*;

use crate::quant::GgmlType;

/// `init + Σ_k V_k · a[4k..4k+4]` by one `vpdpbusd` per vector (exact in i32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_legacy(v: &[__m256i; 8], a: *const u8, init: __m256i) -> __m256i {
    let mut s = init;
    for (k, &v) in v.iter().enumerate() {
        s = _mm256_dpbusd_epi32(s, v, bcast4(a.add(4 * k)));
    }
    s
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

crate::quant::x86::panel::panel_kernels!("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c");

#[cfg(test)]
mod tests {
    use crate::quant::panel::tests::check_tier;
    use crate::quant::Isa;

    #[test]
    fn every_panel_kernel_gives_the_reference_bits() {
        check_tier(Isa::Avx512);
    }
}
