//! Quantization against ggml's own output: every tensor of every fixture model dequantizes bit
//! for bit like ggml on every SIMD tier, our K-quant quantizers reproduce `llama-quantize`'s
//! blocks byte for byte from the F32 model, and the Q8_0 / Q8_1 / Q8_K activation blocks equal
//! ggml's reference quantizers byte for byte.

use engine::gguf::GgufFile;
use engine::quant::blocks::BlockQ8K;
use engine::quant::k_quants::q8_k;
use engine::quant::{ops_for, q8_0, q8_1, GgmlType, Isa, QK_K};
use engine_tests::{fixture, read_f32s, read_json};
use sha2::{Digest, Sha256};

const K_TYPES: [GgmlType; 5] = [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

fn model(name: &str) -> GgufFile {
    GgufFile::open(fixture(&format!("models/{name}"))).unwrap()
}

fn sha256_f32(values: &[f32]) -> String {
    let mut h = Sha256::new();
    for v in values {
        h.update(v.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn dequantize(file: &GgufFile, name: &str, isa: Isa) -> Vec<f32> {
    let t = file.tensor(name).unwrap_or_else(|| panic!("tensor {name} missing"));
    let ops = ops_for(t.ty, isa).unwrap();
    let (row_len, n_rows) = (t.row_len() as usize, t.n_rows() as usize);
    let row_bytes = t.ty.row_bytes(row_len).unwrap();
    let mut out = vec![0.0f32; row_len * n_rows];
    for (src, dst) in file.tensor_data(t).chunks_exact(row_bytes).zip(out.chunks_exact_mut(row_len)) {
        (ops.dequantize)(src, dst);
    }
    out
}

#[test]
fn every_fixture_tensor_dequantizes_exactly_like_ggml() {
    let golden = read_json(&fixture("models/dequant/sha256.json"));
    let files = golden.as_object().unwrap();
    assert_eq!(files.len(), 26, "fixture set has 26 models");
    let mut checked = 0;
    for (file_name, tensors) in files {
        let file = model(file_name);
        let tensors = tensors.as_object().unwrap();
        assert_eq!(tensors.len(), file.tensors().len(), "{file_name}: tensor count");
        for (name, want) in tensors {
            let info = file.tensor(name).unwrap();
            assert_eq!(info.ty.name(), want["type"].as_str().unwrap(), "{file_name} {name}: type");
            let ne: Vec<u64> = want["ne"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
            assert_eq!(info.dims, ne, "{file_name} {name}: shape");
            for isa in Isa::available() {
                let got = sha256_f32(&dequantize(&file, name, isa));
                assert_eq!(got, want["sha256_f32"].as_str().unwrap(), "{file_name} {name} on {isa}");
                checked += 1;
            }
        }
    }
    eprintln!("{checked} tensor dequantizations matched ggml");
}

#[test]
fn full_values_of_a_tensor_per_quant_type_match_bitwise() {
    for ty in ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"] {
        let file = model(&format!("tiny-llama-{ty}.gguf"));
        let want = read_f32s(&fixture(&format!("models/dequant/tiny-llama-{ty}.blk.0.attn_q.weight.f32")));
        for isa in Isa::available() {
            let got = dequantize(&file, "blk.0.attn_q.weight", isa);
            assert_eq!(got.len(), want.len());
            if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
                panic!(
                    "{ty} on {isa}: value {i} is {} (bits {:08x}), ggml has {} ({:08x})",
                    got[i],
                    got[i].to_bits(),
                    want[i],
                    want[i].to_bits()
                );
            }
        }
    }
}

/// Every weight type the fixture models were written in (besides F32).
const QUANTIZED_FILE_TYPES: [GgmlType; 12] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// `llama-quantize --pure` (no importance matrix) made every file from the F32 model with
/// ggml's reference quantizers; ours reproduce every block byte for byte.
#[test]
fn quantization_reproduces_llama_quantize() {
    for m in ["tiny-llama", "tiny-granite"] {
        let src = model(&format!("{m}-F32.gguf"));
        for ty in QUANTIZED_FILE_TYPES {
            let file = format!("{m}-{}.gguf", ty.name());
            let f = model(&file);
            let quantize = ops_for(ty, Isa::Scalar).unwrap().quantize.expect("a type with a quantizer");
            let block_bytes = ty.type_size();
            let (mut blocks, mut bad) = (0usize, Vec::new());
            for t in f.tensors().iter().filter(|t| t.ty == ty) {
                let want = f.tensor_data(t);
                let st = src.tensor(&t.name).unwrap();
                assert_eq!(st.ty, GgmlType::F32);
                let raw = src.tensor_data(st);
                let x: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
                let mut got = vec![0u8; want.len()];
                quantize(&x, &mut got);
                for (i, (g, w)) in got.chunks_exact(block_bytes).zip(want.chunks_exact(block_bytes)).enumerate() {
                    blocks += 1;
                    if g != w && bad.len() < 5 {
                        bad.push(format!("{} block {i}: {g:?} vs {w:?}", t.name));
                    }
                }
            }
            assert!(blocks > 0, "{file}: no {} tensors", ty.name());
            assert!(bad.is_empty(), "{file}: blocks differ from llama-quantize:\n{}", bad.join("\n"));
        }
    }
}

/// The activation vectors of `act-quant/`, and the expected bytes of one output kind.
fn act_cases(kind: &str) -> Vec<(String, Vec<f32>, Vec<u8>)> {
    let index = read_json(&fixture("models/act-quant/index.json"));
    let mut cases = Vec::new();
    for (name, v) in index["vectors"].as_object().unwrap() {
        let x = read_f32s(&fixture(&format!("models/act-quant/{}", v["file"].as_str().unwrap())));
        assert_eq!(x.len(), v["n"].as_u64().unwrap() as usize);
        let out = v["outputs"][kind]["file"].as_str().unwrap();
        let want = std::fs::read(fixture(&format!("models/act-quant/{out}"))).unwrap();
        cases.push((name.clone(), x, want));
    }
    assert_eq!(cases.len(), 8);
    cases
}

/// The differing bytes, as `offset: got vs want`, for a failure message.
fn diff(got: &[u8], want: &[u8]) -> String {
    let d: Vec<String> =
        (0..got.len()).filter(|&i| got[i] != want[i]).take(20).map(|i| format!("{i}: {} vs {}", got[i], want[i])).collect();
    d.join(", ")
}

#[test]
fn q8_k_activations_are_byte_exact() {
    for (name, x, want) in act_cases("q8_K_ref") {
        let mut got = vec![0u8; want.len()];
        q8_k::quantize_row(&x, &mut got);
        assert!(got == want, "{name}: {}", diff(&got, &want));
    }
}

#[test]
fn q8_0_and_q8_1_activations_are_byte_exact() {
    for (kind, quantize) in [("q8_0_ref", q8_0::quantize_row as fn(&[f32], &mut [u8])), ("q8_1_ref", q8_1::quantize_row)] {
        for (name, x, want) in act_cases(kind) {
            let mut got = vec![0u8; want.len()];
            quantize(&x, &mut got);
            assert!(got == want, "{kind} {name}: {}", diff(&got, &want));
        }
    }
}

/// What llama.cpp's x86 CPU backend runs on matmul activations (`id = 127/amax`, halves to
/// even), byte for byte, including the tie block of `vec3` where it differs from `_ref`.
#[test]
fn q8_0_and_q8_1_matmul_activations_are_byte_exact() {
    for (kind, quantize) in [("q8_0_cpu", q8_0::quantize_activations as fn(&[f32], &mut [u8])), ("q8_1_cpu", q8_1::quantize_activations)] {
        for (name, x, want) in act_cases(kind) {
            let mut got = vec![0u8; want.len()];
            quantize(&x, &mut got);
            assert!(got == want, "{kind} {name}: {}", diff(&got, &want));
        }
    }
}

/// The integer dot of every row of each real K-quant tensor with Q8_K activations equals the
/// f64 dot of the dequantized operands to 1e-5 of `Σ|w_i a_i|`.
#[test]
fn dot_products_on_real_tensors_match_exact_math() {
    let a = read_f32s(&fixture("models/act-quant/vec0-256.f32"));
    let mut ab = vec![0u8; std::mem::size_of::<BlockQ8K>()];
    q8_k::quantize_row(&a, &mut ab);
    let mut ad = vec![0.0f32; QK_K];
    q8_k::dequantize_row(&ab, &mut ad);
    for ty in K_TYPES {
        let f = model(&format!("tiny-llama-{}.gguf", ty.name()));
        let bytes = f.tensor_data(f.tensor("blk.0.attn_q.weight").unwrap());
        let ops = ops_for(ty, Isa::Scalar).unwrap();
        assert_eq!(ops.vec_dot_type, GgmlType::Q8_K);
        for row in bytes.chunks_exact(ty.type_size()) {
            let mut w = vec![0.0f32; QK_K];
            (ops.dequantize)(row, &mut w);
            let exact: f64 = w.iter().zip(&ad).map(|(&p, &q)| p as f64 * q as f64).sum();
            let scale: f64 = w.iter().zip(&ad).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
            let got = (ops.vec_dot)(row, &ab) as f64;
            assert!((got - exact).abs() <= 1e-5 * scale, "{}: {got} vs {exact}", ty.name());
        }
    }
}
