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
    /// Per-head RMS norms of q and k before RoPE.
    pub qk_norm: bool,
    /// RMS norms of the attention and FFN outputs before the residual add (Gemma 2/3).
    pub post_norms: bool,
    /// The file scales the residual branches, q·k and the logits by `<arch>.residual_scale`,
    /// `<arch>.attention.scale` and `<arch>.logit_scale` (Granite).
    pub scales_from_keys: bool,
    /// Sliding-window layers, one global layer in every `swa_pattern` (Gemma 3).
    pub sliding_window: bool,
    /// Encoder with token-type and position embeddings and post-layer norms (BERT).
    pub encoder: bool,
}

const DECODER: ArchFacts = ArchFacts {
    name: "",
    rope: Some(RopeKind::Norm),
    activation: Activation::Silu,
    causal: true,
    embedding_scale: EmbeddingScale::None,
    qk_norm: false,
    post_norms: false,
    scales_from_keys: false,
    sliding_window: false,
    encoder: false,
};

pub const ARCHS: &[ArchFacts] = &[
    ArchFacts { name: "llama", ..DECODER },
    ArchFacts { name: "granite", embedding_scale: EmbeddingScale::FromKey, scales_from_keys: true, ..DECODER },
    ArchFacts { name: "qwen2", rope: Some(RopeKind::Neox), ..DECODER },
    ArchFacts {
        name: "gemma3",
        rope: Some(RopeKind::Neox),
        activation: Activation::Gelu,
        embedding_scale: EmbeddingScale::SqrtEmbd,
        qk_norm: true,
        post_norms: true,
        sliding_window: true,
        ..DECODER
    },
    ArchFacts { name: "bert", rope: None, activation: Activation::GeluErf, causal: false, encoder: true, ..DECODER },
];

pub fn facts(arch: &str) -> Option<&'static ArchFacts> {
    ARCHS.iter().find(|a| a.name == arch)
}
