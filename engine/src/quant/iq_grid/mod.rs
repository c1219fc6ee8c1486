//! The grid i-quants: IQ2_XXS, IQ2_XS, IQ2_S (`iq2.rs`), IQ3_XXS, IQ3_S (`iq3.rs`), IQ1_S and
//! IQ1_M (`iq1.rs`). A 256-value super-block stores, for each group of 8 (or 4) values, an
//! index into a fixed lattice grid (`tables.rs`) and, for the 2- and 3-bit types, the group's
//! signs; small odd integer scales per 16 or 32 values; and one f16 scale. IQ1 grids hold -1, 0
//! and 1, shifted by ±1/8 per group. llama.cpp makes these files from an importance matrix; the
//! engine reads and computes with them and has no quantizer for them.
//!
//! Every type unpacks a super-block into one form ([`Unpacked`]): its f16 scale, 256 signed
//! integer grid values, an odd scale per 8 values and (IQ1) a shift sign per 8 values. The
//! dequantization and the dot product with Q8_K activations are then shared: values are
//! `(d · scale) · c · value` (`c`: the type's constant, a power of two, applied as ggml applies
//! it), and a dot product is `c · Σ_blocks (d · d₈) · Σ_groups scale · Σ value · q8` with exact
//! integer sums (plus IQ1's shift term `Σ scale · sign · Σ q8` weighed by 1/8), the float
//! operations in ggml's order.

mod iq1;
mod iq2;
mod iq3;
mod tables;

pub use iq1::{iq1_m, iq1_s};
pub use iq2::{iq2_s, iq2_xs, iq2_xxs};
pub use iq3::{iq3_s, iq3_xxs};

use super::blocks::{f16_le, BlockQ8K};
use super::QK_K;

/// Values per group of one scale entry in [`Unpacked`].
const GROUP: usize = 8;
const GROUPS: usize = QK_K / GROUP;

/// One super-block in the shared form.
pub(crate) struct Unpacked {
    /// The block's scale (the f16 `d`).
    pub d: f32,
    /// The 256 grid values with their signs.
    pub values: [i8; QK_K],
    /// The odd integer scale of each group of 8 values.
    pub scales: [u8; GROUPS],
    /// IQ1's shift of each group of 8: +1 or -1 (times 1/8); 0 for the other types.
    pub shifts: [i8; GROUPS],
}

impl Default for Unpacked {
    fn default() -> Self {
        Unpacked { d: 0.0, values: [0; QK_K], scales: [0; GROUPS], shifts: [0; GROUPS] }
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
}

/// Shift of an IQ1 value per unit of [`Unpacked::shifts`] (ggml's `IQ1S_DELTA`).
const SHIFT: f32 = 0.125;

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
                for (v, &q) in ys.iter_mut().zip(&u.values[g * GROUP..]) {
                    *v = if self.shifted { db * (f32::from(q) + shift) } else { db * f32::from(q) };
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
                let dot: i32 = u.values[range.clone()].iter().zip(&a.qs[range.clone()]).map(|(&v, &q)| i32::from(v) * i32::from(q)).sum();
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

/// The byte with 7 sign bits and an eighth that makes their count even (ggml's `ksigns_iq2xs`).
#[inline]
pub(super) fn signs7(bits: u32) -> u8 {
    let b = (bits & 127) as u8;
    b | (((b.count_ones() & 1) as u8) << 7)
}

/// Writes `magnitudes` (bytes of a grid entry, lowest first) into `out` negated where bit `j`
/// of `signs` is set.
#[inline]
pub(super) fn signed(magnitudes: &[u8], signs: u8, out: &mut [i8]) {
    for (j, (o, &m)) in out.iter_mut().zip(magnitudes).enumerate() {
        // magnitudes are below 64: no i8 overflow
        *o = if signs >> j & 1 == 1 { -(m as i8) } else { m as i8 };
    }
}

/// The f16 at `b[at..at + 2]`.
#[inline]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_le([b[at], b[at + 1]])
}

/// The little-endian u16 at `b[at..]`.
#[inline]
pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The little-endian u32 at `b[at..]`.
#[inline]
pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
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

#[cfg(test)]
mod tests;
