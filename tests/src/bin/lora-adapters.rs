//! Writes the tests' LoRA adapters (`engine_tests::lora::ADAPTERS`) to a folder, one
//! `NAME.gguf` each, for llama.cpp's runs on the same files (`tools/make-lora-goldens.py`):
//!
//!   lora-adapters OUT_DIR

use std::process::ExitCode;

use engine::gguf::GgufFile;
use engine_tests::{fixture, lora};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out] = args.as_slice() else {
        eprintln!("usage: lora-adapters OUT_DIR");
        return ExitCode::from(2);
    };
    for spec in lora::ADAPTERS {
        let path = std::path::Path::new(out).join(format!("{}.gguf", spec.name));
        let made = GgufFile::open(fixture(spec.base)).map_err(|e| format!("{}: {e}", spec.base)).and_then(|f| lora::make(&f, spec));
        if let Err(e) = made.and_then(|bytes| std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))) {
            eprintln!("lora-adapters: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
