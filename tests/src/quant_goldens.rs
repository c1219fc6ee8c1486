//! What the weight-type goldens of `fixtures/quants/` (made by tools/make-quant-goldens.sh)
//! check on a type: every tier's dequantization of a tensor against ggml's, and the tiny llama
//! in the type against llama.cpp's logits, batch invariant.

use engine::gguf::{GgufFile, TensorInfo};
use engine::kv_cache::KvType;
use engine::model::{BatchEntry, Model};
use engine::quant::{ops_for, Isa};
use sha2::{Digest, Sha256};

use crate::tiny::compare_with_golden;
use crate::{fixture, json_ids, read_json};

pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Tensor `t` of `file` dequantized on every tier this CPU has: its f32 values (little-endian)
/// must have the SHA-256 `want` (ggml's, from ggml-ref).
pub fn every_tier_dequantizes_as(file: &GgufFile, t: &TensorInfo, want: &str, label: &str) {
    let (cols, rows) = (t.row_len() as usize, t.n_rows() as usize);
    let row_bytes = t.ty.row_bytes(cols).unwrap();
    for isa in Isa::available() {
        let dequantize = ops_for(t.ty, isa).unwrap().dequantize;
        let mut values = vec![0f32; rows * cols];
        for (q, x) in file.tensor_data(t).chunks_exact(row_bytes).zip(values.chunks_exact_mut(cols)) {
            dequantize(q, x);
        }
        let values_le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(sha256(&values_le), want, "{label} {} on {isa}: values", t.name);
    }
}

/// `model` (the golden `quants/golden/NAME.logits`) against llama.cpp within the golden's bound,
/// and golden sequence `seq`'s rows the same bits in one prefill batch and one at a time; the
/// report line.
pub fn matches_quant_golden(model: &Model, name: &str, seq: usize) -> String {
    matches_quant_golden_within(model, name, seq, None)
}

/// [`matches_quant_golden`] within `bound` instead of the golden's own, where one is given.
pub fn matches_quant_golden_within(model: &Model, name: &str, seq: usize, bound: Option<f32>) -> String {
    let golden = fixture(&format!("quants/golden/{name}.logits"));
    let index = read_json(&fixture(&format!("quants/golden/{name}.logits.json")));
    let bound = bound.unwrap_or(index["bound"].as_f64().unwrap() as f32);
    let c = compare_with_golden(model, name, &golden, bound, usize::MAX);
    assert!(c.passed(), "{c:?}");
    let tokens = json_ids(&index["sequences"][seq]["tokens"]);
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let full = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
    let mut kv1 = model.new_kv_cache(KvType::F32, 512);
    for (p, &t) in tokens.iter().enumerate() {
        let one = model.forward(&mut kv1, &[BatchEntry { seq: 0, token: t, pos: p as u32, logits: true }]).unwrap();
        assert_eq!(one.row(0), full.row(p), "{name}: position {p} alone and in a prefill batch");
    }
    format!("{name}: max |ours - llama.cpp| = {:.3e} (bound {bound:.1e}), top-1 {}/{}", c.worst, c.top1_equal, c.positions)
}
