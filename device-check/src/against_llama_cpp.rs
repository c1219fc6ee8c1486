//! The checks against llama.cpp's goldens and bitwise batch invariance, file by file.

use std::time::Instant;

use engine::kv_cache::KvType;
use engine::model::BatchEntry;
use engine_tests::tiny::{compare_with_llama_cpp, tiny_files};
use engine_tests::{fixture, json_ids, read_json};

use crate::{Scope, Target, Verdict};

/// Every tiny file's logits against llama.cpp's: one line per file.
pub fn logits(target: &Target, scope: &Scope, verdict: &mut Verdict) {
    for name in tiny_files() {
        let (line, failure) = check_file(target, scope, &name);
        println!("{line}");
        if let Some(why) = failure {
            verdict.fail(why);
        }
    }
}

/// One file's line of the logits section, and why it failed if it did.
fn check_file(target: &Target, scope: &Scope, name: &str) -> (String, Option<String>) {
    let t0 = Instant::now();
    let model = match target.load(&fixture(&format!("models/{name}.gguf"))) {
        Ok(m) => m,
        Err(e) => return (format!("{name:<20} could not be loaded"), Some(e)),
    };
    let c = compare_with_llama_cpp(&model, name, scope.greedy_steps);
    let line = format!(
        "{:<20} max |ours - llama.cpp| {:.3e} (bound {:.1e})  top-1 equal {}/{}  {}  ({:.1} s)",
        name,
        c.worst,
        c.bound,
        c.top1_equal,
        c.positions,
        if c.passed() { "ok" } else { "FAIL" },
        t0.elapsed().as_secs_f64()
    );
    let failure =
        (!c.passed()).then(|| format!("{name}: max {:.3e} > {:.1e} or {}", c.worst, c.bound, c.greedy_mismatch.unwrap_or_default()));
    (line, failure)
}

/// `IDENTICAL`, or the first of `positions` whose row differs from the reference's bit for bit.
fn compare_rows(rows: &[Vec<f32>], reference: &[Vec<f32>], positions: &[usize]) -> String {
    let differs = |(a, b): (&Vec<f32>, &Vec<f32>)| a.iter().map(|x| x.to_bits()).ne(b.iter().map(|x| x.to_bits()));
    match rows.iter().zip(reference).position(differs) {
        None => "IDENTICAL".to_string(),
        Some(i) => format!("DIFFERENT at position {}", positions[i]),
    }
}

/// Positions at which a sequence is decoded in a batch: the first, one inside the first KV
/// block, the last of it, and one in the next block.
const BATCHED_AT: [usize; 4] = [0, 17, 31, 35];

/// One sequence decoded alone (one row a step) against the same rows decoded in batches of 2,
/// 5, 8 and 64 rows (the others one row each of as many other sequences, as continuous batching
/// runs them), against one prefill batch of every token, and against the same decoding on two
/// threads at once: the logits bit for bit.
pub fn batch_invariance(target: &Target, scope: &Scope, verdict: &mut Verdict) {
    // a legacy quant, a K-quant and a float type over both architectures; 36 positions cross a
    // KV block boundary (32)
    for &(name, kv_type) in scope.invariance {
        let (line, failures) = invariance_of(target, name, kv_type);
        if let Some(line) = line {
            println!("{line}");
        }
        failures.into_iter().for_each(|why| verdict.fail(why));
    }
}

/// One (file, KV type) pair's line, and its failures.
fn invariance_of(target: &Target, name: &str, kv_type: KvType) -> (Option<String>, Vec<String>) {
    let mut failures = Vec::new();
    let model = match target.load(&fixture(&format!("models/{name}.gguf"))) {
        Ok(m) => m,
        Err(e) => return (None, vec![e]),
    };
    let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
    let tokens: Vec<u32> = json_ids(&golden["sequences"][2]["tokens"]).into_iter().take(36).collect();
    let other = json_ids(&golden["sequences"][1]["tokens"]);
    let t0 = Instant::now();
    // [positions][n_vocab] decoded alone
    let mut kv = model.new_kv_cache(kv_type, 512);
    let alone: Vec<Vec<f32>> = (0..tokens.len())
        .map(|p| model.forward(&mut kv, &[BatchEntry { seq: 0, token: tokens[p], pos: p as u32, logits: true }]).unwrap().row(0).to_vec())
        .collect();
    let mut line = format!("{name:<18} kv {kv_type:?}: alone vs");
    for rows in [2usize, 5, 8, 64] {
        let mut got = Vec::new();
        for &p in &BATCHED_AT {
            let mut kv = model.new_kv_cache(kv_type, 512);
            if p > 0 {
                model.forward(&mut kv, &BatchEntry::sequence(0, &tokens[..p], 0, false)).unwrap();
            }
            // the sequence's row first, then one row of each of rows-1 other sequences
            let mut batch = vec![BatchEntry { seq: 0, token: tokens[p], pos: p as u32, logits: true }];
            batch.extend((1..rows).map(|i| BatchEntry { seq: i as u32, token: other[i % other.len()], pos: 0, logits: true }));
            got.push(model.forward(&mut kv, &batch).unwrap().row(0).to_vec());
        }
        let reference: Vec<Vec<f32>> = BATCHED_AT.iter().map(|&p| alone[p].clone()).collect();
        let result = compare_rows(&got, &reference, &BATCHED_AT);
        if result != "IDENTICAL" {
            failures.push(format!("{name} kv {kv_type:?}: in batches of {rows} rows {result}"));
        }
        line += &format!("  {rows} rows {result}");
    }
    let mut kv = model.new_kv_cache(kv_type, 512);
    let prefill = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
    let rows: Vec<Vec<f32>> = (0..tokens.len()).map(|p| prefill.row(p).to_vec()).collect();
    let positions: Vec<usize> = (0..tokens.len()).collect();
    let result = compare_rows(&rows, &alone, &positions);
    if result != "IDENTICAL" {
        failures.push(format!("{name} kv {kv_type:?}: prefill vs decode {result}"));
    }
    line += &format!("  prefill {result}");
    // the same decoding on two threads at once, each with its own cache: one thread's steps are
    // recorded and replayed (graphs captured) while the other's are issued as they come and
    // downloaded, on the model's one runtime
    let threads: Vec<Vec<Vec<f32>>> = std::thread::scope(|scope| {
        let decode = || {
            let mut kv = model.new_kv_cache(kv_type, 512);
            (0..tokens.len())
                .map(|p| {
                    model
                        .forward(&mut kv, &[BatchEntry { seq: 0, token: tokens[p], pos: p as u32, logits: true }])
                        .map(|l| l.row(0).to_vec())
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let running = [scope.spawn(decode), scope.spawn(decode)];
        running.into_iter().map(|t| t.join().expect("a decoding thread panicked").unwrap()).collect()
    });
    let result =
        threads.iter().map(|rows| compare_rows(rows, &alone, &positions)).find(|r| r != "IDENTICAL").unwrap_or_else(|| "IDENTICAL".into());
    if result != "IDENTICAL" {
        failures.push(format!("{name} kv {kv_type:?}: two threads at once vs alone {result}"));
    }
    (Some(format!("{line}  two threads {result}  ({:.1} s)", t0.elapsed().as_secs_f64())), failures)
}
