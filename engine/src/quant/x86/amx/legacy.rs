//! The Q4_0 and Q5_0 prompt GEMM on the tile unit: a panel pair (16 weight rows) times 32
//! activation rows at a time, block by block.
//!
//! A call first unpacks a run of the pair's blocks into the tile layout: per block 8 rows of 64
//! signed bytes, row `k` holding values `4k..4k+4` of the 16 weight rows (`p0`'s 8, then
//! `p1`'s), each quant minus its offset (Q4_0: 8, Q5_0: 16). One `tdpbssd` per block and 16
//! activation rows gives the 16 x 16 exact sums `Σ (q - off) a`, which is the reference's
//! `Σ q a - off Σ a`. The float chain then runs as the vector tiles run it,
//! `acc = fma(isum, d_w * d_a, acc)` over the blocks in order: the same bits.

use core::arch::x86_64::*;

use super::{run_pair, tile, PairScratch, PAIR_ROWS};
use crate::quant::panel::layout::{at, block_bytes, ACT_LEGACY_BYTES};
use crate::quant::panel::prepared::{LEGACY_D, LEGACY_QS};
use crate::quant::x86::panel::{add_fifth_bits, f32_at, load128, nibbles};
use crate::quant::GgmlType;

/// Bytes of a pair's block in the tile layout: 8 rows of 4 values of 16 weight rows.
const BLOCK_PLANE: usize = 8 * 64;

/// Blocks unpacked and run at a time: their planes (8 KiB) stay in L1 while every 32
/// activation rows of the call pass over them.
const RUN_BLOCKS: usize = 16;

/// `Q5`: Q5_0 (fifth bits, offset 16), else Q4_0 (offset 8).
const fn block_size(q5: bool) -> usize {
    if q5 {
        block_bytes::Q5_0
    } else {
        block_bytes::Q4_0
    }
}

/// The tile kernel of legacy type `ty`.
pub(super) fn kernel(ty: GgmlType) -> Option<super::PairKernelFn> {
    Some(match ty {
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q5_0 => q5_0,
        _ => return None,
    })
}

super::pair_entry!(q4_0, run::<false>, block_bytes::Q4_0, ACT_LEGACY_BYTES);
super::pair_entry!(q5_0, run::<true>, block_bytes::Q5_0, ACT_LEGACY_BYTES);

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn run<const Q5: bool>(
    p0: *const u8,
    p1: *const u8,
    nb: usize,
    acts: *const u8,
    stride: usize,
    s: &mut PairScratch,
    out: &mut [[f32; 16]],
) {
    let unpack = |blocks, s: &mut PairScratch| unpack::<Q5>(p0, p1, blocks, s);
    let acc =
        run_pair(tile::legacy_config(), nb, RUN_BLOCKS, acts, stride, s, out.len(), unpack, |s, b, a, acc| rows32(s, b, a, stride, acc));
    for (out, [acc, _]) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(out.as_mut_ptr(), *acc);
    }
    s.acc = acc;
}

/// Unpacks blocks `blocks` of the panels `p0` and `p1` into `s` (from its start).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack<const Q5: bool>(p0: *const u8, p1: *const u8, blocks: std::ops::Range<usize>, s: &mut PairScratch) {
    let nb = blocks.len();
    s.planes.resize(nb * BLOCK_PLANE, 0);
    s.dw.resize(nb, [0.0; 16]);
    let offset = _mm256_set1_epi8(if Q5 { 16 } else { 8 });
    for (b, block) in blocks.enumerate() {
        for (half, panel) in [p0, p1].into_iter().enumerate() {
            let w = panel.add(block * block_size(Q5));
            let mut v = nibbles(w.add(at::LEGACY_QUANTS));
            if Q5 {
                add_fifth_bits(&mut v, w.add(at::Q5_0_HIGH));
            }
            let plane = s.planes.as_mut_ptr().add(b * BLOCK_PLANE + 32 * half);
            for (k, v) in v.iter().enumerate() {
                _mm256_storeu_si256(plane.add(64 * k).cast(), _mm256_sub_epi8(*v, offset));
            }
            _mm256_storeu_ps(s.dw[b][8 * half..].as_mut_ptr(), _mm256_cvtph_ps(load128(w.add(at::D))));
        }
    }
}

/// The two tiles of a block's sums, as the tile unit stores them: the first 16 activation
/// rows', then the second's.
#[repr(C, align(64))]
struct Sums([[[i32; 16]; 16]; 2]);

/// The activation rows at `acts[0]` and `acts[1]` (16 each) times blocks `blocks` of the
/// unpacked pair, continuing the rows' float chains `acc` (32 rows, or 16: the second tile's
/// sums are then not read).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn rows32(s: &PairScratch, blocks: std::ops::Range<usize>, acts: [*const u8; 2], stride: usize, acc: &mut [[__m512; 2]]) {
    let mut sums = Sums([[[0; 16]; 16]; 2]);
    for (b, block) in blocks.enumerate() {
        let a = acts.map(|a| a.add(block * ACT_LEGACY_BYTES));
        tile::legacy_block(
            a[0].add(LEGACY_QS),
            a[1].add(LEGACY_QS),
            stride,
            s.planes.as_ptr().add(b * BLOCK_PLANE),
            sums.0.as_mut_ptr().cast(),
        );
        let dw = _mm512_loadu_ps(s.dw[b].as_ptr());
        for (i, [acc, _]) in acc.iter_mut().enumerate() {
            let (t, r) = (i / PAIR_ROWS, i % PAIR_ROWS);
            let isum = _mm512_load_si512(sums.0[t][r].as_ptr().cast());
            let da = _mm512_set1_ps(f32_at(a[t].add(r * stride + LEGACY_D)));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), *acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::panel::tests::Case;
    use crate::quant::x86::amx::tests::check;

    /// Q4_0's and Q5_0's tile kernels give the reference's bits: one block and runs of more
    /// than `RUN_BLOCKS`, a partial last pair, several 16-row groups and a lone last one, the
    /// scratch reused across shapes.
    #[test]
    fn tile_kernels_give_the_reference_bits() {
        if !crate::quant::Isa::Amx.is_available() {
            return;
        }
        for ty in [GgmlType::Q4_0, GgmlType::Q5_0] {
            for (rows, blocks, batch) in [(16, 1, 16), (29, 3, 48), (40, 28, 35), (32, 17, 70)] {
                check(&Case::new(ty, rows, blocks, batch, 5 + rows as u32), &format!("{rows}x{blocks}, batch {batch}"));
            }
        }
    }

    /// Quants at the ends of their ranges (scales of 1) times activations of ±127: the bits stay
    /// the reference's.
    #[test]
    fn extreme_quants_stay_exact() {
        if !crate::quant::Isa::Amx.is_available() {
            return;
        }
        for ty in [GgmlType::Q4_0, GgmlType::Q5_0] {
            for (wbyte, abyte) in [(0xFFu8, 127i8), (0xFF, -127), (0x00, 127), (0x00, -127)] {
                let mut case = Case::uniform(ty, 16, 2, 16, wbyte, abyte);
                // so the sums reach the output
                case.set_unit_scales();
                check(&case, &format!("{wbyte:#x} x {abyte}"));
            }
        }
    }
}
