//! Whisper's log-mel spectrogram: 16 kHz mono samples to `n_mels` log-power bands every 10 ms,
//! computed as faster-whisper's feature extractor computes it (the reference of the tests).
//!
//! Steps: 160 zero samples appended; the signal reflect-padded by `N_FFT / 2` on both sides;
//! frames of `N_FFT` samples every `HOP` samples, each times a periodic Hann window; the power
//! of its one-sided DFT (a mixed-radix FFT in f64, `fft.rs`); the slaney-normalised mel filter bank; `log10(max(x, 1e-10))`; every
//! value floored at the maximum minus 8; `(x + 4) / 4`. The last frame is dropped, as Whisper
//! drops it. Sums run in f64, so the result is the reference's f32 computation within
//! rounding (1e-5 on the tests' clips).

use rayon::prelude::*;

use super::fft::Fft;

/// Samples per second Whisper's front end expects.
pub const SAMPLE_RATE: usize = 16_000;
/// Samples per DFT frame (25 ms).
pub const N_FFT: usize = 400;
/// Samples between frames (10 ms).
pub const HOP: usize = 160;
/// Frequency bins of the one-sided DFT.
pub const N_BINS: usize = N_FFT / 2 + 1;
/// Frames in one 30-second window, what the encoder reads at once.
pub const FRAMES_PER_WINDOW: usize = 3000;

/// A log-mel spectrogram: `n_mels` rows of `n_frames` values (row-major, a band's frames
/// contiguous, as the encoder's first convolution reads them).
#[derive(Clone, Debug, PartialEq)]
pub struct LogMel {
    pub n_mels: usize,
    pub n_frames: usize,
    /// `[n_mels][n_frames]`
    pub data: Vec<f32>,
}

impl LogMel {
    /// Band `m`'s frames.
    pub fn band(&self, m: usize) -> &[f32] {
        &self.data[m * self.n_frames..(m + 1) * self.n_frames]
    }

    /// Frames `start..start + len` (at most `FRAMES_PER_WINDOW` of them) as one encoder window
    /// of `FRAMES_PER_WINDOW` frames, the rest zero (faster-whisper pads a window's mel with
    /// zeros; it also leaves the spectrogram's last frame out of the content, so callers pass
    /// `n_frames - 1` as the end).
    pub fn window(&self, start: usize, len: usize) -> LogMel {
        let mut data = vec![0f32; self.n_mels * FRAMES_PER_WINDOW];
        let end = self.n_frames.min(start.saturating_add(len.min(FRAMES_PER_WINDOW)));
        if start < end {
            for m in 0..self.n_mels {
                data[m * FRAMES_PER_WINDOW..][..end - start].copy_from_slice(&self.band(m)[start..end]);
            }
        }
        LogMel { n_mels: self.n_mels, n_frames: FRAMES_PER_WINDOW, data }
    }
}

/// The slaney-style mel filter bank of librosa (`htk=False`, `norm="slaney"`), which Whisper's
/// filters are: `[n_mels][N_BINS]`, each a triangle over the DFT bins between its neighbours'
/// centres, scaled to the same area.
pub fn mel_filters(n_mels: usize) -> Vec<f32> {
    const F_SP: f64 = 200.0 / 3.0;
    const MIN_LOG_HZ: f64 = 1000.0;
    const MIN_LOG_MEL: f64 = MIN_LOG_HZ / F_SP;
    let log_step = 6.4f64.ln() / 27.0;
    let hz_to_mel = |hz: f64| if hz >= MIN_LOG_HZ { MIN_LOG_MEL + (hz / MIN_LOG_HZ).ln() / log_step } else { hz / F_SP };
    let mel_to_hz = |mel: f64| if mel >= MIN_LOG_MEL { MIN_LOG_HZ * (log_step * (mel - MIN_LOG_MEL)).exp() } else { F_SP * mel };
    let max_mel = hz_to_mel(SAMPLE_RATE as f64 / 2.0);
    // n_mels + 2 band edges, evenly spaced in mel
    let edges: Vec<f64> = (0..n_mels + 2).map(|i| mel_to_hz(max_mel * i as f64 / (n_mels + 1) as f64)).collect();
    let bin_hz = |k: usize| k as f64 * SAMPLE_RATE as f64 / N_FFT as f64;
    let mut filters = vec![0f32; n_mels * N_BINS];
    for m in 0..n_mels {
        let (lo, centre, hi) = (edges[m], edges[m + 1], edges[m + 2]);
        let area = 2.0 / (hi - lo);
        for k in 0..N_BINS {
            let f = bin_hz(k);
            let rising = (f - lo) / (centre - lo);
            let falling = (hi - f) / (hi - centre);
            filters[m * N_BINS + k] = (rising.min(falling).max(0.0) * area) as f32;
        }
    }
    filters
}

/// The periodic Hann window of `N_FFT` samples (numpy's `hanning(N_FFT + 1)[:-1]`, in f32 as
/// the reference multiplies by it).
fn hann() -> Vec<f32> {
    (0..N_FFT).map(|n| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos()) as f32).collect()
}

/// Index `i` of a signal of `n` samples extended by reflection at both ends (numpy's
/// `pad(mode="reflect")`: the edge sample is not repeated), for any `i`.
fn reflect(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let r = i.rem_euclid(period);
    (if r < n as isize { r } else { period - r }) as usize
}

/// The log-mel spectrogram of `samples` (16 kHz mono) with `filters` from [`mel_filters`].
/// `(samples.len() + 160) / 160` frames; empty audio gives one frame of silence.
pub fn log_mel(samples: &[f32], filters: &[f32], n_mels: usize) -> LogMel {
    assert_eq!(filters.len(), n_mels * N_BINS, "filters of {n_mels} bands over {N_BINS} bins");
    // the appended zeros, then the reflection of the whole
    let mut signal = samples.to_vec();
    signal.resize(samples.len() + HOP, 0.0);
    let n = signal.len();
    let half = (N_FFT / 2) as isize;
    // 1 + n / HOP frames of the padded signal, less the last
    let n_frames = n / HOP;
    let window = hann();
    let fft = Fft::new(N_FFT);

    // power spectra: [n_frames][N_BINS]
    let mut power = vec![0f64; n_frames * N_BINS];
    let buffers = || (vec![0f64; N_FFT], fft.scratch());
    power.par_chunks_mut(N_BINS).enumerate().for_each_init(buffers, |(frame, scratch), (t, out)| {
        for (j, (f, w)) in frame.iter_mut().zip(&window).enumerate() {
            let i = (t * HOP + j) as isize - half;
            *f = (signal[reflect(i, n)] * w) as f64;
        }
        fft.power_spectrum(frame, scratch, out);
    });

    // mel bands, log10 with the 1e-10 floor: [n_mels][n_frames]
    let mut data = vec![0f32; n_mels * n_frames];
    data.par_chunks_mut(n_frames).enumerate().for_each(|(m, band)| {
        let f = &filters[m * N_BINS..][..N_BINS];
        for (t, v) in band.iter_mut().enumerate() {
            let p = &power[t * N_BINS..][..N_BINS];
            let e: f64 = f.iter().zip(p).map(|(&w, &x)| w as f64 * x).sum();
            *v = e.max(1e-10).log10() as f32;
        }
    });
    let max = data.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in &mut data {
        *v = ((*v).max(max - 8.0) + 4.0) / 4.0;
    }
    LogMel { n_mels, n_frames, data }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_bank_is_librosas() {
        // faster-whisper's FeatureExtractor.get_mel_filters(16000, 400, 80), as float32
        let f = mel_filters(80);
        let band = |m: usize| &f[m * N_BINS..(m + 1) * N_BINS];
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-6 * b.abs().max(1e-3);
        assert!(close(band(0)[1], 0.024862595), "{}", band(0)[1]);
        assert_eq!(band(0).iter().filter(|&&w| w > 0.0).count(), 1);
        let nonzero: Vec<f32> = band(40).iter().copied().filter(|&w| w > 0.0).collect();
        assert_eq!(nonzero.len(), 3);
        for (got, want) in nonzero.iter().zip([0.005411105, 0.0147355655, 0.00651819]) {
            assert!(close(*got, want), "{got} vs {want}");
        }
        let (argmax, max) = band(79).iter().enumerate().fold((0, 0f32), |a, (i, &w)| if w > a.1 { (i, w) } else { a });
        assert_eq!(argmax, 192);
        assert!(close(max, 0.0031647116));
        assert!((f.iter().map(|&w| w as f64).sum::<f64>() - 1.9990242).abs() < 1e-5);
    }

    #[test]
    fn reflection_matches_numpy() {
        // np.pad([0,1,2,3], 5, mode="reflect") = [1,2,3,2,1, 0,1,2,3, 2,1,0,1,2]
        let got: Vec<usize> = (-5..9).map(|i| reflect(i, 4)).collect();
        assert_eq!(got, [1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]);
    }

    #[test]
    fn a_pure_tone_lands_in_its_band() {
        // one second of 1 kHz: the band whose centre is nearest 1 kHz is the loudest
        let samples: Vec<f32> =
            (0..SAMPLE_RATE).map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / SAMPLE_RATE as f32).sin()).collect();
        let filters = mel_filters(80);
        let mel = log_mel(&samples, &filters, 80);
        assert_eq!(mel.n_frames, (SAMPLE_RATE + HOP) / HOP);
        let t = mel.n_frames / 2;
        let loudest = (0..80).max_by(|&a, &b| mel.band(a)[t].total_cmp(&mel.band(b)[t])).unwrap();
        let peak_bin = |m: usize| (0..N_BINS).max_by(|&a, &b| filters[m * N_BINS + a].total_cmp(&filters[m * N_BINS + b])).unwrap();
        assert_eq!(peak_bin(loudest), 1000 * N_FFT / SAMPLE_RATE, "band {loudest}");
        // the floor: nothing below max - 8 (in log10 units, (x+4)/4 scaled)
        let max = mel.data.iter().copied().fold(f32::MIN, f32::max);
        assert!(mel.data.iter().all(|&v| v >= max - 2.0 - 1e-6));
    }
}
