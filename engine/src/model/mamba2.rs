//! Mamba-2's selective state-space block, the mixer of Granite 4's hybrid recurrent layers:
//! `ssm_in` makes the gate `z`, the convolution's channels (the heads' values `x`, then the
//! groups of `B` and `C`) and one step `dt` per head; the channels go through a causal
//! depthwise convolution with state, its bias and SiLU; the selective scan (a state of
//! `head_dim` x `d_state` per head, decaying by `exp(softplus(dt) · a)`) gives each head's
//! output plus `x · d`; it is gated by `silu(z)`, normalised per group and projected by
//! `ssm_out`. llama.cpp's `build_mamba2_layer`; the scan in its chunked form (SSD,
//! `RECURRENT_CHUNK`) for prefill and decode alike, so that both give the same bits.

use super::blocks::{linear, linear_each, Linear, ScaleAt};
use super::config::SsmConfig;
use super::error::ModelError;
use super::lora::LoraRows;
use super::weights::Loader;
use crate::backend::{Activation, Backend, StatePart, StateRun};

/// The weights of one Mamba-2 block.
pub struct Mamba2<B: Backend> {
    /// `ssm_in` taken apart: `d_inner` rows of the gate, the convolution's channels, one row per
    /// head of steps.
    pub in_z: Linear<B>,
    pub in_xbc: Linear<B>,
    pub in_dt: Linear<B>,
    /// The convolution: one row of `d_conv` taps per channel, and its bias.
    pub conv: B::Tensor,
    pub conv_bias: Option<B::Vector>,
    /// Per head: the step's bias, the decay `a` (the file's `-exp(A_log)`), the skip `d`.
    pub dt_bias: B::Vector,
    pub a: B::Vector,
    pub d: B::Vector,
    /// The gated output's norm, `d_inner` values (a group's share for each group).
    pub norm: B::Vector,
    pub out: Linear<B>,
}

impl<B: Backend> Mamba2<B> {
    pub(crate) fn load(l: &Loader<'_, B>, layer: usize, ssm: &SsmConfig, n_embd: usize) -> Result<Mamba2<B>, ModelError> {
        let n = |s: &str| format!("blk.{layer}.{s}");
        let (d_inner, ch, heads) = (ssm.d_inner, ssm.conv_channels(), ssm.n_head);
        let [in_z, in_xbc, in_dt] =
            l.linear_parts(&n("ssm_in"), [d_inner, ch, heads], n_embd)?.ok_or_else(|| ModelError::MissingTensor(n("ssm_in.weight")))?;
        // the file's {d_conv, channels}: one row of taps per channel
        let conv = l.host_matrix(&n("ssm_conv1d.weight"), ch, ssm.d_conv)?;
        let per_head = |name: &str| l.shaped_vector(&n(name), &[1, heads as u64]);
        Ok(Mamba2 {
            in_z,
            in_xbc,
            in_dt,
            conv: l.backend.upload_tensor(ch, ssm.d_conv, &conv)?,
            conv_bias: l.vector_opt(&n("ssm_conv1d.bias"), ch)?,
            dt_bias: l.vector(&n("ssm_dt.bias"), heads)?,
            a: per_head("ssm_a")?,
            d: per_head("ssm_d")?,
            norm: l.shaped_vector(&n("ssm_norm.weight"), &[(d_inner / ssm.n_group) as u64, ssm.n_group as u64])?,
            out: l.linear(&n("ssm_out"), n_embd, d_inner)?,
        })
    }

    pub(crate) fn matrices(&self) -> Vec<&B::Matrix> {
        vec![&self.in_z.w, &self.in_xbc.w, &self.in_dt.w, &self.out.w]
    }
}

/// The block over `x` (`n` x `n_embd`, normalised), each sequence's rows continuing its
/// convolution and scan states in `store` (`part` of its slot: the convolution's, then the
/// scan's): `n` x `n_embd`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward<B: Backend>(
    b: &B,
    w: &Mamba2<B>,
    ssm: &SsmConfig,
    eps: f32,
    x: &B::Tensor,
    store: &mut B::KvStore,
    part: StatePart,
    runs: &[StateRun],
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let [conv_part, scan_part] = ssm.state_parts(part);
    // n x d_inner, n x channels, n x heads
    let [mut z, xbc, mut dt] = linear_each(b, [&w.in_z, &w.in_xbc, &w.in_dt], ScaleAt::BeforeBias, x, lora)?;
    let mut xbc = b.conv_states(&xbc, &w.conv, store, conv_part, runs)?; // n x channels
    if let Some(bias) = &w.conv_bias {
        b.add_bias(&mut xbc, bias)?;
    }
    b.activate(Activation::Silu, &mut xbc)?;
    b.add_bias(&mut dt, &w.dt_bias)?;
    let y = b.ssm_scan(&xbc, &dt, &w.a, &w.d, ssm.shape(), store, scan_part, runs)?; // n x d_inner
    b.glu(Activation::Silu, &mut z, &y)?; // silu(z) · y
    b.rms_norm_groups(&mut z, &w.norm, ssm.d_inner / ssm.n_group, eps)?;
    linear(b, &w.out, ScaleAt::BeforeBias, &z, lora)
}
