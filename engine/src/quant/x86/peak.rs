//! The int8 peak of this CPU's tiers: register-only loops of the multiply instructions the panel
//! kernels are built on, independent accumulators so that only throughput counts. The GEMM
//! bench prints their rate next to the kernels' (multiply-adds per second).

use core::arch::x86_64::*;

use crate::quant::Isa;

/// Multiply-adds of one round of [`int8_peak`] on the vector tiers: `CHAINS` instructions of 32
/// byte products.
pub const MACS_PER_ROUND: usize = CHAINS * 32;

/// Multiply-adds of one round of [`int8_peak`] on tier `isa`.
pub fn macs_per_round(isa: Isa) -> usize {
    match isa {
        Isa::Amx => AMX_TILES * 16 * 16 * 64,
        _ => MACS_PER_ROUND,
    }
}

/// Independent accumulator tiles of the AMX loop (the tile unit's latency is covered by 4).
const AMX_TILES: usize = 4;

/// Independent accumulators: enough to cover the instructions' latency (5 cycles) at 2 per cycle.
const CHAINS: usize = 12;

/// Runs `rounds` rounds of `CHAINS` `vpmaddubsw` (AVX2; each pair sum widened by a `vpaddw` chain
/// would only add work, so this is the instruction's own rate), `vpdpbusd` (AVX-512 VNNI
/// on 256-bit vectors, as the kernels use them) or, on the AMX tier, 4 full `tdpbsud` tiles
/// (16 x 64 by 64 x 16 bytes each); returns a value that depends on every one.
/// `None` for a tier without such instructions or one the CPU lacks.
pub fn int8_peak(isa: Isa, rounds: usize) -> Option<i32> {
    if !isa.is_available() {
        return None;
    }
    match isa {
        // SAFETY: the CPU has the tier's features (checked above).
        Isa::Avx2 => Some(unsafe { maddubs_rounds(rounds) }),
        // SAFETY: as above.
        Isa::Avx512 => Some(unsafe { dpbusd_rounds(rounds) }),
        // SAFETY: as above (the AMX tier's availability includes the OS's tile permission).
        Isa::Amx => Some(unsafe { tile_rounds(rounds) }),
        Isa::Scalar => None,
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn maddubs_rounds(rounds: usize) -> i32 {
    let (a, b) = (_mm256_set1_epi8(3), _mm256_set1_epi8(-2));
    let mut acc = [_mm256_setzero_si256(); CHAINS];
    for _ in 0..rounds {
        for (i, acc) in acc.iter_mut().enumerate() {
            // the product's inputs vary with the accumulator so no round can be hoisted
            *acc = _mm256_maddubs_epi16(_mm256_xor_si256(a, *acc), _mm256_add_epi8(b, _mm256_set1_epi8(i as i8)));
        }
    }
    acc.iter().fold(0, |s, v| s ^ _mm256_extract_epi32::<0>(*v))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dpbusd_rounds(rounds: usize) -> i32 {
    let (a, b) = (_mm256_set1_epi8(3), _mm256_set1_epi8(-2));
    let mut acc = [_mm256_setzero_si256(); CHAINS];
    for _ in 0..rounds {
        for acc in acc.iter_mut() {
            *acc = _mm256_dpbusd_epi32(*acc, a, b);
        }
    }
    acc.iter().fold(0, |s, v| s ^ _mm256_extract_epi32::<0>(*v))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_rounds(rounds: usize) -> i32 {
    use super::amx::{release, TileConfig};
    use core::arch::asm;
    let shapes = [(16, 64); 6];
    TileConfig::new(&shapes).load();
    let ones = [1u8; 16 * 64];
    let mut out = [0i32; 16 * 16];
    asm!(
        "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
        "tileloadd tmm4, [{p}+{s}*1]", "tileloadd tmm5, [{p}+{s}*1]",
        p = in(reg) ones.as_ptr(), s = in(reg) 64usize, options(nostack, readonly)
    );
    for _ in 0..rounds {
        asm!(
            "tdpbsud tmm0, tmm4, tmm5",
            "tdpbsud tmm1, tmm4, tmm5",
            "tdpbsud tmm2, tmm4, tmm5",
            "tdpbsud tmm3, tmm4, tmm5",
            options(nostack, nomem)
        );
    }
    asm!("tilestored [{p}+{s}*1], tmm3", p = in(reg) out.as_mut_ptr(), s = in(reg) 64usize, options(nostack));
    release();
    out[0]
}
