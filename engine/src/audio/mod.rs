//! Audio input for speech models: any common file (WAV, FLAC, MP3, Ogg Vorbis) to 16 kHz mono
//! samples ([`decode`]), and those samples to Whisper's log-mel spectrogram ([`mel`]).

pub mod decode;
mod fft;
pub mod mel;

pub use decode::{decode_16k_mono, AudioError, DecodedAudio};
pub use mel::{log_mel, mel_filters, LogMel, FRAMES_PER_WINDOW, HOP, N_FFT, SAMPLE_RATE};
