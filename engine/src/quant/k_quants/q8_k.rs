//! Q8_K: 256 activations, int8 quants, an f32 scale and the sums of every 16 quants (`bsums`,
//! which let weight types with per-group minimums skip per-element offset work).

use super::scales::{nearest_int, signed_max};
use crate::quant::blocks::BlockQ8K;
use crate::quant::QK_K;

crate::quant::row_fns!(BlockQ8K, BlockQ8K);

pub fn dequantize_ref(blocks: &[BlockQ8K], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (yj, &q) in y.iter_mut().zip(&b.qs) {
            *yj = d * q as f32;
        }
    }
}

/// ggml's `quantize_row_q8_K_ref`, byte for byte: the element of largest magnitude maps to
/// -127 (so `d` has the opposite sign of that element), rounding halves to even; a block of
/// zeros is all zero (ggml leaves its `bsums` unwritten; zero is their only sensible value).
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks.iter_mut()) {
        let (max, amax) = signed_max(xb);
        if amax == 0.0 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -127.0f32 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            // |iscale * v| <= 127 up to rounding, so ggml's clamp at 127 is only a guard.
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for j in 0..QK_K / 16 {
            let s: i32 = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            b.set_bsum(j, s as i16);
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}

/// Q8_K as a weight dotted with Q8_K activations (used by tests and tools; no model stores
/// Q8_K weights).
pub fn vec_dot_ref(w: &[BlockQ8K], a: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 = x.qs.iter().zip(&y.qs).map(|(&p, &q)| p as i32 * q as i32).sum();
        sum += (x.d() * y.d()) * sumi as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::k_quants::test_util::{normal, relative_rmse, uniform};
    use bytemuck::Zeroable;

    fn quantize(x: &[f32]) -> Vec<BlockQ8K> {
        let mut b = vec![BlockQ8K::zeroed(); x.len() / QK_K];
        quantize_ref(x, &mut b);
        b
    }

    #[test]
    fn largest_magnitude_maps_to_minus_127() {
        let mut x = uniform(1, QK_K);
        x[5] = 2.0;
        let b = &quantize(&x)[0];
        assert_eq!(b.qs[5], -127);
        assert_eq!(b.d(), 1.0 / (-127.0f32 / 2.0));
        x[5] = -2.0;
        let b = &quantize(&x)[0];
        assert_eq!(b.qs[5], -127);
        assert!(b.d() > 0.0);
    }

    #[test]
    fn bsums_are_group_sums_and_zero_blocks_are_zero() {
        let mut x = normal(2, 2 * QK_K);
        x[QK_K..].fill(0.0);
        let b = quantize(&x);
        for j in 0..16 {
            let s: i32 = b[0].qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            assert_eq!(b[0].bsum(j) as i32, s);
        }
        assert_eq!(b[1], BlockQ8K::zeroed());
    }

    #[test]
    fn round_trip_and_dot() {
        let x = normal(3, 4096);
        let b = quantize(&x);
        let mut y = vec![0.0; x.len()];
        dequantize_ref(&b, &mut y);
        // Uniform 8-bit rounding of a Gaussian block whose max is ~3 sigma: ~0.007 sigma.
        let e = relative_rmse(&x, &y);
        assert!(e < 0.01, "relative RMSE {e}");
        let a = quantize(&uniform(4, 4096));
        let mut ad = vec![0.0; x.len()];
        dequantize_ref(&a, &mut ad);
        let exact: f64 = y.iter().zip(&ad).map(|(&p, &q)| p as f64 * q as f64).sum();
        let scale: f64 = y.iter().zip(&ad).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
        assert!((vec_dot_ref(&b, &a) as f64 - exact).abs() <= 1e-5 * scale);
    }

    #[test]
    fn ties_round_to_even() {
        // max 127 gives iscale = -1 exactly, so x = 0.5 and 1.5 land on halves.
        let mut x = vec![0.0f32; QK_K];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = 1.5;
        x[3] = -2.5;
        let b = &quantize(&x)[0];
        assert_eq!(&b.qs[..4], &[-127, 0, -2, 2]);
    }
}
