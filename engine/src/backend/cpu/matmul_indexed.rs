//! Indexed products (ggml's `mul_mat_id`) on the CPU: every slot of a batch names the matrix it
//! is multiplied by (a token's chosen expert), the slots are grouped by matrix, and every used
//! matrix of every set runs over its own rows in one parallel pass of [`matmul_rows_on`], so each
//! expert's weights are read once per step however many tokens chose it. A slot's output is the
//! dense kernels' product of its row (their bits do not depend on the other rows), so the result
//! is the same in any batch.

use super::matmul::{matmul_rows_on, Rows};
use crate::backend::indexed::IndexedPlan;
use crate::quant::{Isa, MatmulError, WeightMatrix};

/// `outs[s]` (a row of `sets[s][_].rows` values per slot of `plan`) gets, for every slot, the
/// product of its activation row of `x` with the matrix it names in set `s`. `sets[s][e]` is
/// present for every used matrix `e`.
pub fn matmul_indexed_on(
    isa: Isa,
    sets: &[Vec<Option<WeightMatrix>>],
    plan: &IndexedPlan,
    x: &[f32],
    outs: &mut [&mut [f32]],
) -> Result<(), MatmulError> {
    let Some(&first) = plan.used.first() else { return Ok(()) };
    let n_slots: usize = plan.slots.iter().map(Vec::len).sum();
    // each distinct list of rows is one input, its rows picked from `x` (converted once)
    let inputs: Vec<Rows> = plan.sources.iter().map(|rows| Rows { x, batch: rows.len(), pick: Some(rows) }).collect();
    // every set's used matrices, set after set, each writing its rows straight into its slots
    let n_used = plan.used.len();
    let mut ws = Vec::with_capacity(sets.len() * n_used);
    let mut input_of = Vec::with_capacity(sets.len() * n_used);
    let mut rows_of = Vec::with_capacity(sets.len() * n_used);
    for (set, out) in sets.iter().zip(outs.iter_mut()) {
        let rows = set[first].expect("a used matrix is present").rows;
        let mut slot_rows: Vec<Option<&mut [f32]>> = if rows == 0 {
            (0..n_slots).map(|_| Some(<&mut [f32]>::default())).collect()
        } else {
            out.chunks_exact_mut(rows).map(Some).collect()
        };
        for ((&e, &i), slots) in plan.used.iter().zip(&plan.source_of).zip(&plan.slots) {
            ws.push(set[e].expect("a used matrix is present"));
            input_of.push(i);
            rows_of.push(slots.iter().map(|&p| slot_rows[p].take().expect("a slot names one matrix")).collect::<Vec<&mut [f32]>>());
        }
    }
    matmul_rows_on(isa, &ws, &inputs, &input_of, rows_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::matmul_each_on;
    use crate::backend::harness::{quantized_rows, Rng};
    use crate::quant::{panel, GgmlType};

    /// Every slot's row has the bits of its matrix's product of that row alone, on every tier,
    /// with panels, tiles and the float GEMM in play (experts chosen by up to 20 rows).
    #[test]
    fn every_slot_has_the_bits_of_its_own_product() {
        let (n_matrix, rows, cols, tokens, per_token) = (4usize, 16usize, 256usize, 20usize, 2usize);
        let mut rng = Rng::new(7);
        let x = rng.values(tokens * cols, 1.0);
        let ids: Vec<usize> = (0..tokens * per_token).map(|p| (p * 7 + p / 3) % n_matrix).collect();
        for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::F32] {
            let data: Vec<Vec<u8>> = (0..n_matrix).map(|_| quantized_rows(ty, rows, cols, 0.5, &mut rng)).collect();
            let panels: Vec<Option<panel::Panels>> = data.iter().map(|d| panel::repack(ty, rows, cols, d)).collect();
            let views: Vec<Option<WeightMatrix>> = data
                .iter()
                .zip(&panels)
                .map(|(d, p)| {
                    let view = WeightMatrix::new(ty, rows, cols, d).unwrap();
                    Some(match p {
                        Some(p) => view.with_panels(p),
                        None => view,
                    })
                })
                .collect();
            let plan = IndexedPlan::new(&ids, n_matrix, tokens);
            for isa in Isa::available() {
                let mut out = vec![0.0f32; ids.len() * rows];
                matmul_indexed_on(isa, std::slice::from_ref(&views), &plan, &x, &mut [&mut out]).unwrap();
                for (p, &e) in ids.iter().enumerate() {
                    let r = p / per_token;
                    let mut alone = vec![0.0f32; rows];
                    matmul_each_on(isa, &[views[e].unwrap()], &x[r * cols..(r + 1) * cols], 1, &mut [&mut alone]).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
                    assert_eq!(bits(&out[p * rows..(p + 1) * rows]), bits(&alone), "{ty} on {isa}: slot {p} (expert {e})");
                }
            }
        }
    }
}
