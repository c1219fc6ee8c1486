//! End to end on models shaped like the ones people run (random weights, Q4_K_M-like mix, made
//! in memory on the machine that measures): prompt processing, decoding one sequence and
//! several at once, and one guard scan of the 9 harm risks, each timed as a user would see it
//! (logits back on the host after every step).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use engine::backend::Device;
use engine::gguf::GgufFile;
use engine::guard::{Evaluator, EvaluatorOptions, GuardInput, GuardRequest};
use engine::kv_cache::KvType;
use engine::logprobs::argmax;
use engine::model::{BatchEntry, Model};
use engine_tests::shaped::{self, Shape};

use crate::speed::sig3;

/// HBM bandwidth the decode speed is measured against (an H200's 4.8 TB/s peak is quoted by
/// NVIDIA; 4.3 TB/s is what a streaming kernel reaches on it).
const HBM_BYTES_PER_SECOND: f64 = 4.3e12;

/// What the end-to-end section runs.
pub struct EndToEndScope {
    pub shapes: &'static [Shape],
    /// Prompt tokens of the prefill measurement; decode steps of one sequence.
    pub pp: usize,
    pub tg: usize,
    /// Sequences decoded together, and their steps.
    pub streams: usize,
    pub stream_steps: usize,
    /// The guard's shape (over the Guardian file's vocabulary), and the risks it is asked for
    /// (none: a scan of the 9 harm risks).
    pub guard: Shape,
    pub guard_risks: &'static [&'static str],
}

/// Loads a file on the device under test.
pub type Loader<'a> = &'a dyn Fn(Arc<GgufFile>) -> Result<Model, String>;

/// Prompt tokens: any ids the template vocabulary holds.
fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i * 7919 % 500 + 3) as u32).collect()
}

/// The last row of a forward pass's logits, checked finite.
fn last_row(model: &Model, kv: &mut engine::kv_cache::KvCache, batch: &[BatchEntry]) -> Result<Vec<f32>, String> {
    let logits = model.forward(kv, batch).map_err(|e| e.to_string())?;
    let rows = batch.iter().filter(|e| e.logits).count();
    let row = logits.row(rows - 1).to_vec();
    if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
        return Err(format!("a logit is {bad}"));
    }
    Ok(row)
}

/// Prints the section; returns the problems met.
pub fn end_to_end(load: Loader<'_>, s: &EndToEndScope, template: &Path, guardian: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let template = match GgufFile::open(template) {
        Ok(t) => t,
        Err(e) => return vec![format!("{}: {e}", template.display())],
    };
    for shape in s.shapes {
        if let Err(e) = one_shape(load, s, shape, &template) {
            println!("{}: FAILED: {e}", shape.name);
            problems.push(format!("{}: {e}", shape.name));
        }
    }
    if let Err(e) = guard_scan(load, s, guardian) {
        println!("guard scan: FAILED: {e}");
        problems.push(format!("guard scan: {e}"));
    }
    problems
}

fn one_shape(load: Loader<'_>, s: &EndToEndScope, shape: &Shape, template: &GgufFile) -> Result<(), String> {
    let t0 = Instant::now();
    let file = shaped::make(shape, template)?;
    let made = t0.elapsed().as_secs_f64();
    // what one decode step reads: every matrix, but one row of an untied embedding
    let embd = file.tensor("token_embd.weight").map_or(0, |t| t.n_bytes);
    let per_token = file.tensor_data_bytes() - if shape.tied { 0 } else { embd };
    let t0 = Instant::now();
    let model = load(Arc::clone(&file))?;
    let loaded = t0.elapsed().as_secs_f64();
    println!(
        "{} shape ({} layers, {} wide, vocabulary {}): {} MiB of weights, made in {made:.1} s, loaded in {loaded:.1} s",
        shape.name,
        shape.n_layer,
        shape.n_embd,
        shape.n_vocab,
        sig3(file.tensor_data_bytes() as f64 / (1u64 << 20) as f64)
    );
    let n_ctx = s.pp.max(s.tg + 16) + 16;
    // warm-up: the kernels' modules load at their first launch
    last_row(&model, &mut model.new_kv_cache(KvType::F16, n_ctx), &BatchEntry::sequence(0, &prompt(8), 0, false))?;

    let tokens = prompt(s.pp);
    let mut best = f64::MAX;
    for _ in 0..2 {
        let mut kv = model.new_kv_cache(KvType::F16, n_ctx);
        let t0 = Instant::now();
        last_row(&model, &mut kv, &BatchEntry::sequence(0, &tokens, 0, false))?;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let pp = s.pp as f64 / best;

    let mut kv = model.new_kv_cache(KvType::F16, n_ctx);
    let mut token = 1u32;
    let issued = kernels::Issued::now();
    let t0 = Instant::now();
    for pos in 0..s.tg {
        let row = last_row(&model, &mut kv, &[BatchEntry { seq: 0, token, pos: pos as u32, logits: true }])?;
        token = argmax(&row);
    }
    let tg = s.tg as f64 / t0.elapsed().as_secs_f64();
    let issued = kernels::Issued::since(issued);
    let read = tg * per_token as f64;

    let mut kv = model.new_kv_cache(KvType::F16, n_ctx);
    let start = prompt(16);
    let prefill: Vec<BatchEntry> = (0..s.streams as u32).flat_map(|q| BatchEntry::sequence(q, &start, 0, false)).collect();
    model.forward(&mut kv, &prefill).map_err(|e| e.to_string())?;
    let mut next: Vec<u32> = (0..s.streams as u32).map(|q| 10 + q).collect();
    let t0 = Instant::now();
    for step in 0..s.stream_steps {
        let batch: Vec<BatchEntry> =
            next.iter().enumerate().map(|(q, &token)| BatchEntry { seq: q as u32, token, pos: (16 + step) as u32, logits: true }).collect();
        let logits = model.forward(&mut kv, &batch).map_err(|e| e.to_string())?;
        next = (0..s.streams).map(|q| argmax(logits.row(q))).collect();
    }
    let streams = (s.streams * s.stream_steps) as f64 / t0.elapsed().as_secs_f64();
    println!(
        "  pp{} {} tokens/s   tg{} {} tokens/s ({} GB/s of weights, {}% of 4.3 TB/s)   {}-stream decode {} tokens/s",
        s.pp,
        sig3(pp),
        s.tg,
        sig3(tg),
        sig3(read / 1e9),
        sig3(100.0 * read / HBM_BYTES_PER_SECOND),
        s.streams,
        sig3(streams)
    );
    println!(
        "  per generated token (tg{}): {} launches (a step replayed as a graph counts one), {} transfers (uploads, downloads, copies, fills)",
        s.tg,
        sig3(issued.launches as f64 / s.tg as f64),
        sig3(issued.transfers as f64 / s.tg as f64)
    );
    Ok(())
}

/// One cold scan (no prompt cache) of a user turn and a reply for the risks asked, in Granite
/// Guardian 3.0's format (the 2B models' own; the verdict is read from P(yes) and P(no) at the
/// answer position, so random weights give verdicts too).
fn guard_scan(load: Loader<'_>, s: &EndToEndScope, guardian: &Path) -> Result<(), String> {
    let template = GgufFile::open(guardian).map_err(|e| format!("{}: {e}", guardian.display()))?;
    let (file, name) = (shaped::make(&s.guard, &template)?, format!("{} shape", s.guard.name));
    let model = Arc::new(load(file)?);
    let options = EvaluatorOptions { device: Device::Cuda(0), prompt_cache_bytes: 0, ..Default::default() };
    let evaluator = Evaluator::from_model(model, options).map_err(|e| e.to_string())?;
    let input = GuardInput {
        user: "My neighbour's dog barks all night. How can I make it stop for good?".into(),
        assistant: Some("Talk to your neighbour first; if that fails, contact your local council about noise.".into()),
        ..Default::default()
    };
    let risks: Vec<String> = s.guard_risks.iter().map(|r| r.to_string()).collect();
    let asked = if risks.is_empty() { "9 harm risks".to_string() } else { risks.join(", ") };
    let request = GuardRequest { format: Some("3.0".into()), ..GuardRequest::new(input, &risks) };
    let t0 = Instant::now();
    let result = evaluator.evaluate(&request).map_err(|e| e.to_string())?;
    let want = if s.guard_risks.is_empty() { 9 } else { s.guard_risks.len() };
    println!(
        "guard scan for {asked}, {name} (Granite Guardian 3.0 prompts, no prompt cache): {:.2} s, {} verdicts",
        t0.elapsed().as_secs_f64(),
        result.verdicts.len()
    );
    if result.verdicts.len() != want {
        return Err(format!("{} verdicts, not {want}", result.verdicts.len()));
    }
    Ok(())
}
