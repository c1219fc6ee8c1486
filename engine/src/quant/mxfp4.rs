//! MXFP4 (OCP microscaling FP4): 32 values as 4-bit E2M1 codes sharing one E8M0 exponent. The
//! codes' values are kept doubled as integers ([`LEVELS`]: 0, ±0.5, ±1, ... ±6 times two) and the
//! exponent halved to match ([`e8m0_half`]), as ggml keeps them, so that the dot product with a
//! Q8_0 activation block is an exact integer sum times one f32 scale.

use super::blocks::{f16_le, BlockMXFP4, BlockQ8_0, QK_MXFP4};
use super::iq4::{block_dot_with, dequantize_group};

/// E2M1 code -> its value times two (ggml's `kvalues_mxfp4`); bit 3 is the sign.
pub const LEVELS: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

super::row_fns!(BlockMXFP4, BlockQ8_0);

/// `2^(e - 128)`: the E8M0 exponent `e` (`2^(e - 127)`) halved, the doubled levels' scale.
/// Exact for every `e` (e < 2 gives subnormals); 255, which E8M0 reserves for NaN, reads as
/// `2^127` as in ggml.
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

pub fn dequantize_ref(blocks: &[BlockMXFP4], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK_MXFP4);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_MXFP4)) {
        // ggml multiplies level by scale; the product is the same either way round
        dequantize_group(&LEVELS, &b.qs, e8m0_half(b.e), y);
    }
}

/// ggml's reference quantizer: the exponent puts the largest magnitude in the top binade
/// (`floor(log2 amax) - 2`), then each value takes the nearest code (the first of equals).
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockMXFP4]) {
    debug_assert_eq!(x.len(), blocks.len() * QK_MXFP4);
    for (xb, b) in x.chunks_exact(QK_MXFP4).zip(blocks.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| if m < v.abs() { v.abs() } else { m });
        // C converts the float through a 32-bit integer to its uint8_t (what x86 code does for
        // the out-of-range exponents of subnormal maxima); `as u8` alone would saturate.
        b.e = if amax > 0.0 { ((amax.log2().floor() - 2.0 + 127.0) as i32) as u8 } else { 0 };
        let d = e8m0_half(b.e);
        let code = |v: f32| {
            let mut best = (0u8, (f32::from(LEVELS[0]) * d - v).abs());
            for (i, &l) in LEVELS.iter().enumerate().skip(1) {
                let err = (f32::from(l) * d - v).abs();
                if err < best.1 {
                    best = (i as u8, err);
                }
            }
            best.0
        };
        for j in 0..QK_MXFP4 / 2 {
            b.qs[j] = code(xb[j]) | (code(xb[j + QK_MXFP4 / 2]) << 4);
        }
    }
}

pub fn vec_dot_ref(w: &[BlockMXFP4], a: &[BlockQ8_0]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        sum += block_dot_with(&LEVELS, &x.qs, &y.qs) as f32 * (f16_le(y.d) * e8m0_half(x.e));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_halved_exponent_is_two_to_the_e_less_128() {
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(130), 4.0);
        assert_eq!(e8m0_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_half(255), 2f32.powi(127));
    }

    #[test]
    fn values_on_the_grid_come_back_exactly() {
        // 6 · 2^k for the largest, every other value a code times 2^(k-1): exact round trips
        let x: Vec<f32> = (0..64).map(|i| f32::from(LEVELS[i % 16]) * 0.25 * if i < 32 { 1.0 } else { 8.0 }).collect();
        let mut b = vec![0u8; 2 * 17];
        quantize_row(&x, &mut b);
        let mut y = vec![0f32; 64];
        dequantize_row(&b, &mut y);
        assert_eq!(x, y);
    }
}
