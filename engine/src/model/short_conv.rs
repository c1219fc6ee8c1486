//! LFM2's gated short-convolution block, the mixer of its recurrent layers: `in_proj` makes
//! three rows of `n_embd` (`b`, `c`, `x`) per token, `b ⊙ x` runs through a causal depthwise
//! convolution of `shortconv.l_cache` taps whose earlier rows are the sequence's state, the
//! result gated by `c` goes through `out_proj`. llama.cpp's `llm_build_lfm2` shortconv block.

use super::blocks::{linear, Linear, ScaleAt};
use super::error::ModelError;
use super::lora::LoraRows;
use super::weights::Loader;
use crate::backend::{Backend, StatePart, StateRun};

/// The weights of one short-convolution block.
pub struct ShortConv<B: Backend> {
    /// `3 n_embd` x `n_embd`: `b`, `c`, `x` one after the other.
    pub in_proj: Linear<B>,
    /// `n_embd` rows of `taps` values, the oldest tap first.
    pub kernel: B::Tensor,
    pub out_proj: Linear<B>,
}

impl<B: Backend> ShortConv<B> {
    pub(crate) fn load(l: &Loader<'_, B>, layer: usize, taps: usize, n_embd: usize) -> Result<ShortConv<B>, ModelError> {
        let n = |s: &str| format!("blk.{layer}.shortconv.{s}");
        // the file's {taps, n_embd}: one row of taps per channel
        let kernel = l.host_matrix(&n("conv.weight"), n_embd, taps)?;
        Ok(ShortConv {
            in_proj: l.linear(&n("in_proj"), 3 * n_embd, n_embd)?,
            kernel: l.backend.upload_tensor(n_embd, taps, &kernel)?,
            out_proj: l.linear(&n("out_proj"), n_embd, n_embd)?,
        })
    }

    pub(crate) fn matrices(&self) -> Vec<&B::Matrix> {
        vec![&self.in_proj.w, &self.out_proj.w]
    }
}

/// The block over `x` (`n` x `n_embd`, normalised), each sequence's rows continuing its state
/// in `store` (`part` of its slot): `n` x `n_embd`.
pub(crate) fn forward<B: Backend>(
    b: &B,
    w: &ShortConv<B>,
    x: &B::Tensor,
    store: &mut B::KvStore,
    part: StatePart,
    runs: &[StateRun],
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let bcx = linear(b, &w.in_proj, ScaleAt::BeforeBias, x, lora)?; // n x 3e
    let y = b.short_conv(&bcx, &w.kernel, store, part, runs)?; // n x e
    linear(b, &w.out_proj, ScaleAt::BeforeBias, &y, lora)
}
