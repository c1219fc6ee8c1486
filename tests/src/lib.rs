//! Shared helpers of the integration tests: fixture paths, loaders, real-model fetching.

use std::path::{Path, PathBuf};

pub mod archs;
pub mod lora;
pub mod quant_goldens;
pub mod reranker;
pub mod scripted;
pub mod shaped;
pub mod shaped_gpt_oss;
pub mod shaped_qwen35;
pub mod shaped_whisper;
pub mod tiny;

/// `tests/fixtures/<rel>` inside this repository, or under `ENGINE_FIXTURES` when that is set
/// (the device check's bundle carries its own fixtures folder to a machine without the tree).
pub fn fixture(rel: &str) -> PathBuf {
    match std::env::var_os("ENGINE_FIXTURES").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join(rel),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel),
    }
}

/// The 14 vocabularies of llama.cpp's tokenizer test files (`fixtures/tokenizer/`), each with
/// its test vectors.
pub const VOCABS: &[&str] = &[
    "llama-spm",
    "phi-3",
    "llama-bpe",
    "gpt-2",
    "refact",
    "starcoder",
    "qwen2",
    "qwen35",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "mpt",
    "command-r",
    "bert-bge",
];

/// The vocab-only GGUF of llama.cpp's tokenizer tests named `name` (one of [`VOCABS`]).
pub fn vocab_file(name: &str) -> engine::gguf::GgufFile {
    let path = fixture(&format!("tokenizer/ggml-vocab-{name}.gguf"));
    engine::gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The tokenizer of [`vocab_file`]`(name)`.
pub fn vocab_tokenizer(name: &str) -> engine::tokenizer::Tokenizer {
    engine::tokenizer::Tokenizer::from_gguf(&vocab_file(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
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

/// A transcript's words, lowercased, punctuation trimmed (what word error rates compare).
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()).filter(|w| !w.is_empty()).collect()
}

/// Word error rate of `heard` against `said`: the fewest word substitutions, insertions and
/// deletions that turn one into the other, over the words said.
pub fn word_error_rate(said: &[String], heard: &[String]) -> f64 {
    let mut row: Vec<usize> = (0..=heard.len()).collect();
    for (i, s) in said.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, h) in heard.iter().enumerate() {
            let substitution = diagonal + usize::from(s != h);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[heard.len()] as f64 / said.len().max(1) as f64
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

/// The real model `target` of [`fetch_model`], loaded once per test binary and shared by its
/// tests (a load maps the file and repacks the weights: seconds each time).
pub fn shared_model(target: &str) -> &'static engine::model::Model {
    static LOADED: std::sync::Mutex<Vec<(String, &'static engine::model::Model)>> = std::sync::Mutex::new(Vec::new());
    // held while loading: two tests asking for the same model load it once
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, model)) = loaded.iter().find(|(t, _)| t == target) {
        return model;
    }
    let model = engine::model::Model::load(fetch_model(target)).unwrap_or_else(|e| panic!("{target}: {e}"));
    // lives as long as the test binary
    let model: &'static engine::model::Model = Box::leak(Box::new(model));
    loaded.push((target.to_string(), model));
    model
}

/// Raises this process's soft limit of open files towards `wanted` (at most the hard limit);
/// the limit now in force.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit / setrlimit with a valid pointer to an rlimit this function owns
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        }
    }
    limit.rlim_cur
}

/// Installs the Debian packages the tests need (nginx) once, with the repository's
/// `tools/system-test-deps.sh`, and returns the nginx binary's path.
pub fn nginx_binary() -> PathBuf {
    system_tool("nginx")
}

/// Installs the Debian packages the tests need when missing (see [`nginx_binary`]) and returns
/// espeak-ng's path: speech synthesized at test time.
pub fn espeak_binary() -> PathBuf {
    system_tool("espeak-ng")
}

/// Installs the Debian packages the tests need when missing (see [`nginx_binary`]) and returns
/// chromedriver's path (Debian's chromium-driver, for the playground page's browser test).
pub fn chromedriver_binary() -> PathBuf {
    system_tool("chromedriver")
}

fn system_tool(name: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/system-test-deps.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(name)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run tools/system-test-deps.sh");
    assert!(out.status.success(), "tools/system-test-deps.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path").trim())
}

/// Installs the pinned Python test packages (openai, prometheus_client, openapi-spec-validator,
/// schemathesis) from PyPI once, cached, with the repository's `tools/python-test-deps.sh`, and
/// returns the folder to put on `PYTHONPATH`.
pub fn python_test_deps() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/python-test-deps.sh");
    let out = std::process::Command::new("bash").arg(&script).output().expect("run tools/python-test-deps.sh");
    assert!(out.status.success(), "tools/python-test-deps.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path").trim())
}

/// For each `(schema, text)`: the errors of validating `text` against `schema` with Python's
/// `jsonschema`, the specification's reference implementation (formats checked; a text that is not
/// JSON or a schema that is not valid is an error too), all in one process
/// (`tests/python/json_schema_check.py`). An independent check of what the engine's grammars
/// generate.
pub fn json_schema_errors(cases: &[(serde_json::Value, String)]) -> Vec<Vec<String>> {
    use std::io::Write;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/json_schema_check.py");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .env("PYTHONPATH", python_test_deps())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("run python3");
    let input: Vec<serde_json::Value> = cases.iter().map(|(schema, text)| serde_json::json!({"schema": schema, "text": text})).collect();
    let mut stdin = child.stdin.take().expect("piped stdin");
    // written from a thread: the script answers only after reading everything, but a large
    // input must not fill the pipe while nothing reads its output
    let writer = std::thread::spawn(move || stdin.write_all(&serde_json::to_vec(&input).expect("JSON")));
    let out = child.wait_with_output().expect("python3 json_schema_check.py");
    writer.join().expect("writer thread").expect("write to json_schema_check.py");
    assert!(out.status.success(), "json_schema_check.py failed");
    let errors: Vec<Vec<String>> = serde_json::from_slice(&out.stdout).expect("json_schema_check.py's output");
    assert_eq!(errors.len(), cases.len());
    errors
}

/// A running `engine-cli serve` child, killed when dropped (the test passed or not).
pub struct ServeProcess {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`, as the server printed it.
    pub base: String,
    /// What the server printed before its address (what it serves, and how).
    pub banner: Vec<String>,
}

impl ServeProcess {
    /// Starts `<engine_cli> serve --port 0 <args>` and waits (at most a minute) for its
    /// `listening on` line.
    pub fn start(engine_cli: &Path, args: &[&std::ffi::OsStr]) -> ServeProcess {
        use std::io::BufRead;
        let mut child = std::process::Command::new(engine_cli)
            .args(["serve", "--port", "0"])
            .args(args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start engine-cli serve");
        let stderr = child.stderr.take().expect("piped stderr");
        // read stderr to the end on a thread: a full pipe would block the server's logging
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // the lines before the address; later ones are read and dropped
            let mut banner = Some(Vec::new());
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                match (line.strip_prefix("listening on "), banner.as_mut()) {
                    (Some(address), Some(_)) => {
                        let _ = tx.send((address.trim().to_string(), banner.take().unwrap_or_default()));
                    }
                    (None, Some(lines)) => lines.push(line),
                    _ => {}
                }
            }
        });
        let (base, banner) = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the server printed no address");
        ServeProcess { child, base, banner }
    }
}

impl ServeProcess {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits (at most `limit`) for the server to exit; its exit status, or
    /// `None` when it was still running (it is killed then).
    pub fn terminate(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on the pid of a child this process started and has not reaped
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
