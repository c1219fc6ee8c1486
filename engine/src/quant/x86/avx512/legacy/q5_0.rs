//! Q5_0 weights dotted with Q8_0 activations: one activation row, or several at once (the
//! batched matmul of decoding many sequences together).
//!
//! A group of four blocks is held as two vectors: the first has elements 0..16 of each block
//! (one block per 128-bit lane), the second elements 16..32. One `vpdpbusd` on each adds
//! eight products of one block into every 32-bit lane, so a block's scale covers four lanes
//! and a group takes one conversion, one scale product and one fused multiply-add per
//! activation row: half the float work of two blocks per vector, which is what bounds the
//! loop once eight activation rows share each unpacked weight group. The integer sums are
//! exact (activations as unsigned `y + 128`, weights as signed `q - 16`, and `-128 Σ (q - 16)`
//! taken back out), and the single-row and the several-row kernels run the same float steps in
//! the same order, so they give the same bits.

use core::arch::x86_64::*;

use super::load128;
use crate::quant::x86::avx512::rows_shape;
use crate::quant::x86::common::{le16, le32, Q5_0, Q8_0};

/// Activation rows per pass: their accumulators stay in registers, and a batch of eight (the
/// default number of parallel sequences) unpacks each weight group once.
const ROWS: usize = 8;

/// The f16 `d` of four consecutive blocks of `bytes` bytes, packed low first.
#[inline]
unsafe fn halves(p: *const u8, bytes: usize) -> u64 {
    le16(p) | le16(p.add(bytes)) << 16 | le16(p.add(2 * bytes)) << 32 | le16(p.add(3 * bytes)) << 48
}

/// Group `g` of the row of `nb` blocks of `bytes` bytes at `p`: in place when whole; the last,
/// partial group is copied into `tail` (zero beyond the copy), as the single-row kernels read it.
#[inline]
unsafe fn group_at(p: *const u8, g: usize, nb: usize, bytes: usize, tail: &mut [u8]) -> *const u8 {
    let (start, rest) = (p.add(g * 4 * bytes), nb - 4 * g);
    if rest >= 4 {
        return start;
    }
    ::core::ptr::copy_nonoverlapping(start, tail.as_mut_ptr(), rest * bytes);
    tail.as_ptr()
}

/// The 16 bytes at `p + k * step` in 128-bit lane `k`, for the four lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn lanes4(p: *const u8, step: usize) -> __m512i {
    let v = _mm512_castsi128_si512(load128(p));
    let v = _mm512_inserti32x4::<1>(v, load128(p.add(step)));
    let v = _mm512_inserti32x4::<2>(v, load128(p.add(2 * step)));
    _mm512_inserti32x4::<3>(v, load128(p.add(3 * step)))
}

/// The four packed f16 of `h` (low first) as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn widen4(h: u64) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi64_si128(h as i64))
}

/// Value `k` of `d` in lanes `4k..4k + 4`: each block's scale over its four lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn spread4(d: __m128) -> __m512 {
    _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_castps128_ps512(d))
}

/// Four weight blocks unpacked: the signed quants `q - 16` of elements 0..16 (`lo`) and
/// 16..32 (`hi`) of each block, and `-128 Σ (q - 16)` over each lane of both, which turns the
/// sums with unsigned activations `y + 128` into `Σ y (q - 16)`.
struct WeightGroup {
    lo: __m512i,
    hi: __m512i,
    minus_128_sums: __m512i,
}

/// The group of four Q5_0 blocks at `x`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn weight_group(x: *const u8) -> WeightGroup {
    let qs = lanes4(x.add(6), Q5_0);
    let nibble = _mm512_set1_epi8(0x0F);
    let lo = _mm512_and_si512(qs, nibble);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(qs), nibble);
    // bit i of a block's `qh` is the fifth bit of element i: the low 16 bits go with `lo`
    let (mut bits_lo, mut bits_hi) = (0u64, 0u64);
    for k in 0..4 {
        let qh = le32(x.add(k * Q5_0 + 2));
        bits_lo |= (qh & 0xFFFF) << (16 * k);
        bits_hi |= (qh >> 16) << (16 * k);
    }
    // q - 16 is the nibble where the fifth bit is set, the nibble less 16 where it is clear
    let sixteen = _mm512_set1_epi8(16);
    let lo = _mm512_mask_sub_epi8(lo, !bits_lo, lo, sixteen);
    let hi = _mm512_mask_sub_epi8(hi, !bits_hi, hi, sixteen);
    let (zero, k128) = (_mm512_setzero_si512(), _mm512_set1_epi8(-128));
    let sums_128 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, k128, lo), k128, hi);
    WeightGroup { lo, hi, minus_128_sums: _mm512_sub_epi32(zero, sums_128) }
}

/// Four Q8_0 activation blocks at `y` laid out as the weights: quants `y + 128` of elements
/// 0..16 and 16..32 of each block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn activation_group(y: *const u8) -> (__m512i, __m512i) {
    let bias = _mm512_set1_epi8(-128);
    (_mm512_xor_si512(lanes4(y.add(2), Q8_0), bias), _mm512_xor_si512(lanes4(y.add(18), Q8_0), bias))
}

/// `Σ y (q - 16)` over the eight elements of each lane, exactly.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_sums(w: &WeightGroup, a_lo: __m512i, a_hi: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(w.minus_128_sums, a_lo, w.lo), a_hi, w.hi)
}

/// One Q5_0 row of `nb` blocks at `w` dotted with one Q8_0 row at `a`. A row's last, partial
/// group is read from zeroed copies (zero blocks add exactly nothing).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn dot_q5_0(w: *const u8, a: *const u8, nb: usize) -> f32 {
    // even groups into one accumulator, odd ones into the other (two independent chains)
    let (mut even, mut odd) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let (mut wt, mut at) = ([0u8; 4 * Q5_0], [0u8; 4 * Q8_0]);
    for g in 0..nb.div_ceil(4) {
        let (x, y) = (group_at(w, g, nb, Q5_0, &mut wt), group_at(a, g, nb, Q8_0, &mut at));
        let weights = weight_group(x);
        let (a_lo, a_hi) = activation_group(y);
        let d = spread4(_mm_mul_ps(widen4(halves(x, Q5_0)), widen4(halves(y, Q8_0))));
        let sums = _mm512_cvtepi32_ps(group_sums(&weights, a_lo, a_hi));
        if g % 2 == 0 {
            even = _mm512_fmadd_ps(sums, d, even);
        } else {
            odd = _mm512_fmadd_ps(sums, d, odd);
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(even, odd))
}

/// One activation row's group, made ready once per call for every weight row.
#[derive(Clone, Copy)]
struct PreparedGroup {
    lo: __m512i,
    hi: __m512i,
    /// The four blocks' `d`, each over its four lanes.
    d: __m512,
}

/// Appends the prepared groups of the Q8_0 activation row of `nb` blocks at `a` to `out`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn prepare_row(a: *const u8, nb: usize, out: &mut Vec<PreparedGroup>) {
    let mut tail = [0u8; 4 * Q8_0];
    for g in 0..nb.div_ceil(4) {
        let y = group_at(a, g, nb, Q8_0, &mut tail);
        let (lo, hi) = activation_group(y);
        out.push(PreparedGroup { lo, hi, d: spread4(widen4(halves(y, Q8_0))) });
    }
}

/// Adds a weight group times activation row `r`'s group (`prep[r * groups]`) into `acc[r]`.
#[inline(always)]
unsafe fn add_group<const R: usize>(acc: &mut [__m512; R], w: &WeightGroup, dw: __m512, prep: &[PreparedGroup], groups: usize) {
    for (r, acc) in acc.iter_mut().enumerate() {
        let p = &prep[r * groups];
        let sums = _mm512_cvtepi32_ps(group_sums(w, p.lo, p.hi));
        *acc = _mm512_fmadd_ps(sums, _mm512_mul_ps(dw, p.d), *acc);
    }
}

/// `out[r * n_w + i]` = Q5_0 weight row `i` (of `n_w` rows of `nb` blocks at `w`) dotted with
/// the `R` activation rows whose groups `prep` holds (row after row): the steps of
/// [`dot_q5_0`], each weight group unpacked once for the `R` rows. The scale product is
/// taken lane by lane from the spread `d`s, the same products as the single-row kernel's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_prepared<const R: usize>(w: *const u8, n_w: usize, nb: usize, prep: &[PreparedGroup], out: &mut [f32]) {
    let groups = nb.div_ceil(4);
    for i in 0..n_w {
        let row = w.add(i * nb * Q5_0);
        let (mut even, mut odd) = ([_mm512_setzero_ps(); R], [_mm512_setzero_ps(); R]);
        let mut wt = [0u8; 4 * Q5_0];
        for g in 0..groups {
            let x = group_at(row, g, nb, Q5_0, &mut wt);
            let weights = weight_group(x);
            let dw = spread4(widen4(halves(x, Q5_0)));
            // one branch per group, so that each accumulator array stays in registers
            let group = &prep[g..];
            if g % 2 == 0 {
                add_group(&mut even, &weights, dw, group, groups);
            } else {
                add_group(&mut odd, &weights, dw, group, groups);
            }
        }
        for (r, (even, odd)) in even.into_iter().zip(odd).enumerate() {
            out[r * n_w + i] = _mm512_reduce_add_ps(_mm512_add_ps(even, odd));
        }
    }
}

/// `out[b * n_w + i]` = Q5_0 weight row `i` of `w` dotted with activation row `b` of `acts`
/// (rows of `stride` bytes); eight activation rows are prepared at a time, once for all the
/// weight rows.
pub(in crate::quant::x86::avx512) fn vec_dot_rows_q5_0(w: &[u8], acts: &[u8], stride: usize, out: &mut [f32]) {
    let (nb, n_w, batch) = rows_shape(w, Q5_0, acts, stride, Q8_0, out);
    let mut prep = Vec::with_capacity(ROWS * nb.div_ceil(4));
    for c in 0..batch.div_ceil(ROWS) {
        let rows = (batch - c * ROWS).min(ROWS);
        prep.clear();
        for r in 0..rows {
            // SAFETY: dispatch hands out this tier's kernels only after detecting every
            // feature they enable; `rows_shape` checked that activation row `c * ROWS + r`
            // holds `nb` blocks.
            unsafe { prepare_row(acts[(c * ROWS + r) * stride..].as_ptr(), nb, &mut prep) };
        }
        let (w, chunk) = (w.as_ptr(), &mut out[c * ROWS * n_w..(c * ROWS + rows) * n_w]);
        // SAFETY: as above; `w` holds `n_w` rows of `nb` blocks, `prep` the groups of
        // `rows` activation rows, and `chunk` their `rows * n_w` outputs.
        unsafe {
            match rows {
                8 => dot_prepared::<8>(w, n_w, nb, &prep, chunk),
                7 => dot_prepared::<7>(w, n_w, nb, &prep, chunk),
                6 => dot_prepared::<6>(w, n_w, nb, &prep, chunk),
                5 => dot_prepared::<5>(w, n_w, nb, &prep, chunk),
                4 => dot_prepared::<4>(w, n_w, nb, &prep, chunk),
                3 => dot_prepared::<3>(w, n_w, nb, &prep, chunk),
                2 => dot_prepared::<2>(w, n_w, nb, &prep, chunk),
                _ => dot_prepared::<1>(w, n_w, nb, &prep, chunk),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::quant::x86::avx512::check_rows_kernel;
    use crate::quant::GgmlType;

    /// Every result equals the single-row kernel's, bit for bit, for row lengths with and
    /// without a partial last group, and batches with and without a remainder.
    #[test]
    fn several_rows_give_the_single_row_bits() {
        check_rows_kernel(GgmlType::Q5_0, &[1, 3, 4, 7, 28, 33], &[1, 4, 5, 8, 11, 19], 7);
    }
}
