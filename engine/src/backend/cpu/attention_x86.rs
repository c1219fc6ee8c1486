//! x86 forms of the attention's two inner loops with their fused multiply-add chains in vector
//! registers: AVX2 for one (query, head) state (64 chains in 8 registers), AVX-512 for four
//! states at once (4 x 64 chains in 16 of its 32 registers, sharing each load of a key or value
//! vector). The portable loops keep their accumulators in memory (LLVM keeps no array in
//! registers across a loop), so every step waits on a store and a load. The same operations in
//! the same order: the same bits.

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

/// `out[at[n] + t] = Σ_d q[n][d] · keys[d * KV_TILE + t]` for 4 states and the tile's 64
/// positions, each a sequential FMA chain over `d` from zero (the portable `scores::<4>`).
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn scores_4(q: [&[f32]; 4], keys: &[f32], at: [usize; 4], out: &mut [f32]) {
    let dk = q[0].len();
    assert!(
        q.iter().all(|q| q.len() == dk) && keys.len() >= dk * KV_TILE && at.iter().all(|&a| a + KV_TILE <= out.len()),
        "4 queries, a tile of keys and 4 tiles of scores"
    );
    let mut acc = [[_mm512_setzero_ps(); KV_TILE / 16]; 4];
    for d in 0..dk {
        let row = keys.as_ptr().add(d * KV_TILE);
        // plain loops, not `array::from_fn`: its closure would not inherit the target features
        let mut k = [_mm512_setzero_ps(); KV_TILE / 16];
        for (i, k) in k.iter_mut().enumerate() {
            *k = _mm512_loadu_ps(row.add(16 * i));
        }
        for (acc, q) in acc.iter_mut().zip(&q) {
            let qd = _mm512_set1_ps(*q.get_unchecked(d));
            for (a, &k) in acc.iter_mut().zip(&k) {
                *a = _mm512_fmadd_ps(qd, k, *a);
            }
        }
    }
    for (acc, at) in acc.iter().zip(at) {
        for (i, &a) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(at + 16 * i), a);
        }
    }
}

/// `outs[n][e] += Σ_t ws[n][t] · values[t * stride + start + e]` for 4 states with the same
/// positions and the 64 elements of each `outs[n]`, each a sequential FMA chain over the
/// positions in order from its current value (the portable `chains_n::<4, 64>` of one chunk).
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn chains_4x64(outs: [&mut [f32]; 4], start: usize, stride: usize, ws: [&[f32]; 4], values: &[f32]) {
    let n = ws[0].len();
    assert!(
        outs.iter().all(|o| o.len() == 64)
            && ws.iter().all(|w| w.len() == n)
            && n.checked_sub(1).is_none_or(|last| values.len() >= last * stride + start + 64),
        "4 x 64 outputs, 4 weight rows and their values"
    );
    // plain loops, not `array::from_fn`: its closure would not inherit the target features
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for (acc, out) in acc.iter_mut().zip(&outs) {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm512_loadu_ps(out.as_ptr().add(16 * i));
        }
    }
    let mut v = [_mm512_setzero_ps(); 4];
    for t in 0..n {
        let row = values.as_ptr().add(t * stride + start);
        for (i, v) in v.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(row.add(16 * i));
        }
        for (acc, w) in acc.iter_mut().zip(&ws) {
            let wt = _mm512_set1_ps(*w.get_unchecked(t));
            for (a, &v) in acc.iter_mut().zip(&v) {
                *a = _mm512_fmadd_ps(wt, v, *a);
            }
        }
    }
    for (out, acc) in outs.into_iter().zip(&acc) {
        for (i, &a) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), a);
        }
    }
}
