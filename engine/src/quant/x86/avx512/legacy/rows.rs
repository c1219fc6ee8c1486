//! Q5_0 and Q8_0 weight rows dotted with several activation rows at once (the batched matmul of
//! decoding many sequences together): each group of four weight blocks is unpacked once and
//! then dotted with four activation rows. Every activation row gets its own accumulator that
//! goes through exactly the steps of the single-row kernel, so each result has the same bits as
//! the single-row kernels (`dot_q5_0`, `dot_q8_0`) on that row alone.

use core::arch::x86_64::*;

use super::{bytes2, dot_off, fifth_bits2, load256, nibbles2, scales_from_halves, Acc};
use crate::quant::x86::common::{le16, Chain, Q5_0, Q8_0};

/// Activation rows per pass: four accumulators of two vectors stay in registers.
const ROWS: usize = 4;

/// The f16 `d` of four consecutive blocks of `bytes` bytes, packed low first.
#[inline]
unsafe fn halves(p: *const u8, bytes: usize) -> u64 {
    le16(p) | le16(p.add(bytes)) << 16 | le16(p.add(2 * bytes)) << 32 | le16(p.add(3 * bytes)) << 48
}

/// Group `g` of a row of `nb` blocks of `bytes` bytes at `p`: in place, or (the last, partial
/// group) copied into the zeroed `tail`, as the single-row kernels do.
#[inline]
unsafe fn group(p: *const u8, g: usize, nb: usize, bytes: usize, tail: &mut [u8]) -> *const u8 {
    let start = p.add(g * 4 * bytes);
    let rest = nb - 4 * g;
    if rest >= 4 {
        return start;
    }
    ::core::ptr::copy_nonoverlapping(start, tail.as_mut_ptr(), rest * bytes);
    tail.as_ptr()
}

/// `out[r] = dot_q5_0(w, a + r * stride, nb)` for the `R` rows `r`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q5_0_xn<const R: usize>(w: *const u8, a: *const u8, stride: usize, nb: usize, out: &mut [f32]) {
    let mut acc: [Acc; R] = core::array::from_fn(|_| Acc::new());
    let mut wt = [0u8; 4 * Q5_0];
    let mut at = [[0u8; 4 * Q8_0]; R];
    for g in 0..nb.div_ceil(4) {
        let x = group(w, g, nb, Q5_0, &mut wt);
        let hx = halves(x, Q5_0);
        let mut q = [_mm512_setzero_si512(); 2];
        for (k, q) in q.iter_mut().enumerate() {
            let x0 = x.add(2 * k * Q5_0);
            *q = fifth_bits2(nibbles2(x0.add(6), x0.add(Q5_0 + 6)), x0.add(2), x0.add(Q5_0 + 2));
        }
        for r in 0..R {
            let y = group(a.add(r * stride), g, nb, Q8_0, &mut at[r]);
            let sc = scales_from_halves(hx, halves(y, Q8_0));
            for (k, scale) in [sc.0, sc.1].into_iter().enumerate() {
                let y0 = y.add(2 * k * Q8_0);
                acc[r].add(k, dot_off(q[k], bytes2(y0.add(2), y0.add(Q8_0 + 2)), 16), scale);
            }
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = acc.sum();
    }
}

/// `out[r] = dot_q8_0(w, a + r * stride, nb)` for the `R` rows `r`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q8_0_xn<const R: usize>(w: *const u8, a: *const u8, stride: usize, nb: usize, out: &mut [f32]) {
    let mut acc: [Chain; R] = core::array::from_fn(|_| Chain::new());
    let mut wt = [0u8; 4 * Q8_0];
    let mut at = [[0u8; 4 * Q8_0]; R];
    for g in 0..nb.div_ceil(4) {
        let x = group(w, g, nb, Q8_0, &mut wt);
        let hx = halves(x, Q8_0);
        let mut q = [_mm256_setzero_si256(); 4];
        let mut magnitude = [_mm256_setzero_si256(); 4];
        for k in 0..4 {
            q[k] = load256(x.add(k * Q8_0 + 2));
            magnitude[k] = _mm256_sign_epi8(q[k], q[k]);
        }
        for r in 0..R {
            let y = group(a.add(r * stride), g, nb, Q8_0, &mut at[r]);
            let hy = halves(y, Q8_0);
            let v = _mm256_cvtph_ps(_mm_set_epi64x(hy as i64, hx as i64));
            let d = _mm256_castps128_ps256(_mm_mul_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)));
            for k in 0..4 {
                let v = load256(y.add(k * Q8_0 + 2));
                let sumi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), magnitude[k], _mm256_sign_epi8(v, q[k]));
                acc[r].add(sumi, _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(k as i32)));
            }
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = acc.sum();
    }
}

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
