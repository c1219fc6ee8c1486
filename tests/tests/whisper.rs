//! Whisper's front end against faster-whisper (`tools/make-whisper-goldens.py` made the
//! fixtures in `tests/fixtures/whisper/`): the clips decode to the same samples, and their
//! log-mel spectrograms equal the reference's within 1e-4.

use engine::audio::{decode_16k_mono, log_mel, mel_filters};
use engine_tests::fixture;

const CLIPS: [&str; 5] = ["weather", "numbers", "science", "question", "story"];

/// A `.mel` fixture: (n_mels, n_frames, values band-major).
fn read_mel(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(fixture(&format!("whisper/{name}.mel"))).unwrap();
    let word = |i: usize| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap()) as usize;
    let (n_mels, n_frames) = (word(0), word(1));
    let values: Vec<f32> = bytes[8..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(values.len(), n_mels * n_frames);
    (n_mels, n_frames, values)
}

#[test]
fn log_mel_matches_faster_whisper() {
    let filters = mel_filters(80);
    for name in CLIPS {
        let wav = std::fs::read(fixture(&format!("whisper/clips/{name}.wav"))).unwrap();
        let audio = decode_16k_mono(&wav, 600.0).unwrap();
        let (n_mels, n_frames, want) = read_mel(name);
        let got = log_mel(&audio.samples, &filters, n_mels);
        assert_eq!((got.n_mels, got.n_frames), (n_mels, n_frames), "{name}: shape");
        let worst = got.data.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
        println!("{name}: {n_frames} frames, largest difference from faster-whisper {worst:.2e}");
        assert!(worst <= 1e-4, "{name}: log-mel differs from faster-whisper's by {worst}");
    }
}
