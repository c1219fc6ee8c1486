//! Launchers of the element-wise and row kernels: sums, scales, norms, rotary embeddings,
//! activations, and rows or columns moved between buffers.

use super::{blocks_of, check, dim, go, int, ints, MAX_BLOCK_THREADS, Q8_1_BYTES, THREADS};
use crate::runtime::{Arg, Runtime, RuntimeError};

/// `x[i] += y[i] · scale` over `n` f32 values.
pub fn add_scaled<R: Runtime>(rt: &R, x: &R::Buffer, y: &R::Buffer, scale: f32, n: usize) -> Result<(), RuntimeError> {
    check(rt, "add_scaled", "x", x, n * 4)?;
    check(rt, "add_scaled", "y", y, n * 4)?;
    go(
        rt,
        "add_scaled",
        [dim("add_scaled", "blocks", blocks_of(n))?, 1, 1],
        THREADS,
        &[Arg::Buf(x), Arg::Buf(y), Arg::F32(scale), Arg::I64(n as i64)],
    )
}

/// `x[i] *= s` (`scale`) or `x[i] = tanh(x[i] / s) · s` (`softcap`) over `n` values.
/// `x` row r += `b` for every row of `cols` values (`n` values in all).
pub fn add_bias<R: Runtime>(rt: &R, x: &R::Buffer, b: &R::Buffer, cols: usize, n: usize) -> Result<(), RuntimeError> {
    const K: &str = "add_bias";
    check(rt, K, "x", x, n * 4)?;
    check(rt, K, "b", b, cols * 4)?;
    go(
        rt,
        K,
        [dim(K, "blocks", blocks_of(n))?, 1, 1],
        THREADS,
        &[Arg::Buf(x), Arg::Buf(b), Arg::I32(int(K, "cols", cols)?), Arg::I64(n as i64)],
    )
}

pub fn scale_or_cap<R: Runtime>(rt: &R, kernel: &'static str, x: &R::Buffer, s: f32, n: usize) -> Result<(), RuntimeError> {
    assert!(kernel == "scale" || kernel == "softcap", "scale_or_cap: {kernel}");
    check(rt, kernel, "x", x, n * 4)?;
    go(rt, kernel, [dim(kernel, "blocks", blocks_of(n))?, 1, 1], THREADS, &[Arg::Buf(x), Arg::F32(s), Arg::I64(n as i64)])
}

/// Every block of `block` values of `x` (`n` values in all) rotated by the orthonormal
/// Walsh-Hadamard matrix of that order (a power of two, at most 1024).
pub fn hadamard<R: Runtime>(rt: &R, x: &R::Buffer, block: usize, n: usize) -> Result<(), RuntimeError> {
    const K: &str = "hadamard";
    if !block.is_power_of_two() || block > MAX_BLOCK_THREADS as usize || !n.is_multiple_of(block) {
        return Err(RuntimeError::Device(format!("{K}: blocks of {block} (a power of two up to {MAX_BLOCK_THREADS}) over {n} values")));
    }
    check(rt, K, "x", x, n * 4)?;
    let scale = 1.0 / (block as f32).sqrt();
    go(rt, K, [dim(K, "blocks", n / block)?, 1, 1], block as u32, &[Arg::Buf(x), Arg::I32(block as i32), Arg::F32(scale)])
}

/// `out` row `out_rows[i]` += `weights[i]` · `src` row `src_rows[i]`, for `src` of `src_len` rows
/// and `out` of `out_len` rows of `cols`; an `out` row may appear only once.
#[allow(clippy::too_many_arguments)]
pub fn add_weighted_rows<R: Runtime>(
    rt: &R,
    out: &R::Buffer,
    out_len: usize,
    src: &R::Buffer,
    src_len: usize,
    pairs: &[(usize, usize, f32)],
    cols: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "add_weighted_rows";
    let mut seen = std::collections::HashSet::new();
    if let Some(&(s, o, _)) = pairs.iter().find(|&&(s, o, _)| s >= src_len || o >= out_len || !seen.insert(o)) {
        return Err(RuntimeError::Device(format!("{K}: source row {s} of {src_len} into row {o} of {out_len} (each once)")));
    }
    check(rt, K, "out", out, out_len * cols * 4)?;
    check(rt, K, "src", src, src_len * cols * 4)?;
    let src_rows: Vec<i32> = pairs.iter().map(|p| p.0 as i32).collect();
    let out_rows: Vec<i32> = pairs.iter().map(|p| p.1 as i32).collect();
    let weights: Vec<u8> = pairs.iter().flat_map(|p| p.2.to_le_bytes()).collect();
    let (src_rows, out_rows, weights) = (ints(rt, &src_rows)?, ints(rt, &out_rows)?, rt.upload_read_only(&weights)?);
    let grid = [dim(K, "blocks", blocks_of(cols))?, dim(K, "pairs", pairs.len())?, 1];
    let args =
        [Arg::Buf(out), Arg::Buf(src), Arg::Buf(&src_rows), Arg::Buf(&out_rows), Arg::Buf(&weights), Arg::I32(int(K, "cols", cols)?)];
    go(rt, K, grid, THREADS, &args)
}

/// Column blocks of a row: the first at `start`, each `stride` after the one before.
#[derive(Clone, Copy, Debug)]
pub struct Blocks {
    pub start: usize,
    pub stride: usize,
}

/// For each of `rows` rows and each of `count` blocks of `width` values: `out`'s block = `x`'s
/// block (`out` and `x` with their row widths and blocks; the caller checked that they fit).
pub fn copy_columns<R: Runtime>(
    rt: &R,
    (out, out_cols, to): (&R::Buffer, usize, Blocks),
    (x, x_cols, from): (&R::Buffer, usize, Blocks),
    rows: usize,
    width: usize,
    count: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "copy_columns";
    check(rt, K, "x", x, rows * x_cols * 4)?;
    check(rt, K, "out", out, rows * out_cols * 4)?;
    let n = width * count;
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let i = |what: &str, v: usize| int(K, what, v).map(Arg::I32);
    let args = [
        Arg::Buf(out),
        Arg::Buf(x),
        i("out_cols", out_cols)?,
        i("x_cols", x_cols)?,
        i("to_start", to.start)?,
        i("to_stride", to.stride)?,
        i("from_start", from.start)?,
        i("from_stride", from.stride)?,
        i("width", width)?,
        i("n", n)?,
    ];
    go(rt, K, [dim(K, "blocks", blocks_of(n))?, dim(K, "rows", rows)?, 1], THREADS, &args)
}

/// `out` row r = `x` row `pick[r]`; `x` has `rows` rows of `cols`.
pub fn select_rows<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    rows: usize,
    pick: &[usize],
    out: &R::Buffer,
    cols: usize,
) -> Result<(), RuntimeError> {
    const K: &str = "select_rows";
    if let Some(&bad) = pick.iter().find(|&&r| r >= rows) {
        return Err(RuntimeError::Device(format!("{K}: row {bad} of {rows}")));
    }
    check(rt, K, "x", x, rows * cols * 4)?;
    check(rt, K, "out", out, pick.len() * cols * 4)?;
    let idx: Vec<i32> = pick.iter().map(|&r| r as i32).collect();
    let idx = ints(rt, &idx)?;
    let grid = [dim(K, "blocks", blocks_of(cols))?, dim(K, "rows", pick.len())?, 1];
    go(rt, K, grid, THREADS, &[Arg::Buf(x), Arg::Buf(&idx), Arg::Buf(out), Arg::I32(int(K, "cols", cols)?)])
}

/// RMS norm of every group of `n` values (`groups` of them) by `w`, into `y` (may be `x`), and
/// with `q` the Q8_1 blocks of `y` into it too ([`quantize_q8_1`](super::quantize_q8_1)'s bytes; `n` a multiple of 32).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    w: &R::Buffer,
    y: &R::Buffer,
    groups: usize,
    n: usize,
    eps: f32,
    w_groups: usize,
    q: Option<&R::Buffer>,
) -> Result<(), RuntimeError> {
    const K: &str = "rms_norm";
    if w_groups == 0 {
        return Err(RuntimeError::Device(format!("{K}: a scale of no group")));
    }
    check(rt, K, "x", x, groups * n * 4)?;
    check(rt, K, "y", y, groups * n * 4)?;
    check(rt, K, "w", w, w_groups * n * 4)?;
    let [q, with_q] = q8_1_output(rt, K, q, y, groups, n)?;
    let args = [
        Arg::Buf(x),
        Arg::Buf(w),
        Arg::Buf(y),
        Arg::I32(int(K, "n", n)?),
        Arg::F32(eps),
        Arg::I32(int(K, "w_groups", w_groups)?),
        q,
        with_q,
    ];
    go(rt, K, [dim(K, "groups", groups)?, 1, 1], THREADS, &args)
}

/// A norm's Q8_1 output `q` for `groups` groups of `n` values, checked, as the kernel's last
/// two arguments (an unused pointer, `y`, and 0 without one).
fn q8_1_output<'a, R: Runtime>(
    rt: &R,
    kernel: &str,
    q: Option<&'a R::Buffer>,
    y: &'a R::Buffer,
    groups: usize,
    n: usize,
) -> Result<[Arg<'a, R::Buffer>; 2], RuntimeError> {
    let Some(q) = q else { return Ok([Arg::Buf(y), Arg::I32(0)]) };
    if !n.is_multiple_of(32) {
        return Err(RuntimeError::Device(format!("{kernel}: Q8_1 blocks of groups of {n} values, not whole blocks of 32")));
    }
    check(rt, kernel, "q", q, groups * n / 32 * Q8_1_BYTES)?;
    Ok([Arg::Buf(q), Arg::I32(1)])
}

/// `x += r · scale` (`x += r` when the scale is 1), then the RMS norm of every row of `n` values
/// (`rows` of them) by `w` into `y`: the bits of [`add_scaled`] then [`rms_norm`] (and with `q`,
/// `y`'s Q8_1 blocks as [`rms_norm`] writes them).
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    r: &R::Buffer,
    scale: f32,
    w: &R::Buffer,
    y: &R::Buffer,
    rows: usize,
    n: usize,
    eps: f32,
    q: Option<&R::Buffer>,
) -> Result<(), RuntimeError> {
    const K: &str = "add_rms_norm";
    for (what, buf) in [("x", x), ("r", r), ("y", y)] {
        check(rt, K, what, buf, rows * n * 4)?;
    }
    check(rt, K, "w", w, n * 4)?;
    let [q, with_q] = q8_1_output(rt, K, q, y, rows, n)?;
    let args = [Arg::Buf(x), Arg::Buf(r), Arg::F32(scale), Arg::Buf(w), Arg::Buf(y), Arg::I32(int(K, "n", n)?), Arg::F32(eps), q, with_q];
    go(rt, K, [dim(K, "rows", rows)?, 1, 1], THREADS, &args)
}

/// Layer norm of every row of `n` values by `w` and `b`, into `y`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    w: &R::Buffer,
    b: &R::Buffer,
    y: &R::Buffer,
    rows: usize,
    n: usize,
    eps: f32,
) -> Result<(), RuntimeError> {
    const K: &str = "layer_norm";
    check(rt, K, "x", x, rows * n * 4)?;
    check(rt, K, "y", y, rows * n * 4)?;
    check(rt, K, "w", w, n * 4)?;
    check(rt, K, "b", b, n * 4)?;
    let args = [Arg::Buf(x), Arg::Buf(w), Arg::Buf(b), Arg::Buf(y), Arg::I32(int(K, "n", n)?), Arg::F32(eps)];
    go(rt, K, [dim(K, "rows", rows)?, 1, 1], THREADS, &args)
}

/// The rotation of one `rope` launch.
#[derive(Clone, Copy, Debug)]
pub struct RopeArgs<'a> {
    pub n_head: usize,
    pub head_dim: usize,
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub neox: bool,
    /// Divisors of the pairs' angles (at least `n_dims / 2`), uploaded with the positions.
    pub factors: Option<&'a [f32]>,
    /// YaRN's extrapolation share and correction dims, when it applies.
    pub yarn: Option<(f32, [f32; 2])>,
    /// Scale of every cosine and sine.
    pub attn_factor: f32,
}

/// Rotates every head of row r of `x` for position `positions[r]`.
pub fn rope<R: Runtime>(rt: &R, x: &R::Buffer, positions: &[u32], a: RopeArgs) -> Result<(), RuntimeError> {
    rope_rows(rt, x, None, positions, a)
}

/// [`rope`] of `x` (`a.n_head` heads a row) and of `x2` (`n_head2` heads a row, the same head
/// size and positions) in one launch: a layer's queries and keys.
pub fn rope_pair<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    x2: &R::Buffer,
    n_head2: usize,
    positions: &[u32],
    a: RopeArgs,
) -> Result<(), RuntimeError> {
    rope_rows(rt, x, Some((x2, n_head2)), positions, a)
}

fn rope_rows<R: Runtime>(
    rt: &R,
    x: &R::Buffer,
    second: Option<(&R::Buffer, usize)>,
    positions: &[u32],
    a: RopeArgs,
) -> Result<(), RuntimeError> {
    const K: &str = "rope";
    if a.n_dims > a.head_dim || !a.n_dims.is_multiple_of(2) || a.factors.is_some_and(|f| f.len() < a.n_dims / 2) {
        return Err(RuntimeError::Device(format!(
            "{K}: {} rotated values of heads of {}, {:?} factors",
            a.n_dims,
            a.head_dim,
            a.factors.map(<[f32]>::len)
        )));
    }
    check(rt, K, "x", x, positions.len() * a.n_head * a.head_dim * 4)?;
    if let Some((x2, n_head2)) = second {
        check(rt, K, "x2", x2, positions.len() * n_head2 * a.head_dim * 4)?;
    }
    let pos: Vec<i32> = positions.iter().map(|&p| int(K, "position", p as usize)).collect::<Result<_, _>>()?;
    let pos = ints(rt, &pos)?;
    // a launch reads no factor when it has none, but its argument must still be a buffer
    let factors = rt.upload_read_only(&a.factors.unwrap_or(&[0.0]).iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())?;
    let (ext_factor, [corr_low, corr_high]) = a.yarn.unwrap_or((0.0, [0.0, 0.0]));
    // one buffer: the grid's second row of blocks absent
    let (x2, n_head2, buffers) = second.map_or((x, 0, 1), |(x2, n)| (x2, n, 2));
    let args = [
        Arg::Buf(x),
        Arg::Buf(x2),
        Arg::Buf(&pos),
        Arg::Buf(&factors),
        Arg::I32(int(K, "heads", a.n_head)?),
        Arg::I32(int(K, "heads", n_head2)?),
        Arg::I32(int(K, "head size", a.head_dim)?),
        Arg::I32(int(K, "dims", a.n_dims)?),
        Arg::F32(a.freq_base),
        Arg::F32(a.freq_scale),
        Arg::F32(ext_factor),
        Arg::F32(corr_low),
        Arg::F32(corr_high),
        Arg::F32(a.attn_factor),
        Arg::I32(i32::from(a.neox)),
        Arg::I32(i32::from(a.factors.is_some())),
        Arg::I32(i32::from(a.yarn.is_some())),
    ];
    go(rt, K, [dim(K, "rows", positions.len())?, buffers, 1], THREADS, &args)
}

/// `gate = act(gate) · up` over `rows` rows of `n` (act: 0 SiLU, 1 GELU, 2 exact GELU).
pub fn glu<R: Runtime>(rt: &R, gate: &R::Buffer, up: &R::Buffer, rows: usize, n: usize, act: i32) -> Result<(), RuntimeError> {
    const K: &str = "glu";
    check(rt, K, "gate", gate, rows * n * 4)?;
    check(rt, K, "up", up, rows * n * 4)?;
    let grid = [dim(K, "blocks", blocks_of(n))?, dim(K, "rows", rows)?, 1];
    go(rt, K, grid, THREADS, &[Arg::Buf(gate), Arg::Buf(up), Arg::I32(int(K, "n", n)?), Arg::I32(act)])
}

/// `x = act(x)` over `n` values.
pub fn activate<R: Runtime>(rt: &R, x: &R::Buffer, n: usize, act: i32) -> Result<(), RuntimeError> {
    const K: &str = "activate";
    check(rt, K, "x", x, n * 4)?;
    go(rt, K, [dim(K, "blocks", blocks_of(n))?, 1, 1], THREADS, &[Arg::Buf(x), Arg::I64(n as i64), Arg::I32(act)])
}
