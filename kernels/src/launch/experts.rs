//! Launchers of a mixture's indexed products (ggml's `mul_mat_id`): each slot its expert of a
//! stacked buffer, a prompt's slots grouped by expert into tiles.

use super::matmul::{lanes_per_output, matmul_operands, MatmulInput, MatrixArgs, MMA_W, MMA_X, MULMAT_THREADS, MULMAT_WARPS};
use super::{check, dim, go, int, ints};
use crate::runtime::{Arg, Runtime, RuntimeError};

/// Whether [`mul_mat_id`] runs `ids` (slots choosing among `count` experts) by expert tiles (a
/// prompt's slots), where [`mul_mat_glu`](super::mul_mat_glu)'s slot by slot would read each expert once per slot.
pub fn expert_tiles_pay(ids: &[u32], count: usize) -> bool {
    ExpertTiles::worth_it(ids, count).is_some()
}

/// Checks an indexed product's expert ids (each below `count`) and its stack's stride (room for
/// one matrix `m` per expert).
pub(super) fn check_experts(kernel: &str, ids: &[u32], count: usize, stride: usize, m: MatrixArgs) -> Result<(), RuntimeError> {
    if let Some(bad) = ids.iter().find(|&&e| e as usize >= count) {
        return Err(RuntimeError::Device(format!("{kernel}: expert {bad} of {count}")));
    }
    if count > 0 && stride < m.rows * m.row_bytes {
        return Err(RuntimeError::Device(format!("{kernel}: experts {stride} bytes apart hold {} each", m.rows * m.row_bytes)));
    }
    Ok(())
}

/// The bytes from a stack's first expert to the end of its last (`count` of `m`, `stride` apart).
pub(super) fn stack_bytes(count: usize, stride: usize, m: MatrixArgs) -> usize {
    count.saturating_sub(1) * stride + m.rows * m.row_bytes
}

/// Experts stacked in one buffer for [`mul_mat_id`]: `count` matrices of `m`'s shape, expert
/// `e` from byte `at + e · stride`.
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub m: MatrixArgs,
    pub at: usize,
    pub stride: usize,
    pub count: usize,
}

/// Indexed products (ggml's `mul_mat_id`): out row `p` (of `s.m.rows` values) = activation row
/// `p / per_row` of `x` times expert `ids[p]` of the stack `w`, for every slot `p` of `ids`; each
/// slot has the bits `mul_mat` gives its row.
pub fn mul_mat_id<R: Runtime>(
    rt: &R,
    w: &R::Buffer,
    s: Stack,
    x: MatmulInput<'_, R::Buffer>,
    ids: &[u32],
    per_row: usize,
    out: &R::Buffer,
) -> Result<(), RuntimeError> {
    let m = s.m;
    if per_row == 0 {
        // the kernels divide a slot's number by it
        return Err(RuntimeError::Device("mul_mat_id: 0 slots per activation row".into()));
    }
    let rows = ids.len().div_ceil(per_row);
    let (kernel, xb, inner, x_bytes) = matmul_operands(("mul_mat_vec_q", "mul_mat_vec_f"), x, m, rows)?;
    check_experts(kernel, ids, s.count, s.stride, m)?;
    if ids.is_empty() {
        return Ok(());
    }
    check(rt, kernel, "w", w, s.at + stack_bytes(s.count, s.stride, m))?;
    check(rt, kernel, "x", xb, x_bytes)?;
    check(rt, kernel, "out", out, ids.len() * m.rows * 4)?;
    let quantized = kernel == "mul_mat_vec_q";
    if quantized {
        if let Some(tiles) = ExpertTiles::worth_it(ids, s.count) {
            return mul_mat_id_tiles(rt, w, s, xb, inner, &tiles, per_row, out);
        }
    }
    let idx: Vec<i32> = ids.iter().map(|&e| e as i32).collect();
    let idx = ints(rt, &idx)?;
    let lanes = lanes_per_output(inner);
    let columns = if quantized { MULMAT_THREADS / lanes } else { MULMAT_WARPS };
    let grid = [dim(kernel, "blocks", m.rows.div_ceil(columns))?, dim(kernel, "slots", ids.len())?, 1];
    let mut args = vec![
        Arg::BufAt(w, s.at),
        Arg::I64(s.stride as i64),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
        Arg::I32(int(kernel, "inner size", inner)?),
    ];
    if quantized {
        args.push(Arg::I32(lanes as i32));
    }
    // no bias: `out` stands in for its pointer
    args.extend([
        Arg::Buf(xb),
        Arg::I32(int(kernel, "slots", ids.len())?),
        Arg::Buf(&idx),
        Arg::I32(int(kernel, "slots per row", per_row)?),
        Arg::Buf(out),
        Arg::Buf(out),
        Arg::I32(int(kernel, "outputs", m.rows)?),
        Arg::I32(0),
    ]);
    go(rt, kernel, grid, MULMAT_THREADS as u32, &args)
}

/// The slots of an indexed product grouped by expert into tiles of `MMA_X` (`matmul.cu`'s
/// `mul_mat_q` over expert tiles): tile `y` takes expert `experts[y]` and the slots
/// `slots[y · MMA_X ..][.. MMA_X]` (in slot order, -1 past the expert's last).
struct ExpertTiles {
    experts: Vec<i32>,
    slots: Vec<i32>,
}

impl ExpertTiles {
    /// The tiles, when the slots read each expert they choose at least twice on average (a
    /// prompt's rows): then reading an expert's weights once per tile pays for the tiles. Fewer
    /// (decoding) stay one slot per block. The bits are the same either way.
    fn worth_it(ids: &[u32], count: usize) -> Option<ExpertTiles> {
        let mut by_expert: Vec<Vec<i32>> = vec![Vec::new(); count];
        for (p, &e) in ids.iter().enumerate() {
            by_expert[e as usize].push(p as i32);
        }
        let chosen = by_expert.iter().filter(|s| !s.is_empty()).count();
        if ids.len() < 2 * chosen {
            return None;
        }
        let mut tiles = ExpertTiles { experts: Vec::new(), slots: Vec::new() };
        for (e, slots) in by_expert.iter().enumerate() {
            for part in slots.chunks(MMA_X) {
                tiles.experts.push(e as i32);
                tiles.slots.extend(part);
                tiles.slots.resize(tiles.experts.len() * MMA_X, -1);
            }
        }
        Some(tiles)
    }
}

/// [`mul_mat_id`] of quantized experts by `mul_mat_q`'s expert tiles: `x` holds Q8_1 rows of
/// `n_chunks` blocks (checked by the caller, as the stack, `ids` and `out`).
#[allow(clippy::too_many_arguments)]
fn mul_mat_id_tiles<R: Runtime>(
    rt: &R,
    w: &R::Buffer,
    s: Stack,
    xq: &R::Buffer,
    n_chunks: usize,
    tiles: &ExpertTiles,
    per_row: usize,
    out: &R::Buffer,
) -> Result<(), RuntimeError> {
    const K: &str = "mul_mat_q";
    let m = s.m;
    let (experts, slots) = (ints(rt, &tiles.experts)?, ints(rt, &tiles.slots)?);
    let grid = [dim(K, "blocks", m.rows.div_ceil(MMA_W))?, dim(K, "tiles", tiles.experts.len())?, 1];
    // no bias: `out` stands in for its pointer
    let args = [
        Arg::BufAt(w, s.at),
        Arg::I64(s.stride as i64),
        Arg::I64(m.row_bytes as i64),
        Arg::I32(m.ty as i32),
        Arg::I32(int(K, "inner size", n_chunks)?),
        Arg::Buf(xq),
        Arg::I32(0),
        Arg::Buf(&experts),
        Arg::Buf(&slots),
        Arg::I32(int(K, "slots per row", per_row)?),
        Arg::Buf(out),
        Arg::Buf(out),
        Arg::I32(int(K, "outputs", m.rows)?),
        Arg::I32(0),
    ];
    go(rt, K, grid, MULMAT_THREADS as u32, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompts_slots_are_grouped_by_expert_into_tiles_and_a_decoding_steps_are_not() {
        // one token choosing 4 experts: one slot each, no tiles
        assert!(ExpertTiles::worth_it(&[3, 0, 7, 1], 8).is_none());
        // 40 slots on expert 2 and 3 on expert 5: two tiles of expert 2 (32 + 8), one of expert 5
        let ids: Vec<u32> = (0..43).map(|p| if p % 10 == 9 && p < 30 { 5 } else { 2 }).collect();
        let tiles = ExpertTiles::worth_it(&ids, 6).expect("tiles");
        assert_eq!(tiles.experts, [2, 2, 5]);
        assert_eq!(tiles.slots.len(), 3 * MMA_X);
        let on_2: Vec<i32> = (0..43).filter(|&p| ids[p as usize] == 2).collect();
        assert_eq!(tiles.slots[..MMA_X], on_2[..MMA_X]);
        assert_eq!(tiles.slots[MMA_X..MMA_X + 8], on_2[MMA_X..]);
        assert!(tiles.slots[MMA_X + 8..2 * MMA_X].iter().all(|&p| p == -1));
        assert_eq!(tiles.slots[2 * MMA_X..2 * MMA_X + 3], [9, 19, 29]);
        assert!(tiles.slots[2 * MMA_X + 3..].iter().all(|&p| p == -1));
    }
}
