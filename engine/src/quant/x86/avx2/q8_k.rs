//! Q8_K activation quantization on AVX2 (every prompt row of a K-quant matmul goes through it):
//! the reference's bytes, 8 values at a time. The largest magnitude is an exact max (a value
//! that is NaN never wins, as in the reference's `>` scan), the element it came from is the
//! first with that magnitude, the products `iscale * v` are the same single multiplies, and
//! `vcvtps2dq` rounds halves to even like the reference's `nearest_int`.

use core::arch::x86_64::*;

use crate::quant::blocks::BlockQ8K;
use crate::quant::QK_K;

/// Quantizes `x` into the Q8_K blocks of `bytes`, as `k_quants::q8_k::quantize_row` does.
pub(crate) fn quantize_row(x: &[f32], bytes: &mut [u8]) {
    let blocks: &mut [BlockQ8K] = bytemuck::cast_slice_mut(bytes);
    assert_eq!(x.len(), blocks.len() * QK_K, "whole blocks");
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        // SAFETY: dispatch hands this out only on tiers whose features include AVX2, FMA and
        // F16C; `xb` holds the block's 256 values.
        unsafe { quantize_block(xb.as_ptr(), b) }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block(x: *const f32, b: &mut BlockQ8K) {
    let magnitude = |v: __m256| _mm256_andnot_ps(_mm256_set1_ps(-0.0), v);
    let mut m = _mm256_setzero_ps();
    for i in (0..QK_K).step_by(8) {
        // maxps returns its second operand when either is NaN: NaNs are skipped
        m = _mm256_max_ps(magnitude(_mm256_loadu_ps(x.add(i))), m);
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)));
    if amax == 0.0 {
        *b = bytemuck::Zeroable::zeroed();
        return;
    }
    let target = _mm256_set1_ps(amax);
    let mut first = 0;
    for i in (0..QK_K).step_by(8) {
        let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(magnitude(_mm256_loadu_ps(x.add(i))), target));
        if hits != 0 {
            first = i + hits.trailing_zeros() as usize;
            break;
        }
    }
    let iscale = -127.0f32 / *x.add(first);
    let scale = _mm256_set1_ps(iscale);
    let top = _mm256_set1_epi32(127);
    let ones = _mm256_set1_epi16(1);
    let qs = b.qs.as_mut_ptr();
    for g in 0..QK_K / 16 {
        // 16 values: two vectors of i32 quants, packed to bytes in order, and their sum
        let q: [__m256i; 2] = core::array::from_fn(|h| {
            let v = _mm256_mul_ps(_mm256_loadu_ps(x.add(16 * g + 8 * h)), scale);
            // a NaN product is 0 in the reference (its nearest_int), not vcvtps2dq's INT_MIN
            let v = _mm256_and_ps(v, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
            _mm256_min_epi32(_mm256_cvtps_epi32(v), top)
        });
        // packs work per 128-bit half: (q0 lo, q1 lo, q0 hi, q1 hi), put back in order
        let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q[0], q[1]));
        let bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256::<1>(words));
        _mm_storeu_si128(qs.add(16 * g).cast(), bytes);
        let s = _mm256_madd_epi16(words, ones);
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<1>(s));
        b.set_bsum(g, _mm_cvtsi128_si32(s) as i16);
    }
    b.d = (1.0 / iscale).to_le_bytes();
}

#[cfg(test)]
mod tests {
    use crate::quant::k_quants::q8_k;
    use crate::quant::Isa;

    /// Random rows, rows with ties for the largest magnitude, zeros, NaN and infinities: the
    /// reference's bytes.
    #[test]
    fn gives_the_reference_bytes() {
        if !Isa::Avx2.is_available() {
            return;
        }
        let mut s = 7u32;
        let mut next = move || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let mut rows: Vec<Vec<f32>> = (0..20).map(|i| (0..512).map(|_| next() * (i as f32 + 0.1) * 7.0).collect()).collect();
        rows.push(vec![0.0; 256]);
        let mut tie: Vec<f32> = (0..256).map(|i| (i % 7) as f32 * 0.25).collect();
        tie[9] = -3.0;
        tie[200] = 3.0;
        rows.push(tie);
        let mut odd: Vec<f32> = (0..256).map(|_| next()).collect();
        odd[3] = f32::NAN;
        odd[100] = 0.5 + 1.0 / 254.0; // a product that lands on a half
        rows.push(odd);
        let mut inf: Vec<f32> = (0..256).map(|_| next()).collect();
        inf[17] = f32::NEG_INFINITY;
        rows.push(inf);
        rows.push(vec![f32::NAN; 256]);
        for (i, x) in rows.iter().enumerate() {
            let n = x.len() / 256 * 292;
            let (mut want, mut got) = (vec![0u8; n], vec![0u8; n]);
            q8_k::quantize_row(x, &mut want);
            super::quantize_row(x, &mut got);
            assert_eq!(got, want, "row {i}");
        }
    }
}
