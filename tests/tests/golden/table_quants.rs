//! The table-level weight types (IQ4_NL, IQ4_XS, MXFP4) against llama.cpp: our quantizers write
//! `llama-quantize --pure`'s blocks byte for byte from the tiny llama's F32 file, every SIMD tier
//! dequantizes them bit for bit as ggml does, and the model in each type gives llama.cpp's logits
//! and greedy tokens (goldens in `tests/fixtures/quants/`, made by tools/make-quant-goldens.sh).

use std::sync::Arc;

use engine::gguf::GgufFile;
use engine::model::Model;
use engine::quant::requantize::{file_type_of, quantize_pure};
use engine::quant::GgmlType;
use engine_tests::quant_goldens::{every_tier_dequantizes_as, matches_quant_golden, sha256};
use engine_tests::{fixture, read_json};

const TYPES: [GgmlType; 3] = [GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4];

fn golden_tensors(ty: GgmlType) -> serde_json::Value {
    read_json(&fixture(&format!("quants/tiny-llama-{ty}.tensors.json")))["tensors"].clone()
}

/// The tiny llama in `ty`, quantized here from its F32 file as `engine-cli quantize` does
/// (`llama-quantize --pure`'s file, byte for byte): its bytes and the file.
fn quantized(ty: GgmlType) -> (Vec<u8>, Arc<GgufFile>) {
    let src = GgufFile::open(fixture("models/tiny-llama-F32.gguf")).unwrap();
    let bytes = quantize_pure(&src, ty, file_type_of(ty).unwrap()).unwrap().to_bytes().unwrap();
    (bytes.clone(), Arc::new(GgufFile::from_bytes(bytes).unwrap()))
}

#[test]
fn our_quantizers_write_llama_quantizes_blocks_and_every_tier_reads_them_as_ggml() {
    for ty in TYPES {
        let (bytes, file) = quantized(ty);
        let golden = golden_tensors(ty);
        assert_eq!(golden.as_object().unwrap().len(), file.tensors().len(), "{ty}: tensor count");
        for t in file.tensors() {
            let want = &golden[&t.name];
            assert_eq!(sha256(file.tensor_data(t)), want["sha256_blocks"].as_str().unwrap(), "{ty} {}: blocks", t.name);
            every_tier_dequantizes_as(&file, t, want["sha256_f32"].as_str().unwrap(), &ty.to_string());
        }
        let whole = read_json(&fixture(&format!("quants/tiny-llama-{ty}.tensors.json")))["sha256_file"].clone();
        assert_eq!(sha256(&bytes), whole.as_str().unwrap(), "{ty}: the file llama-quantize writes");
    }
}

#[test]
fn the_tiny_llama_in_each_type_matches_llama_cpp_and_is_batch_invariant() {
    let report: Vec<String> =
        TYPES.iter().map(|&ty| matches_quant_golden(&Model::from_file(quantized(ty).1).unwrap(), &format!("tiny-llama-{ty}"), 2)).collect();
    eprintln!("{}", report.join("\n"));
}
