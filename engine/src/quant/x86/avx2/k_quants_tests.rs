//! Checks of a tier's K-quant kernels against the scalar references: dequantization bit for
//! bit, dot products within 1e-5 of sum |w_i a_i| and bitwise repeatable, over random and
//! extreme blocks and row lengths of 1, odd counts, 16 (4096 values) and 43 (11008) blocks.

use crate::quant::dispatch::Kernels;
use crate::quant::{GgmlType, Isa, QK_K};

const TYPES: [GgmlType; 5] = [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
const BLOCK_COUNTS: [usize; 6] = [1, 2, 3, 7, 16, 43];
const Q8K_BYTES: usize = 292;

/// splitmix64: small, seedable, good enough for test data.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f32 {
        let u1 = (self.uniform() as f64).max(1e-12);
        let u2 = self.uniform() as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }

    pub(crate) fn fill(&mut self, bytes: &mut [u8]) {
        for b in bytes {
            *b = self.next_u64() as u8;
        }
    }
}

/// Offsets of the f16 super-block scales (`d`, then `dmin` where the type has one).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => unreachable!(),
    }
}

fn set_f16(block: &mut [u8], at: usize, v: f32) {
    block[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// Random bytes everywhere (every quant and scale bit pattern), with finite f16 scales of
/// either sign.
fn random_block_bytes(ty: GgmlType, nb: usize, rng: &mut Rng) -> Vec<u8> {
    let bs = ty.type_size();
    let mut w = vec![0u8; nb * bs];
    rng.fill(&mut w);
    for b in w.chunks_exact_mut(bs) {
        for &at in f16_fields(ty) {
            let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
            set_f16(b, at, sign * (0.001 + rng.uniform()) * 0.1);
        }
    }
    w
}

/// Extreme blocks: every byte `fill`, then the f16 scales set to `d` (and `dmin`).
fn extreme_block_bytes(ty: GgmlType, nb: usize, fill: u8, d: f32, dmin: f32) -> Vec<u8> {
    let bs = ty.type_size();
    let mut w = vec![fill; nb * bs];
    for b in w.chunks_exact_mut(bs) {
        for (&at, v) in f16_fields(ty).iter().zip([d, dmin]) {
            set_f16(b, at, v);
        }
    }
    w
}

/// Q8_K activation blocks with the given quants and scale, and consistent block sums.
fn q8k_from_quants(qs: &[i8], d: f32) -> Vec<u8> {
    let mut a = Vec::with_capacity(qs.len() / QK_K * Q8K_BYTES);
    for q in qs.chunks_exact(QK_K) {
        a.extend_from_slice(&d.to_le_bytes());
        a.extend(q.iter().map(|&v| v as u8));
        for g in q.chunks_exact(16) {
            let s: i16 = g.iter().map(|&v| v as i16).sum();
            a.extend_from_slice(&s.to_le_bytes());
        }
    }
    a
}

/// The f32 values of Q8_K activation blocks.
fn q8k_values(a: &[u8]) -> Vec<f32> {
    let mut v = Vec::with_capacity(a.len() / Q8K_BYTES * QK_K);
    for b in a.chunks_exact(Q8K_BYTES) {
        let d = f32::from_le_bytes(b[0..4].try_into().unwrap());
        v.extend(b[4..4 + QK_K].iter().map(|&q| d * q as i8 as f32));
    }
    v
}

/// The scalar reference's kernels for `ty`.
// TEMPORARY: written from ggml's dequantize_row_q*_K until the scalar references land.
fn reference(ty: GgmlType) -> (fn(&[u8], &mut [f32]), fn(&[u8], &[u8]) -> f32) {
    use GgmlType as T;
    let dot: fn(&[u8], &[u8]) -> f32 = match ty {
        T::Q2_K => mirror::exact_dot::<10>,
        T::Q3_K => mirror::exact_dot::<11>,
        T::Q4_K => mirror::exact_dot::<12>,
        T::Q5_K => mirror::exact_dot::<13>,
        T::Q6_K => mirror::exact_dot::<14>,
        _ => unreachable!(),
    };
    (mirror::dequant(ty), dot)
}

mod mirror {
    use super::*;

    fn f16(b: &[u8], at: usize) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
    }

    pub fn dequant(ty: GgmlType) -> fn(&[u8], &mut [f32]) {
        match ty {
            GgmlType::Q2_K => q2k,
            GgmlType::Q3_K => q3k,
            GgmlType::Q4_K => q4k,
            GgmlType::Q5_K => q5k,
            GgmlType::Q6_K => q6k,
            _ => unreachable!(),
        }
    }

    pub fn exact_dot<const T: u32>(w: &[u8], a: &[u8]) -> f32 {
        let ty = GgmlType::from_id(T).unwrap();
        let mut x = vec![0f32; w.len() / ty.type_size() * QK_K];
        dequant(ty)(w, &mut x);
        x.iter().zip(q8k_values(a)).map(|(&x, y)| x as f64 * y as f64).sum::<f64>() as f32
    }

    fn q2k(w: &[u8], out: &mut [f32]) {
        for (b, y) in w.chunks_exact(84).zip(out.chunks_exact_mut(QK_K)) {
            let (d, dmin) = (f16(b, 80), f16(b, 82));
            let (mut yi, mut is) = (0, 0);
            for n in 0..2 {
                let q = &b[16 + 32 * n..];
                for j in 0..4 {
                    for h in 0..2 {
                        let sc = b[is];
                        is += 1;
                        let dl = d * (sc & 0xF) as f32;
                        let ml = dmin * (sc >> 4) as f32;
                        for l in 0..16 {
                            y[yi] = dl * ((q[16 * h + l] >> (2 * j)) & 3) as f32 - ml;
                            yi += 1;
                        }
                    }
                }
            }
        }
    }

    fn q3k(w: &[u8], out: &mut [f32]) {
        for (b, y) in w.chunks_exact(110).zip(out.chunks_exact_mut(QK_K)) {
            let d_all = f16(b, 108);
            let s = &b[96..108];
            let us = |is: usize| -> i32 {
                (match is {
                    0..=3 => (s[is] & 0xF) | ((s[is + 8] & 3) << 4),
                    4..=7 => (s[is] & 0xF) | (((s[is + 4] >> 2) & 3) << 4),
                    8..=11 => (s[is - 8] >> 4) | (((s[is] >> 4) & 3) << 4),
                    _ => (s[is - 8] >> 4) | (((s[is - 4] >> 6) & 3) << 4),
                }) as i32
            };
            let hm = &b[0..32];
            let (mut yi, mut is, mut m) = (0, 0, 1u8);
            for n in 0..2 {
                let q = &b[32 + 32 * n..];
                for j in 0..4 {
                    for h in 0..2 {
                        let dl = d_all * (us(is) - 32) as f32;
                        is += 1;
                        for l in 16 * h..16 * h + 16 {
                            let v = ((q[l] >> (2 * j)) & 3) as i32 - if hm[l] & m != 0 { 0 } else { 4 };
                            y[yi] = dl * v as f32;
                            yi += 1;
                        }
                    }
                    m = m.wrapping_shl(1);
                }
            }
        }
    }

    fn gsm(j: usize, q: &[u8]) -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        }
    }

    fn q45k(b: &[u8], y: &mut [f32], qh: Option<&[u8]>, qs: &[u8]) {
        let (d, dmin) = (f16(b, 0), f16(b, 2));
        for c in 0..4 {
            let (sc, m) = gsm(2 * c, &b[4..16]);
            let (d1, m1) = (d * sc as f32, dmin * m as f32);
            let (sc, m) = gsm(2 * c + 1, &b[4..16]);
            let (d2, m2) = (d * sc as f32, dmin * m as f32);
            for l in 0..32 {
                let (h1, h2) = match qh {
                    Some(qh) => ((qh[l] >> (2 * c)) & 1, (qh[l] >> (2 * c + 1)) & 1),
                    None => (0, 0),
                };
                y[64 * c + l] = d1 * ((qs[32 * c + l] & 0xF) + 16 * h1) as f32 - m1;
                y[64 * c + 32 + l] = d2 * ((qs[32 * c + l] >> 4) + 16 * h2) as f32 - m2;
            }
        }
    }

    fn q4k(w: &[u8], out: &mut [f32]) {
        for (b, y) in w.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
            q45k(b, y, None, &b[16..]);
        }
    }

    fn q5k(w: &[u8], out: &mut [f32]) {
        for (b, y) in w.chunks_exact(176).zip(out.chunks_exact_mut(QK_K)) {
            q45k(b, y, Some(&b[16..48]), &b[48..]);
        }
    }

    fn q6k(w: &[u8], out: &mut [f32]) {
        for (b, y) in w.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
            let d = f16(b, 208);
            for n in 0..2 {
                let (ql, qh) = (&b[64 * n..], &b[128 + 32 * n..]);
                let sc = |i: usize| b[192 + 8 * n + i] as i8 as f32;
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[128 * n + l] = d * sc(is) * q1 as f32;
                    y[128 * n + l + 32] = d * sc(is + 2) * q2 as f32;
                    y[128 * n + l + 64] = d * sc(is + 4) * q3 as f32;
                    y[128 * n + l + 96] = d * sc(is + 6) * q4 as f32;
                }
            }
        }
    }
}

/// One weight row against one activation row: dequantization bit-exact, dot product within
/// tolerance of the reference and of the exact (f64) sum, and bitwise repeatable.
fn check_row(isa: Isa, ty: GgmlType, k: &Kernels, w: &[u8], a: &[u8], what: &str) {
    let n = w.len() / ty.type_size() * QK_K;
    let (ref_dequant, ref_dot) = reference(ty);

    let mut want = vec![0f32; n];
    ref_dequant(w, &mut want);
    let mut got = vec![f32::NAN; n];
    (k.dequantize)(w, &mut got);
    for (i, (g, r)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.to_bits() == r.to_bits(),
            "{isa} {ty} dequantize ({what}, {n} values): value {i} is {g:e}, reference {r:e}"
        );
    }

    let av = q8k_values(a);
    let scale: f64 = want.iter().zip(&av).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
    let exact: f64 = want.iter().zip(&av).map(|(&x, &y)| x as f64 * y as f64).sum();
    let tol = 1e-5 * scale + 1e-30;
    let r = ref_dot(w, a);
    let s = (k.vec_dot)(w, a);
    assert!(
        (s as f64 - r as f64).abs() <= tol,
        "{isa} {ty} vec_dot ({what}, {n} values): {s:e}, reference {r:e}, sum|wa| {scale:e}"
    );
    assert!(
        (s as f64 - exact).abs() <= tol,
        "{isa} {ty} vec_dot ({what}, {n} values): {s:e}, exact {exact:e}, sum|wa| {scale:e}"
    );
    let again = (k.vec_dot)(w, a);
    assert_eq!(s.to_bits(), again.to_bits(), "{isa} {ty} vec_dot is not repeatable ({what})");
}

/// Runs every check on tier `isa` through `kernels` (that tier's table); skips tiers the CPU
/// lacks.
pub(crate) fn check_tier(isa: Isa, kernels: fn(GgmlType) -> Option<Kernels>) {
    if !isa.is_available() {
        eprintln!("{isa} is not available on this CPU: skipped");
        return;
    }
    let mut rng = Rng::new(0x5eed_0000 + isa as u64);
    for ty in TYPES {
        let k = kernels(ty).unwrap_or_else(|| panic!("{isa} has no {ty} kernels"));
        for nb in BLOCK_COUNTS {
            let n = nb * QK_K;
            let qs: Vec<i8> = (0..n).map(|_| rng.next_u64() as i8).collect();
            let a_rand = q8k_from_quants(&qs, 0.01 + rng.uniform());

            let w = random_block_bytes(ty, nb, &mut rng);
            check_row(isa, ty, &k, &w, &a_rand, "random bytes");

            // Extremes: all-zero, all-ones bits with the largest f16 of either sign, and
            // all-ones quants and scales against the largest activations of either sign.
            check_row(isa, ty, &k, &vec![0u8; nb * ty.type_size()], &a_rand, "all zero");
            for d in [65504.0, -65504.0, 1.0, -0.5] {
                let w = extreme_block_bytes(ty, nb, 0xFF, d, d);
                check_row(isa, ty, &k, &w, &a_rand, &format!("0xFF, d = {d}"));
                for q in [127i8, -127, -128] {
                    let a = q8k_from_quants(&vec![q; n], 1.0);
                    check_row(isa, ty, &k, &w, &a, &format!("0xFF, d = {d}, a = {q}"));
                }
            }
            let w = extreme_block_bytes(ty, nb, 0x00, 65504.0, 65504.0);
            check_row(isa, ty, &k, &w, &a_rand, "0x00, d = 65504");
            // (d != dmin: with d == dmin these bits give weights that cancel to exactly 0,
            // which no float evaluation order other than the reference's own reproduces.)
            let w = extreme_block_bytes(ty, nb, 0x55, -65504.0, 1.5);
            check_row(isa, ty, &k, &w, &a_rand, "0x55, d = -65504");
        }
    }
}
