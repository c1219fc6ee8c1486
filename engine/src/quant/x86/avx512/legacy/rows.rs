//! Q5_0 and Q8_0 weight rows dotted with several activation rows at once (the batched matmul of
//! decoding many sequences together). A call takes a block of weight rows and prepares eight
//! activation rows once (quants as unsigned `y + 128`, scales spread over their lanes); every
//! weight row then runs over them, each weight group unpacked once for the eight. Q5_0 holds a
//! block pair of one row per vector, Q8_0 one block of a row pair (its single-row kernel chains
//! block after block). Every activation row goes through exactly the steps of the single-row
//! kernel, with the same exact integer block sums and the same scale products, so each result
//! has the same bits as the single-row kernels (`dot_q5_0`, `dot_q8_0`) on that row alone.

use core::arch::x86_64::*;

use super::super::rows_shape;
use super::{bytes2, fifth_bits2, load256, nibbles2, spread, Acc};
use crate::quant::x86::common::{hsum256, le16, Q5_0, Q8_0};

/// Activation rows per pass: eight rows' accumulators stay in registers, and a batch of eight
/// (the default number of parallel sequences) reads each weight row once.
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

/// One activation row's group of four blocks, made ready once per call for every weight row:
/// the quants as unsigned `y + 128` (two blocks per vector) and the blocks' `d` spread over the
/// lanes of their block pair (as the single-row kernel spreads its scale products).
#[derive(Clone, Copy)]
struct PreparedGroup {
    u: [__m512i; 2],
    d: [__m512; 2],
}

/// The four `d` of the halves `h` (low first), two blocks per vector, eight lanes each.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn spread_halves(h: u64) -> [__m512; 2] {
    let d = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi64x(0, h as i64)));
    [spread(d, 0, 1), spread(d, 2, 3)]
}

/// Appends the prepared groups of the activation row of `nb` blocks at `a` to `out` (the last,
/// partial group read from a zeroed copy, as the single-row kernels do).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn prepare_row(a: *const u8, nb: usize, out: &mut Vec<PreparedGroup>) {
    let bias = _mm512_set1_epi8(-128);
    let mut tail = [0u8; 4 * Q8_0];
    for g in 0..nb.div_ceil(4) {
        let y = group_at(a, g, nb, Q8_0, &mut tail);
        let y1 = y.add(2 * Q8_0);
        let u = [_mm512_xor_si512(bytes2(y.add(2), y.add(Q8_0 + 2)), bias), _mm512_xor_si512(bytes2(y1.add(2), y1.add(Q8_0 + 2)), bias)];
        out.push(PreparedGroup { u, d: spread_halves(halves(y, Q8_0)) });
    }
}

/// `-128 Σ s` over each 4-byte lane of the signed weight quants `s`: the start of every
/// activation row's `vpdpbusd` with `y + 128`, which then ends at `Σ y s` exactly (one
/// instruction per row and block pair, the correction computed once for all the rows).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn minus_128_sums(s: __m512i) -> __m512i {
    let zero = _mm512_setzero_si512();
    _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(-128), s))
}

/// `out[r * n_w + i]` = Q5_0 weight row `i` (of `n_w` rows of `nb` blocks at `w`) dotted with
/// the `R` activation rows whose groups `prep` holds (row after row). The weights are taken as
/// signed `q - 16`: `Σ (y + 128)(q - 16) - 128 Σ (q - 16)` is `Σ y (q - 16)` exactly, and its
/// second term depends on the weights alone. A block pair's scale is `d_w * d_a` per lane, the
/// single-row kernel's product.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q5_0_prepared<const R: usize>(w: *const u8, n_w: usize, nb: usize, prep: &[PreparedGroup], out: &mut [f32]) {
    let groups = nb.div_ceil(4);
    let sixteen = _mm512_set1_epi8(16);
    for i in 0..n_w {
        let row = w.add(i * nb * Q5_0);
        let mut acc: [Acc; R] = core::array::from_fn(|_| Acc::new());
        let mut wt = [0u8; 4 * Q5_0];
        for g in 0..groups {
            let x = group_at(row, g, nb, Q5_0, &mut wt);
            let x1 = x.add(2 * Q5_0);
            let s0 = _mm512_sub_epi8(fifth_bits2(nibbles2(x.add(6), x.add(Q5_0 + 6)), x.add(2), x.add(Q5_0 + 2)), sixteen);
            let s1 = _mm512_sub_epi8(fifth_bits2(nibbles2(x1.add(6), x1.add(Q5_0 + 6)), x1.add(2), x1.add(Q5_0 + 2)), sixteen);
            let (c0, c1) = (minus_128_sums(s0), minus_128_sums(s1));
            let dw = spread_halves(halves(x, Q5_0));
            for r in 0..R {
                let p = &prep[r * groups + g];
                acc[r].add(0, _mm512_dpbusd_epi32(c0, p.u[0], s0), _mm512_mul_ps(dw[0], p.d[0]));
                acc[r].add(1, _mm512_dpbusd_epi32(c1, p.u[1], s1), _mm512_mul_ps(dw[1], p.d[1]));
            }
        }
        for (r, acc) in acc.into_iter().enumerate() {
            out[r * n_w + i] = acc.sum();
        }
    }
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
                8 => dot_q5_0_prepared::<8>(w, n_w, nb, &prep, chunk),
                7 => dot_q5_0_prepared::<7>(w, n_w, nb, &prep, chunk),
                6 => dot_q5_0_prepared::<6>(w, n_w, nb, &prep, chunk),
                5 => dot_q5_0_prepared::<5>(w, n_w, nb, &prep, chunk),
                4 => dot_q5_0_prepared::<4>(w, n_w, nb, &prep, chunk),
                3 => dot_q5_0_prepared::<3>(w, n_w, nb, &prep, chunk),
                2 => dot_q5_0_prepared::<2>(w, n_w, nb, &prep, chunk),
                _ => dot_q5_0_prepared::<1>(w, n_w, nb, &prep, chunk),
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
        for ty in [GgmlType::Q5_0, GgmlType::Q8_0] {
            check_rows_kernel(ty, &[1, 3, 4, 7, 28, 33], &[1, 4, 5, 8, 11, 19], 7);
        }
    }
}
