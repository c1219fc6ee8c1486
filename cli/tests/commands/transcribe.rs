//! `engine-cli transcribe` with the real Whisper tiny.en: a clip's text equals faster-whisper's;
//! a recording longer than one window (the five test clips one after another, twice: 58 s) comes out
//! whole, its segments in order across the window boundary; a sentence espeak-ng speaks at test
//! time (22,050 Hz, resampled) comes out near word for word; a file that is not audio is one
//! line on stderr and exit code 2.

use std::path::Path;
use std::process::Command;

use engine_tests::{fetch_model, fixture, read_json, words};

fn engine_cli() -> Command {
    Command::new(Path::new(env!("CARGO_BIN_EXE_engine-cli")))
}

/// A 16 kHz mono 16-bit WAV of `samples`.
fn wav(samples: &[i16]) -> Vec<u8> {
    let data = samples.len() as u32 * 2;
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for v in [16u32.to_le_bytes().to_vec(), 1u16.to_le_bytes().to_vec(), 1u16.to_le_bytes().to_vec()] {
        b.extend_from_slice(&v);
    }
    b.extend_from_slice(&16_000u32.to_le_bytes());
    b.extend_from_slice(&32_000u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    samples.iter().for_each(|s| b.extend_from_slice(&s.to_le_bytes()));
    b
}

/// The 16-bit samples of a fixture clip (its data chunk follows a 44-byte header).
fn clip_samples(name: &str) -> Vec<i16> {
    let bytes = std::fs::read(fixture(&format!("whisper/clips/{name}.wav"))).unwrap();
    bytes[44..].chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect()
}

#[test]
fn transcribes_clips_and_long_recordings() {
    let model = fetch_model("whisper-tiny.en");
    let goldens = read_json(&fixture("whisper/goldens.json"));
    let out = engine_cli().args(["transcribe", "-m"]).arg(&model).arg(fixture("whisper/clips/weather.wav")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), goldens["whisper-tiny.en"]["weather"]["text"].as_str().unwrap());

    // 58 s: the clips with a second of silence after each, twice
    let names = ["weather", "numbers", "science", "question", "story"];
    let mut samples = Vec::new();
    for name in names.iter().chain(&names) {
        samples.extend(clip_samples(name));
        samples.extend(std::iter::repeat_n(0i16, 16_000));
    }
    let dir = std::env::temp_dir().join(format!("engine-transcribe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let long = dir.join("long.wav");
    std::fs::write(&long, wav(&samples)).unwrap();
    let out = engine_cli().args(["transcribe", "--format", "verbose_json", "-m"]).arg(&model).arg(&long).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let segments = v["segments"].as_array().unwrap();
    let times: Vec<(f64, f64)> = segments.iter().map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap())).collect();
    assert!(times.windows(2).all(|w| w[0].1 <= w[1].0 + 1e-9), "segments out of order: {times:?}");
    assert!(times.last().unwrap().1 > 30.0, "nothing after the first window: {times:?}");
    // the sentences as spoken, word for word but for a few
    let said: Vec<String> = names
        .iter()
        .chain(&names)
        .flat_map(|name| words(&std::fs::read_to_string(fixture(&format!("whisper/clips/{name}.txt"))).unwrap()))
        .collect();
    let wer = engine_tests::word_error_rate(&said, &words(v["text"].as_str().unwrap()));
    println!("word error rate over 58 s: {wer:.3}");
    assert!(wer < 0.15, "word error rate {wer}: {}", v["text"]);

    // speech synthesized now (espeak-ng's 22,050 Hz through the resampler), never heard before
    let sentence = "The museum opens at nine in the morning and closes early on Sundays.";
    let spoken = dir.join("spoken.wav");
    let status =
        Command::new(engine_tests::espeak_binary()).args(["-v", "en-us", "-s", "150", "-w"]).arg(&spoken).arg(sentence).status().unwrap();
    assert!(status.success());
    let out = engine_cli().args(["transcribe", "-m"]).arg(&model).arg(&spoken).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let heard = String::from_utf8_lossy(&out.stdout);
    let wer = engine_tests::word_error_rate(&words(sentence), &words(&heard));
    println!("synthesized sentence: {heard:?}, word error rate {wer:.3}");
    assert!(wer <= 0.25, "word error rate {wer}: {heard:?}");
    std::fs::remove_dir_all(&dir).ok();

    let out = engine_cli().args(["transcribe", "-m"]).arg(&model).arg(fixture("whisper/README.md")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains("not a supported audio file"), "{stderr}");
}
