//! Q5_0 and Q8_0 weight rows dotted with several activation rows at once (the batched matmul of
//! decoding many sequences together): each group of four weight blocks is unpacked once and
//! then dotted with up to four activation rows. Every activation row gets its own accumulator
//! that goes through exactly the steps of the single-row kernel with the same exact integer
//! block sums, so each result has the same bits as the single-row kernels (`dot_q5_0`,
//! `dot_q8_0`) on that row alone. Q5_0's integer sums are formed with the weight-only offset
//! term shared by the rows (see `group_q5_0_xn`).

use core::arch::x86_64::*;

use super::{bytes2, fifth_bits2, load256, nibbles2, scales_from_halves, Acc};
use crate::quant::x86::common::{le16, Chain, Q5_0, Q8_0};

/// Activation rows per pass: four accumulators of two vectors stay in registers.
const ROWS: usize = 4;

/// The f16 `d` of four consecutive blocks of `bytes` bytes, packed low first.
#[inline]
unsafe fn halves(p: *const u8, bytes: usize) -> u64 {
    le16(p) | le16(p.add(bytes)) << 16 | le16(p.add(2 * bytes)) << 32 | le16(p.add(3 * bytes)) << 48
}

/// Adds group-sized (four-block) products of one weight group at `x` and the groups at `ys`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_q5_0_xn<const R: usize>(x: *const u8, ys: &[*const u8; R], acc: &mut [Acc; R]) {
    let hx = halves(x, Q5_0);
    let x1 = x.add(2 * Q5_0);
    // The weights as signed `q - 16` and the activations as unsigned `y + 128`:
    // `Σ (y + 128)(q - 16) - 128 Σ (q - 16)` is `Σ y (q - 16)` exactly (what `dot_off` gives),
    // and its second term depends on the weights alone, so it is computed once for all rows.
    let (sixteen, bias) = (_mm512_set1_epi8(16), _mm512_set1_epi8(-128));
    let s0 = _mm512_sub_epi8(fifth_bits2(nibbles2(x.add(6), x.add(Q5_0 + 6)), x.add(2), x.add(Q5_0 + 2)), sixteen);
    let s1 = _mm512_sub_epi8(fifth_bits2(nibbles2(x1.add(6), x1.add(Q5_0 + 6)), x1.add(2), x1.add(Q5_0 + 2)), sixteen);
    let zero = _mm512_setzero_si512();
    let (c0, c1) = (_mm512_dpbusd_epi32(zero, bias, s0), _mm512_dpbusd_epi32(zero, bias, s1));
    for r in 0..R {
        let (y, y1) = (ys[r], ys[r].add(2 * Q8_0));
        let sc = scales_from_halves(hx, halves(y, Q8_0));
        let u0 = _mm512_xor_si512(bytes2(y.add(2), y.add(Q8_0 + 2)), bias);
        let u1 = _mm512_xor_si512(bytes2(y1.add(2), y1.add(Q8_0 + 2)), bias);
        acc[r].add(0, _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u0, s0), c0), sc.0);
        acc[r].add(1, _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u1, s1), c1), sc.1);
    }
}

/// The same for Q8_0 weights (the single-row kernel's chained accumulator, block by block).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_q8_0_xn<const R: usize>(x: *const u8, ys: &[*const u8; R], acc: &mut [Chain; R]) {
    let hx = halves(x, Q8_0);
    let q: [__m256i; 4] = core::array::from_fn(|k| load256(x.add(k * Q8_0 + 2)));
    let magnitude: [__m256i; 4] = core::array::from_fn(|k| _mm256_sign_epi8(q[k], q[k]));
    for r in 0..R {
        let y = ys[r];
        let v = _mm256_cvtph_ps(_mm_set_epi64x(halves(y, Q8_0) as i64, hx as i64));
        let d = _mm256_castps128_ps256(_mm_mul_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)));
        for k in 0..4 {
            let v = load256(y.add(k * Q8_0 + 2));
            let sumi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), magnitude[k], _mm256_sign_epi8(v, q[k]));
            acc[r].add(sumi, _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(k as i32)));
        }
    }
}

/// Defines `$name::<R>(w, a, stride, nb, out)`: `out[r]` = the row of `nb` blocks at `w` dotted
/// with the row at `a + r * stride`, group by group through `$group`; the last, partial group
/// is copied into zeroed buffers, as the single-row kernels do.
macro_rules! rows_kernel {
    ($name:ident => $group:ident, $acc:ident, $wb:expr) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name<const R: usize>(w: *const u8, a: *const u8, stride: usize, nb: usize, out: &mut [f32]) {
            let mut acc: [$acc; R] = core::array::from_fn(|_| $acc::new());
            let full = nb / 4;
            for g in 0..full {
                let ys: [*const u8; R] = core::array::from_fn(|r| a.add(r * stride + g * 4 * Q8_0));
                $group(w.add(g * 4 * $wb), &ys, &mut acc);
            }
            let rest = nb - 4 * full;
            if rest > 0 {
                let mut wt = [0u8; 4 * $wb];
                let mut at = [[0u8; 4 * Q8_0]; R];
                ::core::ptr::copy_nonoverlapping(w.add(full * 4 * $wb), wt.as_mut_ptr(), rest * $wb);
                for (r, t) in at.iter_mut().enumerate() {
                    ::core::ptr::copy_nonoverlapping(a.add(r * stride + full * 4 * Q8_0), t.as_mut_ptr(), rest * Q8_0);
                }
                let ys: [*const u8; R] = core::array::from_fn(|r| at[r].as_ptr());
                $group(wt.as_ptr(), &ys, &mut acc);
            }
            for (o, acc) in out.iter_mut().zip(acc) {
                *o = acc.sum();
            }
        }
    };
}

rows_kernel!(dot_q5_0_xn => group_q5_0_xn, Acc, Q5_0);
rows_kernel!(dot_q8_0_xn => group_q8_0_xn, Chain, Q8_0);

macro_rules! rows_entry {
    ($name:ident => $xn:ident, $wb:expr) => {
        /// `out[r]` = the weight row `w` dotted with activation row `r` of `acts` (rows of
        /// `stride` bytes), four rows per pass and the remaining one to three in a last pass.
        pub(in crate::quant::x86::avx512) fn $name(w: &[u8], acts: &[u8], stride: usize, out: &mut [f32]) {
            let nb = crate::quant::x86::common::blocks(w.len(), $wb, stride, Q8_0);
            assert_eq!(acts.len(), out.len() * stride, "{} activation bytes for {} rows of {stride}", acts.len(), out.len());
            for (chunk, rows) in out.chunks_mut(ROWS).zip(acts.chunks(ROWS * stride)) {
                let (w, a) = (w.as_ptr(), rows.as_ptr());
                // SAFETY: dispatch hands out this tier's kernels only after detecting every
                // feature they enable; `blocks` checked that the weight row and each `stride`
                // activation row hold `nb` whole blocks, and `rows` holds one per output.
                unsafe {
                    match chunk.len() {
                        4 => $xn::<4>(w, a, stride, nb, chunk),
                        3 => $xn::<3>(w, a, stride, nb, chunk),
                        2 => $xn::<2>(w, a, stride, nb, chunk),
                        _ => $xn::<1>(w, a, stride, nb, chunk),
                    }
                }
            }
        }
    };
}

rows_entry!(vec_dot_rows_q5_0 => dot_q5_0_xn, Q5_0);
rows_entry!(vec_dot_rows_q8_0 => dot_q8_0_xn, Q8_0);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{ops_for, GgmlType, Isa};

    /// Every result equals the single-row kernel's, bit for bit, for row lengths with and without
    /// a partial last group and batch sizes with and without a remainder.
    #[test]
    fn several_rows_give_the_single_row_bits() {
        if !Isa::Avx512.is_available() {
            return;
        }
        for (ty, rows_fn) in [(GgmlType::Q5_0, vec_dot_rows_q5_0 as fn(&[u8], &[u8], usize, &mut [f32])), (GgmlType::Q8_0, vec_dot_rows_q8_0)] {
            let ops = ops_for(ty, Isa::Avx512).unwrap();
            let act = ops_for(GgmlType::Q8_0, Isa::Avx512).unwrap();
            let mut seed = 7u32;
            let mut next = move || {
                seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            };
            for nb in [1usize, 3, 4, 7, 28, 33] {
                let n = nb * 32;
                let w_vals: Vec<f32> = (0..n).map(|_| next()).collect();
                let mut w = vec![0u8; ty.row_bytes(n).unwrap()];
                (ops.quantize)(&w_vals, &mut w);
                for batch in [1usize, 4, 5, 11] {
                    let stride = GgmlType::Q8_0.row_bytes(n).unwrap();
                    let mut acts = vec![0u8; batch * stride];
                    for row in acts.chunks_exact_mut(stride) {
                        let vals: Vec<f32> = (0..n).map(|_| next() * 4.0).collect();
                        (act.quantize_activations)(&vals, row);
                    }
                    let mut out = vec![0.0f32; batch];
                    rows_fn(&w, &acts, stride, &mut out);
                    for (b, row) in acts.chunks_exact(stride).enumerate() {
                        assert_eq!(out[b].to_bits(), (ops.vec_dot)(&w, row).to_bits(), "{ty} nb={nb} batch={batch} row {b}");
                    }
                }
            }
        }
    }
}
