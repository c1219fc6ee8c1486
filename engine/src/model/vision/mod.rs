//! Vision input: a projector GGUF (`mmproj`, as llama.cpp's `tools/mtmd` reads it) turns an
//! image into embedding rows a language model reads in place of tokens. `config.rs` (the
//! `clip.*` keys), `weights.rs`, `encoder.rs` (the SigLIP ViT, pixel shuffle or pooling, the
//! projection), `layout.rs` (the rows' place in a prompt, with the model's markers),
//! `rows.rs` (the ids that stand for an image's rows in prompts and caches).

pub mod config;
pub mod encoder;
pub mod layout;
pub mod rows;
pub mod weights;

use std::path::Path;
use std::sync::Arc;

pub use config::{Projector, VisionConfig};
pub use layout::{build_prompt, find_piece, ImagePrompt, Piece};
pub use rows::{pixel_digest, ImageRowCache, ImageRows, OutOfIds, PromptImages};

use crate::backend::{self, on_backend, Backend, BackendError, Backends, Device, OnBackend, PerBackend};
use crate::gguf::GgufFile;
use crate::image::preprocess::{tiles, Normalisation, Tiles, Tiling};
use crate::image::RgbImage;
use crate::model::error::ModelError;
use crate::model::Model;
use weights::VisionWeights;

/// The weights on one backend.
struct OnDevice<B: Backend> {
    backend: B,
    weights: VisionWeights<B>,
}

/// A projector's weights, per backend.
struct Weights;

impl PerBackend for Weights {
    type On<B: Backend> = OnDevice<B>;
}

/// A loaded projector (its ViT and projection) on a device.
pub struct VisionModel {
    config: VisionConfig,
    loaded: OnBackend<Weights>,
    file: Arc<GgufFile>,
}

impl std::fmt::Debug for VisionModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionModel").field("config", &self.config).field("device", &self.device()).finish()
    }
}

impl VisionModel {
    /// Loads the projector GGUF at `path` on `device`. A tile's patches, the pixel shuffle and
    /// the pooling are built on the host; the ViT's products, norms and attention and the
    /// projection run on the device.
    pub fn load_on(path: impl AsRef<Path>, device: Device) -> Result<VisionModel, ModelError> {
        // refuse a device this build lacks before reading anything
        if !device.is_built() {
            return Err(BackendError::NotBuilt(device).into());
        }
        VisionModel::from_file_on(Arc::new(GgufFile::open(path)?), device)
    }

    pub fn load(path: impl AsRef<Path>) -> Result<VisionModel, ModelError> {
        VisionModel::load_on(path, Device::Cpu)
    }

    /// A file already open, on `device`.
    pub fn from_file_on(file: Arc<GgufFile>, device: Device) -> Result<VisionModel, ModelError> {
        VisionModel::from_file_with(file, backend::loaded::open(device)?)
    }

    /// A file already open, its weights on the simulated GPU: the CUDA kernels run by the CPU
    /// execution harness (slow; for tests of the kernel backend).
    #[cfg(feature = "sim")]
    pub fn from_file_simulated(file: Arc<GgufFile>) -> Result<VisionModel, ModelError> {
        VisionModel::from_file_with(file, backend::loaded::simulated())
    }

    fn from_file_with(file: Arc<GgufFile>, backend: OnBackend<Backends>) -> Result<VisionModel, ModelError> {
        let config = VisionConfig::from_gguf(&file)?;
        let loaded: OnBackend<Weights> = on_backend!(backend, b, wrap => wrap(OnDevice::load(b, &file, &config)?));
        Ok(VisionModel { config, loaded, file })
    }

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        on_backend!(&self.loaded, m => m.backend.device())
    }

    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Whether the language model reads this projector's rows with attention both ways.
    pub fn non_causal(&self) -> bool {
        matches!(self.config.projector, Projector::Gemma3 { .. })
    }

    /// Checks that `model` can read this projector's rows: the same embedding size, and every
    /// marker token the layout needs in its vocabulary.
    pub fn check_language_model(&self, model: &Model) -> Result<(), ModelError> {
        let n_embd = model.config().n_embd;
        if n_embd != self.config.n_embd_out {
            return Err(ModelError::BadKey {
                key: "clip.vision.projection_dim".into(),
                reason: format!(
                    "the projector makes rows of {} values, but the language model's embeddings have {n_embd}",
                    self.config.n_embd_out
                ),
            });
        }
        let tokenizer = model.tokenizer();
        for &text in layout::marker_tokens(self.config.projector) {
            if text.starts_with('<') {
                if tokenizer.encode(text, false, true).len() != 1 {
                    return Err(layout::missing_marker(text));
                }
            } else if find_piece(tokenizer, text).is_none() {
                return Err(layout::missing_marker(text));
            }
        }
        Ok(())
    }

    /// The image cut into the tiles this projector reads.
    pub fn tiles(&self, image: &RgbImage) -> Tiles {
        let c = &self.config;
        let tiling = match (c.projector, c.preproc_image_size) {
            (Projector::Idefics3 { .. }, Some(edge)) => Tiling::Grid { longest_edge: edge },
            (Projector::Idefics3 { .. }, None) => Tiling::Grid { longest_edge: c.image_size },
            (Projector::Gemma3 { .. }, _) => Tiling::Fit,
        };
        tiles(image, c.image_size, tiling, &Normalisation { mean: c.image_mean, std: c.image_std })
    }

    /// Every tile's rows, one tile after another: `tiles · rows_per_tile x n_embd_out`.
    pub fn encode(&self, tiles: &Tiles) -> Result<Vec<f32>, ModelError> {
        let mut rows = Vec::with_capacity(tiles.tiles.len() * self.config.rows_per_tile() * self.config.n_embd_out);
        for tile in &tiles.tiles {
            rows.extend(on_backend!(&self.loaded, m => encoder::encode_tile(&m.backend, &self.config, &m.weights, tile))?);
        }
        Ok(rows)
    }

    /// The ViT's output for one tile before the projector (`n_patches x n_embd`), for tests.
    pub fn vit_states(&self, tile: &[f32]) -> Result<Vec<f32>, ModelError> {
        on_backend!(&self.loaded, m => encoder::vit(&m.backend, &self.config, &m.weights, tile))
    }
}

impl<B: Backend> OnDevice<B> {
    fn load(backend: B, file: &Arc<GgufFile>, config: &VisionConfig) -> Result<OnDevice<B>, ModelError> {
        let weights = VisionWeights::load(file, &backend, config)?;
        Ok(OnDevice { backend, weights })
    }
}
