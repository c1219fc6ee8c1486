//! The reference panel kernels: plain loops that define, output by output, the integer sums and
//! the fused multiply-add chain every tier reproduces bit for bit (see the module docs of
//! `panel`). Slow and obvious on purpose.

use super::layout::{at, PANEL_ROWS};
use super::prepared::{K_D, K_QS, K_SUMS16, K_SUMS32, LEGACY_D, LEGACY_QS, LEGACY_SUM};
use super::{check_call, PanelKernelFn, PanelLayout};
use crate::quant::blocks::f16_le;
use crate::quant::{iq4, mxfp4, GgmlType};

/// The reference kernel of `ty`.
pub fn kernel(ty: GgmlType) -> Option<PanelKernelFn> {
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

fn f16s(block: &[u8], off: usize) -> [f32; PANEL_ROWS] {
    std::array::from_fn(|r| f16_le([block[off + 2 * r], block[off + 2 * r + 1]]))
}

/// The 8 rows' MXFP4 scales, `2^(e - 128)` each (the codes' levels are kept doubled).
fn e8m0s(block: &[u8]) -> [f32; PANEL_ROWS] {
    std::array::from_fn(|r| mxfp4::e8m0_half(block[at::D + r]))
}

fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn i16_at(b: &[u8], off: usize) -> i32 {
    i16::from_le_bytes([b[off], b[off + 1]]) as i32
}

/// The low 4 bits of value `e` (0..32) of row `r` from the nibbles at `p`.
fn nibble(p: &[u8], r: usize, e: usize) -> i32 {
    let (k, t) = (e / 4, e % 4);
    let byte = p[32 * (k % 4) + 4 * r + t];
    (if k < 4 { byte & 0x0F } else { byte >> 4 }) as i32
}

/// Bit 4 of value `e` of row `r` from the fifth bits at `h`, as 0 or 16.
fn fifth(h: &[u8], r: usize, e: usize) -> i32 {
    (((h[4 * r + e % 4] >> (e / 4)) & 1) << 4) as i32
}

/// Bits 4..6 of value `e` of row `r` from Q6_K's high bits at `h`, as 0, 16, 32 or 48.
fn q6_high(h: &[u8], r: usize, e: usize) -> i32 {
    let (k, t) = (e / 4, e % 4);
    (((h[32 * (k / 4) + 4 * r + t] >> (2 * (k % 4))) & 3) << 4) as i32
}

/// Runs `dot(block, act, r) -> (isum, imin)` over the blocks and rows in the reference chain.
fn chain(
    ty: GgmlType,
    panel: &[u8],
    nb: usize,
    acts: &[u8],
    stride: usize,
    out: &mut [[f32; PANEL_ROWS]],
    dot: impl Fn(&[u8], &[u8], usize) -> (i32, i32),
) {
    check_call(ty, panel, nb, acts, stride, out.len());
    let l = PanelLayout::of(ty).unwrap();
    let k_quant = l.act_ty == GgmlType::Q8_K;
    for (row, out) in out.iter_mut().enumerate() {
        let (mut acc, mut acc_min) = ([0.0f32; PANEL_ROWS], [0.0f32; PANEL_ROWS]);
        for b in 0..nb {
            let block = &panel[b * l.block_bytes..(b + 1) * l.block_bytes];
            let act = &acts[row * stride + b * l.act_block_bytes..][..l.act_block_bytes];
            let da = f32::from_le_bytes(act[if k_quant { K_D } else { LEGACY_D }..][..4].try_into().unwrap());
            let dw = if ty == GgmlType::MXFP4 { e8m0s(block) } else { f16s(block, at::D) };
            let dmin = if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) { f16s(block, at::K4_DMIN) } else { [0.0; PANEL_ROWS] };
            for r in 0..PANEL_ROWS {
                let (isum, imin) = dot(block, act, r);
                acc[r] = (isum as f32).mul_add(dw[r] * da, acc[r]);
                acc_min[r] = (imin as f32).mul_add(dmin[r] * da, acc_min[r]);
            }
        }
        *out = std::array::from_fn(|r| acc[r] - acc_min[r]);
    }
}

/// `Σ (q + off_q) a - off * Σ a` over a legacy block of row `r`, `q` from `value`.
fn legacy(act: &[u8], off: i32, value: impl Fn(usize) -> i32) -> i32 {
    let dot: i32 = (0..32).map(|e| value(e) * act[LEGACY_QS + e] as i8 as i32).sum();
    dot - off * i32_at(act, LEGACY_SUM)
}

fn q4_0(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::Q4_0, panel, nb, acts, stride, out, |w, a, r| (legacy(a, 8, |e| nibble(&w[at::LEGACY_QUANTS..], r, e)), 0))
}

/// MXFP4: `Σ level · a`, the codes' (doubled) levels looked up from the nibbles. The tiers
/// look up `level + 12` (0..=24, unsigned) and take `12 Σ a` back out: the same integer.
fn mxfp4(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::MXFP4, panel, nb, acts, stride, out, |w, a, r| {
        (legacy(a, 0, |e| i32::from(mxfp4::LEVELS[nibble(&w[at::MXFP4_QUANTS..], r, e) as usize])), 0)
    })
}

/// IQ4_NL: `Σ level · a`, the levels (-127..=113) looked up from the nibbles.
fn iq4_nl(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::IQ4_NL, panel, nb, acts, stride, out, |w, a, r| {
        (legacy(a, 0, |e| i32::from(iq4::LEVELS[nibble(&w[at::LEGACY_QUANTS..], r, e) as usize])), 0)
    })
}

fn q5_0(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::Q5_0, panel, nb, acts, stride, out, |w, a, r| {
        (legacy(a, 16, |e| nibble(&w[at::LEGACY_QUANTS..], r, e) | fifth(&w[at::Q5_0_HIGH..], r, e)), 0)
    })
}

/// Q8_0 keeps ggml's order for its own type (so Q8_0 models stay bit-equal to llama.cpp): each
/// block adds its 8 partial sums of 4 products (values `4k..4k+4`, lane `k`) into 8 separate
/// chains, `acc_k = fma(isum_k, d_w * d_a, acc_k)`, reduced at the end as an AVX horizontal add:
/// `((acc_0 + acc_4) + (acc_2 + acc_6)) + ((acc_1 + acc_5) + (acc_3 + acc_7))`.
fn q8_0(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    check_call(GgmlType::Q8_0, panel, nb, acts, stride, out.len());
    let l = PanelLayout::of(GgmlType::Q8_0).unwrap();
    for (row, out) in out.iter_mut().enumerate() {
        let mut acc = [[0.0f32; PANEL_ROWS]; 8]; // [lane k][weight row]
        for b in 0..nb {
            let w = &panel[b * l.block_bytes..(b + 1) * l.block_bytes];
            let a = &acts[row * stride + b * l.act_block_bytes..][..l.act_block_bytes];
            let da = f32::from_le_bytes(a[LEGACY_D..LEGACY_D + 4].try_into().unwrap());
            let dw = f16s(w, at::D);
            for r in 0..PANEL_ROWS {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let isum: i32 = (0..4)
                        .map(|t| w[at::LEGACY_QUANTS + 32 * k + 4 * r + t] as i8 as i32 * a[LEGACY_QS + 4 * k + t] as i8 as i32)
                        .sum();
                    acc[r] = (isum as f32).mul_add(dw[r] * da, acc[r]);
                }
            }
        }
        *out = std::array::from_fn(|r| {
            ((acc[0][r] + acc[4][r]) + (acc[2][r] + acc[6][r])) + ((acc[1][r] + acc[5][r]) + (acc[3][r] + acc[7][r]))
        });
    }
}

/// Q4_K / Q5_K: `Σ_c sc_c Σ q a` and `Σ_c m_c Σ a` over the 8 chunks of a super-block of row `r`.
fn scale_min(w: &[u8], a: &[u8], r: usize, fifth_bits: bool) -> (i32, i32) {
    let (mut isum, mut imin) = (0, 0);
    for c in 0..8 {
        let s = 16 * (c / 2) + 2 * r + c % 2;
        let (sc, m) = (w[at::K4_SCALES + s] as i32, w[at::K4_MINS + s] as i32);
        let p = &w[at::K4_NIBBLES + 128 * c..];
        let dot: i32 = (0..32)
            .map(|e| {
                let q = nibble(p, r, e) | if fifth_bits { fifth(&w[at::Q5K_HIGH + 32 * c..], r, e) } else { 0 };
                q * a[K_QS + 32 * c + e] as i8 as i32
            })
            .sum();
        isum += sc * dot;
        imin += m * i16_at(a, K_SUMS32 + 2 * c);
    }
    (isum, imin)
}

fn q4_k(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::Q4_K, panel, nb, acts, stride, out, |w, a, r| scale_min(w, a, r, false))
}

fn q5_k(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::Q5_K, panel, nb, acts, stride, out, |w, a, r| scale_min(w, a, r, true))
}

/// Q6_K: `Σ_j sc_j (Σ q a - 32 Σ a)` over the 16 groups of 16 of a super-block of row `r`.
fn q6_k(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::Q6_K, panel, nb, acts, stride, out, |w, a, r| {
        let mut isum = 0;
        for j in 0..16 {
            let sc = w[at::Q6K_SCALES + 16 * (j / 2) + 2 * r + j % 2] as i8 as i32;
            let (c, first) = (j / 2, 16 * (j % 2));
            let p = &w[at::Q6K_NIBBLES + 128 * c..];
            let h = &w[at::Q6K_HIGH + 64 * c..];
            let dot: i32 = (first..first + 16).map(|e| (nibble(p, r, e) | q6_high(h, r, e)) * a[K_QS + 32 * c + e] as i8 as i32).sum();
            isum += sc * (dot - 32 * i16_at(a, K_SUMS16 + 2 * j));
        }
        (isum, 0)
    })
}

/// IQ4_XS: `Σ_c sc_c Σ level · a` over the 8 groups of 32 of a super-block of row `r`.
fn iq4_xs(panel: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [[f32; PANEL_ROWS]]) {
    chain(GgmlType::IQ4_XS, panel, nb, acts, stride, out, |w, a, r| {
        let mut isum = 0;
        for c in 0..8 {
            let sc = w[at::IQ4XS_SCALES + 16 * (c / 2) + 2 * r + c % 2] as i8 as i32;
            let p = &w[at::IQ4XS_NIBBLES + 128 * c..];
            let dot: i32 = (0..32).map(|e| i32::from(iq4::LEVELS[nibble(p, r, e) as usize]) * a[K_QS + 32 * c + e] as i8 as i32).sum();
            isum += sc * dot;
        }
        (isum, 0)
    })
}
