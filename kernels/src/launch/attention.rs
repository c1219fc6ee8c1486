//! Launchers of the KV pools' writes and of attention (`kv.cu`, `attention.cu`): paged keys
//! and values, flash-decoding's splits at fixed positions, query heads grouped by KV head.

use super::{blocks_of, check, dim, go, int, ints, Q8_1_BYTES, THREADS};
use crate::runtime::{Arg, Runtime, RuntimeError};

/// The largest head size `attention`'s usual kernels take.
pub const ATTENTION_MAX_HEAD: usize = 256;
/// The widest key and value the `_wide` kernels take (multi-head latent attention's absorbed
/// form: the 512-value latent and a 64-value rotary key).
pub const ATTENTION_WIDE_KEY: usize = 576;
pub const ATTENTION_WIDE_VALUE: usize = 512;
/// Positions per split of a row's keys in `attention` (`attention.cu`): a row's positions are
/// cut at its multiples.
pub const ATTENTION_SPLIT: usize = 256;
/// Launches of fewer (row, head) blocks than this run each split as a block of its own
/// (`attention_split` + `attention_fold`), when the partials take at most
/// [`SPLIT_PARTIALS_MAX_BYTES`]: the same bits as one block per row, more blocks in flight.
const SPLIT_BELOW_BLOCKS: usize = 1024;
const SPLIT_PARTIALS_MAX_BYTES: usize = 64 << 20;
/// Positions per KV block (`kv.cu`, `attention.cu`).
pub const KV_BLOCK_POSITIONS: usize = 32;

/// The fewest entries a step's block tables are uploaded in (see [`attention`]).
const TABLE_ENTRIES_MIN: usize = 16;

/// How a KV pool stores its values, as `kvcache.cuh` numbers the types: floats, or rows of
/// ggml's blocks of 32 quants with an f16 scale (the last block of a row padded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolElement {
    F32 = 0,
    F16 = 1,
    Q8_0 = 2,
    Q4_0 = 3,
}

impl PoolElement {
    /// Bytes of one row of `dim` values.
    pub fn row_bytes(self, dim: usize) -> usize {
        match self {
            PoolElement::F32 => 4 * dim,
            PoolElement::F16 => 2 * dim,
            PoolElement::Q8_0 => dim.div_ceil(32) * 34,
            PoolElement::Q4_0 => dim.div_ceil(32) * 18,
        }
    }

    fn code(self) -> i32 {
        self as i32
    }
}

/// A KV pool: `blocks` blocks of `n_layer` layers of 32 positions of `dim` values.
#[derive(Clone, Copy, Debug)]
pub struct PoolArgs {
    pub blocks: usize,
    pub n_layer: usize,
    pub dim: usize,
    pub element: PoolElement,
}

impl PoolArgs {
    pub fn bytes(&self) -> usize {
        self.blocks * self.n_layer * KV_BLOCK_POSITIONS * self.element.row_bytes(self.dim)
    }
}

/// One pool's part of a [`kv_write`]: rows of `pool.dim` values from `src` into `pool_buf`.
#[derive(Clone, Copy)]
pub struct KvRowsInto<'a, B> {
    pub src: &'a B,
    pub pool_buf: &'a B,
    pub pool: PoolArgs,
}

/// Row r of each part's source to position `slots[r].1` of block `slots[r].0`, layer `layer`, of
/// its pool: one part (keys whose values they hold), or two (a layer's keys and values) in one
/// launch, over one upload of the slots.
pub fn kv_write<R: Runtime>(rt: &R, parts: &[KvRowsInto<'_, R::Buffer>], slots: &[(u32, usize)], layer: usize) -> Result<(), RuntimeError> {
    const K: &str = "kv_write";
    let (first, second) = match parts {
        [one] => (one, None),
        [one, two] => (one, Some(two)),
        _ => return Err(RuntimeError::Device(format!("{K}: {} pools, not one or two", parts.len()))),
    };
    for part in parts {
        let pool = part.pool;
        if let Some(bad) = slots.iter().find(|&&(b, o)| b as usize >= pool.blocks || o >= KV_BLOCK_POSITIONS) {
            return Err(RuntimeError::Device(format!("{K}: slot {bad:?} outside {} blocks", pool.blocks)));
        }
        if layer >= pool.n_layer {
            return Err(RuntimeError::Device(format!("{K}: layer {layer} of {}", pool.n_layer)));
        }
        check(rt, K, "src", part.src, slots.len() * pool.dim * 4)?;
        check(rt, K, "pool", part.pool_buf, pool.bytes())?;
    }
    if second.is_some_and(|s| s.pool.n_layer != first.pool.n_layer) {
        return Err(RuntimeError::Device(format!("{K}: pools of different layer counts")));
    }
    let (bs, os): (Vec<i32>, Vec<i32>) = slots.iter().map(|&(b, o)| (b as i32, o as i32)).unzip();
    let (bs, os) = (ints(rt, &bs)?, ints(rt, &os)?);
    // without a second part, the first's arguments again (the grid has no second row)
    let other = second.unwrap_or(first);
    let args = [
        Arg::Buf(first.src),
        Arg::Buf(&bs),
        Arg::Buf(&os),
        Arg::Buf(first.pool_buf),
        Arg::I32(int(K, "dim", first.pool.dim)?),
        Arg::I32(int(K, "layers", first.pool.n_layer)?),
        Arg::I32(layer as i32),
        Arg::I32(first.pool.element.code()),
        Arg::Buf(other.src),
        Arg::Buf(other.pool_buf),
        Arg::I32(int(K, "dim", other.pool.dim)?),
        Arg::I32(other.pool.element.code()),
    ];
    // a quantized row is written a whole quant block per warp, the padding included
    let threads =
        |pool: PoolArgs| if matches!(pool.element, PoolElement::F32 | PoolElement::F16) { pool.dim } else { pool.dim.div_ceil(32) * 32 };
    let widest = threads(first.pool).max(threads(other.pool));
    go(rt, K, [dim(K, "blocks", blocks_of(widest))?, dim(K, "rows", slots.len())?, parts.len() as u32], THREADS, &args)
}

/// The heads of an attention launch.
#[derive(Clone, Copy, Debug)]
pub struct HeadArgs {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub dk: usize,
    pub dv: usize,
    pub scale: f32,
    /// The scores' soft cap (0: none).
    pub softcap: f32,
}

/// Where `attention` reads keys and values.
pub enum KvArgs<'a, B> {
    /// Layer `layer` of two pools (keys, values); `tables` the block tables one after another.
    Pool { k: &'a B, v: &'a B, k_pool: PoolArgs, v_pool: PoolArgs, layer: usize, tables: &'a [u32] },
    /// f32 rows of the batch, `rows` of them.
    Rows { k: &'a B, v: &'a B, rows: usize },
}

/// One query row: its keys start at `kv` (a table's offset in `tables`, or a batch row) and it
/// attends to `positions`.
#[derive(Clone, Debug)]
pub struct QueryRow {
    pub kv: usize,
    pub positions: std::ops::Range<usize>,
}

/// How `attention` runs a row's splits: chosen by the launch's size (`Auto`), or one of the two
/// ways, which give the same bits (for the tests that show it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionPath {
    Auto,
    /// One block per (row, head) walks every split (`attention`).
    Whole,
    /// One block per (row, head, split), then the fold (`attention_split`, `attention_fold`).
    Split,
}

/// How many query heads `attention`'s blocks take: those sharing a KV head together, up to
/// [`ATTENTION_GROUP_MAX`] (the kernel's warps; the same bits either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadGrouping {
    /// The largest divisor of the heads per KV head up to [`ATTENTION_GROUP_MAX`].
    Shared,
    /// One head per block.
    One,
}

/// The most query heads (warps) in one block of `attention` (`ATTN_GROUP_MAX`).
pub const ATTENTION_GROUP_MAX: usize = 8;

impl HeadGrouping {
    fn heads_per_block(self, n_head: usize, n_head_kv: usize) -> usize {
        let group = n_head / n_head_kv;
        match self {
            HeadGrouping::One => 1,
            HeadGrouping::Shared => (1..=ATTENTION_GROUP_MAX.min(group)).rev().find(|d| group.is_multiple_of(*d)).unwrap_or(1),
        }
    }
}

/// Where attention writes its output rows (`n_head` heads of `dv` values each): f32 values,
/// and with `q8_1` their Q8_1 blocks too (for the quantized output projection; `dv` a multiple
/// of 32), the bytes `quantize_q8_1` would write from the values.
#[derive(Clone, Copy)]
pub struct AttentionOut<'a, B> {
    pub values: &'a B,
    pub q8_1: Option<&'a B>,
}

/// Attention of every query row of `q` over its positions, into `out`.
#[allow(clippy::too_many_arguments)]
pub fn attention<R: Runtime>(
    rt: &R,
    q: &R::Buffer,
    kv: KvArgs<'_, R::Buffer>,
    rows: &[QueryRow],
    h: HeadArgs,
    sinks: Option<&R::Buffer>,
    out: AttentionOut<'_, R::Buffer>,
) -> Result<(), RuntimeError> {
    attention_by(rt, q, kv, rows, h, sinks, out, AttentionPath::Auto, HeadGrouping::Shared)
}

/// [`attention`], its splits run the way `path` says and its heads grouped as `grouping` says.
/// `sinks`: one f32 logit per query head that joins each head's softmax without a value, folded
/// in once after a row's last split.
#[allow(clippy::too_many_arguments)]
pub fn attention_by<R: Runtime>(
    rt: &R,
    q: &R::Buffer,
    kv: KvArgs<'_, R::Buffer>,
    rows: &[QueryRow],
    h: HeadArgs,
    sinks: Option<&R::Buffer>,
    out: AttentionOut<'_, R::Buffer>,
    path: AttentionPath,
    grouping: HeadGrouping,
) -> Result<(), RuntimeError> {
    const K: &str = "attention";
    if h.dk > ATTENTION_WIDE_KEY || h.dv > ATTENTION_WIDE_VALUE || h.n_head_kv == 0 || !h.n_head.is_multiple_of(h.n_head_kv) {
        return Err(RuntimeError::Device(format!(
            "{K}: heads {}/{} of {}/{} (keys of at most {ATTENTION_WIDE_KEY}, values of at most {ATTENTION_WIDE_VALUE})",
            h.n_head, h.n_head_kv, h.dk, h.dv
        )));
    }
    // the kernels of the heads' width: the wide ones hold twice the accumulators per lane
    let [whole, split_k, fold_k] = if h.dk > ATTENTION_MAX_HEAD || h.dv > ATTENTION_MAX_HEAD {
        ["attention_wide", "attention_split_wide", "attention_fold_wide"]
    } else {
        ["attention", "attention_split", "attention_fold"]
    };
    check(rt, K, "q", q, rows.len() * h.n_head * h.dk * 4)?;
    check(rt, K, "out", out.values, rows.len() * h.n_head * h.dv * 4)?;
    // the Q8_1 blocks' arguments, last: an unused pointer and 0 without them
    let out_q = match out.q8_1 {
        Some(q8) => {
            if !h.dv.is_multiple_of(32) {
                return Err(RuntimeError::Device(format!("{K}: Q8_1 blocks of heads of {} values, not whole blocks of 32", h.dv)));
            }
            check(rt, K, "out q8_1", q8, rows.len() * h.n_head * h.dv / 32 * Q8_1_BYTES)?;
            [Arg::Buf(q8), Arg::I32(1)]
        }
        None => [Arg::Buf(out.values), Arg::I32(0)],
    };
    if let Some(s) = sinks {
        check(rt, K, "sinks", s, h.n_head * 4)?;
    }
    // a null sinks pointer: none
    let sinks_arg = match sinks {
        Some(s) => Arg::Buf(s),
        None => Arg::I64(0),
    };
    for r in rows {
        if r.positions.is_empty() {
            return Err(RuntimeError::Device(format!("{K}: a query row attends to no position")));
        }
    }
    let info: Vec<i32> = rows.iter().flat_map(|r| [r.kv as i32, r.positions.start as i32, r.positions.end as i32]).collect();
    let info = ints(rt, &info)?;
    // the pools (or the batch's rows) and their arguments after `out` or `parts`
    let (k, v, tables, tail, v_row) = match kv {
        KvArgs::Pool { k, v, k_pool, v_pool, layer, tables } => {
            // value rows of their own, or the key rows (each value head a key head's start)
            let own_rows = v_pool.dim == h.n_head_kv * h.dv;
            let in_keys = v_pool.dim == k_pool.dim && h.dv <= h.dk;
            if k_pool.dim != h.n_head_kv * h.dk || !(own_rows || in_keys) || layer >= k_pool.n_layer {
                return Err(RuntimeError::Device(format!("{K}: the pools do not hold these heads")));
            }
            check(rt, K, "k pool", k, k_pool.bytes())?;
            check(rt, K, "v pool", v, v_pool.bytes())?;
            if let Some(bad) = tables.iter().find(|&&b| b as usize >= k_pool.blocks.min(v_pool.blocks)) {
                return Err(RuntimeError::Device(format!("{K}: block {bad} outside the pool")));
            }
            for r in rows {
                if r.kv + r.positions.end.div_ceil(KV_BLOCK_POSITIONS) > tables.len() {
                    return Err(RuntimeError::Device(format!("{K}: positions {:?} beyond the block table", r.positions)));
                }
            }
            // padded to a power of two (entries past the rows' own are never read), so that a
            // step's upload keeps its size while the sequences' tables grow, block by block,
            // and a recorded step replays (`steps.rs`)
            let mut t: Vec<i32> = tables.iter().map(|&b| b as i32).collect();
            t.resize(t.len().next_power_of_two().max(TABLE_ENTRIES_MIN), 0);
            let v_row = int(K, "value row", v_pool.dim)?;
            (k, v, Some(ints(rt, &t)?), [k_pool.element.code(), v_pool.element.code(), k_pool.n_layer as i32, layer as i32], v_row)
        }
        KvArgs::Rows { k, v, rows: n } => {
            if let Some(r) = rows.iter().find(|r| r.kv + r.positions.end > n) {
                return Err(RuntimeError::Device(format!("{K}: positions {:?} from row {} beyond {n} rows", r.positions, r.kv)));
            }
            check(rt, K, "k", k, n * h.n_head_kv * h.dk * 4)?;
            check(rt, K, "v", v, n * h.n_head_kv * h.dv * 4)?;
            (k, v, None, [PoolElement::F32.code(), PoolElement::F32.code(), 1, 0], (h.n_head_kv * h.dv) as i32)
        }
    };
    let heads = [
        Arg::I32(h.n_head as i32),
        Arg::I32(h.n_head_kv as i32),
        Arg::I32(h.dk as i32),
        Arg::I32(h.dv as i32),
        Arg::I32(v_row),
        Arg::F32(h.scale),
        Arg::F32(h.softcap),
        Arg::I32(tail[0]),
        Arg::I32(tail[1]),
        Arg::I32(tail[2]),
        Arg::I32(tail[3]),
    ];
    // a null table pointer selects the batch rows
    let table_arg = match &tables {
        Some(t) => Arg::Buf(&**t),
        None => Arg::I64(0),
    };
    let grid = [dim(K, "heads", h.n_head)?, dim(K, "rows", rows.len())?, 1];
    let heads_per_block = grouping.heads_per_block(h.n_head, h.n_head_kv);
    let (grouped, threads) = ([grid[0] / heads_per_block as u32, grid[1], 1], 32 * heads_per_block as u32);
    // padded to a power of two, so that the split launch's grid and the partials' size stay
    // the same while the rows grow from split to split, and a recorded step replays
    // (`steps.rs`); the blocks past a row's own splits leave at once, and the fold reads only
    // the row's own
    let max_splits = rows
        .iter()
        .map(|r| (r.positions.end - 1) / ATTENTION_SPLIT + 1 - r.positions.start / ATTENTION_SPLIT)
        .max()
        .unwrap_or(1)
        .next_power_of_two();
    let parts_bytes = rows.len() * h.n_head * max_splits * (2 + h.dv) * 4;
    let split = match path {
        AttentionPath::Auto => max_splits > 1 && rows.len() * h.n_head < SPLIT_BELOW_BLOCKS && parts_bytes <= SPLIT_PARTIALS_MAX_BYTES,
        AttentionPath::Whole => false,
        AttentionPath::Split => true,
    };
    if !split {
        let mut args = vec![Arg::Buf(q), Arg::Buf(k), Arg::Buf(v), Arg::Buf(&*info), table_arg, sinks_arg, Arg::Buf(out.values)];
        args.extend(heads);
        args.extend(out_q);
        return go(rt, whole, grouped, threads, &args);
    }
    // every partial the fold reads is written by the split launch
    let parts = rt.alloc(parts_bytes)?;
    let splits = int("attention_split", "splits", max_splits)?;
    let mut args = vec![Arg::Buf(q), Arg::Buf(k), Arg::Buf(v), Arg::Buf(&*info), table_arg, Arg::Buf(&parts), Arg::I32(splits)];
    args.extend(heads);
    go(rt, split_k, [grouped[0], grouped[1], dim("attention_split", "splits", max_splits)?], threads, &args)?;
    let [q_out, with_q] = out_q;
    let args = [
        Arg::Buf(&*info),
        Arg::Buf(&parts),
        Arg::I32(splits),
        sinks_arg,
        Arg::Buf(out.values),
        Arg::I32(h.n_head as i32),
        Arg::I32(h.dv as i32),
        q_out,
        with_q,
    ];
    go(rt, fold_k, grid, 32, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_blocks_take_the_heads_of_a_kv_head_up_to_eight() {
        let per_block = |n_head, n_head_kv| HeadGrouping::Shared.heads_per_block(n_head, n_head_kv);
        // Llama-3-8B 32/8, Qwen2.5-0.5B 14/2, multi-head 16/16, 16 on one KV head (latent
        // attention), 12 on one
        assert_eq!([per_block(32, 8), per_block(14, 2), per_block(16, 16), per_block(16, 1), per_block(12, 1)], [4, 7, 1, 8, 6]);
        assert_eq!(HeadGrouping::One.heads_per_block(32, 8), 1);
    }
}
