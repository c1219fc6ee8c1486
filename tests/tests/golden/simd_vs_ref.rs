//! Every SIMD tier this CPU has, for every weight type, against the scalar reference:
//! dequantization bit-exact, dot products within 1e-5 relative, on random and extreme data.

use engine::quant::{ops_for, GgmlType, Isa, TypeOps};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WEIGHT_TYPES: [GgmlType; 16] = GgmlType::WEIGHT_TYPES;

/// Byte offsets of the f16 scale fields inside one block, so random bytes can be given finite
/// scales (random bits would give NaN and infinity, which compare as nothing).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4_NL | T::IQ4_XS => &[0],
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => &[0, 2],
        T::Q2_K => &[80, 82],
        T::Q3_K => &[108],
        T::Q6_K => &[208],
        _ => &[],
    }
}

/// Element counts to test: one block, odd block counts, and real row lengths.
fn sizes(ty: GgmlType) -> Vec<usize> {
    let b = ty.block_size();
    let mut v = vec![b, 3 * b, 7 * b, 4096, 11008];
    if b == 1 {
        v.extend([5, 15, 17, 31, 33, 63, 65]);
    }
    v
}

#[derive(Clone, Copy, Debug)]
enum Data {
    /// Weights from the reference quantizer applied to random floats.
    Quantized,
    /// Random bytes with finite, random-sign scales.
    RandomBytes,
    /// Every byte zero.
    Zero,
    /// Every quant and packed-scale byte 0xFF, scales at +-65504 (the f16 maximum).
    Saturated,
}

fn random_floats(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v: f32 = rng.random_range(-1.0..1.0);
            // A few outliers, as real activations have.
            if rng.random_ratio(1, 64) {
                v * 40.0
            } else {
                v
            }
        })
        .collect()
}

fn finite_f16(rng: &mut StdRng, saturated: bool) -> [u8; 2] {
    let v: f32 = if saturated { 65504.0 } else { rng.random_range(1e-4..2.0) };
    let s = if rng.random_bool(0.5) { v } else { -v };
    half::f16::from_f32(s).to_bits().to_le_bytes()
}

fn weights(ty: GgmlType, n: usize, data: Data, rng: &mut StdRng) -> Vec<u8> {
    let scalar = ops_for(ty, Isa::Scalar).unwrap();
    let mut bytes = vec![0u8; ty.row_bytes(n).unwrap()];
    match data {
        Data::Zero => {}
        Data::Quantized => (scalar.quantize.expect("a type with a quantizer"))(&random_floats(rng, n), &mut bytes),
        Data::RandomBytes | Data::Saturated => {
            let saturated = matches!(data, Data::Saturated);
            if saturated {
                bytes.fill(0xFF)
            } else {
                rng.fill(&mut bytes[..])
            }
            match ty {
                GgmlType::F32 => {
                    for c in bytes.chunks_exact_mut(4) {
                        let v: f32 = if saturated { 3.0e4 } else { rng.random_range(-2.0..2.0) };
                        c.copy_from_slice(&v.to_le_bytes());
                    }
                }
                GgmlType::F16 => {
                    for c in bytes.chunks_exact_mut(2) {
                        c.copy_from_slice(&finite_f16(rng, saturated));
                    }
                }
                GgmlType::BF16 => {
                    for c in bytes.chunks_exact_mut(2) {
                        let v: f32 = if saturated { -3.0e4 } else { rng.random_range(-2.0..2.0) };
                        c.copy_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes());
                    }
                }
                _ => {
                    for block in bytes.chunks_exact_mut(ty.type_size()) {
                        for &off in f16_fields(ty) {
                            block[off..off + 2].copy_from_slice(&finite_f16(rng, saturated));
                        }
                        if ty == GgmlType::MXFP4 {
                            // the E8M0 exponent: up to 2^90, every product finite
                            block[0] = if saturated { 218 } else { rng.random_range(100..140) };
                        }
                    }
                }
            }
        }
    }
    bytes
}

fn activations(ops: &TypeOps, n: usize, rng: &mut StdRng, zero: bool) -> Vec<u8> {
    let act = ops_for(ops.vec_dot_type, Isa::Scalar).unwrap();
    let x = if zero { vec![0.0; n] } else { random_floats(rng, n) };
    let mut bytes = vec![0u8; ops.vec_dot_type.row_bytes(n).unwrap()];
    (act.quantize.expect("a type with a quantizer"))(&x, &mut bytes);
    bytes
}

fn dequant(ops: &TypeOps, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; n];
    (ops.dequantize)(bytes, &mut out);
    out
}

#[test]
fn every_simd_tier_matches_the_scalar_reference() {
    let tiers: Vec<Isa> = Isa::available().into_iter().filter(|&i| i != Isa::Scalar).collect();
    eprintln!("tiers tested against scalar: {tiers:?}");
    let mut rng = StdRng::seed_from_u64(0x5EED);
    let mut checked = 0usize;
    let mut failures = Vec::new();
    for ty in WEIGHT_TYPES {
        let scalar = ops_for(ty, Isa::Scalar).unwrap();
        let act_scalar = ops_for(scalar.vec_dot_type, Isa::Scalar).unwrap();
        for n in sizes(ty) {
            for data in [Data::Quantized, Data::RandomBytes, Data::Zero, Data::Saturated] {
                let w = weights(ty, n, data, &mut rng);
                let w_ref = dequant(&scalar, &w, n);
                for zero_act in [false, true] {
                    let a = activations(&scalar, n, &mut rng, zero_act);
                    let a_ref = dequant(&act_scalar, &a, n);
                    let dot_ref = (scalar.vec_dot)(&w, &a);
                    // The bound scales with the sum of |terms|: any summation order is within it.
                    let mag: f64 = w_ref.iter().zip(&a_ref).map(|(x, y)| (*x as f64 * *y as f64).abs()).sum();
                    let exact: f64 = w_ref.iter().zip(&a_ref).map(|(x, y)| *x as f64 * *y as f64).sum();
                    let tol = 1e-5 * mag + 1e-30;
                    // Q8_1 carries the block sum as an f16 `s` (ggml's format), which the offset
                    // term of Q4_1/Q5_1 uses: those references are exact only up to that rounding.
                    let exact_ref = scalar.vec_dot_type != GgmlType::Q8_1;
                    if exact_ref && (dot_ref as f64 - exact).abs() > tol {
                        failures.push(format!("{ty} scalar n={n} {data:?}: ref dot {dot_ref} vs exact {exact}"));
                    }
                    for &isa in &tiers {
                        let simd = ops_for(ty, isa).unwrap();
                        let got = (simd.vec_dot)(&w, &a);
                        // Q8_0 follows ggml's accumulation order on every tier: bit-equal.
                        let off = if ty == GgmlType::Q8_0 && !dot_ref.is_nan() {
                            got.to_bits() != dot_ref.to_bits()
                        } else {
                            (got as f64 - dot_ref as f64).abs() > tol || got.is_nan() != dot_ref.is_nan()
                        };
                        if off {
                            failures.push(format!(
                                "{ty} {isa} n={n} {data:?} zero_act={zero_act}: vec_dot {got} vs ref {dot_ref} (tol {tol:e})"
                            ));
                        }
                        // Batch invariance: the same inputs give the same bits every time.
                        assert_eq!(got.to_bits(), (simd.vec_dot)(&w, &a).to_bits());
                        checked += 1;
                    }
                }
                for &isa in &tiers {
                    let simd = ops_for(ty, isa).unwrap();
                    let got = dequant(&simd, &w, n);
                    if let Some(i) = (0..n).find(|&i| got[i].to_bits() != w_ref[i].to_bits()) {
                        failures.push(format!("{ty} {isa} n={n} {data:?}: dequant[{i}] = {} vs ref {}", got[i], w_ref[i]));
                    }
                }
            }
        }
    }
    eprintln!("{checked} SIMD dot products checked");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_weight_type_has_its_own_kernels_on_every_simd_tier() {
    for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
        for ty in WEIGHT_TYPES {
            assert_eq!(ops_for(ty, isa).unwrap().isa, isa, "{ty} has no {isa} kernels");
        }
    }
}

#[test]
fn forcing_a_tier_that_the_cpu_lacks_is_an_error() {
    for isa in Isa::ALL {
        assert_eq!(ops_for(GgmlType::Q4_0, isa).is_ok(), isa.is_available());
    }
    assert!(ops_for(GgmlType::TQ1_0, Isa::Scalar).is_err());
}
