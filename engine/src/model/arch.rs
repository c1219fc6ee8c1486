//! The one table of per-architecture facts. The shared forward passes read these flags and
//! never test the architecture's name.

use crate::backend::types::{Activation, RopeKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbeddingScale {
    None,
    /// `<arch>.embedding_scale` (Granite)
    FromKey,
    /// sqrt(n_embd) (Gemma)
    SqrtEmbd,
}

/// RMS norms of q and k before RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// One weight of `head_dim` values, applied to every head on its own (Qwen 3, Gemma 3).
    PerHead,
    /// One weight over the whole row of heads, normalised as one vector (OLMo 2).
    AcrossHeads,
    /// `PerHead` where the file has the weights, none where it has not (GLM-4.5).
    PerHeadIfPresent,
}

/// Sliding-window attention on some layers, as the file's `attention.sliding_window` (the
/// window) and `attention.sliding_window_pattern` (which layers) say.
#[derive(Clone, Copy, Debug)]
pub struct SlidingWindow {
    /// The window when the file gives none (Gemma 2: 4096); `None`: no window layers then.
    pub default_window: Option<usize>,
    /// One global layer in every `default_pattern` (the last of each group) when the file gives
    /// no pattern.
    pub default_pattern: usize,
    /// The window layers keep the global layers' frequency scale and YaRN (Gemma 2, gpt-oss);
    /// otherwise their scale is 1, without YaRN.
    pub scaled_rope: bool,
    /// RoPE base of the window layers when the file has no `rope.freq_base_swa`: a fixed value
    /// (Gemma 3: 10000), or `None` for the global layers' base (OLMo 2).
    pub default_rope_base: Option<f32>,
    /// Every attention layer is a window layer whatever the pattern key says, and rotates with
    /// the global layers' base (LFM2, whose graph reads neither).
    pub every_attention_layer: bool,
}

/// Llama 4's interleaved attention, as llama.cpp reads it. Every `nope_every`-th layer has no
/// RoPE, sees every earlier position, and scales its queries by the temperature tuning
/// `ln(floor((pos + 1) / chunk) + 1) · 0.1 + 1`; the window layers (`attention.sliding_window_pattern`,
/// else all but every `pattern`-th) attend within the query's chunk of `chunk` positions,
/// whatever nonzero window the file gives. The rotated layers' queries and keys are RMS-normalised
/// per head without weights after RoPE, unless the file has 128 experts (Maverick). A file's
/// `attention.sliding_window` of 0 turns chunks, skipped rotations and temperature off.
#[derive(Clone, Copy, Debug)]
pub struct ChunkedAttention {
    pub chunk: usize,
    pub pattern: usize,
    pub nope_every: usize,
    /// Experts per layer of the files whose queries and keys are not normalised.
    pub unnormalised_at_experts: usize,
}

/// What the layers without attention (those whose `attention.head_count_kv` is 0) compute in
/// its place, keeping a fixed-size state per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recurrent {
    /// Every layer has attention.
    None,
    /// LFM2's gated short convolution (`shortconv.*`, `short_conv.rs`).
    ShortConv,
    /// Mamba-2's selective state space (`ssm_*`, `mamba2.rs`).
    Mamba2,
    /// The gated delta net's linear attention (Qwen3.5, `delta_net.rs`); the layers come from
    /// `attention.recurrent_layers`, else all but every `full_attention_interval`-th.
    DeltaNet,
}

/// How a mixture-of-experts layer turns its router's logits into expert probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
    /// The raw logits choose the experts; the softmax of the chosen ones weighs them (gpt-oss).
    SoftmaxWeight,
}

/// Whether the chosen experts' weights are divided by their sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightNorm {
    Always,
    Never,
    /// As `<arch>.expert_weights_norm` says (false when absent).
    FromKey,
}

/// How the architecture routes a token to its experts, in the layers whose file has a router
/// (`ffn_gate_inp`): probabilities by `gating`, the `expert_used_count` most probable experts,
/// their weights normalised as `norm` says.
#[derive(Clone, Copy, Debug)]
pub struct Routing {
    pub gating: Gating,
    pub norm: WeightNorm,
    /// Each chosen expert's weight multiplies its input, not its output (Llama 4).
    pub weights_on_input: bool,
    /// The shared expert is as wide as a routed one, whatever the width keys say (Llama 4).
    pub shared_as_routed: bool,
}

impl Routing {
    const fn by(gating: Gating, norm: WeightNorm) -> Routing {
        Routing { gating, norm, weights_on_input: false, shared_as_routed: false }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct ArchFacts {
    pub name: &'static str,
    /// `None`: absolute position embeddings (BERT).
    pub rope: Option<RopeKind>,
    /// The feed-forward activation: of the gate in a decoder (`act(gate) * up`), of `up` itself
    /// in an encoder.
    pub activation: Activation,
    pub causal: bool,
    pub embedding_scale: EmbeddingScale,
    pub qk_norm: QkNorm,
    /// RMS norms of the attention and FFN inputs (every architecture but OLMo 2).
    pub pre_norms: bool,
    /// The tensor of the FFN's input norm: `ffn_norm`, or `post_attention_norm` where the
    /// converter kept Hugging Face's name for it (GLM-4.5).
    pub ffn_norm_name: &'static str,
    /// The tensor of the final norm: `output_norm`, or `token_embd_norm` (LFM2's converter's
    /// name for it).
    pub output_norm_name: &'static str,
    /// The layers without attention, where the file says which.
    pub recurrent: Recurrent,
    /// `<arch>.rope.scaling.finetuned` false turns RoPE off (Granite 4's hybrids, whose
    /// attention has no positions of its own).
    pub rope_switch: bool,
    /// RMS norms of the attention and FFN outputs before the residual add (Gemma 2/3, OLMo 2).
    pub post_norms: bool,
    /// The file scales the residual branches, q·k and the logits by `<arch>.residual_scale`,
    /// `<arch>.attention.scale` and `<arch>.logit_scale` (Granite).
    pub scales_from_keys: bool,
    /// The logits are soft-capped by `<arch>.final_logit_softcapping`, this value when the file
    /// has no such key, 0 meaning none (Gemma 2: 30; Gemma 3: 0); `None`: never (other
    /// architectures' graphs do not read the key).
    pub final_softcap: Option<f32>,
    /// The attention scores are soft-capped by `<arch>.attn_logit_softcapping`, this value when
    /// the file has no such key (Gemma 2: 50); `None`: never.
    pub attention_softcap: Option<f32>,
    /// The queries are multiplied by the attention scale before attention, whose scores are then
    /// left unscaled (Gemma 2's graph: the same value, rounded at another place).
    pub prescaled_queries: bool,
    /// With this many layers (Gemma 2 and 3 27B), queries are scaled by 1/sqrt(n_embd / n_head)
    /// instead of 1/sqrt(head_dim), as llama.cpp decides it.
    pub wide_query_scale_at: Option<usize>,
    /// Sliding-window layers (Gemma 3, OLMo 2 files that ask for them).
    pub sliding_window: Option<SlidingWindow>,
    /// Chunked attention with layers without RoPE (Llama 4).
    pub chunked_attention: Option<ChunkedAttention>,
    /// The graph rotates by M-RoPE when the file gives `rope.dimension_sections` (GLM-4): for
    /// text, whose positions are `[p, p, p, 0]`, that is NeoX's rotation with the fourth
    /// section's pairs left as they are.
    pub mrope_sections: bool,
    /// M-RoPE's sections interleaved (Qwen3-VL's and Qwen3.5's IMROPE: pair `i` of section
    /// `i % 3` while within three times the section's size, else of the fourth).
    pub mrope_interleaved: bool,
    /// The query projection holds each head's queries then a gate of as many values, and the
    /// attention output is multiplied by the gate's sigmoid before `attn_output` (Qwen3.5).
    pub gated_attention: bool,
    /// Queries scaled by position where the file gives `attention.temperature_scale` (Mistral 3).
    pub attention_temperature: bool,
    /// Every `rope_skip_every`-th layer (the 4th, 8th, ...) has no RoPE (SmolLM3: 4); 0: none.
    pub rope_skip_every: usize,
    /// Each layer's attention has sinks (`attn_sinks.weight`, one logit per query head that
    /// joins the softmax without a value: gpt-oss); elsewhere such a tensor is refused as unused.
    pub attention_sinks: bool,
    /// Multi-head latent attention: queries, keys and values through low-rank latents, one
    /// cached latent row per position (DeepSeek-V2, `mla.rs`).
    pub latent_attention: bool,
    /// Encoder with token-type and position embeddings and post-layer norms (BERT).
    pub encoder: bool,
    pub routing: Routing,
}

const DECODER: ArchFacts = ArchFacts {
    name: "",
    rope: Some(RopeKind::Norm),
    activation: Activation::Silu,
    causal: true,
    embedding_scale: EmbeddingScale::None,
    qk_norm: QkNorm::None,
    pre_norms: true,
    ffn_norm_name: "ffn_norm",
    output_norm_name: "output_norm",
    recurrent: Recurrent::None,
    rope_switch: false,
    post_norms: false,
    scales_from_keys: false,
    final_softcap: None,
    attention_softcap: None,
    wide_query_scale_at: None,
    prescaled_queries: false,
    sliding_window: None,
    chunked_attention: None,
    mrope_sections: false,
    mrope_interleaved: false,
    gated_attention: false,
    attention_temperature: false,
    rope_skip_every: 0,
    attention_sinks: false,
    latent_attention: false,
    encoder: false,
    routing: Routing::by(Gating::Softmax, WeightNorm::Always),
};

/// LFM2's facts (its experts' variant is a row over them).
const LFM2: ArchFacts = ArchFacts {
    name: "lfm2",
    rope: Some(RopeKind::Neox),
    qk_norm: QkNorm::PerHead,
    output_norm_name: "token_embd_norm",
    recurrent: Recurrent::ShortConv,
    // a window where the file gives one, over every attention layer
    sliding_window: Some(SlidingWindow {
        default_window: None,
        default_pattern: 1,
        default_rope_base: None,
        scaled_rope: true,
        every_attention_layer: true,
    }),
    ..DECODER
};

/// Qwen3.5: gated delta nets beside gated attention, IMROPE, the post-attention norm as the FFN's
/// input norm (its MoE row routes as the defaults say).
const QWEN35: ArchFacts = ArchFacts {
    name: "qwen35",
    rope: Some(RopeKind::Neox),
    qk_norm: QkNorm::PerHead,
    ffn_norm_name: "post_attention_norm",
    mrope_sections: true,
    mrope_interleaved: true,
    gated_attention: true,
    recurrent: Recurrent::DeltaNet,
    ..DECODER
};

pub const ARCHS: &[ArchFacts] = &[
    ArchFacts { name: "llama", ..DECODER },
    ArchFacts {
        name: "llama4",
        chunked_attention: Some(ChunkedAttention { chunk: 8192, pattern: 4, nope_every: 4, unnormalised_at_experts: 128 }),
        routing: Routing { weights_on_input: true, shared_as_routed: true, ..Routing::by(Gating::Sigmoid, WeightNorm::Never) },
        ..DECODER
    },
    ArchFacts { name: "granite", embedding_scale: EmbeddingScale::FromKey, scales_from_keys: true, ..DECODER },
    ArchFacts { name: "granitemoe", embedding_scale: EmbeddingScale::FromKey, scales_from_keys: true, ..DECODER },
    ArchFacts { name: "qwen2", rope: Some(RopeKind::Neox), ..DECODER },
    ArchFacts { name: "qwen2moe", rope: Some(RopeKind::Neox), routing: Routing::by(Gating::Softmax, WeightNorm::Never), ..DECODER },
    ArchFacts { name: "qwen3", rope: Some(RopeKind::Neox), qk_norm: QkNorm::PerHead, ..DECODER },
    ArchFacts { name: "qwen3moe", rope: Some(RopeKind::Neox), qk_norm: QkNorm::PerHead, ..DECODER },
    ArchFacts { name: "smollm3", rope_skip_every: 4, ..DECODER },
    ArchFacts { name: "mistral3", attention_temperature: true, ..DECODER },
    ArchFacts { name: "phi3", rope: Some(RopeKind::Neox), ..DECODER },
    ArchFacts { name: "glm4", post_norms: true, mrope_sections: true, ..DECODER },
    ArchFacts {
        name: "glm4moe",
        rope: Some(RopeKind::Neox),
        qk_norm: QkNorm::PerHeadIfPresent,
        ffn_norm_name: "post_attention_norm",
        mrope_sections: true,
        routing: Routing::by(Gating::Sigmoid, WeightNorm::FromKey),
        ..DECODER
    },
    ArchFacts {
        name: "olmoe",
        rope: Some(RopeKind::Neox),
        qk_norm: QkNorm::AcrossHeads,
        routing: Routing::by(Gating::Softmax, WeightNorm::Never),
        ..DECODER
    },
    ArchFacts {
        name: "olmo2",
        rope: Some(RopeKind::Neox),
        qk_norm: QkNorm::AcrossHeads,
        pre_norms: false,
        post_norms: true,
        sliding_window: Some(SlidingWindow {
            default_window: None,
            default_pattern: 4,
            default_rope_base: None,
            scaled_rope: false,
            every_attention_layer: false,
        }),
        ..DECODER
    },
    ArchFacts {
        name: "gemma2",
        rope: Some(RopeKind::Neox),
        activation: Activation::Gelu,
        embedding_scale: EmbeddingScale::SqrtEmbd,
        post_norms: true,
        final_softcap: Some(30.0),
        attention_softcap: Some(50.0),
        wide_query_scale_at: Some(46),
        prescaled_queries: true,
        sliding_window: Some(SlidingWindow {
            default_window: Some(4096),
            default_pattern: 2,
            default_rope_base: None,
            scaled_rope: true,
            every_attention_layer: false,
        }),
        ..DECODER
    },
    ArchFacts {
        name: "gemma3",
        rope: Some(RopeKind::Neox),
        activation: Activation::Gelu,
        embedding_scale: EmbeddingScale::SqrtEmbd,
        qk_norm: QkNorm::PerHead,
        post_norms: true,
        final_softcap: Some(0.0),
        wide_query_scale_at: Some(62),
        sliding_window: Some(SlidingWindow {
            default_window: None,
            default_pattern: 6,
            default_rope_base: Some(10000.0),
            scaled_rope: false,
            every_attention_layer: false,
        }),
        ..DECODER
    },
    ArchFacts {
        name: "gpt-oss",
        rope: Some(RopeKind::Neox),
        activation: Activation::SwigluOai,
        ffn_norm_name: "post_attention_norm",
        attention_sinks: true,
        sliding_window: Some(SlidingWindow {
            default_window: None,
            default_pattern: 2,
            default_rope_base: None,
            scaled_rope: true,
            every_attention_layer: false,
        }),
        routing: Routing::by(Gating::SoftmaxWeight, WeightNorm::Never),
        ..DECODER
    },
    ArchFacts { name: "deepseek2", latent_attention: true, routing: Routing::by(Gating::Softmax, WeightNorm::FromKey), ..DECODER },
    LFM2,
    // LFM2 with experts after its leading dense layers (LFM2-8B-A1B): the router's sigmoid
    // (the file's gating function) with a selection bias, the chosen weights normalised; its
    // graph reads no window
    ArchFacts { name: "lfm2moe", sliding_window: None, routing: Routing::by(Gating::Sigmoid, WeightNorm::Always), ..LFM2 },
    ArchFacts {
        name: "granitehybrid",
        embedding_scale: EmbeddingScale::FromKey,
        scales_from_keys: true,
        recurrent: Recurrent::Mamba2,
        rope_switch: true,
        ..DECODER
    },
    QWEN35,
    ArchFacts { name: "qwen35moe", ..QWEN35 },
    ArchFacts { name: "bert", rope: None, activation: Activation::GeluErf, causal: false, encoder: true, ..DECODER },
];

/// The names of every architecture the table holds.
pub fn names() -> Vec<&'static str> {
    ARCHS.iter().map(|a| a.name).collect()
}

pub fn facts(arch: &str) -> Option<&'static ArchFacts> {
    ARCHS.iter().find(|a| a.name == arch)
}
