//! `device-check`: the checks of the CUDA backend as one program, for a GPU machine that has the
//! driver and nothing else (tools/device-check.sh builds it here, with the kernels compiled ahead
//! of time, and runs it there). The same program runs the same checks through the CPU execution
//! harness (`--backend sim`), so a machine without a GPU proves the check works end to end.
//!
//! `device-check --backend cuda|sim --fixtures DIR [--modules DIR]`
//!
//! Prints, in order: the device (name, compute capability, driver), how the kernels were loaded
//! and each kernel's registers and spills; the tiny test models it makes from the two F32 files
//! it is given (every weight type, sha256-checked against llama.cpp's files); the op table (every
//! `Backend` op against the f64 reference, with its bound); the tiny models' logits in every
//! weight type against llama.cpp's goldens; bitwise batch invariance; then one `PASS` or `FAIL`.
//! Exit status 0 on PASS, 1 on FAIL, 2 when it could not start.

use std::path::{Path, PathBuf};
use std::time::Instant;

use engine::backend::harness::run_table;
use engine::backend::Backend;
use engine::gguf::GgufFile;
use engine::kv_cache::KvType;
use engine::model::{BatchEntry, Model};
use engine::quant::requantize::{file_type_of, quantize_pure};
use engine::quant::types::GgmlType;
use engine_tests::tiny::{compare_with_llama_cpp, tiny_files};
use engine_tests::{fixture, json_ids, read_json};
use sha2::{Digest, Sha256};

/// The device under test: how to put a model on it, and its op table.
enum Target {
    #[cfg(feature = "cuda")]
    Cuda(engine::backend::kernel::CudaBackend),
    #[cfg(feature = "sim")]
    Sim(engine::backend::kernel::SimBackend),
}

impl Target {
    fn label(&self) -> &'static str {
        match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(_) => "cuda:0",
            #[cfg(feature = "sim")]
            Target::Sim(_) => "sim",
        }
    }

    fn load(&self, path: &Path) -> Result<Model, String> {
        let loaded = match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(_) => Model::load_on(path, engine::backend::Device::Cuda(0)),
            #[cfg(feature = "sim")]
            Target::Sim(_) => Model::load_simulated(path),
        };
        loaded.map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Runs the op table; returns the number of ops outside their bounds.
    fn op_table(&self) -> usize {
        fn failed<B: Backend>(b: &B, label: &str) -> usize {
            run_table(b, label).iter().filter(|r| r.cases == 0 || !r.passed()).count()
        }
        match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(b) => failed(b, "cuda:0"),
            #[cfg(feature = "sim")]
            Target::Sim(b) => failed(b, "sim"),
        }
    }
}

/// How much each section runs. A GPU runs everything; the CPU execution harness, which runs
/// each GPU thread in turn, runs every file and every batch size but fewer greedy steps and KV
/// configurations, so that the whole check stays within minutes on two cores.
struct Scope {
    /// Greedy tokens compared after each sequence (llama.cpp's goldens hold 16).
    greedy_steps: usize,
    /// (model file, KV cache type) pairs of the batch-invariance section.
    invariance: &'static [(&'static str, KvType)],
}

const FULL: Scope = Scope {
    greedy_steps: 16,
    invariance: &[
        ("tiny-llama-Q4_K", KvType::F32),
        ("tiny-llama-Q4_K", KvType::F16),
        ("tiny-granite-Q8_0", KvType::F32),
        ("tiny-granite-Q8_0", KvType::F16),
        ("tiny-llama-F16", KvType::F32),
        ("tiny-llama-F16", KvType::F16),
    ],
};

const SIMULATED: Scope = Scope {
    greedy_steps: 4,
    invariance: &[("tiny-llama-Q4_K", KvType::F32), ("tiny-llama-Q4_K", KvType::F16), ("tiny-granite-Q8_0", KvType::F32)],
};

struct Args {
    backend: String,
    fixtures: PathBuf,
    modules: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut backend, mut fixtures, mut modules) = (None, None, None);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--backend" => backend = Some(value()?),
            "--fixtures" => fixtures = Some(PathBuf::from(value()?)),
            "--modules" => modules = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args { backend: backend.ok_or("--backend cuda|sim is required")?, fixtures: fixtures.ok_or("--fixtures DIR is required")?, modules })
}

fn open(backend: &str) -> Result<Target, String> {
    match backend {
        #[cfg(feature = "cuda")]
        "cuda" => engine::backend::kernel::CudaBackend::open(0).map(Target::Cuda).map_err(|e| e.to_string()),
        #[cfg(feature = "sim")]
        "sim" => Ok(Target::Sim(engine::backend::kernel::SimBackend::new())),
        other => Err(format!("backend {other:?} is not built into this program")),
    }
}

/// What the checks found: failures counted, and a line per failure kept for the end.
#[derive(Default)]
struct Verdict(Vec<String>);

impl Verdict {
    fn fail(&mut self, why: String) {
        println!("FAILED: {why}");
        self.0.push(why);
    }
}

fn section(title: &str) {
    println!("\n== {title}");
}

fn sha256_hex(path: &Path) -> std::io::Result<String> {
    Ok(Sha256::digest(std::fs::read(path)?).iter().map(|b| format!("{b:02x}")).collect())
}

/// The tiny models in every weight type, made from the two F32 files by the engine's quantizer
/// and checked against the sha256 of the files llama.cpp's goldens were computed on.
fn make_tiny_models(verdict: &mut Verdict) {
    let index = read_json(&fixture("models/index.json"));
    let t0 = Instant::now();
    let mut made = 0;
    for name in tiny_files() {
        let path = fixture(&format!("models/{name}.gguf"));
        let want = index["files"][format!("{name}.gguf")]["sha256"].as_str().unwrap_or_default().to_string();
        if !path.exists() {
            let (model, ty) = name.rsplit_once('-').expect("model-TYPE");
            let target = GgmlType::from_name(ty).expect("a fixture type");
            let base = fixture(&format!("models/{model}-base-f32.gguf"));
            let written = GgufFile::open(&base).map_err(|e| e.to_string()).and_then(|src| {
                let w = quantize_pure(&src, target, file_type_of(target).expect("a file type")).map_err(|e| e.to_string())?;
                w.write(std::io::BufWriter::new(std::fs::File::create(&path).map_err(|e| e.to_string())?)).map_err(|e| e.to_string())
            });
            if let Err(e) = written {
                verdict.fail(format!("making {name}: {e}"));
                continue;
            }
            made += 1;
        }
        match sha256_hex(&path) {
            Ok(got) if got == want => {}
            Ok(got) => verdict.fail(format!("{name}.gguf: sha256 {got}, llama.cpp's file has {want}")),
            Err(e) => verdict.fail(format!("{name}.gguf: {e}")),
        }
    }
    println!("{made} files made, {} checked against llama.cpp's sha256 ({:.1} s)", tiny_files().len(), t0.elapsed().as_secs_f64());
}

/// Every tiny file's logits against llama.cpp's: one line per file.
fn logits(target: &Target, scope: &Scope, verdict: &mut Verdict) {
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
/// runs them), and against one prefill batch of every token: the logits bit for bit.
fn batch_invariance(target: &Target, scope: &Scope, verdict: &mut Verdict) {
    // a legacy quant, a K-quant and a float type over both architectures; 36 positions cross a
    // KV block boundary (32)
    for &(name, kv_type) in scope.invariance {
        let model = match target.load(&fixture(&format!("models/{name}.gguf"))) {
            Ok(m) => m,
            Err(e) => {
                verdict.fail(e);
                continue;
            }
        };
        let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
        let tokens: Vec<u32> = json_ids(&golden["sequences"][2]["tokens"]).into_iter().take(36).collect();
        let other = json_ids(&golden["sequences"][1]["tokens"]);
        let t0 = Instant::now();
        // [positions][n_vocab] decoded alone
        let mut kv = model.new_kv_cache(kv_type, 512);
        let alone: Vec<Vec<f32>> = (0..tokens.len())
            .map(|p| {
                model.forward(&mut kv, &[BatchEntry { seq: 0, token: tokens[p], pos: p as u32, logits: true }]).unwrap().row(0).to_vec()
            })
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
                verdict.fail(format!("{name} kv {kv_type:?}: in batches of {rows} rows {result}"));
            }
            line += &format!("  {rows} rows {result}");
        }
        let mut kv = model.new_kv_cache(kv_type, 512);
        let prefill = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
        let rows: Vec<Vec<f32>> = (0..tokens.len()).map(|p| prefill.row(p).to_vec()).collect();
        let positions: Vec<usize> = (0..tokens.len()).collect();
        let result = compare_rows(&rows, &alone, &positions);
        if result != "IDENTICAL" {
            verdict.fail(format!("{name} kv {kv_type:?}: prefill vs decode {result}"));
        }
        println!("{line}  prefill {result}  ({:.1} s)", t0.elapsed().as_secs_f64());
    }
}

/// The device, the driver and how the kernels came (CUDA); what stands for them (sim).
fn describe(target: &Target, modules: Option<&Path>) -> String {
    match target {
        #[cfg(feature = "cuda")]
        Target::Cuda(b) => {
            let rt = b.runtime();
            format!("GPU: {}\ndriver: CUDA {}", rt.description(), rt.driver_version().unwrap_or_else(|e| e.to_string()))
                + &format!("\nkernels from: {}", modules.map_or("NVRTC at run time".to_string(), |m| m.display().to_string()))
        }
        #[cfg(feature = "sim")]
        Target::Sim(_) => format!(
            "CPU execution harness: the CUDA sources compiled as host C++, a block's threads as fibers (no GPU)\nprepared kernels: {}",
            modules.map_or("none".to_string(), |m| m.display().to_string())
        ),
    }
}

/// The kernels' registers and spills from the prepared folder's report, for `arch`.
fn kernel_resources(modules: &Path, arch: &str, verdict: &mut Verdict) {
    let report = match std::fs::read_to_string(modules.join(kernels::prepared::REPORT)) {
        Ok(r) => r,
        Err(e) => return verdict.fail(format!("{}: {e}", modules.join(kernels::prepared::REPORT).display())),
    };
    let rows: Vec<Vec<&str>> =
        report.lines().skip(1).map(|l| l.split('\t').collect()).filter(|r: &Vec<&str>| r.len() == 8 && r[2] == arch).collect();
    println!("{} kernels for {arch} (registers, spill stores/loads bytes, stack, static shared):", rows.len());
    for r in &rows {
        let spill = if r[4] != "0" || r[5] != "0" { "  SPILLS" } else { "" };
        println!("  {:<16} {:<34} {:>3} regs  spill {}/{}  stack {}  smem {}{spill}", r[0], r[1], r[3], r[4], r[5], r[6], r[7]);
    }
}

#[cfg(feature = "cuda")]
fn kernel_origins(target: &Target) {
    match target {
        Target::Cuda(b) => {
            for (file, how) in b.runtime().kernel_origins() {
                println!("  {file:<16} loaded from {how}");
            }
        }
        #[cfg(feature = "sim")]
        Target::Sim(_) => println!("  sim: the sources run as host C++, no modules loaded"),
    }
}

#[cfg(not(feature = "cuda"))]
fn kernel_origins(target: &Target) {
    println!("  {}: the sources run as host C++, no modules loaded", target.label());
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("device-check: {e}\nusage: device-check --backend cuda|sim --fixtures DIR [--modules DIR]");
            std::process::exit(2);
        }
    };
    // the library's fixture paths (goldens, the models made below) point into the bundle
    std::env::set_var("ENGINE_FIXTURES", &args.fixtures);
    if let Some(m) = &args.modules {
        std::env::set_var(kernels::prepared::MODULES_VAR, m);
    }
    let started = Instant::now();
    let target = match open(&args.backend) {
        Ok(t) => t,
        Err(e) => {
            println!("FAIL: {e}");
            std::process::exit(2);
        }
    };
    let mut verdict = Verdict::default();
    section("device");
    println!("{}", describe(&target, args.modules.as_deref()));
    if let Some(m) = &args.modules {
        let arch = match &target {
            #[cfg(feature = "cuda")]
            Target::Cuda(b) => b.runtime().arch().to_string(),
            #[cfg(feature = "sim")]
            Target::Sim(_) => "sm_90".to_string(),
        };
        let arch = if kernels::prepared::CUBIN_ARCHS.contains(&arch.as_str()) { arch } else { "sm_80".to_string() };
        kernel_resources(m, &arch, &mut verdict);
    }
    section("tiny models");
    make_tiny_models(&mut verdict);
    section(&format!("op table on {} against the f64 reference", target.label()));
    let t0 = Instant::now();
    let failed_ops = target.op_table();
    println!("{failed_ops} ops outside their bounds ({:.1} s)", t0.elapsed().as_secs_f64());
    if failed_ops > 0 {
        verdict.fail(format!("{failed_ops} ops outside their bounds (lines marked FAIL above)"));
    }
    section("how the kernels were loaded");
    kernel_origins(&target);
    section("tiny-model logits against llama.cpp (f32 KV cache, every position of 3 sequences)");
    let scope = if target.label() == "sim" { &SIMULATED } else { &FULL };
    println!("greedy continuations: up to {} tokens, while llama.cpp's margin is clear", scope.greedy_steps);
    logits(&target, scope, &mut verdict);
    section("batch invariance (bitwise)");
    batch_invariance(&target, scope, &mut verdict);
    section("result");
    println!("{:.0} s in all", started.elapsed().as_secs_f64());
    if verdict.0.is_empty() {
        println!("PASS");
    } else {
        for why in &verdict.0 {
            println!("  {why}");
        }
        println!("FAIL ({} problems)", verdict.0.len());
        std::process::exit(1);
    }
}
