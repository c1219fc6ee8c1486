//! The AMX tier: the AVX-512 tier's kernels, plus the prompt GEMM of the K-quant panels
//! (`k_quants`) and of Q4_0 and Q5_0 (`legacy`) on the tile unit. AMX-INT8 multiplies a 16 x K
//! tile of signed bytes by a K x 16 tile of signed bytes into 16 x 16 exact i32 sums, so a panel
//! pair's integer dot products come out whole, 16 activation rows at a time, and everything
//! after them (group scales, mins, the float chain) is the AVX-512 tile's, in the same order:
//! the same bits as every other tier. (Q8_0 keeps ggml's order, 8 float chains of 4-value
//! sums per block, which leaves the tile unit nothing whole to sum.)
//!
//! This module checks the CPU and asks Linux for the tile state (a process must request it
//! before its first tile instruction), and wraps the few tile instructions the kernels use.

use core::arch::asm;
use core::arch::x86_64::__m512;
use std::sync::OnceLock;

use crate::quant::GgmlType;

mod grid;
mod k_quants;
mod legacy;

/// Activation rows of one tile (the tile unit's 16 rows); a call takes a multiple of them.
pub(crate) const PAIR_ROWS: usize = 16;

/// `out[r]` = the 16 outputs of the panel pair (`p0`'s 8 rows, then `p1`'s; `nb` blocks each)
/// for prepared activation row `r` (rows of `stride` bytes in `acts`), `out.len()` a multiple
/// of [`PAIR_ROWS`].
pub(crate) type PairKernelFn =
    fn(p0: &[u8], p1: &[u8], nb: usize, acts: &[u8], stride: usize, scratch: &mut PairScratch, out: &mut [[f32; 16]]);

/// A pair's weights unpacked for the tile unit, reused from call to call.
#[derive(Default)]
pub(crate) struct PairScratch {
    /// Per block (K-quants: super-block): the quants in the tile layout.
    planes: Vec<u8>,
    /// Per super-block: the 16 rows' correction factors as 16-bit pairs (mins of two groups,
    /// or Q6_K's scales of two groups), for `vpdpwssd` against the activations' group sums.
    pairs: Vec<[i32; 16]>,
    /// Per block: `d` and (Q4_K, Q5_K) `dmin` of the 16 rows.
    dw: Vec<[f32; 16]>,
    dmin: Vec<[f32; 16]>,
    /// Per activation row: the float chains `acc` and `acc_min` of the 16 outputs, carried from
    /// one run of blocks to the next.
    acc: Vec<[__m512; 2]>,
}

/// Checks a pair kernel's operands: both panels hold `nb` blocks of `block` bytes, and `acts`
/// holds `rows` (a multiple of [`PAIR_ROWS`]) prepared rows of `stride` bytes, each `nb`
/// blocks of `act_block` bytes.
#[allow(clippy::too_many_arguments)]
fn check_pair(block: usize, act_block: usize, p0: &[u8], p1: &[u8], nb: usize, acts: &[u8], stride: usize, rows: usize) {
    let bytes = nb * block;
    assert!(p0.len() >= bytes && p1.len() >= bytes, "panels of {} and {} bytes for {nb} blocks", p0.len(), p1.len());
    assert!(rows > 0 && rows.is_multiple_of(PAIR_ROWS), "{rows} activation rows");
    assert!(stride >= nb * act_block && acts.len() >= (rows - 1) * stride + nb * act_block, "activation rows");
}

/// Defines the safe pair kernel `$name` ([`PairKernelFn`]) over the unsafe `$run` (the same
/// arguments, the slices as pointers): its operands checked first, for panel blocks of `$block`
/// bytes and prepared activation blocks of `$act_block`.
macro_rules! pair_entry {
    ($name:ident, $run:expr, $block:expr, $act_block:expr) => {
        fn $name(p0: &[u8], p1: &[u8], nb: usize, acts: &[u8], stride: usize, scratch: &mut PairScratch, out: &mut [[f32; 16]]) {
            super::check_pair($block, $act_block, p0, p1, nb, acts, stride, out.len());
            // SAFETY: `pair_kernel` hands this out only where `amx::is_available()`, and the
            // AMX tier includes the AVX-512 tier's features; `check_pair` checked that both
            // panels hold `nb` blocks and `acts` `out.len()` rows of `nb` blocks.
            unsafe { $run(p0.as_ptr(), p1.as_ptr(), nb, acts.as_ptr(), stride, scratch, out) }
        }
    };
}
use pair_entry;

/// The run loop of both kernel families: the pair's `nb` blocks `run_blocks` at a time, each run
/// unpacked into `s` by `unpack` (the tile configuration `config` loaded), then `rows32` over it
/// for every 32 activation rows of `rows` (rows of `stride` bytes at `acts`; a last lone 16
/// rows run as both tiles, the second one's sums unread), continuing each row's float chains
/// `[acc, acc_min]`. Returns the chains of every row, which the caller combines into its outputs
/// and hands back to `s.acc` for reuse.
///
/// # Safety
/// [`is_available`] returned true; `unpack` and `rows32` may read what the caller's operands
/// hold (checked by [`check_pair`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn run_pair(
    config: TileConfig,
    nb: usize,
    run_blocks: usize,
    acts: *const u8,
    stride: usize,
    s: &mut PairScratch,
    rows: usize,
    mut unpack: impl FnMut(std::ops::Range<usize>, &mut PairScratch),
    mut rows32: impl FnMut(&PairScratch, std::ops::Range<usize>, [*const u8; 2], &mut [[__m512; 2]]),
) -> Vec<[__m512; 2]> {
    let mut acc = std::mem::take(&mut s.acc);
    acc.clear();
    // SAFETY (caller): the CPU has AVX-512, which the zero vector needs.
    acc.resize(rows, [core::arch::x86_64::_mm512_setzero_ps(); 2]);
    config.load();
    for first in (0..nb).step_by(run_blocks) {
        let blocks = first..(first + run_blocks).min(nb);
        unpack(blocks.clone(), s);
        for (i, acc) in acc.chunks_mut(2 * PAIR_ROWS).enumerate() {
            let a0 = acts.add(2 * i * PAIR_ROWS * stride);
            let a1 = if acc.len() > PAIR_ROWS { a0.add(PAIR_ROWS * stride) } else { a0 };
            rows32(s, blocks.clone(), [a0, a1], acc);
        }
    }
    release();
    acc
}

/// The tile unit's many-row product of grid type `ty` (the grid i-quants, Q3_K, Q2_K), if the
/// CPU runs the tier.
pub(crate) fn grid_gemm(ty: GgmlType) -> Option<crate::quant::iq_grid::gemm::GridGemm> {
    if !is_available() {
        return None;
    }
    grid::gemm(ty)
}

/// The tile kernel of weight type `ty`, if the CPU runs the tier and the type has one.
pub(crate) fn pair_kernel(ty: GgmlType) -> Option<PairKernelFn> {
    if !is_available() {
        return None;
    }
    k_quants::kernel(ty).or_else(|| legacy::kernel(ty))
}

/// Whether this CPU has AMX-TILE and AMX-INT8 and the OS lets this process use them (asked once).
pub fn is_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| cpu_has_amx_int8() && request_tile_state())
}

fn cpu_has_amx_int8() -> bool {
    if core::arch::x86_64::__cpuid(0).eax < 7 {
        return false;
    }
    let edx = core::arch::x86_64::__cpuid_count(7, 0).edx;
    // EDX bit 24: AMX-TILE, bit 25: AMX-INT8
    edx & (1 << 24) != 0 && edx & (1 << 25) != 0
}

/// Linux keeps the 8 KiB tile state off until a process asks for it (`ARCH_REQ_XCOMP_PERM` for
/// `XFEATURE_XTILEDATA`); the permission then holds for every thread of the process.
#[cfg(target_os = "linux")]
fn request_tile_state() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only changes this process's permissions; it
    // reads and writes no memory of ours.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn request_tile_state() -> bool {
    false
}

/// A tile configuration (palette 1): rows and bytes per row of each of the 8 tile registers.
#[repr(C, align(64))]
pub(crate) struct TileConfig([u8; 64]);

impl TileConfig {
    /// `shapes[t] = (rows, bytes per row)` of tile `t`; the rest stay unconfigured.
    pub(crate) fn new(shapes: &[(u8, u16)]) -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for (t, &(rows, colsb)) in shapes.iter().enumerate().take(8) {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = rows;
        }
        TileConfig(c)
    }

    /// Loads the configuration into this thread's tile unit.
    ///
    /// # Safety
    /// [`is_available`] must have returned true.
    #[inline]
    pub(crate) unsafe fn load(&self) {
        // SAFETY (caller): the CPU has AMX and the process has the tile state; the pointer is
        // a valid, 64-byte aligned 64-byte configuration.
        asm!("ldtilecfg [{}]", in(reg) self.0.as_ptr(), options(nostack, readonly));
    }
}

/// Clears this thread's tile state (so context switches stop saving it).
///
/// # Safety
/// [`is_available`] must have returned true.
#[inline]
pub(crate) unsafe fn release() {
    asm!("tilerelease", options(nostack, nomem));
}

/// The tile instructions of the kernels, on fixed registers: `tmm0..tmm3` the sums (high and
/// low plane of two sets of 16 activation rows), `tmm4` / `tmm5` the two sets' activations,
/// `tmm6` / `tmm7` the high and low weight planes; all 16 rows of 64 bytes.
pub(crate) mod tile {
    use core::arch::asm;

    pub(crate) fn config() -> super::TileConfig {
        super::TileConfig::new(&[(16, 64); 8])
    }

    /// The legacy types' shapes: `tmm0` / `tmm1` the sums of two sets of 16 activation rows,
    /// `tmm4` / `tmm5` their 32 quants of one block, `tmm6` the block's weights (8 rows of 4
    /// values of 16 weight rows).
    pub(crate) fn legacy_config() -> super::TileConfig {
        super::TileConfig::new(&[(16, 64), (16, 64), (0, 0), (0, 0), (16, 32), (16, 32), (8, 64)])
    }

    /// One legacy block (32 values) of two sets of 16 activation rows (signed bytes at `acts0`
    /// and `acts1`, rows `stride` apart) times its weights at `weights` (8 rows of 64 signed
    /// bytes); the two 16 x 16 i32 sums go to `sums` (2 KiB), the first set's, then the
    /// second's.
    ///
    /// # Safety
    /// [`legacy_config`] is loaded on this thread; 16 rows of 32 bytes at each `acts` and 512
    /// bytes at `weights` may be read, `sums` may be written for 2 KiB.
    #[inline(always)]
    pub(crate) unsafe fn legacy_block(acts0: *const u8, acts1: *const u8, stride: usize, weights: *const u8, sums: *mut u8) {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tileloadd tmm4, [{a0}+{s}*1]",
            "tileloadd tmm5, [{a1}+{s}*1]",
            "tileloadd tmm6, [{w}+{ws}*1]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm5, tmm6",
            "tilestored [{c}+{ws}*1], tmm0",
            "tilestored [{c}+{ws}*1+1024], tmm1",
            a0 = in(reg) acts0,
            a1 = in(reg) acts1,
            s = in(reg) stride,
            w = in(reg) weights,
            ws = in(reg) 64usize,
            c = in(reg) sums,
            options(nostack),
        );
    }

    /// One block (256 values, 4 steps of 64) of 16 weight rows' planes at `planes` (per row its
    /// high plane's 256 signed bytes, then its low plane's) by two bands of 16 activation rows
    /// at `band0` and `band1` (each 64 vectors of 64 bytes: 4 unsigned quants of each row), by
    /// `tdpbsud`; the four 16 x 16 i32 sums (row: weight row, lane: activation row) go to
    /// `sums` (4 KiB): the high and the low plane's against the first band, then the second.
    ///
    /// # Safety
    /// [`config`] is loaded on this thread; 8 KiB at `planes` and 4 KiB at each band may be
    /// read, `sums` may be written for 4 KiB.
    #[inline(always)]
    pub(crate) unsafe fn grid_block(planes: *const u8, band0: *const u8, band1: *const u8, sums: *mut u8) {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{w}+{ws}*1]",
            "tileloadd tmm5, [{w}+{ws}*1+256]",
            "tileloadd tmm6, [{a0}+{s}*1]",
            "tileloadd tmm7, [{a1}+{s}*1]",
            "tdpbsud tmm0, tmm4, tmm6",
            "tdpbsud tmm1, tmm5, tmm6",
            "tdpbsud tmm2, tmm4, tmm7",
            "tdpbsud tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{w}+{ws}*1+64]",
            "tileloadd tmm5, [{w}+{ws}*1+320]",
            "tileloadd tmm6, [{a0}+{s}*1+1024]",
            "tileloadd tmm7, [{a1}+{s}*1+1024]",
            "tdpbsud tmm0, tmm4, tmm6",
            "tdpbsud tmm1, tmm5, tmm6",
            "tdpbsud tmm2, tmm4, tmm7",
            "tdpbsud tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{w}+{ws}*1+128]",
            "tileloadd tmm5, [{w}+{ws}*1+384]",
            "tileloadd tmm6, [{a0}+{s}*1+2048]",
            "tileloadd tmm7, [{a1}+{s}*1+2048]",
            "tdpbsud tmm0, tmm4, tmm6",
            "tdpbsud tmm1, tmm5, tmm6",
            "tdpbsud tmm2, tmm4, tmm7",
            "tdpbsud tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{w}+{ws}*1+192]",
            "tileloadd tmm5, [{w}+{ws}*1+448]",
            "tileloadd tmm6, [{a0}+{s}*1+3072]",
            "tileloadd tmm7, [{a1}+{s}*1+3072]",
            "tdpbsud tmm0, tmm4, tmm6",
            "tdpbsud tmm1, tmm5, tmm6",
            "tdpbsud tmm2, tmm4, tmm7",
            "tdpbsud tmm3, tmm5, tmm7",
            "tilestored [{c}+{s}*1], tmm0",
            "tilestored [{c}+{s}*1+1024], tmm1",
            "tilestored [{c}+{s}*1+2048], tmm2",
            "tilestored [{c}+{s}*1+3072], tmm3",
            w = in(reg) planes,
            ws = in(reg) 512usize,
            a0 = in(reg) band0,
            a1 = in(reg) band1,
            s = in(reg) 64usize,
            c = in(reg) sums,
            options(nostack),
        );
    }

    /// One super-block (256 values, 4 steps of 64) of two sets of 16 activation rows (signed
    /// bytes at `acts0` and `acts1`, rows `stride` apart) times a pair's two weight planes at
    /// `planes` (per step: the high plane, then the low one, 16 rows of 64 signed bytes each);
    /// the four 16 x 16 i32 sums go to `sums` (4 KiB): high and low of the first set, then of
    /// the second.
    ///
    /// # Safety
    /// [`config`] is loaded on this thread; 16 rows of 256 bytes at each `acts` and 8 KiB at
    /// `planes` may be read, `sums` may be written for 4 KiB.
    #[inline(always)]
    pub(crate) unsafe fn super_block(acts0: *const u8, acts1: *const u8, stride: usize, planes: *const u8, sums: *mut u8) {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{a0}+{s}*1]",
            "tileloadd tmm5, [{a1}+{s}*1]",
            "tileloadd tmm6, [{w}+{ws}*1]",
            "tileloadd tmm7, [{w}+{ws}*1+1024]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{a0}+{s}*1+64]",
            "tileloadd tmm5, [{a1}+{s}*1+64]",
            "tileloadd tmm6, [{w}+{ws}*1+2048]",
            "tileloadd tmm7, [{w}+{ws}*1+3072]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{a0}+{s}*1+128]",
            "tileloadd tmm5, [{a1}+{s}*1+128]",
            "tileloadd tmm6, [{w}+{ws}*1+4096]",
            "tileloadd tmm7, [{w}+{ws}*1+5120]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tileloadd tmm4, [{a0}+{s}*1+192]",
            "tileloadd tmm5, [{a1}+{s}*1+192]",
            "tileloadd tmm6, [{w}+{ws}*1+6144]",
            "tileloadd tmm7, [{w}+{ws}*1+7168]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tilestored [{c}+{ws}*1], tmm0",
            "tilestored [{c}+{ws}*1+1024], tmm1",
            "tilestored [{c}+{ws}*1+2048], tmm2",
            "tilestored [{c}+{ws}*1+3072], tmm3",
            a0 = in(reg) acts0,
            a1 = in(reg) acts1,
            s = in(reg) stride,
            w = in(reg) planes,
            ws = in(reg) 64usize,
            c = in(reg) sums,
            options(nostack),
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{pair_kernel, PairScratch, PAIR_ROWS};
    use crate::quant::panel::layout::repack;
    use crate::quant::panel::prepared::prepared_row_bytes;
    use crate::quant::panel::scalar;
    use crate::quant::panel::tests::Case;

    /// `case` through its type's pair kernel, panel pair by panel pair over its whole 16-row
    /// groups: every output has the reference kernel's bits.
    pub(crate) fn check(case: &Case, what: &str) {
        let kernel = pair_kernel(case.ty).expect("a tile kernel");
        let want = case.run(scalar::kernel(case.ty).unwrap(), 1);
        let panels = repack(case.ty, case.rows, case.cols, &case.weights).unwrap();
        let stride = prepared_row_bytes(panels.layout.act_ty, panels.blocks);
        let batch = case.prepared.len() / stride;
        let whole = batch / PAIR_ROWS * PAIR_ROWS;
        let mut scratch = PairScratch::default();
        for p in (0..panels.panel_count() - 1).step_by(2) {
            let mut out = vec![[0.0f32; 16]; whole];
            kernel(panels.panel(p), panels.panel(p + 1), panels.blocks, &case.prepared, stride, &mut scratch, &mut out);
            for (b, row) in out.iter().enumerate() {
                for (i, v) in row.iter().enumerate().filter(|(i, _)| 8 * p + i < case.rows) {
                    let w = want[b * case.rows + 8 * p + i];
                    assert_eq!(v.to_bits(), w.to_bits(), "{} {what}: act {b}, row {}: {v} vs {w}", case.ty, 8 * p + i);
                }
            }
        }
    }
}
