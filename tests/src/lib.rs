//! Shared helpers of the integration tests: fixture paths, loaders, real-model fetching.

use std::path::{Path, PathBuf};

/// `tests/fixtures/<rel>` inside this repository.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel)
}

/// Little-endian f32 values of a raw fixture file.
pub fn read_f32s(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// A JSON fixture file.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON array of token ids.
pub fn json_ids(v: &serde_json::Value) -> Vec<u32> {
    let arr = v.as_array().unwrap_or_else(|| panic!("expected an array of ids, found {v}"));
    arr.iter().map(|x| x.as_u64().expect("a token id") as u32).collect()
}

/// Path of a real model fetched (once, cached under `~/.cache/engine-assets`) by the
/// repository's `tools/fetch-models.sh`; `target` is one of its targets (`gemma`, ...).
pub fn fetch_model(target: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/fetch-models.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(target)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run tools/fetch-models.sh");
    assert!(out.status.success(), "tools/fetch-models.sh {target} failed");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 path");
    PathBuf::from(stdout.lines().last().expect("fetch-models.sh printed no path").trim())
}
