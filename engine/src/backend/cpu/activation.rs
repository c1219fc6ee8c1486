//! Activation functions of the feed-forward blocks, matching ggml's CPU results: SiLU, and GELU
//! (tanh form) evaluated the way ggml does it, through a table indexed by the f16 rounding of
//! the input, with the result rounded to f16.

use std::sync::OnceLock;

use half::f16;

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
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

/// Maclaurin coefficients of erf(t) / t as a series in t²: (-1)^n / (n! (2n + 1)).
const ERF_TERMS: usize = 44;
const ERF_SERIES: [f64; ERF_TERMS] = {
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

/// erf in f64, rounded to f32 (Abramowitz-Stegun 7.1.26 is too coarse): below 2.5 the
/// Maclaurin series by Horner's rule with as many terms as `t` needs for ~1e-15, then the
/// continued fraction of erfc, and ±1 from 4 on (erf(4) = 1 - 1.5e-8 rounds to 1 in f32).
fn erf(x: f32) -> f32 {
    let x = f64::from(x);
    let t = x.abs();
    let r = if t < 2.5 {
        let u = t * t;
        // the first term left out is below 1e-18 of the sum for every u < 6.25
        let n = (12 + (4.5 * u).ceil() as usize).min(ERF_TERMS);
        let p = ERF_SERIES[..n].iter().rev().fold(0.0, |p, &c| p * u + c);
        t * p * 2.0 / std::f64::consts::PI.sqrt()
    } else if t < 4.0 {
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (t + f);
        }
        1.0 - (-t * t).exp() / std::f64::consts::PI.sqrt() / (t + f)
    } else {
        1.0
    };
    (if x < 0.0 { -r } else { r }) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

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
            return erf(x as f32);
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
    fn erf_series_by_horner_equals_the_term_by_term_sum() {
        let mut equal = 0;
        let n = 200_000;
        for i in 0..=n {
            let x = -3.0 + 6.0 * i as f32 / n as f32;
            let (a, b) = (erf(x), erf_reference(x));
            assert!((a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1, "erf({x}): {a} vs {b}");
            equal += usize::from(a == b);
        }
        assert!(equal as f64 >= 0.9999 * n as f64, "{equal} of {n} equal");
        // continuity where the continued fraction takes over and where ±1 starts
        for (lo, hi) in [(2.499_999_8f32, 2.5f32), (3.999_999_8, 4.0)] {
            assert!((erf(hi) - erf(lo)).abs() <= 2.0 * f32::EPSILON, "{lo}..{hi}");
        }
    }
}
