//! The grid i-quants: IQ2_XXS, IQ2_XS, IQ2_S (`iq2.rs`), IQ3_XXS, IQ3_S (`iq3.rs`), IQ1_S and
//! IQ1_M (`iq1.rs`). A 256-value super-block stores, for each group of 8 (or 4) values, an
//! index into a fixed lattice grid (`tables.rs`) and, for the 2- and 3-bit types, the group's
//! signs; small odd integer scales per 16 or 32 values; and one f16 scale. IQ1 grids hold -1, 0
//! and 1, shifted by ±1/8 per group. llama.cpp makes these files from an importance matrix; the
//! engine reads and computes with them and has no quantizer for them.
//!
//! Every type unpacks a super-block into one form (`Unpacked`): its f16 scale, 256 signed
//! integer grid values, an odd scale per 8 values and (IQ1) a shift sign per 8 values. The
//! dequantization and the dot product with Q8_K activations are then shared: values are
//! `(d · scale) · c · value` (`c`: the type's constant, a power of two, applied as ggml applies
//! it), and a dot product is `c · Σ_blocks (d · d₈) · Σ_groups scale · Σ value · q8` with exact
//! integer sums (plus IQ1's shift term `Σ scale · sign · Σ q8` weighed by 1/8), the float
//! operations in ggml's order.

pub mod gemm;
mod iq1;
mod iq2;
mod iq3;
pub(crate) mod tables;

pub use iq1::{iq1_m, iq1_s};
pub use iq2::{iq2_s, iq2_xs, iq2_xxs};
pub use iq3::{iq3_s, iq3_xxs};

use super::blocks::{f16_le, BlockQ8K};
use super::GgmlType;
use super::QK_K;

/// Values per group of one scale entry in [`Unpacked`].
const GROUP: usize = 8;
const GROUPS: usize = QK_K / GROUP;

/// One super-block in the shared form.
pub(crate) struct Unpacked {
    /// The block's scale (the f16 `d`).
    pub d: f32,
    /// Each group's 8 grid values as the bytes of one word, lowest first: magnitudes, whose
    /// signs are in `signs`, for IQ2 and IQ3; the signed values themselves (as i8) for IQ1.
    pub values: [u64; GROUPS],
    /// Each group of 8's signs: bit `j` set makes value `j` negative (0 for IQ1).
    pub signs: [u8; GROUPS],
    /// The odd integer scale of each group of 8 values.
    pub scales: [u8; GROUPS],
    /// IQ1's shift of each group of 8: +1 or -1 (times 1/8); 0 for the other types.
    pub shifts: [i8; GROUPS],
    /// Q2_K's scale of its mins, and its min of each 16 values (0 for the other types).
    pub dmin: f32,
    pub mins: [u8; QK_K / 16],
}

impl Default for Unpacked {
    fn default() -> Self {
        Unpacked {
            d: 0.0,
            values: [0; GROUPS],
            signs: [0; GROUPS],
            scales: [0; GROUPS],
            shifts: [0; GROUPS],
            dmin: 0.0,
            mins: [0; QK_K / 16],
        }
    }
}

/// How a type is read: its super-block's bytes, how to unpack one, and its constant.
pub(crate) struct GridType {
    pub block_bytes: usize,
    pub unpack: fn(&[u8], &mut Unpacked),
    /// The power of two values are scaled by beyond `d · scale` (1/8 for IQ2, 1/4 for IQ3_XXS,
    /// 1 for IQ3_S and IQ1).
    pub c: f32,
    /// The type has IQ1's shifts (its dot product adds their term inside the block's sum).
    pub shifted: bool,
    /// Values sharing one scale in the block (16 or 32; IQ1_M's shifts, per 8, are not scales).
    pub scale_values: usize,
    /// The type subtracts `dmin · min` per 16 values (Q2_K, for the many-row product only; the
    /// grid types' own functions have none).
    pub mins: bool,
}

/// Shift of an IQ1 value per unit of [`Unpacked::shifts`] (ggml's `IQ1S_DELTA`).
pub(crate) const SHIFT: f32 = 0.125;

impl GridType {
    /// Dequantizes the super-blocks of `row` into `out`.
    pub fn dequantize(&self, row: &[u8], out: &mut [f32]) {
        debug_assert_eq!(row.len() / self.block_bytes * QK_K, out.len());
        let mut u = Unpacked::default();
        for (block, y) in row.chunks_exact(self.block_bytes).zip(out.chunks_exact_mut(QK_K)) {
            (self.unpack)(block, &mut u);
            for (g, ys) in y.chunks_exact_mut(GROUP).enumerate() {
                // ggml: (d · (scale / 2)) · 2c for IQ2 and IQ3_XXS, which rounds as (d · scale) · c
                let db = u.d * f32::from(u.scales[g]) * self.c;
                let shift = f32::from(u.shifts[g]) * SHIFT;
                for (j, v) in ys.iter_mut().enumerate() {
                    let q = f32::from(u.value(g, j));
                    *v = if self.shifted { db * (q + shift) } else { db * q };
                }
            }
        }
    }

    /// The dot product of a weight row with a row of Q8_K activations.
    pub fn vec_dot(&self, row: &[u8], act: &[BlockQ8K]) -> f32 {
        let mut u = Unpacked::default();
        let mut sum = 0.0f32;
        for (block, a) in row.chunks_exact(self.block_bytes).zip(act) {
            (self.unpack)(block, &mut u);
            let (mut sumi, mut shifted) = (0i32, 0i32);
            for g in 0..GROUPS {
                let range = g * GROUP..(g + 1) * GROUP;
                let dot: i32 = (0..GROUP).map(|j| i32::from(u.value(g, j)) * i32::from(a.qs[g * GROUP + j])).sum();
                let scale = i32::from(u.scales[g]);
                sumi += scale * dot;
                if self.shifted {
                    let q_sum: i32 = a.qs[range].iter().map(|&q| i32::from(q)).sum();
                    shifted += scale * i32::from(u.shifts[g]) * q_sum;
                }
            }
            sum += if self.shifted { u.d * a.d() * (sumi as f32 + SHIFT * shifted as f32) } else { u.d * a.d() * sumi as f32 };
        }
        self.c * sum
    }
}

impl Unpacked {
    /// Value `j` of group `g` with its sign.
    #[inline]
    pub fn value(&self, g: usize, j: usize) -> i8 {
        let v = (self.values[g] >> (8 * j)) as u8 as i8;
        // magnitudes are below 64: no overflow
        if self.signs[g] >> j & 1 == 1 {
            -v
        } else {
            v
        }
    }

    /// Sets group `g` to a grid entry (its 8 bytes, lowest first) and `signs`.
    #[inline]
    pub(crate) fn set_group(&mut self, g: usize, entry: u64, signs: u8) {
        self.values[g] = entry;
        self.signs[g] = signs;
    }
}

/// The byte with the low 7 bits of `bits` as signs and an eighth that makes their count even
/// (ggml's `ksigns_iq2xs`).
#[inline]
pub(super) fn signs7(bits: u32) -> u8 {
    SIGNS7[(bits & 127) as usize]
}

pub(crate) static SIGNS7: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = b as u8 | (((b as u8).count_ones() & 1) as u8) << 7;
        b += 1;
    }
    t
};

/// The f16 at `b[at..at + 2]`.
#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_le([b[at], b[at + 1]])
}

// The word readers take a slice of the word's width, so that one bounds check and one load
// read it (indexing byte by byte leaves four checks and four byte loads in the kernels).

/// The little-endian u16 at `b[at..]`.
#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("two bytes"))
}

/// The little-endian u32 at `b[at..]`.
#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"))
}

/// The little-endian u64 at `b[at..]`.
#[inline]
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// Row functions of one grid type (`$ty`: its [`GridType`]).
macro_rules! grid_row_fns {
    ($ty:expr) => {
        /// Dequantizes the super-blocks in `bytes` into `out` (`out.len()` values).
        pub fn dequantize_row(bytes: &[u8], out: &mut [f32]) {
            $ty.dequantize(bytes, out)
        }

        /// Dot product of a weight row with a row of Q8_K activations, both as raw blocks.
        pub fn vec_dot_row(w: &[u8], a: &[u8]) -> f32 {
            $ty.vec_dot(w, bytemuck::cast_slice::<u8, $crate::quant::blocks::BlockQ8K>(a))
        }
    };
}
pub(crate) use grid_row_fns;

/// The [`GridType`] of `ty`, if it is a grid i-quant.
pub(crate) fn grid_type(ty: GgmlType) -> Option<&'static GridType> {
    Some(match ty {
        GgmlType::IQ2_XXS => &iq2_xxs::TYPE,
        GgmlType::IQ2_XS => &iq2_xs::TYPE,
        GgmlType::IQ2_S => &iq2_s::TYPE,
        GgmlType::IQ3_XXS => &iq3_xxs::TYPE,
        GgmlType::IQ3_S => &iq3_s::TYPE,
        GgmlType::IQ1_S => &iq1_s::TYPE,
        GgmlType::IQ1_M => &iq1_m::TYPE,
        _ => return None,
    })
}

/// `n` super-blocks of grid type `ty` from random bytes, each block's f16 scale set to a small
/// positive value (every other byte pattern is a valid block): test weights for the types the
/// engine cannot quantize to (the kernels' op harness uses them too).
#[cfg(any(test, feature = "sim", feature = "cuda"))]
pub(crate) fn random_row(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let t = gemm::gemm_type(ty).expect("a grid type, Q2_K or Q3_K");
    let mut s = seed.wrapping_add(1);
    let mut row: Vec<u8> = (0..n * t.block_bytes)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect();
    for (i, b) in row.chunks_exact_mut(t.block_bytes).enumerate() {
        let d = super::blocks::f16_le_from(0.001 + 0.0007 * i as f32);
        if ty == GgmlType::IQ1_M {
            // the f16 lives in the top nibbles of the four scale words
            let bits = u16::from_le_bytes(d);
            for k in 0..4 {
                let at = 48 + 2 * k;
                let w = (u16_at(b, at) & 0x0fff) | (((bits >> (4 * k)) & 15) << 12);
                b[at..at + 2].copy_from_slice(&w.to_le_bytes());
            }
        } else if ty == GgmlType::Q3_K {
            b[108..].copy_from_slice(&d);
        } else if ty == GgmlType::Q2_K {
            b[80..82].copy_from_slice(&d);
            b[82..84].copy_from_slice(&super::blocks::f16_le_from(0.0005 + 0.0003 * i as f32));
        } else {
            b[..2].copy_from_slice(&d);
        }
    }
    row
}

#[cfg(test)]
mod tests;
