//! The official `openai` Python package (installed from PyPI by `tools/python-test-deps.sh`,
//! cached) against `engine-cli serve` on 127.0.0.1 with the tiny fixtures: the checks are in
//! `python/openai_sdk.py` (strict response validation).

use std::path::Path;
use std::process::Command;

use engine_tests::{fixture, python_test_deps, ServeProcess};

#[test]
fn the_openai_python_package_works_against_the_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pythonpath = python_test_deps();
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let guard = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    let server = ServeProcess::start(
        Path::new(env!("CARGO_BIN_EXE_engine-cli")),
        &["-c".as_ref(), "512".as_ref(), "-m".as_ref(), model.as_os_str(), "--guard".as_ref(), guard.as_os_str()],
    );

    let out = Command::new("python3")
        .arg(root.join("cli/tests/python/openai_sdk.py"))
        .args([&server.base, "tiny-llama-Q8_0", "guardian-tiny-3.0-q8_0"])
        .env("PYTHONPATH", &pythonpath)
        .output()
        .unwrap();
    drop(server);
    assert!(
        out.status.success(),
        "openai_sdk.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}
