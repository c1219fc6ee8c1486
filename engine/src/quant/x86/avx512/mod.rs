//! The AVX512 tier: float, legacy-quant and K-quant row kernels.

use crate::quant::dispatch::Kernels;
use crate::quant::GgmlType;

mod float;
mod k_quants;
mod k_quants_q5q6;
mod k_quants_rows;
mod legacy;
mod panel;

pub(crate) use panel::panel_kernel;

/// This tier's kernels for `ty`, or `None` where the scalar ones serve.
pub(crate) fn kernels(ty: GgmlType) -> Option<Kernels> {
    float::kernels(ty).or_else(|| legacy::kernels(ty)).or_else(|| k_quants::kernels(ty))
}

/// This tier's kernel dotting one weight row of `ty` with several activation rows, if any.
pub(crate) fn rows_kernel(ty: GgmlType) -> Option<crate::quant::dispatch::VecDotRowsFn> {
    legacy::rows_kernel(ty).or_else(|| k_quants_rows::rows_kernel(ty))
}

/// Checks the operands of a several-row kernel: weight rows of `wb`-byte blocks, activation rows
/// of `stride` bytes in `ab`-byte blocks (as many blocks as a weight row), `out` one value per
/// (activation row, weight row). Returns `(blocks per row, weight rows, activation rows)`.
fn rows_shape(w: &[u8], wb: usize, acts: &[u8], stride: usize, ab: usize, out: &[f32]) -> (usize, usize, usize) {
    assert!(stride > 0 && stride.is_multiple_of(ab), "activation rows of {stride} bytes");
    let nb = stride / ab;
    assert!(
        w.len().is_multiple_of(nb * wb) && acts.len().is_multiple_of(stride),
        "{} weight bytes, {} activation bytes",
        w.len(),
        acts.len()
    );
    let (n_w, batch) = (w.len() / (nb * wb), acts.len() / stride);
    assert_eq!(out.len(), n_w * batch, "{n_w} weight rows x {batch} activation rows");
    (nb, n_w, batch)
}

/// Checks a several-row kernel of `ty` against this tier's single-row kernel: every result
/// bit-equal, for three weight rows of each block count in `blocks` and each batch size in
/// `batches` (random weights and activations).
#[cfg(test)]
fn check_rows_kernel(ty: GgmlType, blocks: &[usize], batches: &[usize], mut seed: u32) {
    use crate::quant::{ops_for, Isa};
    if !Isa::Avx512.is_available() {
        return;
    }
    let rows_fn = rows_kernel(ty).unwrap();
    let ops = ops_for(ty, Isa::Avx512).unwrap();
    let act = ops_for(ops.vec_dot_type, Isa::Avx512).unwrap();
    let mut next = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    for &nb in blocks {
        let (n, n_w) = (nb * ty.block_size(), 3);
        let rb = ty.row_bytes(n).unwrap();
        let mut w = vec![0u8; rb * n_w];
        for dst in w.chunks_exact_mut(rb) {
            let vals: Vec<f32> = (0..n).map(|_| next()).collect();
            (ops.quantize)(&vals, dst);
        }
        for &batch in batches {
            let stride = ops.vec_dot_type.row_bytes(n).unwrap();
            let mut acts = vec![0u8; batch * stride];
            for row in acts.chunks_exact_mut(stride) {
                let vals: Vec<f32> = (0..n).map(|_| next() * 4.0).collect();
                (act.quantize_activations)(&vals, row);
            }
            let mut out = vec![0.0f32; batch * n_w];
            rows_fn(&w, &acts, stride, &mut out);
            for (b, row) in acts.chunks_exact(stride).enumerate() {
                for (i, wr) in w.chunks_exact(rb).enumerate() {
                    let single = (ops.vec_dot)(wr, row);
                    assert_eq!(out[b * n_w + i].to_bits(), single.to_bits(), "{ty} nb={nb} batch={batch} row {b} weight {i}");
                }
            }
        }
    }
}
