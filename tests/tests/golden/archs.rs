//! The tiny models of the architectures beyond llama and granite (`fixtures/archs/`, shaped as
//! llama.cpp's test-llama-archs writes them, two seeds each) against llama.cpp's logits on the
//! same files and ids: every prompt position and 32 greedy steps within the bound, the same best
//! tokens, and the greedy steps bit for bit the same in one batch.

use std::sync::Arc;

use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::model::Model;
use engine::quant::GgmlType;
use engine_tests::archs::archs_match_llama_cpp;

#[test]
fn every_architecture_matches_llama_cpp() {
    archs_match_llama_cpp("cpu", |path| Model::load(path).unwrap());
}

/// A copy of the tiny qwen3 model with its metadata changed by `edit` and, when given, one more
/// tensor.
fn qwen3_with(edit: impl Fn(&str, &Value) -> Option<Value>, extra: Option<&str>) -> Arc<GgufFile> {
    let file = GgufFile::open(engine_tests::fixture("archs/qwen3-s1.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        if let Some(v) = edit(key, value) {
            w.add(key.clone(), v).unwrap();
        }
    }
    for t in file.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, file.tensor_data(t).to_vec()).unwrap();
    }
    if let Some(name) = extra {
        w.add_tensor(name, &[256], GgmlType::F32, vec![0u8; 1024]).unwrap();
    }
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

/// A tensor no graph reads is refused, naming it (running without it would give wrong results);
/// an architecture outside the table is a one-line error naming it and listing the table.
#[test]
fn unknown_tensors_and_architectures_are_errors_naming_them() {
    let keep = |_: &str, v: &Value| Some(v.clone());
    assert!(Model::from_file(qwen3_with(keep, None)).is_ok());
    let err = Model::from_file(qwen3_with(keep, Some("blk.1.attn_sinks.weight"))).unwrap_err().to_string();
    assert!(err.contains("blk.1.attn_sinks.weight") && err.contains("qwen3"), "{err}");
    let renamed = |k: &str, v: &Value| Some(if k == "general.architecture" { Value::from("gpt-j") } else { v.clone() });
    let err = Model::from_file(qwen3_with(renamed, None)).unwrap_err().to_string();
    assert!(err.contains("\"gpt-j\"") && err.contains("qwen3moe") && !err.contains('\n'), "{err}");
}
