//! Rotary position embeddings, in ggml's two layouts: NORM rotates adjacent pairs
//! (`x[2i]`, `x[2i+1]`) (llama, granite), NEOX rotates halves (`x[i]`, `x[i + d/2]`) (qwen2,
//! gemma3).
//! The angles (with their factors, YaRN blend and scaling) come from [`Rope::angles`], built
//! as ggml builds them; the rotation is the part the tiers compile differently.

use crate::backend::types::{Rope, RopeKind};

crate::quant::fma_variants!(
    /// Rotates the first `n_dims` values of every `head_dim`-value head in `x` (one row of heads)
    /// for position `pos`.
    pub fn rope, pub(crate) fn rope_with(x: &mut [f32], r: &Rope, pos: u32) = rope_body
);

#[inline(always)]
fn rope_body(x: &mut [f32], r: &Rope, pos: u32) {
    let (head_dim, n_dims) = (r.head_dim, r.n_dims);
    debug_assert!(n_dims <= head_dim && n_dims.is_multiple_of(2) && x.len().is_multiple_of(head_dim));
    let half = n_dims / 2;
    let mut cs = [(0.0f32, 0.0f32); 512];
    let table = &mut cs[..half.min(512)];
    r.angles(pos, table);
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(cos, sin)) in table.iter().enumerate() {
            let (a, b) = match r.kind {
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
    use crate::backend::Yarn;
    use crate::quant::Isa;

    #[test]
    fn position_zero_is_the_identity_and_norms_are_kept() {
        let mut x: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
        let orig = x.clone();
        rope(&mut x, &Rope::plain(RopeKind::Norm, 8, 8, 10000.0, 1.0), 0);
        assert_eq!(x, orig);
        for kind in [RopeKind::Norm, RopeKind::Neox] {
            let mut y = orig.clone();
            rope(&mut y, &Rope::plain(kind, 8, 8, 10000.0, 1.0), 37);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3 * n0);
        }
    }

    #[test]
    fn tiers_agree_bit_for_bit() {
        let factors: std::sync::Arc<[f32]> = (0..64).map(|i| 1.0 + i as f32 / 8.0).collect();
        let yarn = Some(Yarn { ext_factor: 1.0, corr_dims: Yarn::corr_dims(128, 4096, 1e6, 32.0, 1.0) });
        let ropes = [(None, None, 1.0), (Some(factors), None, 1.0), (None, yarn, 1.1)];
        for (kind, (factors, yarn, attn_factor)) in [RopeKind::Norm, RopeKind::Neox].into_iter().flat_map(|k| ropes.clone().map(|r| (k, r)))
        {
            let r = Rope { factors, yarn, attn_factor, ..Rope::plain(kind, 128, 128, 1e6, 0.25) };
            let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
            let mut plain = x.clone();
            rope_with(Isa::Scalar, &mut plain, &r, 4321);
            for tier in Isa::available() {
                let mut fused = x.clone();
                rope_with(tier, &mut fused, &r, 4321);
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
        rope(&mut a, &Rope::plain(RopeKind::Norm, 4, 4, 10000.0, 1.0), 1);
        assert!((a[0] - 1f32.cos()).abs() < 1e-6 && (a[1] - 1f32.sin()).abs() < 1e-6);
        let mut b = vec![1.0f32, 0.0, 0.0, 0.0];
        rope(&mut b, &Rope::plain(RopeKind::Neox, 4, 4, 10000.0, 1.0), 1);
        assert!((b[0] - 1f32.cos()).abs() < 1e-6 && (b[2] - 1f32.sin()).abs() < 1e-6);
    }
}
