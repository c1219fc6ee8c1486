//! The gated delta net, the linear attention of Qwen3.5's recurrent layers: `attn_qkv` makes the
//! query, key and value heads, `attn_gate` the output gate `z`, `ssm_beta` and `ssm_alpha` one
//! value per value head; the heads go through a causal depthwise convolution with state and
//! SiLU; the gated delta rule (a `head_dim` x `head_dim` state per value head, decaying by
//! `exp(softplus(alpha + dt_bias) · a)`, corrected towards each value by `sigmoid(beta)`) gives
//! each head's output, normalised per head, gated by `silu(z)` and projected by `ssm_out`.
//! llama.cpp's `build_layer_attn_linear`; the rule in its chunked form for prefill and decode
//! alike (`RECURRENT_CHUNK`), so that both give the same bits.

use super::blocks::{linear, linear_each, Linear, ScaleAt};
use super::config::SsmConfig;
use super::error::ModelError;
use super::lora::LoraRows;
use super::weights::Loader;
use crate::backend::{Activation, Backend, StatePart, StateRun};

/// The weights of one gated delta-net block.
pub struct DeltaNet<B: Backend> {
    /// The query, key and value heads (the convolution's channels).
    pub qkv: Linear<B>,
    /// The output gate, one value per output value.
    pub gate: Linear<B>,
    /// One value per value head: the correction's strength and the decay's step.
    pub beta: Linear<B>,
    pub alpha: Linear<B>,
    /// The convolution: one row of `d_conv` taps per channel.
    pub conv: B::Tensor,
    /// Per value head: the step's bias and the decay `a` (the file's `-exp(A_log)`).
    pub dt_bias: B::Vector,
    pub a: B::Vector,
    /// The output's per-head norm, `head_dim` values.
    pub norm: B::Vector,
    pub out: Linear<B>,
}

impl<B: Backend> DeltaNet<B> {
    pub(crate) fn load(l: &Loader<'_, B>, layer: usize, ssm: &SsmConfig, n_embd: usize) -> Result<DeltaNet<B>, ModelError> {
        let n = |s: &str| format!("blk.{layer}.{s}");
        let (sh, ch) = (ssm.delta_shape(), ssm.conv_channels());
        // the file's {d_conv, channels}: one row of taps per channel
        let conv = l.host_matrix(&n("ssm_conv1d.weight"), ch, ssm.d_conv)?;
        Ok(DeltaNet {
            qkv: l.linear(&n("attn_qkv"), ch, n_embd)?,
            gate: l.linear(&n("attn_gate"), ssm.d_inner, n_embd)?,
            beta: l.linear(&n("ssm_beta"), sh.n_v_heads, n_embd)?,
            alpha: l.linear(&n("ssm_alpha"), sh.n_v_heads, n_embd)?,
            conv: l.backend.upload_tensor(ch, ssm.d_conv, &conv)?,
            dt_bias: l.vector(&n("ssm_dt.bias"), sh.n_v_heads)?,
            a: l.vector(&n("ssm_a"), sh.n_v_heads)?,
            norm: l.vector(&n("ssm_norm.weight"), sh.head_dim)?,
            out: l.linear(&n("ssm_out"), n_embd, ssm.d_inner)?,
        })
    }

    pub(crate) fn matrices(&self) -> Vec<&B::Matrix> {
        vec![&self.qkv.w, &self.gate.w, &self.beta.w, &self.alpha.w, &self.out.w]
    }
}

/// The block over `x` (`n` x `n_embd`, normalised), each sequence's rows continuing its
/// convolution and delta-rule states in `store` (`part` of its slot: the convolution's, then the
/// rule's): `n` x `n_embd`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward<B: Backend>(
    b: &B,
    w: &DeltaNet<B>,
    ssm: &SsmConfig,
    eps: f32,
    x: &B::Tensor,
    store: &mut B::KvStore,
    part: StatePart,
    runs: &[StateRun],
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let [conv_part, rule_part] = ssm.state_parts(part);
    // n x channels, n x d_inner, n x value heads (twice)
    let [qkv, mut z, beta, alpha] = linear_each(b, [&w.qkv, &w.gate, &w.beta, &w.alpha], ScaleAt::BeforeBias, x, lora)?;
    let mut qkv = b.conv_states(&qkv, &w.conv, store, conv_part, runs)?;
    b.activate(Activation::Silu, &mut qkv)?;
    let mut y = b.delta_rule(&qkv, [&alpha, &beta], [&w.dt_bias, &w.a], ssm.delta_shape(), eps, store, rule_part, runs)?; // n x d_inner
    b.rms_norm_in_place(&mut y, &w.norm, eps)?;
    b.glu(Activation::Silu, &mut z, &y)?; // silu(z) · norm(y)
    linear(b, &w.out, ScaleAt::BeforeBias, &z, lora)
}
