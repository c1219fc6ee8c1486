//! Blocks the model kinds are composed of, over any [`Backend`]: projections (one matrix, or
//! several sharing an input), attention followed by its output projection, and the gated and
//! plain feed-forward blocks.

use super::error::ModelError;
use crate::backend::{Activation, AttentionRow, AttentionShape, Backend, KvSource};

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
    let attn = b.attention(q, kv, rows, shape)?;
    project(b, wo, bo, &attn)
}

/// The gated feed-forward block of the decoders: `down · (act(gate · x) ⊙ (up · x))`.
pub(crate) fn gated_ffn<B: Backend>(
    b: &B,
    act: Activation,
    gate: &B::Matrix,
    up: &B::Matrix,
    down: &B::Matrix,
    x: &B::Tensor,
) -> Result<B::Tensor, ModelError> {
    let [mut g, u] = project_each(b, [gate, up], [None, None], x)?;
    b.glu(act, &mut g, &u)?;
    project(b, down, None, &g)
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
