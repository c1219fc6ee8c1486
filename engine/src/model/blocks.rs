//! Blocks the model kinds are composed of, over any [`Backend`]: projections (one matrix, or
//! several sharing an input; [`Linear`] with its bias and scale), attention followed by its
//! output projection, and the gated and plain feed-forward blocks.

use super::error::ModelError;
use super::lora::LoraRows;
use crate::backend::{Activation, AttentionRow, AttentionShape, Backend, KvSource};

/// One projection as a file gives it: `y = (x · wᵀ) · scale + b` (attention and output
/// projections, as llama.cpp's `build_lora_mm` and the bias add after it compute it), or
/// `(x · wᵀ + b) · scale` (the feed-forward block's, as its `build_ffn` does). The scale is a
/// per-tensor `.scale` (checkpoints converted from FP8 or NVFP4 keep one); both it and the bias
/// are optional, and real files never carry both. A LoRA adapter's correction of `w` (its
/// `site` among the model's correctable projections) is added to the product before the bias
/// and, for the feed-forward block, before the scale.
pub struct Linear<B: Backend> {
    pub w: B::Matrix,
    pub b: Option<B::Vector>,
    pub scale: Option<f32>,
    /// The projection's index among the model's [`super::lora::LoraSite`]s, if adapters may
    /// correct it.
    pub site: Option<usize>,
}

/// Where a [`Linear`]'s scale applies: before its bias (attention, output) or after it
/// (feed-forward).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScaleAt {
    BeforeBias,
    AfterBias,
}

/// [`Linear`] for several projections with the same input, in one pass of the backend, with
/// the corrections of the adapters of `lora`'s rows: without scales or corrections the bias is
/// added by the product itself (the same bits as a separate add).
pub(crate) fn linear_each<B: Backend, const N: usize>(
    b: &B,
    ls: [&Linear<B>; N],
    at: ScaleAt,
    x: &B::Tensor,
    lora: &LoraRows<'_, B>,
) -> Result<[B::Tensor; N], ModelError> {
    let ms = ls.map(|l| &l.w);
    if ls.iter().all(|l| l.scale.is_none() && !lora.touches(l.site)) {
        return project_each(b, ms, ls.map(|l| l.b.as_ref()), x);
    }
    let mut ys = project_each(b, ms, [None; N], x)?;
    // each projection's steps in llama.cpp's order: scale (before the bias), corrections, bias,
    // scale (after it); the corrections of all of them at once, so that the parts of a fused
    // projection share their adapters' low products
    for (y, l) in ys.iter_mut().zip(ls) {
        if let (Some(s), ScaleAt::BeforeBias) = (l.scale, at) {
            b.scale(y, s)?;
        }
    }
    lora.add_each(b, &ls.map(|l| l.site), x, &mut ys)?;
    for (y, l) in ys.iter_mut().zip(ls) {
        if let Some(bias) = &l.b {
            b.add_bias(y, bias)?;
        }
        if let (Some(s), ScaleAt::AfterBias) = (l.scale, at) {
            b.scale(y, s)?;
        }
    }
    Ok(ys)
}

pub(crate) fn linear<B: Backend>(
    b: &B,
    l: &Linear<B>,
    at: ScaleAt,
    x: &B::Tensor,
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let [y] = linear_each(b, [l], at, x, lora)?;
    Ok(y)
}

/// `x · mᵀ (+ bias)`.
pub(crate) fn project<B: Backend>(b: &B, m: &B::Matrix, bias: Option<&B::Vector>, x: &B::Tensor) -> Result<B::Tensor, ModelError> {
    let [y] = project_each(b, [m], [bias], x)?;
    Ok(y)
}

/// [`project`] for several matrices with the same input, in one pass of the backend (the q/k/v
/// and gate/up projections): the same bits as one `project` per matrix.
pub(crate) fn project_each<B: Backend, const N: usize>(
    b: &B,
    ms: [&B::Matrix; N],
    biases: [Option<&B::Vector>; N],
    x: &B::Tensor,
) -> Result<[B::Tensor; N], ModelError> {
    let ys = b.matmul_each(&ms, &biases, x)?;
    Ok(ys.try_into().unwrap_or_else(|_| unreachable!("one output per matrix")))
}

/// Attention of the query rows `q` over `kv`, then the output projection `wo (+ bo)`:
/// `rows x n_embd`.
pub(crate) fn attention_out<B: Backend>(
    b: &B,
    q: &B::Tensor,
    kv: KvSource<'_, B>,
    rows: &[AttentionRow],
    shape: &AttentionShape,
    wo: &B::Matrix,
    bo: Option<&B::Vector>,
) -> Result<B::Tensor, ModelError> {
    let attn = b.attention(q, kv, rows, shape, None)?;
    project(b, wo, bo, &attn)
}

/// The gated feed-forward block of the decoders: `down · (act(gate · x) ⊙ (up · x))`.
pub(crate) fn gated_ffn<B: Backend>(
    b: &B,
    act: Activation,
    [gate, up, down]: [&Linear<B>; 3],
    x: &B::Tensor,
    lora: &LoraRows<'_, B>,
) -> Result<B::Tensor, ModelError> {
    let g = if [gate, up].iter().all(|l| l.scale.is_none() && !lora.touches(l.site)) {
        // nothing between the products and the unit: a backend may do them in one pass
        b.matmul_glu(act, [&gate.w, &up.w], [gate.b.as_ref(), up.b.as_ref()], x)?
    } else {
        let [mut g, u] = linear_each(b, [gate, up], ScaleAt::AfterBias, x, lora)?;
        b.glu(act, &mut g, &u)?;
        g
    };
    linear(b, down, ScaleAt::AfterBias, &g, lora)
}

/// The plain feed-forward block of the encoders: `down · act(up · x + up_b) + down_b`.
pub(crate) fn plain_ffn<B: Backend>(
    b: &B,
    act: Activation,
    (up, up_b): (&B::Matrix, Option<&B::Vector>),
    (down, down_b): (&B::Matrix, Option<&B::Vector>),
    x: &B::Tensor,
) -> Result<B::Tensor, ModelError> {
    let mut u = project(b, up, up_b, x)?;
    b.activate(act, &mut u)?;
    project(b, down, down_b, &u)
}
