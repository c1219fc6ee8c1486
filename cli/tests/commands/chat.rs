//! `engine-cli chat`: turns read line by line from a pipe, replies streamed, the conversation
//! kept between turns; the real Qwen model answers through its own template, a model without a
//! template gets ChatML and says so.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use engine_tests::{fetch_model, fixture};

fn chat(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_engine-cli"))
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run engine-cli");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn qwen_answers_two_turns_with_its_template() {
    let model = fetch_model("qwen2.5-coder");
    let out = chat(
        &["-m", model.to_str().unwrap(), "--temp", "0", "-n", "24", "-c", "512"],
        "What is the capital of France? Answer with one word.\n\nAnd the capital of Italy? One word.\n",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let replies: Vec<&str> = text.lines().collect();
    assert_eq!(replies.len(), 2, "{text:?}");
    assert!(replies[0].contains("Paris"), "{text:?}");
    // the second answer needs the first turn: the conversation is kept
    assert!(replies[1].contains("Rome"), "{text:?}");
}

#[test]
fn a_model_without_a_template_gets_chatml() {
    let model = fixture("models/tiny-llama-F32.gguf");
    let out = chat(&["-m", model.to_str().unwrap(), "--seed", "1", "-n", "5"], "hello\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("using ChatML"));
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1);
}

#[test]
fn bad_flags_are_one_line_errors() {
    let model = fixture("models/tiny-llama-F32.gguf");
    let out = chat(&["-m", model.to_str().unwrap(), "--min-p", "2"], "hello\n");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8(out.stderr).unwrap().lines().count(), 1);
}
