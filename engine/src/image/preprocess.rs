//! An image to the tiles a projector reads, as llama.cpp's `mtmd-image.cpp` cuts them: each
//! tile `image_size x image_size`, its pixels scaled to [0, 1] and normalised per channel by the
//! projector's mean and deviation, planar (`[3][size][size]`).
//!
//! - Gemma 3: one tile: the image resized with its aspect kept to fit the square (bilinear),
//!   centred on black.
//! - idefics3 (SmolVLM): the image resized so its longest edge is `preproc_image_size` (the
//!   other edge rounded to even), then stretched to whole tiles, cut into a grid of tiles (row
//!   by row), plus an overview: the whole image stretched to one tile (Lanczos).
//!
//! Every resize is Pillow's (`resample.rs`), byte for byte what llama.cpp's port computes; an
//! image already at the size a step asks for is copied, not filtered (as llama.cpp does).

use super::resample::{resize, Filter};
use super::RgbImage;

/// The tiles of one image, ready for the encoder.
#[derive(Clone, Debug, PartialEq)]
pub struct Tiles {
    /// Each `3 x size x size`, normalised.
    pub tiles: Vec<Vec<f32>>,
    /// idefics3: the grid the first `rows · cols` tiles form (the last tile is the overview).
    pub grid: Option<(usize, usize)>,
}

/// How an image becomes tiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tiling {
    /// One tile, aspect kept, padded with black (Gemma 3).
    Fit,
    /// A grid of tiles after a resize of the longest edge, plus an overview (idefics3).
    Grid { longest_edge: usize },
}

/// What the preprocessing needs from a projector's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalisation {
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

/// The tile's pixels scaled and normalised, planar.
fn normalise(img: &RgbImage, n: &Normalisation) -> Vec<f32> {
    let plane = (img.width * img.height) as usize;
    let mut out = vec![0f32; 3 * plane];
    for (i, px) in img.pixels.chunks_exact(3).enumerate() {
        for c in 0..3 {
            out[c * plane + i] = (f32::from(px[c]) / 255.0 - n.mean[c]) / n.std[c];
        }
    }
    out
}

/// `size x size` pixels of `img` from `(x, y)`.
fn crop(img: &RgbImage, x: u32, y: u32, size: u32) -> RgbImage {
    let row = img.width as usize * 3;
    let mut pixels = Vec::with_capacity((size * size * 3) as usize);
    for r in y..y + size {
        let start = r as usize * row + x as usize * 3;
        pixels.extend_from_slice(&img.pixels[start..start + size as usize * 3]);
    }
    RgbImage { width: size, height: size, pixels }
}

/// The image resized (bilinear) to fit `size x size` with its aspect kept, centred on black
/// (the sizes computed in f32 and rounded up, as the reference).
fn fit(img: &RgbImage, size: u32) -> RgbImage {
    let (w, h) = (img.width, img.height);
    if (w, h) == (size, size) {
        return img.clone();
    }
    let scale = (size as f32 / w as f32).min(size as f32 / h as f32);
    let nw = ((w as f32 * scale).ceil() as u32).clamp(1, size);
    let nh = ((h as f32 * scale).ceil() as u32).clamp(1, size);
    let resized = resize(img, nw, nh, Filter::Bilinear);
    let mut out = RgbImage { width: size, height: size, pixels: vec![0; (size * size * 3) as usize] };
    let (ox, oy) = ((size - nw) / 2, (size - nh) / 2);
    for r in 0..nh {
        let src = &resized.pixels[(r * nw * 3) as usize..((r + 1) * nw * 3) as usize];
        let start = (((oy + r) * size + ox) * 3) as usize;
        out.pixels[start..start + src.len()].copy_from_slice(src);
    }
    out
}

/// Cuts `img` into tiles of `size` as `tiling` says.
pub fn tiles(img: &RgbImage, size: usize, tiling: Tiling, n: &Normalisation) -> Tiles {
    let size32 = size as u32;
    match tiling {
        Tiling::Fit => Tiles { tiles: vec![normalise(&fit(img, size32), n)], grid: None },
        Tiling::Grid { longest_edge } => {
            let (w, h) = (f64::from(img.width), f64::from(img.height));
            let edge = longest_edge as u32;
            let aspect = w / h;
            let (rw, rh) = if w >= h {
                let rh = (f64::from(edge) / aspect) as u32;
                (edge, (rh + rh % 2).max(1))
            } else {
                let rw = (f64::from(edge) * aspect) as u32;
                ((rw + rw % 2).max(1), edge)
            };
            let (cols, rows) = (rw.div_ceil(size32), rh.div_ceil(size32));
            let resized = resize(img, rw, rh, Filter::Lanczos);
            let refined = resize(&resized, cols * size32, rows * size32, Filter::Lanczos);
            let overview = resize(&refined, size32, size32, Filter::Lanczos);
            let mut out = Vec::with_capacity((rows * cols + 1) as usize);
            for y in 0..rows {
                for x in 0..cols {
                    out.push(normalise(&crop(&refined, x * size32, y * size32, size32), n));
                }
            }
            out.push(normalise(&overview, n));
            Tiles { tiles: out, grid: Some((rows as usize, cols as usize)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: Normalisation = Normalisation { mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5] };

    fn image(w: u32, h: u32) -> RgbImage {
        let pixels = (0..h).flat_map(|y| (0..w).flat_map(move |x| [(x * 7 % 256) as u8, (y * 5 % 256) as u8, 200])).collect();
        RgbImage { width: w, height: h, pixels }
    }

    #[test]
    fn a_tile_sized_image_is_normalised_planar_and_untouched() {
        let img = image(8, 8);
        let t = tiles(&img, 8, Tiling::Fit, &UNIT);
        assert_eq!(t.tiles.len(), 1);
        let tile = &t.tiles[0];
        // pixel (3, 2): R = 21, G = 10, B = 200
        let at = |c: usize| tile[c * 64 + 2 * 8 + 3];
        assert_eq!(at(0), (21.0f32 / 255.0 - 0.5) / 0.5);
        assert_eq!(at(1), (10.0f32 / 255.0 - 0.5) / 0.5);
        assert_eq!(at(2), (200.0f32 / 255.0 - 0.5) / 0.5);
    }

    #[test]
    fn a_wide_image_is_fitted_and_padded_with_black() {
        let t = tiles(&image(16, 8), 8, Tiling::Fit, &UNIT);
        let tile = &t.tiles[0];
        // 8 x 4 in the middle: rows 0, 1 and 6, 7 are black (-1 after normalisation)
        assert_eq!(tile[0], -1.0);
        assert_eq!(tile[7 * 8 + 5], -1.0);
        assert_ne!(tile[2 * 8 + 1 + 128], -1.0); // the blue plane inside is not black
    }

    #[test]
    fn the_grid_covers_the_image_row_by_row_then_the_overview() {
        // longest edge 16, tiles of 8: a 16 x 8 image is 1 row of 2 tiles, plus the overview
        let img = image(16, 8);
        let t = tiles(&img, 8, Tiling::Grid { longest_edge: 16 }, &UNIT);
        assert_eq!(t.grid, Some((1, 2)));
        assert_eq!(t.tiles.len(), 3);
        // no resize was needed: the second tile holds columns 8..16 exactly
        let red = |tile: &[f32], x: usize, y: usize| tile[y * 8 + x];
        assert_eq!(red(&t.tiles[1], 0, 0), ((8 * 7) as f32 / 255.0 - 0.5) / 0.5);
        // a square image at the longest edge: one tile and an overview equal to it
        let t = tiles(&image(8, 8), 8, Tiling::Grid { longest_edge: 8 }, &UNIT);
        assert_eq!(t.grid, Some((1, 1)));
        assert_eq!(t.tiles[0], t.tiles[1]);
    }
}
