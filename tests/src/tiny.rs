//! The tiny-model checks every device runs (`tests/tiny_archs.rs` on the CPU, `tests/cuda.rs`
//! on a GPU): agreement with llama.cpp's logits, batch invariance bit for bit, and a head
//! limited to the first token ids giving those ids' logits.

use std::path::Path;

use engine::backend::Device;
use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::model::{BatchEntry, LoadOptions, Model};

use crate::{fixture, json_ids, read_f32s, read_json};

/// Every weight type of the fixtures.
pub const TYPES: &[&str] = &["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"];

/// How one tiny model file on a device compares with llama.cpp's logits.
#[derive(Debug)]
pub struct TinyComparison {
    pub name: String,
    /// The largest |ours - llama.cpp| over every position of the three sequences.
    pub worst: f32,
    /// The file's recommended bound (f32 attention).
    pub bound: f32,
    /// Positions whose top token is llama.cpp's, of all positions.
    pub top1_equal: usize,
    pub positions: usize,
    /// The first greedy token that differs from llama.cpp's while its margin was clear.
    pub greedy_mismatch: Option<String>,
}

impl TinyComparison {
    pub fn passed(&self) -> bool {
        self.worst <= self.bound && self.greedy_mismatch.is_none()
    }
}

/// Runs `model` (the fixture file `name`, e.g. `tiny-llama-Q4_K`) over every position of its
/// three fixture sequences and greedily onwards, at most `greedy_steps` tokens (16 are
/// recorded), while llama.cpp's choice is clear.
pub fn compare_with_llama_cpp(model: &Model, name: &str, greedy_steps: usize) -> TinyComparison {
    let tolerance = read_json(&fixture("models/tolerance.json"));
    let bound = tolerance["files"][name]["recommended"]["f32_attention"]["max_abs"].as_f64().unwrap() as f32;
    compare_with_golden(model, name, &fixture(&format!("models/golden/{name}.logits")), bound, greedy_steps)
}

/// [`compare_with_llama_cpp`] against the goldens at `golden` + `.json` / `.bin` (as llama-golden
/// writes them, over the tiny llama's or granite's three sequences)
/// with tolerance `bound`.
pub fn compare_with_golden(model: &Model, name: &str, golden: &Path, bound: f32, greedy_steps: usize) -> TinyComparison {
    let beside = |ext: &str| std::path::PathBuf::from(format!("{}.{ext}", golden.display()));
    let bin = read_f32s(&beside("bin"));
    let golden = read_json(&beside("json"));
    let mut c = TinyComparison { name: name.to_string(), worst: 0.0, bound, top1_equal: 0, positions: 0, greedy_mismatch: None };
    for seq in golden["sequences"].as_array().unwrap() {
        let tokens = json_ids(&seq["tokens"]);
        let offset = seq["logits"]["offset"].as_u64().unwrap() as usize / 4;
        let mut kv = model.new_kv_cache(KvType::F32, 512);
        // [tokens][n_vocab]
        let out = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
        assert_eq!(out.len(), tokens.len());
        for p in 0..tokens.len() {
            let want = &bin[offset + p * 512..offset + (p + 1) * 512];
            for (a, b) in out.row(p).iter().zip(want) {
                c.worst = c.worst.max((a - b).abs());
            }
            c.top1_equal += usize::from(argmax(out.row(p)) == argmax(want));
            c.positions += 1;
        }
        // greedy continuation, one token at a time, while llama.cpp's choice is clear
        let margins: Vec<f64> = seq["greedy_margins"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let greedy = json_ids(&seq["greedy"]);
        let mut next = argmax(out.row(tokens.len() - 1));
        for (j, &want) in greedy.iter().enumerate().take(greedy_steps) {
            if margins[j] < 2.0 * f64::from(bound) {
                break;
            }
            if next != want {
                c.greedy_mismatch.get_or_insert(format!("greedy token {j} after {} tokens: {next}, llama.cpp {want}", tokens.len()));
                break;
            }
            let pos = (tokens.len() + j) as u32;
            let o = model.forward(&mut kv, &[BatchEntry { seq: 0, token: next, pos, logits: true }]).unwrap();
            next = argmax(o.row(0));
        }
    }
    c
}

/// The tiny fixture files: both models in every weight type.
pub fn tiny_files() -> Vec<String> {
    ["tiny-llama", "tiny-granite"].iter().flat_map(|m| TYPES.iter().map(move |ty| format!("{m}-{ty}"))).collect()
}

/// Every position of the three fixture sequences of the tiny llama and granite models, in all
/// 13 weight types, within the file's recommended tolerance of llama.cpp's logits (f32
/// attention); greedy continuations equal while llama.cpp's margins are clear. `load` puts a
/// model on the device under test; `label` names it in the report.
pub fn tiny_models_match_llama_cpp(label: &str, load: impl Fn(&Path) -> Model) {
    let mut report = Vec::new();
    for name in tiny_files() {
        let model = load(&fixture(&format!("models/{name}.gguf")));
        let c = compare_with_llama_cpp(&model, &name, usize::MAX);
        report.push(format!("{label} {name}: max |ours - llama.cpp| = {:.3e} (bound {:.1e})", c.worst, c.bound));
        assert!(c.greedy_mismatch.is_none(), "{name}: {}", c.greedy_mismatch.unwrap_or_default());
        assert!(c.worst <= c.bound, "{}", report.join("\n"));
    }
    eprintln!("{}", report.join("\n"));
}

/// A row's logits bit for bit the same in a prefill batch, one token at a time, in uneven
/// chunks beside another sequence, and after a fork of a shared prefix (every KV cache type), on three
/// tiny models. `load` puts a model on the device under test.
pub fn tiny_models_are_batch_invariant(load: impl Fn(&Path) -> Model) {
    // every KV cache type: a quantized cache is read the same way by every batch shape too
    let runs = ["tiny-llama-Q4_K", "tiny-granite-Q8_0", "tiny-llama-F16"].into_iter().flat_map(|n| KvType::ALL.map(|ty| (n, ty)));
    for (name, ty) in runs {
        let model = load(&fixture(&format!("models/{name}.gguf")));
        let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
        let tokens = json_ids(&golden["sequences"][2]["tokens"]);
        let other = json_ids(&golden["sequences"][1]["tokens"]);

        // one prefill batch of the whole sequence
        let mut kv = model.new_kv_cache(ty, 512);
        let full = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();

        // one token at a time
        let mut kv1 = model.new_kv_cache(ty, 512);
        for (p, &t) in tokens.iter().enumerate() {
            let o = model.forward(&mut kv1, &[BatchEntry { seq: 0, token: t, pos: p as u32, logits: true }]).unwrap();
            assert_eq!(o.row(0), full.row(p), "{name} {ty:?}: position {p} alone vs in a prefill batch");
        }

        // uneven chunks, interleaved with another sequence in the same batches
        let mut kv2 = model.new_kv_cache(ty, 512);
        let mut p = 0;
        let mut q = 0;
        for chunk in [5usize, 1, 17, 3, 38] {
            let mut batch = BatchEntry::sequence(1, &tokens[p..p + chunk], p as u32, true);
            if q < other.len() {
                batch.extend(BatchEntry::sequence(7, &other[q..q + 1], q as u32, true));
                q += 1;
            }
            let o = model.forward(&mut kv2, &batch).unwrap();
            for i in 0..chunk {
                assert_eq!(o.row(i), full.row(p + i), "{name} {ty:?}: position {} in a mixed batch", p + i);
            }
            p += chunk;
        }

        // a fork of a shared prefix equals the sequence computed from scratch
        let mut kv3 = model.new_kv_cache(ty, 512);
        model.forward(&mut kv3, &BatchEntry::sequence(0, &tokens[..40], 0, false)).unwrap();
        kv3.fork(0, 1).unwrap();
        kv3.truncate(1, 33);
        let o = model.forward(&mut kv3, &BatchEntry::sequence(1, &tokens[33..], 33, true)).unwrap();
        for i in 0..tokens.len() - 33 {
            assert_eq!(o.row(i), full.row(33 + i), "{name} {ty:?}: forked sequence at {}", 33 + i);
        }
        let o = model.forward(&mut kv3, &BatchEntry::sequence(0, &tokens[40..], 40, true)).unwrap();
        assert_eq!(o.row(0), full.row(40), "{name} {ty:?}: the original after its fork diverged");
    }
}

/// A head limited to a vocabulary's first ids (`Model::limit_logits`: a draft model's) gives
/// exactly the leading columns of the whole head's logits, on a prefill batch and a decoding
/// row, for a tied and an untied output, a multiple of the panels and not; at least the whole
/// vocabulary leaves the head whole; no ids at all is refused. `load` puts a model on the
/// device under test.
pub fn limited_heads_give_the_leading_logits(load: impl Fn(&Path) -> Model) {
    for name in ["tiny-llama-Q4_K", "tiny-granite-Q8_0"] {
        let path = fixture(&format!("models/{name}.gguf"));
        let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
        let tokens = json_ids(&golden["sequences"][2]["tokens"]);
        let whole = load(&path);
        let n_vocab = whole.config().n_vocab;
        let logits = |m: &Model| {
            let mut kv = m.new_kv_cache(KvType::F32, 256);
            let prefill = m.forward(&mut kv, &BatchEntry::sequence(0, &tokens[..20], 0, true)).unwrap();
            let step = m.forward(&mut kv, &[BatchEntry { seq: 0, token: tokens[20], pos: 20, logits: true }]).unwrap();
            (prefill, step)
        };
        let (all, all_step) = logits(&whole);
        assert_eq!(all.n_vocab, n_vocab);
        for n in [n_vocab / 4, n_vocab - 33] {
            let mut limited = load(&path);
            limited.limit_logits(n).unwrap();
            let (some, some_step) = logits(&limited);
            assert_eq!((some.n_vocab, some.len(), some_step.len()), (n, 20, 1), "{name}: {n} ids");
            for i in 0..20 {
                assert_eq!(some.row(i), &all.row(i)[..n], "{name}: {n} ids, prefill row {i}");
            }
            assert_eq!(some_step.row(0), &all_step.row(0)[..n], "{name}: {n} ids, decoding row");
        }
        let mut same = load(&path);
        same.limit_logits(n_vocab + 1).unwrap();
        assert_eq!(logits(&same).0.values, all.values, "{name}: a limit past the vocabulary");
        let e = same.limit_logits(0).unwrap_err();
        assert_eq!(e.to_string(), "output head: it needs at least one token id");
    }
}

/// A head limited at load (`LoadOptions::logits_below`: the rest of the output never read nor
/// repacked) computes the bits of the same head limited after a whole load, tied and untied;
/// a limit of the vocabulary or more loads the whole head; none at all is refused.
pub fn heads_limited_at_load_give_the_bits_of_heads_limited_after(device: Device) {
    for name in ["tiny-llama-Q4_K", "tiny-granite-Q8_0"] {
        let path = fixture(&format!("models/{name}.gguf"));
        let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
        let tokens = json_ids(&golden["sequences"][2]["tokens"]);
        let logits = |m: &Model| {
            let mut kv = m.new_kv_cache(KvType::F32, 256);
            let mut out = m.forward(&mut kv, &BatchEntry::sequence(0, &tokens[..20], 0, true)).unwrap().values;
            out.extend(m.forward(&mut kv, &[BatchEntry { seq: 0, token: tokens[20], pos: 20, logits: true }]).unwrap().values);
            out
        };
        let with = |n| Model::load_with(&path, device, LoadOptions { logits_below: n });
        let n_vocab = with(None).unwrap().config().n_vocab;
        for n in [n_vocab / 4, n_vocab - 33] {
            let mut after = Model::load_on(&path, device).unwrap();
            after.limit_logits(n).unwrap();
            let at_load = with(Some(n)).unwrap();
            assert_eq!(logits(&at_load), logits(&after), "{name}: {n} ids");
        }
        let whole = logits(&Model::load_on(&path, device).unwrap());
        assert_eq!(logits(&with(Some(n_vocab)).unwrap()), whole, "{name}: a limit of the whole vocabulary");
        let e = with(Some(0)).unwrap_err();
        assert_eq!(e.to_string(), "output head: it needs at least one token id");
    }
}
