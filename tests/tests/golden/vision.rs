//! Vision input against llama.cpp's multimodal library (`tools/vision/mtmd-golden.cpp`, b11434)
//! on the tiny random-weight files of `tests/fixtures/vision/` (`make-vision-goldens.sh`): the
//! prompt's layout (its text tokens, markers and image rows), every image row, and the language
//! model's logits after the prompt, for both projector types.
//!
//! Two images per projector: one at the size it reads (Gemma 3's 32 x 32; idefics3's 64 x 64, cut
//! into 2 x 2 tiles of 32 plus a 64 -> 32 Lanczos overview) and one that is resized first (Gemma
//! 3: 64 -> 32 bilinear; idefics3: 32 -> 64 Lanczos, then the same cut): the resizes are Pillow's,
//! as llama.cpp's, so every tile's pixels are the reference's and all rows compare tightly.

use std::sync::Arc;

use engine::image::decode_rgb;
use engine::kv_cache::KvType;
use engine::model::vision::{build_prompt, ImageRows, VisionModel};
use engine::model::Model;
use engine_tests::{fixture, read_f32s, read_json};
use serde_json::Value;

/// The largest |a - b| and the error's energy relative to the reference's.
fn compare(what: &str, ours: &[f32], reference: &[f32]) -> (f32, f64) {
    assert_eq!(ours.len(), reference.len());
    let max = ours.iter().zip(reference).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let err: f64 = ours.iter().zip(reference).map(|(a, b)| f64::from(a - b).powi(2)).sum();
    let energy: f64 = reference.iter().map(|b| f64::from(*b).powi(2)).sum();
    eprintln!("{what}: max |diff| {max:.3e}, NMSE {:.3e}", err / energy);
    (max, err / energy)
}

fn argmax(x: &[f32]) -> usize {
    x.iter().enumerate().fold((0, f32::MIN), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0
}

struct Run {
    /// Our rows of every tile, tile after tile (the grid, then the overview).
    rows: Vec<f32>,
    /// The prompt's ids with every image row as -1, as the golden's chunks list them.
    layout: Vec<i64>,
    logits: Vec<f32>,
}

fn run(projector: &str, image: &str) -> Run {
    let dir = fixture("vision");
    let lm = Model::load(dir.join("tiny-vlm.gguf")).unwrap();
    let vision = VisionModel::load(dir.join(format!("tiny-{projector}-mmproj.gguf"))).unwrap();
    vision.check_language_model(&lm).unwrap();
    let img = decode_rgb(&std::fs::read(dir.join(format!("{image}.png"))).unwrap(), 1 << 20).unwrap();
    let tiles = vision.tiles(&img);
    let rows = vision.encode(&tiles).unwrap();
    let n_vocab = lm.tokenizer().n_vocab();
    let n_embd = vision.config().n_embd_out;
    let image_rows =
        Arc::new(ImageRows { first_id: n_vocab as u32, n_embd, rows: rows.clone(), non_causal: vision.non_causal(), grid: tiles.grid });
    let prompt_text = std::fs::read_to_string(dir.join("prompt.txt")).unwrap();
    let prompt = build_prompt(vision.config(), lm.tokenizer(), &prompt_text, "<__media__>", &[image_rows]).unwrap();
    let layout = prompt.ids.iter().map(|&id| if (id as usize) < n_vocab { i64::from(id) } else { -1 }).collect();
    let mut kv = lm.new_kv_cache(KvType::F32, 512);
    let entries = prompt.images.entries(0, &prompt.ids, 0, n_vocab, true).unwrap();
    let logits = lm.forward_inputs(&mut kv, &entries).unwrap();
    Run { rows, layout, logits: logits.row(0).to_vec() }
}

fn golden(name: &str) -> (Value, Vec<f32>, Vec<f32>) {
    let dir = fixture("vision");
    (
        read_json(&dir.join(format!("{name}.json"))),
        read_f32s(&dir.join(format!("{name}.embd.bin"))),
        read_f32s(&dir.join(format!("{name}.logits.bin"))),
    )
}

/// The golden's chunks as one list of ids, image rows as -1.
fn golden_layout(g: &Value) -> Vec<i64> {
    let mut ids = Vec::new();
    for chunk in g["chunks"].as_array().unwrap() {
        match chunk.get("text") {
            Some(t) => ids.extend(t.as_array().unwrap().iter().map(|v| v.as_i64().unwrap())),
            None => ids.extend(std::iter::repeat_n(-1, chunk["image_rows"].as_u64().unwrap() as usize)),
        }
    }
    ids
}

/// Our rows, layout and logits against the golden of `projector` on `image`.
fn check(projector: &str, image: &str, non_causal: bool) {
    let ours = run(projector, image);
    let (g, rows, logits) = golden(&format!("{projector}-{image}"));
    assert_eq!(g["non_causal"], non_causal);
    assert_eq!(ours.layout, golden_layout(&g), "{projector} {image}: the markers and rows in the text");
    let (max, nmse) = compare(&format!("{projector} {image} image rows"), &ours.rows, &rows);
    assert!(max < 1e-4 && nmse < 1e-10, "image rows: max {max:e}, NMSE {nmse:e}");
    let (max, nmse) = compare(&format!("{projector} {image} logits"), &ours.logits, &logits);
    assert!(max < 1e-4 && nmse < 1e-10, "logits after the image: max {max:e}, NMSE {nmse:e}");
    assert_eq!(argmax(&ours.logits), argmax(&logits));
}

/// `<start_of_image>`, 4 rows attending both ways, `<end_of_image>`.
#[test]
fn gemma3_image_rows_and_logits_match_llama_cpp() {
    check("gemma3", "tile-32", true);
    check("gemma3", "grid-64", true);
}

/// Tiles row by row with `<row_R_col_C>`, then the overview with `<global-img>`.
#[test]
fn idefics3_tiles_overview_and_logits_match_llama_cpp() {
    check("idefics3", "grid-64", false);
    check("idefics3", "tile-32", false);
}

/// Both projectors on the kernel backend, run by the CPU execution harness, give llama.cpp's
/// image rows within the bounds the CPU backend meets.
#[cfg(feature = "sim")]
#[test]
fn the_projectors_on_the_kernel_backend_give_llama_cpps_rows() {
    use engine::backend::Device;
    use engine::gguf::GgufFile;
    let dir = fixture("vision");
    for (projector, image) in [("gemma3", "tile-32"), ("idefics3", "grid-64")] {
        let file = Arc::new(GgufFile::open(dir.join(format!("tiny-{projector}-mmproj.gguf"))).unwrap());
        let vision = VisionModel::from_file_simulated(file).unwrap();
        assert_eq!(vision.device(), Device::Cuda(0));
        let img = decode_rgb(&std::fs::read(dir.join(format!("{image}.png"))).unwrap(), 1 << 20).unwrap();
        let ours = vision.encode(&vision.tiles(&img)).unwrap();
        let (_, rows, _) = golden(&format!("{projector}-{image}"));
        let (max, nmse) = compare(&format!("{projector} {image} image rows on the kernel backend"), &ours, &rows);
        assert!(max < 1e-4 && nmse < 1e-10, "image rows: max {max:e}, NMSE {nmse:e}");
    }
}

/// Older converters wrote SigLIP's two feed-forward matrices under each other's names; llama.cpp
/// swaps them back (its `ffn_down` then has rows of n_embd values), and so does the loader: the
/// renamed file gives the same rows bit for bit.
#[test]
fn a_projector_with_the_ffn_names_swapped_reads_the_same() {
    use engine::gguf::{GgufFile, GgufWriter};
    let dir = fixture("vision");
    let src = GgufFile::open(dir.join("tiny-gemma3-mmproj.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        w.add(key.clone(), value.clone()).unwrap();
    }
    for t in src.tensors() {
        let name = if t.name.contains("ffn_up") { t.name.replace("ffn_up", "ffn_down") } else { t.name.replace("ffn_down", "ffn_up") };
        w.add_tensor(name, &t.dims, t.ty, src.tensor_data(t).to_vec()).unwrap();
    }
    let path = std::env::temp_dir().join(format!("swapped-ffn-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    let swapped = VisionModel::load(&path);
    std::fs::remove_file(&path).unwrap();
    let img = decode_rgb(&std::fs::read(dir.join("tile-32.png")).unwrap(), 1 << 20).unwrap();
    let original = VisionModel::load(dir.join("tiny-gemma3-mmproj.gguf")).unwrap();
    let swapped = swapped.unwrap();
    let rows = |v: &VisionModel| v.encode(&v.tiles(&img)).unwrap();
    let bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(bits(rows(&swapped)), bits(rows(&original)));
}
