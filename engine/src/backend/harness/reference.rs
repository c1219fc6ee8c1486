//! The reference path of the op harness: every backend operation written the plain way, in f64
//! on host vectors (weights dequantized by the scalar reference code). No tiling, no
//! vectorisation, no shared code with the backends beyond the scalar dequantizers.

use crate::backend::{Activation, AttentionRow, AttentionShape, Rope, RopeKind};

/// `y[b][r] = Σ_c w[r][c] · x[b][c] (+ bias[r])`, `w` dequantized, `rows x cols`.
pub fn matmul(w: &[f32], rows: usize, cols: usize, bias: Option<&[f32]>, x: &[f32]) -> Vec<f64> {
    let batch = x.len() / cols;
    let mut y = Vec::with_capacity(batch * rows);
    for xb in x.chunks_exact(cols) {
        for r in 0..rows {
            let dot: f64 = w[r * cols..(r + 1) * cols].iter().zip(xb).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            y.push(dot + bias.map_or(0.0, |b| f64::from(b[r])));
        }
    }
    y
}

/// RMS norm of every group of `w.len()` values.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    x.chunks_exact(w.len())
        .flat_map(|g| {
            let mean = g.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / g.len() as f64;
            let s = 1.0 / (mean + f64::from(eps)).sqrt();
            g.iter().zip(w).map(move |(&v, &c)| f64::from(v) * s * f64::from(c))
        })
        .collect()
}

pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f64> {
    x.chunks_exact(w.len())
        .flat_map(|g| {
            let n = g.len() as f64;
            let mean = g.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var = g.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
            let s = 1.0 / (var + f64::from(eps)).sqrt();
            g.iter().zip(w).zip(b).map(move |((&v, &c), &d)| (f64::from(v) - mean) * s * f64::from(c) + f64::from(d))
        })
        .collect()
}

/// Rotates every head of every row by the exact angles `pos · base^(-2i/n_dims) / factor_i ·
/// scale` (YaRN's blend where it applies), cosines and sines scaled by the attention factor.
pub fn rope(x: &[f32], cols: usize, r: &Rope, positions: &[u32]) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let half = r.n_dims / 2;
    for (row, &pos) in out.chunks_exact_mut(cols).zip(positions) {
        for head in row.chunks_exact_mut(r.head_dim) {
            for i in 0..half {
                let factor = r.factors.as_ref().map_or(1.0, |f| f64::from(f[i]));
                let extrapolated = f64::from(pos) * f64::from(r.freq_base).powf(-2.0 * i as f64 / r.n_dims as f64) / factor;
                let interpolated = extrapolated * f64::from(r.freq_scale);
                let (theta, mscale) = match r.yarn {
                    None => (interpolated, f64::from(r.attn_factor)),
                    Some(y) => {
                        let (low, high) = (f64::from(y.corr_dims[0]), f64::from(y.corr_dims[1]));
                        let mix = (1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0)) * f64::from(y.ext_factor);
                        let magnitude = 1.0 + 0.1 * (1.0 / f64::from(r.freq_scale)).ln();
                        (interpolated * (1.0 - mix) + extrapolated * mix, f64::from(r.attn_factor) * magnitude)
                    }
                };
                let (a, b) = match r.kind {
                    RopeKind::Norm => (2 * i, 2 * i + 1),
                    RopeKind::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                let (cos, sin) = (theta.cos() * mscale, theta.sin() * mscale);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }
    out
}

/// Softmax attention; `key(kv, pos)` / `value(kv, pos)` give one row of all KV heads.
pub fn attention<'a>(
    q: &[f32],
    rows: &[AttentionRow],
    shape: &AttentionShape,
    sinks: Option<&[f32]>,
    key: impl Fn(usize, usize) -> &'a [f32],
    value: impl Fn(usize, usize) -> &'a [f32],
) -> Vec<f64> {
    let (dk, dv, group) = (shape.head_dim_k, shape.head_dim_v, shape.group());
    let mut out = Vec::with_capacity(rows.len() * shape.out_dim());
    for (i, row) in rows.iter().enumerate() {
        for h in 0..shape.n_head {
            let g = h / group;
            let qh = &q[i * shape.q_dim() + h * dk..i * shape.q_dim() + (h + 1) * dk];
            let scores: Vec<f64> = row
                .positions
                .clone()
                .map(|p| {
                    let k = &key(row.kv, p)[g * dk..(g + 1) * dk];
                    let s = qh.iter().zip(k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() * f64::from(shape.scale);
                    match f64::from(shape.softcap) {
                        0.0 => s,
                        cap => cap * (s / cap).tanh(),
                    }
                })
                .collect();
            if scores.is_empty() {
                out.extend(std::iter::repeat_n(0.0, dv));
                continue;
            }
            // a sink joins the softmax without a value
            let sink = sinks.map(|s| f64::from(s[h]));
            let max = scores.iter().copied().chain(sink).fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
            for d in 0..dv {
                let acc: f64 = row.positions.clone().zip(&w).map(|(p, &wp)| wp * f64::from(value(row.kv, p)[g * dv + d])).sum();
                out.push(acc / total);
            }
        }
    }
    out
}

/// erf to about 1e-15: its Maclaurin series for |t| < 2.5, the continued fraction of erfc beyond.
fn erf(t: f64) -> f64 {
    let a = t.abs();
    let r = if a < 2.5 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = exp(-a²)/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...))))
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    r.copysign(t)
}

pub fn activation(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Gelu => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
        Activation::GeluErf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Activation::SwigluOai => panic!("SwigluOai is gated: see `gated`"),
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
    }
}

/// `act` of gate `g` times up `u` (SwigluOai's own form with its clamps).
pub fn gated(act: Activation, g: f64, u: f64) -> f64 {
    use crate::backend::{SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};
    match act {
        Activation::SwigluOai => {
            let (alpha, limit) = (f64::from(SWIGLU_OAI_ALPHA), f64::from(SWIGLU_OAI_LIMIT));
            let x = g.min(limit);
            x / (1.0 + (-alpha * x).exp()) * (u.clamp(-limit, limit) + 1.0)
        }
        _ => activation(act, g) * u,
    }
}

/// Each block of `block` values times the orthonormal Walsh-Hadamard matrix of that order, as a
/// product by the matrix itself (Sylvester's order: entry (i, j) is (-1)^popcount(i & j) /
/// sqrt(block), as llama.cpp builds it), in f64.
pub fn hadamard(x: &[f32], block: usize) -> Vec<f64> {
    let scale = 1.0 / (block as f64).sqrt();
    x.chunks_exact(block)
        .flat_map(|v| {
            (0..block).map(move |i| {
                let sign = |j: usize| if (i & j).count_ones().is_multiple_of(2) { 1.0 } else { -1.0 };
                v.iter().enumerate().map(|(j, &x)| sign(j) * f64::from(x)).sum::<f64>() * scale
            })
        })
        .collect()
}

/// LFM2's gated short convolution of one sequence's rows of `3 d` (`b`, `c`, `x`) from a zero
/// state, written out from its definition in f64: row `t`'s channel is `c · Σ_k u[t - (taps - 1
/// - k)] · tap[k]`, `u = b · x`, zeros before the first row.
pub fn short_conv(bcx: &[f32], kernel: &[f32], d: usize, taps: usize) -> Vec<f64> {
    let n = bcx.len() / (3 * d);
    let at = |t: usize, part: usize, ch: usize| f64::from(bcx[t * 3 * d + part * d + ch]);
    let mut y = Vec::with_capacity(n * d);
    for t in 0..n {
        for ch in 0..d {
            let sum: f64 = (0..taps)
                .filter(|&k| t + k + 1 >= taps)
                .map(|k| {
                    let s = t + k + 1 - taps;
                    at(s, 0, ch) * at(s, 2, ch) * f64::from(kernel[ch * taps + k])
                })
                .sum();
            y.push(at(t, 1, ch) * sum);
        }
    }
    y
}

/// Mamba-2's selective scan of one sequence's rows of `row_width` values (the heads' values, B's
/// and C's groups, then one step per head) from a zero state, in f64.
pub fn ssm_scan(rows: &[f32], row_width: usize, a: &[f32], d: &[f32], shape: crate::backend::SsmShape) -> Vec<f64> {
    let crate::backend::SsmShape { n_head, head_dim, n_group, d_state } = shape;
    let d_inner = n_head * head_dim;
    let mut state = vec![0.0f64; d_inner * d_state];
    let mut y = Vec::new();
    for row in rows.chunks_exact(row_width) {
        let v = |i: usize| f64::from(row[i]);
        for h in 0..n_head {
            let g = h / (n_head / n_group);
            let dt = v(d_inner + 2 * n_group * d_state + h);
            let dt = if dt > 20.0 { dt } else { dt.exp().ln_1p() };
            let decay = (dt * f64::from(a[h])).exp();
            for k in 0..head_dim {
                let x = v(h * head_dim + k);
                let s = &mut state[(h * head_dim + k) * d_state..(h * head_dim + k + 1) * d_state];
                let mut sum = 0.0;
                for (j, s) in s.iter_mut().enumerate() {
                    *s = *s * decay + v(d_inner + g * d_state + j) * x * dt;
                    sum += *s * v(d_inner + (n_group + g) * d_state + j);
                }
                y.push(sum + x * f64::from(d[h]));
            }
        }
    }
    y
}

/// The gated delta rule of one sequence's rows of `row_width` values (queries, keys, values,
/// then one alpha and one beta per value head) from a zero state, in f64.
pub fn delta_rule(rows: &[f32], row_width: usize, dt_bias: &[f32], a: &[f32], shape: crate::backend::DeltaShape, eps: f32) -> Vec<f64> {
    let crate::backend::DeltaShape { n_k_heads, n_v_heads, head_dim: s } = shape;
    let qkv = shape.qkv_width();
    let mut state = vec![0.0f64; n_v_heads * s * s];
    let l2 = |x: &[f32]| -> Vec<f64> {
        let norm = (x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() + f64::from(eps)).sqrt();
        x.iter().map(|&v| f64::from(v) / norm).collect()
    };
    let mut y = Vec::new();
    for row in rows.chunks_exact(row_width) {
        for h in 0..n_v_heads {
            let kh = h % n_k_heads;
            let (q, k) = (l2(&row[kh * s..(kh + 1) * s]), l2(&row[(n_k_heads + kh) * s..(n_k_heads + kh + 1) * s]));
            let v = &row[(2 * n_k_heads + h) * s..(2 * n_k_heads + h + 1) * s];
            let x = f64::from(row[qkv + h]) + f64::from(dt_bias[h]);
            let decay = ((if x > 20.0 { x } else { x.exp().ln_1p() }) * f64::from(a[h])).exp();
            let b = 1.0 / (1.0 + (-f64::from(row[qkv + n_v_heads + h])).exp());
            for j in 0..s {
                let m = &mut state[(h * s + j) * s..(h * s + j + 1) * s];
                m.iter_mut().for_each(|x| *x *= decay);
                let dot: f64 = m.iter().zip(&k).map(|(x, k)| x * k).sum();
                let delta = (f64::from(v[j]) - dot) * b;
                m.iter_mut().zip(&k).for_each(|(x, k)| *x += k * delta);
                y.push(m.iter().zip(&q).map(|(x, q)| x * q).sum::<f64>() / (s as f64).sqrt());
            }
        }
    }
    y
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_known_values() {
        for (t, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ] {
            assert!((super::erf(t) - want).abs() < 1e-14, "erf({t}) = {}", super::erf(t));
        }
    }
}
