//! One image tile through a vision projector (the SigLIP ViT and the projection): the tiny
//! idefics3 and Gemma 3 projectors of `tests/fixtures/vision/`, and, under `cargo bench` when
//! present, a random-weight projector of SmolVLM-256M-Instruct's real shape (one 512 x 512
//! tile: 1024 patches through 12 blocks of 768, pixel shuffle 4, fc to 576), made by
//! `tools/vision/make-tiny-vision.py --smolvlm-shape` into
//! `$ENGINE_ASSETS/models/synthetic/smolvlm-256m-mmproj-f16.gguf` (another file with
//! `VISION_BENCH_MODEL=path`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use engine::image::RgbImage;
use engine::model::vision::VisionModel;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vision").join(name)
}

fn synthetic() -> PathBuf {
    std::env::var_os("VISION_BENCH_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("ENGINE_ASSETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/engine-assets"));
        cache.join("models/synthetic/smolvlm-256m-mmproj-f16.gguf")
    })
}

/// A tile-sized image of smooth colours.
fn image(size: u32) -> RgbImage {
    let pixels = (0..size).flat_map(|y| (0..size).flat_map(move |x| [(x * 255 / size) as u8, (y * 255 / size) as u8, 128])).collect();
    RgbImage { width: size, height: size, pixels }
}

fn bench_one(c: &mut Criterion, name: &str, path: &Path) {
    let vision = VisionModel::load(path).unwrap();
    let size = vision.config().image_size as u32;
    let mut tiles = vision.tiles(&image(size));
    tiles.tiles.truncate(1);
    c.bench_function(&format!("vision_encode/{name}/one tile"), |b| b.iter(|| vision.encode(&tiles).unwrap()));
}

fn vision_encode(c: &mut Criterion) {
    bench_one(c, "tiny-idefics3", &fixture("tiny-idefics3-mmproj.gguf"));
    bench_one(c, "tiny-gemma3", &fixture("tiny-gemma3-mmproj.gguf"));
    let path = synthetic();
    if std::env::args().any(|a| a == "--bench") && path.exists() {
        bench_one(c, "smolvlm-256m-shape", &path);
    } else {
        eprintln!("vision_encode: the SmolVLM-256M-shaped projector runs under `cargo bench` when {} exists", path.display());
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(10));
    targets = vision_encode
}
criterion_main!(benches);
