//! Models: a GGUF file's architecture, hyperparameters and weights on a device, and its forward
//! pass over a batch of (sequence, input, position) entries. `arch.rs` is the one table of
//! per-architecture facts, `config.rs` reads the hyperparameters (through `meta.rs`'s typed key
//! reads), `weights.rs` loads shape-checked weights onto a backend, `blocks.rs` holds the blocks
//! the model kinds share, and each model kind is its own file over the `Backend` trait:
//! `decoder.rs` (the decoder-only architectures, with `mla.rs`, `moe.rs`, `short_conv.rs`,
//! `mamba2.rs` and `delta_net.rs` the parts some of them add), `bert.rs` (the BERT encoders).

pub mod arch;
pub mod bert;
pub(crate) mod blocks;
pub use blocks::Linear;
pub mod config;
mod decoder;
pub mod delta_net;
pub mod error;
pub mod lora;
pub mod lora_schedule;
pub mod mamba2;
mod meta;
pub mod mla;
pub mod moe;
pub mod short_conv;
#[cfg(all(test, feature = "sim"))]
pub(crate) mod sim_check;
pub mod vision;
pub mod weights;
pub mod whisper;

use std::path::Path;
use std::sync::Arc;

pub use config::ModelConfig;
pub use error::ModelError;
pub use lora::{AdapterInfo, LoraScale};
pub use lora_schedule::LoraSchedule;

use crate::backend::CpuBackend;
use crate::backend::{on_backend, Backend, BackendError, Device, OnBackend, PerBackend, RowInput};
use crate::gguf::GgufFile;
use crate::kv_cache::{KvCache, KvTypes, SeqId};
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

/// One row of a batch whose input is a token or an embedding row (what a vision projector or an
/// audio encoder feeds the model in place of token embeddings, as `llama_batch.embd`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InputEntry<'a> {
    pub seq: SeqId,
    pub input: RowInput<'a>,
    pub pos: u32,
    pub logits: bool,
    /// The row also attends to the later rows of its run of non-causal rows in this batch (an
    /// image's rows for Gemma 3's projector, which llama.cpp decodes with causal attention off,
    /// the image alone in its batch).
    pub non_causal: bool,
    /// The LoRA adapters this row runs with, or `None` for the model's default set
    /// ([`Model::set_default_lora`]) without its activated adapters, which run only where a
    /// [`LoraSchedule`] of the row's prompt says.
    pub lora: Option<&'a [LoraScale]>,
    /// The batch's [`Logits::hidden`] is asked for (embeddings): a second copy from the device
    /// that a generating step does without.
    pub hidden: bool,
}

impl<'a> InputEntry<'a> {
    /// The entry run with the adapters `lora`.
    pub fn with_lora(self, lora: &'a [LoraScale]) -> InputEntry<'a> {
        InputEntry { lora: Some(lora), ..self }
    }

    /// The entry asking for the batch's final hidden states too.
    pub fn with_hidden(self) -> InputEntry<'a> {
        InputEntry { hidden: true, ..self }
    }
}

impl From<BatchEntry> for InputEntry<'_> {
    fn from(e: BatchEntry) -> Self {
        InputEntry {
            seq: e.seq,
            input: RowInput::Token(e.token),
            pos: e.pos,
            logits: e.logits,
            non_causal: false,
            lora: None,
            hidden: false,
        }
    }
}

/// Logits of the entries of a batch that asked for them, in batch order.
#[derive(Clone, Debug)]
pub struct Logits {
    /// Token ids a row gives logits for: the vocabulary, or its first ids where the model's
    /// head is limited ([`Model::limit_logits`]).
    pub n_vocab: usize,
    /// `entries.len()` rows of `n_vocab`.
    pub values: Vec<f32>,
    /// The batch index of each row.
    pub entries: Vec<usize>,
    /// The final normalised hidden state of each row (`entries.len()` rows of `n_embd`) when an
    /// entry asked for it ([`InputEntry::hidden`]), else empty.
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

enum Weights<B: Backend> {
    Decoder(DecoderWeights<B>),
    Encoder(BertWeights<B>),
}

/// A model's weights on one backend: the forward passes are generic over the backend, this is
/// where a device is chosen.
struct OnDevice<B: Backend> {
    backend: B,
    weights: Weights<B>,
}

impl<B: Backend> OnDevice<B> {
    fn load(backend: B, file: &Arc<GgufFile>, config: &ModelConfig, options: LoadOptions) -> Result<OnDevice<B>, ModelError> {
        let weights = if config.facts.encoder {
            if options.logits_below.is_some() {
                return Err(ModelError::Head(format!("{} is an encoder: it has no logits", config.arch)));
            }
            Weights::Encoder(BertWeights::load(file, &backend, config)?)
        } else {
            Weights::Decoder(DecoderWeights::load(file, &backend, config, options.logits_below.unwrap_or(usize::MAX))?)
        };
        Ok(OnDevice { backend, weights })
    }

    fn new_kv_cache(&self, c: &ModelConfig, types: KvTypes, n_ctx: usize) -> KvCache {
        let (types, values) = c.kv_layout(types);
        let storage = self.backend.new_kv_store(types, c.n_kv_layers(), c.k_dim(), values, c.state_floats());
        KvCache::with_storage(types, n_ctx, self.backend.device(), storage)
    }

    fn forward(&self, c: &ModelConfig, kv: &mut KvCache, batch: &[InputEntry<'_>], lora: &[LoraScale]) -> Result<Logits, ModelError> {
        match &self.weights {
            Weights::Decoder(w) => decoder::forward(&self.backend, c, w, kv, batch, lora),
            Weights::Encoder(_) => Err(ModelError::BadBatch(format!("{} is an encoder: use Model::encode or embed::embed", c.arch))),
        }
    }

    fn encode(&self, c: &ModelConfig, seqs: &[&[TokenId]]) -> Result<Vec<f32>, ModelError> {
        match &self.weights {
            Weights::Encoder(w) => bert::forward(&self.backend, c, w, seqs),
            Weights::Decoder(_) => Err(ModelError::BadBatch(format!("{} is a decoder: use Model::forward", c.arch))),
        }
    }

    fn load_adapter(&mut self, c: &ModelConfig, file: &Arc<GgufFile>) -> Result<AdapterInfo, ModelError> {
        match &mut self.weights {
            Weights::Decoder(w) => w.load_adapter(file, &self.backend, c),
            Weights::Encoder(_) => Err(ModelError::Adapter(format!("{} is an encoder; adapters apply to decoders", c.arch))),
        }
    }

    fn limit_logits(&mut self, c: &ModelConfig, file: &Arc<GgufFile>, n: usize) -> Result<(), ModelError> {
        match &mut self.weights {
            Weights::Decoder(w) => w.limit_logits(file, &self.backend, c, n),
            Weights::Encoder(_) => Err(ModelError::Head(format!("{} is an encoder: it has no logits", c.arch))),
        }
    }

    fn classifier(&self) -> Option<&bert::Classifier> {
        match &self.weights {
            Weights::Encoder(w) => w.classifier.as_ref(),
            Weights::Decoder(_) => None,
        }
    }
}

/// Loads the weights onto a kernel device, first checking that they fit: a model too large
/// for the GPU is one clear error naming the model and the bytes, not an allocation failing
/// halfway through the upload.
#[cfg(any(feature = "sim", feature = "cuda"))]
fn on_gpu<R: kernels::Runtime>(
    backend: crate::backend::kernel::KernelBackend<R>,
    file: &Arc<GgufFile>,
    config: &ModelConfig,
    options: LoadOptions,
) -> Result<OnDevice<crate::backend::kernel::KernelBackend<R>>, ModelError>
where
    crate::backend::kernel::DeviceKvStore<R>: crate::backend::OwnKvStore,
{
    let need = file.tensor_data_bytes();
    let model = file.get_str("general.name").unwrap_or(&config.arch).to_string();
    let device = backend.device();
    if let Some(free) = backend.runtime().free_memory() {
        if need > free as u64 {
            return Err(ModelError::DoesNotFit { model, device, need, free: Some(free as u64) });
        }
    }
    OnDevice::load(backend, file, config, options).map_err(|e| match e {
        ModelError::Backend(BackendError::OutOfMemory { .. }) => ModelError::DoesNotFit { model, device, need, free: None },
        e => e,
    })
}

/// A model's weights, per backend.
struct Loaded;

impl PerBackend for Loaded {
    type On<B: Backend> = OnDevice<B>;
}

/// What a load may leave out of a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Logits for the token ids below this only, as [`Model::limit_logits`] gives them, the
    /// rest of the output never read, repacked or uploaded (a draft model's head); `None`, or
    /// the vocabulary's size or more: all. Refused for 0 and for an encoder.
    pub logits_below: Option<usize>,
}

/// A loaded model: the mapped file, its configuration, tokenizer, and weights on a device.
pub struct Model {
    file: Arc<GgufFile>,
    config: ModelConfig,
    loaded: OnBackend<Loaded>,
    tokenizer: Tokenizer,
    /// The LoRA adapters loaded beside the weights, in order (their index is their id).
    adapters: Vec<AdapterInfo>,
    /// The adapters a batch entry without its own set runs with.
    default_lora: Vec<LoraScale>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("arch", &self.config.arch)
            .field("n_layer", &self.config.n_layer)
            .field("device", &self.device())
            .finish()
    }
}

impl Model {
    /// Opens and loads the GGUF file at `path` on the CPU.
    pub fn load(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        Model::load_on(path, Device::Cpu)
    }

    /// Opens the GGUF file at `path` and loads its weights onto `device`.
    pub fn load_on(path: impl AsRef<Path>, device: Device) -> Result<Model, ModelError> {
        // refuse a device this build lacks before reading anything
        if !device.is_built() {
            return Err(BackendError::NotBuilt(device).into());
        }
        Model::from_file_on(Arc::new(GgufFile::open(path)?), device)
    }

    pub fn from_file(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        Model::from_file_on(file, Device::Cpu)
    }

    pub fn from_file_on(file: Arc<GgufFile>, device: Device) -> Result<Model, ModelError> {
        Model::from_file_with(file, device, LoadOptions::default())
    }

    /// Opens the GGUF file at `path` and loads its weights onto `device`, leaving out what
    /// `options` says.
    pub fn load_with(path: impl AsRef<Path>, device: Device, options: LoadOptions) -> Result<Model, ModelError> {
        if !device.is_built() {
            return Err(BackendError::NotBuilt(device).into());
        }
        Model::from_file_with(Arc::new(GgufFile::open(path)?), device, options)
    }

    /// [`Model::load_with`] of a file already open.
    pub fn from_file_with(file: Arc<GgufFile>, device: Device, options: LoadOptions) -> Result<Model, ModelError> {
        let (config, tokenizer) = Model::read_config(&file)?;
        let options = LoadOptions { logits_below: options.logits_below.filter(|&n| n < config.n_vocab) };
        let loaded = match device {
            Device::Cpu => OnBackend::Cpu(OnDevice::load(CpuBackend::new(), &file, &config, options)?),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => OnBackend::Cuda(on_gpu(crate::backend::kernel::CudaBackend::open(n)?, &file, &config, options)?),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => return Err(BackendError::NotBuilt(device).into()),
        };
        Ok(Model { file, config, loaded, tokenizer, adapters: Vec::new(), default_lora: Vec::new() })
    }

    /// The model with its weights on the simulated GPU: the CUDA kernels run by the CPU
    /// execution harness (slow; for tests of the kernel backend).
    #[cfg(feature = "sim")]
    pub fn load_simulated(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        Model::from_file_simulated(Arc::new(GgufFile::open(path)?))
    }

    /// [`Model::load_simulated`] of a file already open.
    #[cfg(feature = "sim")]
    pub fn from_file_simulated(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        Model::on_simulated(file, crate::backend::kernel::SimBackend::new())
    }

    /// [`Model::from_file_simulated`] on the harness `backend` (one whose runtime replays steps
    /// as graphs or not).
    #[cfg(feature = "sim")]
    pub(crate) fn on_simulated(file: Arc<GgufFile>, backend: crate::backend::kernel::SimBackend) -> Result<Model, ModelError> {
        let (config, tokenizer) = Model::read_config(&file)?;
        let loaded = OnBackend::Sim(on_gpu(backend, &file, &config, LoadOptions::default())?);
        Ok(Model { file, config, loaded, tokenizer, adapters: Vec::new(), default_lora: Vec::new() })
    }

    /// The file's configuration and tokenizer (the vocabulary size from the tokenizer when the
    /// metadata leaves it out).
    fn read_config(file: &GgufFile) -> Result<(ModelConfig, Tokenizer), ModelError> {
        let arch = file.architecture().ok_or(ModelError::NoArchitecture)?.to_string();
        let facts = arch::facts(&arch).ok_or_else(|| ModelError::UnsupportedArchitecture(arch.clone()))?;
        let tokenizer = Tokenizer::from_gguf(file)?;
        let mut config = ModelConfig::from_gguf(file, &arch, facts)?;
        if config.n_vocab == 0 {
            config.n_vocab = tokenizer.n_vocab();
        }
        Ok((config, tokenizer))
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

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        on_backend!(&self.loaded, m => m.backend.device())
    }

    /// Whether this is an encoder (BERT): run it with [`Model::encode`], not [`Model::forward`].
    pub fn is_encoder(&self) -> bool {
        self.config.facts.encoder
    }

    /// A cross-encoder's classification head (`cls.*`), which reranking reads; `None` for
    /// every other model.
    pub fn classifier(&self) -> Option<&bert::Classifier> {
        on_backend!(&self.loaded, m => m.classifier())
    }

    /// Loads the LoRA adapter at `path` (a GGUF file of `general.type` adapter for this
    /// model's architecture and shapes) onto the model's device; it becomes adapter
    /// `self.adapters().len()`, used by the entries that name it (and by default at `scale`,
    /// when given).
    pub fn load_adapter(&mut self, path: impl AsRef<Path>, scale: Option<f32>) -> Result<usize, ModelError> {
        let path = path.as_ref();
        let id = self.load_adapter_file(Arc::new(GgufFile::open(path)?), scale)?;
        self.adapters[id].path = Some(path.display().to_string());
        Ok(id)
    }

    /// [`Model::load_adapter`] of a file already open.
    pub fn load_adapter_file(&mut self, file: Arc<GgufFile>, scale: Option<f32>) -> Result<usize, ModelError> {
        let config = &self.config;
        let info = on_backend!(&mut self.loaded, m => m.load_adapter(config, &file))?;
        let id = self.adapters.len();
        self.adapters.push(info);
        if let Some(scale) = scale {
            self.default_lora.push(LoraScale { adapter: id, scale });
        }
        Ok(id)
    }

    /// Computes logits for the token ids below `n` only (all of them when `n` is at least the
    /// vocabulary): the output's first `n` rows, a view of the same tensor. For a draft model,
    /// whose proposals the target checks: vocabularies that number their tokens by merge rank
    /// (the byte-level BPE of Qwen, Llama 3, GPT-2) put the frequent ones first, so a head of
    /// them keeps most proposals at a fraction of the output's cost. Refused once adapters are
    /// loaded (they correct the whole output), and adapters are refused after it.
    pub fn limit_logits(&mut self, n: usize) -> Result<(), ModelError> {
        let (config, file) = (&self.config, &self.file);
        on_backend!(&mut self.loaded, m => m.limit_logits(config, file, n))
    }

    /// The loaded adapters, by id.
    pub fn adapters(&self) -> &[AdapterInfo] {
        &self.adapters
    }

    /// The adapters an entry without its own set runs with ([`Model::forward`]'s entries, the
    /// guard's prompts).
    pub fn set_default_lora(&mut self, lora: Vec<LoraScale>) {
        self.default_lora = lora;
    }

    pub fn default_lora(&self) -> &[LoraScale] {
        &self.default_lora
    }

    /// Adapter `adapter`'s scale in the default set, if it is in it.
    pub fn default_scale(&self, adapter: usize) -> Option<f32> {
        self.default_lora.iter().find(|l| l.adapter == adapter).map(|l| l.scale)
    }

    /// An empty KV cache for this model, on its device, holding up to `n_ctx` positions per
    /// sequence.
    pub fn new_kv_cache(&self, types: impl Into<KvTypes>, n_ctx: usize) -> KvCache {
        let types = types.into();
        on_backend!(&self.loaded, m => m.new_kv_cache(&self.config, types, n_ctx))
    }

    /// Bytes the KV cache takes per position of a sequence with keys and values of `types`
    /// (every layer's key and value rows, no value rows where they are the keys' leading
    /// columns; a block holds `BLOCK_POSITIONS` of them).
    pub fn kv_bytes_per_position(&self, types: impl Into<KvTypes>) -> usize {
        let c = &self.config;
        let (types, values) = c.kv_layout(types.into());
        c.n_kv_layers() * (types.key.row_bytes(c.k_dim()) + values.stored_row_bytes(types.value))
    }

    /// Bytes of one sequence's recurrent states (every recurrent layer's; 0 for a model
    /// without recurrent layers). A cache keeps one such slot per sequence, and one more per
    /// checkpoint or rollback length it keeps.
    pub fn state_bytes_per_sequence(&self) -> usize {
        self.config.state_floats() * 4
    }

    /// Runs a batch: its keys and values are added to `kv`, and logits come back for the
    /// entries that asked for them.
    pub fn forward(&self, kv: &mut KvCache, batch: &[BatchEntry]) -> Result<Logits, ModelError> {
        let entries: Vec<InputEntry> = batch.iter().map(|&e| e.into()).collect();
        self.forward_inputs(kv, &entries)
    }

    /// [`Model::forward`] of entries of sequences that all run the adapters of `lora` (each
    /// position those of its own).
    pub fn forward_scheduled(&self, kv: &mut KvCache, batch: &[BatchEntry], lora: &LoraSchedule) -> Result<Logits, ModelError> {
        let entries: Vec<InputEntry> = batch.iter().map(|&e| InputEntry::from(e).with_lora(lora.at(e.pos))).collect();
        self.forward_inputs(kv, &entries)
    }

    /// [`Model::forward`] for entries whose input may be an embedding row of `n_embd` values
    /// instead of a token (it goes through the same scaling as a token's embedding).
    pub fn forward_inputs(&self, kv: &mut KvCache, batch: &[InputEntry<'_>]) -> Result<Logits, ModelError> {
        let plain: Vec<LoraScale> = self.default_lora.iter().filter(|l| !self.adapters[l.adapter].is_activated()).copied().collect();
        on_backend!(&self.loaded, m => m.forward(&self.config, kv, batch, &plain))
    }

    /// The adapters `list` as a sequence of prompt `prompt` runs them: plain ones on every
    /// position, activated ones from their invocation in the prompt on.
    pub fn lora_schedule(&self, list: &[LoraScale], prompt: &[TokenId]) -> LoraSchedule {
        LoraSchedule::for_prompt(&self.adapters, list, prompt)
    }

    /// [`Model::lora_schedule`] of the default set.
    pub fn default_schedule(&self, prompt: &[TokenId]) -> LoraSchedule {
        self.lora_schedule(&self.default_lora, prompt)
    }

    /// Encoders: the final hidden state of every token of `seqs` (each sequence attends to
    /// itself only), the sequences' rows one after the other, `n_embd` values each.
    pub fn encode<S: AsRef<[TokenId]>>(&self, seqs: &[S]) -> Result<Vec<f32>, ModelError> {
        let seqs: Vec<&[TokenId]> = seqs.iter().map(|s| s.as_ref()).collect();
        on_backend!(&self.loaded, m => m.encode(&self.config, &seqs))
    }

    /// The row an [`InputEntry`] may carry in place of `token`: row `token` of the
    /// token-embedding table as f32, times the embedding scale where the model scales tokens'
    /// rows but not given ones (Gemma, as llama.cpp); Granite scales every row, so its row is
    /// the table's.
    pub fn token_embedding(&self, token: TokenId) -> Result<Vec<f32>, ModelError> {
        let info = self.file.tensor("token_embd.weight").ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        if token as usize >= self.config.n_vocab {
            return Err(ModelError::BadBatch(format!("token {token} is outside the vocabulary of {}", self.config.n_vocab)));
        }
        let mut row = weights::host_row(&self.file, info, self.config.n_embd, token as usize)?;
        if self.config.facts.embedding_scale == arch::EmbeddingScale::SqrtEmbd {
            row.iter_mut().for_each(|v| *v *= self.config.embedding_scale);
        }
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_this_build_lacks_is_refused_before_the_file_is_read() {
        let e = Model::load_on("/nonexistent/model.gguf", Device::Cuda(1)).unwrap_err();
        if cfg!(feature = "cuda") {
            // built in: the file is read first, and is missing
            assert!(matches!(e, ModelError::Gguf(_)), "{e:?}");
        } else {
            assert!(matches!(e, ModelError::Backend(BackendError::NotBuilt(Device::Cuda(1)))), "{e:?}");
            assert_eq!(e.to_string(), "device cuda:1: this build has no CUDA support");
        }
        // the CPU path reads the file (and reports it missing)
        assert!(matches!(Model::load_on("/nonexistent/model.gguf", Device::Cpu), Err(ModelError::Gguf(_))));
    }
}
