//! The discrete Fourier transform of a spectrogram's frames: a mixed-radix FFT in f64
//! (recursive decimation in time over the length's factors, radix 4 where it can), for the
//! power of a real frame's one-sided spectrum. Whisper's frames are 400 samples (4 · 4 · 5 · 5).

use std::f64::consts::PI;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Complex {
    re: f64,
    im: f64,
}

impl Complex {
    fn mul(self, o: Complex) -> Complex {
        Complex { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }

    fn add(self, o: Complex) -> Complex {
        Complex { re: self.re + o.re, im: self.im + o.im }
    }
}

/// The largest factor a length may have: each stage's butterflies take `factor²` products.
const MAX_FACTOR: usize = 16;

/// Buffers of one transform: the frame as complex values, and its spectrum.
pub struct FftScratch {
    input: Vec<Complex>,
    spectrum: Vec<Complex>,
}

/// A planned transform of one length.
pub struct Fft {
    n: usize,
    /// The length's factors, outermost stage first: 4s, then 2, then odd primes.
    factors: Vec<usize>,
    /// `e^(-2πi k / n)` for `k < n`.
    twiddles: Vec<Complex>,
}

impl Fft {
    /// The transform of length `n` (at least 1, no prime factor above 16).
    pub fn new(n: usize) -> Fft {
        assert!(n >= 1, "an FFT of no samples");
        let mut factors = Vec::new();
        let mut rest = n;
        while rest.is_multiple_of(4) {
            factors.push(4);
            rest /= 4;
        }
        let mut p = 2;
        while rest > 1 {
            while rest.is_multiple_of(p) {
                factors.push(p);
                rest /= p;
            }
            p += 1;
        }
        assert!(factors.iter().all(|&f| f <= MAX_FACTOR), "an FFT of {n} samples: a prime factor above {MAX_FACTOR}");
        let twiddles = (0..n)
            .map(|k| {
                let angle = -2.0 * PI * k as f64 / n as f64;
                Complex { re: angle.cos(), im: angle.sin() }
            })
            .collect();
        Fft { n, factors, twiddles }
    }

    /// Buffers for [`Fft::power_spectrum`] (one per thread).
    pub fn scratch(&self) -> FftScratch {
        FftScratch { input: vec![Complex::default(); self.n], spectrum: vec![Complex::default(); self.n] }
    }

    /// `out[k] = |X_k|²` for `k ≤ n / 2`, `X` the DFT of the real `frame` (of `n` samples).
    pub fn power_spectrum(&self, frame: &[f64], scratch: &mut FftScratch, out: &mut [f64]) {
        assert!(frame.len() == self.n && out.len() == self.n / 2 + 1, "a frame of the planned length");
        let FftScratch { input, spectrum } = scratch;
        assert!(input.len() == self.n && spectrum.len() == self.n, "buffers of this plan");
        for (c, &x) in input.iter_mut().zip(frame) {
            *c = Complex { re: x, im: 0.0 };
        }
        self.transform(input, 0, 1, self.n, 0, spectrum);
        for (o, x) in out.iter_mut().zip(spectrum.iter()) {
            *o = x.re * x.re + x.im * x.im;
        }
    }

    /// The DFT of the `len` samples `x[offset + j * stride]` into `out` (of `len`), `len` the
    /// product of `factors[stage..]`: the sub-transforms of each residue modulo the first
    /// factor `p`, then `len / p` butterflies of `p` points.
    fn transform(&self, x: &[Complex], offset: usize, stride: usize, len: usize, stage: usize, out: &mut [Complex]) {
        if len == 1 {
            out[0] = x[offset];
            return;
        }
        let p = self.factors[stage];
        let m = len / p;
        for (r, sub) in out.chunks_exact_mut(m).enumerate() {
            self.transform(x, offset + r * stride, stride * p, m, stage + 1, sub);
        }
        // W_len^j = W_n^(j · n / len); the p-point DFT's roots are W_n^(n / p)
        let (step, root) = (self.n / len, self.n / p);
        let mut y = [Complex::default(); MAX_FACTOR];
        for k in 0..m {
            for (r, yr) in y[..p].iter_mut().enumerate() {
                *yr = out[r * m + k].mul(self.twiddles[(r * k * step) % self.n]);
            }
            for q in 0..p {
                out[q * m + k] = (0..p).fold(Complex::default(), |s, r| s.add(y[r].mul(self.twiddles[(r * q * root) % self.n])));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DFT by its definition, in f64.
    fn direct(x: &[f64]) -> Vec<f64> {
        let n = x.len();
        (0..=n / 2)
            .map(|k| {
                let (re, im) = x.iter().enumerate().fold((0.0, 0.0), |(re, im), (j, &v)| {
                    let a = -2.0 * PI * ((j * k) % n) as f64 / n as f64;
                    (re + v * a.cos(), im + v * a.sin())
                });
                re * re + im * im
            })
            .collect()
    }

    #[test]
    fn power_spectra_equal_the_dft_by_definition() {
        let mut state = 0x2545_f491u32;
        for n in [1, 2, 3, 4, 5, 7, 8, 12, 16, 30, 64, 100, 400, 13 * 4] {
            let fft = Fft::new(n);
            let x: Vec<f64> = (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    f64::from(state) / f64::from(u32::MAX) - 0.5
                })
                .collect();
            let mut out = vec![0.0; n / 2 + 1];
            fft.power_spectrum(&x, &mut fft.scratch(), &mut out);
            let scale = x.iter().map(|v| v.abs()).sum::<f64>().powi(2).max(1e-300);
            for (k, (got, want)) in out.iter().zip(direct(&x)).enumerate() {
                assert!((got - want).abs() <= 1e-13 * scale, "n {n} bin {k}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn a_pure_tone_lands_in_its_bin() {
        let fft = Fft::new(400);
        let x: Vec<f64> = (0..400).map(|j| (2.0 * PI * 25.0 * j as f64 / 400.0).cos()).collect();
        let mut out = vec![0.0; 201];
        fft.power_spectrum(&x, &mut fft.scratch(), &mut out);
        for (k, p) in out.iter().enumerate() {
            let want = if k == 25 { 200.0 * 200.0 } else { 0.0 };
            assert!((p - want).abs() < 1e-6, "bin {k}: {p}");
        }
    }
}
