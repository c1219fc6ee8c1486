//! Shared checks of the K-quant unit tests: deterministic random inputs, the round-trip error
//! of a quantizer, and the agreement of an integer dot product with exact math.

use bytemuck::Zeroable;

use super::q8_k;
use crate::quant::blocks::BlockQ8K;
use crate::quant::QK_K;

/// xorshift64*: deterministic inputs without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

pub const N: usize = 4096;

/// `n` values from N(0, 1).
pub fn normal(seed: u64, n: usize) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.normal() as f32).collect()
}

/// `n` values uniform in [-1, 1).
pub fn uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| (2.0 * r.uniform() - 1.0) as f32).collect()
}

/// Root-mean-square of `x - y`, divided by the standard deviation of `x`.
pub fn relative_rmse(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len() as f64;
    let mse = x.iter().zip(y).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum::<f64>() / n;
    let mean = x.iter().map(|&a| a as f64).sum::<f64>() / n;
    let var = x.iter().map(|&a| (a as f64 - mean).powi(2)).sum::<f64>() / n;
    (mse / var).sqrt()
}

/// A type's typed reference functions.
pub struct Funcs<B> {
    pub quantize: fn(&[f32], &mut [B]),
    pub dequantize: fn(&[B], &mut [f32]),
    pub vec_dot: fn(&[B], &[BlockQ8K]) -> f32,
}

pub fn round_trip<B: Zeroable + Clone>(f: &Funcs<B>, x: &[f32]) -> Vec<f32> {
    let mut blocks = vec![B::zeroed(); x.len() / QK_K];
    (f.quantize)(x, &mut blocks);
    let mut y = vec![0.0f32; x.len()];
    (f.dequantize)(&blocks, &mut y);
    y
}

/// Relative RMSE of the round trip on 3 normal and 2 uniform vectors of 4096 values; fails
/// above the bounds. Returns the worst (normal, uniform) errors.
pub fn check_rmse<B: Zeroable + Clone>(f: &Funcs<B>, bound_normal: f64, bound_uniform: f64) -> (f64, f64) {
    let mut worst = (0.0f64, 0.0f64);
    for seed in 1..=3 {
        let x = normal(seed, N);
        let e = relative_rmse(&x, &round_trip(f, &x));
        assert!(e < bound_normal, "normal seed {seed}: relative RMSE {e} >= {bound_normal}");
        worst.0 = worst.0.max(e);
    }
    for seed in 11..=12 {
        let x = uniform(seed, N);
        let e = relative_rmse(&x, &round_trip(f, &x));
        assert!(e < bound_uniform, "uniform seed {seed}: relative RMSE {e} >= {bound_uniform}");
        worst.1 = worst.1.max(e);
    }
    worst
}

/// The integer dot product equals the f64 dot of the dequantized operands to 1e-5 of
/// `Σ|w_i a_i|`, for normal, uniform, offset and mixed-magnitude data, 1 and 16 blocks.
pub fn check_vec_dot<B: Zeroable + Clone>(f: &Funcs<B>) {
    for (seed, blocks) in [(21u64, 1usize), (22, 16), (23, 3)] {
        let n = blocks * QK_K;
        let mut w = normal(seed, n);
        let mut a = uniform(seed + 100, n);
        if seed == 23 {
            // Offsets (exercise the min terms) and groups of very different magnitude.
            for (i, v) in w.iter_mut().enumerate() {
                *v = *v * if (i / 16) % 3 == 0 { 1e-3 } else { 1.0 } + 0.7;
            }
            for (i, v) in a.iter_mut().enumerate() {
                *v *= if (i / 32) % 2 == 0 { 50.0 } else { 0.01 };
            }
        }
        let mut wb = vec![B::zeroed(); blocks];
        (f.quantize)(&w, &mut wb);
        let mut ab = vec![BlockQ8K::zeroed(); blocks];
        q8_k::quantize_ref(&a, &mut ab);
        let (mut wd, mut ad) = (vec![0.0f32; n], vec![0.0f32; n]);
        (f.dequantize)(&wb, &mut wd);
        q8_k::dequantize_ref(&ab, &mut ad);
        let exact: f64 = wd.iter().zip(&ad).map(|(&p, &q)| p as f64 * q as f64).sum();
        let scale: f64 = wd.iter().zip(&ad).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
        let got = (f.vec_dot)(&wb, &ab) as f64;
        assert!((got - exact).abs() <= 1e-5 * scale, "seed {seed}, {blocks} blocks: dot {got} vs exact {exact} (scale {scale})");
    }
}

/// Degenerate blocks quantize without panicking and come back finite: all zeros (exactly
/// zero), a constant, one outlier among zeros, small and huge magnitudes, all negative. (Far
/// smaller values push the f16 super-scales into subnormals, where the format itself, in ggml
/// too, loses more than the values' magnitude.)
pub fn check_edge_cases<B: Zeroable + Clone>(f: &Funcs<B>) {
    let mut cases: Vec<(&str, Vec<f32>)> = vec![
        ("zeros", vec![0.0; QK_K]),
        ("constant", vec![0.75; QK_K]),
        ("negative constant", vec![-3.0; QK_K]),
        ("small", normal(31, QK_K).iter().map(|v| v * 1e-4).collect()),
        ("huge", normal(32, QK_K).iter().map(|v| v * 1e4).collect()),
        ("all negative", normal(33, QK_K).iter().map(|v| -v.abs() - 1.0).collect()),
    ];
    let mut outlier = vec![0.0f32; QK_K];
    outlier[77] = 5.0;
    cases.push(("outlier", outlier));
    for (name, x) in &cases {
        let y = round_trip(f, x);
        assert!(y.iter().all(|v| v.is_finite()), "{name}: non-finite output");
        if *name == "zeros" {
            assert!(y.iter().all(|&v| v == 0.0), "zeros: {y:?}");
        }
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = x.iter().zip(&y).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= amax, "{name}: error {err} exceeds the largest magnitude {amax}");
    }
}
