//! Tier-independent pieces of the x86 kernels, shared by both tiers.
//!
//! Block sizes, row-length checks, plain field reads and scale unpacking, and the macros that
//! stamp out each tier's safe entry points and legacy-quant row loops.
//!
//! The field reads and scale unpacking use no SIMD and are `#[inline(always)]`, so they compile
//! into whichever tier's `#[target_feature]` kernel calls them; the macros expand in the tier's
//! own module with the tier's feature list. The few SIMD helpers here are enabled for AVX2 +
//! FMA + F16C only: every AVX-512 kernel has those features too, so they inline into both tiers.

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use crate::quant::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
};
use crate::quant::QK_K;

// ---------------------------------------------------------------------------------------------
// Block sizes.

/// Bytes of one legacy block (32 values) of each type.
pub(super) const Q4_0: usize = size_of::<BlockQ4_0>();
pub(super) const Q4_1: usize = size_of::<BlockQ4_1>();
pub(super) const Q5_0: usize = size_of::<BlockQ5_0>();
pub(super) const Q5_1: usize = size_of::<BlockQ5_1>();
pub(super) const Q8_0: usize = size_of::<BlockQ8_0>();
pub(super) const Q8_1: usize = size_of::<BlockQ8_1>();

/// Bytes of one Q8_K activation block: f32 `d`, 256 `qs`, 16 i16 `bsums`.
pub(super) const Q8K_BYTES: usize = size_of::<BlockQ8K>();
/// Offset of `qs` and of `bsums` in a Q8_K block.
pub(super) const Q8K_QS: usize = offset_of!(BlockQ8K, qs);
pub(super) const Q8K_BSUMS: usize = offset_of!(BlockQ8K, bsums);

/// Bytes of one K-quant weight super-block (`QK_K` values) of each type.
pub(super) const Q2K_BYTES: usize = size_of::<BlockQ2K>();
pub(super) const Q3K_BYTES: usize = size_of::<BlockQ3K>();
pub(super) const Q4K_BYTES: usize = size_of::<BlockQ4K>();
pub(super) const Q5K_BYTES: usize = size_of::<BlockQ5K>();
pub(super) const Q6K_BYTES: usize = size_of::<BlockQ6K>();

// ---------------------------------------------------------------------------------------------
// Row-length checks: the kernels read and write through raw pointers, so the safe entry points
// check every length first.

/// Units (blocks, or values of a float type) in a weight row of `w` bytes (`wb` per unit);
/// panics unless the row is whole units and the other row (`a`, `ab` per unit) has as many.
#[inline]
pub(super) fn blocks(w: usize, wb: usize, a: usize, ab: usize) -> usize {
    let nb = w / wb;
    assert!(w.is_multiple_of(wb) && a == nb * ab, "row lengths: {w} weight bytes vs {a} activation bytes");
    nb
}

/// Super-blocks in a dequantize call; panics unless `w` is whole blocks of `block_bytes` and
/// `out` has exactly their values (the kernels read and write through raw pointers).
#[inline]
pub(super) fn dequant_blocks(w: &[u8], out: &[f32], block_bytes: usize) -> usize {
    let nb = w.len() / block_bytes;
    assert!(
        w.len().is_multiple_of(block_bytes) && out.len() == nb * QK_K,
        "dequantize: {} bytes of {block_bytes}-byte blocks into {} values",
        w.len(),
        out.len()
    );
    nb
}

/// Super-blocks in a dot-product call; panics unless `w` is whole blocks of `block_bytes` and
/// `a` holds as many Q8_K blocks.
#[inline]
pub(super) fn dot_blocks(w: &[u8], a: &[u8], block_bytes: usize) -> usize {
    let nb = w.len() / block_bytes;
    assert!(
        w.len().is_multiple_of(block_bytes) && a.len() == nb * Q8K_BYTES,
        "vec_dot: {} weight bytes of {block_bytes}-byte blocks against {} Q8_K bytes",
        w.len(),
        a.len()
    );
    nb
}

/// F32 rows need no conversion, so every tier dequantizes them the same way.
pub(super) fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    // The bytes are the values: copy them into the output's bytes (any alignment).
    bytemuck::cast_slice_mut::<f32, u8>(out).copy_from_slice(bytes);
}

// ---------------------------------------------------------------------------------------------
// Plain reads of little-endian fields. Every `unsafe fn` here reads through a raw pointer:
// callers guarantee that the bytes exist (reads are unaligned).

// The `le*` reads go through byte arrays, as the legacy kernels' vector loads do (see the
// tiers' `legacy.rs`): plain moves, even in builds with debug assertions.

/// Two little-endian bytes at `p` (an f16's bits), widened.
#[inline(always)]
pub(super) unsafe fn le16(p: *const u8) -> u64 {
    u16::from_le_bytes(*(p as *const [u8; 2])) as u64
}

/// Four little-endian bytes at `p`, widened.
#[inline(always)]
pub(super) unsafe fn le32(p: *const u8) -> u64 {
    u32::from_le_bytes(*(p as *const [u8; 4])) as u64
}

/// Eight little-endian bytes at `p`.
#[inline(always)]
pub(super) unsafe fn le64(p: *const u8) -> i64 {
    i64::from_le_bytes(*(p as *const [u8; 8]))
}

/// The little-endian u32 at `p`.
#[inline(always)]
pub(super) unsafe fn rd_u32(p: *const u8) -> u32 {
    u32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// The little-endian f32 at `p` (a Q8_K `d`).
#[inline(always)]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    f32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

// ---------------------------------------------------------------------------------------------
// K-quant scale unpacking (scalar bit twiddling on three u32 words).

/// The 8 scales and 8 mins (6 bits each) of a Q4_K / Q5_K super-block from its 12 packed
/// bytes at `p`, as the bytes of two little-endian u64s.
#[inline(always)]
pub(super) unsafe fn unpack_scales_mins_k4(p: *const u8) -> (u64, u64) {
    let (s0, s1, s2) = (rd_u32(p), rd_u32(p.add(4)), rd_u32(p.add(8)));
    // Groups 0..4 keep the low 6 bits of bytes 0..4 (scales) and 4..8 (mins); groups 4..8
    // take 4 low bits from bytes 8..12 and their top 2 bits from the tops of bytes 0..8.
    let sc_lo = s0 & 0x3f3f_3f3f;
    let mn_lo = s1 & 0x3f3f_3f3f;
    let sc_hi = (s2 & 0x0f0f_0f0f) | (((s0 >> 6) & 0x0303_0303) << 4);
    let mn_hi = ((s2 >> 4) & 0x0f0f_0f0f) | (((s1 >> 6) & 0x0303_0303) << 4);
    (sc_lo as u64 | (sc_hi as u64) << 32, mn_lo as u64 | (mn_hi as u64) << 32)
}

/// The 16 6-bit scales of a Q3_K super-block from its 12 packed bytes at `p`, unsigned
/// (0..64, the stored value is this minus 32), as the bytes of two little-endian u64s.
#[inline(always)]
pub(super) unsafe fn unpack_scales_q3k(p: *const u8) -> (u64, u64) {
    let (a0, a1, t) = (rd_u32(p), rd_u32(p.add(4)), rd_u32(p.add(8)));
    // Low 4 bits: nibbles of bytes 0..8 (low nibbles for scales 0..8, high for 8..16);
    // high 2 bits: the four 2-bit fields of bytes 8..12.
    let s0 = (a0 & 0x0f0f_0f0f) | ((t & 0x0303_0303) << 4);
    let s1 = (a1 & 0x0f0f_0f0f) | (((t >> 2) & 0x0303_0303) << 4);
    let s2 = ((a0 >> 4) & 0x0f0f_0f0f) | (((t >> 4) & 0x0303_0303) << 4);
    let s3 = ((a1 >> 4) & 0x0f0f_0f0f) | (((t >> 6) & 0x0303_0303) << 4);
    (s0 as u64 | (s1 as u64) << 32, s2 as u64 | (s3 as u64) << 32)
}

// ---------------------------------------------------------------------------------------------
// Safe entry points. Each tier names the features its kernels enable (`$tier`); dispatch
// hands a tier's kernels out only after `Isa::is_available` confirmed all of them.

/// Generates the safe row entry points (visible to the calling module's parent) around pairs
/// of `unsafe` K-quant kernels `$deq_impl(w, out, nb)` / `$dot_impl(w, a, nb)` over
/// super-blocks of `$bytes` bytes, dotted with Q8_K activations.
macro_rules! row_entry_points {
    ($tier:literal; $($deq:ident => $deq_impl:ident, $dot:ident => $dot_impl:ident, $bytes:expr;)*) => {$(
        #[doc = concat!("Checks the row lengths and runs the ", $tier, " kernel.")]
        pub(super) fn $deq(w: &[u8], out: &mut [f32]) {
            let nb = $crate::quant::x86::common::dequant_blocks(w, out, $bytes);
            // SAFETY: dispatch hands out this tier's kernels only after detecting every
            // feature they enable (the tier named in the doc line); `dequant_blocks` checked
            // that `w` holds `nb` blocks and `out` `nb * QK_K` values, which is all the kernel
            // reads and writes.
            unsafe { $deq_impl(w.as_ptr(), out.as_mut_ptr(), nb) }
        }

        #[doc = concat!("Checks the row lengths and runs the ", $tier, " kernel.")]
        pub(super) fn $dot(w: &[u8], a: &[u8]) -> f32 {
            let nb = $crate::quant::x86::common::dot_blocks(w, a, $bytes);
            // SAFETY: as above; `dot_blocks` checked that `w` and `a` hold `nb` blocks each.
            unsafe { $dot_impl(w.as_ptr(), a.as_ptr(), nb) }
        }
    )*};
}
pub(super) use row_entry_points;

/// Generates the safe row entry points around `unsafe` legacy-quant and float kernels:
/// `$dot_impl(w, a, n)` over `n` units of `$wb` weight bytes and `$ab` activation bytes, and
/// `$deq_impl(bytes, out, n)` over `n` units of `$qb` bytes and `$vals` output values.
macro_rules! entry_points {
    (
        $tier:literal;
        dot { $($dot:ident => $dot_impl:ident, $wb:expr, $ab:expr;)* }
        dequantize { $($deq:ident => $deq_impl:ident, $qb:expr, $vals:expr;)* }
    ) => {
        $(
            #[doc = concat!("Checks the row lengths and runs the ", $tier, " kernel.")]
            fn $dot(w: &[u8], a: &[u8]) -> f32 {
                let n = $crate::quant::x86::common::blocks(w.len(), $wb, a.len(), $ab);
                // SAFETY: dispatch hands out this tier's kernels only after detecting every
                // feature they enable (the tier named in the doc line); `blocks` checked that
                // both rows hold `n` whole units, which is all the kernel reads.
                unsafe { $dot_impl(w.as_ptr(), a.as_ptr(), n) }
            }
        )*
        $(
            #[doc = concat!("Checks the row lengths and runs the ", $tier, " kernel.")]
            fn $deq(bytes: &[u8], out: &mut [f32]) {
                let n = $crate::quant::x86::common::blocks(bytes.len(), $qb, out.len(), $vals);
                // SAFETY: as above (features checked by dispatch); `bytes` holds `n` units and
                // `out` exactly their values, which is all the kernel reads and writes.
                unsafe { $deq_impl(bytes.as_ptr(), out.as_mut_ptr(), n) }
            }
        )*
    };
}
pub(super) use entry_points;

/// Defines each line's checked entry point `$entry` (a [`crate::quant::dispatch::VecDotTileFn`])
/// of tile kernel `$kernel`, for weights of `$size` bytes a value.
macro_rules! tile_entries {
    ($tier:literal; $($entry:ident => $kernel:ident, $size:expr;)*) => {$(
        #[doc = concat!("Checks the rows' extents and runs the ", $tier, " tile kernel.")]
        fn $entry(w: &[u8], w_stride: usize, a: &[u8], a_stride: usize, n: usize, out: &mut [[f32; TILE_A]; TILE_W]) {
            assert!(w.len() >= (TILE_W - 1) * w_stride + $size * n, "{} weight bytes for {TILE_W} rows of {n} values", w.len());
            assert!(a.len() >= (TILE_A - 1) * a_stride + 4 * n, "{} activation bytes for {TILE_A} rows of {n} values", a.len());
            // SAFETY: dispatch hands out this tier's kernels only after detecting every feature
            // they enable (the tier named in the doc line); the asserts above checked that every
            // row read (`n` values at its stride) lies inside the slices.
            unsafe { $kernel(w.as_ptr(), w_stride, a.as_ptr(), a_stride, n, out) }
        }
    )*};
}
pub(crate) use tile_entries;

// ---------------------------------------------------------------------------------------------
// Row loops of the legacy-quant kernels, around a tier's per-block code. `$features` is the
// tier's `#[target_feature]` list, so that the per-block helpers inline into the loop.

/// Defines `$name(w, a, nb)` for each line: the dot product of `nb` weight blocks of `$wb`
/// bytes with `nb` activation blocks of `$ab` bytes, running `$group` over each group of four
/// blocks into an `$acc` (the calling module's accumulator: `new`, then `sum`). A row's last
/// partial group is copied into zeroed buffers (zero blocks add exactly nothing), so every
/// group takes one path.
macro_rules! legacy_dot_rows {
    ($features:literal, $acc:ident; $($name:ident => $group:ident, $wb:expr, $ab:expr;)*) => {$(
        #[target_feature(enable = $features)]
        unsafe fn $name(w: *const u8, a: *const u8, nb: usize) -> f32 {
            let mut acc = $acc::new();
            let full = nb / 4;
            let (mut wt, mut at) = ([0u8; 4 * $wb], [0u8; 4 * $ab]);
            for g in 0..nb.div_ceil(4) {
                let (mut x, mut y) = (w.add(g * 4 * $wb), a.add(g * 4 * $ab));
                if g == full {
                    let rest = nb - 4 * full;
                    ::core::ptr::copy_nonoverlapping(x, wt.as_mut_ptr(), rest * $wb);
                    ::core::ptr::copy_nonoverlapping(y, at.as_mut_ptr(), rest * $ab);
                    (x, y) = (wt.as_ptr(), at.as_ptr());
                }
                // One call site, so the group is inlined into the loop.
                $group(x, y, &mut acc);
            }
            acc.sum()
        }
    )*};
}
pub(super) use legacy_dot_rows;

/// Defines `$name(x, out, nb)`, dequantizing `nb` legacy blocks of `$bytes` bytes (32 values
/// each) with `$block`, which sees the block as `$x` and its 32 output values as `$out`.
macro_rules! legacy_deq_rows {
    ($features:literal, $name:ident, $bytes:expr, |$x:ident, $out:ident| $block:block) => {
        #[target_feature(enable = $features)]
        unsafe fn $name(x: *const u8, out: *mut f32, nb: usize) {
            for i in 0..nb {
                let ($x, $out) = (x.add(i * $bytes), out.add(i * 32));
                $block
            }
        }
    };
}
pub(super) use legacy_deq_rows;

// ---------------------------------------------------------------------------------------------
// SIMD helpers shared by both tiers (AVX2 + FMA + F16C, a subset of the AVX-512 tier).

/// The two little-endian IEEE halves at `p` and `p + 2`, widened exactly. One zero-extending
/// 32-bit load: a 16-bit insert would merge into (and so falsely depend on) whatever its
/// register last held.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_pair(p: *const u8) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_loadu_si32(p));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The 16 bytes of two u64s (low first) in an xmm register.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn xmm_u64x2(lo: u64, hi: u64) -> __m128i {
    _mm_set_epi64x(hi as i64, lo as i64)
}

/// Sum of 8 f32 lanes in a fixed order: halves, then pairs (ggml's `hsum_float_8`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The exact sum of the eight i32 lanes of `v` (wrapping, as the lanes' own sums do).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum256_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// The exact sums of the eight i32 lanes of `a` and of `b` (wrapping), reduced together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum256_epi32_pair(a: __m256i, b: __m256i) -> (i32, i32) {
    // lanes: a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7
    let h = _mm256_hadd_epi32(a, b);
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let s = _mm_hadd_epi32(s, s); // a, b, a, b
    (_mm_cvtsi128_si32(s), _mm_extract_epi32::<1>(s))
}

/// The running sum of a K-quant dot product over its super-blocks, given each block's eight i32
/// lane sums and scale: eight lanes of float sums added at the end (ggml's order), or with
/// `BLOCKWISE` each block's exact integer total in one fused multiply-add (the panel kernels'
/// order, see `quant::panel::row_dot_on`).
pub(super) struct BlockSums<const BLOCKWISE: bool> {
    lanes: __m256,
    total: f32,
}

impl<const BLOCKWISE: bool> BlockSums<BLOCKWISE> {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn new() -> Self {
        BlockSums { lanes: _mm256_setzero_ps(), total: 0.0 }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn add(&mut self, sumi: __m256i, d: f32) {
        if BLOCKWISE {
            self.total = (hsum256_epi32(sumi) as f32).mul_add(d, self.total);
        } else {
            self.lanes = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), self.lanes);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn sum(&self) -> f32 {
        if BLOCKWISE {
            self.total
        } else {
            hsum256(self.lanes)
        }
    }
}

/// The checked entry point of a tier's block-wise row dot `$impl::<true>` over blocks of
/// `$bytes` (see [`BlockSums`]).
macro_rules! blockwise_entry {
    ($name:ident => $impl:ident, $bytes:expr) => {
        #[doc = concat!("`", stringify!($impl), "` in the panel kernels' order, checked like the others.")]
        pub(crate) fn $name(w: &[u8], a: &[u8]) -> f32 {
            let nb = $crate::quant::x86::common::dot_blocks(w, a, $bytes);
            // SAFETY: `quant::panel::row_dot_on` hands this out only where the tier's features
            // were detected; `dot_blocks` checked that `w` and `a` hold `nb` blocks each.
            unsafe { $impl::<true>(w.as_ptr(), a.as_ptr(), nb) }
        }
    };
}
pub(super) use blockwise_entry;

/// The running sum of a Q8_0 dot product on both tiers: one vector of eight lanes that every
/// block is added into in turn, ggml's order (see `q8_0::vec_dot_ref`). Eight lanes on the
/// AVX-512 tier too: the order, not the width, fixes the result.
pub(super) struct Chain(__m256);

impl Chain {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn new() -> Chain {
        Chain(_mm256_setzero_ps())
    }

    /// Adds one block's exact integer lane sums, scaled by `d_w * d_a` in every lane.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn add(&mut self, sumi: __m256i, scale: __m256) {
        self.0 = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sumi), self.0);
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn sum(self) -> f32 {
        hsum256(self.0)
    }
}
