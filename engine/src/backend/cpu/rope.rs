//! Rotary position embeddings, in ggml's two layouts: NORM rotates adjacent pairs
//! (x[2i], x[2i+1]) (llama, granite), NEOX rotates halves (x[i], x[i + d/2]) (qwen2, gemma3).
//! The angle of pair i at position p is p · base^(-2i/d) · freq_scale, built by repeated
//! multiplication in f32 exactly as ggml builds it.

use crate::backend::types::RopeKind;

crate::quant::fma_variants!(
    /// Rotates the first `n_dims` values of every `head_dim`-value head in `x` (one row of heads)
    /// for position `pos`.
    pub fn rope, pub(crate) fn rope_with(
        x: &mut [f32],
        head_dim: usize,
        n_dims: usize,
        pos: u32,
        freq_base: f32,
        freq_scale: f32,
        kind: RopeKind,
    ) = rope_body
);

#[inline(always)]
fn rope_body(x: &mut [f32], head_dim: usize, n_dims: usize, pos: u32, freq_base: f32, freq_scale: f32, kind: RopeKind) {
    debug_assert!(n_dims <= head_dim && n_dims.is_multiple_of(2) && x.len().is_multiple_of(head_dim));
    let half = n_dims / 2;
    let mut cs = [(0.0f32, 0.0f32); 512];
    let table = &mut cs[..half.min(512)];
    let theta_scale = freq_base.powf(-2.0 / n_dims as f32);
    let mut theta = pos as f32;
    for c in table.iter_mut() {
        let t = freq_scale * theta;
        *c = (t.cos(), t.sin());
        theta *= theta_scale;
    }
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(cos, sin)) in table.iter().enumerate() {
            let (a, b) = match kind {
                RopeKind::Norm => (2 * i, 2 * i + 1),
                RopeKind::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            // ggml's compiled code fuses the cosine product and rounds the sine product
            head[a] = x0.mul_add(cos, -(x1 * sin));
            head[b] = x1.mul_add(cos, x0 * sin);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Isa;

    #[test]
    fn position_zero_is_the_identity_and_norms_are_kept() {
        let mut x: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
        let orig = x.clone();
        rope(&mut x, 8, 8, 0, 10000.0, 1.0, RopeKind::Norm);
        assert_eq!(x, orig);
        for kind in [RopeKind::Norm, RopeKind::Neox] {
            let mut y = orig.clone();
            rope(&mut y, 8, 8, 37, 10000.0, 1.0, kind);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3 * n0);
        }
    }

    #[test]
    fn tiers_agree_bit_for_bit() {
        for kind in [RopeKind::Norm, RopeKind::Neox] {
            let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
            let mut plain = x.clone();
            rope_with(Isa::Scalar, &mut plain, 128, 128, 4321, 1e6, 1.0, kind);
            for tier in Isa::available() {
                let mut fused = x.clone();
                rope_with(tier, &mut fused, 128, 128, 4321, 1e6, 1.0, kind);
                assert_eq!(
                    plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    fused.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{tier:?}"
                );
            }
        }
    }

    #[test]
    fn layouts_rotate_different_pairs() {
        let mut a = vec![1.0f32, 0.0, 0.0, 0.0];
        rope(&mut a, 4, 4, 1, 10000.0, 1.0, RopeKind::Norm);
        assert!((a[0] - 1f32.cos()).abs() < 1e-6 && (a[1] - 1f32.sin()).abs() < 1e-6);
        let mut b = vec![1.0f32, 0.0, 0.0, 0.0];
        rope(&mut b, 4, 4, 1, 10000.0, 1.0, RopeKind::Neox);
        assert!((b[0] - 1f32.cos()).abs() < 1e-6 && (b[2] - 1f32.sin()).abs() < 1e-6);
    }
}
