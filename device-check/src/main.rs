//! `device-check`: the checks of the CUDA backend as one program, for a GPU machine that has the
//! driver and nothing else (tools/device-check.sh builds it here, with the kernels compiled ahead
//! of time, and runs it there). The same program runs the same checks through the CPU execution
//! harness (`--backend sim`), so a machine without a GPU proves the check works end to end.
//!
//! `device-check --backend cuda|sim --fixtures DIR --guardian FILE [--modules DIR]
//! [--whisper-vocabulary FILE] [--sections LIST]`; `device-check --write-vocabulary IN OUT`
//! writes the tensor-less files (Whisper's and the Guardian's vocabularies) the first form reads.
//!
//! Prints, in order: the device (name, compute capability, driver), how the kernels were loaded
//! and each kernel's registers and spills; the tiny test models it makes from the two F32 files
//! it is given (every weight type, sha256-checked against llama.cpp's files); the op table (every
//! `Backend` op against the f64 reference, with its bound) and the tensor cores' int8 mma.sync
//! against its documented layout; the tiny models' logits in every
//! weight type against llama.cpp's goldens; bitwise batch invariance; the kernels' speed
//! (`speed.rs`); end to end on models shaped like Qwen2.5-0.5B and Llama-3-8B and a guard scan
//! on a Granite Guardian 2B shape (`end_to_end.rs`), and a Whisper model shaped like
//! whisper-base against the CPU backend, with its speed (`whisper.rs`); then one `PASS` or
//! `FAIL`. Exit status 0 on
//! PASS, 1 on FAIL, 2 when it could not start.

mod against_llama_cpp;
mod end_to_end;
mod speed;
mod whisper;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use against_llama_cpp::{batch_invariance, logits};
use end_to_end::{end_to_end, EndToEndScope};
use speed::{kernel_speed, SpeedScope};
use whisper::whisper_on_device;

use engine::backend::harness::run_table;
use engine::backend::Backend;
use engine::gguf::GgmlType;
use engine::gguf::GgufFile;
use engine::kv_cache::KvType;
use engine::model::Model;
use engine::quant::requantize::{file_type_of, quantize_pure};
use engine_tests::shaped::{self, Shape};
use engine_tests::shaped_whisper::{self, WhisperShape};
use engine_tests::tiny::tiny_files;
use engine_tests::{fixture, read_json};
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
        let file = GgufFile::open(path).map_err(|e| e.to_string());
        file.and_then(|f| self.load_file(Arc::new(f))).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A file already open (a shaped model made in memory), on the device.
    fn load_file(&self, file: Arc<GgufFile>) -> Result<Model, String> {
        let loaded = match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(_) => Model::from_file_on(file, engine::backend::Device::Cuda(0)),
            #[cfg(feature = "sim")]
            Target::Sim(_) => Model::from_file_simulated(file),
        };
        loaded.map_err(|e| e.to_string())
    }

    /// A Whisper file already open, on the device.
    fn load_whisper(&self, file: Arc<GgufFile>) -> Result<engine::model::whisper::WhisperModel, String> {
        use engine::model::whisper::WhisperModel;
        let loaded = match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(_) => WhisperModel::from_file_on(file, engine::backend::Device::Cuda(0)),
            #[cfg(feature = "sim")]
            Target::Sim(_) => WhisperModel::from_file_simulated(file),
        };
        loaded.map_err(|e| e.to_string())
    }

    /// The kernels' speed section.
    fn speed(&self, scope: &SpeedScope) -> Vec<String> {
        match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(b) => kernel_speed(b.runtime(), scope),
            #[cfg(feature = "sim")]
            Target::Sim(b) => kernel_speed(b.runtime(), scope),
        }
    }

    /// The tensor cores' int8 mma.sync in its documented fragment layout (on the harness: its
    /// emulation), three times over different bytes.
    fn mma_check(&self) -> Result<(), String> {
        match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(b) => (1..=3).try_for_each(|seed| kernels::selftest::mma_s8(b.runtime(), seed)),
            #[cfg(feature = "sim")]
            Target::Sim(b) => (1..=3).try_for_each(|seed| kernels::selftest::mma_s8(b.runtime(), seed)),
        }
    }

    /// The warp collectives (butterfly sums and maxima, gathers of several values) against plain
    /// shuffles, bit for bit, over four whole warps (on the harness: its one-exchange forms).
    fn warp_collectives_check(&self) -> Result<(), String> {
        match self {
            #[cfg(feature = "cuda")]
            Target::Cuda(b) => (1..=3).try_for_each(|seed| kernels::selftest::warp_collectives(b.runtime(), seed, 128)),
            #[cfg(feature = "sim")]
            Target::Sim(b) => (1..=3).try_for_each(|seed| kernels::selftest::warp_collectives(b.runtime(), seed, 128)),
        }
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
/// each GPU thread in turn, runs every file and every batch size but one greedy step, one
/// batch-invariance pair (a K-quant over the f16 cache) and reduced shapes in the speed and
/// end-to-end sections, so that prepare and check together stay within 10 minutes on two cores.
struct Scope {
    /// Greedy tokens compared after each sequence (llama.cpp's goldens hold 16).
    greedy_steps: usize,
    /// (model file, KV cache type) pairs of the batch-invariance section.
    invariance: &'static [(&'static str, KvType)],
    speed: SpeedScope,
    end_to_end: EndToEndScope,
    /// The Whisper model of the end-to-end section and its decoding steps.
    whisper: (WhisperShape, usize),
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
    speed: SpeedScope {
        matvec: &[(4096, 4096), (14_336, 4096), (151_936, 896)],
        types: &[GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16],
        matmul: (512, 4096, 4096),
        attention_ctx: &[1024, 4096],
        heads: (32, 8, 128),
        bytes_per_measurement: 16 << 30,
        max_launches: 2000,
    },
    end_to_end: EndToEndScope {
        shapes: &[shaped::QWEN2_5_0_5B, shaped::LLAMA_3_8B],
        pp: 512,
        tg: 128,
        streams: 8,
        stream_steps: 32,
        guard: shaped::GRANITE_GUARDIAN_2B,
        guard_risks: &[],
    },
    whisper: (shaped_whisper::BASE, 64),
};

/// The Granite Guardian 2B shape at a size the CPU execution harness runs in seconds.
const GUARDIAN_MINIATURE: Shape = Shape {
    name: "granite-guardian in miniature",
    n_embd: 256,
    n_layer: 2,
    n_ff: 512,
    n_head: 4,
    n_head_kv: 2,
    ..shaped::GRANITE_GUARDIAN_2B
};

/// The Qwen2.5-0.5B shape at a size the CPU execution harness runs in seconds.
const MINIATURE: Shape = Shape {
    name: "Qwen2.5-0.5B in miniature",
    n_vocab: 1024,
    n_embd: 256,
    n_layer: 2,
    n_ff: 512,
    n_head: 4,
    n_head_kv: 2,
    ..shaped::QWEN2_5_0_5B
};

const SIMULATED: Scope = Scope {
    greedy_steps: 1,
    invariance: &[("tiny-llama-Q4_K", KvType::F16)],
    speed: SpeedScope {
        matvec: &[(256, 256)],
        types: &[GgmlType::Q8_0, GgmlType::Q4_K],
        matmul: (16, 256, 256),
        attention_ctx: &[64],
        heads: (4, 2, 64),
        bytes_per_measurement: 1,
        max_launches: 1,
    },
    end_to_end: EndToEndScope {
        shapes: &[MINIATURE],
        pp: 16,
        tg: 4,
        streams: 2,
        stream_steps: 2,
        guard: GUARDIAN_MINIATURE,
        guard_risks: &["harm"],
    },
    whisper: (shaped_whisper::SMALL, 4),
};

/// The sections after the device and the tiny models, in the order they run.
const SECTIONS: [&str; 5] = ["ops", "logits", "invariance", "speed", "end-to-end"];

struct Args {
    /// The sections to run (all unless `--sections` names some: a rerun after a fix).
    sections: Vec<String>,
    backend: String,
    fixtures: PathBuf,
    guardian: PathBuf,
    modules: Option<PathBuf>,
    /// A tensor-less Whisper file (its vocabulary), for the Whisper model of the end-to-end
    /// section.
    whisper_vocabulary: Option<PathBuf>,
}

/// `--write-vocabulary IN OUT` (run by `tools/device-check.sh prepare` for Whisper tiny.en and
/// the tiny Guardian 3.3): the GGUF file IN without its tensors, into OUT.
fn write_vocabulary(from: &Path, to: &Path) -> Result<(), String> {
    let template = GgufFile::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let w = shaped_whisper::vocabulary_only(&template)?;
    let out = std::fs::File::create(to).map_err(|e| format!("{}: {e}", to.display()))?;
    w.write(std::io::BufWriter::new(out)).map(|_| ()).map_err(|e| format!("{}: {e}", to.display()))
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut backend, mut fixtures, mut guardian, mut modules, mut whisper_vocabulary) = (None, None, None, None, None);
    let mut sections: Vec<String> = SECTIONS.iter().map(|s| s.to_string()).collect();
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--backend" => backend = Some(value()?),
            "--fixtures" => fixtures = Some(PathBuf::from(value()?)),
            "--modules" => modules = Some(PathBuf::from(value()?)),
            "--guardian" => guardian = Some(PathBuf::from(value()?)),
            "--whisper-vocabulary" => whisper_vocabulary = Some(PathBuf::from(value()?)),
            "--write-vocabulary" => {
                let (from, to) = (PathBuf::from(value()?), PathBuf::from(value()?));
                write_vocabulary(&from, &to)?;
                std::process::exit(0);
            }
            "--sections" => {
                sections = value()?.split(',').map(str::to_string).collect();
                if let Some(bad) = sections.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    return Err(format!("no section {bad:?} (sections: {})", SECTIONS.join(",")));
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        sections,
        backend: backend.ok_or("--backend cuda|sim is required")?,
        fixtures: fixtures.ok_or("--fixtures DIR is required")?,
        guardian: guardian.ok_or("--guardian FILE (the tiny Guardian 3.3's vocabulary) is required")?,
        modules,
        whisper_vocabulary,
    })
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
            eprintln!(
                "device-check: {e}\nusage: device-check --backend cuda|sim --fixtures DIR --guardian FILE [--modules DIR] [--whisper-vocabulary FILE] [--sections {}]\n       device-check --write-vocabulary IN.gguf OUT.gguf",
                SECTIONS.join(",")
            );
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
    let scope = if target.label() == "sim" { &SIMULATED } else { &FULL };
    let wanted = |name: &str| args.sections.iter().any(|s| s == name);
    if wanted("ops") {
        section(&format!("op table on {} against the f64 reference", target.label()));
        let t0 = Instant::now();
        let failed_ops = target.op_table();
        println!("{failed_ops} ops outside their bounds ({:.1} s)", t0.elapsed().as_secs_f64());
        if failed_ops > 0 {
            verdict.fail(format!("{failed_ops} ops outside their bounds (lines marked FAIL above)"));
        }
        match target.mma_check() {
            Ok(()) => println!(
                "mma.sync m16n8k32 and m16n8k16 of signed bytes, fragments in the documented layout: every output the sum of products"
            ),
            Err(why) => verdict.fail(why),
        }
        match target.warp_collectives_check() {
            Ok(()) => println!("warp sums, maxima and gathers: the bits of plain shuffles, the sums those of the butterfly's order"),
            Err(why) => verdict.fail(why),
        }
        section("how the kernels were loaded");
        kernel_origins(&target);
        match kernels::nvrtc::describe() {
            Ok(nvrtc) => println!("NVRTC, the fallback for a kernel not prepared: {nvrtc}"),
            Err(_) => println!("NVRTC: none found (not needed while every kernel comes prepared)"),
        }
    }
    if wanted("logits") {
        section("tiny-model logits against llama.cpp (f32 KV cache, every position of 3 sequences)");
        println!("greedy continuations: up to {} tokens, while llama.cpp's margin is clear", scope.greedy_steps);
        logits(&target, scope, &mut verdict);
    }
    if wanted("invariance") {
        section("batch invariance (bitwise)");
        batch_invariance(&target, scope, &mut verdict);
    }
    if wanted("speed") {
        section(&format!("kernel speed on {}", target.label()));
        if target.label() == "sim" {
            println!("(the CPU execution harness at reduced shapes: proves the measurements run; its times say nothing of a GPU)");
        }
        for why in target.speed(&scope.speed) {
            verdict.fail(why);
        }
    }
    if wanted("end-to-end") {
        section("end to end on shaped models (random weights, Q4_K_M-like mix, f16 KV cache)");
        let template = fixture("models/tiny-llama-base-f32.gguf");
        for why in end_to_end(&|file| target.load_file(file), &scope.end_to_end, &template, &args.guardian) {
            verdict.fail(why);
        }
        let (shape, steps) = scope.whisper;
        match &args.whisper_vocabulary {
            Some(vocabulary) => {
                if let Err(why) = whisper_on_device(&|file| target.load_whisper(file), &shape, vocabulary, steps) {
                    println!("Whisper: FAILED: {why}");
                    verdict.fail(why);
                }
            }
            None => println!("Whisper: not run (no --whisper-vocabulary file)"),
        }
    }
    section("result");
    println!("{:.0} s in all", started.elapsed().as_secs_f64());
    if args.sections.len() < SECTIONS.len() {
        println!("(sections run: {}; the others were not)", args.sections.join(","));
    }
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
