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

/// The kernel backend (run by the CPU execution harness) on latent attention with grouped,
/// biased routing and fused experts (deepseek2): its copies of column blocks, its one key/value
/// head for all queries, its expert products (about 10 s; the other files' parts are the op
/// table's and the tiny models').
#[cfg(feature = "sim")]
#[test]
fn latent_attention_on_the_simulated_gpu_matches_llama_cpp() {
    engine_tests::archs::these_archs_match_llama_cpp("sim", &["deepseek2-s1"], |path| Model::load_simulated(path).unwrap());
}

/// The kernel backend (run by the CPU execution harness) on the hybrids: the short
/// convolutions', Mamba-2's and the delta nets' states in its state pool (and Qwen3.5's gated
/// attention), continued one token at a time and batch
/// invariant, against llama.cpp.
#[cfg(feature = "sim")]
#[test]
fn hybrids_on_the_simulated_gpu_match_llama_cpp() {
    engine_tests::archs::these_archs_match_llama_cpp("sim", &["lfm2-s1", "granitehybrid-s2", "qwen35-s2"], |path| {
        Model::load_simulated(path).unwrap()
    });
}

/// A copy of the tiny qwen3 model with its metadata changed by `edit` and, when given, one more
/// tensor.
fn qwen3_with(edit: impl Fn(&str, &Value) -> Option<Value>, extra: Option<&str>) -> Arc<GgufFile> {
    edited("archs/qwen3-s1.gguf", edit, extra)
}

/// A copy of the fixture `name` with its metadata changed by `edit` and, when given, one more
/// tensor.
fn edited(name: &str, edit: impl Fn(&str, &Value) -> Option<Value>, extra: Option<&str>) -> Arc<GgufFile> {
    let file = GgufFile::open(engine_tests::fixture(name)).unwrap();
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

/// A latent-attention file converted before `attn_kv_b` was split for the absorbed form, or one
/// whose declared cache row is not the latent and the rotary key, is refused with the reason.
#[test]
fn latent_attention_files_that_cannot_run_say_why() {
    let without = |drop: &'static str| move |k: &str, v: &Value| (k != drop).then(|| v.clone());
    let err = Model::from_file(edited("archs/deepseek2-s1.gguf", without("deepseek2.attention.key_length_mla"), None)).unwrap_err();
    assert!(err.to_string().contains("attn_kv_b") && err.to_string().contains("convert"), "{err}");
    let wrong_row = |k: &str, v: &Value| Some(if k == "deepseek2.attention.key_length" { Value::U32(96) } else { v.clone() });
    let err = Model::from_file(edited("archs/deepseek2-s1.gguf", wrong_row, None)).unwrap_err().to_string();
    assert!(err.contains("deepseek2.attention.key_length") && err.contains("expected 80"), "{err}");
}
