//! The audio decoder on arbitrary bytes (what an upload to `/v1/audio/transcriptions` reaches):
//! `decode_16k_mono` returns samples or an error, never panics or hangs; decoded samples are
//! finite and within full scale, [-1, 1] (any rate and channel count converted), and Whisper's log-mel
//! spectrogram of them has the expected frames, each value finite.
#![no_main]

use std::sync::OnceLock;

use engine::audio::{decode_16k_mono, log_mel, mel_filters, HOP};
use libfuzzer_sys::fuzz_target;

/// Longest audio one input may decode to (seconds): keeps every execution short (the mel of
/// 20 s took the target to 24 executions a second).
const MAX_SECONDS: f64 = 3.0;

fuzz_target!(|data: &[u8]| {
    static FILTERS: OnceLock<Vec<f32>> = OnceLock::new();
    let Ok(audio) = decode_16k_mono(data, MAX_SECONDS) else { return };
    assert!(!audio.samples.is_empty());
    assert!(audio.samples.iter().all(|s| s.is_finite() && s.abs() <= 1.0), "samples past full scale");
    let filters = FILTERS.get_or_init(|| mel_filters(80));
    let mel = log_mel(&audio.samples, filters, 80);
    assert_eq!(mel.n_frames, (audio.samples.len() + HOP) / HOP);
    assert!(mel.data.iter().all(|v| v.is_finite()));
});
