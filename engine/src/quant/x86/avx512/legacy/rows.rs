//! Q8_0 weight rows dotted with several activation rows at once (the batched matmul of
//! decoding many sequences together). A call prepares eight activation rows once (quants as
//! unsigned `y + 128`, scales spread over their lanes); every weight row then runs over them.
//! The single-row kernel adds block after block into one chain of eight lanes per row, so a
//! 512-bit vector holds one block of a pair of activation rows. Every activation row goes
//! through exactly the steps of the single-row kernel, with the same exact integer block sums
//! and the same scale products, so each result has the same bits as `dot_q8_0` on that row
//! alone. (Q5_0 has its own file, `q5_0`.)

use core::arch::x86_64::*;

use super::super::rows_shape;
use super::{bytes2, load256};
use crate::quant::x86::common::{hsum256, le16, Q8_0};

/// Activation rows per pass: eight rows' accumulators stay in registers, and a batch of eight
/// (the default number of parallel sequences) reads each weight row once.
const ROWS: usize = 8;

/// `-128 Σ s` over each 4-byte lane of the signed weight quants `s`: the start of every
/// activation row's `vpdpbusd` with `y + 128`, which then ends at `Σ y s` exactly (one
/// instruction per row and block pair, the correction computed once for all the rows).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn minus_128_sums(s: __m512i) -> __m512i {
    let zero = _mm512_setzero_si512();
    _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(-128), s))
}

/// Two activation rows' Q8_0 block `k`, side by side: the quants as unsigned `y + 128` (row A
/// in the low 256 bits, row B in the high), and each row's `d` over its eight lanes.
#[derive(Clone, Copy)]
struct PairBlock {
    u: __m512i,
    d: __m512,
}

/// Appends the blocks of activation rows `a` and `b` (`b` absent: zero blocks) to `out`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn prepare_pair(a: *const u8, b: Option<*const u8>, nb: usize, out: &mut Vec<PairBlock>) {
    let bias = _mm512_set1_epi8(-128);
    let zero_block = [0u8; Q8_0];
    let f16 = |p: *const u8| _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(le16(p) as i32)));
    for k in 0..nb {
        let ya = a.add(k * Q8_0);
        let yb = b.map_or(zero_block.as_ptr(), |b| b.add(k * Q8_0));
        let u = _mm512_xor_si512(bytes2(ya.add(2), yb.add(2)), bias);
        let d = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(_mm256_set1_ps(f16(ya))), _mm256_set1_ps(f16(yb)));
        out.push(PairBlock { u, d });
    }
}

/// `out[r * n_w + i]` = Q8_0 weight row `i` (of `n_w` rows of `nb` blocks at `w`) dotted with
/// activation row `r < rows`, the rows prepared in `P` pairs (`prep[p * nb + k]`).
///
/// The single-row kernel adds block after block into one chain of eight lanes per row, so the
/// 512-bit vectors hold two rows' chains rather than two blocks of one row: each weight block is
/// broadcast to both halves, and one `vpdpbusd`, one scale product and one fused multiply-add
/// advance both rows by a block, in block order. The weights are taken as they are (signed):
/// `Σ (y + 128) q - 128 Σ q` is `Σ y q` exactly.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q8_0_pairs<const P: usize>(w: *const u8, n_w: usize, nb: usize, prep: &[PairBlock], rows: usize, out: &mut [f32]) {
    for i in 0..n_w {
        let row = w.add(i * nb * Q8_0);
        let mut acc = [_mm512_setzero_ps(); P];
        for k in 0..nb {
            let x = row.add(k * Q8_0);
            let s = _mm512_broadcast_i64x4(load256(x.add(2)));
            let c = minus_128_sums(s);
            let dw = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(le16(x) as i32)));
            for p in 0..P {
                let pb = &prep[p * nb + k];
                let sums = _mm512_dpbusd_epi32(c, pb.u, s);
                acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, pb.d), _mm512_cvtepi32_ps(sums), acc[p]);
            }
        }
        for (p, acc) in acc.into_iter().enumerate() {
            out[2 * p * n_w + i] = hsum256(_mm512_castps512_ps256(acc));
            if 2 * p + 1 < rows {
                out[(2 * p + 1) * n_w + i] = hsum256(_mm512_extractf32x8_ps::<1>(acc));
            }
        }
    }
}

/// `out[b * n_w + i]` = Q8_0 weight row `i` of `w` dotted with activation row `b` of `acts`;
/// eight activation rows (four pairs) are prepared at a time, once for all the weight rows.
pub(in crate::quant::x86::avx512) fn vec_dot_rows_q8_0(w: &[u8], acts: &[u8], stride: usize, out: &mut [f32]) {
    let (nb, n_w, batch) = rows_shape(w, Q8_0, acts, stride, Q8_0, out);
    let mut prep = Vec::with_capacity(ROWS / 2 * nb);
    for c in 0..batch.div_ceil(ROWS) {
        let rows = (batch - c * ROWS).min(ROWS);
        prep.clear();
        for p in 0..rows.div_ceil(2) {
            let (ra, rb) = (c * ROWS + 2 * p, c * ROWS + 2 * p + 1);
            let b = (2 * p + 1 < rows).then(|| acts[rb * stride..].as_ptr());
            // SAFETY: dispatch hands out this tier's kernels only after detecting every feature
            // they enable; `rows_shape` checked that activation rows `ra` and `rb` hold `nb` blocks.
            unsafe { prepare_pair(acts[ra * stride..].as_ptr(), b, nb, &mut prep) };
        }
        let (w, chunk) = (w.as_ptr(), &mut out[c * ROWS * n_w..(c * ROWS + rows) * n_w]);
        // SAFETY: as above; `w` holds `n_w` rows of `nb` blocks, `prep` the blocks of
        // `rows.div_ceil(2)` pairs, and `chunk` the `rows * n_w` outputs.
        unsafe {
            match rows.div_ceil(2) {
                4 => dot_q8_0_pairs::<4>(w, n_w, nb, &prep, rows, chunk),
                3 => dot_q8_0_pairs::<3>(w, n_w, nb, &prep, rows, chunk),
                2 => dot_q8_0_pairs::<2>(w, n_w, nb, &prep, rows, chunk),
                _ => dot_q8_0_pairs::<1>(w, n_w, nb, &prep, rows, chunk),
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
        check_rows_kernel(GgmlType::Q8_0, &[1, 3, 4, 7, 28, 33], &[1, 4, 5, 8, 11, 19], 7);
    }
}
