//! Hyperparameters read from GGUF metadata (`<arch>.*` keys), with the defaults llama.cpp uses
//! and a clear error for a required key that is missing or malformed.

use super::arch::{ArchFacts, EmbeddingScale};
use super::error::ModelError;
use crate::backend::types::{AttentionShape, Rope, RopeKind};
use crate::gguf::{GgufFile, Value};

#[derive(Clone, Debug)]
pub struct RopeConfig {
    pub kind: RopeKind,
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    /// Base of the sliding-window layers (Gemma 3: 10000, not stored in its files).
    pub freq_base_swa: f32,
}

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub arch: String,
    pub facts: ArchFacts,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_ff: usize,
    pub norm_eps: f32,
    pub rope: Option<RopeConfig>,
    pub embedding_scale: f32,
    pub residual_scale: f32,
    /// Scale of q·k (1/sqrt(head_dim) unless the model says otherwise).
    pub attention_scale: f32,
    /// Logits are divided by this (Granite's logit_scale; 1 otherwise).
    pub logit_scale: f32,
    pub final_logit_softcap: Option<f32>,
    /// Window of the sliding-window layers, and which layers use it.
    pub sliding_window: Option<usize>,
    pub swa_layers: Vec<bool>,
    /// BERT: pooling type from `<arch>.pooling_type` (0 none, 1 mean, 2 cls, 3 last).
    pub pooling_type: u32,
}

/// Reads `<arch>.<suffix>` keys.
pub(crate) struct Meta<'a> {
    pub file: &'a GgufFile,
    pub arch: &'a str,
}

impl Meta<'_> {
    pub fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn value(&self, suffix: &str) -> Option<&Value> {
        self.file.get(&self.key(suffix))
    }

    pub fn usize_opt(&self, suffix: &str) -> Result<Option<usize>, ModelError> {
        match self.value(suffix) {
            None => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(ModelError::BadKey {
                    key: self.key(suffix),
                    reason: format!("expected an unsigned integer, found {:?}", v.value_type()),
                }),
            },
        }
    }

    pub fn usize(&self, suffix: &str) -> Result<usize, ModelError> {
        self.usize_opt(suffix)?.ok_or_else(|| ModelError::MissingKey(self.key(suffix)))
    }

    pub fn f32_opt(&self, suffix: &str) -> Result<Option<f32>, ModelError> {
        match self.value(suffix) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x as f32)),
                _ => Err(ModelError::BadKey { key: self.key(suffix), reason: "expected a finite number".into() }),
            },
        }
    }

    pub fn f32(&self, suffix: &str) -> Result<f32, ModelError> {
        self.f32_opt(suffix)?.ok_or_else(|| ModelError::MissingKey(self.key(suffix)))
    }
}

fn positive(m: &Meta, suffix: &str, v: usize) -> Result<usize, ModelError> {
    if v == 0 {
        return Err(ModelError::BadKey { key: m.key(suffix), reason: "must be positive".into() });
    }
    Ok(v)
}

impl ModelConfig {
    pub fn from_gguf(file: &GgufFile, arch: &str, facts: &ArchFacts) -> Result<ModelConfig, ModelError> {
        let m = Meta { file, arch };
        let n_embd = positive(&m, "embedding_length", m.usize("embedding_length")?)?;
        let n_layer = positive(&m, "block_count", m.usize("block_count")?)?;
        let n_head = positive(&m, "attention.head_count", m.usize("attention.head_count")?)?;
        let n_head_kv = positive(&m, "attention.head_count_kv", m.usize_opt("attention.head_count_kv")?.unwrap_or(n_head))?;
        if n_head % n_head_kv != 0 {
            return Err(ModelError::BadKey {
                key: m.key("attention.head_count_kv"),
                reason: format!("{n_head} heads are not a multiple of {n_head_kv} KV heads"),
            });
        }
        let head_dim_k = positive(&m, "attention.key_length", m.usize_opt("attention.key_length")?.unwrap_or(n_embd / n_head))?;
        let head_dim_v = positive(&m, "attention.value_length", m.usize_opt("attention.value_length")?.unwrap_or(n_embd / n_head))?;
        let n_ff = positive(&m, "feed_forward_length", m.usize("feed_forward_length")?)?;
        let n_ctx_train = m.usize_opt("context_length")?.unwrap_or(2048);
        let n_vocab = match m.usize_opt("vocab_size")? {
            Some(n) => n,
            None => file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map_or(0, |a| a.len()),
        };
        let norm_eps = if facts.encoder { m.f32("attention.layer_norm_epsilon")? } else { m.f32("attention.layer_norm_rms_epsilon")? };

        let rope = match facts.rope {
            None => None,
            Some(kind) => {
                let n_dims = m.usize_opt("rope.dimension_count")?.unwrap_or(head_dim_k);
                if n_dims > head_dim_k || n_dims % 2 != 0 {
                    return Err(ModelError::BadKey {
                        key: m.key("rope.dimension_count"),
                        reason: format!("{n_dims} rotary dimensions for heads of {head_dim_k}"),
                    });
                }
                let freq_base = m.f32_opt("rope.freq_base")?.unwrap_or(10000.0);
                let scaling = file.get_str(&m.key("rope.scaling.type")).unwrap_or("none");
                let freq_scale = match scaling {
                    "none" => 1.0,
                    "linear" => 1.0 / m.f32_opt("rope.scaling.factor")?.filter(|f| *f > 0.0).unwrap_or(1.0),
                    other => {
                        return Err(ModelError::BadKey {
                            key: m.key("rope.scaling.type"),
                            reason: format!("rope scaling {other:?} is not supported"),
                        })
                    }
                };
                let freq_base_swa = m.f32_opt("rope.freq_base_swa")?.unwrap_or(10000.0);
                Some(RopeConfig { kind, n_dims, freq_base, freq_scale, freq_base_swa })
            }
        };

        let embedding_scale = match facts.embedding_scale {
            EmbeddingScale::None => 1.0,
            EmbeddingScale::SqrtEmbd => (n_embd as f32).sqrt(),
            EmbeddingScale::FromKey => m.f32_opt("embedding_scale")?.filter(|s| *s != 0.0).unwrap_or(1.0),
        };
        let mut attention_scale = 1.0 / (head_dim_k as f32).sqrt();
        let (mut residual_scale, mut logit_scale) = (1.0, 1.0);
        if facts.scales_from_keys {
            residual_scale = m.f32_opt("residual_scale")?.filter(|s| *s != 0.0).unwrap_or(1.0);
            if let Some(s) = m.f32_opt("attention.scale")?.filter(|s| *s != 0.0) {
                attention_scale = s;
            }
            logit_scale = m.f32("logit_scale")?;
            if logit_scale == 0.0 {
                return Err(ModelError::BadKey { key: m.key("logit_scale"), reason: "must not be zero".into() });
            }
        }
        let final_logit_softcap = m.f32_opt("final_logit_softcapping")?.filter(|s| *s != 0.0);

        let mut sliding_window = None;
        let mut swa_layers = vec![false; n_layer];
        if facts.sliding_window {
            if let Some(w) = m.usize_opt("attention.sliding_window")?.filter(|w| *w > 0) {
                sliding_window = Some(w);
                // one global layer in every `pattern` (the last of each group), llama.cpp's default 6
                let pattern = m.usize_opt("attention.sliding_window_pattern")?.unwrap_or(6);
                for (il, swa) in swa_layers.iter_mut().enumerate() {
                    *swa = pattern == 0 || il % pattern < pattern - 1;
                }
            }
        }
        let pooling_type = m.usize_opt("pooling_type")?.unwrap_or(0) as u32;

        Ok(ModelConfig {
            arch: arch.to_string(),
            facts: *facts,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            n_ff,
            norm_eps,
            rope,
            embedding_scale,
            residual_scale,
            attention_scale,
            logit_scale,
            final_logit_softcap,
            sliding_window,
            swa_layers,
            pooling_type,
        })
    }

    /// Values per position in the KV cache (all KV heads).
    pub fn k_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_k
    }

    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }

    /// Heads, head sizes and q·k scale, as attention takes them.
    pub fn attention_shape(&self) -> AttentionShape {
        AttentionShape {
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim_k: self.head_dim_k,
            head_dim_v: self.head_dim_v,
            scale: self.attention_scale,
        }
    }

    /// The rotation of layer `layer`'s queries and keys (`None`: no rotary embeddings). A
    /// sliding-window layer has its own base and no frequency scaling.
    pub fn layer_rope(&self, layer: usize) -> Option<Rope> {
        let r = self.rope.as_ref()?;
        let (freq_base, freq_scale) = if self.swa_layers[layer] { (r.freq_base_swa, 1.0) } else { (r.freq_base, r.freq_scale) };
        Some(Rope { kind: r.kind, head_dim: self.head_dim_k, n_dims: r.n_dims, freq_base, freq_scale })
    }

    /// The attention window of layer `layer` (`None`: every earlier position).
    pub fn layer_window(&self, layer: usize) -> Option<usize> {
        if self.swa_layers[layer] {
            self.sliding_window
        } else {
            None
        }
    }
}
