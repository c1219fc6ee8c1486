//! `engine-cli serve` flags for models managed at run time: `--models-dir` alone (no `--model`)
//! serves what `POST /v1/models` loads from it, `--idle-unload` unloads an idle model and loads it
//! again for the next request; a models directory that does not exist stops the server at start.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use engine_tests::{fixture, ServeProcess};
use reqwest::blocking::Client;
use serde_json::{json, Value};

fn engine_cli() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_engine-cli"))
}

#[test]
fn a_models_directory_alone_serves_what_is_loaded_from_it_and_idle_models_are_unloaded() {
    let _serial = crate::serial();
    let dir = fixture("models");
    let args = ["--models-dir".as_ref(), dir.as_os_str(), "--idle-unload".as_ref(), "1".as_ref(), "-c".as_ref(), "256".as_ref()];
    let server = ServeProcess::start(engine_cli(), &args);
    let c = Client::new();
    let models: Value = c.get(format!("{}/v1/models", server.base)).send().unwrap().json().unwrap();
    assert_eq!(models["data"], json!([]));
    let loaded: Value =
        c.post(format!("{}/v1/models", server.base)).json(&json!({"model": "tiny-llama-Q8_0"})).send().unwrap().json().unwrap();
    assert_eq!((loaded["id"].as_str(), loaded["context_length"].as_u64()), (Some("tiny-llama-Q8_0"), Some(256)), "{loaded}");
    let chat = json!({"model": "tiny-llama-Q8_0", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0});
    let first: Value = c.post(format!("{}/v1/chat/completions", server.base)).json(&chat).send().unwrap().json().unwrap();
    let status = || c.get(format!("{}/v1/models/tiny-llama-Q8_0", server.base)).send().unwrap().json::<Value>().unwrap()["status"].clone();
    let mut waited = Duration::ZERO;
    while status() != "unloaded" {
        assert!(waited < Duration::from_secs(10), "not unloaded after {waited:?}");
        std::thread::sleep(Duration::from_millis(200));
        waited += Duration::from_millis(200);
    }
    let again: Value = c.post(format!("{}/v1/chat/completions", server.base)).json(&chat).send().unwrap().json().unwrap();
    assert_eq!(again["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"], "{again}");
}

#[test]
fn a_models_directory_that_is_not_there_is_an_error_at_start() {
    let _serial = crate::serial();
    let out = Command::new(engine_cli()).args(["serve", "--port", "0", "--models-dir", "/nonexistent/models"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--models-dir /nonexistent/models"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// Streams a chat completion in a thread, returning its whole body (what arrived before the
/// connection closed).
fn stream_in_background(base: &str, model: &str, max_tokens: u64) -> std::thread::JoinHandle<String> {
    use std::io::Read;
    let (url, body) = (
        format!("{base}/v1/chat/completions"),
        json!({"model": model, "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": max_tokens, "temperature": 0, "stream": true}),
    );
    std::thread::spawn(move || {
        let mut r = Client::new().post(url).json(&body).send().unwrap();
        let mut text = String::new();
        let _ = r.read_to_string(&mut text);
        text
    })
}

#[test]
fn sigterm_drains_open_requests_and_cuts_them_after_the_drain_timeout() {
    let _serial = crate::serial();
    // a short request finishes during the drain, and the server exits 0
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let mut server = ServeProcess::start(
        engine_cli(),
        &["-m".as_ref(), model.as_os_str(), "-c".as_ref(), "512".as_ref(), "--drain-timeout".as_ref(), "20".as_ref()],
    );
    let stream = stream_in_background(&server.base, "tiny-llama-Q8_0", 400);
    std::thread::sleep(Duration::from_millis(50));
    let status = server.terminate(Duration::from_secs(20)).expect("the server exited");
    assert!(status.success(), "{status:?}");
    let text = stream.join().unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(Client::new().get(format!("{}/health", server.base)).send().is_err(), "still accepting after the drain");
    // a long generation is cut once the drain timeout passes, and the server still exits 0
    let qwen = engine_tests::fetch_model("qwen2.5-coder");
    let id = qwen.file_stem().unwrap().to_str().unwrap().to_string();
    let mut server = ServeProcess::start(
        engine_cli(),
        &["-m".as_ref(), qwen.as_os_str(), "-c".as_ref(), "1024".as_ref(), "--drain-timeout".as_ref(), "1".as_ref()],
    );
    let stream = stream_in_background(&server.base, &id, 600);
    std::thread::sleep(Duration::from_millis(800));
    let signalled = std::time::Instant::now();
    let status = server.terminate(Duration::from_secs(20)).expect("the server exited");
    assert!(status.success(), "{status:?}");
    assert!(signalled.elapsed() < Duration::from_secs(5), "{:?}", signalled.elapsed());
    let text = stream.join().unwrap();
    assert!(text.contains("data: {") && !text.contains("[DONE]"), "{text}");
}

/// The value after `key` in `line`, up to the next space.
fn number_after(line: &str, key: &str) -> usize {
    let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key:?} in {line}")) + key.len()..];
    rest.split([' ', ',']).next().unwrap().parse().unwrap_or_else(|_| panic!("a number after {key:?} in {line}"))
}

#[test]
fn the_banner_says_what_the_kv_cache_takes_and_kv_memory_sizes_it() {
    use engine::kv_cache::KvType;
    let _serial = crate::serial();
    let path = fixture("models/tiny-llama-Q8_0.gguf");
    let model = engine::model::Model::load(&path).unwrap();
    for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
        let args = ["-m".as_ref(), path.as_os_str(), "-c".as_ref(), "256".as_ref(), "--kv-type".as_ref(), ty.name().as_ref()];
        let server = ServeProcess::start(engine_cli(), &args);
        let line = server.banner.iter().find(|l| l.contains("KV cache")).unwrap_or_else(|| panic!("{:?}", server.banner));
        assert!(line.starts_with(&format!("tiny-llama-Q8_0: KV cache {}: ", ty.name())), "{line}");
        let per_position = number_after(line, &format!("KV cache {}: ", ty.name()));
        assert_eq!(per_position, model.kv_bytes_per_position(ty), "{line}");
        // context x parallel (8) positions by default
        assert_eq!(number_after(line, "the cache holds "), 256 * 8, "{line}");
        assert!(line.contains("(8 whole sequences)") && line.contains("would fit in the"), "{line}");
    }
    // 1 MiB of a q4_0 cache holds as many positions as fit, more than an f16 one would
    let args = [
        "-m".as_ref(),
        path.as_os_str(),
        "-c".as_ref(),
        "256".as_ref(),
        "--kv-type".as_ref(),
        "q4_0".as_ref(),
        "--kv-memory".as_ref(),
        "1".as_ref(),
    ];
    let server = ServeProcess::start(engine_cli(), &args);
    let line = server.banner.iter().find(|l| l.contains("KV cache")).unwrap();
    let positions = number_after(line, "the cache holds ");
    // in whole blocks of 32, less each of the 8 slots' copy-on-write block
    assert_eq!(positions, (1 << 20) / model.kv_bytes_per_position(KvType::Q4_0) / 32 * 32 - 8 * 32, "{line}");
    assert!(positions > (1 << 20) / model.kv_bytes_per_position(KvType::F16), "{line}");
    // too little for one context: a one-line error at start
    let out = Command::new(engine_cli())
        .args(["serve", "--port", "0", "-m", path.to_str().unwrap(), "-c", "100000", "--kv-memory", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 MiB of f16 KV cache hold") && stderr.contains("less than one context of 100000"), "{stderr}");
}

#[test]
fn lora_adapters_given_at_start_are_listed_and_rescaled_over_http() {
    let _serial = crate::serial();
    let dir = std::env::temp_dir().join(format!("engine-serve-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<std::path::PathBuf> = ["llama-all", "llama-qv"]
        .iter()
        .map(|name| {
            let spec = engine_tests::lora::spec(name);
            let base = engine::gguf::GgufFile::open(fixture(spec.base)).unwrap();
            let path = dir.join(format!("{name}.gguf"));
            std::fs::write(&path, engine_tests::lora::make(&base, spec).unwrap()).unwrap();
            path
        })
        .collect();
    let model = fixture("archs/llama-s1.gguf");
    let qv = format!("{}:0.5", files[1].display());
    let args = ["-m".as_ref(), model.as_os_str(), "--lora".as_ref(), files[0].as_os_str(), "--lora".as_ref(), qv.as_ref()];
    let server = ServeProcess::start(engine_cli(), &args);
    let lines: Vec<&String> = server.banner.iter().filter(|l| l.contains("LoRA adapter")).collect();
    assert_eq!(lines.len(), 2, "{:?}", server.banner);
    assert!(lines[0].starts_with("llama-s1: LoRA adapter 0 ") && lines[0].ends_with("(rank 8, alpha 16) at scale 1"), "{}", lines[0]);
    assert!(lines[1].ends_with("(rank 4, alpha 0) at scale 0.5"), "{}", lines[1]);
    let client = reqwest::blocking::Client::new();
    let list: serde_json::Value = client.get(format!("{}/lora-adapters", server.base)).send().unwrap().json().unwrap();
    assert_eq!(list[1]["path"], files[1].display().to_string());
    assert_eq!((list[0]["scale"].as_f64(), list[1]["scale"].as_f64()), (Some(1.0), Some(0.5)));
    let r = client.post(format!("{}/lora-adapters", server.base)).json(&serde_json::json!([{"id": 1, "scale": 1.0}])).send().unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let list: serde_json::Value = client.get(format!("{}/lora-adapters", server.base)).send().unwrap().json().unwrap();
    assert_eq!((list[0]["scale"].as_f64(), list[1]["scale"].as_f64()), (Some(0.0), Some(1.0)));
    drop(server);
    // an adapter of another architecture: the server does not start, the error names it
    let other = dir.join("phi3.gguf");
    let spec = engine_tests::lora::spec("phi3-fused");
    std::fs::write(&other, engine_tests::lora::make(&engine::gguf::GgufFile::open(fixture(spec.base)).unwrap(), spec).unwrap()).unwrap();
    let out = std::process::Command::new(engine_cli())
        .args(["serve", "--port", "0", "-m"])
        .arg(&model)
        .arg("--lora")
        .arg(&other)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("phi3.gguf") && err.contains("\"phi3\""), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
