//! The 2-bit grid types: each group of 8 values is an index into a grid of 8 magnitudes (8, 25
//! or 43) and 8 signs; odd scales per 32 (IQ2_XXS) or 16 values (IQ2_XS, IQ2_S); values scaled
//! by 1/8 beyond `d · scale`.

use super::tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
use super::{f16_at, grid_row_fns, signs7, u16_at, u32_at, GridType, Unpacked};

pub mod iq2_xxs {
    //! IQ2_XXS (66 bytes per 256 values): `d`, then per group of 32 two u32: four 8-bit grid
    //! indices, and four 7-bit sign sets (the eighth sign is their parity) with a 4-bit scale.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 66, unpack, c: 0.125, shifted: false, scale_values: 32, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        u.d = f16_at(b, 0);
        for ib in 0..8 {
            let at = 2 + 8 * ib;
            let aux = u32_at(b, at + 4);
            let scale = (2 * (aux >> 28) + 1) as u8;
            for l in 0..4 {
                let g = 4 * ib + l;
                u.set_group(g, IQ2XXS_GRID[usize::from(b[at + l])], signs7(aux >> (7 * l)));
                u.scales[g] = scale;
            }
        }
    }
}

pub mod iq2_xs {
    //! IQ2_XS (74 bytes per 256 values): `d`, a u16 per group of 8 (a 9-bit grid index and 7
    //! signs), and a 4-bit scale per 16 values.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 74, unpack, c: 0.125, shifted: false, scale_values: 16, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        u.d = f16_at(b, 0);
        for g in 0..32 {
            let q = u16_at(b, 2 + 2 * g);
            u.set_group(g, IQ2XS_GRID[usize::from(q & 511)], signs7(u32::from(q >> 9)));
            u.scales[g] = two_scales(b[66 + g / 4], g);
        }
    }
}

pub mod iq2_s {
    //! IQ2_S (82 bytes per 256 values): `d`, the low 8 bits of a 10-bit grid index per group of
    //! 8, then each group's 8 signs, the indices' high bits (2 per group), a 4-bit scale per 16
    //! values.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 82, unpack, c: 0.125, shifted: false, scale_values: 16, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        u.d = f16_at(b, 0);
        for g in 0..32 {
            let (ib, l) = (g / 4, g % 4);
            let high = (u32::from(b[66 + ib]) << (8 - 2 * l)) & 0x300;
            u.set_group(g, IQ2S_GRID[(u32::from(b[2 + g]) | high) as usize], b[34 + g]);
            u.scales[g] = two_scales(b[74 + ib], g);
        }
    }
}

/// The odd scale of group `g` of 8 from its 32-value group's byte of two 4-bit scales (the low
/// one for its first 16 values).
fn two_scales(byte: u8, g: usize) -> u8 {
    let s = if g % 4 < 2 { byte & 15 } else { byte >> 4 };
    2 * s + 1
}
