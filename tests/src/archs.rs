//! The architecture-model checks (`fixtures/archs/`: tiny random-weight models of every
//! architecture beyond the tiny llama and granite, ids only, made by tools/make-arch-models.py)
//! against llama.cpp's logits on the same files and ids (`fixtures/archs/golden/`, made by
//! tools/make-arch-goldens.sh).

use std::path::Path;

use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::model::{BatchEntry, Model};

use crate::{fixture, json_ids, read_f32s, read_json};

/// The largest |ours - llama.cpp| a logit may have: F32 weights, f32 KV cache and attention on
/// both sides, so only the order of f32 sums differs (the worst seen is printed by the test).
pub const BOUND: f32 = 1e-4;

/// The files of `fixtures/archs/SHA256SUMS`, without `.gguf`.
pub fn arch_files() -> Vec<String> {
    let sums = std::fs::read_to_string(fixture("archs/SHA256SUMS")).expect("fixtures/archs/SHA256SUMS");
    sums.lines().filter_map(|l| l.split_whitespace().nth(1)).map(|f| f.trim_end_matches(".gguf").to_string()).collect()
}

/// How one architecture file compares with llama.cpp.
#[derive(Debug)]
pub struct ArchComparison {
    /// The largest |ours - llama.cpp| over every prompt position and greedy step.
    pub worst: f32,
    /// Rows compared (prompt positions and greedy steps of both sequences).
    pub rows: usize,
}

/// Runs `model` (the fixture `archs/<name>.gguf`) over each golden sequence: every prompt
/// position in one batch, then llama.cpp's 32 greedy tokens one at a time. Every row's logits
/// must be within [`BOUND`] of llama.cpp's and its best token llama.cpp's; each greedy token must
/// be the best of the row before it; the whole sequence again as one batch must give the
/// one-at-a-time rows bit for bit, and so must the sequences' prompts run side by side in one
/// batch, entries interleaved (batch invariance: in a mixture of experts, rows of different
/// sequences go to different experts in the same step).
pub fn compare(model: &Model, name: &str) -> ArchComparison {
    let golden = read_json(&fixture(&format!("archs/golden/{name}.logits.json")));
    let bin = read_f32s(&fixture(&format!("archs/golden/{name}.logits.bin")));
    let n_vocab = golden["n_vocab"].as_u64().unwrap() as usize;
    assert_eq!(model.config().n_vocab, n_vocab, "{name}: vocabulary");
    let mut c = ArchComparison { worst: 0.0, rows: 0 };
    let mut check = |what: String, ours: &[f32], want: &[f32]| {
        let worst = ours.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= BOUND, "{name} {what}: max |ours - llama.cpp| = {worst:e} > {BOUND:e}");
        assert_eq!(argmax(ours), argmax(want), "{name} {what}: best token");
        c.worst = c.worst.max(worst);
        c.rows += 1;
    };
    let mut prompts = Vec::new();
    for (s, seq) in golden["sequences"].as_array().unwrap().iter().enumerate() {
        let tokens = json_ids(&seq["tokens"]);
        let gen = json_ids(&seq["gen"]);
        let row = |part: &str, i: usize| {
            let start = seq[part]["offset"].as_u64().unwrap() as usize / 4 + i * n_vocab;
            &bin[start..start + n_vocab]
        };
        let mut kv = model.new_kv_cache(KvType::F32, tokens.len() + gen.len());
        let prompt = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap(); // [tokens][n_vocab]
        prompts.push(tokens.clone());
        for p in 0..tokens.len() {
            check(format!("sequence {s} position {p}"), prompt.row(p), row("prompt_logits", p));
        }
        assert_eq!(argmax(prompt.row(tokens.len() - 1)), gen[0], "{name} sequence {s}: first greedy token");
        let mut steps = Vec::new();
        for (j, &t) in gen.iter().enumerate() {
            let pos = (tokens.len() + j) as u32;
            let o = model.forward(&mut kv, &[BatchEntry { seq: 0, token: t, pos, logits: true }]).unwrap();
            check(format!("sequence {s} greedy step {j}"), o.row(0), row("gen_logits", j));
            if let Some(&next) = gen.get(j + 1) {
                assert_eq!(argmax(o.row(0)), next, "{name} sequence {s}: greedy token {}", j + 1);
            }
            steps.push(o.row(0).to_vec());
        }
        // the prompt and the greedy tokens as one batch: the same bits as one at a time
        let all: Vec<u32> = tokens.iter().chain(&gen).copied().collect();
        let mut kv = model.new_kv_cache(KvType::F32, all.len());
        let batch = model.forward(&mut kv, &BatchEntry::sequence(0, &all, 0, true)).unwrap();
        for (j, step) in steps.iter().enumerate() {
            assert_eq!(batch.row(tokens.len() + j), &step[..], "{name} sequence {s}: greedy step {j} in one batch");
        }
    }
    // the prompts alone, then side by side in one batch, their entries interleaved, with a third
    // sequence (the first one's tokens backwards) so that two long prompts share steps; every
    // cache of one size (LongRoPE's factors follow the context's size)
    prompts.push(prompts[0].iter().rev().copied().collect());
    let longest = prompts.iter().map(Vec::len).max().unwrap();
    let n_ctx = prompts.len() * longest;
    let solo: Vec<_> = prompts
        .iter()
        .map(|tokens| {
            let mut kv = model.new_kv_cache(KvType::F32, n_ctx);
            model.forward(&mut kv, &BatchEntry::sequence(0, tokens, 0, true)).unwrap()
        })
        .collect();
    let mut batch = Vec::new();
    for p in 0..longest {
        for (seq, tokens) in prompts.iter().enumerate() {
            if let Some(&token) = tokens.get(p) {
                batch.push(BatchEntry { seq: seq as u32, token, pos: p as u32, logits: true });
            }
        }
    }
    let mut kv = model.new_kv_cache(KvType::F32, n_ctx);
    let out = model.forward(&mut kv, &batch).unwrap();
    for (i, e) in batch.iter().enumerate() {
        assert_eq!(out.row(i), solo[e.seq as usize].row(e.pos as usize), "{name}: sequence {} position {} beside the others", e.seq, e.pos);
    }
    c
}

/// Every architecture file against llama.cpp ([`compare`]); `load` puts a model on the device
/// under test, `label` names it in the report.
pub fn archs_match_llama_cpp(label: &str, load: impl Fn(&Path) -> Model) {
    let files = arch_files();
    assert!(!files.is_empty(), "fixtures/archs/SHA256SUMS lists no file");
    these_archs_match_llama_cpp(label, &files, load);
}

/// The architecture files `names` against llama.cpp ([`compare`]).
pub fn these_archs_match_llama_cpp(label: &str, names: &[impl AsRef<str>], load: impl Fn(&Path) -> Model) {
    for name in names {
        let name = name.as_ref();
        let model = load(&fixture(&format!("archs/{name}.gguf")));
        let c = compare(&model, name);
        eprintln!("{label} {name}: {} rows, max |ours - llama.cpp| = {:.3e} (bound {BOUND:.0e})", c.rows, c.worst);
    }
}
