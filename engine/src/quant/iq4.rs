//! IQ4_NL and IQ4_XS: 4-bit indices into sixteen fixed, non-uniform int8 levels ([`LEVELS`]),
//! denser near zero where weights are. IQ4_NL scales each 32-value block by an f16 `d`
//! (activations in Q8_0); IQ4_XS groups eight such blocks into a 256-value super-block with one
//! f16 `d` and a 6-bit signed scale per group (activations in Q8_K).
//!
//! The quantizer is ggml's search (`quantize_row_iq4_nl_impl` as `llama-quantize` calls it
//! without an importance matrix: each value weighted by its square, 7 scale trials either side)
//! with every floating-point expression in ggml's order, so that it writes `llama-quantize`'s
//! blocks byte for byte.
//!
//! Dot products: a block's (IQ4_NL) or super-block's (IQ4_XS) integer sum is exact
//! (`|level| <= 127`, `|q8| <= 127`, 32 values, 6-bit scales: far inside i32), then one f32
//! multiply-add per block in order.

use super::blocks::{f16_le, f16_le_from, BlockIQ4NL, BlockIQ4XS, BlockQ8K, BlockQ8_0, QK4_NL};
use super::k_quants::scales::nearest_int;
use super::QK_K;

/// The sixteen levels an index selects (ggml's `kvalues_iq4nl`).
pub const LEVELS: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Values per scale group (an IQ4_NL block, an IQ4_XS group).
const GROUP: usize = 32;
/// Scale trials either side of the first guess, as `llama-quantize` asks for.
const TRIALS: i32 = 7;
/// Groups whose largest magnitude is below this are all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

pub mod nl {
    //! IQ4_NL rows (32-value blocks, activations in Q8_0).
    use super::*;

    super::super::row_fns!(BlockIQ4NL, BlockQ8_0);

    pub fn dequantize_ref(blocks: &[BlockIQ4NL], out: &mut [f32]) {
        debug_assert_eq!(out.len(), blocks.len() * QK4_NL);
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK4_NL)) {
            dequantize_group(&LEVELS, &b.qs, f16_le(b.d), y);
        }
    }

    /// `llama-quantize`'s IQ4_NL blocks (no importance matrix).
    pub fn quantize_ref(x: &[f32], blocks: &mut [BlockIQ4NL]) {
        debug_assert_eq!(x.len(), blocks.len() * QK4_NL);
        for (xb, b) in x.chunks_exact(QK4_NL).zip(blocks.iter_mut()) {
            let scale = group_scale(xb);
            b.d = f16_le_from(scale);
            // One group: the indices are chosen again against the f32 scale itself.
            let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let mut levels = [0u8; QK4_NL];
            for (l, &v) in levels.iter_mut().zip(xb) {
                *l = nearest_level(id * v);
            }
            pack(&levels, &mut b.qs);
        }
    }

    pub fn vec_dot_ref(w: &[BlockIQ4NL], a: &[BlockQ8_0]) -> f32 {
        debug_assert_eq!(w.len(), a.len());
        let mut sum = 0.0f32;
        for (x, y) in w.iter().zip(a) {
            sum += block_dot_with(&LEVELS, &x.qs, &y.qs) as f32 * (f16_le(x.d) * f16_le(y.d));
        }
        sum
    }
}

pub mod xs {
    //! IQ4_XS rows (256-value super-blocks, activations in Q8_K).
    use super::*;

    super::super::row_fns!(BlockIQ4XS, BlockQ8K);

    /// The 6-bit scale of group `g` (0..8), less 32.
    #[inline(always)]
    pub fn group_scale_of(b: &BlockIQ4XS, g: usize) -> i32 {
        let low = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0x0F;
        let high = (u16::from_le_bytes(b.scales_h) >> (2 * g)) & 3;
        (i32::from(low) | (i32::from(high) << 4)) - 32
    }

    pub fn dequantize_ref(blocks: &[BlockIQ4XS], out: &mut [f32]) {
        debug_assert_eq!(out.len(), blocks.len() * QK_K);
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_le(b.d);
            for (g, (qs, yg)) in b.qs.chunks_exact(GROUP / 2).zip(y.chunks_exact_mut(GROUP)).enumerate() {
                dequantize_group(&LEVELS, qs, d * group_scale_of(b, g) as f32, yg);
            }
        }
    }

    /// `llama-quantize`'s IQ4_XS blocks (no importance matrix): each group's best scale, then
    /// those scales as 6-bit multiples of one f16 super-block scale, and the indices chosen again
    /// against each group's rounded scale.
    pub fn quantize_ref(x: &[f32], blocks: &mut [BlockIQ4XS]) {
        debug_assert_eq!(x.len(), blocks.len() * QK_K);
        for (xs, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
            let mut scales = [0f32; QK_K / GROUP];
            let (mut max_scale, mut amax_scale) = (0f32, 0f32);
            for (s, xb) in scales.iter_mut().zip(xs.chunks_exact(GROUP)) {
                *s = group_scale(xb);
                if s.abs() > amax_scale {
                    amax_scale = s.abs();
                    max_scale = *s;
                }
            }
            let d = -max_scale / 32.0;
            b.d = f16_le_from(d);
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut levels = [0u8; QK_K];
            let mut scales_h = 0u16;
            b.scales_l = [0; QK_K / 64];
            for (g, (xb, lg)) in xs.chunks_exact(GROUP).zip(levels.chunks_exact_mut(GROUP)).enumerate() {
                let l = nearest_int(id * scales[g]).clamp(-32, 31);
                let dl = d * l as f32;
                let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
                for (q, &v) in lg.iter_mut().zip(xb) {
                    *q = nearest_level(idl * v);
                }
                let l = (l + 32) as u8;
                b.scales_l[g / 2] |= (l & 0x0F) << (4 * (g % 2));
                scales_h |= u16::from(l >> 4) << (2 * g);
            }
            b.scales_h = scales_h.to_le_bytes();
            for (lg, qs) in levels.chunks_exact(GROUP).zip(b.qs.chunks_exact_mut(GROUP / 2)) {
                pack(lg, qs);
            }
        }
    }

    pub fn vec_dot_ref(w: &[BlockIQ4XS], a: &[BlockQ8K]) -> f32 {
        debug_assert_eq!(w.len(), a.len());
        let mut sum = 0.0f32;
        for (x, y) in w.iter().zip(a) {
            let mut isum = 0i32;
            for (g, (qs, q8)) in x.qs.chunks_exact(GROUP / 2).zip(y.qs.chunks_exact(GROUP)).enumerate() {
                isum += group_scale_of(x, g) * block_dot_with(&LEVELS, qs, q8);
            }
            sum += isum as f32 * (f16_le(x.d) * y.d());
        }
        sum
    }
}

/// `d · levels[q]` of one 32-value group's 16 packed index bytes (low nibbles are values 0..16,
/// high nibbles 16..32) into `y`: one multiply each, as ggml's dequantization (MXFP4 shares it
/// with its codes).
#[inline(always)]
pub(crate) fn dequantize_group(levels: &[i8; 16], qs: &[u8], d: f32, y: &mut [f32]) {
    for (j, &q) in qs.iter().enumerate().take(GROUP / 2) {
        y[j] = d * f32::from(levels[usize::from(q & 0x0F)]);
        y[j + GROUP / 2] = d * f32::from(levels[usize::from(q >> 4)]);
    }
}

/// `Σ levels[q] · a` over one 32-value group: 16 packed index bytes (low nibbles are values
/// 0..16, high nibbles 16..32) against 32 activation quants (MXFP4 shares it with its codes).
#[inline(always)]
pub(crate) fn block_dot_with(levels: &[i8; 16], qs: &[u8], a: &[i8]) -> i32 {
    let mut sum = 0i32;
    for j in 0..GROUP / 2 {
        sum += i32::from(levels[usize::from(qs[j] & 0x0F)]) * i32::from(a[j]);
        sum += i32::from(levels[usize::from(qs[j] >> 4)]) * i32::from(a[j + GROUP / 2]);
    }
    sum
}

/// Values `j` and `j + 16` of each 32-value group share byte `j`, low nibble first.
fn pack(levels: &[u8], qs: &mut [u8]) {
    for j in 0..GROUP / 2 {
        qs[j] = levels[j] | (levels[j + GROUP / 2] << 4);
    }
}

/// The index of the level nearest `x` (ggml's `best_index_int8`: a binary search, ties to the
/// upper level).
fn nearest_level(x: f32) -> u8 {
    let level = |i: usize| f32::from(LEVELS[i]);
    if x <= level(0) {
        return 0;
    }
    if x >= level(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < level(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - level(hi - 1) < level(hi) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// The f32 scale of one 32-value group that minimises `Σ x² (x - d·level)²` over ggml's
/// trials: the scale putting the largest magnitude on the lowest level, its least-squares
/// refinement, then `(t - 127) / max` for `t` in -7..=7, each refined likewise.
fn group_scale(xb: &[f32]) -> f32 {
    let mut weight = [0f32; GROUP];
    for (w, &v) in weight.iter_mut().zip(xb) {
        *w = v * v;
    }
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let lowest = f32::from(LEVELS[0]);
    // Least-squares sums of the indices chosen at inverse scale `id`.
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (&v, &w) in xb.iter().zip(&weight) {
            let q = f32::from(LEVELS[usize::from(nearest_level(id * v))]);
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d = -max / lowest;
    let (sumqx, sumq2) = sums(1.0 / d);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for t in -TRIALS..=TRIALS {
        let (sumqx, sumq2) = sums((t + i32::from(LEVELS[0])) as f32 / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_level_breaks_ties_upwards_and_clamps() {
        assert_eq!(nearest_level(-1000.0), 0);
        assert_eq!(nearest_level(1000.0), 15);
        assert_eq!(nearest_level(0.0), 8); // -10 and 1: 1 is nearer
        assert_eq!(nearest_level(-4.5), 8); // halfway between -10 and 1: the upper one
        assert_eq!(nearest_level(-4.6), 7);
        for (i, &l) in LEVELS.iter().enumerate() {
            assert_eq!(usize::from(nearest_level(f32::from(l))), i);
        }
    }

    #[test]
    fn quantized_rows_come_back_close_and_zero_rows_exactly() {
        let x: Vec<f32> = (0..2 * QK_K).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let mut nl = vec![0u8; 2 * QK_K / QK4_NL * 18];
        nl::quantize_row(&x, &mut nl);
        let mut xs = vec![0u8; 2 * 136];
        xs::quantize_row(&x, &mut xs);
        for (name, bytes, deq) in [("IQ4_NL", &nl, nl::dequantize_row as fn(&[u8], &mut [f32])), ("IQ4_XS", &xs, xs::dequantize_row)] {
            let mut y = vec![0f32; x.len()];
            deq(bytes, &mut y);
            let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32;
            let var: f32 = x.iter().map(|a| a * a).sum::<f32>() / x.len() as f32;
            assert!(err < 0.01 * var, "{name}: mean squared error {err} against a signal of {var}");
        }
        let zeros = vec![0f32; QK_K];
        let mut z = vec![0u8; 136];
        xs::quantize_row(&zeros, &mut z);
        let mut y = vec![1f32; QK_K];
        xs::dequantize_row(&z, &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
    }
}
