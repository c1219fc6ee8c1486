//! LoRA adapters against llama.cpp: the tests' adapters (`engine_tests::lora`, the same bytes
//! llama.cpp loaded, checked by sha256) on the tiny architecture models, every position's
//! logits within the bound of llama.cpp's with the same adapters and scales (plain, fused,
//! biased and router projections, a mixture's experts (separate, fused gate and up, biased), the
//! output and the token embeddings, F32 and F16 pairs, two adapters at once, an activated
//! adapter from its invocation on); rows with different adapters
//! in one batch keep their bits; an activated adapter's positions before its invocation are the
//! base model's, so its sequence may resume from the base model's cache; malformed or
//! mismatched adapters are errors naming the problem.

use std::sync::Arc;

use engine::backend::RowInput;
use engine::gguf::{Array, GgufFile, GgufWriter, Value};
use engine::kv_cache::KvType;
use engine::model::{BatchEntry, InputEntry, LoraScale, LoraSchedule, Model};
use engine::quant::GgmlType;
use engine_tests::archs::BOUND;
use engine_tests::lora::{self, CASES, IDS};
use engine_tests::quant_goldens::sha256;
use engine_tests::{fixture, read_f32s, read_json};

/// The adapter `name`'s file, checked to be the bytes llama.cpp ran.
fn adapter_file(name: &str) -> Arc<GgufFile> {
    let spec = lora::spec(name);
    let base = GgufFile::open(fixture(spec.base)).unwrap();
    let bytes = lora::make(&base, spec).unwrap();
    let index = read_json(&fixture("lora/cases.json"));
    assert_eq!(index["adapters"][name].as_str(), Some(sha256(&bytes).as_str()), "{name}: not the adapter llama.cpp ran");
    Arc::new(GgufFile::from_bytes(bytes).unwrap())
}

/// The logits of every position of `IDS` in one batch, the entries with adapters `lora`.
fn logits(model: &Model, lora: Option<&[LoraScale]>) -> Vec<f32> {
    let mut kv = model.new_kv_cache(KvType::F32, 256);
    let batch: Vec<InputEntry> = IDS
        .iter()
        .enumerate()
        .map(|(i, &t)| InputEntry {
            seq: 0,
            input: RowInput::Token(t),
            pos: i as u32,
            logits: true,
            non_causal: false,
            lora,
            hidden: false,
        })
        .collect();
    model.forward_inputs(&mut kv, &batch).unwrap().values
}

/// The logits of every position of `IDS` in one batch, each position with its adapters of
/// `lora`.
fn scheduled_logits(model: &Model, lora: &LoraSchedule) -> Vec<f32> {
    let mut kv = model.new_kv_cache(KvType::F32, 256);
    model.forward_scheduled(&mut kv, &BatchEntry::sequence(0, IDS, 0, true), lora).unwrap().values
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// `load` of each case's base model with its adapters (at their scales, as the model's default,
/// each from where `IDS` activates it).
fn cases_match_llama_cpp(load: impl Fn(&str) -> Model, only: &[&str]) {
    let index = read_json(&fixture("lora/cases.json"));
    assert_eq!(index["ids"].as_array().unwrap().len(), IDS.len(), "the ids llama.cpp ran");
    for case in CASES.iter().filter(|c| only.is_empty() || only.contains(&c.name)) {
        let mut model = load(case.base);
        let plain = logits(&model, None);
        for &(name, scale) in case.adapters {
            model.load_adapter_file(adapter_file(name), Some(scale)).unwrap();
        }
        let lora = model.default_schedule(IDS);
        for &(name, _) in case.adapters {
            let id = model.adapters().iter().position(|a| a.name == name).unwrap();
            let from = if lora::spec(name).invocation.is_empty() { 0 } else { case.from };
            assert_eq!(lora.start_of(id), Some(from), "{}: {name} starts where llama.cpp started it", case.name);
        }
        let ours = scheduled_logits(&model, &lora);
        let want = read_f32s(&fixture(&format!("lora/{}.logits.bin", case.name)));
        let worst = max_diff(&ours, &want);
        let moved = max_diff(&plain, &want);
        // F16 pairs: ggml rounds each low-rank product's input to f16 (a relative 2^-11, twice),
        // the engine dots f16 weights with f32 inputs; so the difference scales with the
        // corrections
        let f16 = case.adapters.iter().any(|(name, _)| lora::spec(name).ty == GgmlType::F16);
        let bound = if f16 { moved / 1024.0 } else { BOUND };
        eprintln!("{}: max |ours - llama.cpp| = {worst:.3e} (bound {bound:.1e}), the adapters move logits by up to {moved:.3}", case.name);
        assert!(worst <= bound, "{}: max |ours - llama.cpp| = {worst:e} > {bound:e}", case.name);
        // the adapters change the logits far beyond the bound: a correction left out would fail
        assert!(moved > 100.0 * BOUND, "{}: the adapters change the logits by only {moved}", case.name);
    }
}

#[test]
fn adapters_match_llama_cpp() {
    cases_match_llama_cpp(|base| Model::load(fixture(base)).unwrap(), &[]);
}

/// The kernel backend (the CUDA kernels run by the CPU execution harness) with two adapters, and
/// with a mixture's experts corrected.
#[cfg(feature = "sim")]
#[test]
fn adapters_on_the_simulated_gpu_match_llama_cpp() {
    cases_match_llama_cpp(|base| Model::load_simulated(fixture(base)).unwrap(), &["llama-all", "llama-two", "qwen2moe-experts"]);
}

/// Three sequences in one batch, each with its own adapters (both, none, one at another
/// scale), interleaved: every row has the bits it has when its sequence runs alone, and the
/// row without adapters the bits of the model without any loaded.
#[test]
fn rows_with_different_adapters_share_a_batch_and_keep_their_bits() {
    let path = fixture("archs/llama-s1.gguf");
    let bare = logits(&Model::load(&path).unwrap(), None);
    let mut model = Model::load(&path).unwrap();
    let all = model.load_adapter_file(adapter_file("llama-all"), None).unwrap();
    let qv = model.load_adapter_file(adapter_file("llama-qv"), None).unwrap();
    assert!(model.default_lora().is_empty(), "loaded without a scale: not used by default");
    let sets: [&[LoraScale]; 3] =
        [&[LoraScale { adapter: all, scale: 0.5 }, LoraScale { adapter: qv, scale: 2.0 }], &[], &[LoraScale { adapter: qv, scale: -1.0 }]];
    let alone: Vec<Vec<f32>> = sets.iter().map(|s| logits(&model, Some(s))).collect();
    assert_eq!(alone[1], bare, "no adapter: the model's own bits");
    assert!(max_diff(&alone[0], &bare) > 0.01 && max_diff(&alone[2], &bare) > 0.01);
    let mut kv = model.new_kv_cache(KvType::F32, 256);
    let mut batch = Vec::new();
    for (i, &t) in IDS.iter().enumerate() {
        for (s, set) in sets.iter().enumerate() {
            batch.push(InputEntry {
                seq: s as u32,
                input: RowInput::Token(t),
                pos: i as u32,
                logits: true,
                non_causal: false,
                lora: Some(set),
                hidden: false,
            });
        }
    }
    let out = model.forward_inputs(&mut kv, &batch).unwrap();
    let n = model.config().n_vocab;
    for (r, _) in batch.iter().enumerate() {
        let (pos, s) = (r / sets.len(), r % sets.len());
        assert_eq!(out.row(r), &alone[s][pos * n..(pos + 1) * n], "sequence {s} position {pos}");
    }
}

/// An activated adapter runs from the last occurrence of its invocation in the prompt on: the
/// positions before it have the bits of the model without adapters, so a sequence resumed from
/// the base model's cache of them gets the bits of one batch; without its invocation the
/// prompt runs as without the adapter, and rows left to the model's default (`lora: None`)
/// never run it.
#[test]
fn an_activated_adapter_runs_from_its_invocation_on_over_the_base_models_cache() {
    let path = fixture("archs/llama-s1.gguf");
    let mut model = Model::load(&path).unwrap();
    let bare = logits(&model, None);
    let id = model.load_adapter_file(adapter_file("llama-alora"), Some(1.0)).unwrap();
    assert_eq!(model.adapters()[id].invocation, [7, 33]);
    assert_eq!(logits(&model, None), bare, "rows without a schedule run no activated adapter");
    let lora = model.default_schedule(IDS);
    let from = lora.start_of(id).unwrap() as usize;
    assert_eq!(from, 7);
    let n = model.config().n_vocab;
    let whole = scheduled_logits(&model, &lora);
    assert_eq!(whole[..from * n], bare[..from * n], "before the invocation: the base model's bits");
    assert!(max_diff(&whole[from * n..], &bare[from * n..]) > 0.1, "from it on: corrected");
    // the base model's cache of the positions before the invocation, then the rest
    let mut kv = model.new_kv_cache(KvType::F32, 256);
    model.forward(&mut kv, &BatchEntry::sequence(0, &IDS[..from], 0, false)).unwrap();
    let rest = model.forward_scheduled(&mut kv, &BatchEntry::sequence(0, &IDS[from..], from as u32, true), &lora).unwrap();
    assert_eq!(rest.values, whole[from * n..], "resumed from the base model's cache: the bits of one batch");
    // a prompt without the invocation runs as the base model
    let without: Vec<u32> = IDS.iter().map(|&t| if t == 33 { 34 } else { t }).collect();
    let off = model.default_schedule(&without);
    assert!(off.is_empty(), "no invocation: not run");
    // the last occurrence counts
    let twice: Vec<u32> = IDS.iter().chain(&[7, 33, 2]).copied().collect();
    assert_eq!(model.default_schedule(&twice).start_of(id), Some(16));
}

/// A mixture's experts corrected for some rows of a batch only: each row has the bits of its
/// sequence alone (the slots of a row without the adapter are left as they are, whichever
/// experts the rows share).
#[test]
fn expert_corrections_follow_each_rows_adapters() {
    let mut model = Model::load(fixture("archs/qwen2moe-s1.gguf")).unwrap();
    let id = model.load_adapter_file(adapter_file("qwen2moe-experts"), None).unwrap();
    let sets: [&[LoraScale]; 2] = [&[LoraScale { adapter: id, scale: 1.5 }], &[]];
    let alone: Vec<Vec<f32>> = sets.iter().map(|s| logits(&model, Some(s))).collect();
    assert!(max_diff(&alone[0], &alone[1]) > 0.1, "the experts' adapter changes the logits");
    let mut kv = model.new_kv_cache(KvType::F32, 256);
    let batch: Vec<InputEntry> = (0..IDS.len() * 2)
        .map(|r| {
            let (pos, s) = (r / 2, r % 2);
            InputEntry {
                seq: s as u32,
                input: RowInput::Token(IDS[pos]),
                pos: pos as u32,
                logits: true,
                non_causal: false,
                lora: Some(sets[s]),
                hidden: false,
            }
        })
        .collect();
    let out = model.forward_inputs(&mut kv, &batch).unwrap();
    let n = model.config().n_vocab;
    for r in 0..batch.len() {
        let (pos, s) = (r / 2, r % 2);
        assert_eq!(out.row(r), &alone[s][pos * n..(pos + 1) * n], "sequence {s} position {pos}");
    }
}

/// A copy of `file` with its metadata changed by `edit`, its tensors kept by `keep`, and what
/// `more` adds.
fn edited(
    file: &GgufFile,
    edit: impl Fn(&str, &Value) -> Option<Value>,
    keep: impl Fn(&str) -> bool,
    more: impl FnOnce(&mut GgufWriter),
) -> Arc<GgufFile> {
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        if let Some(v) = edit(key, value) {
            w.add(key.clone(), v).unwrap();
        }
    }
    for t in file.tensors().iter().filter(|t| keep(&t.name)) {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, file.tensor_data(t).to_vec()).unwrap();
    }
    more(&mut w);
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

/// `file` as an adapter of `arch`.
fn relabelled(arch: &'static str) -> impl Fn(&str, &Value) -> Option<Value> {
    move |k, v| Some(if k == "general.architecture" { Value::from(arch) } else { v.clone() })
}

#[test]
fn mismatched_or_malformed_adapters_are_errors_naming_the_problem() {
    let mut llama = Model::load(fixture("archs/llama-s1.gguf")).unwrap();
    let good = adapter_file("llama-all");
    let same = |_: &str, v: &Value| Some(v.clone());
    let all = |_: &str| true;
    let err = |model: &mut Model, file: Arc<GgufFile>| model.load_adapter_file(file, None).unwrap_err().to_string();
    // another architecture's adapter
    let e = err(&mut llama, adapter_file("phi3-fused"));
    assert!(e.contains("\"phi3\"") && e.contains("\"llama\""), "{e}");
    // a model, not an adapter
    let e = err(&mut llama, Arc::new(GgufFile::open(fixture("archs/llama-s1.gguf")).unwrap()));
    assert!(e.contains("general.type") && e.contains("model"), "{e}");
    // half a pair
    let e = err(&mut llama, edited(&good, same, |n| n != "blk.1.attn_k.weight.lora_b", |_| {}));
    assert!(e.contains("blk.1.attn_k.weight") && e.contains("only one"), "{e}");
    // an activated LoRA's invocation: u32 ids of the model's vocabulary
    for (bad, says) in [(Value::Array(Array::I32(vec![1, 2])), "u32"), (Value::Array(Array::U32(vec![1, 128])), "id 128")] {
        let alora = edited(&good, same, all, |w| {
            w.add("adapter.alora.invocation_tokens", bad).unwrap();
        });
        let e = err(&mut llama, alora);
        assert!(e.contains("adapter.alora.invocation_tokens") && e.contains(says), "{e}");
    }
    // pairs that do not fit: a rank-4 `a` with a rank-8 `b`
    let qv = adapter_file("llama-qv");
    let b8 = good.tensor("blk.0.attn_q.weight.lora_b").unwrap();
    let mixed = edited(
        &qv,
        same,
        |n| n != "blk.0.attn_q.weight.lora_b",
        |w| {
            w.add_tensor(b8.name.clone(), &b8.dims, b8.ty, good.tensor_data(b8).to_vec()).unwrap();
        },
    );
    let e = err(&mut llama, mixed);
    assert!(e.contains("blk.0.attn_q.weight.lora_b") && e.contains("shape"), "{e}");
    // a tensor the engine does not adapt: latent attention's absorbed key matrices
    let mut moe = Model::load(fixture("archs/deepseek2-s1.gguf")).unwrap();
    let base = GgufFile::open(fixture("archs/deepseek2-s1.gguf")).unwrap();
    let k_b = base.tensor("blk.0.attn_k_b.weight").expect("absorbed key matrices");
    let (cols, rows) = (k_b.dims[0], k_b.dims[1..].iter().product::<u64>());
    let absorbed = edited(&adapter_file("deepseek2-fused-experts"), same, all, |w| {
        w.add_tensor("blk.0.attn_k_b.weight.lora_a", &[cols, 4], GgmlType::F32, vec![0u8; cols as usize * 16]).unwrap();
        w.add_tensor("blk.0.attn_k_b.weight.lora_b", &[4, rows], GgmlType::F32, vec![0u8; rows as usize * 16]).unwrap();
    });
    let e = err(&mut moe, absorbed);
    assert!(e.contains("blk.0.attn_k_b.weight") && e.contains("not a projection"), "{e}");
    // a model whose output is its token embeddings: their adapter would correct both
    let tied_base = GgufFile::open(fixture("archs/gemma2-s1.gguf")).unwrap();
    assert!(tied_base.tensor("output.weight").is_none(), "gemma2 ties its output");
    let mut tied = Model::load(fixture("archs/gemma2-s1.gguf")).unwrap();
    let emb = edited(&good, relabelled("gemma2"), |n| n.starts_with("token_embd"), |_| {});
    let e = err(&mut tied, emb);
    assert!(e.contains("token_embd.weight") && e.contains("output"), "{e}");
    // nothing was loaded by the failures
    assert!(llama.adapters().is_empty() && moe.adapters().is_empty() && tied.adapters().is_empty());
    // a batch naming an adapter that is not loaded, or one twice
    let id = llama.load_adapter_file(good, None).unwrap();
    for bad in
        [&[LoraScale { adapter: id + 1, scale: 1.0 }][..], &[LoraScale { adapter: id, scale: 1.0 }, LoraScale { adapter: id, scale: 0.5 }]]
    {
        let mut kv = llama.new_kv_cache(KvType::F32, 64);
        let entry =
            InputEntry { seq: 0, input: RowInput::Token(1), pos: 0, logits: true, non_causal: false, lora: Some(bad), hidden: false };
        let e = llama.forward_inputs(&mut kv, &[entry]).unwrap_err().to_string();
        assert!(e.contains("adapter"), "{e}");
        assert_eq!(kv.seq_len(0), 0, "a refused batch writes nothing");
    }
}
