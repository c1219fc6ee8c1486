//! Scaled dot-product attention of one query row (all heads) over the cached keys and values of
//! its sequence, with grouped-query heads. Every sum runs in one fixed order that depends only on
//! the positions attended, never on the batch, so results are batch-invariant.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// One cached key or value row.
#[derive(Clone, Copy)]
pub enum KvRow<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl KvRow<'_> {
    fn to_f32(self, range: std::ops::Range<usize>, out: &mut Vec<f32>) {
        out.clear();
        match self {
            KvRow::F32(r) => out.extend_from_slice(&r[range]),
            KvRow::F16(r) => {
                // one vectorised (F16C) conversion of the whole row
                out.resize(range.len(), 0.0);
                r[range].convert_to_f32_slice(out);
            }
        }
    }
}

/// Keys and values of one layer of one sequence, by position.
pub trait KvRows: Sync {
    fn key(&self, pos: usize) -> KvRow<'_>;
    fn value(&self, pos: usize) -> KvRow<'_>;
}

/// The shape of an attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub scale: f32,
}

/// Dot product with eight interleaved partial sums, added in a fixed order: vectorisable, and
/// the same result whatever the caller.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut tail = 0.0f32;
    for i in chunks * 8..a.len() {
        tail += a[i] * b[i];
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Buffers reused between `attend_head` calls of one thread.
#[derive(Default)]
pub struct AttnScratch {
    scores: Vec<f32>,
    row: Vec<f32>,
}

/// Attention of head `h` of query row `q` over `positions` of `kv`, written to `out`
/// (`head_dim_v` values).
pub fn attend_head(
    q: &[f32],
    h: usize,
    shape: &AttentionShape,
    positions: std::ops::Range<usize>,
    kv: &dyn KvRows,
    out: &mut [f32],
    scratch: &mut AttnScratch,
) {
    let AttnScratch { scores, row } = scratch;
    let group = shape.n_head / shape.n_head_kv;
    let g = h / group;
    let (dk, dv) = (shape.head_dim_k, shape.head_dim_v);
    let qh = &q[h * dk..(h + 1) * dk];
    let (krange, vrange) = (g * dk..(g + 1) * dk, g * dv..(g + 1) * dv);
    scores.clear();
    let mut max = f32::NEG_INFINITY;
    for p in positions.clone() {
        // f32 rows are read in place; f16 rows are widened into `row` first
        let s = match kv.key(p) {
            KvRow::F32(k) => dot(qh, &k[krange.clone()]),
            other => {
                other.to_f32(krange.clone(), row);
                dot(qh, row)
            }
        } * shape.scale;
        max = max.max(s);
        scores.push(s);
    }
    let mut sum = 0.0f64;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += f64::from(*s);
    }
    let inv = (1.0 / sum) as f32;
    out.fill(0.0);
    for (p, &s) in positions.zip(scores.iter()) {
        let w = s * inv;
        match kv.value(p) {
            KvRow::F32(v) => out.iter_mut().zip(&v[vrange.clone()]).for_each(|(o, &x)| *o += w * x),
            other => {
                other.to_f32(vrange.clone(), row);
                out.iter_mut().zip(row.iter()).for_each(|(o, &x)| *o += w * x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rows(Vec<Vec<f32>>, Vec<Vec<f32>>);
    impl KvRows for Rows {
        fn key(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.0[pos])
        }
        fn value(&self, pos: usize) -> KvRow<'_> {
            KvRow::F32(&self.1[pos])
        }
    }

    #[test]
    fn attends_to_the_matching_key() {
        // two positions, one head of dim 2: the query matches key 1 strongly
        let kv = Rows(vec![vec![1.0, 0.0], vec![0.0, 1.0]], vec![vec![10.0, 0.0], vec![0.0, 20.0]]);
        let shape = AttentionShape { n_head: 1, n_head_kv: 1, head_dim_k: 2, head_dim_v: 2, scale: 1.0 };
        let mut out = [0.0; 2];
        let mut s = AttnScratch::default();
        attend_head(&[0.0, 50.0], 0, &shape, 0..2, &kv, &mut out, &mut s);
        assert!((out[1] - 20.0).abs() < 1e-3 && out[0].abs() < 1e-3, "{out:?}");
        // only position 0 visible: all weight on it
        attend_head(&[0.0, 50.0], 0, &shape, 0..1, &kv, &mut out, &mut s);
        assert_eq!(out, [10.0, 0.0]);
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.01).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-3);
    }
}
