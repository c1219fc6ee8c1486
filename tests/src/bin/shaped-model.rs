//! Writes a random-weight model of one of `engine_tests::shaped`'s shapes to a GGUF file, for
//! speed beside llama.cpp on the same file (`tools/bench-side-by-side.sh FILE`):
//!
//!   shaped-model SHAPE TEMPLATE.gguf OUT.gguf
//!
//! SHAPE: qwen3-30b-a3b-12 (a mixture of experts), gpt-oss-20b-12 (12 of gpt-oss-20b's 24 layers,
//! MXFP4 experts), qwen3.5-2b (a hybrid of gated delta nets and gated attention), qwen3-1.7b (dense), qwen2.5-0.5b, llama-3-8b. The template, a real model of the shape's
//! vocabulary (a Qwen2.5 GGUF for the Qwen shapes and gpt-oss), gives the vocabulary and the
//! other metadata llama.cpp needs to load the file.

use std::io::BufWriter;
use std::process::ExitCode;

use engine::gguf::GgufFile;
use engine_tests::shaped::{self, Shape};

fn shape(name: &str) -> Option<Shape> {
    Some(match name {
        "qwen3-30b-a3b-12" => shaped::QWEN3_30B_A3B_12_LAYERS,
        "qwen3-1.7b" => shaped::QWEN3_1_7B,
        "qwen2.5-0.5b" => shaped::QWEN2_5_0_5B,
        "llama-3-8b" => shaped::LLAMA_3_8B,
        _ => return None,
    })
}

fn run(args: &[String]) -> Result<(), String> {
    let [name, template, out] = args else { return Err("usage: shaped-model SHAPE TEMPLATE.gguf OUT.gguf".into()) };
    let template = GgufFile::open(template).map_err(|e| format!("{template}: {e}"))?;
    let (w, what) = if name == "gpt-oss-20b-12" {
        (
            engine_tests::shaped_gpt_oss::writer(&engine_tests::shaped_gpt_oss::GPT_OSS_20B_12_LAYERS, &template)?,
            "gpt-oss-20b (12 of 24 layers)",
        )
    } else if name == "qwen3.5-2b" {
        (engine_tests::shaped_qwen35::writer(&engine_tests::shaped_qwen35::QWEN35_2B, &template)?, "Qwen3.5-2B-shaped")
    } else {
        let shape = shape(name).ok_or_else(|| {
            format!("unknown shape {name:?} (qwen3-30b-a3b-12, gpt-oss-20b-12, qwen3.5-2b, qwen3-1.7b, qwen2.5-0.5b, llama-3-8b)")
        })?;
        (shaped::writer(&shape, &template)?, shape.name)
    };
    let file = std::fs::File::create(out).map_err(|e| format!("{out}: {e}"))?;
    let bytes = w.write(BufWriter::new(file)).map_err(|e| format!("{out}: {e}"))?;
    eprintln!("wrote {out}: {what} ({bytes} bytes)");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
