//! Test support shared by the x86 tiers' unit tests: one tier's kernels for one type against
//! the scalar reference, on random and extreme rows of many lengths.

use crate::quant::dispatch::{ops_for, Kernels};
use crate::quant::{GgmlType, Isa};

/// xorshift64*: reproducible test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1), with an occasional outlier 40 times larger.
    fn float(&mut self) -> f32 {
        let v = (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        if self.next().is_multiple_of(64) {
            40.0 * v
        } else {
            v
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Data {
    Quantized,
    RandomBytes,
    Zero,
    /// Every byte 0xFF, scales +-65504 (floats: large values).
    Saturated,
    /// Every byte 0x88 (Q4 quants at their offset, 8) with negative scales: -0.0 values.
    NegativeZero,
}

fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        _ => &[],
    }
}

fn weights(ty: GgmlType, n: usize, data: Data, rng: &mut Rng) -> Vec<u8> {
    let mut w = vec![0u8; ty.row_bytes(n).unwrap()];
    let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
    match data {
        Data::Zero => {}
        // the grid i-quants have no quantizer: random blocks stand for quantized weights
        Data::Quantized if crate::quant::iq_grid::grid_type(ty).is_some() => {
            w = crate::quant::iq_grid::random_row(ty, n / crate::quant::QK_K, rng.next());
        }
        Data::Quantized => {
            let x: Vec<f32> = (0..n).map(|_| rng.float()).collect();
            (ops_for(ty, Isa::Scalar).unwrap().quantize.expect("a type with a quantizer"))(&x, &mut w);
        }
        Data::RandomBytes | Data::Saturated | Data::NegativeZero => {
            match data {
                Data::RandomBytes => w.iter_mut().for_each(|b| *b = rng.next() as u8),
                Data::Saturated => w.fill(0xFF),
                _ => w.fill(0x88),
            }
            let value = |rng: &mut Rng| -> f32 {
                let sign = if rng.next().is_multiple_of(2) { 1.0 } else { -1.0 };
                match data {
                    Data::RandomBytes => 2.0 * rng.float(),
                    Data::Saturated => sign * 65504.0,
                    _ => -0.5 - (rng.next() % 4) as f32,
                }
            };
            match ty {
                GgmlType::F32 => w.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&value(rng).to_le_bytes())),
                GgmlType::F16 => w.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&f16(value(rng)))),
                GgmlType::BF16 => {
                    w.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&((value(rng).to_bits() >> 16) as u16).to_le_bytes()))
                }
                _ => {
                    for block in w.chunks_exact_mut(ty.type_size()) {
                        for &off in scale_offsets(ty) {
                            block[off..off + 2].copy_from_slice(&f16(value(rng)));
                        }
                        if ty == GgmlType::MXFP4 {
                            // the E8M0 exponent: large (2^90) but with every product finite
                            block[0] = match data {
                                Data::Saturated => 218,
                                _ => 100 + (rng.next() % 40) as u8,
                            };
                        }
                    }
                }
            }
        }
    }
    w
}

/// Element counts: single and odd block counts, and real row lengths.
fn sizes(ty: GgmlType) -> Vec<usize> {
    let b = ty.block_size();
    let mut v: Vec<usize> = [1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 128, 344].iter().map(|k| k * b).collect();
    if b == 1 {
        v.extend((1..=70).chain([4097, 11008]));
    }
    v
}

/// Checks `k` (tier `isa`'s kernels for `ty`) against the scalar reference: dequantization
/// bit for bit, dot products within 1e-5 of the sum of |terms|, the same bits on every call
/// and at every alignment. Skips (with a note) a tier this CPU lacks.
pub(crate) fn check_type(ty: GgmlType, isa: Isa, k: Kernels) {
    if !isa.is_available() {
        eprintln!("{isa} is not available on this CPU: {ty} kernels not checked");
        return;
    }
    let scalar = ops_for(ty, Isa::Scalar).unwrap();
    let act = ops_for(scalar.vec_dot_type, Isa::Scalar).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ty as u64);
    let data = [Data::Quantized, Data::RandomBytes, Data::Zero, Data::Saturated, Data::NegativeZero];
    for n in sizes(ty) {
        for d in data {
            let w = weights(ty, n, d, &mut rng);
            let mut w_ref = vec![0f32; n];
            (scalar.dequantize)(&w, &mut w_ref);
            let mut got = vec![0f32; n];
            (k.dequantize)(&w, &mut got);
            for i in 0..n {
                assert_eq!(got[i].to_bits(), w_ref[i].to_bits(), "{ty} {isa} n={n} {d:?}: dequant[{i}] {} vs {}", got[i], w_ref[i]);
            }
            // Activations: random, zero, and all at the largest quant.
            for a_kind in 0..3 {
                let x: Vec<f32> = (0..n)
                    .map(|i| match a_kind {
                        0 => rng.float(),
                        1 => 0.0,
                        _ => {
                            if i % 3 == 0 {
                                -3.0
                            } else {
                                3.0
                            }
                        }
                    })
                    .collect();
                let mut a = vec![0u8; scalar.vec_dot_type.row_bytes(n).unwrap()];
                (act.quantize.expect("a type with a quantizer"))(&x, &mut a);
                let mut a_ref = vec![0f32; n];
                (act.dequantize)(&a, &mut a_ref);
                let mag: f64 = w_ref.iter().zip(&a_ref).map(|(x, y)| (*x as f64 * *y as f64).abs()).sum();
                let want = (scalar.vec_dot)(&w, &a);
                let dot = (k.vec_dot)(&w, &a);
                let tol = 1e-5 * mag + 1e-30;
                assert!(
                    (dot as f64 - want as f64).abs() <= tol,
                    "{ty} {isa} n={n} {d:?} act {a_kind}: vec_dot {dot} vs ref {want} (tol {tol:e})"
                );
                assert_eq!(dot.to_bits(), (k.vec_dot)(&w, &a).to_bits(), "{ty} {isa}: not deterministic");
                // Rows straight from a file sit at any address.
                let (mut w1, mut a1) = (vec![0u8; w.len() + 1], vec![0u8; a.len() + 3]);
                w1[1..].copy_from_slice(&w);
                a1[3..].copy_from_slice(&a);
                assert_eq!(dot.to_bits(), (k.vec_dot)(&w1[1..], &a1[3..]).to_bits(), "{ty} {isa}: alignment");
            }
        }
    }
}

/// Best-of-`reps` GB/s (weight bytes) of `f` on rows of `n` values of `ty` filling `kib` KiB,
/// each row dotted with the same activation row, one thread.
pub(crate) fn time_dot(ty: GgmlType, n: usize, kib: usize, reps: usize, f: fn(&[u8], &[u8]) -> f32) -> f64 {
    use std::time::Instant;
    let mut rng = Rng(7);
    let scalar = ops_for(ty, Isa::Scalar).unwrap();
    let row = ty.row_bytes(n).unwrap();
    let rows = ((kib << 10) / row).max(1);
    let one = weights(ty, n, Data::Quantized, &mut rng);
    let w: Vec<u8> = (0..rows).flat_map(|_| one.iter().copied()).collect();
    let x: Vec<f32> = (0..n).map(|_| rng.float()).collect();
    let mut a = vec![0u8; scalar.vec_dot_type.row_bytes(n).unwrap()];
    (ops_for(scalar.vec_dot_type, Isa::Scalar).unwrap().quantize.expect("a type with a quantizer"))(&x, &mut a);
    let mut best = f64::MAX;
    let mut sink = 0.0f32;
    for _ in 0..reps {
        let t = Instant::now();
        for r in w.chunks_exact(row) {
            sink += f(std::hint::black_box(r), &a);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    (rows * row) as f64 / best / 1e9
}

/// Single-thread `vec_dot` throughput in GB/s of weight bytes, per type and tier: rows of
/// 11008 values filling a 4 MiB matrix (`VEC_DOT_KIB` to change), best of 20 passes.
/// `cargo test -p engine --lib vec_dot_throughput -- --ignored --nocapture`
#[test]
#[ignore = "timing, not a check"]
fn vec_dot_throughput() {
    let kib: usize = std::env::var("VEC_DOT_KIB").ok().and_then(|v| v.parse().ok()).unwrap_or(4096);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::MXFP4,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        let mut line = format!("{:>5}:", ty.to_string());
        for isa in Isa::available() {
            let gbs = time_dot(ty, 11008, kib, 20, ops_for(ty, isa).unwrap().vec_dot);
            line += &format!("  {isa} {gbs:6.1} GB/s");
        }
        eprintln!("{line}");
    }
}
