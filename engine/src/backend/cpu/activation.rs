//! Activation functions of the feed-forward blocks, matching ggml's CPU results: SiLU, and GELU
//! (tanh form) evaluated the way ggml does it, through a table indexed by the f16 rounding of
//! the input, with the result rounded to f16.

use std::sync::OnceLock;

use half::f16;

use crate::quant::ggml_expf;

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// ggml's `sigmoid`: `1 / (1 + e^-x)`.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// gpt-oss's gated unit of gate `g` and up `u`, as ggml's `swiglu_oai` computes it (the C
/// library's `expf`): `min(g, limit)` through its sigmoid, times `clamp(u, -limit, limit) + 1`.
#[inline]
pub fn swiglu_oai(g: f32, u: f32) -> f32 {
    use crate::backend::{SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};
    let x = g.min(SWIGLU_OAI_LIMIT);
    let y = u.clamp(-SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT);
    x / (1.0 + (SWIGLU_OAI_ALPHA * -x).exp()) * (y + 1.0)
}

crate::quant::fma_variants!(
    /// `gate[i] = silu(gate[i]) · up[i]` over one row, as ggml's `swiglu` computes it: the
    /// polynomial exp on every full chunk of 16, the C library's `expf` on the rest.
    pub fn swiglu_row, pub(crate) fn swiglu_row_with(gate: &mut [f32], up: &[f32]) = swiglu_row_body
);

#[inline(always)]
fn swiglu_row_body(gate: &mut [f32], up: &[f32]) {
    let full = gate.len() / 16 * 16;
    for (a, &b) in gate[..full].iter_mut().zip(&up[..full]) {
        *a = *a / (1.0 + ggml_expf(0.0 - *a)) * b;
    }
    for (a, &b) in gate[full..].iter_mut().zip(&up[full..]) {
        *a = silu(*a) * b;
    }
}

fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

fn gelu_table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(|b| f16::from_f32(gelu_tanh(f16::from_bits(b).to_f32()))).collect())
}

/// GELU as ggml's CPU backend computes it.
#[inline]
pub fn gelu(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        gelu_table()[f16::from_f32(x).to_bits() as usize].to_f32()
    }
}

/// GELU with the exact error function, as BERT uses it.
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `a[i] = gelu_erf(a[i])`, times `gate[i]` where given, on tier `tier`: on AVX2 and up four
/// at a time (`activation_x86`), the same bits.
pub(crate) fn gelu_erf_row_with(tier: crate::quant::Isa, a: &mut [f32], gate: Option<&[f32]>) {
    #[cfg(target_arch = "x86_64")]
    super::activation_x86::gelu_erf_row(tier, a, gate);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = tier;
        match gate {
            Some(g) => a.iter_mut().zip(g).for_each(|(a, &g)| *a = gelu_erf(*a) * g),
            None => a.iter_mut().for_each(|a| *a = gelu_erf(*a)),
        }
    }
}

/// Maclaurin coefficients of erf(t) / t as a series in t²: (-1)^n / (n! (2n + 1)).
const ERF_TERMS: usize = 44;
pub(super) const ERF_SERIES: [f64; ERF_TERMS] = {
    let mut c = [0.0; ERF_TERMS];
    let mut fact = 1.0f64;
    let mut n = 0;
    while n < ERF_TERMS {
        if n > 0 {
            fact *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        c[n] = sign / (fact * (2 * n + 1) as f64);
        n += 1;
    }
    c
};

/// The Maclaurin series of erf by Horner's rule with as many terms as `t` needs for ~1e-15
/// (the first term left out is below 1e-18 of the sum for every `t < 2.5`).
fn erf_series(t: f64) -> f64 {
    let u = t * t;
    let n = (12 + (4.5 * u).ceil() as usize).min(ERF_TERMS);
    let p = ERF_SERIES[..n].iter().rev().fold(0.0, |p, &c| p * u + c);
    t * p * 2.0 / std::f64::consts::PI.sqrt()
}

/// erf from the continued fraction of erfc, accurate from 2.5 on (where the series loses
/// digits to cancellation).
fn erf_continued_fraction(t: f64) -> f64 {
    let mut f = 0.0;
    for k in (1..60).rev() {
        f = (k as f64 / 2.0) / (t + f);
    }
    1.0 - (-t * t).exp() / std::f64::consts::PI.sqrt() / (t + f)
}

/// Width of the intervals of [`erf_taylor`] (1/8) and the degree of their polynomials.
pub(super) const ERF_STEP: f64 = 0.125;
pub(super) const ERF_DEGREE: usize = 12;
/// Intervals up to 4, where erf rounds to 1 in f32.
const ERF_INTERVALS: usize = 32;

/// Taylor coefficients of erf at the centre `c` of each interval `[i/8, (i+1)/8)`:
/// `erf^(k)(c) / k!`, from `erf'(x) = 2/√π e^(-x²)` and `d^n/dx^n e^(-x²) = (-1)^n H_n(x)
/// e^(-x²)` (physicists' Hermite polynomials). Within 1/16 of the centre, degree 12 leaves out
/// less than 1e-19: the polynomial is erf to f64 rounding, at ~13 multiply-adds where the series
/// needs up to 40.
pub(super) fn erf_taylor() -> &'static [[f64; ERF_DEGREE + 1]; ERF_INTERVALS] {
    static TABLE: std::sync::OnceLock<[[f64; ERF_DEGREE + 1]; ERF_INTERVALS]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = [[0f64; ERF_DEGREE + 1]; ERF_INTERVALS];
        for (i, coefficients) in table.iter_mut().enumerate() {
            let c = (i as f64 + 0.5) * ERF_STEP;
            let gauss = 2.0 / std::f64::consts::PI.sqrt() * (-c * c).exp();
            coefficients[0] = if c < 2.5 { erf_series(c) } else { erf_continued_fraction(c) };
            // H_0, H_1, ... at c; coefficient k >= 1 is gauss · (-1)^(k-1) H_(k-1)(c) / k!
            let (mut h_prev, mut h) = (0.0, 1.0);
            let mut factorial = 1.0;
            for (k, coefficient) in coefficients.iter_mut().enumerate().skip(1) {
                factorial *= k as f64;
                let sign = if k % 2 == 1 { 1.0 } else { -1.0 };
                *coefficient = gauss * sign * h / factorial;
                let n = (k - 1) as f64;
                (h_prev, h) = (h, 2.0 * c * h - 2.0 * n * h_prev);
            }
        }
        table
    })
}

/// erf in f64, rounded to f32 (Abramowitz-Stegun 7.1.26 is too coarse): below 1/8 the
/// Maclaurin series (a few terms there, and exact relative to tiny arguments), up to 4 a Taylor
/// polynomial per 1/8 interval (the same cost everywhere: large activations are common, and
/// the continued fraction's 60 divisions made GELU the slowest step of Whisper's encoder), and
/// ±1 from 4 on (erf(4) = 1 - 1.5e-8 rounds to 1 in f32).
fn erf(x: f32) -> f32 {
    let x = f64::from(x);
    let t = x.abs();
    let r = if t < ERF_STEP {
        erf_series(t)
    } else if t < 4.0 {
        let i = ((t / ERF_STEP) as usize).min(ERF_INTERVALS - 1);
        let d = t - (i as f64 + 0.5) * ERF_STEP;
        erf_taylor()[i].iter().rev().fold(0.0, |p, &c| p * d + c)
    } else {
        1.0
    };
    (if x < 0.0 { -r } else { r }) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Isa;

    #[test]
    fn swiglu_is_silu_times_up_and_tiers_agree_bit_for_bit() {
        let gate: Vec<f32> = (0..261).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let up: Vec<f32> = (0..261).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut plain = gate.clone();
        swiglu_row_with(Isa::Scalar, &mut plain, &up);
        for tier in Isa::available() {
            let mut fused = gate.clone();
            swiglu_row_with(tier, &mut fused, &up);
            assert_eq!(
                plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                fused.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{tier:?}"
            );
        }
        for i in 0..gate.len() {
            let want = silu(gate[i]) * up[i];
            assert!((plain[i] - want).abs() <= 1e-6 * (1.0 + want.abs()), "element {i}: {} vs {want}", plain[i]);
        }
    }

    #[test]
    fn known_values() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-3);
        assert_eq!(gelu(-11.0), 0.0);
        assert_eq!(gelu(12.0), 12.0);
        assert!((gelu_erf(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((erf(0.5) - 0.520_499_9).abs() < 1e-6);
        assert!((erf(3.0) - 0.999_977_9).abs() < 1e-6);
        assert_eq!((erf(4.0), erf(-7.0), erf(0.0)), (1.0, -1.0, 0.0));
    }

    /// The plain term-by-term series (every term summed until negligible), as the reference.
    fn erf_reference(x: f32) -> f32 {
        let x = f64::from(x);
        let t = x.abs();
        if t >= 2.5 {
            let r = if t < 4.0 { erf_continued_fraction(t) } else { 1.0 };
            return (if x < 0.0 { -r } else { r }) as f32;
        }
        let (mut sum, mut term, t2, mut n) = (t, t, t * t, 0.0);
        loop {
            n += 1.0;
            term *= -t2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        let r = sum * 2.0 / std::f64::consts::PI.sqrt();
        (if x < 0.0 { -r } else { r }) as f32
    }

    #[test]
    fn erf_equals_the_term_by_term_sum() {
        let mut equal = 0;
        let n = 200_000;
        for i in 0..=n {
            let x = -4.5 + 9.0 * i as f32 / n as f32;
            let (a, b) = (erf(x), erf_reference(x));
            assert!((a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1, "erf({x}): {a} vs {b}");
            equal += usize::from(a == b);
        }
        assert!(equal as f64 >= 0.9999 * n as f64, "{equal} of {n} equal");
        // continuity where each Taylor interval meets the next and where ±1 starts
        let seams = (1..=32).map(|i| i as f32 / 8.0);
        for hi in seams {
            let lo = f32::from_bits(hi.to_bits() - 1);
            assert!((erf(hi) - erf(lo)).abs() <= 2.0 * f32::EPSILON, "{lo}..{hi}");
            assert!((erf(lo).to_bits() as i64 - erf_reference(lo).to_bits() as i64).abs() <= 1, "erf({lo})");
        }
        // tiny arguments keep their relative precision: erf(t) = 2t/√π
        for t in [1e-30f32, 1e-10, 1e-5] {
            assert_eq!(erf(t), (2.0 * f64::from(t) / std::f64::consts::PI.sqrt()) as f32);
        }
    }
}
