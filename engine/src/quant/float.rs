//! F32, F16 and BF16 rows: conversions and dot products against f32 activations.
//!
//! Float weights are dotted against f32 activations (more precise than ggml, which rounds the
//! activations to the weight's format first); all rows are raw little-endian bytes, so a row
//! can be used straight from the memory map at any alignment.

use half::f16;

#[inline(always)]
fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[inline(always)]
fn halves(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// BF16 bits to f32: the high half of the f32 bit pattern.
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 to BF16 bits as ggml rounds: to nearest even, NaNs kept quiet.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

pub fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    debug_assert_eq!(bytes.len(), out.len() * 4);
    out.iter_mut().zip(f32s(bytes)).for_each(|(y, v)| *y = v);
}

pub fn dequantize_f16(bytes: &[u8], out: &mut [f32]) {
    debug_assert_eq!(bytes.len(), out.len() * 2);
    out.iter_mut().zip(halves(bytes)).for_each(|(y, h)| *y = f16::from_bits(h).to_f32());
}

pub fn dequantize_bf16(bytes: &[u8], out: &mut [f32]) {
    debug_assert_eq!(bytes.len(), out.len() * 2);
    out.iter_mut().zip(halves(bytes)).for_each(|(y, h)| *y = bf16_to_f32(h));
}

pub fn quantize_f32(x: &[f32], bytes: &mut [u8]) {
    debug_assert_eq!(bytes.len(), x.len() * 4);
    for (b, v) in bytes.chunks_exact_mut(4).zip(x) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// f32 to F16, rounding to nearest even (what F16C's `vcvtps2ph` and ggml do).
pub fn quantize_f16(x: &[f32], bytes: &mut [u8]) {
    debug_assert_eq!(bytes.len(), x.len() * 2);
    for (b, v) in bytes.chunks_exact_mut(2).zip(x) {
        b.copy_from_slice(&f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

pub fn quantize_bf16(x: &[f32], bytes: &mut [u8]) {
    debug_assert_eq!(bytes.len(), x.len() * 2);
    for (b, v) in bytes.chunks_exact_mut(2).zip(x) {
        b.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
    }
}

// The scalar float dots accumulate in f64: they are the reference the SIMD tiers (f32 lanes)
// are measured against, so their own rounding error should be negligible.

pub fn vec_dot_f32(w: &[u8], a: &[u8]) -> f32 {
    debug_assert_eq!(w.len(), a.len());
    f32s(w).zip(f32s(a)).map(|(x, y)| x as f64 * y as f64).sum::<f64>() as f32
}

pub fn vec_dot_f16(w: &[u8], a: &[u8]) -> f32 {
    debug_assert_eq!(w.len() * 2, a.len());
    halves(w).zip(f32s(a)).map(|(h, y)| f16::from_bits(h).to_f32() as f64 * y as f64).sum::<f64>() as f32
}

pub fn vec_dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    debug_assert_eq!(w.len() * 2, a.len());
    halves(w).zip(f32s(a)).map(|(h, y)| bf16_to_f32(h) as f64 * y as f64).sum::<f64>() as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_nan_quiet() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)) & 0x40, 0x40);
        assert_eq!(bf16_to_f32(0xc000), -2.0);
    }
}
