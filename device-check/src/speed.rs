//! The kernels' speed, one launch kind at a time: the quantized matrix-vector product (decode,
//! 1 and 8 rows) in GB/s of weights read, the tiled matrix product (prefill) in TOPS, and attention over a
//! KV pool in microseconds per layer. Times are wall-clock over many launches, closed by a
//! download (which waits for every launch before it).

use std::time::Instant;

use engine::quant::GgmlType;
use engine_tests::shaped::random_matrix;
use kernels::launch::{self, HeadArgs, KvArgs, MatmulInput, MatrixArgs, PoolArgs, PoolElement, QueryRow, KV_BLOCK_POSITIONS, Q8_1_BYTES};
use kernels::{Runtime, RuntimeError};

/// What the speed section measures.
pub struct SpeedScope {
    /// (rows, columns) of the matrix-vector products.
    pub matvec: &'static [(usize, usize)],
    /// Weight types of the matrix-vector products.
    pub types: &'static [GgmlType],
    /// (activation rows, weight rows, columns) of the tiled products.
    pub matmul: (usize, usize, usize),
    /// Context lengths of the attention launches, and (query heads, KV heads, head size).
    pub attention_ctx: &'static [usize],
    pub heads: (usize, usize, usize),
    /// Bytes of weights each matrix-vector measurement reads at least (more launches for
    /// smaller matrices), and the most launches of any measurement.
    pub bytes_per_measurement: usize,
    pub max_launches: usize,
}

/// Waits for every launch issued so far.
fn wait<R: Runtime>(rt: &R, buf: &R::Buffer) -> Result<(), RuntimeError> {
    let mut b = [0u8; 4];
    rt.download(buf, &mut b)
}

/// Seconds per call of `f`: one call to warm up (it loads the module), then `iters`.
fn per_call<R: Runtime>(
    rt: &R,
    out: &R::Buffer,
    iters: usize,
    mut f: impl FnMut() -> Result<(), RuntimeError>,
) -> Result<f64, RuntimeError> {
    f()?;
    wait(rt, out)?;
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    wait(rt, out)?;
    Ok(t0.elapsed().as_secs_f64() / iters as f64)
}

fn f32_buffer<R: Runtime>(rt: &R, n: usize, seed: u32) -> Result<R::Buffer, RuntimeError> {
    let values: Vec<u8> =
        (0..n).flat_map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5).to_le_bytes()).collect();
    rt.upload(&values)
}

/// A weight matrix of `ty` on the device, and its launch arguments.
fn weights<R: Runtime>(rt: &R, ty: GgmlType, rows: usize, cols: usize) -> Result<(R::Buffer, MatrixArgs), RuntimeError> {
    let bytes = random_matrix(ty, rows, cols, 7);
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    Ok((rt.upload(&bytes)?, MatrixArgs { ty: ty.id(), rows, cols, row_bytes }))
}

/// `x` (`batch` rows of `cols`) as the matrix product wants it for `ty`: Q8_1 blocks for a
/// quantized type (quantized here, once), f32 rows for a float type.
fn activations<R: Runtime>(rt: &R, ty: GgmlType, batch: usize, cols: usize) -> Result<(R::Buffer, bool), RuntimeError> {
    let x = f32_buffer(rt, batch * cols, 17)?;
    if !ty.is_quantized() {
        return Ok((x, false));
    }
    let q = rt.alloc_zeroed(batch * cols / 32 * Q8_1_BYTES)?;
    launch::quantize_q8_1(rt, &x, &q, batch * cols / 32)?;
    Ok((q, true))
}

fn input<B>(x: &B, quantized: bool) -> MatmulInput<'_, B> {
    if quantized {
        MatmulInput::Q8_1(x)
    } else {
        MatmulInput::F32(x)
    }
}

/// A measurement with three significant digits (GPU figures are in the thousands, the harness's
/// in the thousandths).
pub fn sig3(x: f64) -> String {
    let digits = if x <= 0.0 { 0 } else { (2 - x.log10().floor() as i32).max(0) as usize };
    format!("{x:.digits$}")
}

/// Prints the section; returns the problems met (a launch that failed).
pub fn kernel_speed<R: Runtime>(rt: &R, s: &SpeedScope) -> Vec<String> {
    let mut problems = Vec::new();
    // one row on every shape; 8 rows (8 sequences decoding, one block reading the weights for
    // all of them) on the first, with a quarter of the bytes
    let decode_rows = [(1usize, s.matvec, s.bytes_per_measurement), (launch::MATVEC_ROWS, &s.matvec[..1], s.bytes_per_measurement / 4)];
    for (batch, shapes, bytes) in decode_rows {
        println!("matrix-vector product (decode, {batch} row{}): GB/s of weights read", if batch > 1 { "s" } else { "" });
        for &(rows, cols) in shapes {
            let mut line = format!("  {rows:>6} x {cols:<5}");
            for &ty in s.types {
                if ty.row_bytes(cols).is_none() {
                    line += &format!("  {}: n/a ({cols} columns)", ty.name());
                    continue;
                }
                match matvec(rt, ty, batch, rows, cols, bytes, s.max_launches) {
                    Ok(gbs) => line += &format!("  {} {}", ty.name(), sig3(gbs)),
                    Err(e) => {
                        line += &format!("  {} FAILED", ty.name());
                        problems.push(format!("matvec {} {batch}x{rows}x{cols}: {e}", ty.name()));
                    }
                }
            }
            println!("{line}");
        }
    }
    let (batch, rows, cols) = s.matmul;
    println!("tiled matrix product ({batch} rows x {rows} x {cols}): TOPS (2 operations per multiply-add)");
    let mut line = String::from(" ");
    for &ty in s.types.iter().filter(|&&t| t.row_bytes(cols).is_some()) {
        match matmul(rt, ty, batch, rows, cols, s.max_launches.min(5)) {
            Ok(tops) => line += &format!("  {} {}", ty.name(), sig3(tops)),
            Err(e) => {
                line += &format!("  {} FAILED", ty.name());
                problems.push(format!("matmul {}: {e}", ty.name()));
            }
        }
    }
    println!("{line}");
    let (n_head, n_head_kv, dk) = s.heads;
    println!("attention, one layer ({n_head} heads, {n_head_kv} KV heads of {dk}, f16 KV cache): microseconds");
    for &ctx in s.attention_ctx {
        let mut line = format!("  context {ctx:>5}:");
        for seqs in [1usize, 8] {
            match attention(rt, ctx, seqs, s.heads, s.max_launches.min(20)) {
                Ok(t) => line += &format!("  {seqs} sequence{} {}", if seqs > 1 { "s" } else { "" }, sig3(t * 1e6)),
                Err(e) => {
                    line += &format!("  {seqs} sequences FAILED");
                    problems.push(format!("attention at {ctx} for {seqs}: {e}"));
                }
            }
        }
        println!("{line}");
    }
    problems
}

/// GB/s of weights the matrix-vector kernel reads for `batch` activation rows (a decoding step
/// of that many sequences: the weights once per call).
#[allow(clippy::too_many_arguments)]
fn matvec<R: Runtime>(
    rt: &R,
    ty: GgmlType,
    batch: usize,
    rows: usize,
    cols: usize,
    bytes_per_measurement: usize,
    max: usize,
) -> Result<f64, RuntimeError> {
    let (w, m) = weights(rt, ty, rows, cols)?;
    let (x, quantized) = activations(rt, ty, batch, cols)?;
    let out = rt.alloc_zeroed(batch * rows * 4)?;
    let bytes = rows * m.row_bytes;
    let iters = (bytes_per_measurement / bytes).clamp(1, max);
    let t = per_call(rt, &out, iters, || launch::mul_mat(rt, &w, 0, m, input(&x, quantized), batch, None, &out, false))?;
    Ok(bytes as f64 / t / 1e9)
}

/// TOPS of the tiled kernel at `batch` activation rows.
fn matmul<R: Runtime>(rt: &R, ty: GgmlType, batch: usize, rows: usize, cols: usize, iters: usize) -> Result<f64, RuntimeError> {
    let (w, m) = weights(rt, ty, rows, cols)?;
    let (x, quantized) = activations(rt, ty, batch, cols)?;
    let out = rt.alloc_zeroed(batch * rows * 4)?;
    let t = per_call(rt, &out, iters, || launch::mul_mat(rt, &w, 0, m, input(&x, quantized), batch, None, &out, true))?;
    Ok(2.0 * (batch * rows * cols) as f64 / t / 1e12)
}

/// Seconds of one attention launch: `seqs` query rows (one per sequence, each at position
/// `ctx - 1` of its own blocks), over an f16 pool of one layer.
fn attention<R: Runtime>(
    rt: &R,
    ctx: usize,
    seqs: usize,
    (n_head, n_head_kv, dk): (usize, usize, usize),
    iters: usize,
) -> Result<f64, RuntimeError> {
    let per_seq = ctx.div_ceil(KV_BLOCK_POSITIONS);
    let pool = PoolArgs { blocks: seqs * per_seq, n_layer: 1, dim: n_head_kv * dk, element: PoolElement::F16 };
    // small random halves: any finite keys and values do
    let halves: Vec<u8> = (0..pool.bytes() / 2).flat_map(|i| half::f16::from_f32(((i % 17) as f32 - 8.0) / 64.0).to_le_bytes()).collect();
    let (k, v) = (rt.upload(&halves)?, rt.upload(&halves)?);
    let tables: Vec<u32> = (0..(seqs * per_seq) as u32).collect();
    let rows: Vec<QueryRow> = (0..seqs).map(|s| QueryRow { kv: s * per_seq, positions: 0..ctx }).collect();
    let q = f32_buffer(rt, seqs * n_head * dk, 3)?;
    let out = rt.alloc_zeroed(seqs * n_head * dk * 4)?;
    let heads = HeadArgs { n_head, n_head_kv, dk, dv: dk, scale: 1.0 / (dk as f32).sqrt(), softcap: 0.0 };
    per_call(rt, &out, iters, || {
        let kv = KvArgs::Pool { k: &k, v: &v, k_pool: pool, v_pool: pool, layer: 0, tables: &tables };
        launch::attention(rt, &q, kv, &rows, heads, None, launch::AttentionOut { values: &out, q8_1: None })
    })
}
