//! Running as several replicas: `deploy/nginx/engine.conf` (Debian's nginx, installed by
//! `tools/system-test-deps.sh`) balancing two `engine-cli serve` replicas on 127.0.0.1: streams
//! through it, a conversation kept on one replica by its system prompt, and one replica killed
//! (SIGKILL) under load: no non-streamed request lost, a stream open on it cut at once, not
//! left hanging. The Kubernetes manifests of `deploy/kubernetes` are checked against the API's
//! schemas by `kubernetes-validate` (from PyPI, pinned); those of `deploy/inference-gateway`
//! against them, each other and a live server's metrics (`python/inference_gateway.py`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine_tests::{fixture, nginx_binary, python_test_deps, ServeProcess};
use reqwest::blocking::Client;
use serde_json::{json, Value};

const MODEL: &str = "tiny-llama-Q8_0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn replica() -> ServeProcess {
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    ServeProcess::start(Path::new(env!("CARGO_BIN_EXE_engine-cli")), &["-m".as_ref(), model.as_os_str(), "-c".as_ref(), "2048".as_ref()])
}

/// nginx with the shipped configuration, its replicas and its port replaced; killed when dropped.
struct Nginx {
    child: Child,
    base: String,
    binary: PathBuf,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // `-s stop` ends the workers with the master (killing the master alone leaves them)
        let stop =
            Command::new(&self.binary).arg("-p").arg(&self.dir).arg("-c").arg(self.dir.join("engine.conf")).args(["-s", "stop"]).output();
        if !stop.is_ok_and(|o| o.status.success()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn nginx(replicas: &[&str]) -> Nginx {
    let conf = std::fs::read_to_string(root().join("deploy/nginx/engine.conf")).unwrap();
    let port = free_port();
    let servers: String = replicas.iter().map(|r| format!("        server {r} max_fails=1 fail_timeout=10s;\n")).collect();
    let mut out = String::new();
    let mut replaced = false;
    for line in conf.lines() {
        if line.trim_start().starts_with("server 127.0.0.1:") {
            if !replaced {
                out.push_str(&servers);
            }
            replaced = true;
            continue;
        }
        replaced = false;
        out.push_str(&line.replace("listen 127.0.0.1:8080;", &format!("listen 127.0.0.1:{port};")));
        out.push('\n');
    }
    let dir = std::env::temp_dir().join(format!("engine-nginx-{}-{port}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    // a prefix of its own: pid file, logs and temporary files under it, no root needed
    let conf = format!("pid {}/nginx.pid;\nerror_log {}/logs/error.log;\n{out}", dir.display(), dir.display());
    std::fs::write(dir.join("engine.conf"), &conf).unwrap();
    let nginx = nginx_binary();
    let test = Command::new(&nginx).args(["-t", "-p"]).arg(&dir).arg("-c").arg(dir.join("engine.conf")).output().unwrap();
    assert!(test.status.success(), "nginx -t: {}", String::from_utf8_lossy(&test.stderr));
    let child = Command::new(&nginx)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(dir.join("engine.conf"))
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while Client::new().get(format!("{base}/health")).send().is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "nginx did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Nginx { child, base, binary: nginx, dir }
}

fn chat(system: &str, stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0, "stream": stream})
}

/// Posts a chat completion through nginx: the status, the replica that answered, and the body.
fn post(base: &str, body: &Value) -> (u16, String, String) {
    match Client::new().post(format!("{base}/v1/chat/completions")).json(body).timeout(Duration::from_secs(30)).send() {
        Ok(r) => {
            let upstream = r.headers().get("x-engine-upstream").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
            (r.status().as_u16(), upstream, r.text().unwrap_or_default())
        }
        Err(e) => (0, String::new(), e.to_string()),
    }
}

#[test]
fn nginx_balances_two_replicas_keeps_conversations_together_and_survives_a_killed_replica() {
    let _serial = crate::serial();
    let (a, mut b) = (replica(), replica());
    let (addr_a, addr_b) = (a.base.trim_start_matches("http://").to_string(), b.base.trim_start_matches("http://").to_string());
    let lb = nginx(&[&addr_a, &addr_b]);
    // a stream through nginx arrives whole
    let (status, _, text) = post(&lb.base, &chat("You are brief.", true));
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    // one conversation, one replica; different conversations spread over both
    let first = post(&lb.base, &chat("You are a pirate.", false)).1;
    for _ in 0..5 {
        assert_eq!(post(&lb.base, &chat("You are a pirate.", false)).1, first);
    }
    let upstreams: std::collections::BTreeSet<String> = (0..16).map(|i| post(&lb.base, &chat(&format!("Persona {i}."), false)).1).collect();
    assert_eq!(upstreams.len(), 2, "{upstreams:?}");
    // requests keep coming while replica b is killed (SIGKILL): none is lost (nginx sends one
    // that had no answer yet to the other replica), and a stream cut by the kill ends at once
    let killed_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (base, stop, killed_at) = (lb.base.clone(), stop.clone(), killed_at.clone());
            std::thread::spawn(move || {
                let (mut after_kill, mut cut) = (0, 0);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let stream = n % 2 == 0;
                    let (status, _, text) = post(&base, &chat(&format!("Client {i} turn {n}."), stream));
                    n += 1;
                    let killed = *killed_at.lock().unwrap();
                    if stream && status == 200 && !text.ends_with("data: [DONE]\n\n") {
                        // a stream of the killed replica: cut, right after the kill
                        let k = killed.expect("a stream cut before the kill");
                        assert!(k.elapsed() < Duration::from_secs(5), "a cut stream ended {:?} after the kill", k.elapsed());
                        cut += 1;
                    } else {
                        assert_eq!(status, 200, "a request was lost: {text}");
                    }
                    if killed.is_some_and(|k| sent > k) {
                        after_kill += 1;
                    }
                }
                (after_kill, cut)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // a long stream on replica b (a system prompt that nginx sends there), killed as soon as its
    // first bytes arrived
    let to_b = (0..64).map(|i| format!("Persona {i}.")).find(|p| post(&lb.base, &chat(p, false)).1 == addr_b).expect("a persona on b");
    let mut long = chat(&to_b, true);
    // sampled, and the end of text (token 2) banned: a random-weight model's text may otherwise
    // end after a few tokens, before the kill, on one CPU and not on another
    (long["max_tokens"], long["temperature"], long["seed"], long["logit_bias"]) = (json!(1800), json!(1.0), json!(7), json!({"2": -100}));
    let mut open_stream =
        Client::new().post(format!("{}/v1/chat/completions", lb.base)).json(&long).timeout(Duration::from_secs(60)).send().unwrap();
    assert_eq!(open_stream.status(), 200);
    let mut first = [0u8; 64];
    std::io::Read::read_exact(&mut open_stream, &mut first).unwrap();
    // the time is set first: a stream cut by the kill must find it
    let killed = Instant::now();
    *killed_at.lock().unwrap() = Some(killed);
    b.kill();
    // the open stream ends (its connection closed without the end of the stream), not hangs
    let mut rest = Vec::new();
    let ended = std::io::Read::read_to_end(&mut open_stream, &mut rest);
    let cut_after = killed.elapsed();
    let rest = String::from_utf8_lossy(&rest);
    assert!(ended.is_err() || !rest.ends_with("data: [DONE]\n\n"), "the stream on the killed replica completed: {rest}");
    assert!(cut_after < Duration::from_secs(5), "the stream on the killed replica ended {cut_after:?} after the kill");
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (after, cut) = clients.into_iter().map(|c| c.join().unwrap()).fold((0, 0), |(a, c), (x, y)| (a + x, c + y));
    eprintln!("the open stream on the killed replica ended {cut_after:?} after the kill; {after} requests after it, all answered; {cut} other streams cut");
    assert!(after >= 8, "only {after} requests after the kill");
    drop(a);
}

/// Runs `python3 ARGS...` with the pinned test packages; asserts it succeeded and returns what it
/// printed (stdout, then stderr).
fn python(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new("python3").args(args).env("PYTHONPATH", python_test_deps()).output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python3 {args:?}: {report}");
    report
}

#[test]
fn the_kubernetes_manifests_are_valid_for_the_api() {
    let _serial = crate::serial();
    let files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/kubernetes")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(files.len() >= 4, "{files:?}");
    let mut args: Vec<&std::ffi::OsStr> =
        ["-m", "kubernetes_validate", "--kubernetes-version", "1.31.0", "--strict"].map(|a| a.as_ref()).to_vec();
    args.extend(files.iter().map(|f| f.as_os_str()));
    let report = python(&args);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert!(report.contains(&name) && !report.contains("ERROR"), "{name}: {report}");
    }
}

/// The Gateway API Inference Extension's pool, route and endpoint picker: valid where Kubernetes'
/// schemas reach, consistent with the replicas' manifests, and every metric the picker reads a
/// gauge in range on a live server.
#[test]
fn the_inference_gateway_manifests_fit_the_replicas_and_their_metrics() {
    let _serial = crate::serial();
    let server = replica();
    let (script, root) = (root().join("cli/tests/python/inference_gateway.py"), root());
    let report = python(&[script.as_os_str(), root.as_os_str(), server.base.as_ref()]);
    assert!(report.contains("the picker reads queue_depth, running_sequences, kv_cache_usage_ratio"), "{report}");
    eprint!("{report}");
}
