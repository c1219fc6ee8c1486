//! `engine-cli bench` on a tiny fixture model: the JSON results and the table.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/tiny-llama-Q4_0.gguf")
}

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("bench").args(args).output().expect("run engine-cli")
}

#[test]
fn json_has_one_result_per_test_with_every_sample() {
    let m = model();
    let out = bench(&["-m", m.to_str().unwrap(), "-p", "16", "-n", "4", "-r", "2", "-t", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let results = j.as_array().unwrap();
    assert_eq!(results.len(), 2, "{j}");
    for (r, (test, n_prompt, n_gen)) in results.iter().zip([("pp16", 16, 0), ("tg4", 0, 4)]) {
        assert_eq!(r["test"], test);
        assert_eq!(r["n_prompt"], n_prompt);
        assert_eq!(r["n_gen"], n_gen);
        assert_eq!(r["n_threads"], 1);
        assert_eq!((r["backends"].as_str(), r["device"].as_str()), (Some("CPU"), Some("cpu")), "{r}");
        assert_eq!(r["model_type"], "llama Q4_0");
        assert!(r["model_size"].as_u64().unwrap() > 0 && r["model_n_params"].as_u64().unwrap() > 0);
        let ts = r["samples_ts"].as_array().unwrap();
        assert_eq!(ts.len(), 2);
        assert!(ts.iter().all(|v| v.as_f64().unwrap() > 0.0), "{r}");
        assert_eq!(r["samples_ns"].as_array().unwrap().len(), 2);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0 && r["stddev_ts"].as_f64().unwrap() >= 0.0, "{r}");
        // the CPU issues no device work
        assert_eq!((r["launches_per_token"].as_f64(), r["transfers_per_token"].as_f64()), (Some(0.0), Some(0.0)), "{r}");
    }
}

/// `-d 40`: the tests run after 40 tokens in the cache (each parallel sequence a fork of them),
/// named as llama-bench names them, with the KV types in llama-bench's fields.
#[test]
fn tests_at_a_depth_are_named_and_reported_like_llama_bench() {
    let m = model();
    let args = ["-m", m.to_str().unwrap(), "-p", "16", "-n", "4", "-d", "40", "--parallel", "1,2", "-r", "1", "-t", "1"];
    let out = bench(&[&args[..], &["--kv-type", "q8_0", "--cache-type-v", "q4_0", "--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let names: Vec<&str> = j.as_array().unwrap().iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["pp16 @ d40", "tg4 @ d40", "tg4x2 @ d40"], "{j}");
    for r in j.as_array().unwrap() {
        assert_eq!((r["n_depth"].as_u64(), r["type_k"].as_str(), r["type_v"].as_str()), (Some(40), Some("q8_0"), Some("q4_0")), "{r}");
    }
}

/// `--parallel 1,3,1`: one generation test per distinct value, in order; the tokens/s of
/// `tg4x3` count the tokens of all three sequences.
#[test]
fn parallel_generation_counts_every_sequence() {
    let m = model();
    let out = bench(&["-m", m.to_str().unwrap(), "-p", "0", "-n", "4", "-r", "2", "-t", "1", "--parallel", "1,3,1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let results = j.as_array().unwrap();
    assert_eq!(results.len(), 2, "{j}");
    for (r, (test, n_parallel)) in results.iter().zip([("tg4", 1), ("tg4x3", 3)]) {
        assert_eq!(r["test"], test);
        assert_eq!((r["n_gen"].as_u64(), r["n_parallel"].as_u64()), (Some(4), Some(n_parallel)), "{r}");
        let (ns, ts) = (r["samples_ns"].as_array().unwrap(), r["samples_ts"].as_array().unwrap());
        for (ns, ts) in ns.iter().zip(ts) {
            let want = (4 * n_parallel) as f64 * 1e9 / ns.as_f64().unwrap();
            assert!((ts.as_f64().unwrap() - want).abs() <= 1e-9 * want, "{r}");
        }
    }
    let out = bench(&["-m", m.to_str().unwrap(), "--parallel", "0"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn table_like_llama_bench() {
    let m = model();
    let out = bench(&["-m", m.to_str().unwrap(), "-p", "8", "-n", "0", "-r", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("| model") && lines[0].contains("t/s |"), "{text}");
    assert!(lines[0].contains("| backend |"), "{text}");
    assert!(lines[2].contains(" pp8 |") && lines[2].contains(" ± ") && lines[2].contains("| cpu "), "{text}");
}

#[test]
fn bad_arguments_are_one_line_errors() {
    let m = model();
    let out = bench(&["-m", m.to_str().unwrap(), "-p", "0", "-n", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8(out.stderr).unwrap().lines().count(), 1);
    let out = bench(&["-m", "/no/such/model.gguf"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.lines().count() == 1 && err.contains("/no/such/model.gguf"), "{err}");
}
