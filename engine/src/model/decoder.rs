//! The forward pass shared by the decoder-only architectures (llama, granite, qwen2, gemma3):
//! a batch of (sequence, token, position) entries goes through every layer at once (each weight
//! matrix is multiplied with all the batch's rows in one call), keys and values are appended to
//! the KV cache, and logits come out for the entries that ask for them. What differs between
//! architectures is read from `ModelConfig` and its `ArchFacts` row, never from the name.
//!
//! Batch invariance: every row is normalised, projected, rotated and attended independently of
//! the other rows, by kernels whose summation order does not depend on the batch, so an entry's
//! logits are bitwise the same alone, in a prefill batch or beside other sequences.

use rayon::prelude::*;

use super::arch::Activation;
use super::config::ModelConfig;
use super::error::ModelError;
use super::weights::{DecoderWeights, Matrix};
use super::{BatchEntry, Logits};
use crate::backend::cpu::activation::{gelu, swiglu_row};
use crate::backend::cpu::attention::{attend_group, with_scratch};
use crate::backend::cpu::norm::{rms_norm, rms_norm_in_place};
use crate::backend::cpu::rope::rope;
use crate::backend::cpu::{get_rows, matmul_each};
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;

/// `x · mᵀ` for `n` rows, plus `bias` on every row.
pub(crate) fn project(file: &GgufFile, m: &Matrix, x: &[f32], n: usize, bias: Option<&[f32]>) -> Result<Vec<f32>, ModelError> {
    let [y] = project_each(file, [m], x, n, [bias])?;
    Ok(y)
}

/// [`project`] for several matrices with the same input, in one parallel pass
/// ([`matmul_each`]): `N` outputs of `n` rows each, same bits as one `project` per matrix.
pub(crate) fn project_each<const N: usize>(
    file: &GgufFile,
    ms: [&Matrix; N],
    x: &[f32],
    n: usize,
    biases: [Option<&[f32]>; N],
) -> Result<[Vec<f32>; N], ModelError> {
    let mut ys: [Vec<f32>; N] = std::array::from_fn(|i| vec![0.0f32; n * ms[i].rows]);
    let views: Vec<_> = ms.iter().map(|m| m.view(file)).collect();
    let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
    matmul_each(&views, x, n, &mut outs)?;
    for (y, (bias, m)) in ys.iter_mut().zip(biases.iter().zip(ms)) {
        if let Some(b) = bias {
            for row in y.chunks_exact_mut(m.rows) {
                row.iter_mut().zip(*b).for_each(|(v, &c)| *v += c);
            }
        }
    }
    Ok(ys)
}

/// Checks the batch against the cache and reserves room: every sequence's entries must continue
/// it, in order, from its current length.
pub(crate) fn check_batch(c: &ModelConfig, kv: &mut KvCache, batch: &[BatchEntry]) -> Result<(), ModelError> {
    if batch.is_empty() {
        return Err(ModelError::BadBatch("the batch is empty".into()));
    }
    let mut next: std::collections::BTreeMap<u32, usize> = Default::default();
    for (i, e) in batch.iter().enumerate() {
        if e.token as usize >= c.n_vocab {
            return Err(ModelError::BadBatch(format!("entry {i}: token {} is outside the vocabulary of {}", e.token, c.n_vocab)));
        }
        let expected = next.entry(e.seq).or_insert_with(|| kv.seq_len(e.seq));
        if e.pos as usize != *expected {
            return Err(ModelError::BadBatch(format!("entry {i}: sequence {} continues at position {expected}, not {}", e.seq, e.pos)));
        }
        *expected += 1;
    }
    for (&seq, &len) in &next {
        kv.reserve(seq, len)?;
    }
    Ok(())
}

pub(crate) fn forward(
    file: &GgufFile,
    c: &ModelConfig,
    w: &DecoderWeights,
    kv: &mut KvCache,
    batch: &[BatchEntry],
) -> Result<Logits, ModelError> {
    check_batch(c, kv, batch)?;
    let n = batch.len();
    let e = c.n_embd;
    let tokens: Vec<u32> = batch.iter().map(|b| b.token).collect();
    let mut x = vec![0.0f32; n * e];
    get_rows(&w.token_embd.view(file), &tokens, &mut x)?;
    if c.embedding_scale != 1.0 {
        x.iter_mut().for_each(|v| *v *= c.embedding_scale);
    }
    let shape = c.attention_shape();
    let mut h = vec![0.0f32; n * e];
    for (il, layer) in w.layers.iter().enumerate() {
        // attention
        rms_norm(&x, &layer.attn_norm, c.norm_eps, &mut h);
        let [mut q, mut k, v] =
            project_each(file, [&layer.wq, &layer.wk, &layer.wv], &h, n, [layer.bq.as_deref(), layer.bk.as_deref(), layer.bv.as_deref()])?;
        if let Some(qn) = &layer.q_norm {
            rms_norm_in_place(&mut q, qn, c.norm_eps);
        }
        if let Some(kn) = &layer.k_norm {
            rms_norm_in_place(&mut k, kn, c.norm_eps);
        }
        let swa = c.swa_layers[il];
        if let Some(r) = &c.rope {
            let (base, scale) = if swa { (r.freq_base_swa, 1.0) } else { (r.freq_base, r.freq_scale) };
            let (qd, kd) = (c.n_head * c.head_dim_k, c.k_dim());
            for (i, entry) in batch.iter().enumerate() {
                rope(&mut q[i * qd..(i + 1) * qd], c.head_dim_k, r.n_dims, entry.pos, base, scale, r.kind);
                rope(&mut k[i * kd..(i + 1) * kd], c.head_dim_k, r.n_dims, entry.pos, base, scale, r.kind);
            }
        }
        let (kd, vd) = (c.k_dim(), c.v_dim());
        for (i, entry) in batch.iter().enumerate() {
            kv.write(entry.seq, il, entry.pos as usize, &k[i * kd..(i + 1) * kd], &v[i * vd..(i + 1) * vd]);
        }
        let window = if swa { c.sliding_window } else { None };
        let hv = c.head_dim_v;
        let qd = c.n_head * c.head_dim_k;
        let kv_ref: &KvCache = kv;
        let mut attn = vec![0.0f32; n * c.n_head * hv];
        // one task per row and key/value head: the query heads sharing it widen its keys once
        let group = c.n_head / c.n_head_kv;
        attn.par_chunks_mut(group * hv).enumerate().for_each(|(idx, out)| {
            let (i, g) = (idx / c.n_head_kv, idx % c.n_head_kv);
            let entry = &batch[i];
            let pos = entry.pos as usize;
            let lo = window.map_or(0, |wnd| (pos + 1).saturating_sub(wnd));
            let view = kv_ref.layer_view(entry.seq, il);
            with_scratch(|scratch| attend_group(&q[i * qd..(i + 1) * qd], g, &shape, lo..pos + 1, &view, out, scratch));
        });
        let mut o = project(file, &layer.wo, &attn, n, None)?;
        if let Some(pn) = &layer.attn_post_norm {
            rms_norm_in_place(&mut o, pn, c.norm_eps);
        }
        add_scaled(&mut x, &o, c.residual_scale);

        // feed-forward
        rms_norm(&x, &layer.ffn_norm, c.norm_eps, &mut h);
        let [mut g, u] = project_each(file, [&layer.ffn_gate, &layer.ffn_up], &h, n, [None, None])?;
        match c.facts.activation {
            // row by row across the pool: with many rows this is no longer negligible
            Activation::SiluGated => g.par_chunks_exact_mut(c.n_ff).zip(u.par_chunks_exact(c.n_ff)).for_each(|(a, b)| swiglu_row(a, b)),
            Activation::GeluGated => g
                .par_chunks_exact_mut(c.n_ff)
                .zip(u.par_chunks_exact(c.n_ff))
                .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a = gelu(*a) * b)),
            Activation::GeluErf => unreachable!("decoders have gated feed-forward blocks"),
        }
        let mut d = project(file, &layer.ffn_down, &g, n, None)?;
        if let Some(pn) = &layer.ffn_post_norm {
            rms_norm_in_place(&mut d, pn, c.norm_eps);
        }
        add_scaled(&mut x, &d, c.residual_scale);
    }
    for entry in batch {
        kv.set_len(entry.seq, entry.pos as usize + 1);
    }

    // logits for the entries that want them
    let wanted: Vec<usize> = (0..n).filter(|&i| batch[i].logits).collect();
    let mut xs = Vec::with_capacity(wanted.len() * e);
    for &i in &wanted {
        xs.extend_from_slice(&x[i * e..(i + 1) * e]);
    }
    let mut normed = vec![0.0f32; xs.len()];
    rms_norm(&xs, &w.output_norm, c.norm_eps, &mut normed);
    let mut logits = project(file, &w.output, &normed, wanted.len(), None)?;
    if c.logit_scale != 1.0 {
        let inv = 1.0 / c.logit_scale;
        logits.iter_mut().for_each(|v| *v *= inv);
    }
    if let Some(cap) = c.final_logit_softcap {
        logits.iter_mut().for_each(|v| *v = (*v / cap).tanh() * cap);
    }
    Ok(Logits { n_vocab: c.n_vocab, values: logits, entries: wanted, hidden: normed })
}

fn add_scaled(x: &mut [f32], y: &[f32], scale: f32) {
    if scale == 1.0 {
        x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
    } else {
        x.iter_mut().zip(y).for_each(|(a, &b)| *a += b * scale);
    }
}
