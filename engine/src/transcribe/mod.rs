//! Speech to text: what a transcription backend receives and returns. The server's
//! `/v1/audio/transcriptions` route serves any [`Transcriber`]. Whisper's decoding: the logit
//! rules (`logit_rules.rs`), one window's decoding (`window.rs`), and whole recordings with
//! the temperature fallback and segments (`whisper.rs`, whose [`whisper::WhisperTranscriber`]
//! is the server's backend).

pub mod formats;
pub mod logit_rules;
pub mod whisper;
pub mod window;

/// One timed piece of a transcript, with what decoding it said (OpenAI's `verbose_json`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Segment {
    /// Seconds from the start of the audio.
    pub start: f64,
    pub end: f64,
    pub text: String,
    /// The spectrogram frame its window started at.
    pub seek: usize,
    /// Its token ids, timestamps included.
    pub tokens: Vec<u32>,
    /// The temperature its window was decoded at.
    pub temperature: f32,
    pub avg_logprob: f64,
    pub compression_ratio: f64,
    pub no_speech_prob: f64,
}

/// Why a transcription failed: the audio (the client's to fix) or the backend.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TranscribeError {
    #[error("{0}")]
    BadAudio(String),
    #[error("{0}")]
    Failed(String),
}

/// What a backend returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcription {
    pub text: String,
    /// The spoken language, as the backend names it (`"english"`), when it knows.
    pub language: Option<String>,
    /// Length of the audio in seconds, when known.
    pub duration: Option<f64>,
    /// Timed segments; empty when the backend has no timings (then `srt` / `vtt` get one cue
    /// spanning the whole audio).
    pub segments: Vec<Segment>,
}

/// The request's options besides the audio.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TranscribeOptions {
    /// ISO-639-1 code, when the caller knows it.
    pub language: Option<String>,
    /// Context text (earlier transcript, spellings).
    pub prompt: Option<String>,
    /// 0..=1; 0 lets the backend choose (temperature fallback).
    pub temperature: f32,
}

/// A speech-to-text backend. It receives the uploaded bytes as they are (any container: the
/// backend sniffs the format) and runs on a blocking thread.
pub trait Transcriber: Send + Sync {
    /// The model id requests must name.
    fn model_id(&self) -> &str;
    fn transcribe(&self, audio: &[u8], options: &TranscribeOptions) -> Result<Transcription, TranscribeError>;
}
