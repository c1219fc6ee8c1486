//! Writes LoRA adapters made for the tests and benchmarks (`engine_tests::lora`):
//!
//!   lora-adapters OUT_DIR
//!       the tests' adapters (`lora::ADAPTERS`), one `NAME.gguf` each, for llama.cpp's runs on
//!       the same files (`tools/make-lora-goldens.py`)
//!   lora-adapters --for BASE.gguf --rank R [--type f16|f32] OUT.gguf
//!       a seeded random adapter (F16 by default) of rank R for BASE's seven projections of every block
//!       (attention q/k/v/output, feed-forward gate/up/down), as a fine-tune of all of them
//!       would give: what a benchmark of the adapters' cost needs

use std::process::ExitCode;

use engine::gguf::GgufFile;
use engine::quant::GgmlType;
use engine_tests::{fixture, lora};

const USAGE: &str = "usage: lora-adapters OUT_DIR | lora-adapters --for BASE.gguf --rank R [--type f16|f32] OUT.gguf";

fn write(base: &str, spec: &lora::AdapterSpec, out: &std::path::Path) -> Result<(), String> {
    let file = GgufFile::open(base).map_err(|e| format!("{base}: {e}"))?;
    let bytes = lora::make(&file, spec)?;
    std::fs::write(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
}

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [out] => {
            for spec in lora::ADAPTERS {
                let base = fixture(spec.base);
                write(&base.to_string_lossy(), spec, &std::path::Path::new(out).join(format!("{}.gguf", spec.name)))?;
            }
            Ok(())
        }
        [flag, base, rank_flag, rank, rest @ ..] if flag == "--for" && rank_flag == "--rank" => {
            let rank = rank.parse().map_err(|e| format!("--rank {rank}: {e}"))?;
            let (ty, out) = match rest {
                [out] => (GgmlType::F16, out),
                [t, ty, out] if t == "--type" => (GgmlType::from_name(&ty.to_uppercase()).ok_or(format!("--type {ty}"))?, out),
                _ => return Err(USAGE.into()),
            };
            let spec = lora::AdapterSpec {
                name: "random",
                base: "",
                blocks: &["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"],
                global: &[],
                rank,
                ty,
                alpha: 2.0 * rank as f32,
                seed: 7,
                // a trained adapter's size: `a` about 1/sqrt(n_in) (PEFT's initialisation), `b`
                // small, so that the corrections change the activations by percents
                magnitudes: (0.02, 0.01),
                invocation: &[],
            };
            write(base, &spec, std::path::Path::new(out))
        }
        _ => Err(USAGE.into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lora-adapters: {e}");
            ExitCode::from(2)
        }
    }
}
