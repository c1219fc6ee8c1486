//! Hyperparameters read from GGUF metadata (`<arch>.*` keys), with the defaults llama.cpp uses
//! and a clear error for a required key that is missing or malformed.

use std::sync::Arc;

use super::arch::{ArchFacts, EmbeddingScale, Gating, Recurrent, WeightNorm};
use super::error::ModelError;
use super::meta::Meta;
use super::mla::LatentConfig;
use super::weights::host_vector;
use crate::backend::types::{AttentionShape, KvTypes, KvValues, Rope, RopeKind, Yarn, KV_QUANT_BLOCK};
use crate::gguf::{GgufFile, Value};

#[derive(Clone, Debug)]
pub struct RopeConfig {
    pub kind: RopeKind,
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    /// Base of the sliding-window layers (Gemma 3: 10000, not stored in its files).
    pub freq_base_swa: f32,
    pub factors: RopeFactors,
    /// YaRN (`rope.scaling.type = yarn`) on the global layers.
    pub yarn: Option<Yarn>,
    /// Scale of every cosine and sine on the global layers (YaRN's and `rope.scaling.attn_factor`).
    pub attn_factor: f32,
    /// The context the model was trained on before scaling (`rope.scaling.original_context_length`).
    pub n_ctx_orig: usize,
}

/// Divisors of the pairs' rotation angles stored as tensors.
#[derive(Clone, Debug)]
pub enum RopeFactors {
    None,
    /// `rope_freqs.weight` (Llama 3.1's frequency scaling).
    One(Arc<[f32]>),
    /// LongRoPE (Phi-3): `rope_factors_short.weight`, and `rope_factors_long.weight` for a
    /// context longer than the original one.
    ShortLong {
        short: Arc<[f32]>,
        long: Arc<[f32]>,
    },
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
    /// Soft cap of the attention scores (0: none).
    pub attention_softcap: f32,
    /// Window of the sliding-window layers, and which layers use it.
    pub sliding_window: Option<usize>,
    pub swa_layers: Vec<bool>,
    /// The window layers attend within the query's chunk of `sliding_window` positions, not to
    /// the last `sliding_window` (Llama 4).
    pub chunked_window: bool,
    /// Every `nope_every`-th layer (the 4th, 8th, ...) has no RoPE; 0: every layer has it.
    pub nope_every: usize,
    /// The rotated layers' queries and keys RMS-normalised per head, without weights, after RoPE
    /// (Llama 4).
    pub unit_qk_norm_after_rope: bool,
    /// BERT: pooling type from `<arch>.pooling_type` (0 none, 1 mean, 2 cls, 3 last).
    pub pooling_type: u32,
    /// The mixture of experts of the layers that have a router, when the file has experts.
    pub experts: Option<ExpertConfig>,
    /// Queries scaled by position (Mistral 3's `attention.temperature_scale`, Llama 4's tuning).
    pub attention_temperature: Option<Temperature>,
    /// Multi-head latent attention's dimensions (DeepSeek-V2): then the cache holds one
    /// key/value head (`head_dim_k` the latent and the rotary key, `head_dim_v` the latent).
    pub latent: Option<LatentConfig>,
    /// Per layer, whether it is recurrent (no attention: `attention.head_count_kv` 0 there).
    pub recurrent_layers: Vec<bool>,
    /// LFM2's short convolution: its taps (`shortconv.l_cache`), in the recurrent layers.
    pub short_conv_taps: Option<usize>,
    /// Mamba-2's dimensions, in the recurrent layers.
    pub ssm: Option<SsmConfig>,
}

/// A Mamba-2 or gated delta-net layer's dimensions (`<arch>.ssm.*`).
#[derive(Clone, Copy, Debug)]
pub struct SsmConfig {
    /// The recurrence is the gated delta rule (Qwen3.5), not Mamba-2's selective scan.
    pub delta_rule: bool,
    /// The convolution's taps (`conv_kernel`).
    pub d_conv: usize,
    /// The heads' values together (`inner_size`).
    pub d_inner: usize,
    /// Each state row's size (`state_size`).
    pub d_state: usize,
    /// Heads (`time_step_rank`).
    pub n_head: usize,
    /// Groups of B and C (`group_count`).
    pub n_group: usize,
}

impl SsmConfig {
    fn from_meta(m: &Meta, delta_rule: bool) -> Result<SsmConfig, ModelError> {
        let c = SsmConfig {
            delta_rule,
            d_conv: m.usize("ssm.conv_kernel")?,
            d_inner: m.usize("ssm.inner_size")?,
            d_state: m.usize("ssm.state_size")?,
            n_head: m.usize("ssm.time_step_rank")?,
            n_group: m.usize("ssm.group_count")?,
        };
        let fits = c.d_conv >= 2
            && c.d_state > 0
            && c.n_head > 0
            && c.n_group > 0
            && c.d_inner.is_multiple_of(c.n_head)
            && c.d_inner.is_multiple_of(c.n_group)
            && c.n_head.is_multiple_of(c.n_group);
        if !fits {
            return Err(ModelError::BadKey { key: m.key("ssm.inner_size"), reason: format!("an SSM of {c:?}") });
        }
        Ok(c)
    }

    /// The convolution's channels: the heads' values, then B's and C's groups.
    pub fn conv_channels(&self) -> usize {
        self.d_inner + 2 * self.n_group * self.d_state
    }

    /// Values of the convolution's state (its `d_conv - 1` earlier rows), then of the scan's or
    /// the delta rule's (the state at the chunk's start and the chunk's rows so far).
    pub fn state_floats(&self) -> [usize; 2] {
        let rule = if self.delta_rule { self.delta_shape().state_len() } else { self.shape().state_len() };
        [(self.d_conv - 1) * self.conv_channels(), rule]
    }

    /// A layer's `part` of a state slot split into the convolution's state, then the scan's (or
    /// the delta rule's).
    pub fn state_parts(&self, part: crate::backend::StatePart) -> [crate::backend::StatePart; 2] {
        let [conv, scan] = self.state_floats();
        [crate::backend::StatePart { offset: part.offset, len: conv }, crate::backend::StatePart { offset: part.offset + conv, len: scan }]
    }

    pub fn shape(&self) -> crate::backend::SsmShape {
        crate::backend::SsmShape { n_head: self.n_head, head_dim: self.d_inner / self.n_head, n_group: self.n_group, d_state: self.d_state }
    }

    /// A delta net's shapes from the SSM keys: `state_size` is the heads' size, `group_count`
    /// the key heads, `time_step_rank` the value heads.
    pub fn delta_shape(&self) -> crate::backend::DeltaShape {
        crate::backend::DeltaShape { n_k_heads: self.n_group, n_v_heads: self.n_head, head_dim: self.d_state }
    }
}

/// A mixture-of-experts layer's shape and routing.
#[derive(Clone, Copy, Debug)]
pub struct ExpertConfig {
    /// Experts per layer (`expert_count`) and experts each token uses (`expert_used_count`).
    pub n_expert: usize,
    pub n_used: usize,
    /// Each expert's feed-forward width (`expert_feed_forward_length`, else (or when 0)
    /// `feed_forward_length`).
    pub n_ff: usize,
    pub gating: Gating,
    /// The chosen experts' weights divided by their sum.
    pub normalize: bool,
    /// The weights multiplied by this (`expert_weights_scale`; 1 when absent or 0).
    pub weights_scale: f32,
    /// The shared expert's width, where a layer has one (`expert_shared_feed_forward_length`,
    /// else `feed_forward_length`).
    pub n_ff_shared: usize,
    /// Group-limited routing (DeepSeek-V3): the experts in `expert_group_count` groups of
    /// consecutive experts, and a token chooses only among the `expert_group_used_count` groups
    /// whose two best experts score highest.
    pub groups: Option<ExpertGroups>,
    /// Each chosen expert's weight multiplies its input rather than its output (Llama 4).
    pub weights_on_input: bool,
}

/// Queries scaled by position: `ln(floor((pos + offset) / floor) + 1) · scale + 1`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Temperature {
    pub scale: f32,
    pub floor: usize,
    pub offset: f32,
    /// Only the layers without RoPE (Llama 4); otherwise every layer (Mistral 3).
    pub unrotated_layers_only: bool,
}

/// Which earlier positions a window layer's query attends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The last this-many positions, its own included.
    Last(usize),
    /// Those of its chunk: positions from the multiple of this size at or below its own.
    Chunk(usize),
}

impl Window {
    /// The first position a query at `pos` attends to.
    pub fn first(self, pos: usize) -> usize {
        match self {
            Window::Last(w) => (pos + 1).saturating_sub(w),
            Window::Chunk(c) => pos / c * c,
        }
    }
}

/// Experts in groups for routing ([`ExpertConfig::groups`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertGroups {
    pub count: usize,
    pub used: usize,
}

impl RopeFactors {
    /// These factors with the pairs marked in `unrotated` made infinite: their angle is 0 at
    /// every position, exactly, so they keep their values.
    fn with_unrotated(self, unrotated: &[bool]) -> RopeFactors {
        let apply = |f: &[f32]| -> Arc<[f32]> { f.iter().zip(unrotated).map(|(&v, &u)| if u { f32::INFINITY } else { v }).collect() };
        match self {
            RopeFactors::None => RopeFactors::One(apply(&vec![1.0; unrotated.len()])),
            RopeFactors::One(f) => RopeFactors::One(apply(&f)),
            RopeFactors::ShortLong { short, long } => RopeFactors::ShortLong { short: apply(&short), long: apply(&long) },
        }
    }
}

/// M-RoPE for text (`rope.dimension_sections` with its first two sections given): positions
/// are `[p, p, p, 0]`, so the pairs of the fourth section (pair `i` lies in section
/// `i % sum(sections)`) stay unrotated and the others rotate as NeoX by `p`. `None` when the
/// file has no sections.
fn mrope_text_pairs(m: &Meta, n_dims: usize, interleaved: bool) -> Result<Option<Vec<bool>>, ModelError> {
    const KEY: &str = "rope.dimension_sections";
    let Some(v) = m.file.get(&m.key(KEY)) else { return Ok(None) };
    let sections: Vec<usize> = match v.as_array().and_then(|a| a.to_u64s()) {
        Some(s) if s.len() == 4 => s.into_iter().map(|n| n as usize).collect(),
        _ => return Err(ModelError::BadKey { key: m.key(KEY), reason: "expected 4 unsigned integers".into() }),
    };
    let total: usize = sections.iter().sum();
    if interleaved {
        // IMROPE (ggml's `is_imrope`): pair i's sector i % total belongs to section sector % 3
        // while below three times that section's size, else to the fourth
        if total == 0 {
            return Err(ModelError::BadKey { key: m.key(KEY), reason: "interleaved sections summing to 0".into() });
        }
        let fourth = |i: usize| {
            let sector = i % total;
            let of = sector % 3;
            sector >= 3 * sections[of]
        };
        return Ok(Some((0..n_dims / 2).map(fourth).collect()));
    }
    if sections[0] == 0 || sections[1] == 0 {
        return Ok(None);
    }
    let fourth = sections[0] + sections[1] + sections[2];
    Ok(Some((0..n_dims / 2).map(|i| i % total >= fourth).collect()))
}

/// Which layers of a delta-net hybrid are recurrent: `attention.recurrent_layers` (one flag per
/// layer), else all but every `full_attention_interval`-th (default 4), as llama.cpp reads them.
fn delta_net_layers(m: &Meta, n_layer: usize) -> Result<Vec<bool>, ModelError> {
    const KEY: &str = "attention.recurrent_layers";
    if let Some(flags) = m.file.get(&m.key(KEY)).and_then(Value::as_array) {
        let flags: Option<Vec<bool>> = flags.values().map(|v| v.as_bool().or_else(|| v.as_u64().map(|n| n != 0))).collect();
        return match flags {
            Some(flags) if flags.len() >= n_layer => Ok(flags[..n_layer].to_vec()),
            _ => Err(ModelError::BadKey { key: m.key(KEY), reason: format!("expected one flag per layer ({n_layer})") }),
        };
    }
    let every = positive(m, "full_attention_interval", m.usize_opt("full_attention_interval")?.unwrap_or(4))?;
    Ok((0..n_layer).map(|il| !(il + 1).is_multiple_of(every)).collect())
}

/// The experts' configuration, when `expert_count` is positive.
fn expert_config(m: &Meta, facts: &ArchFacts, dense_ff: usize) -> Result<Option<ExpertConfig>, ModelError> {
    let n_expert = m.usize_opt("expert_count")?.unwrap_or(0);
    if n_expert == 0 {
        return Ok(None);
    }
    let n_used = m.usize("expert_used_count")?;
    if n_used == 0 || n_used > n_expert {
        return Err(ModelError::BadKey { key: m.key("expert_used_count"), reason: format!("{n_used} of {n_expert} experts") });
    }
    // 0 stands for absent (files of architectures whose experts are `feed_forward_length` wide)
    let n_ff = m.usize_opt("expert_feed_forward_length")?.filter(|&n| n > 0).unwrap_or(dense_ff);
    // the shared experts' width: as given, or that many routed experts' widths side by side
    let n_shared = m.usize_opt("expert_shared_count")?.unwrap_or(0);
    let n_ff_shared = match m.usize_opt("expert_shared_feed_forward_length")?.filter(|&n| n > 0) {
        _ if facts.routing.shared_as_routed => n_ff,
        Some(n) => n,
        None if n_shared > 0 => n_ff * n_shared,
        None => dense_ff,
    };
    let gating = match m.usize_opt("expert_gating_func")? {
        None | Some(0) => facts.routing.gating,
        Some(1) => Gating::Softmax,
        Some(2) => Gating::Sigmoid,
        Some(3) => Gating::SoftmaxWeight,
        Some(other) => {
            return Err(ModelError::BadKey {
                key: m.key("expert_gating_func"),
                reason: format!("gating function {other} is not supported"),
            })
        }
    };
    let normalize = match facts.routing.norm {
        WeightNorm::Always => true,
        WeightNorm::Never => false,
        WeightNorm::FromKey => m.file.get(&m.key("expert_weights_norm")).and_then(Value::as_bool).unwrap_or(false),
    };
    let weights_scale = m.f32_opt("expert_weights_scale")?.filter(|s| *s != 0.0).unwrap_or(1.0);
    let groups = match m.usize_opt("expert_group_count")?.filter(|&g| g > 1) {
        None => None,
        Some(count) => {
            let used = m.usize("expert_group_used_count")?;
            if !n_expert.is_multiple_of(count) || used == 0 || used > count || n_used > used * (n_expert / count) {
                return Err(ModelError::BadKey {
                    key: m.key("expert_group_count"),
                    reason: format!("{n_expert} experts in {count} groups, {used} groups used, {n_used} experts used"),
                });
            }
            Some(ExpertGroups { count, used })
        }
    };
    let weights_on_input = facts.routing.weights_on_input;
    Ok(Some(ExpertConfig { n_expert, n_used, n_ff, gating, normalize, weights_scale, n_ff_shared, groups, weights_on_input }))
}

/// The angle divisors a file stores as tensors, `n_dims / 2` values each.
fn rope_factors(file: &GgufFile, n_dims: usize) -> Result<RopeFactors, ModelError> {
    let read = |name: &str| -> Result<Option<Arc<[f32]>>, ModelError> { Ok(host_vector(file, name, n_dims / 2)?.map(Arc::from)) };
    if let Some(one) = read("rope_freqs.weight")? {
        return Ok(RopeFactors::One(one));
    }
    match (read("rope_factors_short.weight")?, read("rope_factors_long.weight")?) {
        (None, None) => Ok(RopeFactors::None),
        (Some(short), Some(long)) => Ok(RopeFactors::ShortLong { short, long }),
        (short, _) => {
            let missing = if short.is_none() { "rope_factors_short.weight" } else { "rope_factors_long.weight" };
            Err(ModelError::MissingTensor(missing.into()))
        }
    }
}

/// Which layers use the sliding window: `attention.sliding_window_pattern` as one flag per layer
/// (an array), or as a number `n`: one global layer in every `n` (the last of each group; 0:
/// every layer a window layer); `default_pattern` when the key is absent.
fn window_layers(m: &Meta, n_layer: usize, default_pattern: usize) -> Result<Vec<bool>, ModelError> {
    const KEY: &str = "attention.sliding_window_pattern";
    if let Some(flags) = m.file.get(&m.key(KEY)).and_then(Value::as_array) {
        let flags: Option<Vec<bool>> = flags.values().map(|v| v.as_bool().or_else(|| v.as_u64().map(|n| n != 0))).collect();
        return match flags {
            Some(flags) if flags.len() == n_layer => Ok(flags),
            _ => Err(ModelError::BadKey { key: m.key(KEY), reason: format!("expected one flag per layer ({n_layer})") }),
        };
    }
    let pattern = m.usize_opt(KEY)?.unwrap_or(default_pattern);
    Ok((0..n_layer).map(|il| pattern == 0 || il % pattern < pattern - 1).collect())
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
        // the last `nextn_predict_layers` blocks predict further tokens (GLM-4.5's MTP): not layers
        let n_blocks = m.usize("block_count")?;
        let n_layer = positive(&m, "block_count", n_blocks.saturating_sub(m.usize_opt("nextn_predict_layers")?.unwrap_or(0)))?;
        let n_head = m.uniform("attention.head_count", n_layer)?.ok_or_else(|| ModelError::MissingKey(m.key("attention.head_count")))?;
        let n_head = positive(&m, "attention.head_count", n_head)?;
        // a hybrid's recurrent layers have no KV heads
        let kv_heads = m.per_layer("attention.head_count_kv", n_layer)?;
        let recurrent_layers: Vec<bool> = match (&kv_heads, facts.recurrent) {
            (_, Recurrent::DeltaNet) => delta_net_layers(&m, n_layer)?,
            (Some(ns), Recurrent::ShortConv | Recurrent::Mamba2) => ns.iter().map(|&n| n == 0).collect(),
            _ => vec![false; n_layer],
        };
        let n_head_kv = m.uniform("attention.head_count_kv", n_layer)?.unwrap_or(n_head);
        let n_head_kv = positive(&m, "attention.head_count_kv", n_head_kv)?;
        if kv_heads.is_some_and(|ns| ns.contains(&0)) && facts.recurrent == Recurrent::None {
            return Err(ModelError::BadKey {
                key: m.key("attention.head_count_kv"),
                reason: format!("a layer without KV heads, but {arch} has no recurrent layers"),
            });
        }
        let short_conv_taps = match facts.recurrent {
            Recurrent::ShortConv => {
                let taps = m.usize("shortconv.l_cache")?;
                if taps < 2 {
                    return Err(ModelError::BadKey { key: m.key("shortconv.l_cache"), reason: format!("{taps} taps (at least 2)") });
                }
                Some(taps)
            }
            Recurrent::None | Recurrent::Mamba2 | Recurrent::DeltaNet => None,
        };
        let ssm = match facts.recurrent {
            Recurrent::Mamba2 => Some(SsmConfig::from_meta(&m, false)?),
            Recurrent::DeltaNet => Some(SsmConfig::from_meta(&m, true)?),
            Recurrent::None | Recurrent::ShortConv => None,
        };
        if let (Recurrent::DeltaNet, Some(s)) = (facts.recurrent, &ssm) {
            // the state is square: each value head as wide as a key head
            if s.d_inner != s.n_head * s.d_state || !s.n_head.is_multiple_of(s.n_group) {
                return Err(ModelError::BadKey { key: m.key("ssm.inner_size"), reason: format!("a delta net of {s:?}") });
            }
        }
        if n_head % n_head_kv != 0 {
            return Err(ModelError::BadKey {
                key: m.key("attention.head_count_kv"),
                reason: format!("{n_head} heads are not a multiple of {n_head_kv} KV heads"),
            });
        }
        let head_dim_k = positive(&m, "attention.key_length", m.usize_opt("attention.key_length")?.unwrap_or(n_embd / n_head))?;
        let head_dim_v = positive(&m, "attention.value_length", m.usize_opt("attention.value_length")?.unwrap_or(n_embd / n_head))?;
        // latent attention caches one head: the latent and the rotary key, and the latent
        let latent = if facts.latent_attention { Some(LatentConfig::from_meta(&m)?) } else { None };
        let (n_head_kv, head_dim_k, head_dim_v) = match &latent {
            Some(l) => (1, l.key_dim(), l.kv_rank),
            None => (n_head_kv, head_dim_k, head_dim_v),
        };
        let n_ff = positive(&m, "feed_forward_length", m.usize("feed_forward_length")?)?;
        let n_ctx_train = m.usize_opt("context_length")?.unwrap_or(2048);
        let n_vocab = match m.usize_opt("vocab_size")? {
            Some(n) => n,
            None => file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map_or(0, |a| a.len()),
        };
        let norm_eps = if facts.encoder { m.f32("attention.layer_norm_epsilon")? } else { m.f32("attention.layer_norm_rms_epsilon")? };

        // YaRN's magnitude over all dimensions: the rotation's factor and MLA's score scale use it
        let yarn_log_multiplier = m.f32_opt("rope.scaling.yarn_log_multiplier")?.unwrap_or(0.0);
        // Granite 4's hybrids switch RoPE off by `rope.scaling.finetuned` (llama.cpp's default: on)
        let rope_off = facts.rope_switch && file.get(&m.key("rope.scaling.finetuned")).and_then(Value::as_bool) == Some(false);
        let rope = match facts.rope.filter(|_| !rope_off) {
            None => None,
            Some(mut kind) => {
                let n_dims = m.usize_opt("rope.dimension_count")?.unwrap_or(head_dim_k);
                if n_dims > head_dim_k || n_dims % 2 != 0 {
                    return Err(ModelError::BadKey {
                        key: m.key("rope.dimension_count"),
                        reason: format!("{n_dims} rotary dimensions for heads of {head_dim_k}"),
                    });
                }
                let freq_base = m.f32_opt("rope.freq_base")?.unwrap_or(10000.0);
                // llama.cpp reads a missing type as "linear": a factor alone scales
                let scaling = file.get_str(&m.key("rope.scaling.type")).unwrap_or("linear");
                let factor = m.f32_opt("rope.scaling.factor")?.or(m.f32_opt("rope.scale_linear")?).filter(|f| *f != 0.0);
                let freq_scale = match scaling {
                    "none" => 1.0,
                    "linear" | "yarn" | "longrope" => factor.map_or(1.0, |f| 1.0 / f),
                    other => {
                        return Err(ModelError::BadKey {
                            key: m.key("rope.scaling.type"),
                            reason: format!("rope scaling {other:?} is not supported (none, linear, yarn, longrope)"),
                        })
                    }
                };
                let n_ctx_orig = m.usize_opt("rope.scaling.original_context_length")?.unwrap_or(n_ctx_train);
                let mut attn_factor = 1.0f32;
                let mut yarn = None;
                if scaling == "yarn" {
                    let beta_fast = m.f32_opt("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0);
                    let beta_slow = m.f32_opt("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0);
                    // llama.cpp's magnitude: YaRN's (over that of all dims when the file gives
                    // `yarn_log_multiplier`), with the kernel's own correction cancelled
                    let scale = 1.0 / freq_scale;
                    let mscale = |m: f32| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
                    let magnitude = match yarn_log_multiplier {
                        0.0 => mscale(1.0),
                        // DeepSeek-V2 takes the magnitude over all dimensions for both terms, which
                        // cancel; its scores carry it instead (`LatentConfig::score_scale`)
                        _ if facts.latent_attention => 1.0,
                        _ => mscale(1.0) / mscale(yarn_log_multiplier),
                    };
                    attn_factor = magnitude * (1.0 / (1.0 + 0.1 * scale.ln()));
                    yarn = Some(Yarn { ext_factor: 1.0, corr_dims: Yarn::corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow) });
                }
                attn_factor *= m.f32_opt("rope.scaling.attn_factor")?.unwrap_or(1.0);
                // (Llama 4's chunked layers: the global base unless the file gives one)
                let default_swa_base = facts.sliding_window.and_then(|w| w.default_rope_base).unwrap_or(freq_base);
                let freq_base_swa = match facts.sliding_window.is_some_and(|w| w.every_attention_layer) {
                    true => freq_base,
                    false => m.f32_opt("rope.freq_base_swa")?.unwrap_or(default_swa_base),
                };
                let mut factors = rope_factors(file, n_dims)?;
                if facts.mrope_sections {
                    if let Some(unrotated) = mrope_text_pairs(&m, n_dims, facts.mrope_interleaved)? {
                        kind = RopeKind::Neox;
                        factors = factors.with_unrotated(&unrotated);
                    }
                }
                Some(RopeConfig { kind, n_dims, freq_base, freq_scale, freq_base_swa, factors, yarn, attn_factor, n_ctx_orig })
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
        let final_logit_softcap = match facts.final_softcap {
            Some(default) => Some(m.f32_opt("final_logit_softcapping")?.unwrap_or(default)).filter(|s| *s != 0.0),
            None => None,
        };
        let attention_softcap = match facts.attention_softcap {
            Some(default) => m.f32_opt("attn_logit_softcapping")?.unwrap_or(default),
            None => 0.0,
        };
        if facts.wide_query_scale_at == Some(n_layer) {
            attention_scale = 1.0 / ((n_embd / n_head) as f32).sqrt();
        }
        if let Some(l) = &latent {
            attention_scale = l.score_scale(rope.as_ref(), yarn_log_multiplier);
        }

        let mut sliding_window = None;
        let mut swa_layers = vec![false; n_layer];
        if let Some(swa) = facts.sliding_window {
            if let Some(w) = m.usize_opt("attention.sliding_window")?.filter(|w| *w > 0).or(swa.default_window) {
                sliding_window = Some(w);
                swa_layers = match swa.every_attention_layer {
                    true => recurrent_layers.iter().map(|&r| !r).collect(),
                    false => window_layers(&m, n_layer, swa.default_pattern)?,
                };
            }
        }
        let pooling_type = m.usize_opt("pooling_type")?.unwrap_or(0) as u32;
        let experts = expert_config(&m, facts, n_ff)?;
        let mut attention_temperature = match (facts.attention_temperature, &rope) {
            (true, Some(r)) => m.f32_opt("attention.temperature_scale")?.filter(|s| *s != 0.0).map(|s| Temperature {
                scale: s,
                floor: r.n_ctx_orig.max(1),
                offset: 0.0,
                unrotated_layers_only: false,
            }),
            _ => None,
        };
        let (mut chunked_window, mut nope_every, mut unit_qk_norm_after_rope) = (false, facts.rope_skip_every, false);
        if let Some(ch) = facts.chunked_attention {
            unit_qk_norm_after_rope = experts.is_none_or(|x| x.n_expert != ch.unnormalised_at_experts);
            // a window of 0 turns the chunks off, and the unrotated layers with them
            if m.usize_opt("attention.sliding_window")? != Some(0) {
                (sliding_window, chunked_window, nope_every) = (Some(ch.chunk), true, ch.nope_every);
                swa_layers = window_layers(&m, n_layer, ch.pattern)?;
                attention_temperature = Some(Temperature { scale: 0.1, floor: ch.chunk, offset: 1.0, unrotated_layers_only: true });
            }
        }

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
            attention_softcap,
            sliding_window,
            swa_layers,
            chunked_window,
            nope_every,
            unit_qk_norm_after_rope,
            pooling_type,
            experts,
            attention_temperature,
            latent,
            recurrent_layers,
            short_conv_taps,
            ssm,
        })
    }

    /// The layers with attention, which the KV cache holds keys and values for.
    pub fn n_kv_layers(&self) -> usize {
        self.recurrent_layers.iter().filter(|&&r| !r).count()
    }

    /// The KV-cache layer of layer `layer` (its index among the attention layers).
    pub fn kv_layer(&self, layer: usize) -> usize {
        self.recurrent_layers[..layer].iter().filter(|&&r| !r).count()
    }

    /// Where recurrent layer `layer`'s state lies in a sequence's state slot (the recurrent
    /// layers' states one after the other); `None` for an attention layer.
    pub fn state_part(&self, layer: usize) -> Option<crate::backend::StatePart> {
        let size = |il: usize| if self.recurrent_layers[il] { self.layer_state_floats() } else { 0 };
        self.recurrent_layers[layer].then(|| crate::backend::StatePart { offset: (0..layer).map(size).sum(), len: size(layer) })
    }

    /// Values of one recurrent layer's state: LFM2's `taps - 1` earlier rows of `n_embd`, or
    /// Mamba-2's convolution and scan states.
    fn layer_state_floats(&self) -> usize {
        match (self.short_conv_taps, &self.ssm) {
            (Some(taps), _) => (taps - 1) * self.n_embd,
            (None, Some(ssm)) => ssm.state_floats().iter().sum(),
            (None, None) => 0,
        }
    }

    /// Values of one sequence's state slot (every recurrent layer's state; 0: none).
    pub fn state_floats(&self) -> usize {
        self.recurrent_layers.iter().filter(|&&r| r).count() * self.layer_state_floats()
    }

    /// Values per position in the KV cache (all KV heads).
    pub fn k_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_k
    }

    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }

    /// How a cache asked for `types` keeps each position's values, and the types it keeps:
    /// latent attention's values are the keys' leading columns (the latent), as llama.cpp's cache
    /// keeps them, in the keys' type, unless a quantized key's blocks would straddle the latent's
    /// end; every other model's are rows of their own.
    pub fn kv_layout(&self, types: KvTypes) -> (KvTypes, KvValues) {
        let values = match &self.latent {
            Some(l) if !types.key.is_quantized() || l.kv_rank.is_multiple_of(KV_QUANT_BLOCK) => KvValues::KeyPrefix(self.v_dim()),
            _ => KvValues::Rows(self.v_dim()),
        };
        (values.kept_types(types), values)
    }

    /// Heads, head sizes and q·k scale, as attention takes them.
    pub fn attention_shape(&self) -> AttentionShape {
        AttentionShape {
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim_k: self.head_dim_k,
            head_dim_v: self.head_dim_v,
            // queries scaled before attention leave the scores unscaled (Gemma 2)
            scale: if self.facts.prescaled_queries { 1.0 } else { self.attention_scale },
            softcap: self.attention_softcap,
        }
    }

    /// The rotation of layer `layer`'s queries and keys in a context of `n_ctx` positions
    /// (`None`: no rotary embeddings, in the model or in this layer). A sliding-window layer
    /// has its own base, and no frequency scaling unless the architecture keeps the global one;
    /// LongRoPE's long factors serve a context
    /// longer than the original one, as llama.cpp chooses them.
    pub fn layer_rope(&self, layer: usize, n_ctx: usize) -> Option<Rope> {
        let r = self.rope.as_ref()?;
        if !self.layer_rotates(layer) {
            return None;
        }
        let factors = match &r.factors {
            RopeFactors::None => None,
            RopeFactors::One(f) => Some(f.clone()),
            RopeFactors::ShortLong { short, long } => Some(if n_ctx > r.n_ctx_orig { long.clone() } else { short.clone() }),
        };
        let global = Rope {
            factors,
            yarn: r.yarn,
            attn_factor: r.attn_factor,
            ..Rope::plain(r.kind, self.head_dim_k, r.n_dims, r.freq_base, r.freq_scale)
        };
        if self.swa_layers[layer] {
            // llama.cpp gives every layer the context's YaRN: with the global scale (Gemma 2,
            // gpt-oss) a window layer rotates as a global one but for its base
            if self.facts.sliding_window.is_some_and(|w| w.scaled_rope) || self.chunked_window {
                return Some(Rope { freq_base: r.freq_base_swa, ..global });
            }
            return Some(Rope { yarn: None, attn_factor: 1.0, freq_base: r.freq_base_swa, freq_scale: 1.0, ..global });
        }
        Some(global)
    }

    /// Whether layer `layer` of a model with RoPE rotates its queries and keys.
    pub fn layer_rotates(&self, layer: usize) -> bool {
        self.rope.is_some() && (self.nope_every == 0 || !(layer + 1).is_multiple_of(self.nope_every))
    }

    /// The factor of a query at `pos` under the attention temperature (llama.cpp's arithmetic:
    /// the quotient in f32, the logarithm in f64, the result rounded to f32).
    pub fn query_scale(&self, pos: u32) -> f32 {
        match self.attention_temperature {
            None => 1.0,
            Some(t) => (f64::from(((pos as f32 + t.offset) / t.floor as f32).floor() + 1.0).ln() * f64::from(t.scale) + 1.0) as f32,
        }
    }

    /// Whether layer `layer` scales its queries by the attention temperature.
    pub fn layer_has_temperature(&self, layer: usize) -> bool {
        self.attention_temperature.is_some_and(|t| !t.unrotated_layers_only || !self.layer_rotates(layer))
    }

    /// The attention window of layer `layer` (`None`: every earlier position).
    pub fn layer_window(&self, layer: usize) -> Option<Window> {
        let w = self.sliding_window.filter(|_| self.swa_layers[layer])?;
        Some(if self.chunked_window { Window::Chunk(w) } else { Window::Last(w) })
    }
}
