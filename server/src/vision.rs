//! Images in chat requests (and llama-server's `/completion`): a model's projector
//! (`--mmproj`), where an image may come from (a `data:` URI or plain base64; a `file://` path
//! under the one folder `--allowed-local-media-path` names; never the network), the limits on
//! its bytes and pixels, and the prompt with its rows.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine as _;
use engine::image::{decode_rgb, ImageError, RgbImage};
use engine::model::vision::{build_prompt, pixel_digest, ImagePrompt, ImageRowCache, OutOfIds, VisionModel};
use engine::model::{Model, ModelError};

use crate::error::ApiError;

/// The text that stands for an image part in rendered messages until its rows replace it:
/// random per process, so that no request's text can pose as an image.
pub fn media_marker() -> &'static str {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER.get_or_init(|| format!("<__media_{}__>", crate::routes::generation::random_id()))
}

/// Where images may come from and how large they may be.
#[derive(Clone, Debug)]
pub struct MediaOptions {
    /// `file://` URLs are read only under this folder (none: refused).
    pub allowed_local_dir: Option<PathBuf>,
    /// The most bytes of one image file (413 beyond).
    pub max_image_bytes: usize,
    /// The most pixels of one image (413 beyond).
    pub max_image_pixels: u64,
    /// Images whose rows are kept for reuse, per projector.
    pub cached_images: usize,
}

impl Default for MediaOptions {
    fn default() -> MediaOptions {
        MediaOptions { allowed_local_dir: None, max_image_bytes: 10 << 20, max_image_pixels: 50_000_000, cached_images: 64 }
    }
}

/// An image part of a message: its URL and `detail` (accepted; the projector's own tiling
/// decides the rows).
#[derive(Clone, Debug, PartialEq)]
pub struct ImagePart {
    pub url: String,
    pub detail: Option<String>,
}

/// A model's projector, the rows of the images it encoded lately, and where images may come
/// from.
pub struct Projector {
    pub model: VisionModel,
    rows: ImageRowCache,
    /// One image encoded at a time per projector (each encode uses every core).
    encoding: Mutex<()>,
    options: MediaOptions,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projector").field("model", &self.model).finish()
    }
}

fn api(e: ModelError) -> ApiError {
    ApiError::server(format!("encoding the image: {e}"))
}

impl From<OutOfIds> for ApiError {
    fn from(e: OutOfIds) -> ApiError {
        ApiError::server(e.to_string())
    }
}

impl Projector {
    /// `model` for the language model `lm` (checked: the same embedding size, its markers in
    /// the vocabulary).
    pub fn new(model: VisionModel, lm: &Model, options: MediaOptions) -> Result<Projector, ModelError> {
        model.check_language_model(lm)?;
        let rows = ImageRowCache::new(lm.tokenizer().n_vocab(), options.cached_images);
        Ok(Projector { model, rows, encoding: Mutex::new(()), options })
    }

    /// The bytes of the image at `url`: a base64 `data:` URI, or a `file://` path under the
    /// allowed folder. `param` names the field in errors.
    pub fn fetch(&self, url: &str, param: &str) -> Result<Vec<u8>, ApiError> {
        if let Some(rest) = url.strip_prefix("data:") {
            let Some((head, data)) = rest.split_once(',') else {
                return Err(ApiError::invalid_param(param, "a data: URI needs a comma before its data"));
            };
            if !head.ends_with(";base64") {
                return Err(ApiError::invalid_param(param, "a data: URI must be base64 (data:image/png;base64,...)"));
            }
            return self.base64(data, param);
        }
        if let Some(path) = url.strip_prefix("file://") {
            return self.read_local(Path::new(path), param, self.options.max_image_bytes);
        }
        if url.starts_with("http://") || url.starts_with("https://") {
            return Err(ApiError::invalid_param(
                param,
                "remote images are not fetched: send the image inline as a data: URI (data:image/png;base64,...)",
            ));
        }
        Err(ApiError::invalid_param(param, "the image URL must be a data: URI (or file:// under the allowed media folder)"))
    }

    /// The bytes of an image sent as base64 (refused past the byte limit, checked before
    /// decoding).
    pub fn base64(&self, data: &str, param: &str) -> Result<Vec<u8>, ApiError> {
        let limit = self.options.max_image_bytes;
        let too_large = |n: usize| ApiError::payload_too_large(param, format!("the image has {n} bytes; at most {limit} are accepted"));
        if data.len() / 4 * 3 > limit + 3 {
            return Err(too_large(data.len() / 4 * 3));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| ApiError::invalid_param(param, format!("the image is not valid base64: {e}")))?;
        if bytes.len() > limit {
            return Err(too_large(bytes.len()));
        }
        Ok(bytes)
    }

    fn read_local(&self, path: &Path, param: &str, limit: usize) -> Result<Vec<u8>, ApiError> {
        let Some(dir) = &self.options.allowed_local_dir else {
            return Err(ApiError::invalid_param(param, "file:// images are off: start the server with --allowed-local-media-path DIR"));
        };
        let outside = || ApiError::invalid_param(param, format!("file:// images must be under {}", dir.display()));
        // the canonical path (links and `..` resolved) must lie under the folder
        let real = path.canonicalize().map_err(|_| outside())?;
        if !real.starts_with(dir) {
            return Err(outside());
        }
        let len = std::fs::metadata(&real).map_err(|_| outside())?.len();
        if len > limit as u64 {
            return Err(ApiError::payload_too_large(param, format!("the image has {len} bytes; at most {limit} are accepted")));
        }
        std::fs::read(&real).map_err(|e| ApiError::invalid_param(param, format!("reading the image: {e}")))
    }

    /// The image decoded (refused past the pixel limit).
    pub fn decode(&self, bytes: &[u8], param: &str) -> Result<RgbImage, ApiError> {
        decode_rgb(bytes, self.options.max_image_pixels).map_err(|e| match e {
            ImageError::TooManyPixels { .. } => ApiError::payload_too_large(param, e.to_string()),
            other => ApiError::invalid_param(param, other.to_string()),
        })
    }

    /// `text` (rendered messages with [`media_marker`] where the images were) with each image's
    /// rows in its place, tokenized for `lm`. Each image (with the field that holds it, for
    /// errors) is fetched, decoded and encoded (or its rows found by pixel hash).
    pub fn prompt(&self, lm: &Model, text: &str, images: &[(ImagePart, String)]) -> Result<ImagePrompt, ApiError> {
        let files = images.iter().map(|(part, param)| Ok((self.fetch(&part.url, param)?, param.as_str())));
        self.prompt_of(lm, text, files.collect::<Result<_, ApiError>>()?, "messages")
    }

    /// `text` with [`media_marker`] where the images go, each image's file (with the field
    /// that holds it) decoded and encoded (or its rows found by pixel hash), tokenized for `lm`
    /// with the rows in their places; `param` names the text in errors.
    pub fn prompt_of(&self, lm: &Model, text: &str, files: Vec<(Vec<u8>, &str)>, param: &str) -> Result<ImagePrompt, ApiError> {
        let mut rows = Vec::with_capacity(files.len());
        for (bytes, param) in files {
            let image = self.decode(&bytes, param)?;
            let tiles = self.model.tiles(&image);
            let (found, _) = self.rows.get_or_encode(pixel_digest(&image), self.model.non_causal(), tiles.grid, || {
                let _turn = self.encoding.lock().unwrap_or_else(|e| e.into_inner());
                let values = self.model.encode(&tiles).map_err(api)?;
                Ok::<_, ApiError>((values, self.model.config().n_embd_out))
            })?;
            rows.push(found);
        }
        build_prompt(self.model.config(), lm.tokenizer(), text, media_marker(), &rows)
            .map_err(|e| ApiError::invalid_param(param, e.to_string()))
    }
}
