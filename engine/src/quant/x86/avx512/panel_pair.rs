//! AVX-512 panel-pair kernels: two consecutive 8-row panels at once, 16 weight rows, one per
//! 32-bit lane of a 512-bit vector, times up to `TILE_ROWS` activation rows. Each instruction
//! does the work of two of the 256-bit tile's (the activation quants are broadcast to all 16
//! lanes by the multiply itself), with the same exact integer sums and the same fused
//! multiply-add chain per output: the reference's bits (`panel::scalar`).

use core::arch::x86_64::*;

use crate::quant::panel::layout::{at, block_bytes, ACT_K_BYTES, ACT_LEGACY_BYTES, PANEL_ROWS};
use crate::quant::panel::prepared::{K_D, K_QS, K_SUMS16, K_SUMS32, LEGACY_QS, LEGACY_SUM};
use crate::quant::panel::{check_call, PanelPairKernelFn};
use crate::quant::x86::panel::{f32_at, i32_at};
use crate::quant::{iq4, mxfp4, GgmlType};

/// This tier's panel-pair kernel of `ty`, where it has one.
pub(crate) fn pair_kernel(ty: GgmlType) -> Option<PanelPairKernelFn> {
    match ty {
        GgmlType::Q4_0 => Some(q4_0),
        GgmlType::MXFP4 => Some(mxfp4),
        GgmlType::IQ4_NL => Some(iq4_nl),
        GgmlType::Q4_K => Some(q4_k),
        GgmlType::Q6_K => Some(q6_k),
        GgmlType::IQ4_XS => Some(iq4_xs),
        _ => None,
    }
}

/// The 32 bytes at `p` (panel 0) and at `p + gap` (the same place in panel 1) as one vector.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pair32(p: *const u8, gap: usize) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_loadu_si256(p.cast())), _mm256_loadu_si256(p.add(gap).cast()))
}

/// The 16 bytes at `p` and at `p + gap` as one 256-bit vector.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pair16(p: *const u8, gap: usize) -> __m256i {
    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(_mm_loadu_si128(p.cast())), _mm_loadu_si128(p.add(gap).cast()))
}

/// The 4 bytes at `p` in every 32-bit lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn bcast4(p: *const u8) -> __m512i {
    _mm512_set1_epi32(i32_at(p))
}

/// The 8 vectors `V_k` of a 32-value chunk of both panels from their nibbles at `p` (values
/// 0..16).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8, gap: usize) -> [__m512i; 8] {
    let m = _mm512_set1_epi8(0x0F);
    let q: [__m512i; 4] = core::array::from_fn(|k| pair32(p.add(32 * k), gap));
    core::array::from_fn(|k| if k < 4 { _mm512_and_si512(q[k], m) } else { _mm512_and_si512(_mm512_srli_epi16::<4>(q[k - 4]), m) })
}

/// A 16-entry byte table in every 128-bit lane, each entry `levels[i] + offset` (wrapping).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn table(levels: &[i8; 16], offset: i8) -> __m512i {
    _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(levels.as_ptr().cast())), _mm512_set1_epi8(offset))
}

/// `init + Σ_k V_k · a[4k..4k+4]` of unsigned quants by `vpdpbusd` in two chains (exact).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot(v: &[__m512i; 8], a: *const u8, init: __m512i) -> __m512i {
    let (mut d0, mut d1) = (init, _mm512_setzero_si512());
    for k in (0..8).step_by(2) {
        d0 = _mm512_dpbusd_epi32(d0, v[k], bcast4(a.add(4 * k)));
        d1 = _mm512_dpbusd_epi32(d1, v[k + 1], bcast4(a.add(4 * k + 4)));
    }
    _mm512_add_epi32(d0, d1)
}

/// A 32-value type's pair (Q4_0, MXFP4, IQ4_NL), as `legacy_tile`: `quants` unpacks a block's 8
/// vectors and `scales` its 16 rows' scales; `OFF` is the offset the quants carry, taken back out
/// as `OFF · Σ a`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn legacy_pair<const R: usize, const BLOCK_BYTES: usize, const OFF: i32>(
    panel: *const u8,
    nb: usize,
    acts: *const u8,
    stride: usize,
    quants: impl Fn(*const u8, usize) -> [__m512i; 8],
    scales: impl Fn(*const u8, usize) -> __m512,
    out: &mut [[f32; 2 * PANEL_ROWS]],
) {
    let gap = nb * BLOCK_BYTES;
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let w = panel.add(b * BLOCK_BYTES);
        let (dw, v) = (scales(w, gap), quants(w, gap));
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = acts.add(r * stride + b * ACT_LEGACY_BYTES);
            let isum = dot(&v, a.add(LEGACY_QS), _mm512_set1_epi32(-OFF * i32_at(a.add(LEGACY_SUM))));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(a))), *acc);
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(o.as_mut_ptr(), *a);
    }
}

/// The 16 rows' f16 scales `d` as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn f16_scales(w: *const u8, gap: usize) -> __m512 {
    _mm512_cvtph_ps(pair16(w.add(at::D), gap))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_0_pair<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
    let quants = |w: *const u8, gap: usize| nibbles(w.add(at::LEGACY_QUANTS), gap);
    legacy_pair::<R, { block_bytes::Q4_0 }, 8>(panel, nb, acts, stride, quants, |w, gap| f16_scales(w, gap), out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn iq4_nl_pair<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
    let t = table(&iq4::LEVELS, -128);
    let quants = |w: *const u8, gap: usize| nibbles(w.add(at::LEGACY_QUANTS), gap).map(|v| _mm512_shuffle_epi8(t, v));
    legacy_pair::<R, { block_bytes::IQ4_NL }, 128>(panel, nb, acts, stride, quants, |w, gap| f16_scales(w, gap), out)
}

/// MXFP4: the codes' doubled levels plus 12; scales `2^(e - 128)` from the 16 rows' exponents
/// (`(e - 1) << 23` as an f32's bits, or the subnormal `0x00200000 << e` for `e` below 2).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn mxfp4_pair<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
    let t = table(&mxfp4::LEVELS, 12);
    let quants = |w: *const u8, gap: usize| nibbles(w.add(at::MXFP4_QUANTS), gap).map(|v| _mm512_shuffle_epi8(t, v));
    let scales = |w: *const u8, gap: usize| {
        let bytes = _mm_unpacklo_epi64(_mm_loadl_epi64(w.add(at::D).cast()), _mm_loadl_epi64(w.add(gap + at::D).cast()));
        let e = _mm512_cvtepu8_epi32(bytes);
        let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2)), normal, subnormal))
    };
    legacy_pair::<R, { block_bytes::MXFP4 }, 12>(panel, nb, acts, stride, quants, scales, out)
}

/// Q6_K, as the 256-bit tile: per group of 16 the 6-bit quants by `vpdpbusd` times the group's
/// signed scale; the offset 32 taken back out as `32 Σ_j sc_j Σ a` by `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_k_pair<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
    let gap = nb * block_bytes::Q6_K;
    let m = _mm512_set1_epi8(0x30);
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let w = panel.add(b * block_bytes::Q6_K);
        let pairs: [__m512i; 8] = core::array::from_fn(|p| _mm512_cvtepi8_epi16(pair16(w.add(at::Q6K_SCALES + 16 * p), gap)));
        let rows: [*const u8; R] = core::array::from_fn(|r| acts.add(r * stride + b * ACT_K_BYTES));
        let mut isums = [_mm512_setzero_si512(); R];
        for (c, &p) in pairs.iter().enumerate() {
            let mut v = nibbles(w.add(at::Q6K_NIBBLES + 128 * c), gap);
            for half in 0..2 {
                let q = pair32(w.add(at::Q6K_HIGH + 64 * c + 32 * half), gap);
                // bits 2i..2i+2 to bits 4..6 of the same byte (16-bit shifts, masked)
                let bits = [_mm512_slli_epi16::<4>(q), _mm512_slli_epi16::<2>(q), q, _mm512_srli_epi16::<2>(q)];
                for i in 0..4 {
                    v[4 * half + i] = _mm512_or_si512(v[4 * half + i], _mm512_and_si512(bits[i], m));
                }
            }
            let scales = [_mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(p)), _mm512_srai_epi32::<16>(p)];
            for (isum, a) in isums.iter_mut().zip(rows) {
                let qa = a.add(K_QS + 32 * c);
                for (h, &scale) in scales.iter().enumerate() {
                    let d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[4 * h], bcast4(qa.add(16 * h)));
                    let d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[4 * h + 1], bcast4(qa.add(16 * h + 4)));
                    let d0 = _mm512_dpbusd_epi32(d0, v[4 * h + 2], bcast4(qa.add(16 * h + 8)));
                    let d1 = _mm512_dpbusd_epi32(d1, v[4 * h + 3], bcast4(qa.add(16 * h + 12)));
                    *isum = _mm512_add_epi32(*isum, _mm512_mullo_epi32(_mm512_add_epi32(d0, d1), scale));
                }
            }
        }
        let dw = f16_scales(w, gap);
        for r in 0..R {
            let a = rows[r];
            let mut offset = _mm512_setzero_si512();
            for (p, &sp) in pairs.iter().enumerate() {
                offset = _mm512_dpwssd_epi32(offset, sp, bcast4(a.add(K_SUMS16 + 4 * p)));
            }
            let isum = _mm512_sub_epi32(isums[r], _mm512_slli_epi32::<5>(offset));
            let da = _mm512_set1_ps(f32_at(a.add(K_D)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), acc[r]);
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(o.as_mut_ptr(), *a);
    }
}

/// Q4_K, as the 256-bit tile (`x86/panel.rs`): per chunk the unsigned 4-bit quants by `vpdpbusd`
/// in two chains, times the chunk's scale; the mins by `vpdpwssd`; `acc - acc_min` at the end.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_k_pair<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
    let gap = nb * block_bytes::Q4_K;
    let m = _mm512_set1_epi8(0x0F);
    let (mut acc, mut acc_min) = ([_mm512_setzero_ps(); R], [_mm512_setzero_ps(); R]);
    for b in 0..nb {
        let w = panel.add(b * block_bytes::Q4_K);
        let dw = _mm512_cvtph_ps(pair16(w.add(at::D), gap));
        let dmin = _mm512_cvtph_ps(pair16(w.add(at::K4_DMIN), gap));
        // each row's pair of chunk scales (mins) as 16-bit words in its 32-bit lane
        let pairs: [__m512i; 4] = core::array::from_fn(|p| _mm512_cvtepu8_epi16(pair16(w.add(at::K4_SCALES + 16 * p), gap)));
        let mins: [__m512i; 4] = core::array::from_fn(|p| _mm512_cvtepu8_epi16(pair16(w.add(at::K4_MINS + 16 * p), gap)));
        let rows: [*const u8; R] = core::array::from_fn(|r| acts.add(r * stride + b * ACT_K_BYTES));
        let mut isums = [_mm512_setzero_si512(); R];
        for c in 0..8 {
            let p = pairs[c / 2];
            let scale = if c % 2 == 0 { _mm512_and_si512(p, _mm512_set1_epi32(0xFFFF)) } else { _mm512_srli_epi32::<16>(p) };
            let base = w.add(at::K4_NIBBLES + 128 * c);
            let q: [__m512i; 4] = core::array::from_fn(|k| pair32(base.add(32 * k), gap));
            let v: [__m512i; 8] =
                core::array::from_fn(
                    |k| if k < 4 { _mm512_and_si512(q[k], m) } else { _mm512_and_si512(_mm512_srli_epi16::<4>(q[k - 4]), m) },
                );
            for (isum, a) in isums.iter_mut().zip(rows) {
                let qa = a.add(K_QS + 32 * c);
                let (mut d0, mut d1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for k in (0..8).step_by(2) {
                    d0 = _mm512_dpbusd_epi32(d0, v[k], bcast4(qa.add(4 * k)));
                    d1 = _mm512_dpbusd_epi32(d1, v[k + 1], bcast4(qa.add(4 * k + 4)));
                }
                *isum = _mm512_add_epi32(*isum, _mm512_mullo_epi32(_mm512_add_epi32(d0, d1), scale));
            }
        }
        for r in 0..R {
            let a = rows[r];
            let mut imin = _mm512_setzero_si512();
            for (p, &mp) in mins.iter().enumerate() {
                imin = _mm512_dpwssd_epi32(imin, mp, bcast4(a.add(K_SUMS32 + 4 * p)));
            }
            let da = _mm512_set1_ps(f32_at(a.add(K_D)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isums[r]), _mm512_mul_ps(dw, da), acc[r]);
            acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, da), acc_min[r]);
        }
    }
    for (o, (a, am)) in out.iter_mut().zip(acc.iter().zip(&acc_min)) {
        _mm512_storeu_ps(o.as_mut_ptr(), _mm512_sub_ps(*a, *am));
    }
}

/// IQ4_XS, as the 256-bit tile: per chunk the levels plus 128 (unsigned bytes, one `vpshufb`
/// per vector) by `vpdpbusd` in two chains, times the group's signed scale; the offset taken back
/// out as `128 Σ_c sc_c Σ a` by `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn iq4_xs_pair<const R: usize>(panel: *const u8, nb: usize, acts: *const u8, stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
    let gap = nb * block_bytes::IQ4_XS;
    let m = _mm512_set1_epi8(0x0F);
    let levels = _mm512_broadcast_i32x4(_mm_loadu_si128(iq4::LEVELS.as_ptr().cast()));
    let table = _mm512_add_epi8(levels, _mm512_set1_epi8(-128));
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let w = panel.add(b * block_bytes::IQ4_XS);
        // each row's pair of group scales as signed 16-bit words in its 32-bit lane
        let pairs: [__m512i; 4] = core::array::from_fn(|p| _mm512_cvtepi8_epi16(pair16(w.add(at::IQ4XS_SCALES + 16 * p), gap)));
        let rows: [*const u8; R] = core::array::from_fn(|r| acts.add(r * stride + b * ACT_K_BYTES));
        let mut isums = [_mm512_setzero_si512(); R];
        for c in 0..8 {
            let p = pairs[c / 2];
            let scale = if c % 2 == 0 { _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(p)) } else { _mm512_srai_epi32::<16>(p) };
            let base = w.add(at::IQ4XS_NIBBLES + 128 * c);
            let q: [__m512i; 4] = core::array::from_fn(|k| pair32(base.add(32 * k), gap));
            let v: [__m512i; 8] = core::array::from_fn(|k| {
                let n = if k < 4 { _mm512_and_si512(q[k], m) } else { _mm512_and_si512(_mm512_srli_epi16::<4>(q[k - 4]), m) };
                _mm512_shuffle_epi8(table, n)
            });
            for (isum, a) in isums.iter_mut().zip(rows) {
                let qa = a.add(K_QS + 32 * c);
                let (mut d0, mut d1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for k in (0..8).step_by(2) {
                    d0 = _mm512_dpbusd_epi32(d0, v[k], bcast4(qa.add(4 * k)));
                    d1 = _mm512_dpbusd_epi32(d1, v[k + 1], bcast4(qa.add(4 * k + 4)));
                }
                *isum = _mm512_add_epi32(*isum, _mm512_mullo_epi32(_mm512_add_epi32(d0, d1), scale));
            }
        }
        let dw = _mm512_cvtph_ps(pair16(w.add(at::D), gap));
        for r in 0..R {
            let a = rows[r];
            let mut offset = _mm512_setzero_si512();
            for (p, &sp) in pairs.iter().enumerate() {
                offset = _mm512_dpwssd_epi32(offset, sp, bcast4(a.add(K_SUMS32 + 4 * p)));
            }
            let isum = _mm512_sub_epi32(isums[r], _mm512_mullo_epi32(offset, _mm512_set1_epi32(128)));
            let da = _mm512_set1_ps(f32_at(a.add(K_D)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), acc[r]);
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        _mm512_storeu_ps(o.as_mut_ptr(), *a);
    }
}

/// Checks a pair kernel call's operands: two panels of `nb` blocks of `ty`, and the rows.
fn check_pair(ty: GgmlType, panels: &[u8], nb: usize, acts: &[u8], stride: usize, rows: usize) {
    let gap = nb * crate::quant::panel::PanelLayout::of(ty).expect("a repacked type").block_bytes;
    assert!(panels.len() >= 2 * gap, "a panel pair of {} bytes for {nb} blocks", panels.len());
    check_call(ty, &panels[gap..], nb, acts, stride, rows);
}

/// The safe entry point of a pair kernel: checks the operands, then runs it for `out.len()`
/// activation rows.
macro_rules! entry {
    ($name:ident, $ty:expr, $pair:ident) => {
        fn $name(panels: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; 2 * PANEL_ROWS]]) {
            check_pair($ty, panels, nb, acts, stride, out.len());
            let (p, a) = (panels.as_ptr(), acts.as_ptr());
            // SAFETY: dispatch hands out this tier's kernels only after detecting every feature
            // they enable; `check_pair` checked that `panels` holds two panels of `nb` blocks
            // and `acts` `out.len()` rows of `nb` prepared blocks each.
            unsafe {
                match out.len() {
                    4 => $pair::<4>(p, nb, a, stride, out),
                    3 => $pair::<3>(p, nb, a, stride, out),
                    2 => $pair::<2>(p, nb, a, stride, out),
                    _ => $pair::<1>(p, nb, a, stride, out),
                }
            }
        }
    };
}

entry!(q4_0, GgmlType::Q4_0, q4_0_pair);
entry!(mxfp4, GgmlType::MXFP4, mxfp4_pair);
entry!(iq4_nl, GgmlType::IQ4_NL, iq4_nl_pair);
entry!(q4_k, GgmlType::Q4_K, q4_k_pair);
entry!(q6_k, GgmlType::Q6_K, q6_k_pair);
entry!(iq4_xs, GgmlType::IQ4_XS, iq4_xs_pair);
