//! Kernels that do in one launch what several ops did, run by the CPU execution harness (`cargo
//! test -p engine --features sim`): each against the ops it replaces, bit for bit, with its
//! launch count.

use super::cpu::{CpuBackend, HostTensor};
use super::harness::Rng;
use super::kernel::SimBackend;
use super::{Activation, Backend, Rope, RopeKind, Yarn};
use crate::gguf::{GgufFile, GgufWriter};
use crate::quant::GgmlType;
use std::sync::Arc;

fn host(rows: usize, cols: usize, data: Vec<f32>) -> HostTensor {
    HostTensor { rows, cols, data }
}

/// Test weights: values up to 3 through the reference quantizer, or random grid blocks.
fn quantized_rows(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    super::harness::quantized_rows(ty, rows, cols, 3.0, rng)
}

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// A residual added as the next norm reads it, in one launch, gives the bits of the addition
/// then the norm (both the sum left in `x` and the normed rows), its sum the CPU backend's too:
/// rows wider than a block's threads and not a multiple of them, a scale of 1 and another.
#[test]
fn a_residual_added_in_the_norms_pass_gives_the_bits_of_the_sum_then_the_norm() {
    let (sim, cpu) = (SimBackend::new(), CpuBackend::new());
    let mut rng = Rng::new(0xadd5);
    let (rows, cols) = (3usize, 700usize);
    let (x, y, w) = (rng.values(rows * cols, 4.0), rng.values(rows * cols, 2.0), rng.values(cols, 1.0));
    for scale in [1.0f32, 0.37] {
        let (mut xs, ys, ws) =
            (sim.upload_tensor(rows, cols, &x).unwrap(), sim.upload_tensor(rows, cols, &y).unwrap(), sim.upload_vector(&w).unwrap());
        let mut fused = sim.zeros(rows, cols).unwrap();
        let before = kernels::Issued::on_this_thread().launches;
        sim.add_rms_norm(&mut xs, &ys, scale, &ws, 1e-5, &mut fused).unwrap();
        assert_eq!(kernels::Issued::on_this_thread().launches - before, 1, "one launch");
        let (mut xt, yt) = (sim.upload_tensor(rows, cols, &x).unwrap(), sim.upload_tensor(rows, cols, &y).unwrap());
        let mut apart = sim.zeros(rows, cols).unwrap();
        sim.add_scaled(&mut xt, &yt, scale).unwrap();
        sim.rms_norm(&xt, &ws, 1e-5, &mut apart).unwrap();
        let (mut xc, yc, wc) = (host(rows, cols, x.clone()), host(rows, cols, y.clone()), cpu.upload_vector(&w).unwrap());
        cpu.add_rms_norm(&mut xc, &yc, scale, &wc, 1e-5, &mut host(rows, cols, vec![0.0; rows * cols])).unwrap();
        let fused = [sim.to_host(xs).unwrap(), sim.to_host(fused).unwrap()].map(bits);
        assert_eq!(fused, [sim.to_host(xt).unwrap(), sim.to_host(apart).unwrap()].map(bits), "scale {scale}: fused against apart");
        assert_eq!(fused[0], bits(xc.data), "scale {scale}: the sum against the CPU backend's");
    }
}

/// A layer's queries and keys rotated in one launch get the bits of each rotated alone: heads of
/// one size, more query heads than key heads, YaRN.
#[test]
fn queries_and_keys_rotated_in_one_launch_give_the_bits_of_each_alone() {
    let b = SimBackend::new();
    let mut rng = Rng::new(0x20be);
    let yarn = Yarn { ext_factor: 1.0, corr_dims: [3.0, 20.0] };
    for (kind, r) in [RopeKind::Norm, RopeKind::Neox].into_iter().flat_map(|kind| {
        [Rope::plain(kind, 64, 64, 10000.0, 1.0), Rope { yarn: Some(yarn), attn_factor: 0.9, ..Rope::plain(kind, 64, 32, 1e6, 0.25) }]
            .map(|r| (kind, r))
    }) {
        let positions = [0u32, 5, 700];
        let (q, k) = (rng.values(3 * 6 * 64, 2.0), rng.values(3 * 2 * 64, 2.0));
        let (mut qp, mut kp) = (b.upload_tensor(3, 6 * 64, &q).unwrap(), b.upload_tensor(3, 2 * 64, &k).unwrap());
        let before = kernels::Issued::on_this_thread().launches;
        b.rope_pair(&mut qp, &mut kp, &r, &positions).unwrap();
        assert_eq!(kernels::Issued::on_this_thread().launches - before, 1, "one launch");
        let (mut qa, mut ka) = (b.upload_tensor(3, 6 * 64, &q).unwrap(), b.upload_tensor(3, 2 * 64, &k).unwrap());
        b.rope(&mut qa, &r, &positions).unwrap();
        b.rope(&mut ka, &r, &positions).unwrap();
        assert_eq!(bits(b.to_host(qp).unwrap()), bits(b.to_host(qa).unwrap()), "{kind:?} {} rotated: queries", r.n_dims);
        assert_eq!(bits(b.to_host(kp).unwrap()), bits(b.to_host(ka).unwrap()), "{kind:?} {} rotated: keys", r.n_dims);
    }
}

/// A decoding step's rows (one sequence's, or a few sequences') by several matrices of one
/// quantized type and row size (the query, key and value) run as one launch, each output with
/// the bits of its matrix's product alone; a matrix of another type starts another launch.
#[test]
fn a_rows_products_by_matrices_of_one_type_run_in_one_launch_with_their_own_bits() {
    let b = SimBackend::new();
    let mut rng = Rng::new(0x9b7);
    let cols = 512usize;
    // (name, type, rows): the query's rows, the key's and value's fewer (grouped-query heads)
    let mats = [
        ("q", GgmlType::Q4_K, 96usize),
        ("k", GgmlType::Q4_K, 32),
        ("v", GgmlType::Q4_K, 40),
        ("v6", GgmlType::Q6_K, 40),
        ("o8", GgmlType::Q8_0, 70),
    ];
    let mut w = GgufWriter::new();
    for &(name, ty, rows) in &mats {
        w.add_tensor(name.to_string(), &[cols as u64, rows as u64], ty, quantized_rows(ty, rows, cols, &mut rng)).unwrap();
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    let m: Vec<_> = mats.iter().map(|&(name, _, rows)| b.upload_matrix(&file, file.tensor(name).unwrap(), rows, cols).unwrap()).collect();
    let biases: Vec<_> = mats.iter().map(|&(_, _, rows)| b.upload_vector(&rng.values(rows, 1.0)).unwrap()).collect();
    for rows in [1usize, 3] {
        let x = b.upload_tensor(rows, cols, &rng.values(rows * cols, 3.0)).unwrap();
        let alone: Vec<Vec<u32>> = (0..mats.len())
            .map(|i| bits(b.to_host(b.matmul_each(&[&m[i]], &[Some(&biases[i])], &x).unwrap().remove(0)).unwrap()))
            .collect();
        let alone_unbiased: Vec<Vec<u32>> =
            (0..mats.len()).map(|i| bits(b.to_host(b.matmul_each(&[&m[i]], &[None], &x).unwrap().remove(0)).unwrap())).collect();
        // q, k, v: one launch besides the row's quantization; q, k, v6: two; q, k, v, v6, o8: q k v in
        // one (three at most), then v6, then o8; biases on some
        for (set, launches) in [(vec![0, 1, 2], 1), (vec![0, 1, 3], 2), (vec![0, 1, 2, 3, 4], 3), (vec![1, 0, 2, 4], 2)] {
            for biased in [|i: usize| i.is_multiple_of(2), |_| true] {
                let ws: Vec<_> = set.iter().map(|&i| &m[i]).collect();
                let bs: Vec<_> = set.iter().map(|&i| biased(i).then_some(&biases[i])).collect();
                let before = kernels::Issued::on_this_thread().launches;
                let outs = b.matmul_each(&ws, &bs, &x).unwrap();
                assert_eq!(
                    kernels::Issued::on_this_thread().launches - before,
                    1 + launches,
                    "{rows} rows, {set:?}: launches with the quantization"
                );
                for (&i, out) in set.iter().zip(outs) {
                    let want = if biased(i) { &alone[i] } else { &alone_unbiased[i] };
                    assert_eq!(&bits(b.to_host(out).unwrap()), want, "{rows} rows, {set:?}: matrix {}", mats[i].0);
                }
            }
        }
    }
}

#[test]
fn a_gated_units_one_pass_gives_the_bits_of_its_two_products_and_the_activation() {
    // Decoding's gated unit in one kernel (one row, or a few sequences' rows) against the two
    // products and the glu kernel: every output's bits, with and without biases, for every
    // activation (SiLU's exp changes past the last full chunk of 16: 70 outputs leave 6).
    let b = SimBackend::new();
    let mut rng = Rng::new(0x61f0);
    let (rows, cols) = (70usize, 512usize);
    let types = [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::IQ2_XXS];
    let mut w = GgufWriter::new();
    for (i, &ty) in types.iter().enumerate() {
        for part in ["gate", "up"] {
            w.add_tensor(format!("{part}{i}"), &[cols as u64, rows as u64], ty, quantized_rows(ty, rows, cols, &mut rng)).unwrap();
        }
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    let acts = [Activation::Silu, Activation::Gelu, Activation::GeluErf, Activation::SwigluOai];
    let (bias_g, bias_u) = (b.upload_vector(&rng.values(rows, 1.0)).unwrap(), b.upload_vector(&rng.values(rows, 1.0)).unwrap());
    let mut fused_launches = 0u64;
    for (i, &ty) in types.iter().enumerate() {
        let gate = b.upload_matrix(&file, file.tensor(&format!("gate{i}")).unwrap(), rows, cols).unwrap();
        let up = b.upload_matrix(&file, file.tensor(&format!("up{i}")).unwrap(), rows, cols).unwrap();
        for (batch, act) in acts.iter().map(|&act| (1usize, act)).chain([(3, Activation::Silu), (8, Activation::Gelu)]) {
            let x = b.upload_tensor(batch, cols, &rng.values(batch * cols, 3.0)).unwrap();
            for biases in [[None, None], [Some(&bias_g), Some(&bias_u)]] {
                let start = kernels::Issued::on_this_thread().launches;
                let fused = b.to_host(b.matmul_glu(act, [&gate, &up], biases, &x).unwrap()).unwrap();
                fused_launches += kernels::Issued::on_this_thread().launches - start;
                let apart = b.to_host(super::products_then_glu(&b, act, [&gate, &up], biases, &x).unwrap()).unwrap();
                let with = if biases[0].is_some() { "with biases" } else { "without biases" };
                assert_eq!(bits(fused), bits(apart), "{ty} {act:?}, {batch} rows, {with}");
            }
        }
    }
    // one row or several: the activations' conversion to Q8_1 and the one pass
    let per_type = 2 * 6 * 2u64;
    assert_eq!(fused_launches, types.len() as u64 * per_type, "launches of the gated unit");
}

#[test]
fn an_indexed_gated_units_one_pass_gives_the_bits_of_its_products_and_the_activation() {
    // Decoding's indexed gated unit (each slot's gate and up expert in one kernel) against the
    // indexed products and glu, every slot's bits: one token choosing two experts, three tokens
    // (a row per token), a row per slot, and a prompt whose slots take the expert tiles (then
    // the products, as before).
    let b = SimBackend::new();
    let mut rng = Rng::new(0x9e1);
    let (n, rows, cols) = (4usize, 40usize, 512usize);
    let prompt: Vec<usize> = (0..80).map(|p| if p % 10 < 7 { 0 } else { 1 + p % 3 }).collect();
    let cases: [(&[usize], usize, bool); 4] =
        [(&[2, 0], 1, true), (&[3, 0, 1, 3, 2, 2], 3, true), (&[3, 0, 1, 3, 2, 2], 6, true), (&prompt, 40, false)];
    for (ty, act) in [(GgmlType::Q4_K, Activation::Silu), (GgmlType::MXFP4, Activation::SwigluOai), (GgmlType::IQ2_XS, Activation::Gelu)] {
        let mut w = GgufWriter::new();
        for part in ["gate", "up"] {
            w.add_tensor(part, &[cols as u64, rows as u64, n as u64], ty, quantized_rows(ty, n * rows, cols, &mut rng)).unwrap();
        }
        let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
        let gate = b.upload_stack(&file, file.tensor("gate").unwrap(), n, rows, cols).unwrap();
        let up = b.upload_stack(&file, file.tensor("up").unwrap(), n, rows, cols).unwrap();
        for (ids, x_rows, one_pass) in cases {
            let x = b.upload_tensor(x_rows, cols, &rng.values(x_rows * cols, 2.0)).unwrap();
            let start = kernels::Issued::on_this_thread().launches;
            let fused = b.to_host(b.matmul_indexed_glu(act, [&gate, &up], ids, &x).unwrap()).unwrap();
            let launches = kernels::Issued::on_this_thread().launches - start;
            let apart = b.to_host(super::indexed_products_then_glu(&b, act, [&gate, &up], ids, &x).unwrap()).unwrap();
            assert_eq!(bits(fused), bits(apart), "{ty} {act:?}: {} slots over {x_rows} rows", ids.len());
            if one_pass {
                // the activations' conversion to Q8_1 and the one pass
                assert_eq!(launches, 2, "{ty}: launches of {} slots over {x_rows} rows", ids.len());
            }
        }
    }
}

/// A norm's output carries its Q8_1 blocks, written in the norm's pass: the quantized products
/// that read it next take no conversion launch and give the bits of the same values converted
/// apart (`rms_norm` and `add_rms_norm`; one row and several; a query, key and value set). An op
/// that writes the values again drops the blocks: the product then reads the new values.
#[test]
fn products_of_a_norms_output_read_the_blocks_the_norm_wrote_with_the_bits_of_a_conversion() {
    let b = SimBackend::new();
    let mut rng = Rng::new(0x9801);
    let cols = 512usize;
    let mut w = GgufWriter::new();
    for (name, ty, rows) in [("q", GgmlType::Q4_K, 96u64), ("k", GgmlType::Q4_K, 32), ("down", GgmlType::Q6_K, 80)] {
        w.add_tensor(name, &[cols as u64, rows], ty, quantized_rows(ty, rows as usize, cols, &mut rng)).unwrap();
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    let m = |name: &str, rows| b.upload_matrix(&file, file.tensor(name).unwrap(), rows, cols).unwrap();
    let (q, k, down) = (m("q", 96), m("k", 32), m("down", 80));
    let scale = b.upload_vector(&rng.values(cols, 1.5)).unwrap();
    let launches = || kernels::Issued::on_this_thread().launches;
    // the products' outputs and their launches, of `x` as it stands
    let products = |x: &<SimBackend as Backend>::Tensor| {
        let start = launches();
        let sets = [vec![&q, &k], vec![&down]];
        let outs: Vec<Vec<u32>> = sets
            .iter()
            .flat_map(|ws| b.matmul_each(ws, &vec![None; ws.len()], x).unwrap())
            .map(|out| bits(b.to_host(out).unwrap()))
            .collect();
        (outs, launches() - start)
    };
    // the same values uploaded as they are: converted by the products' own launch
    let apart = |values: Vec<f32>, rows| products(&b.upload_tensor(rows, cols, &values).unwrap());
    for rows in [1usize, 5] {
        let (x, r) = (rng.values(rows * cols, 3.0), rng.values(rows * cols, 1.0));
        let mut normed = b.zeros(rows, cols).unwrap();
        b.rms_norm(&b.upload_tensor(rows, cols, &x).unwrap(), &scale, 1e-6, &mut normed).unwrap();
        let (fused, fused_launches) = products(&normed);
        let (want, want_launches) = apart(b.to_host(b.select_rows(&normed, &(0..rows).collect::<Vec<_>>()).unwrap()).unwrap(), rows);
        assert_eq!(fused, want, "{rows} rows: rms_norm's blocks against a conversion of its output");
        // the query and key in one launch, the down product in another; a conversion of each
        // set's input besides, apart
        let per_set = 2;
        assert_eq!((fused_launches, want_launches), (per_set, per_set + 2), "{rows} rows: launches of the products");

        // the next norm of the pass writes the same buffers with the new rows' blocks
        let mut residual = b.upload_tensor(rows, cols, &x).unwrap();
        b.add_rms_norm(&mut residual, &b.upload_tensor(rows, cols, &r).unwrap(), 0.5, &scale, 1e-6, &mut normed).unwrap();
        let (fused, fused_launches) = products(&normed);
        let (want, _) = apart(b.to_host(b.select_rows(&normed, &(0..rows).collect::<Vec<_>>()).unwrap()).unwrap(), rows);
        assert_eq!((fused, fused_launches), (want, per_set), "{rows} rows: add_rms_norm's blocks");

        // written again (scaled in place): the blocks are gone, the products convert the new values
        b.scale(&mut normed, -2.5).unwrap();
        let (rewritten, rewritten_launches) = products(&normed);
        let (want, _) = apart(b.to_host(normed).unwrap(), rows);
        assert_eq!((rewritten, rewritten_launches), (want, per_set + 2), "{rows} rows: products of the values scaled after the norm");
    }
}

/// Attention's output rows written with their Q8_1 blocks (for the output projection) give the
/// bytes of the conversion launch on the same values, whichever way the splits ran: rows of 1
/// and 3 splits in one block each, or split and folded after; heads of 64 values (two blocks)
/// and latent attention's 512. The values are the same bits as without the blocks.
#[test]
fn attention_writes_the_q8_1_blocks_of_its_output_as_the_conversion_does() {
    use kernels::host::HostRuntime;
    use kernels::launch::{
        attention_by, quantize_q8_1, AttentionOut, AttentionPath, HeadArgs, HeadGrouping, KvArgs, PoolArgs, PoolElement, QueryRow,
        ATTENTION_SPLIT, KV_BLOCK_POSITIONS, Q8_1_BYTES,
    };
    use kernels::Runtime;
    let rt = HostRuntime::default();
    let mut rng = Rng::new(0x0a7e);
    let upload = |values: Vec<f32>| rt.upload(&values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let download = |buf: &<HostRuntime as Runtime>::Buffer, bytes: usize| {
        let mut out = vec![0u8; bytes];
        rt.download(buf, &mut out).unwrap();
        out
    };
    let ends = [3 * ATTENTION_SPLIT - 7, 40];
    let per_seq = ends[0].div_ceil(KV_BLOCK_POSITIONS);
    for (n_head, n_head_kv, dk, dv) in [(8usize, 2usize, 64usize, 64usize), (4, 1, 576, 512)] {
        let pool = |dim| PoolArgs { blocks: ends.len() * per_seq, n_layer: 1, dim, element: PoolElement::F32 };
        let (k_pool, v_pool) = (pool(n_head_kv * dk), pool(n_head_kv * dv));
        let (k, v) = (upload(rng.values(k_pool.bytes() / 4, 2.0)), upload(rng.values(v_pool.bytes() / 4, 2.0)));
        let tables: Vec<u32> = (0..(ends.len() * per_seq) as u32).collect();
        let rows: Vec<QueryRow> = ends.iter().enumerate().map(|(s, &end)| QueryRow { kv: s * per_seq, positions: 0..end }).collect();
        let q = upload(rng.values(rows.len() * n_head * dk, 1.0));
        let heads = HeadArgs { n_head, n_head_kv, dk, dv, scale: 1.0 / (dk as f32).sqrt(), softcap: 0.0 };
        let (value_bytes, blocks) = (rows.len() * n_head * dv * 4, rows.len() * n_head * dv / 32);
        let run = |path, with_blocks: bool| {
            let (out, q8) = (rt.alloc(value_bytes).unwrap(), rt.alloc(blocks * Q8_1_BYTES).unwrap());
            let kv = KvArgs::Pool { k: &k, v: &v, k_pool, v_pool, layer: 0, tables: &tables };
            let written = AttentionOut { values: &out, q8_1: with_blocks.then_some(&q8) };
            attention_by(&rt, &q, kv, &rows, heads, None, written, path, HeadGrouping::Shared).unwrap();
            (download(&out, value_bytes), with_blocks.then(|| download(&q8, blocks * Q8_1_BYTES)))
        };
        let (plain, _) = run(AttentionPath::Whole, false);
        for path in [AttentionPath::Whole, AttentionPath::Split] {
            let (values, written) = run(path, true);
            assert_eq!(values, plain, "heads of {dv}, {path:?}: the values with the blocks");
            let converted = rt.alloc(blocks * Q8_1_BYTES).unwrap();
            quantize_q8_1(&rt, &rt.upload(&values).unwrap(), &converted, blocks).unwrap();
            assert_eq!(written.unwrap(), download(&converted, blocks * Q8_1_BYTES), "heads of {dv}, {path:?}: the blocks");
        }
    }
}
