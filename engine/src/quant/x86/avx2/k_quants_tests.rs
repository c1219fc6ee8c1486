//! Checks of a tier's K-quant kernels against the scalar references: dequantization bit for
//! bit, dot products within 1e-5 of sum |w_i a_i| and bitwise repeatable, over random and
//! extreme blocks and row lengths of 1, odd counts, 16 (4096 values) and 43 (11008) blocks.

use crate::quant::dispatch::Kernels;
use crate::quant::{ops_for, GgmlType, Isa, QK_K};

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
fn reference(ty: GgmlType) -> Kernels {
    let ops = ops_for(ty, Isa::Scalar).unwrap();
    Kernels { dequantize: ops.dequantize, vec_dot: ops.vec_dot }
}

/// `n` floats through a scalar reference quantizer.
fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut bytes = vec![0u8; ty.row_bytes(x.len()).unwrap()];
    (ops_for(ty, Isa::Scalar).unwrap().quantize.expect("a type with a quantizer"))(x, &mut bytes);
    bytes
}

/// One weight row against one activation row: dequantization bit-exact, dot product within
/// tolerance of the reference and of the exact (f64) sum, and bitwise repeatable.
fn check_row(isa: Isa, ty: GgmlType, k: &Kernels, w: &[u8], a: &[u8], what: &str) {
    let n = w.len() / ty.type_size() * QK_K;
    let Kernels { dequantize: ref_dequant, vec_dot: ref_dot } = reference(ty);

    let mut want = vec![0f32; n];
    ref_dequant(w, &mut want);
    let mut got = vec![f32::NAN; n];
    (k.dequantize)(w, &mut got);
    for (i, (g, r)) in got.iter().zip(&want).enumerate() {
        assert!(g.to_bits() == r.to_bits(), "{isa} {ty} dequantize ({what}, {n} values): value {i} is {g:e}, reference {r:e}");
    }

    let av = q8k_values(a);
    let scale: f64 = want.iter().zip(&av).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
    let exact: f64 = want.iter().zip(&av).map(|(&x, &y)| x as f64 * y as f64).sum();
    let tol = 1e-5 * scale + 1e-30;
    let r = ref_dot(w, a);
    let s = (k.vec_dot)(w, a);
    assert!((s as f64 - r as f64).abs() <= tol, "{isa} {ty} vec_dot ({what}, {n} values): {s:e}, reference {r:e}, sum|wa| {scale:e}");
    assert!((s as f64 - exact).abs() <= tol, "{isa} {ty} vec_dot ({what}, {n} values): {s:e}, exact {exact:e}, sum|wa| {scale:e}");
    if matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K) {
        // their row dots take the reference's float steps: the bits the many-row products give
        assert_eq!(s.to_bits(), r.to_bits(), "{isa} {ty} vec_dot ({what}): {s:e}, reference {r:e}");
    }
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

            // Real quantizations of N(0, 1) weights and activations.
            let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let act: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let w = quantize(ty, &x);
            let a = quantize(GgmlType::Q8_K, &act);
            check_row(isa, ty, &k, &w, &a, "quantized N(0, 1)");
            check_row(isa, ty, &k, &w, &a_rand, "quantized N(0, 1), random activations");

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
