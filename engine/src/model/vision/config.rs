//! A projector GGUF's hyperparameters (`clip.*` keys, as llama.cpp's `clip.cpp` reads them):
//! the projector type, the ViT's sizes, the image size, patch size, normalisation, and the
//! projector's own settings.

use crate::backend::{Activation, AttentionShape};
use crate::gguf::{GgufFile, Value};
use crate::model::error::ModelError;

/// What turns the ViT's patch states into the language model's embedding rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Projector {
    /// SmolVLM: pixel shuffle of `scale` x `scale` patches into one row, then `mm.model.fc`.
    Idefics3 { scale: usize },
    /// Gemma 3: `pool` x `pool` average pooling, RMS norm (`mm.soft_emb_norm`), then
    /// `mm.input_projection`.
    Gemma3 { pool: usize },
}

impl Projector {
    pub fn name(&self) -> &'static str {
        match self {
            Projector::Idefics3 { .. } => "idefics3",
            Projector::Gemma3 { .. } => "gemma3",
        }
    }

    /// Patches per side merged into one output row.
    pub fn merge(&self) -> usize {
        match *self {
            Projector::Idefics3 { scale } => scale,
            Projector::Gemma3 { pool } => pool,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    pub projector: Projector,
    /// The side of the square the ViT reads (a tile, or the whole resized image).
    pub image_size: usize,
    pub patch_size: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub eps: f32,
    pub activation: Activation,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    /// The language model's embedding size: the projector's output rows.
    pub n_embd_out: usize,
    /// idefics3: the longest edge an image is resized to before it is cut into tiles.
    pub preproc_image_size: Option<usize>,
}

fn usize_key(file: &GgufFile, key: &str) -> Result<usize, ModelError> {
    file.get_u64(key).map(|v| v as usize).ok_or_else(|| ModelError::MissingKey(key.into()))
}

fn triple(file: &GgufFile, key: &str) -> Result<[f32; 3], ModelError> {
    let bad = |reason: &str| ModelError::BadKey { key: key.into(), reason: reason.into() };
    match file.get(key) {
        Some(Value::Array(a)) => {
            let v: Vec<f32> = a.values().filter_map(|v| v.as_f64()).map(|v| v as f32).collect();
            v.try_into().map_err(|_| bad("must be 3 numbers (R, G, B)"))
        }
        Some(_) => Err(bad("must be an array of 3 numbers")),
        None => Err(ModelError::MissingKey(key.into())),
    }
}

impl VisionConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<VisionConfig, ModelError> {
        if file.get_str("general.architecture").is_some_and(|a| a != "clip") {
            let arch = file.get_str("general.architecture").unwrap_or_default();
            return Err(ModelError::BadKey {
                key: "general.architecture".into(),
                reason: format!("{arch:?} is a language model, not a projector (mmproj) file of architecture \"clip\""),
            });
        }
        if file.get("clip.has_vision_encoder").is_some_and(|v| !matches!(v, Value::Bool(true))) {
            return Err(ModelError::BadKey { key: "clip.has_vision_encoder".into(), reason: "the file has no vision encoder".into() });
        }
        let key = if file.get("clip.vision.projector_type").is_some() { "clip.vision.projector_type" } else { "clip.projector_type" };
        let ty = file.get_str(key).ok_or_else(|| ModelError::MissingKey(key.into()))?;
        let scale = file.get_u64("clip.vision.projector.scale_factor").map(|v| v as usize);
        let projector = match ty {
            "idefics3" => {
                Projector::Idefics3 { scale: scale.ok_or_else(|| ModelError::MissingKey("clip.vision.projector.scale_factor".into()))? }
            }
            // Gemma 3's released projectors pool 4 x 4 and do not write the key
            "gemma3" => Projector::Gemma3 { pool: scale.unwrap_or(4) },
            other => {
                return Err(ModelError::BadKey {
                    key: key.into(),
                    reason: format!("projector type {other:?} is not supported (supported: idefics3, gemma3)"),
                })
            }
        };
        let use_gelu = matches!(file.get("clip.use_gelu"), Some(Value::Bool(true)));
        let use_silu = matches!(file.get("clip.use_silu"), Some(Value::Bool(true)));
        let activation = match (use_gelu, use_silu) {
            (true, false) => Activation::Gelu,
            _ => {
                return Err(ModelError::BadKey {
                    key: "clip.use_gelu".into(),
                    reason: "SigLIP's feed-forward is GELU: clip.use_gelu must be true (and clip.use_silu false)".into(),
                })
            }
        };
        let c = VisionConfig {
            projector,
            image_size: usize_key(file, "clip.vision.image_size")?,
            patch_size: usize_key(file, "clip.vision.patch_size")?,
            n_embd: usize_key(file, "clip.vision.embedding_length")?,
            n_ff: usize_key(file, "clip.vision.feed_forward_length")?,
            n_layer: usize_key(file, "clip.vision.block_count")?,
            n_head: usize_key(file, "clip.vision.attention.head_count")?,
            eps: file.get_f64("clip.vision.attention.layer_norm_epsilon").unwrap_or(1e-6) as f32,
            activation,
            image_mean: triple(file, "clip.vision.image_mean")?,
            image_std: triple(file, "clip.vision.image_std")?,
            n_embd_out: usize_key(file, "clip.vision.projection_dim")?,
            preproc_image_size: file.get_u64("clip.vision.preproc_image_size").map(|v| v as usize),
        };
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), ModelError> {
        let bad = |key: &str, reason: String| Err(ModelError::BadKey { key: key.into(), reason });
        if self.patch_size == 0 || self.image_size == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return bad("clip.vision.image_size", format!("{} is not a multiple of the patch size {}", self.image_size, self.patch_size));
        }
        let side = self.patches_per_side();
        let merge = self.projector.merge();
        if merge == 0 || !side.is_multiple_of(merge) {
            return bad("clip.vision.projector.scale_factor", format!("{merge} does not divide the {side} patches per side"));
        }
        if self.n_head == 0 || !self.n_embd.is_multiple_of(self.n_head) || self.n_layer == 0 || self.n_ff == 0 {
            return bad(
                "clip.vision.embedding_length",
                format!("inconsistent sizes: {} wide, {} heads, {} layers", self.n_embd, self.n_head, self.n_layer),
            );
        }
        if self.image_std.contains(&0.0) {
            return bad("clip.vision.image_std", "has a zero".into());
        }
        if matches!(self.projector, Projector::Idefics3 { .. }) && self.preproc_image_size.is_none() {
            return bad(
                "clip.vision.preproc_image_size",
                "idefics3 projectors need it (the longest edge before tiling); the file is from an older converter".into(),
            );
        }
        if let Some(p) = self.preproc_image_size.filter(|&p| p < self.image_size) {
            return bad("clip.vision.preproc_image_size", format!("{p} is smaller than the tile size {}", self.image_size));
        }
        Ok(())
    }

    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    pub fn n_patches(&self) -> usize {
        self.patches_per_side() * self.patches_per_side()
    }

    /// Rows one tile (or one image, for Gemma 3) becomes.
    pub fn rows_per_tile(&self) -> usize {
        self.n_patches() / (self.projector.merge() * self.projector.merge())
    }

    pub fn attention_shape(&self) -> AttentionShape {
        AttentionShape::multi_head(self.n_embd, self.n_head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{Array, GgufWriter, Value};

    /// A projector header with `extra` keys over a valid idefics3 set.
    fn file(extra: &[(&str, Value)], without: &[&str]) -> GgufFile {
        let mut keys: Vec<(&str, Value)> = vec![
            ("general.architecture", Value::from("clip")),
            ("clip.has_vision_encoder", Value::Bool(true)),
            ("clip.projector_type", Value::from("idefics3")),
            ("clip.use_gelu", Value::Bool(true)),
            ("clip.vision.image_size", Value::U32(32)),
            ("clip.vision.patch_size", Value::U32(8)),
            ("clip.vision.embedding_length", Value::U32(48)),
            ("clip.vision.feed_forward_length", Value::U32(96)),
            ("clip.vision.block_count", Value::U32(2)),
            ("clip.vision.attention.head_count", Value::U32(4)),
            ("clip.vision.projection_dim", Value::U32(64)),
            ("clip.vision.image_mean", Value::Array(Array::F32(vec![0.5, 0.5, 0.5]))),
            ("clip.vision.image_std", Value::Array(Array::F32(vec![0.5, 0.5, 0.5]))),
            ("clip.vision.projector.scale_factor", Value::U32(2)),
            ("clip.vision.preproc_image_size", Value::U32(64)),
        ];
        keys.retain(|(k, _)| !without.contains(k) && !extra.iter().any(|(e, _)| e == k));
        keys.extend(extra.iter().cloned());
        let mut w = GgufWriter::new();
        for (k, v) in keys {
            w.add(k, v).unwrap();
        }
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    fn error(extra: &[(&str, Value)], without: &[&str]) -> String {
        VisionConfig::from_gguf(&file(extra, without)).unwrap_err().to_string()
    }

    #[test]
    fn every_size_comes_from_the_file() {
        let c = VisionConfig::from_gguf(&file(&[], &[])).unwrap();
        assert_eq!(c.projector, Projector::Idefics3 { scale: 2 });
        assert_eq!((c.image_size, c.patch_size, c.n_embd, c.n_ff, c.n_layer, c.n_head, c.n_embd_out), (32, 8, 48, 96, 2, 4, 64));
        assert_eq!((c.n_patches(), c.rows_per_tile(), c.preproc_image_size), (16, 4, Some(64)));
        assert_eq!(c.eps, 1e-6); // clip.cpp's default when the key is absent
        let g = VisionConfig::from_gguf(&file(&[("clip.projector_type", Value::from("gemma3"))], &["clip.vision.projector.scale_factor"]))
            .unwrap();
        assert_eq!(g.projector, Projector::Gemma3 { pool: 4 });
    }

    #[test]
    fn bad_projector_files_are_clear_errors() {
        let e = error(&[("clip.projector_type", Value::from("qwen2vl_merger"))], &[]);
        assert!(e.contains("\"qwen2vl_merger\" is not supported (supported: idefics3, gemma3)"), "{e}");
        assert!(error(&[], &["clip.vision.projector.scale_factor"]).contains("clip.vision.projector.scale_factor"));
        assert!(error(&[], &["clip.vision.patch_size"]).contains("clip.vision.patch_size"));
        assert!(error(&[("clip.use_gelu", Value::Bool(false))], &[]).contains("clip.use_gelu"));
        assert!(error(&[("clip.vision.patch_size", Value::U32(7))], &[]).contains("not a multiple of the patch size"));
        assert!(error(&[("general.architecture", Value::from("llama"))], &[]).contains("not a projector"));
        assert!(error(&[("clip.vision.image_mean", Value::Array(Array::F32(vec![0.5, 0.5])))], &[]).contains("3 numbers"));
    }
}
