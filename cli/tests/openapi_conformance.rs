//! `/openapi.yaml` against the live server: the document validates with
//! `openapi-spec-validator`, and `schemathesis` (both from PyPI through
//! `tools/python-test-deps.sh`, cached) generates requests from it for every route and finds no
//! 5xx, no undeclared status or content type, and no response that breaks its schema. The
//! checks and the cross-field exceptions are in `python/openapi_conformance.py` and
//! `python/schemathesis.toml`.

use std::path::Path;
use std::process::Command;

use engine_tests::{fixture, python_test_deps, ServeProcess};

#[test]
fn the_served_openapi_document_is_valid_and_the_server_keeps_to_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pythonpath = python_test_deps();
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let guard = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    let server = ServeProcess::start(
        Path::new(env!("CARGO_BIN_EXE_engine-cli")),
        &["-c".as_ref(), "512".as_ref(), "-m".as_ref(), model.as_os_str(), "--guard".as_ref(), guard.as_os_str()],
    );

    let out = Command::new("python3")
        .arg(root.join("cli/tests/python/openapi_conformance.py"))
        .args([&server.base, "tiny-llama-Q8_0"])
        .env("PYTHONPATH", &pythonpath)
        .output()
        .unwrap();
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "openapi_conformance.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // the number of generated cases, for the log (`cargo test -- --nocapture`)
    println!("{}", stdout.lines().filter(|l| l.starts_with("schemathesis:")).collect::<Vec<_>>().join("\n"));
    assert!(stdout.contains("all checks passed"));
}
