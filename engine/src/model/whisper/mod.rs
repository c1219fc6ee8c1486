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

use crate::backend::{self, on_backend, on_same_backend, Backend, BackendError, Backends, Device, OnBackend, PerBackend};
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use crate::model::error::ModelError;
use crate::tokenizer::{TokenId, Tokenizer};
use encoder::EncodedAudio;
use weights::WhisperWeights;

/// The weights on one backend.
struct OnDevice<B: Backend> {
    backend: B,
    weights: WhisperWeights<B>,
}

/// A Whisper model's weights, per backend.
struct Weights;

impl PerBackend for Weights {
    type On<B: Backend> = OnDevice<B>;
}

/// Encoded audio, per backend.
pub struct Audio;

impl PerBackend for Audio {
    type On<B: Backend> = EncodedAudio<B>;
}

/// One window's encoded audio, on the device of the model that encoded it.
pub type EncodedWindow = OnBackend<Audio>;

/// A loaded Whisper model.
pub struct WhisperModel {
    file: Arc<GgufFile>,
    config: WhisperConfig,
    tokenizer: Tokenizer,
    loaded: OnBackend<Weights>,
}

impl std::fmt::Debug for WhisperModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperModel")
            .field("encoder", &self.config.encoder)
            .field("decoder", &self.config.decoder)
            .field("device", &self.device())
            .finish()
    }
}

impl WhisperModel {
    /// Loads the Whisper GGUF at `path` on `device`. The encoder's convolutions build their
    /// im2col rows on the host (the first convolution's output comes back for the second's);
    /// every matrix product, norm and attention runs on the device.
    pub fn load_on(path: impl AsRef<Path>, device: Device) -> Result<WhisperModel, ModelError> {
        // refuse a device this build lacks before reading anything
        if !device.is_built() {
            return Err(BackendError::NotBuilt(device).into());
        }
        WhisperModel::from_file_on(Arc::new(GgufFile::open(path)?), device)
    }

    pub fn load(path: impl AsRef<Path>) -> Result<WhisperModel, ModelError> {
        WhisperModel::load_on(path, Device::Cpu)
    }

    /// A file already open, on `device`.
    pub fn from_file_on(file: Arc<GgufFile>, device: Device) -> Result<WhisperModel, ModelError> {
        WhisperModel::from_file_with(file, backend::loaded::open(device)?)
    }

    /// A file already open, its weights on the simulated GPU: the CUDA kernels run by the CPU
    /// execution harness (slow; for tests of the kernel backend).
    #[cfg(feature = "sim")]
    pub fn from_file_simulated(file: Arc<GgufFile>) -> Result<WhisperModel, ModelError> {
        WhisperModel::from_file_with(file, backend::loaded::simulated())
    }

    fn from_file_with(file: Arc<GgufFile>, backend: OnBackend<Backends>) -> Result<WhisperModel, ModelError> {
        let (config, tokenizer) = WhisperModel::read_config(&file)?;
        let loaded: OnBackend<Weights> = on_backend!(backend, b, wrap => wrap(OnDevice::load(b, &file, &config)?));
        Ok(WhisperModel { file, config, tokenizer, loaded })
    }

    fn read_config(file: &GgufFile) -> Result<(WhisperConfig, Tokenizer), ModelError> {
        match file.architecture() {
            Some("whisper") => {}
            Some(other) => return Err(ModelError::UnsupportedArchitecture(format!("{other} (a transcription model must be whisper)"))),
            None => return Err(ModelError::NoArchitecture),
        }
        let tokenizer = Tokenizer::from_gguf(file)?;
        let config = WhisperConfig::from_gguf(file, &tokenizer)?;
        Ok((config, tokenizer))
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

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        on_backend!(&self.loaded, m => m.backend.device())
    }

    /// Encodes one window: `mel` is `n_mels x 3000` log-mel values, band-major.
    pub fn encode(&self, mel: &[f32]) -> Result<EncodedWindow, ModelError> {
        on_backend!(&self.loaded, m, wrap => Ok(wrap(encoder::encode(&m.backend, &self.config, &m.weights, mel)?)))
    }

    /// A decoder cache for one window, on the model's device.
    pub fn new_cache(&self) -> KvCache {
        on_backend!(&self.loaded, m => decoder::new_cache(&m.backend, &self.config))
    }

    /// Runs `tokens` at positions `start..` of a window whose earlier tokens `cache` holds;
    /// returns the last token's logits. `audio` must come from this model's `encode`.
    pub fn decode(&self, audio: &EncodedWindow, cache: &mut KvCache, tokens: &[TokenId], start: usize) -> Result<Vec<f32>, ModelError> {
        on_same_backend!(
            (&self.loaded, audio),
            (m, a) => decoder::step(&m.backend, &self.config, &m.weights, a, cache, tokens, start),
            else => Err(BackendError::shape("decode", format!("the audio was encoded on another device than the model's ({})", self.device())).into())
        )
    }
}

impl<B: Backend> OnDevice<B> {
    fn load(backend: B, file: &Arc<GgufFile>, config: &WhisperConfig) -> Result<OnDevice<B>, ModelError> {
        let weights = WhisperWeights::load(file, &backend, config)?;
        Ok(OnDevice { backend, weights })
    }
}
