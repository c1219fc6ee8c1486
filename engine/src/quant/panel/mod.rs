//! Weight panels: matrices repacked at load into 8-row panels for the prompt GEMM and the
//! decode GEMV alike (Q4_0, Q5_0, Q8_0, the K-quants Q4_K / Q5_K / Q6_K, and the table-level
//! IQ4_NL, IQ4_XS and MXFP4, whose index nibbles are looked up as levels by one `vpshufb` per
//! vector).
//!
//! A panel holds 8 consecutive weight rows, block column after block column. Within a block
//! (32 values; a K-quant super-block is 8 such chunks), the quants are interleaved 4 values at a
//! time: vector `V_k` (32 bytes) holds values `4k..4k+4` of row 0, then of row 1, ... row 7.
//! One multiply of `V_k` by the activation's values `4k..4k+4` broadcast to all lanes gives each
//! row's partial sum in its own 32-bit lane, so a block's 8 integer dot products come out side
//! by side, with no horizontal sums, and each activation row costs one broadcast per 4 values.
//!
//! **The order of the sums** (what every tier computes, bit for bit): per output (weight row,
//! activation row), each block's dot product is an exact integer (the tiers only regroup
//! integer additions, never past i16 or i32 range); its float accumulation is one fused
//! multiply-add chain over the blocks in order, `acc = fma(isum, d_w * d_a, acc)` (and
//! `acc_min` likewise for the K-quant mins, `acc - acc_min` at the end). So an output has the
//! same bits whatever the batch, the tile it falls in, the thread count, or the tier: decoding
//! one row is the one-row case of the same kernel. [`scalar`] is the reference that defines it.
//!
//! Activations are prepared once per matmul call from their quantized rows (Q8_0 for the
//! legacy types, Q8_K for the K-quants): `d` as f32 and the sums of their quants that the
//! weights' offsets and mins need (see [`prepared`]).

pub mod layout;
pub mod prepared;
pub mod scalar;

pub use layout::{repack, PanelLayout, Panels, PANEL_ROWS};
pub use prepared::prepare_row;

use crate::quant::{GgmlType, Isa};

/// Activation rows one kernel call takes at most (the register tile is 8 weight rows by this).
pub const TILE_ROWS: usize = 4;

/// `out[r]` = the 8 outputs of one panel (`nb` blocks at the start of `panel`) for prepared
/// activation row `r` (rows of `stride` bytes in `acts`), for `out.len()` rows (1..=TILE_ROWS).
pub type PanelKernelFn = fn(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]);

/// `out[r]` = the 16 outputs of two consecutive panels (`panels` holds both, `nb` blocks each)
/// for prepared activation row `r`, as a [`PanelKernelFn`] gives each panel's 8: the same bits.
pub type PanelPairKernelFn = fn(panels: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]);

/// The panel-pair kernel of `ty` on tier `isa`, where the tier has one (AVX-512's 512-bit
/// vectors hold 16 rows' lanes).
pub fn pair_kernel_on(ty: GgmlType, isa: Isa) -> Option<PanelPairKernelFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if isa.is_available() => crate::quant::x86::avx512::pair_kernel(ty),
        _ => None,
    }
}

/// The panel kernel of weight type `ty` on tier `isa` (the scalar reference on the scalar tier
/// and for types a tier lacks); `None` for types that are not repacked.
pub fn kernel_on(ty: GgmlType, isa: Isa) -> Option<PanelKernelFn> {
    PanelLayout::of(ty)?;
    let simd = match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.is_available() => crate::quant::x86::avx2::panel_kernel(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if isa.is_available() => crate::quant::x86::avx512::panel_kernel(ty),
        _ => None,
    };
    simd.or_else(|| scalar::kernel(ty))
}

/// A row dot in the order of `ty`'s panel kernel on tier `isa` (the same bits as the panels give
/// a row), for products of fewer rows than the layout's `min_batch`, where the tier has one:
/// Q6_K's on the AVX2 and AVX-512 tiers (each block's exact integer sum, then one fused
/// multiply-add per block, as the tile does for each of its rows).
pub fn row_dot_on(ty: GgmlType, isa: Isa) -> Option<crate::quant::dispatch::VecDotFn> {
    match (ty, isa) {
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q6_K, Isa::Avx2) if isa.is_available() => Some(crate::quant::x86::avx2::vec_dot_q6_k_blockwise),
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q6_K, Isa::Avx512 | Isa::Amx) if isa.is_available() => Some(crate::quant::x86::avx512::vec_dot_q6_k_blockwise),
        _ => None,
    }
}

/// Checks a kernel call's operands: `panel` holds `nb` blocks of `ty`'s panel layout, `acts`
/// holds `out.len()` (1..=TILE_ROWS) prepared rows of `stride` bytes, each of `nb` blocks.
pub(crate) fn check_call(ty: GgmlType, panel: &[u8], nb: usize, acts: &[u8], stride: usize, rows: usize) {
    let l = PanelLayout::of(ty).expect("a repacked type");
    assert!((1..=TILE_ROWS).contains(&rows), "{rows} activation rows");
    assert!(panel.len() >= nb * l.block_bytes, "a panel of {} bytes for {nb} blocks", panel.len());
    assert!(stride >= nb * l.act_block_bytes && acts.len() >= (rows - 1) * stride + nb * l.act_block_bytes, "activation rows");
}

#[cfg(test)]
pub(crate) mod tests;
