//! The 1-bit grid types: each group of 8 values is an 11-bit index into a grid of values in
//! {-1, 0, 1}, shifted by ±1/8; odd 3-bit scales per 32 (IQ1_S) or 16 values (IQ1_M).

use super::tables::IQ1S_GRID;
use super::{f16_at, grid_row_fns, u16_at, GridType, Unpacked};

/// Sets group `g` to grid entry `index` (8 values in {-1, 0, 1}, no separate signs).
fn grid_values(u: &mut Unpacked, g: usize, index: u32) {
    u.set_group(g, IQ1S_GRID[index as usize], 0);
}

pub mod iq1_s {
    //! IQ1_S (50 bytes per 256 values): `d`, the low 8 bits of 32 grid indices, then per group
    //! of 32 a u16: the indices' high bits (3 each), a 3-bit scale, the shift's sign.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 50, unpack, c: 1.0, shifted: true, scale_values: 32, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        u.d = f16_at(b, 0);
        for ib in 0..8 {
            let qh = u32::from(u16_at(b, 34 + 2 * ib));
            let scale = (2 * ((qh >> 12) & 7) + 1) as u8;
            let shift = if qh & 0x8000 != 0 { -1 } else { 1 };
            for l in 0..4 {
                let g = 4 * ib + l;
                grid_values(u, g, u32::from(b[2 + g]) | (((qh >> (3 * l)) & 7) << 8));
                u.scales[g] = scale;
                u.shifts[g] = shift;
            }
        }
    }
}

pub mod iq1_m {
    //! IQ1_M (56 bytes per 256 values, no separate `d`): the low 8 bits of 32 grid indices, a
    //! byte per two groups of 8 (3 high index bits and the shift's sign each), and four u16 of
    //! 3-bit scales (one per 16 values) whose top nibbles together hold the f16 `d`.
    use super::*;

    pub(crate) const TYPE: GridType = GridType { block_bytes: 56, unpack, c: 1.0, shifted: true, scale_values: 16, mins: false };
    grid_row_fns!(TYPE);

    fn unpack(b: &[u8], u: &mut Unpacked) {
        let sc: [u16; 4] = core::array::from_fn(|i| u16_at(b, 48 + 2 * i));
        let d_bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        u.d = f16_at(&d_bits.to_le_bytes(), 0);
        for ib in 0..8 {
            let s = u32::from(sc[ib / 2]) >> (6 * (ib % 2));
            let scales = [(2 * (s & 7) + 1) as u8, (2 * ((s >> 3) & 7) + 1) as u8];
            for l in 0..4 {
                let g = 4 * ib + l;
                let qh = u32::from(b[32 + 2 * ib + l / 2]);
                let high = if l % 2 == 0 { (qh << 8) & 0x700 } else { (qh << 4) & 0x700 };
                grid_values(u, g, u32::from(b[g]) | high);
                u.scales[g] = scales[l / 2];
                let sign_bit = if l % 2 == 0 { 0x08 } else { 0x80 };
                u.shifts[g] = if qh & sign_bit != 0 { -1 } else { 1 };
            }
        }
    }
}
