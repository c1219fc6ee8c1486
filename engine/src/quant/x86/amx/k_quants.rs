//! The K-quant prompt GEMM on the tile unit (Q4_K, Q5_K, Q6_K): a panel pair (16 weight rows)
//! times 32 activation rows at a time.
//!
//! The group scales go into the weights: a call first unpacks the pair's super-blocks, each
//! quant times its group's scale (`w s`, at most 10 bits with the sign), split into a low plane
//! `w s & 127` and a high plane `w s >> 7` of signed bytes, in the tile layout (4 values per
//! 32-bit column, the two panels' 8 rows side by side). A super-block is then 4 steps of 64
//! values, each two `tdpbssd` per 16 activation rows, into a high and a low sum; `128 hi + lo`
//! is exactly the super-block's `Σ_g s_g Σ w a` (the i32 sum the vector tiles build). The rest,
//! per super-block, is the AVX-512 tile's: the mins (Q6_K: the offset 32) against the
//! activations' group sums by `vpdpwssd`, and the float chain `acc = fma(isum, d_w * d_a, acc)`
//! (`acc_min` likewise). The integer sums are exact, so the bits are the reference's.

use core::arch::x86_64::*;

use super::{run_pair, tile, PairScratch, PAIR_ROWS};
use crate::quant::panel::layout::{at, block_bytes, ACT_K_BYTES};
use crate::quant::panel::prepared::{K_D, K_QS, K_SUMS16, K_SUMS32};
use crate::quant::x86::panel::{add_fifth_bits, add_q6_high, f32_at, i32_at, load128, nibbles};
use crate::quant::GgmlType;

/// Bytes of a pair's super-block in the tile layout: 4 steps of 64 values, each a high and a
/// low plane of 16 tile rows (4 values of 16 weight rows) of 64 bytes.
const SB_PLANES: usize = 4 * 2 * 1024;

/// `KIND`: 0 Q4_K, 1 Q5_K, 2 Q6_K. 16-bit pairs of correction factors per super-block.
const fn pair_count(kind: u8) -> usize {
    if kind == 2 {
        8
    } else {
        4
    }
}

const fn block_size(kind: u8) -> usize {
    [block_bytes::Q4_K, block_bytes::Q5_K, block_bytes::Q6_K][kind as usize]
}

/// The tile kernel of K-quant `ty`.
pub(super) fn kernel(ty: GgmlType) -> Option<super::PairKernelFn> {
    Some(match ty {
        GgmlType::Q4_K => q4_k,
        GgmlType::Q5_K => q5_k,
        GgmlType::Q6_K => q6_k,
        _ => return None,
    })
}

super::pair_entry!(q4_k, run::<0>, block_bytes::Q4_K, ACT_K_BYTES);
super::pair_entry!(q5_k, run::<1>, block_bytes::Q5_K, ACT_K_BYTES);
super::pair_entry!(q6_k, run::<2>, block_bytes::Q6_K, ACT_K_BYTES);

/// Super-blocks unpacked and run at a time: their planes (8 KiB each) stay in L1 while every
/// 32 activation rows of the call pass over them.
const RUN_BLOCKS: usize = 2;

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn run<const KIND: u8>(
    p0: *const u8,
    p1: *const u8,
    nb: usize,
    acts: *const u8,
    stride: usize,
    s: &mut PairScratch,
    out: &mut [[f32; 16]],
) {
    let unpack = |blocks, s: &mut PairScratch| unpack::<KIND>(p0, p1, blocks, s);
    let rows32 = |s: &PairScratch, blocks, a, acc: &mut [[__m512; 2]]| rows32::<KIND>(s, blocks, a, stride, acc);
    let acc = run_pair(tile::config(), nb, RUN_BLOCKS, acts, stride, s, out.len(), unpack, rows32);
    for (out, [acc, acc_min]) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_sub_ps(*acc, *acc_min));
    }
    s.acc = acc;
}

/// Lane `4r + t` (32 lanes of 16 bits) takes lane `2r + odd` of a pair of scales widened to
/// 16 bits (row `r`'s two groups at `2r`, `2r + 1`): a group's scale for each of its values in
/// a `V_k`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn spread<const ODD: bool>(pair: __m256i) -> __m512i {
    let idx: [i16; 32] = core::array::from_fn(|i| (2 * (i / 4) + ODD as usize) as i16);
    _mm512_permutexvar_epi16(_mm512_loadu_si512(idx.as_ptr().cast()), _mm512_castsi256_si512(pair))
}

/// Unpacks super-blocks `blocks` of the panels `p0` and `p1` into `s` (from its start).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack<const KIND: u8>(p0: *const u8, p1: *const u8, blocks: std::ops::Range<usize>, s: &mut PairScratch) {
    let (np, nb) = (pair_count(KIND), blocks.len());
    s.planes.resize(nb * SB_PLANES, 0);
    s.pairs.resize(nb * np, [0; 16]);
    s.dw.resize(nb, [0.0; 16]);
    s.dmin.resize(nb, [0.0; 16]);
    let low7 = _mm512_set1_epi16(127);
    for (b, block) in blocks.enumerate() {
        for (half, panel) in [p0, p1].into_iter().enumerate() {
            let w = panel.add(block * block_size(KIND));
            let lanes = 8 * half;
            let planes = s.planes.as_mut_ptr().add(b * SB_PLANES + 32 * half);
            for c in 0..8 {
                // the chunk's quants, and the scales of its values 0..16 and 16..32 (Q4_K and
                // Q5_K: one group of 32; Q6_K: two of 16)
                let (v, scales) = if KIND == 2 {
                    let mut v = nibbles(w.add(at::Q6K_NIBBLES + 128 * c));
                    add_q6_high(&mut v, w.add(at::Q6K_HIGH + 64 * c));
                    let pair = _mm256_cvtepi8_epi16(load128(w.add(at::Q6K_SCALES + 16 * c)));
                    (v, [spread::<false>(pair), spread::<true>(pair)])
                } else {
                    let mut v = nibbles(w.add(at::K4_NIBBLES + 128 * c));
                    if KIND == 1 {
                        add_fifth_bits(&mut v, w.add(at::Q5K_HIGH + 32 * c));
                    }
                    let pair = _mm256_cvtepu8_epi16(load128(w.add(at::K4_SCALES + 16 * (c / 2))));
                    let sc = if c % 2 == 0 { spread::<false>(pair) } else { spread::<true>(pair) };
                    (v, [sc, sc])
                };
                for (k, v) in v.iter().enumerate() {
                    // |w s| <= 63 * 128: exact in i16; low 7 bits and the rest, both bytes
                    let ws = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(*v), scales[k / 4]);
                    let row = planes.add((c / 2) * 2048 + (8 * (c % 2) + k) * 64);
                    _mm256_storeu_si256(row.cast(), _mm512_cvtepi16_epi8(_mm512_srai_epi16::<7>(ws)));
                    _mm256_storeu_si256(row.add(1024).cast(), _mm512_cvtepi16_epi8(_mm512_and_si512(ws, low7)));
                }
            }
            let corr_at = if KIND == 2 { at::Q6K_SCALES } else { at::K4_MINS };
            for p in 0..np {
                let x = load128(w.add(corr_at + 16 * p));
                let pair = if KIND == 2 { _mm256_cvtepi8_epi16(x) } else { _mm256_cvtepu8_epi16(x) };
                _mm256_storeu_si256(s.pairs[b * np + p][lanes..].as_mut_ptr().cast(), pair);
            }
            _mm256_storeu_ps(s.dw[b][lanes..].as_mut_ptr(), _mm256_cvtph_ps(load128(w.add(at::D))));
            if KIND != 2 {
                _mm256_storeu_ps(s.dmin[b][lanes..].as_mut_ptr(), _mm256_cvtph_ps(load128(w.add(at::K4_DMIN))));
            }
        }
    }
}

/// The four tiles of a super-block step's sums, as the tile unit stores them: the high and
/// low plane of the first 16 activation rows, then of the second.
#[repr(C, align(64))]
struct Sums([[[i32; 16]; 16]; 4]);

/// The activation rows at `acts[0]` and `acts[1]` (16 each) times super-blocks `blocks` of the
/// unpacked pair, continuing the rows' float chains `acc` (32 rows, or 16: the second tile's
/// sums are then not read).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn rows32<const KIND: u8>(
    s: &PairScratch,
    blocks: std::ops::Range<usize>,
    acts: [*const u8; 2],
    stride: usize,
    acc: &mut [[__m512; 2]],
) {
    let np = pair_count(KIND);
    let corr_sums = if KIND == 2 { K_SUMS16 } else { K_SUMS32 };
    let mut sums = Sums([[[0; 16]; 16]; 4]);
    for (b, block) in blocks.enumerate() {
        let a = acts.map(|a| a.add(block * ACT_K_BYTES));
        tile::super_block(a[0].add(K_QS), a[1].add(K_QS), stride, s.planes.as_ptr().add(b * SB_PLANES), sums.0.as_mut_ptr().cast());
        let (dw, dmin) = (_mm512_loadu_ps(s.dw[b].as_ptr()), _mm512_loadu_ps(s.dmin[b].as_ptr()));
        for (i, [acc, acc_min]) in acc.iter_mut().enumerate() {
            let (t, r) = (i / PAIR_ROWS, i % PAIR_ROWS);
            let hi = _mm512_load_si512(sums.0[2 * t][r].as_ptr().cast());
            let lo = _mm512_load_si512(sums.0[2 * t + 1][r].as_ptr().cast());
            let isum = _mm512_add_epi32(_mm512_slli_epi32::<7>(hi), lo);
            let a = a[t].add(r * stride);
            let mut corr = _mm512_setzero_si512();
            for p in 0..np {
                let sums = _mm512_set1_epi32(i32_at(a.add(corr_sums + 4 * p)));
                corr = _mm512_dpwssd_epi32(corr, _mm512_loadu_si512(s.pairs[b * np + p].as_ptr().cast()), sums);
            }
            let da = _mm512_set1_ps(f32_at(a.add(K_D)));
            if KIND == 2 {
                // the offset 32 of the quants: 32 Σ_j sc_j Σ a over the groups
                let isum = _mm512_sub_epi32(isum, _mm512_slli_epi32::<5>(corr));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), *acc);
            } else {
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), *acc);
                *acc_min = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_mul_ps(dmin, da), *acc_min);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::quant::panel::tests::Case;
    use crate::quant::x86::amx::tests::check;
    use crate::quant::GgmlType;

    /// Every K-quant's tile kernel gives the reference's bits: one and several super-blocks, a
    /// partial last pair, several 16-row groups, the scratch reused across shapes.
    #[test]
    fn tile_kernels_give_the_reference_bits() {
        if !crate::quant::Isa::Amx.is_available() {
            return;
        }
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
            for (rows, blocks, batch) in [(16, 1, 16), (29, 3, 48), (40, 2, 35)] {
                check(&Case::new(ty, rows, blocks, batch, 11 + rows as u32), &format!("{rows}x{blocks}, batch {batch}"));
            }
        }
    }

    /// Quants and scales at the ends of their ranges times activations of ±127: no sum leaves
    /// i32, and the bits stay the reference's.
    #[test]
    fn extreme_quants_stay_exact() {
        if !crate::quant::Isa::Amx.is_available() {
            return;
        }
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
            for (wbyte, abyte) in [(0xFFu8, 127i8), (0xFF, -127), (0x00, 127), (0x80, -127)] {
                check(&Case::uniform(ty, 16, 1, 16, wbyte, abyte), &format!("{wbyte:#x} x {abyte}"));
            }
        }
    }
}
