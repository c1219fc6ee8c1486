//! The 3-bit grid types: each group of 8 values is two indices into a grid of 4 magnitudes
//! and 8 signs; an odd scale per 32 values.

use super::tables::{IQ3S_GRID, IQ3XXS_GRID};
use super::{f16_at, grid_row_fns, signs7, u32_at, GridType, Unpacked};

/// Two grid entries of 4 magnitudes each, as one group's 8 (the first in the low bytes).
fn two_halves(first: u32, second: u32) -> u64 {
    u64::from(first) | u64::from(second) << 32
}

pub mod iq3_xxs {
    //! IQ3_XXS (98 bytes per 256 values): `d`, 64 8-bit grid indices, then per group of 32 a
    //! u32 of four 7-bit sign sets (the eighth sign is their parity) and a 4-bit scale; values
    //! scaled by 1/4 beyond `d · scale`.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 98, unpack, c: 0.25, shifted: false, scale_values: 32, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        u.d = f16_at(b, 0);
        for ib in 0..8 {
            let aux = u32_at(b, 66 + 4 * ib);
            let scale = (2 * (aux >> 28) + 1) as u8;
            for l in 0..4 {
                let g = 4 * ib + l;
                let (i1, i2) = (b[2 + 2 * g], b[3 + 2 * g]);
                u.set_group(g, two_halves(IQ3XXS_GRID[usize::from(i1)], IQ3XXS_GRID[usize::from(i2)]), signs7(aux >> (7 * l)));
                u.scales[g] = scale;
            }
        }
    }
}

pub mod iq3_s {
    //! IQ3_S (110 bytes per 256 values): `d`, the low 8 bits of 64 9-bit grid indices, their
    //! high bits (one byte per group of 32), each group of 8's signs, a 4-bit scale per 32
    //! values.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 110, unpack, c: 1.0, shifted: false, scale_values: 32, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        u.d = f16_at(b, 0);
        for ib in 0..8 {
            let qh = u32::from(b[66 + ib]);
            let nibble = if ib % 2 == 0 { b[106 + ib / 2] & 15 } else { b[106 + ib / 2] >> 4 };
            for l in 0..4 {
                let g = 4 * ib + l;
                let i1 = u32::from(b[2 + 2 * g]) | ((qh << (8 - 2 * l)) & 256);
                let i2 = u32::from(b[3 + 2 * g]) | ((qh << (7 - 2 * l)) & 256);
                u.set_group(g, two_halves(IQ3S_GRID[i1 as usize], IQ3S_GRID[i2 as usize]), b[74 + g]);
                u.scales[g] = 2 * nibble + 1;
            }
        }
    }
}
