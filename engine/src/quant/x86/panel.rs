//! The panel kernels of both x86 tiers (see `quant::panel` for the layouts and the order of
//! the sums): shared unpacking helpers, and `panel_kernels!`, which stamps out each type's tile
//! kernel in a tier's module (Q8_0's is each tier's own) over that tier's integer primitives:
//!
//! - `dot_legacy(v, a, init)`: `init + Σ_k V_k · a[4k..4k+4]` in i32 lanes, for 8 vectors of
//!   unsigned quants below 32 (AVX2: `vpmaddubsw` pairs summed four at a time in i16, never
//!   past 4 · 2 · 31 · 127 = 31496, then `vpmaddwd`; VNNI: one `vpdpbusd` per vector);
//! - `dot_levels(v, a, init)`: the same for the IQ4 types' levels plus the tier's
//!   `IQ4_OFFSET` (AVX2: offset 0, the signed levels as `|v| · sign(a, v)` by `vpmaddubsw`, every
//!   pair below 2 · 127 · 127, widened per vector; VNNI: offset 128, the unsigned bytes by
//!   `vpdpbusd` as they are; the offset is taken back out as `IQ4_OFFSET · Σ a`);
//! - `madd_acc(acc, s16, s)`: `acc + Σ pairs s16 · s` (AVX2 `vpmaddwd` and an add; VNNI
//!   `vpdpwssd`);
//! - `dot_scaled::<I16>(acc, v, a, range, s16, s32)`: `acc + s · Σ_{k in range} V_k · a[4k..]`
//!   for a group's scale `s` per lane, given as 16-bit pairs `s16` and as i32 `s32` (AVX2: the
//!   products summed `I16` vectors at a time in i16, then `vpmaddwd` by `s16`; VNNI: one
//!   `vpdpbusd` chain in i32, then `vpmulld` by `s32`).
//!
//! A tile is one panel (8 weight rows, one per 32-bit lane) by `R` activation rows: each block's
//! quants are unpacked once for the `R` rows, every row keeps its float accumulator(s) in a
//! register, and the results are stored as 8 contiguous floats per row. Only exact integer
//! regrouping differs from the scalar reference, so the bits are the same.

use core::arch::x86_64::*;

/// The 4 bytes at `p` broadcast to every 32-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast4(p: *const u8) -> __m256i {
    _mm256_set1_epi32(core::ptr::read_unaligned(p as *const i32))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast())
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p.cast())
}

/// The 8 f16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(load128(p))
}

/// [`mxfp4::e8m0_half`](crate::quant::mxfp4::e8m0_half) of the 8 exponent bytes at `p`:
/// `(e - 1) << 23` as an f32's bits, or `0x00200000 << e` (a subnormal) for `e` below 2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn e8m0x8(p: *const u8) -> __m256 {
    let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast()));
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)))
}

/// MXFP4's 8 vectors `V_k` from the code nibbles at `p`, each code looked up as its doubled
/// level plus 12 (0..=24: unsigned, as the legacy types' quants, the 12 taken back out as
/// `12 Σ a`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn mxfp4_levels(p: *const u8) -> [__m256i; 8] {
    const fn offset_levels() -> [u8; 16] {
        let mut t = [0u8; 16];
        let mut i = 0;
        while i < 16 {
            t[i] = (crate::quant::mxfp4::LEVELS[i] + 12) as u8;
            i += 1;
        }
        t
    }
    const TABLE: [u8; 16] = offset_levels();
    let table = _mm256_broadcastsi128_si256(load128(TABLE.as_ptr()));
    nibbles(p).map(|v| _mm256_shuffle_epi8(table, v))
}

/// The 8 vectors `V_k` of IQ4_NL / IQ4_XS from the level-index nibbles at `p`: each index
/// looked up as its level (-127..=113) plus `OFFSET` in a byte, the tier's `IQ4_OFFSET` (0: the
/// signed levels; 128: unsigned 1..=241).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_levels<const OFFSET: i32>(p: *const u8) -> [__m256i; 8] {
    let levels = _mm256_broadcastsi128_si256(load128(crate::quant::iq4::LEVELS.as_ptr().cast()));
    let table = _mm256_add_epi8(levels, _mm256_set1_epi8(OFFSET as i8));
    nibbles(p).map(|v| _mm256_shuffle_epi8(table, v))
}

/// Asks for the `bytes` from `p` + [`AHEAD`](crate::quant::prefetch::AHEAD) on to be brought
/// into the cache, a line at a time (see `quant::prefetch`): a tile calls it with each block
/// it reads. A prefetch never faults, so the lines may lie past the end of the panel.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn prefetch_ahead(p: *const u8, bytes: usize) {
    for line in (0..bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(crate::quant::prefetch::AHEAD + line).cast());
    }
}

/// The f32 at `p`, broadcast.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_splat(p: *const u8) -> __m256 {
    _mm256_set1_ps(f32_at(p))
}

/// The i32 at `p`.
#[inline(always)]
pub(super) unsafe fn i32_at(p: *const u8) -> i32 {
    core::ptr::read_unaligned(p as *const i32)
}

/// The f32 at `p`.
#[inline(always)]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    core::ptr::read_unaligned(p as *const f32)
}

/// `V_0..V_8` of a chunk from its nibbles `P_0..P_4` at `p` (values 0..16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(p: *const u8) -> [__m256i; 8] {
    let m = _mm256_set1_epi8(0x0F);
    let q: [__m256i; 4] = core::array::from_fn(|k| load(p.add(32 * k)));
    core::array::from_fn(|k| if k < 4 { _mm256_and_si256(q[k], m) } else { _mm256_and_si256(_mm256_srli_epi16::<4>(q[k - 4]), m) })
}

/// Adds the fifth bits at `h` (bit `k` of each byte for `V_k`) into `v` as 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn add_fifth_bits(v: &mut [__m256i; 8], h: *const u8) {
    let h = load(h);
    let m = _mm256_set1_epi8(0x10);
    // bit k to bit 4 of the same byte: 16-bit shifts move no other byte's bit into bit 4
    let bits = [
        _mm256_slli_epi16::<4>(h),
        _mm256_slli_epi16::<3>(h),
        _mm256_slli_epi16::<2>(h),
        _mm256_slli_epi16::<1>(h),
        h,
        _mm256_srli_epi16::<1>(h),
        _mm256_srli_epi16::<2>(h),
        _mm256_srli_epi16::<3>(h),
    ];
    for k in 0..8 {
        v[k] = _mm256_or_si256(v[k], _mm256_and_si256(bits[k], m));
    }
}

/// Adds Q6_K's high bits at `h` (two vectors: bits `2i..2i+2` of `QH_h` for `V_{4h+i}`) into
/// `v` as 16, 32 or 48.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn add_q6_high(v: &mut [__m256i; 8], h: *const u8) {
    let m = _mm256_set1_epi8(0x30);
    for half in 0..2 {
        let q = load(h.add(32 * half));
        // bits 2i..2i+2 to bits 4..6 of the same byte (16-bit shifts, masked)
        let bits = [_mm256_slli_epi16::<4>(q), _mm256_slli_epi16::<2>(q), q, _mm256_srli_epi16::<2>(q)];
        for i in 0..4 {
            v[4 * half + i] = _mm256_or_si256(v[4 * half + i], _mm256_and_si256(bits[i], m));
        }
    }
}

/// `Σ_k maddubs(v[k], a[4k..4k+4])` for `k` in `range`, in i16 lanes (the caller keeps it in
/// range: at most 4 vectors of quants below 32, 8 below 16, 2 below 64).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn sum16(v: &[__m256i; 8], a: *const u8, range: core::ops::Range<usize>) -> __m256i {
    let mut s = _mm256_setzero_si256();
    for k in range {
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(v[k], bcast4(a.add(4 * k))));
    }
    s
}

/// Each 32-bit lane's 16-bit word `W` (0 or 1) in both halves: a group's scale for both words
/// of a `vpmaddwd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dup_word<const W: usize>(x: __m256i) -> __m256i {
    // byte indices count within each 128-bit half: dword i takes bytes 4i + 2W, 4i + 2W + 1
    let (a, b) = (2 * W as i8, 2 * W as i8 + 1);
    #[rustfmt::skip]
    let idx = _mm_setr_epi8(a, b, a, b, a + 4, b + 4, a + 4, b + 4, a + 8, b + 8, a + 8, b + 8, a + 12, b + 12, a + 12, b + 12);
    _mm256_shuffle_epi8(x, _mm256_broadcastsi128_si256(idx))
}

/// Stores the 8 floats of each accumulator as an output row.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_rows<const R: usize>(acc: [__m256; R], out: &mut [[f32; 8]]) {
    for (o, a) in out.iter_mut().zip(acc) {
        _mm256_storeu_ps(o.as_mut_ptr(), a);
    }
}

/// Stamps out, in a tier's module, the tile kernels of Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_K, Q5_K,
/// Q6_K and IQ4_XS over the tier's `dot_legacy`, `dot_levels` (with `IQ4_OFFSET`), `madd_acc` and `dot_scaled` (see
/// the module docs), and the safe entry points of those and of the tier's own `q8_0_tile`.
macro_rules! panel_kernels {
    ($features:literal) => {
        use $crate::quant::panel::layout::{at, block_bytes, ACT_K_BYTES, ACT_LEGACY_BYTES};
        use $crate::quant::panel::prepared::{K_D, K_QS, K_SUMS16, K_SUMS32, LEGACY_QS, LEGACY_SUM};
        use $crate::quant::x86::panel::{
            add_fifth_bits, add_q6_high, bcast4, dup_word, e8m0x8, f16x8, f32_splat, i32_at, iq4_levels, load128, mxfp4_levels, nibbles,
            prefetch_ahead, store_rows,
        };

        /// A legacy type's tile: `quants(w)` unpacks a block's 8 vectors and `scales(w)` its 8
        /// rows' scales, `OFF` is the offset the quants carry (taken back out as `OFF · Σ a`).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn legacy_tile<const R: usize, const BLOCK_BYTES: usize, const OFF: i32>(
            panel: *const u8,
            nb: usize,
            acts: *const u8,
            stride: usize,
            quants: impl Fn(*const u8) -> [__m256i; 8],
            scales: impl Fn(*const u8) -> __m256,
            out: &mut [[f32; 8]],
        ) {
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..nb {
                let w = panel.add(b * BLOCK_BYTES);
                prefetch_ahead(w, BLOCK_BYTES);
                let dw = scales(w);
                let v = quants(w);
                for r in 0..R {
                    let a = acts.add(r * stride + b * ACT_LEGACY_BYTES);
                    let isum = dot_legacy(&v, a.add(LEGACY_QS), _mm256_set1_epi32(-OFF * i32_at(a.add(LEGACY_SUM))));
                    let scale = _mm256_mul_ps(dw, f32_splat(a));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[r]);
                }
            }
            store_rows(acc, out);
        }

        #[target_feature(enable = $features)]
        unsafe fn q4_0_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            let (quants, scales) = (|w: *const u8| nibbles(w.add(at::LEGACY_QUANTS)), |w: *const u8| f16x8(w.add(at::D)));
            legacy_tile::<R, { block_bytes::Q4_0 }, 8>(panel, nb, acts, stride, quants, scales, out)
        }

        #[target_feature(enable = $features)]
        unsafe fn mxfp4_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            let (quants, scales) = (|w: *const u8| mxfp4_levels(w.add(at::MXFP4_QUANTS)), |w: *const u8| e8m0x8(w.add(at::D)));
            legacy_tile::<R, { block_bytes::MXFP4 }, 12>(panel, nb, acts, stride, quants, scales, out)
        }

        /// IQ4_NL's tile: its levels (plus the tier's `IQ4_OFFSET`) by the tier's `dot_levels`.
        #[target_feature(enable = $features)]
        unsafe fn iq4_nl_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..nb {
                let w = panel.add(b * block_bytes::IQ4_NL);
                prefetch_ahead(w, block_bytes::IQ4_NL);
                let dw = f16x8(w.add(at::D));
                let v = iq4_levels::<IQ4_OFFSET>(w.add(at::LEGACY_QUANTS));
                for r in 0..R {
                    let a = acts.add(r * stride + b * ACT_LEGACY_BYTES);
                    let isum = dot_levels(&v, a.add(LEGACY_QS), _mm256_set1_epi32(-IQ4_OFFSET * i32_at(a.add(LEGACY_SUM))));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, f32_splat(a)), acc[r]);
                }
            }
            store_rows(acc, out);
        }

        #[target_feature(enable = $features)]
        unsafe fn q5_0_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            let quants = |w: *const u8| {
                let mut v = nibbles(w.add(at::LEGACY_QUANTS));
                add_fifth_bits(&mut v, w.add(at::Q5_0_HIGH));
                v
            };
            legacy_tile::<R, { block_bytes::Q5_0 }, 16>(panel, nb, acts, stride, quants, |w| f16x8(w.add(at::D)), out)
        }

        /// Q4_K / Q5_K tile.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn scale_min_tile<const R: usize, const FIFTH: bool>(
            panel: *const u8,
            nb: usize,
            acts: *const u8,
            stride: usize,
            out: &mut [[f32; 8]],
        ) {
            let step = if FIFTH { block_bytes::Q5_K } else { block_bytes::Q4_K };
            let (mut acc, mut acc_min) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
            for b in 0..nb {
                let w = panel.add(b * step);
                prefetch_ahead(w, step);
                let (dw, dmin) = (f16x8(w.add(at::D)), f16x8(w.add(at::K4_DMIN)));
                let pairs: [__m256i; 4] = core::array::from_fn(|p| _mm256_cvtepu8_epi16(load128(w.add(at::K4_SCALES + 16 * p))));
                let scales: [__m256i; 8] =
                    core::array::from_fn(|c| if c % 2 == 0 { dup_word::<0>(pairs[c / 2]) } else { dup_word::<1>(pairs[c / 2]) });
                let scales32: [__m256i; 8] = core::array::from_fn(|c| {
                    let p = pairs[c / 2];
                    if c % 2 == 0 {
                        _mm256_and_si256(p, _mm256_set1_epi32(0xFFFF))
                    } else {
                        _mm256_srli_epi32::<16>(p)
                    }
                });
                let mins: [__m256i; 4] = core::array::from_fn(|p| _mm256_cvtepu8_epi16(load128(w.add(at::K4_MINS + 16 * p))));
                // chunk by chunk, each unpacked chunk (in registers) dotted with every row
                let rows: [*const u8; R] = core::array::from_fn(|r| acts.add(r * stride + b * ACT_K_BYTES));
                let mut isums = [_mm256_setzero_si256(); R];
                for c in 0..8 {
                    let mut v = nibbles(w.add(at::K4_NIBBLES + 128 * c));
                    if FIFTH {
                        add_fifth_bits(&mut v, w.add(at::Q5K_HIGH + 32 * c));
                    }
                    for (isum, a) in isums.iter_mut().zip(rows) {
                        let q = a.add(K_QS + 32 * c);
                        // 5-bit quants: 4 vectors at most in an i16 sum, 4-bit ones 8
                        *isum = if FIFTH {
                            dot_scaled::<4>(*isum, &v, q, 0..8, scales[c], scales32[c])
                        } else {
                            dot_scaled::<8>(*isum, &v, q, 0..8, scales[c], scales32[c])
                        };
                    }
                }
                for r in 0..R {
                    let (a, isum) = (rows[r], isums[r]);
                    let mut imin = _mm256_setzero_si256();
                    for p in 0..4 {
                        imin = madd_acc(imin, mins[p], bcast4(a.add(K_SUMS32 + 4 * p)));
                    }
                    let da = f32_splat(a.add(K_D));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), acc[r]);
                    acc_min[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, da), acc_min[r]);
                }
            }
            store_rows(core::array::from_fn::<_, R, _>(|r| _mm256_sub_ps(acc[r], acc_min[r])), out);
        }

        #[target_feature(enable = $features)]
        unsafe fn q4_k_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            scale_min_tile::<R, false>(panel, nb, acts, stride, out)
        }

        #[target_feature(enable = $features)]
        unsafe fn q5_k_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            scale_min_tile::<R, true>(panel, nb, acts, stride, out)
        }

        #[target_feature(enable = $features)]
        unsafe fn q6_k_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..nb {
                let w = panel.add(b * block_bytes::Q6_K);
                prefetch_ahead(w, block_bytes::Q6_K);
                let dw = f16x8(w.add(at::D));
                let pairs: [__m256i; 8] = core::array::from_fn(|p| _mm256_cvtepi8_epi16(load128(w.add(at::Q6K_SCALES + 16 * p))));
                // chunk by chunk, each unpacked chunk (in registers) dotted with every row; a
                // chunk's two group scales made where they are used (all 16 at once, in both
                // forms, would not fit the registers beside the chunk)
                let rows: [*const u8; R] = core::array::from_fn(|r| acts.add(r * stride + b * ACT_K_BYTES));
                let mut isums = [_mm256_setzero_si256(); R];
                for c in 0..8 {
                    let mut v = nibbles(w.add(at::Q6K_NIBBLES + 128 * c));
                    add_q6_high(&mut v, w.add(at::Q6K_HIGH + 64 * c));
                    let p = pairs[c];
                    let scales = [dup_word::<0>(p), dup_word::<1>(p)];
                    let scales32 = [_mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(p)), _mm256_srai_epi32::<16>(p)];
                    for (isum, a) in isums.iter_mut().zip(rows) {
                        let q = a.add(K_QS + 32 * c);
                        // 6-bit quants: 2 vectors at most in an i16 sum; a group of 16 is 4
                        for h in 0..2 {
                            *isum = dot_scaled::<2>(*isum, &v, q, 4 * h..4 * h + 4, scales[h], scales32[h]);
                        }
                    }
                }
                for r in 0..R {
                    let (a, isum) = (rows[r], isums[r]);
                    // the offset 32 of the quants: 32 Σ_j sc_j Σ a over the groups
                    let mut offset = _mm256_setzero_si256();
                    for p in 0..8 {
                        offset = madd_acc(offset, pairs[p], bcast4(a.add(K_SUMS16 + 4 * p)));
                    }
                    let isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<5>(offset));
                    let scale = _mm256_mul_ps(dw, f32_splat(a.add(K_D)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[r]);
                }
            }
            store_rows(acc, out);
        }

        /// IQ4_XS: chunk by chunk, each group's levels (plus the tier's `IQ4_OFFSET`) dotted with
        /// every row by the tier's `dot_levels` (at most 32 · 241 · 127 in i32), times the group's
        /// scale (-32..=31); the offset taken back out at the end as `IQ4_OFFSET · Σ_c sc_c Σ a`.
        #[target_feature(enable = $features)]
        unsafe fn iq4_xs_tile<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 8]]) {
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..nb {
                let w = panel.add(b * block_bytes::IQ4_XS);
                prefetch_ahead(w, block_bytes::IQ4_XS);
                let rows: [*const u8; R] = core::array::from_fn(|r| acts.add(r * stride + b * ACT_K_BYTES));
                let mut isums = [_mm256_setzero_si256(); R];
                for c in 0..8 {
                    let v = iq4_levels::<IQ4_OFFSET>(w.add(at::IQ4XS_NIBBLES + 128 * c));
                    // each row's pair of group scales in its 32-bit lane; this group's sign-extended
                    let pair = _mm256_cvtepi8_epi16(load128(w.add(at::IQ4XS_SCALES + 16 * (c / 2))));
                    let scale =
                        if c % 2 == 0 { _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(pair)) } else { _mm256_srai_epi32::<16>(pair) };
                    for (isum, a) in isums.iter_mut().zip(rows) {
                        let dot = dot_levels(&v, a.add(K_QS + 32 * c), _mm256_setzero_si256());
                        *isum = _mm256_add_epi32(*isum, _mm256_mullo_epi32(dot, scale));
                    }
                }
                if IQ4_OFFSET != 0 {
                    let pairs: [__m256i; 4] = core::array::from_fn(|p| _mm256_cvtepi8_epi16(load128(w.add(at::IQ4XS_SCALES + 16 * p))));
                    for (isum, a) in isums.iter_mut().zip(rows) {
                        let mut offset = _mm256_setzero_si256();
                        for (p, &pair) in pairs.iter().enumerate() {
                            offset = madd_acc(offset, pair, bcast4(a.add(K_SUMS32 + 4 * p)));
                        }
                        *isum = _mm256_sub_epi32(*isum, _mm256_mullo_epi32(offset, _mm256_set1_epi32(IQ4_OFFSET)));
                    }
                }
                let dw = f16x8(w.add(at::D));
                for r in 0..R {
                    let scale = _mm256_mul_ps(dw, f32_splat(rows[r].add(K_D)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isums[r]), scale, acc[r]);
                }
            }
            store_rows(acc, out);
        }

        /// The safe entry point of a tile kernel: checks the operands, then runs the tile for
        /// `out.len()` rows.
        macro_rules! entry {
            ($name:ident, $ty:expr, $tile:ident) => {
                fn $name(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; 8]]) {
                    $crate::quant::panel::check_call($ty, panel, nb, acts, stride, out.len());
                    let (p, a) = (panel.as_ptr(), acts.as_ptr());
                    // SAFETY: dispatch hands out this tier's kernels only after detecting every
                    // feature they enable; `check_call` checked that the panel holds `nb` blocks
                    // and `acts` `out.len()` rows of `nb` prepared blocks each.
                    unsafe {
                        match out.len() {
                            4 => $tile::<4>(p, nb, a, stride, out),
                            3 => $tile::<3>(p, nb, a, stride, out),
                            2 => $tile::<2>(p, nb, a, stride, out),
                            _ => $tile::<1>(p, nb, a, stride, out),
                        }
                    }
                }
            };
        }

        entry!(q4_0, GgmlType::Q4_0, q4_0_tile);
        entry!(mxfp4, GgmlType::MXFP4, mxfp4_tile);
        entry!(iq4_nl, GgmlType::IQ4_NL, iq4_nl_tile);
        entry!(q5_0, GgmlType::Q5_0, q5_0_tile);
        entry!(q8_0, GgmlType::Q8_0, q8_0_tile);
        entry!(q4_k, GgmlType::Q4_K, q4_k_tile);
        entry!(q5_k, GgmlType::Q5_K, q5_k_tile);
        entry!(q6_k, GgmlType::Q6_K, q6_k_tile);
        entry!(iq4_xs, GgmlType::IQ4_XS, iq4_xs_tile);

        /// This tier's panel kernel of `ty`.
        pub(crate) fn panel_kernel(ty: GgmlType) -> Option<$crate::quant::panel::PanelKernelFn> {
            Some(match ty {
                GgmlType::Q4_0 => q4_0,
                GgmlType::MXFP4 => mxfp4,
                GgmlType::IQ4_NL => iq4_nl,
                GgmlType::Q5_0 => q5_0,
                GgmlType::Q8_0 => q8_0,
                GgmlType::Q4_K => q4_k,
                GgmlType::Q5_K => q5_k,
                GgmlType::Q6_K => q6_k,
                GgmlType::IQ4_XS => iq4_xs,
                _ => return None,
            })
        }
    };
}
pub(super) use panel_kernels;
