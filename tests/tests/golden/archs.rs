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
/// head for all queries read from the keys, its expert products; and on Llama 4's layers (norms
/// after RoPE, unrotated layers, experts weighing their inputs) (about 15 s; the other files'
/// parts are the op table's and the tiny models').
#[cfg(feature = "sim")]
#[test]
fn latent_attention_and_llama4_on_the_simulated_gpu_match_llama_cpp() {
    engine_tests::archs::these_archs_match_llama_cpp("sim", &["deepseek2-s1", "llama4-s2"], |path| Model::load_simulated(path).unwrap());
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

/// Llama 4's layers as llama.cpp reads its file: every fourth without RoPE and with the
/// temperature tuning (1 below position 8191), the others' queries and keys normalised after RoPE;
/// the window layers attend within their query's chunk of 8192 positions (not the file's 32);
/// the shared expert as wide as a routed one (not the file's 64); a window of 0 turns it all off.
#[test]
fn llama4_reads_its_chunks_rotations_and_experts_as_llama_cpp() {
    use engine::model::config::Window;
    let model = Model::load(engine_tests::fixture("archs/llama4-s1.gguf")).unwrap();
    let c = model.config();
    assert_eq!((0..4).map(|l| c.layer_rotates(l)).collect::<Vec<_>>(), [true, true, true, false]);
    assert_eq!((0..4).map(|l| c.layer_has_temperature(l)).collect::<Vec<_>>(), [false, false, false, true]);
    assert_eq!(
        (0..4).map(|l| c.layer_window(l)).collect::<Vec<_>>(),
        [Some(Window::Chunk(8192)); 3].into_iter().chain([None]).collect::<Vec<_>>()
    );
    assert!(c.unit_qk_norm_after_rope);
    assert_eq!(c.experts.map(|x| (x.n_ff, x.n_ff_shared, x.weights_on_input)), Some((128, 128, true)));
    // ln(floor((pos + 1) / 8192) + 1) · 0.1 + 1
    assert_eq!([8190, 8191, 16383].map(|p| c.query_scale(p)), [1.0, (2f64.ln() * 0.1 + 1.0) as f32, (3f64.ln() * 0.1 + 1.0) as f32]);
    assert_eq!([0, 8191, 8192, 20000].map(|p| Window::Chunk(8192).first(p)), [0, 0, 8192, 16384]);
    assert_eq!([0, 7, 8, 20].map(|p| Window::Last(8).first(p)), [0, 0, 1, 13]);
    // seed 2: the pattern key makes every other layer a chunked one
    let s2 = Model::load(engine_tests::fixture("archs/llama4-s2.gguf")).unwrap();
    assert_eq!((0..4).map(|l| s2.config().layer_window(l).is_some()).collect::<Vec<_>>(), [true, false, true, false]);
    // a window of 0: every layer rotated, whole, without temperature
    let off = |k: &str, v: &Value| Some(if k == "llama4.attention.sliding_window" { Value::U32(0) } else { v.clone() });
    let plain = Model::from_file(edited("archs/llama4-s1.gguf", off, None)).unwrap();
    let p = plain.config();
    assert!((0..4).all(|l| p.layer_rotates(l) && p.layer_window(l).is_none() && !p.layer_has_temperature(l)));
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
