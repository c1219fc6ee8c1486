//! `engine-cli run --mmproj F --image PATH`: images read through a vision projector and placed
//! in the prompt (at each `<__media__>` of the text, in order, or before the text when it has
//! none, as llama.cpp's mtmd-cli does), then prefilled; the generation continues after them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use engine::backend::Device;
use engine::image::decode_rgb;
use engine::kv_cache::KvCache;
use engine::model::vision::{build_prompt, ImageRows, VisionModel};
use engine::model::Model;
use engine::tokenizer::TokenId;

/// The marker a `run` prompt places images with.
pub const MARKER: &str = "<__media__>";

/// Images bigger than this are refused (width x height).
const MAX_PIXELS: u64 = 100_000_000;

/// The prompt's ids (tokens, and the images' rows past the vocabulary), with the images' rows
/// already in `kv` (sequence 0) for all but the last id.
pub fn prefill(
    model: &Model,
    kv: &mut KvCache,
    mmproj: &PathBuf,
    images: &[PathBuf],
    text: &str,
    device: Device,
) -> anyhow::Result<Vec<TokenId>> {
    let vision = VisionModel::load_on(mmproj, device).with_context(|| mmproj.display().to_string())?;
    vision.check_language_model(model).with_context(|| format!("{} with this model", mmproj.display()))?;
    let n_vocab = model.tokenizer().n_vocab();
    let mut next_id = n_vocab as TokenId;
    let mut rows = Vec::with_capacity(images.len());
    for path in images {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let image = decode_rgb(&bytes, MAX_PIXELS).with_context(|| path.display().to_string())?;
        let start = Instant::now();
        let tiles = vision.tiles(&image);
        let values = vision.encode(&tiles)?;
        let n_embd = vision.config().n_embd_out;
        let img = ImageRows { first_id: next_id, n_embd, rows: values, non_causal: vision.non_causal(), grid: tiles.grid };
        eprintln!(
            "image {}: {} x {}, {} tile(s), {} rows, encoded in {:.0} ms",
            path.display(),
            image.width,
            image.height,
            tiles.tiles.len(),
            img.n_rows(),
            start.elapsed().as_secs_f64() * 1e3
        );
        next_id += img.n_rows() as TokenId;
        rows.push(Arc::new(img));
    }
    let markers = text.matches(MARKER).count();
    let text = match markers {
        0 => format!("{}{text}", MARKER.repeat(images.len())),
        n if n == images.len() => text.to_string(),
        n => bail!("the prompt has {n} {MARKER} markers for {} --image", images.len()),
    };
    let prompt = build_prompt(vision.config(), model.tokenizer(), &text, MARKER, &rows)?;
    if prompt.ids.len() > kv.n_ctx() {
        bail!("the prompt with its images has {} positions, more than the context ({})", prompt.ids.len(), kv.n_ctx());
    }
    let head = &prompt.ids[..prompt.ids.len() - 1];
    if !head.is_empty() {
        let entries = prompt.images.entries(0, head, 0, n_vocab, false).map_err(|id| anyhow::anyhow!("prompt id {id} has no row"))?;
        model.forward_inputs(kv, &entries)?;
    }
    Ok(prompt.ids)
}
