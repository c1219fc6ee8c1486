//! Python clients against `engine-cli serve` on 127.0.0.1 with the tiny fixtures, their packages
//! installed from PyPI by `tools/python-test-deps.sh` (cached):
//! - the official `openai` package with strict response validation (`python/openai_sdk.py`);
//! - `/openapi.yaml` validated by `openapi-spec-validator`, and `schemathesis` generating
//!   requests from it for every route: no 5xx, no undeclared status or content type, no response
//!   (streamed events included) that breaks its schema (`python/openapi_conformance.py`, settings
//!   and the cross-field exceptions in `python/schemathesis.toml`);
//! - the `openai` package's moderations with the real Qwen2.5-Coder-0.5B as generic guard
//!   (`python/moderations_generic.py`), and with a guard of each family that has prompts of its
//!   own, a scripted model answering as the family does (`python/moderations_families.py`);
//! - the official `anthropic` package's Messages API, with an API key sent as `x-api-key`
//!   (`python/anthropic_sdk.py`);
//! - both packages as agent frameworks use them, against the real Qwen2.5-Coder-0.5B: the
//!   Responses API and the Messages API, answered whole and streamed, with function tool round
//!   trips (`python/agent_clients.py`);
//! - audio transcriptions with the real Whisper tiny.en, every response format
//!   (`python/transcriptions.py`);
//! - chat completions with an image part through the tiny Gemma 3 projector, whole and streamed,
//!   the prefix cache, and the image errors (`python/vision.py`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use engine_tests::{fetch_model, fixture, python_test_deps, ServeProcess};

const CHAT: &str = "tiny-llama-Q8_0";
const GUARD: &str = "guardian-tiny-3.0-q8_0";

/// Runs `cli/tests/python/<script> <base URL> <args>` against a fresh server with the tiny chat
/// model and the tiny guard; returns its stdout, failing the test when the script fails.
fn run_against_tiny_server(script: &str, args: &[&str]) -> String {
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let guard = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    run_against(script, &["-c".as_ref(), "512".as_ref(), "-m".as_ref(), model.as_os_str(), "--guard".as_ref(), guard.as_os_str()], args)
}

/// Runs the script against `engine-cli serve <serve_args>`.
fn run_against(script: &str, serve_args: &[&OsStr], args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pythonpath = python_test_deps();
    let server = ServeProcess::start(Path::new(env!("CARGO_BIN_EXE_engine-cli")), serve_args);
    let out = Command::new("python3")
        .arg(root.join("cli/tests/python").join(script))
        .arg(&server.base)
        .args(args)
        .env("PYTHONPATH", &pythonpath)
        // schemathesis and hypothesis keep state in the working directory: not in the repository
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all checks passed"), "{stdout}");
    stdout
}

#[test]
fn the_openai_python_package_works_against_the_server() {
    run_against_tiny_server("openai_sdk.py", &[CHAT, GUARD]);
}

/// Moderations with the real Qwen2.5-Coder-0.5B-Instruct as generic guard
/// (`python/moderations_generic.py`).
#[test]
fn the_openai_package_moderates_with_a_chat_model_as_guard() {
    let qwen = fetch_model("qwen2.5-coder");
    let id = qwen.file_stem().unwrap().to_str().unwrap().to_string();
    let args: [&OsStr; 5] = ["-c".as_ref(), "1024".as_ref(), "--guard".as_ref(), qwen.as_os_str(), "-m".as_ref()];
    let mut serve: Vec<&OsStr> = args.to_vec();
    serve.push(qwen.as_os_str());
    run_against("moderations_generic.py", &serve, &[&id, qwen.to_str().unwrap()]);
}

/// Moderations and scans with a guard of each family with prompts of its own: a scripted model
/// (`engine_tests::scripted`) with the family's template or name, answering as the family does
/// (`python/moderations_families.py`).
#[test]
fn the_openai_package_moderates_with_every_guard_family() {
    /// A scripted guard of a family, and the OpenAI categories no risk it judges covers.
    struct Scripted<'a> {
        family: &'a str,
        name: &'a str,
        specials: &'a [&'a str],
        reply: Vec<&'a str>,
        template: String,
        unapplied: &'a str,
    }
    let template = |name: &str| std::fs::read_to_string(fixture(&format!("{name}.jinja"))).unwrap();
    let llama3 = ["<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"];
    let harmony = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"];
    let families = [
        Scripted {
            family: "llama-guard",
            name: "scripted",
            specials: &llama3,
            reply: vec!["unsafe", "\n", "S1", ",", "S10", "<|eot_id|>"],
            template: template("guard-families/llama-guard-3-8b"),
            unapplied: "harassment,harassment/threatening",
        },
        Scripted {
            family: "shieldgemma",
            name: "scripted",
            specials: &llama3,
            reply: vec!["Yes", "<|eot_id|>"],
            template: template("guard-families/shieldgemma"),
            unapplied: "illicit",
        },
        Scripted {
            family: "qwen3guard",
            name: "Qwen3Guard-Gen-0.6B",
            specials: &llama3,
            reply: vec!["Safety:", " Unsafe", "\nCategories:", " Violent", "<|eot_id|>"],
            template: String::new(),
            unapplied: "",
        },
        Scripted {
            family: "gpt-oss-safeguard",
            name: "gpt-oss-safeguard-20b",
            specials: &harmony,
            reply: vec!["<|channel|>", "final", "<|message|>", "1", "<|return|>"],
            template: template("templates/openai-gpt-oss-120b"),
            unapplied: "",
        },
    ];
    for f in families {
        let file = engine_tests::scripted::make_named(f.name, f.specials, &f.reply, &f.template).unwrap();
        let path = std::env::temp_dir().join(format!("{}-scripted-{}.gguf", f.family, std::process::id()));
        std::fs::write(&path, file.bytes()).unwrap();
        let id = path.file_stem().unwrap().to_str().unwrap().to_string();
        let serve: [&OsStr; 6] = ["-c".as_ref(), "1024".as_ref(), "--guard".as_ref(), path.as_os_str(), "-m".as_ref(), path.as_os_str()];
        run_against("moderations_families.py", &serve, &[&id, f.family, f.unapplied]);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn the_anthropic_package_talks_to_the_messages_api() {
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let serve: [&OsStr; 6] = ["-c".as_ref(), "512".as_ref(), "-m".as_ref(), model.as_os_str(), "--api-key".as_ref(), "sekret".as_ref()];
    run_against("anthropic_sdk.py", &serve, &[CHAT, "sekret"]);
}

/// The Responses and Messages APIs through the official packages with the real
/// Qwen2.5-Coder-0.5B-Instruct (`python/agent_clients.py`).
#[test]
fn the_official_packages_run_tool_round_trips_on_responses_and_messages() {
    let qwen = fetch_model("qwen2.5-coder");
    let id = qwen.file_stem().unwrap().to_str().unwrap().to_string();
    run_against("agent_clients.py", &["-c".as_ref(), "2048".as_ref(), "-m".as_ref(), qwen.as_os_str()], &[&id]);
}

/// Transcriptions through the official package with the real Whisper tiny.en
/// (`python/transcriptions.py`): the text equals faster-whisper's transcript of the clip.
#[test]
fn the_openai_package_transcribes_with_whisper() {
    let whisper = fetch_model("whisper-tiny.en");
    let goldens = engine_tests::read_json(&fixture("whisper/goldens.json"));
    let text = goldens["whisper-tiny.en"]["question"]["text"].as_str().unwrap().to_string();
    let clip = fixture("whisper/clips/question.wav");
    run_against(
        "transcriptions.py",
        &["--transcribe".as_ref(), whisper.as_os_str()],
        &["whisper-tiny.en-f16", clip.to_str().unwrap(), &text],
    );
}

#[test]
fn the_served_openapi_document_is_valid_and_the_server_keeps_to_it() {
    // with a models directory, so that loading models (POST /v1/models) is in the document too,
    // and a reranker, so that /v1/rerank is
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let guard = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    let dir = fixture("models");
    let minilm = engine::gguf::GgufFile::open(fixture("real/all-MiniLM-L6-v2-Q8_0.gguf")).unwrap();
    let reranker = std::env::temp_dir().join(format!("tiny-reranker-{}.gguf", std::process::id()));
    std::fs::write(&reranker, engine_tests::reranker::make(&minilm).unwrap()).unwrap();
    let serve: [&OsStr; 10] = [
        "-c".as_ref(),
        "512".as_ref(),
        "-m".as_ref(),
        model.as_os_str(),
        "-m".as_ref(),
        reranker.as_os_str(),
        "--guard".as_ref(),
        guard.as_os_str(),
        "--models-dir".as_ref(),
        dir.as_os_str(),
    ];
    let stdout = run_against("openapi_conformance.py", &serve, &[CHAT]);
    std::fs::remove_file(&reranker).unwrap();
    // the number of generated cases, for the log (`cargo test -- --nocapture`)
    println!("{}", stdout.lines().filter(|l| l.starts_with("schemathesis:")).collect::<Vec<_>>().join("\n"));
}

/// The playground page at `/` in headless chromium (`python/webui.py`), behind an API key: a
/// streamed chat, a guard scan's bars (the screenshot of the panel goes to
/// `target/webui-guard.png`; README's picture is a copy of it), a policy picked from the
/// server's, a moderated list.
#[test]
fn the_playground_page_works_in_a_real_browser() {
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let guard = fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf");
    let driver = engine_tests::chromedriver_binary();
    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/webui-guard.png");
    let policies = std::env::temp_dir().join(format!("webui-policies-{}.toml", std::process::id()));
    std::fs::write(&policies, "[policies.strict]\ndescription = \"flags every probability\"\nthresholds = { harm = 0.0 }\n").unwrap();
    let serve: [&OsStr; 10] = [
        "-c".as_ref(),
        "512".as_ref(),
        "-m".as_ref(),
        model.as_os_str(),
        "--guard".as_ref(),
        guard.as_os_str(),
        "--api-key".as_ref(),
        "sekret".as_ref(),
        "--guard-policy".as_ref(),
        policies.as_os_str(),
    ];
    let stdout = run_against("webui.py", &serve, &["sekret", driver.to_str().unwrap(), shot.to_str().unwrap()]);
    std::fs::remove_file(&policies).unwrap();
    println!("{stdout}");
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000, "the guard panel's screenshot");
}

/// Images in chat completions through `--mmproj` (the tiny VLM and Gemma 3 projector of
/// `tests/fixtures/vision/`), beside a model without a projector.
#[test]
fn the_openai_package_sends_images_to_a_model_with_a_projector() {
    let dir = fixture("vision");
    let (lm, mmproj, image) = (dir.join("tiny-vlm.gguf"), dir.join("tiny-gemma3-mmproj.gguf"), dir.join("tile-32.png"));
    let plain = fixture("models/tiny-llama-Q8_0.gguf");
    let serve: Vec<&OsStr> = vec![
        "-c".as_ref(),
        "512".as_ref(),
        "-m".as_ref(),
        lm.as_os_str(),
        "--mmproj".as_ref(),
        mmproj.as_os_str(),
        "-m".as_ref(),
        plain.as_os_str(),
        "--allowed-local-media-path".as_ref(),
        dir.as_os_str(),
        "--max-image-bytes".as_ref(),
        "200000".as_ref(),
    ];
    run_against("vision.py", &serve, &["tiny-vlm", image.to_str().unwrap(), CHAT, dir.to_str().unwrap()]);
}
