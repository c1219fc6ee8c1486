//! Shared pieces of the K-quant quantizers: ggml's rounding, the packed 6-bit scales of
//! Q4_K / Q5_K, and the per-group scale searches.
//!
//! The searches follow the algorithms of ggml's reference quantizers and evaluate every
//! floating-point expression in the same order (separate multiplies and adds, the same
//! accumulation order), so that `quantize_ref` reproduces `llama-quantize` (without an
//! importance matrix) byte for byte; the golden test checks that on real tensors.

use crate::quant::blocks::{f16_le, f16_le_from, BlockQ8K};
use crate::quant::QK_K;

/// Groups whose largest magnitude is below this are treated as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Rounds to the nearest integer, halves to even, the way ggml's `nearest_int` does: adding
/// 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. Meaningful for
/// |v| <= 2^22; larger or non-finite inputs give the same (meaningless) value ggml gets,
/// which matters only for byte-exactness on degenerate data.
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// Scale and min (both 6-bit) of group `j` (0..8) from the 12 packed bytes of Q4_K / Q5_K:
/// groups 0..4 keep them in the low 6 bits of bytes `j` and `j + 4`; groups 4..8 keep the low
/// 4 bits in a nibble of byte `j + 4` and the high 2 bits in the top bits of bytes `j - 4`
/// (scale) and `j` (min).
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Packs 8 scales and 8 mins (each < 64) into the layout [`scale_min_k4`] reads.
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = ls[j] | ((ls[j + 4] >> 4) << 6);
        s[j + 4] = lm[j] | ((lm[j + 4] >> 4) << 6);
        s[j + 8] = (ls[j + 4] & 0x0F) | ((lm[j + 4] & 0x0F) << 4);
    }
    s
}

/// Parameters of [`fit_scale_min`]: quants in `0..=nmax`; candidate inverse scales
/// `(nmax + rmin + rdelta * i) / (max - min)` for `i` in `0..=nstep`; error measured as the
/// weighted absolute (`use_mad`) or squared difference.
pub(crate) struct MinFit {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// Fits `x ≈ scale * l - the_min` with `l` in `0..=nmax` and `the_min >= 0` (ggml's
/// `make_qkx2_quants`): start from the min/max grid, then for each candidate inverse scale
/// round the quants and solve the weighted least-squares (scale, min) for them, keeping the
/// candidate with the smallest weighted error. Writes the quants to `l`, returns
/// `(scale, the_min)`. `x.len() <= 32`.
pub(crate) fn fit_scale_min(x: &[f32], w: &[f32], p: &MinFit, l: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    debug_assert!(n <= 32 && w.len() == n && l.len() >= n);
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = if x[i] < min { x[i] } else { min };
        max = if x[i] > max { x[i] } else { max };
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    // The offset only ever moves values up (the stored min is subtracted), so a group of
    // positive values keeps 0 as its lower end.
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let nmax = p.nmax as f32;
    let error = |scale: f32, min: f32, q: &[u8]| {
        let mut e = 0.0f32;
        for i in 0..n {
            let diff = scale * q[i] as f32 + min - x[i];
            e += w[i] * if p.use_mad { diff.abs() } else { diff * diff };
        }
        e
    };
    let iscale = nmax / (max - min);
    let mut scale = 1.0 / iscale;
    for i in 0..n {
        l[i] = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax) as u8;
    }
    let mut best = error(scale, min, l);

    let mut aux = [0u8; 32];
    for is in 0..=p.nstep {
        let iscale = (p.rmin + p.rdelta * is as f32 + nmax) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
            aux[i] = q as u8;
            let wl = w[i] * q as f32;
            sum_l += wl;
            sum_l2 += wl * q as f32;
            sum_xl += wl * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                // A positive offset is not representable: refit the scale alone.
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let e = error(this_scale, this_min, &aux[..n]);
            if e < best {
                l[..n].copy_from_slice(&aux[..n]);
                best = e;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The element of largest magnitude with its sign (the first one on ties), and that magnitude:
/// the anchor of every symmetric quantizer (Q4_0, Q5_0, Q3_K, Q6_K, Q8_K).
#[inline(always)]
pub(crate) fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Fits `x ≈ scale * l` with signed quants `l` in `-nmax..nmax` (ggml's `make_qx_quants` with
/// weights `x^2`): the largest magnitude maps to `-nmax`; 18 neighbouring inverse scales
/// `(nmax ± 0.1 k) / max` are tried and the one maximising the weighted fit `(Σwxl)^2 / Σwl^2`
/// kept, with its least-squares scale. Writes `l + nmax` to `l`, returns the scale.
pub(crate) fn fit_signed_scale(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let n = x.len();
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let iscale = -(nmax as f32) / max;
    for (li, &v) in l.iter_mut().zip(x) {
        *li = (quant(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&k| k != 0) {
        let iscale = -(nmax as f32 + 0.1f32 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        // Maximising (Σwxl)^2 / Σwl^2 minimises the weighted squared error at the best scale.
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &v) in l.iter_mut().zip(x) {
                *li = (quant(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Fits `x ≈ scale * l` with signed quants `l` in `-nmax..nmax` (ggml's `make_q3_quants`):
/// start from the largest magnitude mapped to `-nmax`, then up to 5 sweeps of coordinate
/// descent that move single quants to their best value for the current fit, accepting a move
/// when the weighted fit `(Σwxl)^2 / Σwl^2` (weights `x^2`) improves. Writes `l + nmax` to
/// `l`, returns the least-squares scale.
pub(crate) fn fit_signed_scale_descent(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let n = x.len();
    debug_assert!(n <= 32);
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut q = [0i32; 32];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        q[i] = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        let w = x[i] * x[i];
        sumlx += w * x[i] * q[i] as f32;
        suml2 += w * q[i] as f32 * q[i] as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..n {
            let w = x[i] * x[i];
            let mut slx = sumlx - w * x[i] * q[i] as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * q[i] as f32 * q[i] as f32;
                let new_q = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_q != q[i] {
                    slx += w * x[i] * new_q as f32;
                    sl2 += w * new_q as f32 * new_q as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        q[i] = new_q;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for i in 0..n {
        l[i] = (q[i] + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The common body of Q4_K and Q5_K: 8 groups of 32 with an unsigned 6-bit scale and min each.
pub(crate) struct ScaleMinBlock {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    /// Quants in element order, `0..=nmax`.
    pub q: [u8; QK_K],
}

/// Quantizes 256 values to `nmax + 1` levels per group of 32 (ggml's Q4_K / Q5_K reference):
/// fit each group's scale and min, quantize the 16 numbers to 6 bits against the largest of
/// each kind, then requantize every value against the scales as stored.
pub(crate) fn quantize_scale_min_block(x: &[f32], fit: &MinFit) -> ScaleMinBlock {
    debug_assert_eq!(x.len(), QK_K);
    let mut q = [0u8; QK_K];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for (j, xg) in x.chunks_exact(32).enumerate() {
        // Weights favour large values but never vanish: the group's RMS plus |x|.
        let mut sum_x2 = 0.0f32;
        for &v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut w = [0.0f32; 32];
        for (wi, &v) in w.iter_mut().zip(xg) {
            *wi = av_x + v.abs();
        }
        (scales[j], mins[j]) = fit_scale_min(xg, &w, fit, &mut q[32 * j..32 * j + 32]);
        max_scale = if scales[j] > max_scale { scales[j] } else { max_scale };
        max_min = if mins[j] > max_min { mins[j] } else { max_min };
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        // The byte conversion wraps like ggml's `uint8_t` store before the clamp.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let b = ScaleMinBlock { d: f16_le_from(max_scale / 63.0), dmin: f16_le_from(max_min / 63.0), scales: pack_scale_min_k4(&ls, &lm), q };
    requantize_scale_min(x, b, fit.nmax)
}

/// Requantizes every value against the group scale and min as stored (rounded to 6 bits and
/// the super-scales to f16), which is what dequantization will use. A group whose scale
/// rounded to zero keeps the quants of its fit (they multiply zero).
fn requantize_scale_min(x: &[f32], mut b: ScaleMinBlock, nmax: i32) -> ScaleMinBlock {
    let (d_all, dmin_all) = (f16_le(b.d), f16_le(b.dmin));
    for (j, xg) in x.chunks_exact(32).enumerate() {
        let (sc, m) = scale_min_k4(j, &b.scales);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * m as f32;
        for (qi, &v) in b.q[32 * j..32 * j + 32].iter_mut().zip(xg) {
            *qi = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
    b
}

/// Dequantizes a Q4_K / Q5_K body given its quants in element order, as ggml does:
/// `d1 = d * sc`, `m1 = dmin * m`, `y = d1 * q - m1` (separate multiply and subtract).
#[inline(always)]
pub(crate) fn dequantize_scale_min(d: [u8; 2], dmin: [u8; 2], s: &[u8; 12], q: &[u8; QK_K], y: &mut [f32]) {
    let (d, dmin) = (f16_le(d), f16_le(dmin));
    for (j, (yg, qg)) in y.chunks_exact_mut(32).zip(q.chunks_exact(32)).enumerate() {
        let (sc, m) = scale_min_k4(j, s);
        let d1 = d * sc as f32;
        let m1 = dmin * m as f32;
        for (yi, &qi) in yg.iter_mut().zip(qg) {
            *yi = d1 * qi as f32 - m1;
        }
    }
}

/// Dot product of a Q4_K / Q5_K body (quants in element order) with a Q8_K block: exact
/// integer sums per group times the 6-bit scales; the mins multiply the activation sums of
/// each group (two 16-value `bsums` per group of 32), so they cost no per-element work.
#[inline(always)]
pub(crate) fn dot_scale_min(d: [u8; 2], dmin: [u8; 2], s: &[u8; 12], q: &[u8; QK_K], a: &BlockQ8K) -> f32 {
    let (mut sumi, mut summ) = (0i32, 0i32);
    for (j, (qg, ag)) in q.chunks_exact(32).zip(a.qs.chunks_exact(32)).enumerate() {
        let (sc, m) = scale_min_k4(j, s);
        let dot: i32 = qg.iter().zip(ag).map(|(&w, &x)| w as i32 * x as i32).sum();
        sumi += sc as i32 * dot;
        summ += m as i32 * (a.bsum(2 * j) as i32 + a.bsum(2 * j + 1) as i32);
    }
    let da = a.d();
    (f16_le(d) * da) * sumi as f32 - (f16_le(dmin) * da) * summ as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_halves_to_even() {
        for (v, want) in [(0.5, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2), (-2.5, -2), (3.49, 3), (-3.51, -4)] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
        for i in -5000..5000 {
            let v = i as f32 * 0.37;
            assert_eq!(nearest_int(v), v.round_ties_even() as i32, "{v}");
        }
    }

    #[test]
    fn scale_min_packing_round_trips() {
        let ls = [0, 1, 17, 63, 62, 33, 16, 5];
        let lm = [63, 0, 48, 2, 15, 31, 47, 60];
        let s = pack_scale_min_k4(&ls, &lm);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &s), (ls[j], lm[j]), "group {j}");
        }
    }

    #[test]
    fn fits_are_exact_on_representable_groups() {
        // Values already on a grid of 0..=15 steps with an offset fit with zero error.
        let x: Vec<f32> = (0..32).map(|i| (i % 16) as f32 * 0.25 - 1.0).collect();
        let w = vec![1.0f32; 32];
        let mut l = [0u8; 32];
        let fit = MinFit { nmax: 15, rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
        let (scale, min) = fit_scale_min(&x, &w, &fit, &mut l);
        for (i, &v) in x.iter().enumerate() {
            assert!((scale * l[i] as f32 - min - v).abs() < 1e-6, "{i}: {scale} {min} {}", l[i]);
        }
        let x: Vec<f32> = (0..16).map(|i| (i as f32 - 8.0) * 0.5).collect();
        let mut l = [0u8; 16];
        let scale = fit_signed_scale(&x, 32, &mut l);
        for (i, &v) in x.iter().enumerate() {
            assert!((scale * (l[i] as f32 - 32.0) - v).abs() < 1e-5, "{i}");
        }
        let x: Vec<f32> = (0..16).map(|i| (i % 8) as f32 - 4.0).collect();
        let scale = fit_signed_scale_descent(&x, 4, &mut l);
        for (i, &v) in x.iter().enumerate() {
            assert!((scale * (l[i] as f32 - 4.0) - v).abs() < 1e-6, "{i}");
        }
    }

    #[test]
    fn zero_groups_give_zero_scales() {
        let x = [0.0f32; 32];
        let mut l = [7u8; 32];
        let fit = MinFit { nmax: 3, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: true };
        assert_eq!(fit_scale_min(&x, &[0.0; 32], &fit, &mut l), (0.0, -0.0));
        assert_eq!(l, [0; 32]);
        assert_eq!(fit_signed_scale(&x[..16], 32, &mut l), 0.0);
        assert_eq!(fit_signed_scale_descent(&x[..16], 4, &mut l), 0.0);
        assert_eq!(l[..16], [0; 16]);
    }
}
