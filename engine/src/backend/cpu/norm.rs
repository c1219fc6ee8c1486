//! Row normalisations: RMS norm (llama family, Gemma) and layer norm (BERT), computed as ggml
//! does (sums in f64, one scale per row), each row independent of the others in the batch.

/// `1 / sqrt(mean(row²) + eps)`, the sum in f64 as ggml does it.
fn rms_scale(row: &[f32], eps: f32) -> f32 {
    let sum: f64 = row.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / row.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `out[r] = x[r] / sqrt(mean(x[r]²) + eps) * w` for every row of `w.len()` values.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    debug_assert!(n > 0 && x.len().is_multiple_of(n) && out.len() == x.len());
    for (xr, yr) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let scale = rms_scale(xr, eps);
        for ((y, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
            *y = (v * scale) * g;
        }
    }
}

/// The same, in place, for every group of `w.len()` values: whole rows (Gemma's post-norms) or
/// single heads (its q/k norms).
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let scale = rms_scale(xr, eps);
        for (v, &g) in xr.iter_mut().zip(w) {
            *v = (*v * scale) * g;
        }
    }
}

/// `out[r] = (x[r] - mean) / sqrt(var + eps) * w + b` for every row.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    debug_assert!(n > 0 && x.len().is_multiple_of(n) && out.len() == x.len() && b.len() == n);
    for (xr, yr) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let sum: f64 = xr.iter().map(|&v| f64::from(v)).sum();
        let mean = (sum / n as f64) as f32;
        let mut var = 0.0f64;
        for (y, &v) in yr.iter_mut().zip(xr) {
            let d = v - mean;
            *y = d;
            var += f64::from(d * d);
        }
        let scale = 1.0 / ((var / n as f64) as f32 + eps).sqrt();
        for ((y, &g), &c) in yr.iter_mut().zip(w).zip(b) {
            *y = (*y * scale) * g + c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_a_known_row() {
        let x = [3.0f32, -4.0, 0.0, 0.0];
        let mut y = [0.0; 4];
        rms_norm(&x, &[1.0, 2.0, 1.0, 1.0], 0.0, &mut y);
        // rms = sqrt(25 / 4) = 2.5
        assert_eq!(y, [1.2, -3.2, 0.0, 0.0]);
    }

    #[test]
    fn layer_norm_centres_and_scales() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut y = [0.0; 4];
        layer_norm(&x, &[1.0; 4], &[0.5; 4], 0.0, &mut y);
        let mean: f32 = y.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6);
        let var: f32 = y.iter().map(|v| (v - 0.5) * (v - 0.5)).sum::<f32>() / 4.0;
        assert!((var - 1.0).abs() < 1e-5);
    }
}
