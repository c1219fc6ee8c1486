//! The table-level weight types (IQ4_NL, IQ4_XS, MXFP4) against llama.cpp: our quantizers write
//! `llama-quantize --pure`'s blocks byte for byte from the tiny llama's F32 file, every SIMD tier
//! dequantizes them bit for bit as ggml does, and the model in each type gives llama.cpp's logits
//! and greedy tokens (goldens in `tests/fixtures/quants/`, made by tools/make-quant-goldens.sh).

use std::sync::Arc;

use engine::gguf::GgufFile;
use engine::kv_cache::KvType;
use engine::model::{BatchEntry, Model};
use engine::quant::requantize::{file_type_of, quantize_pure};
use engine::quant::{ops_for, GgmlType, Isa};
use engine_tests::tiny::compare_with_golden;
use engine_tests::{fixture, json_ids, read_json};
use sha2::{Digest, Sha256};

const TYPES: [GgmlType; 3] = [GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4];

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

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
            let (cols, rows) = (t.row_len() as usize, t.n_rows() as usize);
            let row_bytes = t.ty.row_bytes(cols).unwrap();
            for isa in Isa::available() {
                let dequantize = ops_for(t.ty, isa).unwrap().dequantize;
                let mut values = vec![0f32; rows * cols];
                for (q, x) in file.tensor_data(t).chunks_exact(row_bytes).zip(values.chunks_exact_mut(cols)) {
                    dequantize(q, x);
                }
                let values_le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                assert_eq!(sha256(&values_le), want["sha256_f32"].as_str().unwrap(), "{ty} {} on {isa}: values", t.name);
            }
        }
        let whole = read_json(&fixture(&format!("quants/tiny-llama-{ty}.tensors.json")))["sha256_file"].clone();
        assert_eq!(sha256(&bytes), whole.as_str().unwrap(), "{ty}: the file llama-quantize writes");
    }
}

#[test]
fn the_tiny_llama_in_each_type_matches_llama_cpp_and_is_batch_invariant() {
    let mut report = Vec::new();
    for ty in TYPES {
        let model = Model::from_file(quantized(ty).1).unwrap();
        let name = format!("tiny-llama-{ty}");
        let golden = fixture(&format!("quants/golden/{name}.logits"));
        let bound = read_json(&fixture(&format!("quants/golden/{name}.logits.json")))["bound"].as_f64().unwrap() as f32;
        let c = compare_with_golden(&model, &name, &golden, bound, usize::MAX);
        report
            .push(format!("{name}: max |ours - llama.cpp| = {:.3e} (bound {bound:.1e}), top-1 {}/{}", c.worst, c.top1_equal, c.positions));
        assert!(c.passed(), "{c:?}");

        // the longest sequence's rows: the same bits in one prefill batch and one at a time
        let tokens = json_ids(&read_json(&fixture(&format!("quants/golden/{name}.logits.json")))["sequences"][2]["tokens"]);
        let mut kv = model.new_kv_cache(KvType::F32, 512);
        let full = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
        let mut kv1 = model.new_kv_cache(KvType::F32, 512);
        for (p, &t) in tokens.iter().enumerate() {
            let one = model.forward(&mut kv1, &[BatchEntry { seq: 0, token: t, pos: p as u32, logits: true }]).unwrap();
            assert_eq!(one.row(0), full.row(p), "{name}: position {p} alone and in a prefill batch");
        }
    }
    eprintln!("{}", report.join("\n"));
}
