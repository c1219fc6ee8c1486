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
