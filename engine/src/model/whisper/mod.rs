//! Whisper (speech to text): a GGUF written by `tools/whisper-to-gguf.py`, its configuration
//! (`config.rs`), weights (`weights.rs`), the encoder of a 30-second log-mel window
//! (`encoder.rs`) and the decoder's steps over the encoded audio (`decoder.rs`). The decoding
//! loop (prompts, timestamp rules, temperature fallback, segments) is `transcribe::whisper`'s.

pub mod config;
pub mod decoder;
pub mod encoder;
pub mod weights;

use std::path::Path;
use std::sync::Arc;

pub use config::{SpecialTokens, StackConfig, WhisperConfig};

use crate::backend::CpuBackend;
use crate::backend::{BackendError, Device};
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use crate::model::error::ModelError;
use crate::tokenizer::{TokenId, Tokenizer};
use encoder::EncodedAudio;
use weights::WhisperWeights;

/// One window's encoded audio, on the device of the model that encoded it.
pub struct EncodedWindow {
    cpu: EncodedAudio<CpuBackend>,
}

/// A loaded Whisper model.
pub struct WhisperModel {
    file: Arc<GgufFile>,
    config: WhisperConfig,
    tokenizer: Tokenizer,
    backend: CpuBackend,
    weights: WhisperWeights<CpuBackend>,
}

impl std::fmt::Debug for WhisperModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperModel").field("encoder", &self.config.encoder).field("decoder", &self.config.decoder).finish()
    }
}

impl WhisperModel {
    /// Loads the Whisper GGUF at `path` on `device` (the CPU for now: the encoder's
    /// convolutions build their inputs on the host).
    pub fn load_on(path: impl AsRef<Path>, device: Device) -> Result<WhisperModel, ModelError> {
        if device != Device::Cpu {
            return Err(BackendError::NotBuilt(device).into());
        }
        let file = Arc::new(GgufFile::open(path)?);
        match file.architecture() {
            Some("whisper") => {}
            Some(other) => return Err(ModelError::UnsupportedArchitecture(format!("{other} (a transcription model must be whisper)"))),
            None => return Err(ModelError::NoArchitecture),
        }
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let config = WhisperConfig::from_gguf(&file, &tokenizer)?;
        let backend = CpuBackend::new();
        let weights = WhisperWeights::load(&file, &backend, &config)?;
        Ok(WhisperModel { file, config, tokenizer, backend, weights })
    }

    pub fn load(path: impl AsRef<Path>) -> Result<WhisperModel, ModelError> {
        WhisperModel::load_on(path, Device::Cpu)
    }

    pub fn config(&self) -> &WhisperConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Encodes one window: `mel` is `n_mels x 3000` log-mel values, band-major.
    pub fn encode(&self, mel: &[f32]) -> Result<EncodedWindow, ModelError> {
        Ok(EncodedWindow { cpu: encoder::encode(&self.backend, &self.config, &self.weights, mel)? })
    }

    /// A decoder cache for one window.
    pub fn new_cache(&self) -> KvCache {
        decoder::new_cache(&self.backend, &self.config)
    }

    /// Runs `tokens` at positions `start..` of a window whose earlier tokens `cache` holds;
    /// returns the last token's logits.
    pub fn decode(&self, audio: &EncodedWindow, cache: &mut KvCache, tokens: &[TokenId], start: usize) -> Result<Vec<f32>, ModelError> {
        decoder::step(&self.backend, &self.config, &self.weights, &audio.cpu, cache, tokens, start)
    }
}
