//! `--device`: every model command takes it; on a build without CUDA, `cuda` / `cuda:N` is a
//! one-line error with exit status 2 (nothing is loaded, nothing panics); on a build with CUDA
//! (`--features cuda`) and a machine without a GPU or its driver, the same one line says so.
//! A name that is no device is refused by the argument parser.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(rel)
}

fn engine_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).args(args).output().expect("run engine-cli")
}

#[test]
fn cuda_without_cuda_support_or_a_gpu_is_one_line_and_exit_2() {
    let llama = fixture("models/tiny-llama-Q8_0.gguf");
    let guard = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    let (m, g) = (llama.to_str().unwrap(), guard.to_str().unwrap());
    let commands: Vec<Vec<&str>> = vec![
        vec!["run", "-m", m, "-p", "hello", "--device", "cuda:0"],
        vec!["run", "-m", m, "-p", "hello", "--device", "cuda"],
        vec!["chat", "-m", m, "--device", "cuda:1"],
        vec!["bench", "-m", m, "--device", "cuda:0"],
        vec!["logits", "-m", m, "-p", "hello", "--device", "cuda:0"],
        vec!["embed", "-m", m, "hello", "--device", "cuda:0"],
        vec!["guard", "-m", g, "--input", "hello", "--device", "cuda:0"],
        vec!["serve", "-m", m, "--device", "cuda:0", "--port", "0"],
    ];
    for args in commands {
        let out = engine_cli(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        if cfg!(feature = "cuda") {
            // no driver library, or a driver and no such GPU
            let why = ["no CUDA driver", "CUDA device", "CUDA_ERROR"];
            assert!(why.iter().any(|w| err.contains(w)), "{args:?}: {err}");
        } else {
            assert!(err.contains("this build has no CUDA support"), "{args:?}: {err}");
        }
        assert!(err.contains("cuda:"), "{args:?} names the device: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_name_that_is_no_device_is_refused() {
    let llama = fixture("models/tiny-llama-Q8_0.gguf");
    let out = engine_cli(&["run", "-m", llama.to_str().unwrap(), "-p", "hello", "--device", "tpu"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown device \"tpu\" (expected cpu, cuda or cuda:N)"), "{err}");
}

#[test]
fn cpu_is_the_default_and_can_be_named() {
    let llama = fixture("models/tiny-llama-Q8_0.gguf");
    let m = llama.to_str().unwrap();
    let named = engine_cli(&["run", "-m", m, "-p", "hello", "-n", "4", "--temp", "0", "--device", "cpu"]);
    let default = engine_cli(&["run", "-m", m, "-p", "hello", "-n", "4", "--temp", "0"]);
    assert!(named.status.success(), "{}", String::from_utf8_lossy(&named.stderr));
    assert_eq!(named.stdout, default.stdout);
}
