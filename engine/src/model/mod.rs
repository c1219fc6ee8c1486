//! Models: a GGUF file's architecture, hyperparameters and weights, and its forward pass over a
//! batch of (sequence, token, position) entries. `arch.rs` is the one table of per-architecture
//! facts, `config.rs` reads the hyperparameters, `weights.rs` loads shape-checked weights,
//! `decoder.rs` is the forward pass of the decoder-only architectures, `bert.rs` the weights and
//! forward pass of the BERT encoders.

pub mod arch;
pub mod bert;
pub mod config;
mod decoder;
pub mod error;
pub mod weights;

use std::path::Path;
use std::sync::Arc;

pub use config::ModelConfig;
pub use error::ModelError;

use crate::gguf::GgufFile;
use crate::kv_cache::{KvCache, KvType, SeqId};
use crate::tokenizer::{TokenId, Tokenizer};
use bert::BertWeights;
use weights::DecoderWeights;

/// One token of a batch: which sequence it extends, at which position, and whether its logits
/// are wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    pub seq: SeqId,
    pub token: TokenId,
    pub pos: u32,
    pub logits: bool,
}

impl BatchEntry {
    /// The entries of `tokens` continuing `seq` from `start`, logits for the last one only (or
    /// for all of them).
    pub fn sequence(seq: SeqId, tokens: &[TokenId], start: u32, all_logits: bool) -> Vec<BatchEntry> {
        let n = tokens.len();
        tokens
            .iter()
            .enumerate()
            .map(|(i, &token)| BatchEntry { seq, token, pos: start + i as u32, logits: all_logits || i + 1 == n })
            .collect()
    }
}

/// Logits of the entries of a batch that asked for them, in batch order.
#[derive(Clone, Debug)]
pub struct Logits {
    pub n_vocab: usize,
    /// `entries.len()` rows of `n_vocab`.
    pub values: Vec<f32>,
    /// The batch index of each row.
    pub entries: Vec<usize>,
    /// The final normalised hidden state of each row (`entries.len()` rows of `n_embd`).
    pub hidden: Vec<f32>,
}

impl Logits {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Row `i` (the i-th entry that asked for logits).
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.n_vocab..(i + 1) * self.n_vocab]
    }

    /// The row of batch entry `entry`, if it asked for logits.
    pub fn of_entry(&self, entry: usize) -> Option<&[f32]> {
        self.entries.iter().position(|&e| e == entry).map(|i| self.row(i))
    }
}

enum Weights {
    Decoder(DecoderWeights),
    Encoder(BertWeights),
}

/// A loaded model: the mapped file, its configuration, weights and tokenizer.
pub struct Model {
    file: Arc<GgufFile>,
    config: ModelConfig,
    weights: Weights,
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("arch", &self.config.arch).field("n_layer", &self.config.n_layer).finish()
    }
}

impl Model {
    /// Opens and loads the GGUF file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        Model::from_file(Arc::new(GgufFile::open(path)?))
    }

    pub fn from_file(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        let arch = file.architecture().ok_or(ModelError::NoArchitecture)?.to_string();
        let facts = arch::facts(&arch).ok_or_else(|| ModelError::UnsupportedArchitecture(arch.clone()))?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let mut config = ModelConfig::from_gguf(&file, &arch, facts)?;
        if config.n_vocab == 0 {
            config.n_vocab = tokenizer.n_vocab();
        }
        let weights = if facts.encoder {
            Weights::Encoder(BertWeights::load(&file, &config)?)
        } else {
            Weights::Decoder(DecoderWeights::load(&file, &config)?)
        };
        Ok(Model { file, config, weights, tokenizer })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Whether this is an encoder (BERT): run it with [`Model::encode`], not [`Model::forward`].
    pub fn is_encoder(&self) -> bool {
        matches!(self.weights, Weights::Encoder(_))
    }

    /// An empty KV cache for this model holding up to `n_ctx` positions per sequence.
    pub fn new_kv_cache(&self, ty: KvType, n_ctx: usize) -> KvCache {
        KvCache::new(ty, self.config.n_layer, self.config.k_dim(), self.config.v_dim(), n_ctx)
    }

    /// Runs a batch: its keys and values are added to `kv`, and logits come back for the
    /// entries that asked for them.
    pub fn forward(&self, kv: &mut KvCache, batch: &[BatchEntry]) -> Result<Logits, ModelError> {
        match &self.weights {
            Weights::Decoder(w) => decoder::forward(&self.file, &self.config, w, kv, batch),
            Weights::Encoder(_) => {
                Err(ModelError::BadBatch(format!("{} is an encoder: use Model::encode or embed::embed", self.config.arch)))
            }
        }
    }

    /// Encoders: the final hidden state of every token of `seqs` (each sequence attends to
    /// itself only), the sequences' rows one after the other, `n_embd` values each.
    pub fn encode<S: AsRef<[TokenId]>>(&self, seqs: &[S]) -> Result<Vec<f32>, ModelError> {
        match &self.weights {
            Weights::Encoder(w) => {
                let seqs: Vec<&[TokenId]> = seqs.iter().map(|s| s.as_ref()).collect();
                bert::forward(&self.file, &self.config, w, &seqs)
            }
            Weights::Decoder(_) => Err(ModelError::BadBatch(format!("{} is a decoder: use Model::forward", self.config.arch))),
        }
    }
}
