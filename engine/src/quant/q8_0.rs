//! Q8_0: blocks of 32 values, int8 quants and one f16 scale (`d * q`); a weight type and the
//! activation format of Q4_0 / Q5_0 / Q8_0 weights.

use super::blocks::{f16_le, f16_le_from, BlockQ8_0, QK8_0};

super::row_fns!(BlockQ8_0, BlockQ8_0);

pub fn dequantize_ref(blocks: &[BlockQ8_0], out: &mut [f32]) {
    debug_assert_eq!(out.len(), blocks.len() * QK8_0);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = f16_le(b.d);
        for (yj, &q) in y.iter_mut().zip(&b.qs) {
            *yj = q as f32 * d;
        }
    }
}

/// How a block of 32 values becomes int8 quants and a scale: ggml's portable reference, or what
/// llama.cpp's x86 CPU backend runs on matmul activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Q8Rounding {
    /// `quantize_row_q8_*_ref`: `d = amax / 127`, `id = 1 / d`, halves away from zero (`roundf`).
    Reference,
    /// `quantize_row_q8_*` of the AVX2 code: `id = 127 / amax`, halves to even. It differs from
    /// the reference only where `v * id` lands exactly on a half (or `id` differs in its last
    /// bit); matching it keeps the integer dot products, and so the logits, bit-equal to
    /// llama.cpp's.
    X86Backend,
}

impl Q8Rounding {
    /// Writes the quants of `xb` into `qs` and returns the unrounded f32 scale `d`.
    #[inline(always)]
    pub(crate) fn quantize_block(self, xb: &[f32], qs: &mut [i8]) -> f32 {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = match self {
            Q8Rounding::Reference if d != 0.0 => 1.0 / d,
            Q8Rounding::X86Backend if amax != 0.0 => 127.0 / amax,
            _ => 0.0,
        };
        for (q, &v) in qs.iter_mut().zip(xb) {
            *q = match self {
                Q8Rounding::Reference => (v * id).round(),
                Q8Rounding::X86Backend => round_half_even_small(v * id),
            } as i8;
        }
        d
    }
}

/// `x.round_ties_even()` for |x| <= 2^22: adding 1.5 * 2^23 leaves one unit per ulp, so the
/// addition itself rounds to the nearest integer, halves to even. Unlike `round_ties_even`,
/// which compiles to a libm call on the baseline x86-64 target, this vectorises; the
/// activation quants (|x| <= 127) are the same bits.
#[inline(always)]
fn round_half_even_small(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (x + MAGIC) - MAGIC
}

#[inline(always)]
fn quantize_with(rounding: Q8Rounding, x: &[f32], blocks: &mut [BlockQ8_0]) {
    debug_assert_eq!(x.len(), blocks.len() * QK8_0);
    for (xb, b) in x.chunks_exact(QK8_0).zip(blocks.iter_mut()) {
        b.d = f16_le_from(rounding.quantize_block(xb, &mut b.qs));
    }
}

/// ggml's `quantize_row_q8_0_ref`, byte for byte.
pub fn quantize_ref(x: &[f32], blocks: &mut [BlockQ8_0]) {
    quantize_with(Q8Rounding::Reference, x, blocks)
}

/// Quantizes matmul activations the way llama.cpp's x86 CPU backend does
/// (`Q8Rounding::X86Backend`).
pub fn quantize_activations(x: &[f32], bytes: &mut [u8]) {
    quantize_with(Q8Rounding::X86Backend, x, bytemuck::cast_slice_mut::<u8, BlockQ8_0>(bytes))
}

/// ggml's Q8_0 dot product on x86 (and llamafile's tinyBLAS, which llama.cpp uses for
/// prompts): eight f32 lanes, lane `l` taking the exact integer sum of products `4l..4l+4` of
/// each block, scaled by `d_w * d_a` and added with one fused multiply-add per block, in block
/// order; then the lanes summed pairwise as `sum_lanes` does. Every SIMD tier computes
/// exactly this.
pub fn vec_dot_ref(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    let mut lanes = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let d = f16_le(x.d) * f16_le(y.d);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let sumi: i32 = (4 * l..4 * l + 4).map(|j| x.qs[j] as i32 * y.qs[j] as i32).sum();
            *lane = d.mul_add(sumi as f32, *lane);
        }
    }
    sum_lanes(lanes)
}

/// The sum of eight lanes in the order of an x86 horizontal add: halves, then pairs.
#[inline]
pub(crate) fn sum_lanes(l: [f32; 8]) -> f32 {
    let h = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

#[cfg(test)]
mod tests {
    use super::round_half_even_small;

    #[test]
    fn magic_rounding_is_round_ties_even_over_the_quant_range() {
        // every quarter (halves included, where the two rules could part) and the f32 just
        // either side of each half
        for k in -560..=560 {
            let x = k as f32 / 4.0;
            for v in [x, f32::from_bits(x.to_bits() + 1), f32::from_bits(x.to_bits().saturating_sub(1))] {
                assert_eq!(round_half_even_small(v), v.round_ties_even(), "{v}");
            }
        }
        let mut state = 0x9E37_79B9u32;
        for _ in 0..100_000 {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let v = (state >> 8) as f32 / (1u32 << 24) as f32 * 280.0 - 140.0;
            assert_eq!(round_half_even_small(v), v.round_ties_even(), "{v}");
        }
    }
}
