//! The CUDA kernels written so far, run by the CPU execution harness (the kernels crate's `host`
//! feature: the same `.cu` sources compiled as host C++, a block's threads as host threads),
//! against the CPU backend on the same inputs, by normalised mean squared error with the op
//! harness's bounds. `cargo test -p engine --features sim`.

use std::ffi::c_void;
use std::io::Write as _;

use kernels::host::launch;
use kernels::host_args;

use super::cpu::{CpuBackend, HostTensor};
use super::harness::{nmse, Rng};
use super::{Activation, Backend, Rope, RopeKind, Yarn};
use crate::quant::GgmlType;

const THREADS: u32 = 256;

fn blocks(n: usize) -> u32 {
    n.div_ceil(THREADS as usize) as u32
}

fn run(name: &str, grid: [u32; 3], params: &mut [*mut c_void]) {
    // SAFETY: each caller passes pointers to values of the kernel's parameter types and buffers
    // of the sizes its launch geometry covers.
    unsafe { launch(name, grid, [THREADS, 1, 1], params) }.unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

/// Records one comparison: printed, and checked against `bound`.
struct Report(Vec<String>);

impl Report {
    fn check(&mut self, op: &str, case: &str, sim: &[f32], cpu: &[f32], bound: f64) {
        let e = nmse(sim, &widen(cpu));
        let same = sim.iter().zip(cpu).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
        let line = format!("sim vs cpu  {op:<12} {case:<34} nmse {e:.2e} (bound {bound:.0e}), {same}/{} values bit-equal\n", cpu.len());
        let _ = std::io::stderr().write_all(line.as_bytes());
        // a NaN error fails too
        if e.is_nan() || e > bound {
            self.0.push(line);
        }
    }
}

fn host(rows: usize, cols: usize, data: Vec<f32>) -> HostTensor {
    HostTensor { rows, cols, data }
}

#[test]
fn the_kernels_run_on_host_threads_agree_with_the_cpu_backend() {
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(0x5151);
    let mut report = Report(Vec::new());

    // rms_norm over whole rows and over heads (in place), layer_norm
    for (rows, cols, group) in [(3usize, 896usize, 896usize), (4, 256, 64), (2, 7, 7)] {
        let (x, w) = (rng.values(rows * cols, 4.0), rng.values(group, 1.5));
        let mut y = vec![0.0f32; rows * cols];
        let (n, eps, w_groups) = (group as i32, 1e-6f32, 1i32);
        let (xp, wp, yp) = (x.as_ptr(), w.as_ptr(), y.as_mut_ptr());
        // no Q8_1 blocks (an unused pointer)
        let (qp, with_q) = (yp.cast::<u8>(), 0i32);
        run("rms_norm", [(rows * cols / group) as u32, 1, 1], &mut host_args![xp, wp, yp, n, eps, w_groups, qp, with_q]);
        let mut want = host(rows, cols, x.clone());
        cpu.rms_norm_in_place(&mut want, &w, eps).unwrap();
        report.check("rms_norm", &format!("{rows}x{cols} in groups of {group}"), &y, &want.data, 1e-12);
    }
    for (rows, cols) in [(3usize, 384usize), (1, 5)] {
        let x: Vec<f32> = rng.values(rows * cols, 4.0).into_iter().map(|v| v + 3.0).collect();
        let (w, b) = (rng.values(cols, 1.5), rng.values(cols, 0.5));
        let mut y = vec![0.0f32; rows * cols];
        let (n, eps) = (cols as i32, 1e-12f32);
        let (xp, wp, bp, yp) = (x.as_ptr(), w.as_ptr(), b.as_ptr(), y.as_mut_ptr());
        run("layer_norm", [rows as u32, 1, 1], &mut host_args![xp, wp, bp, yp, n, eps]);
        let mut want = HostTensor::zeros(rows, cols);
        cpu.layer_norm(&host(rows, cols, x.clone()), &w, &b, eps, &mut want).unwrap();
        report.check("layer_norm", &format!("{rows}x{cols}"), &y, &want.data, 1e-12);
    }

    // rope, both layouts, whole and partial rotation, with angle factors, YaRN and a scale
    let factors: std::sync::Arc<[f32]> = (0..64).map(|i| 1.0 + (i % 7) as f32 * 0.5).collect();
    let yarn = Yarn { ext_factor: 1.0, corr_dims: Yarn::corr_dims(64, 4096, 1e6, 32.0, 1.0) };
    for kind in [RopeKind::Norm, RopeKind::Neox] {
        for (heads, head_dim, n_dims, base, scale, extra) in [
            (4usize, 64usize, 64usize, 10000.0f32, 1.0f32, 0),
            (2, 128, 64, 1e6, 0.25, 0),
            (2, 128, 64, 1e6, 1.0, 1),
            (2, 128, 64, 1e6, 0.25, 2),
        ] {
            let r = match extra {
                0 => Rope::plain(kind, head_dim, n_dims, base, scale),
                1 => Rope { factors: Some(factors.clone()), ..Rope::plain(kind, head_dim, n_dims, base, scale) },
                _ => Rope { yarn: Some(yarn), attn_factor: 0.9, ..Rope::plain(kind, head_dim, n_dims, base, scale) },
            };
            let positions = [0i32, 1, 37, 511, 3000];
            let cols = heads * head_dim;
            let x = rng.values(positions.len() * cols, 2.0);
            let mut got = x.clone();
            let (xp, pp, fp) = (got.as_mut_ptr(), positions.as_ptr(), factors.as_ptr());
            let (nh, hd, nd, neox) = (heads as i32, head_dim as i32, n_dims as i32, i32::from(kind == RopeKind::Neox));
            let (ext, [low, high]) = r.yarn.map_or((0.0f32, [0.0f32, 0.0]), |y| (y.ext_factor, y.corr_dims));
            let (attn, has_factors, use_yarn) = (r.attn_factor, i32::from(r.factors.is_some()), i32::from(r.yarn.is_some()));
            run(
                "rope",
                [positions.len() as u32, 1, 1],
                &mut host_args![xp, xp, pp, fp, nh, 0i32, hd, nd, base, scale, ext, low, high, attn, neox, has_factors, use_yarn],
            );
            let mut want = host(positions.len(), cols, x);
            cpu.rope(&mut want, &r, &positions.map(|p| p as u32)).unwrap();
            let what = ["plain", "factors", "YaRN"][extra];
            report.check("rope", &format!("{kind:?} {heads}x{head_dim} ({n_dims} rotated, {what})"), &got, &want.data, 1e-8);
        }
    }

    // gpt-oss's gated unit (gates and ups past its clamps)
    {
        let (rows, cols) = (3usize, 100usize);
        let (g, u) = (rng.values(rows * cols, 12.0), rng.values(rows * cols, 12.0));
        let mut got = g.clone();
        let (n, code) = (cols as i32, 3i32);
        let (gp, up) = (got.as_mut_ptr(), u.as_ptr());
        run("glu", [blocks(cols), rows as u32, 1], &mut host_args![gp, up, n, code]);
        let mut want = host(rows, cols, g);
        cpu.glu(Activation::SwigluOai, &mut want, &host(rows, cols, u)).unwrap();
        report.check("glu", &format!("SwigluOai {rows}x{cols}"), &got, &want.data, 1e-6);
    }

    // gated and plain activations (rows of 100: six full chunks of 16 and a tail)
    for (code, act) in [(0i32, Activation::Silu), (1, Activation::Gelu), (2, Activation::GeluErf)] {
        let (rows, cols) = (3usize, 100usize);
        let (g, u) = (rng.values(rows * cols, 6.0), rng.values(rows * cols, 2.0));
        let mut got = g.clone();
        let n = cols as i32;
        let (gp, up) = (got.as_mut_ptr(), u.as_ptr());
        run("glu", [blocks(cols), rows as u32, 1], &mut host_args![gp, up, n, code]);
        let mut want = host(rows, cols, g);
        cpu.glu(act, &mut want, &host(rows, cols, u)).unwrap();
        report.check("glu", &format!("{act:?} {rows}x{cols}"), &got, &want.data, 1e-6);

        let mut x = rng.values(4 * 300, 6.0);
        x[0] = 12.0;
        x[1] = -12.0;
        let mut got = x.clone();
        let total = x.len() as i64;
        let xp = got.as_mut_ptr();
        run("activate", [blocks(x.len()), 1, 1], &mut host_args![xp, total, code]);
        let mut want = host(4, 300, x);
        cpu.activate(act, &mut want).unwrap();
        report.check("activate", &format!("{act:?} 4x300"), &got, &want.data, 1e-6);
    }

    // element-wise ops and row selection
    for s in [1.0f32, 0.22] {
        let (x, y) = (rng.values(3 * 77, 5.0), rng.values(3 * 77, 5.0));
        let mut got = x.clone();
        let n = x.len() as i64;
        let (xp, yp) = (got.as_mut_ptr(), y.as_ptr());
        run("add_scaled", [blocks(x.len()), 1, 1], &mut host_args![xp, yp, s, n]);
        let mut want = host(3, 77, x);
        cpu.add_scaled(&mut want, &host(3, 77, y), s).unwrap();
        report.check("add_scaled", &format!("3x77, scale {s}"), &got, &want.data, 1e-14);
    }
    let (x, bias) = (rng.values(3 * 300, 5.0), rng.values(300, 2.0));
    let mut got = x.clone();
    let (n, c) = (x.len() as i64, 300i32);
    let (xp, bp) = (got.as_mut_ptr(), bias.as_ptr());
    run("add_bias", [blocks(x.len()), 1, 1], &mut host_args![xp, bp, c, n]);
    let mut want = host(3, 300, x);
    cpu.add_bias(&mut want, &bias).unwrap();
    report.check("add_bias", "3x300", &got, &want.data, 0.0);
    let (base, src) = (rng.values(5 * 130, 3.0), rng.values(4 * 130, 3.0));
    let pairs = [(3usize, 0usize, 0.25f32), (0, 4, 1.5), (2, 1, -0.75)];
    let mut got = base.clone();
    let (srows, orows): (Vec<i32>, Vec<i32>) = pairs.iter().map(|p| (p.0 as i32, p.1 as i32)).unzip();
    let weights: Vec<f32> = pairs.iter().map(|p| p.2).collect();
    let c = 130i32;
    let (op, sp, srp, orp, wp) = (got.as_mut_ptr(), src.as_ptr(), srows.as_ptr(), orows.as_ptr(), weights.as_ptr());
    run("add_weighted_rows", [blocks(130), pairs.len() as u32, 1], &mut host_args![op, sp, srp, orp, wp, c]);
    let mut want = host(5, 130, base);
    cpu.add_weighted_rows(&mut want, &host(4, 130, src), &pairs).unwrap();
    report.check("add_weighted_rows", "3 of 4 rows into 5x130", &got, &want.data, 0.0);
    let x = rng.values(2 * 640, 50.0);
    for (kernel, value) in [("scale", 29.9f32), ("softcap", 30.0)] {
        let mut got = x.clone();
        let n = x.len() as i64;
        let xp = got.as_mut_ptr();
        run(kernel, [blocks(x.len()), 1, 1], &mut host_args![xp, value, n]);
        let mut want = host(2, 640, x.clone());
        if kernel == "scale" {
            cpu.scale(&mut want, value).unwrap();
        } else {
            cpu.softcap(&mut want, value).unwrap();
        }
        report.check(kernel, &format!("2x640 by {value}"), &got, &want.data, 1e-12);
    }
    // the rotation of a quantized KV cache: one thread per value of a block
    for block in [64usize, 128, 256] {
        let x = rng.values(3 * 512, 6.0);
        let mut got = x.clone();
        let (xp, n, scale) = (got.as_mut_ptr(), block as i32, 1.0 / (block as f32).sqrt());
        // SAFETY: `got` holds the 3 x 512 values the grid's blocks of `block` threads cover.
        unsafe { launch("hadamard", [(x.len() / block) as u32, 1, 1], [block as u32, 1, 1], &mut host_args![xp, n, scale]) }.unwrap();
        let mut want = host(3, 512, x);
        cpu.hadamard(&mut want, block).unwrap();
        report.check("hadamard", &format!("3x512 in blocks of {block}"), &got, &want.data, 0.0);
    }
    let (rows, cols) = (9usize, 300usize);
    let x = rng.values(rows * cols, 5.0);
    let pick = [8i32, 0, 3, 3];
    let mut got = vec![0.0f32; pick.len() * cols];
    let c = cols as i32;
    let (xp, pp, op) = (x.as_ptr(), pick.as_ptr(), got.as_mut_ptr());
    run("select_rows", [blocks(cols), pick.len() as u32, 1], &mut host_args![xp, pp, op, c]);
    let want = cpu.select_rows(&host(rows, cols, x), &pick.map(|r| r as usize)).unwrap();
    report.check("select_rows", "rows [8, 0, 3, 3] of 9x300", &got, &want.data, 0.0);

    assert!(report.0.is_empty(), "{}", report.0.concat());
}

/// Test weights: values up to 3 through the reference quantizer, or random grid blocks.
fn quantized_rows(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    super::harness::quantized_rows(ty, rows, cols, 3.0, rng)
}

#[test]
fn get_rows_dequantizes_every_weight_type_as_the_cpu_backend() {
    let mut rng = Rng::new(0x6e75);
    let mut report = Report(Vec::new());
    let (rows, cols) = (5usize, 512usize);
    for ty in GgmlType::WEIGHT_TYPES.into_iter().chain(GgmlType::GRID_TYPES) {
        let cpu = crate::quant::ops(ty).unwrap();
        let table = quantized_rows(ty, rows, cols, &mut rng);
        let row_bytes = ty.row_bytes(cols).unwrap();
        // a negative id leaves its row to the caller (an embedding row given as it is)
        let ids = [4i32, 0, -1, 2, 4];
        let mut got = vec![7.0f32; ids.len() * cols];
        let (c, rb, code) = (cols as i32, row_bytes as i64, ty.id() as i32);
        let (tp, ip, op) = (table.as_ptr(), ids.as_ptr(), got.as_mut_ptr());
        run("get_rows", [blocks(cols), ids.len() as u32, 1], &mut host_args![tp, ip, op, c, rb, code]);
        let mut want = vec![7.0f32; ids.len() * cols];
        for (&id, out) in ids.iter().zip(want.chunks_exact_mut(cols)) {
            if id >= 0 {
                (cpu.dequantize)(&table[id as usize * row_bytes..(id as usize + 1) * row_bytes], out);
            }
        }
        report.check("get_rows", &format!("{ty} {rows}x{cols}, ids {ids:?}"), &got, &want, 0.0);
    }
    assert!(report.0.is_empty(), "{}", report.0.concat());
}

#[test]
fn activation_quantization_gives_the_cpu_backends_bytes() {
    let mut rng = Rng::new(0x7138);
    for (ty, with_sum) in [(GgmlType::Q8_0, 0i32), (GgmlType::Q8_1, 1)] {
        // whole and partial thread blocks (8 quant blocks per 256 threads), values on halves
        for n_blocks in [1usize, 8, 13] {
            let mut x = rng.values(n_blocks * 32, 4.0);
            // amax 15.875 makes id exactly 8: 0.3125 and -0.4375 land on halves (2.5, -3.5),
            // which round to even (2, -4)
            x[3] = 15.875;
            x[5] = 0.3125;
            x[6] = -0.4375;
            if n_blocks > 1 {
                x[32..64].fill(0.0); // a block of zeros: d = 0
            }
            let mut want = vec![0u8; ty.row_bytes(x.len()).unwrap()];
            (crate::quant::ops(ty).unwrap().quantize_activations)(&x, &mut want);
            let mut got = vec![0xAAu8; want.len()];
            let n = n_blocks as i64;
            let (xp, op) = (x.as_ptr(), got.as_mut_ptr());
            run("quantize_q8", [blocks(n_blocks * 32), 1, 1], &mut host_args![xp, op, n, with_sum]);
            assert_eq!(got, want, "{ty}, {n_blocks} blocks");
        }
    }
}

#[test]
fn kv_write_stores_rows_where_the_cpu_store_does() {
    use super::cpu::kv::CpuKvStore;
    use super::cpu::kv_rows::KvRows;
    use super::{KvStorage, KvType, BLOCK_POSITIONS};
    let mut rng = Rng::new(0x4b56);
    let (n_layer, n_blocks) = (3usize, 4usize);
    // a row of whole quant blocks, and one whose last block is padded
    for (ty, dim) in KvType::ALL.into_iter().flat_map(|ty| [(ty, 40usize), (ty, 64)]) {
        let code = KvType::ALL.iter().position(|&t| t == ty).unwrap() as i32;
        let mut cpu = CpuKvStore::new(ty.into(), n_layer, dim, dim);
        (0..n_blocks as u32).for_each(|id| cpu.alloc_block(id).unwrap());
        let row_bytes = ty.row_bytes(dim);
        let mut pool = vec![0u8; n_blocks * n_layer * BLOCK_POSITIONS * row_bytes];
        let threads = if ty.is_quantized() { dim.div_ceil(32) * 32 } else { dim };
        // rows into blocks out of order, two layers
        let slots = [(2i32, 0i32), (0, 31), (3, 5), (2, 1)];
        for layer in [1usize, 2] {
            let rows = rng.values(slots.len() * dim, 3.0);
            for (r, &(b, o)) in slots.iter().enumerate() {
                cpu.write(b as u32, layer, o as usize, &rows[r * dim..(r + 1) * dim], &rows[r * dim..(r + 1) * dim]);
            }
            let (bs, os): (Vec<i32>, Vec<i32>) = slots.iter().copied().unzip();
            let (d, nl, l) = (dim as i32, n_layer as i32, layer as i32);
            let (sp, bp, op, pp) = (rows.as_ptr(), bs.as_ptr(), os.as_ptr(), pool.as_mut_ptr());
            // one pool: the second part's arguments repeat the first's (the grid has no z = 1)
            run("kv_write", [blocks(threads), slots.len() as u32, 1], &mut host_args![sp, bp, op, pp, d, nl, l, code, sp, pp, d, code]);
        }
        for &(b, o) in &slots {
            for layer in [1usize, 2] {
                let table = [b as u32];
                let view = cpu.layer_view(&table, layer);
                let want = view.key(o as usize).bytes();
                let at = ((b as usize * n_layer + layer) * BLOCK_POSITIONS + o as usize) * row_bytes;
                assert_eq!(&pool[at..at + row_bytes], &want[..], "{ty:?} of {dim} block {b} position {o} layer {layer}");
            }
        }
    }
}

#[test]
fn every_kernel_of_the_sources_has_a_host_launcher() {
    let names: Vec<&str> = kernels::host::kernel_names().collect();
    for source in kernels::SOURCES {
        let defined = source.entry_points();
        assert!(!defined.is_empty(), "{}: no kernels", source.name);
        for name in defined {
            assert!(names.contains(&name), "{}: {name}", source.name);
        }
    }
    // SAFETY: an unknown name is refused before anything runs.
    assert!(unsafe { launch("no_such_kernel", [1, 1, 1], [1, 1, 1], &mut []) }.is_err());
    // SAFETY: a bad geometry is refused before the kernel runs.
    assert!(unsafe { launch("scale", [1, 1, 1], [2048, 1, 1], &mut []) }.is_err());
}

#[test]
fn the_kernel_backend_on_host_threads_passes_the_op_table() {
    let failed = super::harness::failures(&super::kernel::SimBackend::new(), "sim");
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn a_rows_product_is_bitwise_the_same_alone_or_in_a_batch() {
    use super::kernel::SimBackend;
    use crate::gguf::{GgufFile, GgufWriter};
    use std::sync::Arc;
    // A row alone runs the matrix-vector kernel (a few lanes per output, dp4a), batches of 2 to 8
    // its form of 8 rows per block, larger ones the tensor-core tiles (64 outputs by 32 rows per
    // block, mma.sync as the harness emulates it). Every output of every row must have the bits
    // of the row alone: 70 outputs leave a partial tile of outputs, batches of 33 and 64 partial
    // and whole tiles of rows, 512 columns two whole segments, 800 columns (the 32-value block
    // types) three and a one-chunk segment.
    let b = SimBackend::new();
    let mut rng = Rng::new(0xba7c);
    let rows = 70usize;
    let block_types = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::MXFP4];
    let super_block_types = [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::F16,
    ];
    let cases: Vec<(GgmlType, usize)> =
        block_types.iter().flat_map(|&ty| [(ty, 512), (ty, 800)]).chain(super_block_types.iter().map(|&ty| (ty, 512))).collect();
    let mut w = GgufWriter::new();
    for (i, &(ty, cols)) in cases.iter().enumerate() {
        w.add_tensor(format!("w{i}"), &[cols as u64, rows as u64], ty, quantized_rows(ty, rows, cols, &mut rng)).unwrap();
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    let most = 64usize;
    for (i, &(ty, cols)) in cases.iter().enumerate() {
        let m = b.upload_matrix(&file, file.tensor(&format!("w{i}")).unwrap(), rows, cols).unwrap();
        let x = rng.values(most * cols, 2.0);
        let product = |x: &[f32], batch: usize| {
            b.to_host(b.matmul_each(&[&m], &[None], &b.upload_tensor(batch, cols, x).unwrap()).unwrap().remove(0)).unwrap()
        };
        let alone: Vec<Vec<u32>> = (0..most).map(|r| bits(&product(&x[r * cols..(r + 1) * cols], 1))).collect();
        for batch in [2usize, 3, 5, 8, 9, 33, 64] {
            let all = product(&x[..batch * cols], batch);
            for (r, want) in alone.iter().enumerate().take(batch) {
                assert_eq!(&bits(&all[r * rows..(r + 1) * rows]), want, "{ty} {rows}x{cols}: row {r} alone and in a batch of {batch}");
            }
        }
    }
}

#[test]
fn attention_gives_the_same_bits_with_its_splits_in_one_block_or_folded_after_and_its_heads_alone_or_grouped() {
    use super::cpu::kv_rows::KvRows;
    use super::{KvStorage, KvType};
    use kernels::host::HostRuntime;
    use kernels::launch::{
        attention_by, AttentionOut, AttentionPath, HeadArgs, HeadGrouping, KvArgs, PoolArgs, PoolElement, QueryRow, ATTENTION_SPLIT,
        KV_BLOCK_POSITIONS,
    };
    use kernels::Runtime;
    let rt = HostRuntime::default();
    let mut rng = Rng::new(0xa77e);
    // rows over 1, 2 and 3 splits, from the first position, inside a window, starting and ending
    // on a split's edge, beside a short row
    let ends = [2 * ATTENTION_SPLIT + 37, ATTENTION_SPLIT, ATTENTION_SPLIT + 1, 40];
    let starts = [0, 0, ATTENTION_SPLIT - 5, 3];
    // three query heads per KV head: grouped, a block of three warps
    let (n_head, n_head_kv, dk, dv, n_layer) = (6usize, 2usize, 72usize, 40usize, 2usize);
    let per_seq = ends.iter().max().unwrap().div_ceil(KV_BLOCK_POSITIONS);
    // every element type; rows of 144 and 80 values end in a padded quant block
    for element in [PoolElement::F32, PoolElement::F16, PoolElement::Q8_0, PoolElement::Q4_0] {
        let blocks = ends.len() * per_seq;
        let k_pool = PoolArgs { blocks, n_layer, dim: n_head_kv * dk, element };
        let v_pool = PoolArgs { blocks, n_layer, dim: n_head_kv * dv, element };
        let pool = |p: PoolArgs, rng: &mut Rng| {
            let rows = p.blocks * p.n_layer * KV_BLOCK_POSITIONS;
            let mut store = super::cpu::kv::CpuKvStore::new(KvType::ALL[element as usize].into(), 1, p.dim, p.dim);
            let bytes: Vec<u8> = (0..rows)
                .flat_map(|_| {
                    // a row through the CPU store: the bytes it keeps for this type
                    let values = rng.values(p.dim, 2.0);
                    store.alloc_block(0).unwrap();
                    store.write(0, 0, 0, &values, &values);
                    store.layer_view(&[0], 0).key(0).bytes()
                })
                .collect();
            assert_eq!(bytes.len(), p.bytes());
            rt.upload(&bytes).unwrap()
        };
        let (k, v) = (pool(k_pool, &mut rng), pool(v_pool, &mut rng));
        // each sequence's blocks in reverse order
        let tables: Vec<u32> = (0..ends.len()).flat_map(|s| (0..per_seq).rev().map(move |b| (s * per_seq + b) as u32)).collect();
        let rows: Vec<QueryRow> = (0..ends.len()).map(|s| QueryRow { kv: s * per_seq, positions: starts[s]..ends[s] }).collect();
        let q = rng.values(rows.len() * n_head * dk, 1.0);
        let q = rt.upload(&q.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let heads = HeadArgs { n_head, n_head_kv, dk, dv, scale: 1.0 / (dk as f32).sqrt(), softcap: 0.0 };
        let run = |path, grouping| {
            let out = rt.alloc(rows.len() * n_head * dv * 4).unwrap();
            let kv = KvArgs::Pool { k: &k, v: &v, k_pool, v_pool, layer: 1, tables: &tables };
            attention_by(&rt, &q, kv, &rows, heads, None, AttentionOut { values: &out, q8_1: None }, path, grouping).unwrap();
            let mut bytes = vec![0u8; rows.len() * n_head * dv * 4];
            rt.download(&out, &mut bytes).unwrap();
            bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<u32>>()
        };
        let (whole, split) = (run(AttentionPath::Whole, HeadGrouping::Shared), run(AttentionPath::Split, HeadGrouping::Shared));
        assert!(whole.iter().all(|&b| f32::from_bits(b).is_finite()), "{element:?}: every output written and finite");
        assert_eq!(whole, split, "{element:?}: one block per row and the folded splits differ");
        for path in [AttentionPath::Whole, AttentionPath::Split] {
            assert_eq!(run(path, HeadGrouping::One), whole, "{element:?} {path:?}: a block per head and per KV head's group differ");
        }
        // and a row alone gives its bits in the batch
        let alone = rows[0].clone();
        let out = rt.alloc(n_head * dv * 4).unwrap();
        let kv = KvArgs::Pool { k: &k, v: &v, k_pool, v_pool, layer: 1, tables: &tables };
        let out_only = AttentionOut { values: &out, q8_1: None };
        attention_by(&rt, &q, kv, &[alone], heads, None, out_only, AttentionPath::Auto, HeadGrouping::Shared).unwrap();
        let mut bytes = vec![0u8; n_head * dv * 4];
        rt.download(&out, &mut bytes).unwrap();
        let one: Vec<u32> = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(one, whole[..n_head * dv], "{element:?}: row 0 alone");
    }
}

/// A decoding step's attention keeps its recorded shape while its row grows from three of its
/// splits to four: the split count is padded to a power of two, as the block table is, so the
/// split launch's grid and its partials stay as they were from 513 to 1024 positions
/// (`kernels/src/launch/attention.rs`). Each step after the first replays as one launch and one download,
/// with the bits of the same step issued launch by launch; unpadded, the step at position 768
/// would be recorded anew.
#[test]
fn attention_steps_replay_while_a_row_grows_past_a_split() {
    use kernels::host::{HostDevice, HostRuntime};
    use kernels::launch::{attention, AttentionOut, HeadArgs, KvArgs, PoolArgs, PoolElement, QueryRow, KV_BLOCK_POSITIONS};
    use kernels::{Issued, Runtime};
    let (n_head, n_head_kv, dk, dv) = (4usize, 2usize, 32usize, 32usize);
    let blocks = 800usize.div_ceil(KV_BLOCK_POSITIONS);
    let k_pool = PoolArgs { blocks, n_layer: 1, dim: n_head_kv * dk, element: PoolElement::F32 };
    let v_pool = PoolArgs { blocks, n_layer: 1, dim: n_head_kv * dv, element: PoolElement::F32 };
    let mut rng = Rng::new(0x5e9);
    let floats = |v: Vec<f32>| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (k_bytes, v_bytes) = (floats(rng.values(k_pool.bytes() / 4, 1.0)), floats(rng.values(v_pool.bytes() / 4, 1.0)));
    let tables: Vec<u32> = (0..blocks as u32).rev().collect();
    let heads = HeadArgs { n_head, n_head_kv, dk, dv, scale: 0.2, softcap: 0.0 };
    let runtimes = [true, false].map(|graphs| HostRuntime::with_graphs(HostDevice, graphs));
    let pools = runtimes.each_ref().map(|rt| (rt.upload(&k_bytes).unwrap(), rt.upload(&v_bytes).unwrap()));
    let mut replayed = 0;
    for end in 761..777usize {
        let q = floats(rng.values(n_head * dk, 1.0));
        let row = [QueryRow { kv: 0, positions: 0..end }];
        let outputs = [0, 1].map(|i| {
            let (rt, (k, v)) = (&runtimes[i], &pools[i]);
            let before = Issued::on_this_thread();
            rt.begin_step(1);
            let (q, out) = (rt.upload(&q).unwrap(), rt.alloc(n_head * dv * 4).unwrap());
            let kv = KvArgs::Pool { k, v, k_pool, v_pool, layer: 0, tables: &tables[..end.div_ceil(KV_BLOCK_POSITIONS)] };
            attention(rt, &q, kv, &row, heads, None, AttentionOut { values: &out, q8_1: None }).unwrap();
            let mut bytes = vec![0u8; n_head * dv * 4];
            rt.download(&out, &mut bytes).unwrap();
            rt.end_step().unwrap();
            let after = Issued::on_this_thread();
            if i == 0 && (after.launches - before.launches, after.transfers - before.transfers) == (1, 1) {
                replayed += 1;
            }
            bytes
        });
        assert_eq!(outputs[0], outputs[1], "{end} positions: the replayed step's bits");
    }
    assert_eq!(replayed, 15, "steps replayed as one launch and one download, of 16 over 761 to 776 positions");
}

#[test]
fn indexed_products_of_stacked_experts_give_each_slot_its_own_products_bits() {
    use super::kernel::{stack_of, SimBackend};
    use crate::gguf::{GgufFile, GgufWriter};
    use std::sync::Arc;
    let b = SimBackend::new();
    let mut rng = Rng::new(0x1d5);
    let (n, rows, cols) = (4usize, 16usize, 256usize);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    for ty in [GgmlType::Q4_K, GgmlType::IQ3_S, GgmlType::F32] {
        let mut w = GgufWriter::new();
        w.add_tensor("experts", &[cols as u64, rows as u64, n as u64], ty, quantized_rows(ty, n * rows, cols, &mut rng)).unwrap();
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
        let experts = b.upload_stack(&file, file.tensor("experts").unwrap(), n, rows, cols).unwrap();
        // one buffer: the kernel that reads the ids runs (every other expert is a stack too)
        assert!(stack_of(&experts).is_some() && stack_of(&experts[1..2]).is_some(), "{ty}");
        // three tokens choosing two experts each, then one row per slot (one block per slot);
        // a prompt of 40 tokens choosing two each, 56 of the 80 slots on expert 0 (the quantized
        // experts' tiles: two of expert 0, the second partial, one of each other expert)
        let decode = [3usize, 0, 1, 3, 2, 2];
        let prompt: Vec<usize> = (0..80).map(|p| if p % 10 < 7 { 0 } else { 1 + p % 3 }).collect();
        for (ids, x_rows) in [(&decode[..], 3usize), (&decode[..], 6), (&prompt[..], 40)] {
            let x = rng.values(x_rows * cols, 2.0);
            let y = b.to_host(b.matmul_indexed(&[&experts], ids, &b.upload_tensor(x_rows, cols, &x).unwrap()).unwrap().remove(0)).unwrap();
            for (p, &e) in ids.iter().enumerate() {
                let r = p / (ids.len() / x_rows);
                let alone = b.upload_tensor(1, cols, &x[r * cols..(r + 1) * cols]).unwrap();
                let want = b.to_host(b.matmul_each(&[&experts[e]], &[None], &alone).unwrap().remove(0)).unwrap();
                assert_eq!(bits(&y[p * rows..(p + 1) * rows]), bits(&want), "{ty}: slot {p} (expert {e}) over {x_rows} rows");
            }
        }
    }
}
