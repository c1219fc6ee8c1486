//! The image decoder and a projector's preprocessing on arbitrary bytes (what an `image_url`
//! data: URI reaches): `decode_rgb` returns pixels or an error, never panics or allocates past
//! its pixel cap; decoded pixels are width x height x 3 bytes; Gemma 3's fit and idefics3's
//! grid (with Pillow's resampling, up and down) give tiles of the asked size with finite values.
#![no_main]

use engine::image::decode_rgb;
use engine::image::preprocess::{tiles, Normalisation, Tiling};
use libfuzzer_sys::fuzz_target;

/// Pixels one input may decode to: keeps every execution short.
const MAX_PIXELS: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Ok(img) = decode_rgb(data, MAX_PIXELS) else { return };
    assert!(u64::from(img.width) * u64::from(img.height) <= MAX_PIXELS);
    assert_eq!(img.pixels.len(), img.width as usize * img.height as usize * 3);
    let n = Normalisation { mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5] };
    for (size, tiling) in [(16, Tiling::Fit), (8, Tiling::Grid { longest_edge: 24 })] {
        let t = tiles(&img, size, tiling, &n);
        if let Some((rows, cols)) = t.grid {
            assert_eq!(t.tiles.len(), rows * cols + 1);
        }
        for tile in &t.tiles {
            assert_eq!(tile.len(), 3 * size * size);
            assert!(tile.iter().all(|v| v.is_finite() && v.abs() <= 1.0 + 1e-6));
        }
    }
});
