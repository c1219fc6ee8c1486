//! Multi-head latent attention (DeepSeek-V2 / V3, `deepseek2` files), in the absorbed form
//! llama.cpp computes for every batch: keys and values are one shared latent row per position
//! (`kv_rank` values, normalised) and one rotary key (`rope` values) that every head shares, so
//! the cache holds `kv_rank + rope` values per position instead of two full rows per head. Each
//! head's query is taken into the latent space by its `k_b` matrix (`q_nopeₕ` → `k_bₕ · q_nopeₕ`)
//! beside its rotary part, attention runs as one key/value head for all query heads (scores scaled
//! by 1/sqrt(nope + rope), YaRN's magnitude squared), and each head's latent output comes back
//! through its `v_b` matrix before the output projection.
//!
//! Batch invariance: every step is a per-row product, norm, rotation or copy, and attention is the
//! shared kernel's, so a row's values do not depend on the rows beside it.

use super::blocks::{linear, linear_each, project, Linear, ScaleAt};
use super::config::RopeConfig;
use super::error::ModelError;
use super::lora::LoraRows;
use super::meta::Meta;
use super::weights::Loader;
use crate::backend::{Backend, ColumnBlocks, Rope};

/// The latent attention's dimensions, from the file's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatentConfig {
    /// `attention.q_lora_rank`: the queries' latent, or `None` for one query projection (the Lite
    /// models, whose files leave the key out).
    pub q_rank: Option<usize>,
    /// `attention.kv_lora_rank`: the shared key/value latent.
    pub kv_rank: usize,
    /// Each head's query and key parts without rotation (`key_length_mla` minus the rotary part).
    pub nope: usize,
    /// The rotary part of every query head and of the shared key (`rope.dimension_count`).
    pub rope: usize,
    /// Each head's value width (`attention.value_length_mla`).
    pub v_head: usize,
}

impl LatentConfig {
    /// The configuration of a file of `n_head` heads; files from before llama.cpp split `attn_kv_b`
    /// for the absorbed form (no `key_length_mla`) are refused.
    pub(crate) fn from_meta(m: &Meta) -> Result<LatentConfig, ModelError> {
        let kv_rank = m.usize("attention.kv_lora_rank")?;
        let q_rank = m.usize_opt("attention.q_lora_rank")?.filter(|&r| r > 0);
        let rope = m.usize("rope.dimension_count")?;
        let Some(key_mla) = m.usize_opt("attention.key_length_mla")? else {
            return Err(ModelError::BadKey {
                key: m.key("attention.key_length_mla"),
                reason: "missing: the file keeps attn_kv_b whole, as converters before the split for multi-head latent attention \
                         wrote it; convert the model again with a current convert_hf_to_gguf.py"
                    .into(),
            });
        };
        let v_head = m.usize("attention.value_length_mla")?;
        if key_mla <= rope || kv_rank == 0 || v_head == 0 || rope % 2 != 0 {
            return Err(ModelError::BadKey {
                key: m.key("attention.key_length_mla"),
                reason: format!("heads of {key_mla} with {rope} rotary values, a latent of {kv_rank}, values of {v_head}"),
            });
        }
        // the cache row llama.cpp declares must be the latent and the rotary key
        for (suffix, want) in [("attention.key_length", kv_rank + rope), ("attention.value_length", kv_rank)] {
            if let Some(got) = m.usize_opt(suffix)?.filter(|&g| g != want) {
                return Err(ModelError::BadKey { key: m.key(suffix), reason: format!("{got}, expected {want} for a latent of {kv_rank}") });
            }
        }
        if m.f32_opt("attention.temperature_scale")?.is_some_and(|s| s != 0.0) {
            return Err(ModelError::BadKey {
                key: m.key("attention.temperature_scale"),
                reason: "query temperature scaling with latent attention is not supported".into(),
            });
        }
        Ok(LatentConfig { q_rank, kv_rank, nope: key_mla - rope, rope, v_head })
    }

    /// A query head's width as projected: its part without rotation, then its rotary part.
    pub fn q_head(&self) -> usize {
        self.nope + self.rope
    }

    /// A cache row (and an absorbed query head): the latent, then the rotary key.
    pub fn key_dim(&self) -> usize {
        self.kv_rank + self.rope
    }

    /// The scale of the scores, as llama.cpp's deepseek2 graph computes it: 1/sqrt(nope + rope)
    /// times the square of YaRN's magnitude over all dimensions (`yarn_log_multiplier`, stored
    /// by the converter times 0.1), which the rotation's own factor does not carry.
    pub fn score_scale(&self, rope: Option<&RopeConfig>, yarn_log_multiplier: f32) -> f32 {
        let (attn_factor, freq_scale) = rope.map_or((1.0, 1.0), |r| (r.attn_factor, r.freq_scale));
        let ln_scale = (1.0 / freq_scale).ln();
        let original = attn_factor * (1.0 + 0.1 * ln_scale);
        let mscale = original * (1.0 + 0.1 * (yarn_log_multiplier / 0.1) * ln_scale);
        mscale * mscale / (self.q_head() as f32).sqrt()
    }
}

/// How a layer projects its queries.
pub enum LatentQuery<B: Backend> {
    /// `attn_q`: `n_head · (nope + rope)` x `n_embd`.
    Direct(Linear<B>),
    /// `attn_q_b · rms_norm(attn_q_a · x)`.
    LowRank { a: Linear<B>, norm: B::Vector, b: Linear<B> },
}

/// One layer's latent attention weights (the output projection is the layer's own).
pub struct LatentAttention<B: Backend> {
    pub query: LatentQuery<B>,
    /// `attn_kv_a_mqa` taken apart: the latent (`kv_rank` x `n_embd`) and the rotary key
    /// (`rope` x `n_embd`).
    pub kv_a: Linear<B>,
    pub k_rope: Linear<B>,
    /// `attn_kv_a_norm`, over the latent.
    pub kv_norm: B::Vector,
    /// Per head, `kv_rank` x `nope`: the query's part without rotation into the latent space.
    pub k_b: Vec<B::Matrix>,
    /// Per head, `v_head` x `kv_rank`: the latent output into the head's values.
    pub v_b: Vec<B::Matrix>,
}

impl<B: Backend> LatentAttention<B> {
    pub(crate) fn load(l: &Loader<B>, i: usize, c: &LatentConfig, n_head: usize, n_embd: usize) -> Result<Self, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let q_out = n_head * c.q_head();
        let query = match c.q_rank {
            None => LatentQuery::Direct(l.linear(&n("attn_q"), q_out, n_embd)?),
            Some(r) => LatentQuery::LowRank {
                a: l.linear(&n("attn_q_a"), r, n_embd)?,
                norm: l.vector(&n("attn_q_a_norm.weight"), r)?,
                b: l.linear(&n("attn_q_b"), q_out, r)?,
            },
        };
        let [kv_a, k_rope] = l
            .linear_parts(&n("attn_kv_a_mqa"), [c.kv_rank, c.rope], n_embd)?
            .ok_or_else(|| ModelError::MissingTensor(n("attn_kv_a_mqa.weight")))?;
        Ok(LatentAttention {
            query,
            kv_a,
            k_rope,
            kv_norm: l.vector(&n("attn_kv_a_norm.weight"), c.kv_rank)?,
            k_b: l.expert_matrices(&n("attn_k_b.weight"), n_head, c.kv_rank, c.nope)?,
            v_b: l.expert_matrices(&n("attn_v_b.weight"), n_head, c.v_head, c.kv_rank)?,
        })
    }

    /// Every matrix a product reads (for the backend's preparation).
    pub(crate) fn matrices(&self) -> Vec<&B::Matrix> {
        let query = match &self.query {
            LatentQuery::Direct(q) => vec![&q.w],
            LatentQuery::LowRank { a, b, .. } => vec![&a.w, &b.w],
        };
        query.into_iter().chain([&self.kv_a.w, &self.k_rope.w]).chain(&self.k_b).chain(&self.v_b).collect()
    }
}

/// The attention inputs of the normalised rows `x` (`n` x `n_embd`), rotated by `rope` at the
/// rows' positions:
/// queries `n` x `n_head · (kv_rank + rope)`, keys `n` x `(kv_rank + rope)` and values
/// `n` x `kv_rank` (one key/value head).
pub(crate) fn queries_keys_values<B: Backend>(
    b: &B,
    c: &LatentConfig,
    w: &LatentAttention<B>,
    x: &B::Tensor,
    eps: f32,
    rope: Option<(&Rope, &[u32])>,
    lora: &LoraRows<'_, B>,
) -> Result<[B::Tensor; 3], ModelError> {
    let k_b = &w.k_b;
    let (n, n_head) = (b.shape(x).0, k_b.len());
    let q = match &w.query {
        LatentQuery::Direct(q) => linear(b, q, ScaleAt::BeforeBias, x, lora)?,
        LatentQuery::LowRank { a, norm, b: q_b } => {
            let mut latent = linear(b, a, ScaleAt::BeforeBias, x, lora)?; // n x q_rank
            b.rms_norm_in_place(&mut latent, norm, eps)?;
            linear(b, q_b, ScaleAt::BeforeBias, &latent, lora)?
        }
    }; // n x n_head · (nope + rope)
    let [mut latent, mut k_rope] = linear_each(b, [&w.kv_a, &w.k_rope], ScaleAt::BeforeBias, x, lora)?; // n x kv_rank, n x rope
    b.rms_norm_in_place(&mut latent, &w.kv_norm, eps)?;
    let mut q_rope = b.zeros(n, n_head * c.rope)?; // n x n_head · rope
    b.copy_columns(
        &mut q_rope,
        ColumnBlocks::heads(n_head, c.rope, 0, c.rope),
        &q,
        ColumnBlocks::heads(n_head, c.q_head(), c.nope, c.rope),
    )?;
    if let Some((r, positions)) = rope {
        let r = Rope { head_dim: c.rope, ..r.clone() };
        b.rope(&mut q_rope, &r, positions)?;
        b.rope(&mut k_rope, &r, positions)?;
    }
    // each head's query in the latent space, then its rotary part
    let kd = c.key_dim();
    let mut queries = b.zeros(n, n_head * kd)?;
    let mut nope = b.zeros(n, c.nope)?;
    for (h, k_b) in k_b.iter().enumerate() {
        b.copy_columns(&mut nope, ColumnBlocks::run(0, c.nope), &q, ColumnBlocks::run(h * c.q_head(), c.nope))?;
        let absorbed = project(b, k_b, None, &nope)?; // n x kv_rank
        b.copy_columns(&mut queries, ColumnBlocks::run(h * kd, c.kv_rank), &absorbed, ColumnBlocks::run(0, c.kv_rank))?;
    }
    b.copy_columns(
        &mut queries,
        ColumnBlocks::heads(n_head, kd, c.kv_rank, c.rope),
        &q_rope,
        ColumnBlocks::heads(n_head, c.rope, 0, c.rope),
    )?;
    let mut keys = b.zeros(n, kd)?;
    b.copy_columns(&mut keys, ColumnBlocks::run(0, c.kv_rank), &latent, ColumnBlocks::run(0, c.kv_rank))?;
    b.copy_columns(&mut keys, ColumnBlocks::run(c.kv_rank, c.rope), &k_rope, ColumnBlocks::run(0, c.rope))?;
    Ok([queries, keys, latent])
}

/// Each head's latent output of attention (`n` x `n_head · kv_rank`) through its `v_b`:
/// `n` x `n_head · v_head`, the output projection's input.
pub(crate) fn head_values<B: Backend>(b: &B, c: &LatentConfig, w: &LatentAttention<B>, attn: &B::Tensor) -> Result<B::Tensor, ModelError> {
    let n = b.shape(attn).0;
    let mut out = b.zeros(n, w.v_b.len() * c.v_head)?;
    let mut part = b.zeros(n, c.kv_rank)?;
    for (h, v_b) in w.v_b.iter().enumerate() {
        b.copy_columns(&mut part, ColumnBlocks::run(0, c.kv_rank), attn, ColumnBlocks::run(h * c.kv_rank, c.kv_rank))?;
        let v = project(b, v_b, None, &part)?; // n x v_head
        b.copy_columns(&mut out, ColumnBlocks::run(h * c.v_head, c.v_head), &v, ColumnBlocks::run(0, c.v_head))?;
    }
    Ok(out)
}
