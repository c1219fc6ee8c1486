//! The official `openai` Python package (installed from PyPI by `tools/python-openai.sh`, cached)
//! against `engine-cli serve` on 127.0.0.1 with the tiny fixtures: the checks are in
//! `python/openai_sdk.py` (strict response validation).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use engine_tests::fixture;

/// Kills the server when the test ends, passed or not.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_openai_python_package_works_against_the_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let install = Command::new(root.join("tools/python-openai.sh")).output().expect("run tools/python-openai.sh");
    assert!(install.status.success(), "installing openai failed: {}", String::from_utf8_lossy(&install.stderr));
    let pythonpath = String::from_utf8(install.stdout).unwrap().trim().to_string();

    let mut child = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
        .args(["serve", "--port", "0", "-c", "512", "-m"])
        .arg(fixture("models/tiny-llama-Q8_0.gguf"))
        .arg("--guard")
        .arg(fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Serve(child);
    // read stderr to the end on a thread (a full pipe would block the server's logging)
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(a) = line.strip_prefix("listening on ") {
                let _ = tx.send(a.trim().to_string());
            }
        }
    });
    let base = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the server printed no address");

    let out = Command::new("python3")
        .arg(root.join("cli/tests/python/openai_sdk.py"))
        .args([&base, "tiny-llama-Q8_0", "guardian-tiny-3.0-q8_0"])
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
