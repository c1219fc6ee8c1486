//! AVX2 forms of the attention's two inner loops for one (query, head) state, each with its 64
//! fused multiply-add chains in 8 vector registers. The portable loops keep their 64-float
//! accumulators in memory (LLVM keeps no array in registers across a loop), so every step waits
//! on a store and a load. The same operations in the same order: the same bits.

use core::arch::x86_64::*;

use super::attention::KV_TILE;

/// The 8 f32s at `p` (any alignment of f32).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load(p: *const f32) -> __m256 {
    core::mem::transmute::<[f32; 8], __m256>(*(p as *const [f32; 8]))
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn store(p: *mut f32, v: __m256) {
    *(p as *mut [f32; 8]) = core::mem::transmute::<__m256, [f32; 8]>(v);
}

/// `out[t] = Σ_d q[d] · keys[d * KV_TILE + t]` for the tile's 64 positions, each a sequential
/// FMA chain over `d` from zero (the portable `scores::<1>`).
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn scores_1(q: &[f32], keys: &[f32], out: &mut [f32]) {
    assert!(keys.len() >= q.len() * KV_TILE && out.len() >= KV_TILE, "a tile of keys and of scores");
    let mut acc = [_mm256_setzero_ps(); KV_TILE / 8];
    for (d, &qd) in q.iter().enumerate() {
        let qd = _mm256_set1_ps(qd);
        let row = keys.as_ptr().add(d * KV_TILE);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(qd, load(row.add(8 * i)), *a);
        }
    }
    for (i, a) in acc.iter().enumerate() {
        store(out.as_mut_ptr().add(8 * i), *a);
    }
}

/// `out[e] += Σ_t w[t] · values[t * stride + start + e]` for the 64 elements of `out`, each a
/// sequential FMA chain over the positions in order from its current value (the portable
/// `chains::<64>` of one chunk).
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn chains_64(out: &mut [f32], start: usize, stride: usize, w: &[f32], values: &[f32]) {
    assert!(
        out.len() == 64 && w.len().checked_sub(1).is_none_or(|last| values.len() >= last * stride + start + 64),
        "64 outputs and their values"
    );
    let mut acc = [_mm256_setzero_ps(); 8];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = load(out.as_ptr().add(8 * i));
    }
    for (t, &wt) in w.iter().enumerate() {
        let wt = _mm256_set1_ps(wt);
        let row = values.as_ptr().add(t * stride + start);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(wt, load(row.add(8 * i)), *a);
        }
    }
    for (i, a) in acc.iter().enumerate() {
        store(out.as_mut_ptr().add(8 * i), *a);
    }
}
