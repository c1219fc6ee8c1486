//! The cases of the op harness, one function per op, each returning (case, NMSE) pairs.

use std::sync::Arc;

use half::f16;

use super::reference as naive;
use super::{nmse, OpCases, Rng};
use crate::backend::{
    Activation, AttentionRow, AttentionShape, Backend, BlockId, ColumnBlocks, DeltaShape, KvSlot, KvSource, KvStorage, KvType, KvTypes,
    KvValues, Rope, RopeKind, RowInput, SsmShape, StatePart, StateRun, Yarn, BLOCK_POSITIONS,
};
use crate::gguf::{GgufFile, GgufWriter};
use crate::quant::{ops_for, q4_0, q8_0, GgmlType, Isa};

/// Every weight type the engine computes with: those it quantizes to, then the grid i-quants.
fn weight_types() -> Vec<GgmlType> {
    GgmlType::WEIGHT_TYPES.into_iter().chain(GgmlType::GRID_TYPES).collect()
}

pub fn table<B: Backend>() -> Vec<OpCases<B>> {
    vec![
        OpCases { op: "upload_tensor + to_host", bound: 0.0, run: host_round_trip },
        // dequantization is exact on every tier
        OpCases { op: "get_rows", bound: 0.0, run: get_rows },
        // f32 activations against float weights: only the order of f32 sums differs
        OpCases { op: "matmul_each (float weights)", bound: 1e-11, run: |b, r| matmul(b, r, true) },
        // activations quantized to Q8_0 / Q8_1 / Q8_K, as llama.cpp's CPU backend does
        OpCases { op: "matmul_each (quantized weights)", bound: 5e-4, run: |b, r| matmul(b, r, false) },
        // each slot against its expert's product, activations quantized as above
        OpCases { op: "matmul_indexed", bound: 5e-4, run: matmul_indexed },
        OpCases { op: "rms_norm", bound: 1e-12, run: rms_norm },
        OpCases { op: "rms_norm_in_place", bound: 1e-12, run: rms_norm_in_place },
        OpCases { op: "add_rms_norm", bound: 1e-12, run: add_rms_norm },
        OpCases { op: "layer_norm", bound: 1e-12, run: layer_norm },
        // ggml builds the angles by repeated f32 products: their error grows with the position
        OpCases { op: "rope", bound: 1e-8, run: rope },
        OpCases { op: "kv_write + attention (f32 cache)", bound: 1e-11, run: |b, r| cached_attention(b, r, KvType::F32.into(), false) },
        // the reference reads the same f16-rounded (or quantized) keys and values
        OpCases { op: "kv_write + attention (f16 cache)", bound: 1e-11, run: |b, r| cached_attention(b, r, KvType::F16.into(), false) },
        OpCases { op: "kv_write + attention (q8_0 cache)", bound: 1e-11, run: |b, r| cached_attention(b, r, KvType::Q8_0.into(), false) },
        OpCases { op: "kv_write + attention (q4_0 cache)", bound: 1e-11, run: |b, r| cached_attention(b, r, KvType::Q4_0.into(), false) },
        OpCases {
            op: "kv_write + attention (q8_0 keys, q4_0 values)",
            bound: 1e-11,
            run: |b, r| cached_attention(b, r, KvTypes { key: KvType::Q8_0, value: KvType::Q4_0 }, false),
        },
        // latent attention's cache: the values read from the keys (a value type asked for apart
        // is the keys' then)
        OpCases {
            op: "kv_write + attention (values in the keys, f16)",
            bound: 1e-11,
            run: |b, r| cached_attention(b, r, KvType::F16.into(), true),
        },
        OpCases {
            op: "kv_write + attention (values in the keys, q8_0)",
            bound: 1e-11,
            run: |b, r| cached_attention(b, r, KvTypes { key: KvType::Q8_0, value: KvType::Q4_0 }, true),
        },
        OpCases { op: "attention (batch rows)", bound: 1e-11, run: batch_attention },
        OpCases { op: "attention (kept rows)", bound: 1e-11, run: kept_attention },
        // GELU goes through ggml's f16 table: its input and output are rounded to f16
        OpCases { op: "glu", bound: 1e-6, run: glu },
        OpCases { op: "activate", bound: 1e-6, run: activate },
        OpCases { op: "add_scaled", bound: 1e-14, run: add_scaled },
        OpCases { op: "scale", bound: 1e-14, run: scale },
        OpCases { op: "add_bias", bound: 1e-14, run: add_bias },
        OpCases { op: "add_weighted_rows", bound: 1e-14, run: add_weighted_rows },
        OpCases { op: "softcap", bound: 1e-12, run: softcap },
        // sums and differences of f32 values, then one scale
        OpCases { op: "hadamard", bound: 1e-12, run: hadamard },
        // products and sums of f32 values over a few taps, each sequence's rows in order
        OpCases { op: "short_conv", bound: 1e-12, run: |b, r| convolutions(b, r, true) },
        OpCases { op: "conv_states", bound: 1e-12, run: |b, r| convolutions(b, r, false) },
        // f32 exp and log1p, and sums over the state, row after row
        OpCases { op: "ssm_scan", bound: 1e-12, run: ssm_scan },
        OpCases { op: "rms_norm_groups", bound: 1e-12, run: rms_norm_groups },
        // L2 norms (the reference's exact, the op's eps as ggml places it), exp, log1p and
        // sums over each state row
        OpCases { op: "delta_rule", bound: 1e-12, run: delta_rule },
        OpCases { op: "select_rows", bound: 0.0, run: select_rows },
        OpCases { op: "copy_columns", bound: 0.0, run: copy_columns },
    ]
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

fn host<B: Backend>(b: &B, rows: usize, cols: usize, values: &[f32]) -> B::Tensor {
    b.upload_tensor(rows, cols, values).expect("upload_tensor")
}

fn back<B: Backend>(b: &B, x: B::Tensor) -> Vec<f32> {
    b.to_host(x).expect("to_host")
}

fn host_round_trip<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [(1, 1), (3, 7), (5, 896)]
        .into_iter()
        .map(|(rows, cols)| {
            let x = rng.values(rows * cols, 100.0);
            let t = host(b, rows, cols, &x);
            assert_eq!(b.shape(&t), (rows, cols));
            (format!("{rows}x{cols}"), nmse(&back(b, t), &widen(&x)))
        })
        .collect()
}

/// Weight matrices of one GGUF file, quantized by the reference quantizers, with their
/// dequantized values.
struct Weights {
    file: Arc<GgufFile>,
    values: Vec<Vec<f32>>,
}

fn weights(specs: &[(GgmlType, usize, usize)], rng: &mut Rng) -> Weights {
    let mut w = GgufWriter::new();
    let mut values = Vec::new();
    for (i, &(ty, rows, cols)) in specs.iter().enumerate() {
        let ops = ops_for(ty, Isa::Scalar).expect("a computable type");
        let row_bytes = ty.row_bytes(cols).expect("whole blocks");
        let bytes = super::quantized_rows(ty, rows, cols, 1.0, rng);
        let mut deq = vec![0.0f32; rows * cols];
        for (src, back) in bytes.chunks_exact(row_bytes).zip(deq.chunks_exact_mut(cols)) {
            (ops.dequantize)(src, back);
        }
        w.add_tensor(format!("w{i}"), &[cols as u64, rows as u64], ty, bytes).expect("tensor");
        values.push(deq);
    }
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes().expect("gguf")).expect("gguf"));
    Weights { file, values }
}

fn upload<B: Backend>(b: &B, w: &Weights, i: usize, rows: usize, cols: usize) -> B::Matrix {
    let info = w.file.tensor(&format!("w{i}")).expect("tensor");
    b.upload_matrix(&w.file, info, rows, cols).expect("upload")
}

fn get_rows<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let (rows, cols) = (11, 256);
    let types = weight_types();
    let specs: Vec<_> = types.iter().map(|&ty| (ty, rows, cols)).collect();
    let w = weights(&specs, rng);
    let given = rng.values(cols, 3.0);
    types
        .iter()
        .enumerate()
        .map(|(i, ty)| {
            let m = upload(b, &w, i, rows, cols);
            let inputs = [RowInput::Token(10), RowInput::Token(0), RowInput::Embedding(&given), RowInput::Token(10), RowInput::Token(5)];
            let got = back(b, b.get_rows(&m, &inputs).expect("get_rows"));
            let want: Vec<f64> = inputs
                .iter()
                .flat_map(|input| match *input {
                    RowInput::Token(t) => widen(&w.values[i][t as usize * cols..(t as usize + 1) * cols]),
                    RowInput::Embedding(row) => widen(row),
                })
                .collect();
            (format!("{ty} {rows}x{cols}, 4 tokens + 1 embedding row"), nmse(&got, &want))
        })
        .collect()
}

fn matmul<B: Backend>(b: &B, rng: &mut Rng, float: bool) -> Vec<(String, f64)> {
    let types: Vec<GgmlType> =
        weight_types().into_iter().filter(|t| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) == float).collect();
    let mut out = Vec::new();
    // (rows, cols): odd row counts cross the task and kernel boundaries; at least 8 outputs per
    // activation row, since the NMSE of a lone dot product that happens to be near zero says little
    for (rows, cols) in [(37, 256), (8, 512), (16, 768)] {
        let specs: Vec<_> = types.iter().map(|&ty| (ty, rows, cols)).collect();
        let w = weights(&specs, rng);
        for batch in [1, 3, 8, 11] {
            let x = rng.values(batch * cols, 2.0);
            let xt = host(b, batch, cols, &x);
            for (i, ty) in types.iter().enumerate() {
                let m = upload(b, &w, i, rows, cols);
                let got = back(b, b.matmul_each(&[&m], &[None], &xt).expect("matmul").pop().expect("one output"));
                out.push((format!("{ty} {rows}x{cols}, batch {batch}"), nmse(&got, &naive::matmul(&w.values[i], rows, cols, None, &x))));
            }
        }
    }
    // several matrices of different types and sizes sharing one input, with and without biases
    let (cols, batch) = (256, 5);
    let shapes = [(types[0], 64, cols), (types[types.len() - 1], 16, cols), (types[types.len() / 2], 24, cols)];
    let w = weights(&shapes, rng);
    let ms: Vec<B::Matrix> = shapes.iter().enumerate().map(|(i, &(_, rows, cols))| upload(b, &w, i, rows, cols)).collect();
    let bias_values: Vec<Vec<f32>> = shapes.iter().map(|&(_, rows, _)| rng.values(rows, 1.0)).collect();
    let biases: Vec<B::Vector> = bias_values.iter().map(|v| b.upload_vector(v).expect("vector")).collect();
    let x = rng.values(batch * cols, 2.0);
    let ys = b
        .matmul_each(&[&ms[0], &ms[1], &ms[2]], &[Some(&biases[0]), None, Some(&biases[2])], &host(b, batch, cols, &x))
        .expect("matmul_each");
    for (i, y) in ys.into_iter().enumerate() {
        let bias = (i != 1).then(|| bias_values[i].as_slice());
        let want = naive::matmul(&w.values[i], shapes[i].1, cols, bias, &x);
        out.push((format!("matrix {i} of 3 ({} {}x{cols}), batch {batch}", shapes[i].0, shapes[i].1), nmse(&back(b, y), &want)));
    }
    out
}

fn matmul_indexed<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let (n_matrix, rows, cols) = (5, 24, 256);
    let mut out = Vec::new();
    for ty in [GgmlType::Q4_K, GgmlType::MXFP4, GgmlType::IQ2_XS, GgmlType::F16] {
        // two sets (a gate and an up) of n_matrix experts, each set one tensor of stacked experts
        let w = weights(&[(ty, n_matrix * rows, cols); 2], rng);
        let info = |s: usize| w.file.tensor(&format!("w{s}")).expect("tensor");
        // uploaded as stacks (one buffer per set), and matrix by matrix
        let stacked: Vec<Vec<B::Matrix>> =
            (0..2).map(|s| b.upload_stack(&w.file, info(s), n_matrix, rows, cols).expect("upload_stack")).collect();
        let separate: Vec<Vec<B::Matrix>> = (0..2)
            .map(|s| {
                (0..n_matrix)
                    .map(|e| {
                        let part = info(s).rows((e * rows) as u64, rows as u64).expect("rows");
                        b.upload_matrix(&w.file, &part, rows, cols).expect("upload")
                    })
                    .collect()
            })
            .collect();
        // (tokens, slots per token, a row per slot): one token's choices, several tokens' choices
        // over shared rows, and rows of their own (the down projections)
        for (tokens, per_token, per_slot) in [(1, 3, false), (4, 2, false), (5, 1, true), (3, 2, true)] {
            let slots = tokens * per_token;
            let ids: Vec<usize> = (0..slots).map(|_| ((rng.next_f32() + 1.0) * 0.5 * n_matrix as f32) as usize % n_matrix).collect();
            let x_rows = if per_slot { slots } else { tokens };
            let x = rng.values(x_rows * cols, 2.0);
            for (form, sets) in [("stacked", &stacked), ("one by one", &separate)] {
                let ys = b.matmul_indexed(&[&sets[0], &sets[1]], &ids, &host(b, x_rows, cols, &x)).expect("matmul_indexed");
                for (s, y) in ys.into_iter().enumerate() {
                    let want: Vec<f64> = ids
                        .iter()
                        .enumerate()
                        .flat_map(|(p, &e)| {
                            let r = p / (slots / x_rows);
                            let expert = &w.values[s][e * rows * cols..(e + 1) * rows * cols];
                            naive::matmul(expert, rows, cols, None, &x[r * cols..(r + 1) * cols])
                        })
                        .collect();
                    out.push((format!("{ty} {form} set {s}, experts {ids:?} over {x_rows} rows"), nmse(&back(b, y), &want)));
                }
            }
        }
    }
    out
}

fn rms_norm<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [(1, 7), (3, 896), (4, 1000)]
        .into_iter()
        .map(|(rows, cols)| {
            let (x, w) = (rng.values(rows * cols, 4.0), rng.values(cols, 1.5));
            let mut out = b.zeros(rows, cols).expect("zeros");
            b.rms_norm(&host(b, rows, cols, &x), &b.upload_vector(&w).expect("vector"), 1e-6, &mut out).expect("rms_norm");
            (format!("{rows}x{cols}"), nmse(&back(b, out), &naive::rms_norm(&x, &w, 1e-6)))
        })
        .collect()
}

fn rms_norm_in_place<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    // groups of one head (q/k norms) and of whole rows (post-norms)
    [(3, 256, 64), (2, 40, 40), (5, 896, 896)]
        .into_iter()
        .map(|(rows, cols, group)| {
            let (x, w) = (rng.values(rows * cols, 4.0), rng.values(group, 1.5));
            let mut t = host(b, rows, cols, &x);
            b.rms_norm_in_place(&mut t, &b.upload_vector(&w).expect("vector"), 1e-5).expect("rms_norm_in_place");
            (format!("{rows}x{cols} in groups of {group}"), nmse(&back(b, t), &naive::rms_norm(&x, &w, 1e-5)))
        })
        .collect()
}

fn add_rms_norm<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    // the worse of the sum left in x and the normed rows (those against the norm of the f32 sum)
    [(1, 7, 1.0f32), (3, 896, 1.0), (2, 1000, 0.5)]
        .into_iter()
        .map(|(rows, cols, s)| {
            let (x, y, w) = (rng.values(rows * cols, 4.0), rng.values(rows * cols, 2.0), rng.values(cols, 1.5));
            let (mut t, mut out) = (host(b, rows, cols, &x), b.zeros(rows, cols).expect("zeros"));
            b.add_rms_norm(&mut t, &host(b, rows, cols, &y), s, &b.upload_vector(&w).expect("vector"), 1e-6, &mut out)
                .expect("add_rms_norm");
            let sum: Vec<f32> = x.iter().zip(&y).map(|(&a, &c)| a + c * s).collect();
            let want_sum: Vec<f64> = sum.iter().map(|&v| f64::from(v)).collect();
            let err = nmse(&back(b, t), &want_sum).max(nmse(&back(b, out), &naive::rms_norm(&sum, &w, 1e-6)));
            (format!("{rows}x{cols}, scale {s}"), err)
        })
        .collect()
}

fn layer_norm<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [(1, 5), (3, 384), (2, 1000)]
        .into_iter()
        .map(|(rows, cols)| {
            let x: Vec<f32> = rng.values(rows * cols, 4.0).into_iter().map(|v| v + 3.0).collect();
            let (w, bias) = (rng.values(cols, 1.5), rng.values(cols, 0.5));
            let mut out = b.zeros(rows, cols).expect("zeros");
            let (wv, bv) = (b.upload_vector(&w).expect("vector"), b.upload_vector(&bias).expect("vector"));
            b.layer_norm(&host(b, rows, cols, &x), &wv, &bv, 1e-12, &mut out).expect("layer_norm");
            (format!("{rows}x{cols}"), nmse(&back(b, out), &naive::layer_norm(&x, &w, &bias, 1e-12)))
        })
        .collect()
}

fn rope<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let factors: std::sync::Arc<[f32]> = (0..64).map(|i| 1.0 + (i % 5) as f32).collect();
    let yarn = Yarn { ext_factor: 1.0, corr_dims: Yarn::corr_dims(64, 2048, 1e6, 32.0, 1.0) };
    for kind in [RopeKind::Norm, RopeKind::Neox] {
        // (heads, head size, rotated dims, base, scale)
        for (heads, head_dim, n_dims, base, scale) in [(4, 64, 64, 10000.0, 1.0), (2, 128, 64, 1e6, 0.25), (3, 40, 40, 10000.0, 1.0)] {
            let plain = Rope::plain(kind, head_dim, n_dims, base, scale);
            let mut ropes = vec![("", plain.clone())];
            if n_dims == 64 {
                ropes.push((", angle factors", Rope { factors: Some(factors.clone()), ..plain.clone() }));
                ropes.push((", YaRN", Rope { yarn: Some(yarn), attn_factor: 0.9, ..plain }));
            }
            for (what, r) in ropes {
                let positions = [0u32, 1, 37, 511, 3000];
                let cols = heads * head_dim;
                let x = rng.values(positions.len() * cols, 2.0);
                let mut t = host(b, positions.len(), cols, &x);
                b.rope(&mut t, &r, &positions).expect("rope");
                let case = format!("{kind:?} {heads}x{head_dim} ({n_dims} rotated), base {base}, scale {scale}{what}, positions 0..3000");
                out.push((case, nmse(&back(b, t), &naive::rope(&x, cols, &r, &positions))));
            }
        }
    }
    out
}

/// Keys or values, rows of `dim`, as the cache gives them back: rounded to f16, or quantized
/// (as llama.cpp's x86 CPU backend quantizes them: Q8_0 as its activations, Q4_0 by ggml's
/// reference; each row's last block padded with zeros) and dequantized by ggml's reference.
fn stored(ty: KvType, x: Vec<f32>, dim: usize) -> Vec<f32> {
    let round_trip = |row: &[f32]| -> Vec<f32> {
        let mut padded = row.to_vec();
        padded.resize(dim.div_ceil(32) * 32, 0.0);
        let mut out = vec![0.0; padded.len()];
        match ty {
            KvType::F32 => out.copy_from_slice(&padded),
            KvType::F16 => out.iter_mut().zip(&padded).for_each(|(o, &v)| *o = f16::from_f32(v).to_f32()),
            KvType::Q8_0 => {
                let mut blocks = vec![bytemuck::Zeroable::zeroed(); padded.len() / 32];
                q8_0::quantize_activations(&padded, bytemuck::cast_slice_mut(&mut blocks));
                q8_0::dequantize_ref(&blocks, &mut out);
            }
            KvType::Q4_0 => {
                let mut blocks = vec![bytemuck::Zeroable::zeroed(); padded.len() / 32];
                q4_0::quantize_ref(&padded, &mut blocks);
                q4_0::dequantize_ref(&blocks, &mut out);
            }
        }
        out.truncate(dim);
        out
    };
    x.chunks_exact(dim).flat_map(round_trip).collect()
}

/// Keys and values written to a block cache, then attended. `in_keys`: the values are the keys'
/// leading columns, stored once ([`KvValues::KeyPrefix`], latent attention's cache).
fn cached_attention<B: Backend>(b: &B, rng: &mut Rng, types: KvTypes, in_keys: bool) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    // the last: multi-head latent attention's absorbed form (DeepSeek-V2's key of 576, value 512)
    let shapes: &[(usize, usize, usize, usize)] = if in_keys {
        &[(8, 1, 96, 64), (3, 1, 576, 512)]
    } else {
        &[(4, 2, 64, 64), (6, 6, 40, 24), (8, 1, 80, 80), (2, 1, 64, 72), (3, 1, 576, 512)]
    };
    for &(n_head, n_head_kv, dk, dv) in shapes {
        let shape = AttentionShape { n_head, n_head_kv, head_dim_k: dk, head_dim_v: dv, scale: 1.0 / (dk as f32).sqrt(), softcap: 0.0 };
        let (kd, vd, n_layer) = (n_head_kv * dk, n_head_kv * dv, 2);
        let values = if in_keys { KvValues::KeyPrefix(vd) } else { KvValues::Rows(vd) };
        let mut store = b.new_kv_store(types, n_layer, kd, values, 0);
        // three sequences; block ids out of order and not contiguous; the third long enough for
        // a device's attention to cut it into splits
        let tables: [Vec<BlockId>; 3] = [vec![4, 0, 2], vec![5, 1], (6..26).rev().collect()];
        let lens = [70usize, 40, 600];
        for &id in tables.iter().flatten() {
            store.alloc_block(id).expect("alloc");
        }
        let mut keys = Vec::new();
        let mut values = Vec::new();
        for (table, &len) in tables.iter().zip(&lens) {
            let slots: Vec<KvSlot> = (0..len).map(|p| KvSlot { block: table[p / BLOCK_POSITIONS], offset: p % BLOCK_POSITIONS }).collect();
            let mut layer_rows = Vec::new();
            for layer in 0..n_layer {
                let k = rng.values(len * kd, 2.0);
                let v = if in_keys { k.chunks_exact(kd).flat_map(|r| &r[..vd]).copied().collect() } else { rng.values(len * vd, 2.0) };
                b.kv_write(&mut store, layer, &slots, &host(b, len, kd, &k), &host(b, len, vd, &v)).expect("kv_write");
                let k = stored(types.key, k, kd);
                // the values as the cache holds them: the stored keys' leading columns
                let v = if in_keys { k.chunks_exact(kd).flat_map(|r| &r[..vd]).copied().collect() } else { stored(types.value, v, vd) };
                layer_rows.push((k, v));
            }
            // layer 1 is the one attended; layer 0 must stay out of it
            let (k, v) = layer_rows.pop().expect("layer 1");
            keys.push(k);
            values.push(v);
        }
        // (sequence, position, window): whole prefixes, a window, the first position, one tile
        // exactly; over 600 positions, a window across position 256, up to position 512
        let queries = [
            (0usize, 69usize, None),
            (0, 20, Some(8usize)),
            (1, 39, None),
            (1, 0, None),
            (0, 63, None),
            (0, 69, Some(16)),
            (2, 599, None),
            (2, 300, Some(100)),
            (2, 511, None),
        ];
        let rows: Vec<AttentionRow> = queries
            .iter()
            .map(|&(seq, pos, window)| AttentionRow { kv: seq, positions: window.map_or(0, |w| (pos + 1).saturating_sub(w))..pos + 1 })
            .collect();
        let q = rng.values(rows.len() * shape.q_dim(), 2.0);
        let table_refs: Vec<&[BlockId]> = tables.iter().map(|t| t.as_slice()).collect();
        let source = KvSource::Cache { store: &store, layer: 1, tables: &table_refs };
        // attention sinks (gpt-oss) on one shape, large enough to take a visible share
        let sinks = (n_head == 8).then(|| rng.values(n_head, 4.0));
        let sinks_on = sinks.as_ref().map(|s| b.upload_vector(s).expect("sinks"));
        let got =
            back(b, b.attention(&host(b, rows.len(), shape.q_dim(), &q), source, &rows, &shape, sinks_on.as_ref()).expect("attention"));
        let want = naive::attention(
            &q,
            &rows,
            &shape,
            sinks.as_deref(),
            |s, p| &keys[s][p * kd..(p + 1) * kd],
            |s, p| &values[s][p * vd..(p + 1) * vd],
        );
        let with = match (sinks.is_some(), in_keys) {
            (true, _) => ", sinks",
            (_, true) => ", values in the keys",
            _ => "",
        };
        out.push((format!("{n_head}/{n_head_kv} heads of {dk}/{dv}, 3 sequences, 9 rows with windows{with}"), nmse(&got, &want)));
    }
    out
}

fn batch_attention<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    // (heads, KV heads, head sizes, soft cap): the last with Gemma 2's soft cap, low enough to bite
    for (n_head, n_head_kv, dk, dv, softcap) in [(12, 12, 32, 32, 0.0), (4, 2, 64, 64, 0.0), (3, 1, 24, 40, 0.0), (4, 2, 64, 64, 1.5)] {
        let shape = AttentionShape { n_head, n_head_kv, head_dim_k: dk, head_dim_v: dv, scale: 0.125, softcap };
        let lens = [5usize, 70, 1];
        let n: usize = lens.iter().sum();
        let (k, v, q) = (rng.values(n * n_head_kv * dk, 2.0), rng.values(n * n_head_kv * dv, 2.0), rng.values(n * shape.q_dim(), 2.0));
        let mut rows = Vec::new();
        let mut start = 0;
        for &len in &lens {
            rows.extend(std::iter::repeat_n(AttentionRow { kv: start, positions: 0..len }, len));
            start += len;
        }
        let (kt, vt) = (host(b, n, n_head_kv * dk, &k), host(b, n, n_head_kv * dv, &v));
        let got = back(
            b,
            b.attention(&host(b, n, shape.q_dim(), &q), KvSource::Batch { k: &kt, v: &vt }, &rows, &shape, None).expect("attention"),
        );
        let (kd, vd) = (n_head_kv * dk, n_head_kv * dv);
        let want =
            naive::attention(&q, &rows, &shape, None, |s, p| &k[(s + p) * kd..(s + p + 1) * kd], |s, p| &v[(s + p) * vd..(s + p + 1) * vd]);
        out.push((format!("{n_head}/{n_head_kv} heads of {dk}/{dv}, soft cap {softcap}, sequences of 5, 70, 1"), nmse(&got, &want)));
    }
    out
}

/// Rows kept for many calls (a Whisper window's audio): two whole tiles of 64 positions and a
/// part, read by a few query rows at a time as a decoder reads them, windows included.
fn kept_attention<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (n_head, n_head_kv, dk, dv) in [(8, 8, 64, 64), (4, 2, 64, 48), (3, 1, 24, 40)] {
        let shape = AttentionShape { n_head, n_head_kv, head_dim_k: dk, head_dim_v: dv, scale: 0.125, softcap: 0.0 };
        let n = 150;
        let (kd, vd) = (n_head_kv * dk, n_head_kv * dv);
        let (k, v) = (rng.values(n * kd, 2.0), rng.values(n * vd, 2.0));
        let kept = b.keep_kv(host(b, n, kd, &k), host(b, n, vd, &v), &shape).expect("keep_kv");
        for positions in [0..n, 0..128, 10..140] {
            let rows = vec![AttentionRow { kv: 0, positions: positions.clone() }; 3];
            let q = rng.values(rows.len() * shape.q_dim(), 2.0);
            let got = back(
                b,
                b.attention(&host(b, rows.len(), shape.q_dim(), &q), KvSource::Kept(&kept), &rows, &shape, None).expect("attention"),
            );
            let want = naive::attention(&q, &rows, &shape, None, |_, p| &k[p * kd..(p + 1) * kd], |_, p| &v[p * vd..(p + 1) * vd]);
            out.push((format!("{n_head}/{n_head_kv} heads of {dk}/{dv}, 3 rows over {positions:?} of {n}"), nmse(&got, &want)));
        }
    }
    out
}

const ACTIVATIONS: [Activation; 4] = [Activation::Silu, Activation::Gelu, Activation::GeluErf, Activation::Sigmoid];

fn glu<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for act in ACTIVATIONS.into_iter().chain([Activation::SwigluOai]) {
        // rows of 100: six full chunks of 16 and a tail
        for (rows, cols) in [(3, 100), (2, 4864)] {
            let (g, u) = (rng.values(rows * cols, 6.0), rng.values(rows * cols, 2.0));
            let mut gt = host(b, rows, cols, &g);
            b.glu(act, &mut gt, &host(b, rows, cols, &u)).expect("glu");
            let want: Vec<f64> = g.iter().zip(&u).map(|(&a, &c)| naive::gated(act, f64::from(a), f64::from(c))).collect();
            out.push((format!("{act:?} {rows}x{cols}"), nmse(&back(b, gt), &want)));
        }
    }
    out
}

fn activate<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    ACTIVATIONS
        .into_iter()
        .map(|act| {
            let (rows, cols) = (4, 1536);
            let mut x = rng.values(rows * cols, 6.0);
            x[0] = 12.0; // beyond GELU's table
            x[1] = -12.0;
            let mut t = host(b, rows, cols, &x);
            b.activate(act, &mut t).expect("activate");
            let want: Vec<f64> = x.iter().map(|&v| naive::activation(act, f64::from(v))).collect();
            (format!("{act:?} {rows}x{cols}"), nmse(&back(b, t), &want))
        })
        .collect()
}

fn add_scaled<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [1.0f32, 0.22, -3.0]
        .into_iter()
        .map(|s| {
            let (x, y) = (rng.values(3 * 77, 5.0), rng.values(3 * 77, 5.0));
            let mut t = host(b, 3, 77, &x);
            b.add_scaled(&mut t, &host(b, 3, 77, &y), s).expect("add_scaled");
            let want: Vec<f64> = x.iter().zip(&y).map(|(&a, &c)| f64::from(a) + f64::from(c) * f64::from(s)).collect();
            (format!("3x77, scale {s}"), nmse(&back(b, t), &want))
        })
        .collect()
}

fn scale<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [29.9f32, 1.0 / 8.0]
        .into_iter()
        .map(|s| {
            let x = rng.values(2 * 640, 5.0);
            let mut t = host(b, 2, 640, &x);
            b.scale(&mut t, s).expect("scale");
            let want: Vec<f64> = x.iter().map(|&a| f64::from(a) * f64::from(s)).collect();
            (format!("2x640 by {s}"), nmse(&back(b, t), &want))
        })
        .collect()
}

fn add_bias<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [(1usize, 77usize), (3, 300)]
        .into_iter()
        .map(|(rows, cols)| {
            let (x, bias) = (rng.values(rows * cols, 5.0), rng.values(cols, 2.0));
            let mut t = host(b, rows, cols, &x);
            b.add_bias(&mut t, &b.upload_vector(&bias).expect("vector")).expect("add_bias");
            let want: Vec<f64> = x.iter().enumerate().map(|(i, &a)| f64::from(a) + f64::from(bias[i % cols])).collect();
            (format!("{rows}x{cols}"), nmse(&back(b, t), &want))
        })
        .collect()
}

fn add_weighted_rows<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let (out_rows, src_rows, cols) = (5usize, 4usize, 130usize);
    let (base, src) = (rng.values(out_rows * cols, 3.0), rng.values(src_rows * cols, 3.0));
    // (source row, output row, weight): rows out of order, two output rows untouched
    let pairs = [(3usize, 0usize, 0.25f32), (0, 4, 1.5), (2, 1, -0.75)];
    let mut t = host(b, out_rows, cols, &base);
    b.add_weighted_rows(&mut t, &host(b, src_rows, cols, &src), &pairs).expect("add_weighted_rows");
    let mut want = widen(&base);
    for &(s, o, w) in &pairs {
        for c in 0..cols {
            want[o * cols + c] += f64::from(src[s * cols + c]) * f64::from(w);
        }
    }
    vec![(format!("3 of {src_rows} rows into {out_rows}x{cols}"), nmse(&back(b, t), &want))]
}

fn hadamard<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [(64usize, 3usize, 128usize), (128, 2, 256), (256, 5, 512), (64, 1, 576)]
        .into_iter()
        .map(|(block, rows, cols)| {
            let x = rng.values(rows * cols, 4.0);
            let mut t = host(b, rows, cols, &x);
            b.hadamard(&mut t, block).expect("hadamard");
            (format!("{rows}x{cols} in blocks of {block}"), nmse(&back(b, t), &naive::hadamard(&x, block)))
        })
        .collect()
}

/// A recurrent op's call over `rows` rows of the given values with the given runs.
type RecurrentCall<'a, B> = dyn FnMut(&mut <B as Backend>::KvStore, &[f32], usize, &[StateRun]) -> Vec<f32> + 'a;

/// Two sequences' rows (of `width` values, `out` outputs each) interleaved in one call, each
/// one's state then continued by the next call (across several of the chunked recurrences'
/// chunks) and resumed from snapshots the first call wrote: every output against `want`'s, the
/// definition over each sequence's whole history. Then the long continuation again one row per
/// call from a resumed state: `(error, 0)`, or `(error, 1)` where a row's bits differ from the
/// long call's (a row's bits must not depend on where its pass began).
fn recurrent_calls<B: Backend>(
    rng: &mut Rng,
    store: &mut B::KvStore,
    width: usize,
    out: usize,
    call: &mut RecurrentCall<'_, B>,
    want: &dyn Fn(&[f32]) -> Vec<f64>,
) -> (f64, f64) {
    for id in 0..4 {
        store.alloc_state(id).expect("alloc_state");
    }
    const LONG: usize = 75; // A's rows: its continuation crosses two chunks of RECURRENT_CHUNK
    let (a, c) = (rng.values(LONG * width, 2.0), rng.values(6 * width, 2.0)); // sequences A and C
    let rows_of = |picks: &[(bool, usize)]| -> Vec<f32> {
        picks
            .iter()
            .flat_map(|&(is_a, i)| if is_a { &a[i * width..(i + 1) * width] } else { &c[i * width..(i + 1) * width] })
            .copied()
            .collect()
    };
    let run = |rows: Vec<usize>, state: u32, snapshots: Vec<(usize, u32)>| StateRun { rows, state, snapshots };
    // A's rows 0..7 and C's 0..4 interleaved; snapshots after A's row 4 and C's row 1
    let first =
        [(true, 0), (false, 0), (true, 1), (false, 1), (true, 2), (false, 2), (true, 3), (false, 3), (true, 4), (true, 5), (true, 6)];
    let y1 = call(
        store,
        &rows_of(&first),
        first.len(),
        &[run(vec![0, 2, 4, 6, 8, 9, 10], 0, vec![(4, 2)]), run(vec![1, 3, 5, 7], 1, vec![(1, 3)])],
    );
    let continued: Vec<(bool, usize)> = (7..LONG).map(|i| (true, i)).collect();
    // a snapshot after A's row 31, the last of its first chunk, into C's old slot (C goes on from
    // its snapshot)
    let y2 = call(store, &rows_of(&continued), continued.len(), &[run((0..continued.len()).collect(), 0, vec![(31 - 7, 1)])]);
    let y3 = call(store, &rows_of(&[(false, 2), (false, 3), (false, 4), (false, 5)]), 4, &[run(vec![0, 1, 2, 3], 3, vec![])]);
    let y4 = call(store, &rows_of(&[(true, 5), (true, 6)]), 2, &[run(vec![0, 1], 2, vec![])]);
    let (want_a, want_c) = (want(&a), want(&c));
    let pick = |is_a: bool, i: usize| if is_a { want_a[i * out..(i + 1) * out].to_vec() } else { want_c[i * out..(i + 1) * out].to_vec() };
    let (mut got, mut expected) = (y1, Vec::new());
    first.iter().for_each(|&(is_a, i)| expected.extend(pick(is_a, i)));
    // slot 2 now holds A after 7 rows, as slot 0 did before y2: the continuation row by row
    let by_row: Vec<f32> = continued.iter().flat_map(|&pick| call(store, &rows_of(&[pick]), 1, &[run(vec![0], 2, vec![])])).collect();
    // and from the snapshot after row 31, rows 32.. one at a time
    let from_snapshot: Vec<f32> = (32..40).flat_map(|i| call(store, &rows_of(&[(true, i)]), 1, &[run(vec![0], 1, vec![])])).collect();
    let same_bits = by_row == y2 && from_snapshot[..] == y2[(32 - 7) * out..(40 - 7) * out];
    for (y, is_a, rows) in [(y2, true, 7..LONG), (y3, false, 2..6), (y4, true, 5..7)] {
        got.extend(y);
        rows.for_each(|i| expected.extend(pick(is_a, i)));
    }
    (nmse(&got, &expected), if same_bits { 0.0 } else { 1.0 })
}

/// [`recurrent_calls`]' two results as a case's two lines.
fn recurrent_lines(name: String, (error, bits): (f64, f64)) -> [(String, f64); 2] {
    [(format!("{name}: interleaved, continued, resumed"), error), (format!("{name}: row by row, the same bits"), bits)]
}

/// LFM2's gated short convolution and the plain one (Mamba-2's), by [`recurrent_calls`].
fn convolutions<B: Backend>(b: &B, rng: &mut Rng, gated: bool) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (d, taps) in [(64usize, 3usize), (300, 4), (8, 2)] {
        // a second layer's part of slots that hold more
        let part = StatePart { offset: d, len: (taps - 1) * d };
        let mut store = b.new_kv_store(KvType::F32.into(), 1, 4, KvValues::Rows(4), part.offset + part.len + 5);
        let taps_values = rng.values(d * taps, 1.0);
        let kernel = host(b, d, taps, &taps_values);
        let width = if gated { 3 * d } else { d };
        let mut call = |store: &mut B::KvStore, values: &[f32], rows: usize, runs: &[StateRun]| {
            let x = host(b, rows, width, values);
            let y = if gated { b.short_conv(&x, &kernel, store, part, runs) } else { b.conv_states(&x, &kernel, store, part, runs) };
            back(b, y.expect("convolution"))
        };
        let want = |values: &[f32]| {
            if gated {
                naive::short_conv(values, &taps_values, d, taps)
            } else {
                // the plain convolution is the gated one of b = 1, c = 1
                let ones: Vec<f32> = values.chunks_exact(d).flat_map(|x| [vec![1.0; d], vec![1.0; d], x.to_vec()].concat()).collect();
                naive::short_conv(&ones, &taps_values, d, taps)
            }
        };
        out.extend(recurrent_lines(
            format!("{d} channels, {taps} taps"),
            recurrent_calls::<B>(rng, &mut store, width, d, &mut call, &want),
        ));
    }
    out
}

/// Mamba-2's selective scan, by [`recurrent_calls`].
fn ssm_scan<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for shape in
        [SsmShape { n_head: 4, head_dim: 16, n_group: 2, d_state: 8 }, SsmShape { n_head: 3, head_dim: 5, n_group: 1, d_state: 33 }]
    {
        let d_inner = shape.n_head * shape.head_dim;
        let width = d_inner + 2 * shape.n_group * shape.d_state;
        let part = StatePart { offset: 7, len: shape.state_len() };
        let mut store = b.new_kv_store(KvType::F32.into(), 1, 4, KvValues::Rows(4), part.offset + part.len + 3);
        // decays below 0, steps around 0 (the softplus on both sides of its bend)
        let a: Vec<f32> = rng.values(shape.n_head, 1.0).iter().map(|v| -0.5 - v.abs()).collect();
        let d = rng.values(shape.n_head, 1.0);
        let (a_on, d_on) = (b.upload_vector(&a).expect("vector"), b.upload_vector(&d).expect("vector"));
        // each row: the scan's inputs, then its steps
        let row_width = width + shape.n_head;
        let mut call = |store: &mut B::KvStore, values: &[f32], rows: usize, runs: &[StateRun]| {
            let xbc: Vec<f32> = values.chunks_exact(row_width).flat_map(|r| r[..width].to_vec()).collect();
            let dt: Vec<f32> = values.chunks_exact(row_width).flat_map(|r| r[width..].to_vec()).collect();
            let y = b.ssm_scan(&host(b, rows, width, &xbc), &host(b, rows, shape.n_head, &dt), &a_on, &d_on, shape, store, part, runs);
            back(b, y.expect("ssm_scan"))
        };
        let want = |values: &[f32]| naive::ssm_scan(values, row_width, &a, &d, shape);
        out.extend(recurrent_lines(format!("{shape:?}"), recurrent_calls::<B>(rng, &mut store, row_width, d_inner, &mut call, &want)));
    }
    out
}

/// The gated delta rule, by [`recurrent_calls`].
fn delta_rule<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for shape in [DeltaShape { n_k_heads: 2, n_v_heads: 4, head_dim: 16 }, DeltaShape { n_k_heads: 1, n_v_heads: 1, head_dim: 33 }] {
        let (qkv, heads) = (shape.qkv_width(), shape.n_v_heads);
        let part = StatePart { offset: 3, len: shape.state_len() };
        let mut store = b.new_kv_store(KvType::F32.into(), 1, 4, KvValues::Rows(4), part.offset + part.len + 2);
        // decays below 0 (the file's -exp(A_log)), biases around 0
        let a: Vec<f32> = rng.values(heads, 1.0).iter().map(|v| -0.2 - v.abs()).collect();
        let dt_bias = rng.values(heads, 1.0);
        let (a_on, dt_on) = (b.upload_vector(&a).expect("vector"), b.upload_vector(&dt_bias).expect("vector"));
        let eps = 1e-6;
        // each row: queries, keys, values, then the alphas and the betas
        let row_width = qkv + 2 * heads;
        let mut call = |store: &mut B::KvStore, values: &[f32], rows: usize, runs: &[StateRun]| {
            let part_of =
                |from: usize, to: usize| -> Vec<f32> { values.chunks_exact(row_width).flat_map(|r| r[from..to].to_vec()).collect() };
            let (x, alpha, beta) = (part_of(0, qkv), part_of(qkv, qkv + heads), part_of(qkv + heads, row_width));
            let (alpha, beta) = (host(b, rows, heads, &alpha), host(b, rows, heads, &beta));
            let y = b.delta_rule(&host(b, rows, qkv, &x), [&alpha, &beta], [&dt_on, &a_on], shape, eps, store, part, runs);
            back(b, y.expect("delta_rule"))
        };
        let want = |values: &[f32]| naive::delta_rule(values, row_width, &dt_bias, &a, shape, eps);
        let result = recurrent_calls::<B>(rng, &mut store, row_width, heads * shape.head_dim, &mut call, &want);
        out.extend(recurrent_lines(format!("{shape:?}"), result));
    }
    out
}

fn rms_norm_groups<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [(3usize, 96usize, 32usize), (2, 64, 64), (4, 30, 5)]
        .into_iter()
        .map(|(rows, cols, group)| {
            let (x, w) = (rng.values(rows * cols, 4.0), rng.values(cols, 1.5));
            let mut t = host(b, rows, cols, &x);
            b.rms_norm_groups(&mut t, &b.upload_vector(&w).expect("vector"), group, 1e-6).expect("rms_norm_groups");
            let want: Vec<f64> = x
                .chunks_exact(group)
                .enumerate()
                .flat_map(|(i, g)| {
                    let at = (i % (cols / group)) * group;
                    naive::rms_norm(g, &w[at..at + group], 1e-6)
                })
                .collect();
            (format!("{rows}x{cols} in groups of {group}"), nmse(&back(b, t), &want))
        })
        .collect()
}

fn softcap<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    [30.0f32, 5.0]
        .into_iter()
        .map(|cap| {
            let x = rng.values(2 * 1000, 60.0);
            let mut t = host(b, 2, 1000, &x);
            b.softcap(&mut t, cap).expect("softcap");
            let want: Vec<f64> = x.iter().map(|&a| (f64::from(a) / f64::from(cap)).tanh() * f64::from(cap)).collect();
            (format!("2x1000 at {cap}"), nmse(&back(b, t), &want))
        })
        .collect()
}

fn copy_columns<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let rows = 5;
    // (x's width, out's width, from, to): the rope part of 3 heads of 12 (offset 8) set after
    // 3 heads' latents of 20, and one run of columns
    let cases = [
        (36, 72, ColumnBlocks::heads(3, 12, 8, 4), ColumnBlocks::heads(3, 24, 20, 4)),
        (300, 290, ColumnBlocks::run(7, 283), ColumnBlocks::run(0, 283)),
    ];
    cases
        .into_iter()
        .map(|(x_cols, out_cols, from, to)| {
            let x = rng.values(rows * x_cols, 5.0);
            let before = rng.values(rows * out_cols, 1.0);
            let mut out = host(b, rows, out_cols, &before);
            b.copy_columns(&mut out, to, &host(b, rows, x_cols, &x), from).expect("copy_columns");
            let mut want = widen(&before);
            for r in 0..rows {
                for j in 0..to.count {
                    for w in 0..to.width {
                        want[r * out_cols + to.start + j * to.stride + w] = f64::from(x[r * x_cols + from.start + j * from.stride + w]);
                    }
                }
            }
            (format!("{from:?} of {rows}x{x_cols} into {to:?} of {rows}x{out_cols}"), nmse(&back(b, out), &want))
        })
        .collect()
}

fn select_rows<B: Backend>(b: &B, rng: &mut Rng) -> Vec<(String, f64)> {
    let (rows, cols) = (9, 33);
    let x = rng.values(rows * cols, 5.0);
    [vec![8], vec![0, 3, 3, 8], vec![]]
        .into_iter()
        .map(|pick: Vec<usize>| {
            let got = back(b, b.select_rows(&host(b, rows, cols, &x), &pick).expect("select_rows"));
            let want: Vec<f64> = pick.iter().flat_map(|&r| widen(&x[r * cols..(r + 1) * cols])).collect();
            (format!("rows {pick:?} of {rows}x{cols}"), nmse(&got, &want))
        })
        .collect()
}
