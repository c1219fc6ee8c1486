//! The tiny models of the architectures beyond llama and granite (`fixtures/archs/`, shaped as
//! llama.cpp's test-llama-archs writes them, two seeds each) against llama.cpp's logits on the
//! same files and ids: every prompt position and 32 greedy steps within the bound, the same best
//! tokens, and the greedy steps bit for bit the same in one batch.

use std::sync::Arc;

use engine::backend::cpu::kv::CpuKvStore;
use engine::backend::{Device, KvValues};
use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::kv_cache::{KvCache, KvType, KvTypes, BLOCK_POSITIONS};
use engine::model::{BatchEntry, Model};
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

/// Latent attention's cache keeps each position's latent and rotary key once and reads the
/// values from the keys, as llama.cpp's does: the bytes per position are the keys' alone, the
/// values take the keys' type whatever value type is asked for, and the logits are the bits a
/// cache with value rows of their own gives.
#[test]
fn latent_attention_keeps_its_values_in_its_keys() {
    let model = Model::load(engine_tests::fixture("archs/deepseek2-s1.gguf")).unwrap();
    let c = model.config();
    let latent = c.latent.expect("a latent-attention file");
    assert_eq!((c.n_head_kv, c.head_dim_k, c.head_dim_v), (1, latent.kv_rank + latent.rope, latent.kv_rank));
    for key in KvType::ALL {
        let asked = KvTypes { key, value: KvType::F32 };
        assert_eq!(model.kv_bytes_per_position(asked), c.n_kv_layers() * key.row_bytes(c.head_dim_k), "{key:?}");
        let kv = model.new_kv_cache(asked, 64);
        assert_eq!(kv.kv_types(), KvTypes::from(key));
        assert_eq!(kv.block_bytes(), BLOCK_POSITIONS * model.kv_bytes_per_position(asked));
    }
    let tokens: Vec<u32> = (1..40).collect();
    let run = |mut kv: KvCache| model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap().values;
    for ty in [KvType::F32, KvType::F16] {
        let rows = CpuKvStore::with_states(ty.into(), c.n_kv_layers(), c.k_dim(), KvValues::Rows(c.v_dim()), 0);
        let own_rows = run(KvCache::with_storage(ty, 64, Device::Cpu, rows));
        assert!(run(model.new_kv_cache(ty, 64)) == own_rows, "{ty:?}: values in the keys and in rows of their own differ");
    }
    let q8 = run(model.new_kv_cache(KvType::Q8_0, 64));
    assert!(q8 == run(model.new_kv_cache(KvTypes { key: KvType::Q8_0, value: KvType::Q4_0 }, 64)), "the value type plays no part");
    assert!(q8.iter().all(|v| v.is_finite()));
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
