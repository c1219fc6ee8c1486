//! `engine-cli quantize` run as a program: from the tiny F32 model, every weight type gives
//! llama-quantize --pure's file byte for byte (the fixtures are llama.cpp's output, checked by
//! sha256 in tools/make-fixtures.sh); bad types and rows that are no whole blocks are one-line
//! errors that leave no file behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(rel)
}

fn quantize(input: &Path, output: &Path, ty: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("quantize").args([input, output]).arg(ty).output().expect("run engine-cli")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("engine-cli-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn every_type_equals_llama_quantize_pure() {
    let source = fixture("models/tiny-llama-F32.gguf");
    for ty in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"] {
        let out = scratch(&format!("tiny-llama-{ty}.gguf"));
        let run = quantize(&source, &out, &ty.to_ascii_lowercase());
        assert!(run.status.success(), "{ty}: {}", String::from_utf8_lossy(&run.stderr));
        let made = std::fs::read(&out).unwrap();
        let reference = std::fs::read(fixture(&format!("models/tiny-llama-{ty}.gguf"))).unwrap();
        assert!(made == reference, "{ty}: {} bytes made, llama-quantize wrote {}", made.len(), reference.len());
        std::fs::remove_file(out).unwrap();
    }
}

#[test]
fn a_quantized_source_is_requantized_from_its_values() {
    // Q8_0 -> F32 dequantizes every matrix: the same tensors, every one F32 and 4 bytes a value.
    let out = scratch("from-q8_0.gguf");
    let run = quantize(&fixture("models/tiny-granite-Q8_0.gguf"), &out, "F32");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let made = engine::gguf::GgufFile::open(&out).unwrap();
    assert_eq!(made.tensors().len(), 20);
    assert!(made.tensors().iter().all(|t| t.ty == engine::gguf::GgmlType::F32 && t.n_bytes == 4 * t.n_elements));
    assert_eq!(made.get_u64("general.file_type"), Some(0));
    std::fs::remove_file(out).unwrap();
}

#[test]
fn bad_types_and_partial_blocks_are_one_line_errors_without_a_file() {
    let out = scratch("refused.gguf");
    let unknown = quantize(&fixture("models/tiny-llama-F32.gguf"), &out, "Q9_9");
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown or unsupported type \"Q9_9\""), "{err}");
    // The tiny guardian's rows are 128 values: no whole number of 256-value K-quant blocks.
    let partial = quantize(&fixture("guardian/models/guardian-tiny-3.3-q8_0.gguf"), &out, "Q4_K");
    let err = String::from_utf8_lossy(&partial.stderr);
    assert!(!partial.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("a row of 128 values is not a whole number of Q4_K blocks (256 values)"), "{err}");
    assert!(!out.exists() && !out.with_extension("partial").exists());
}
