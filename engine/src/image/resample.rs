//! Resizing 8-bit RGB images exactly as Pillow's `Image.resize` does (and llama.cpp's port of
//! it, which the projectors' preprocessing uses): separable passes, horizontal then vertical,
//! each output pixel a weighted sum of its input pixels with the filter stretched by the
//! downscale factor, weights normalised in f64 and rounded to 22-bit fixed point, sums rounded
//! and clamped to a byte after each pass. Written here rather than taken from a resizing crate
//! because the tiles must be the reference's bytes exactly: a different rounding moves every
//! image row the projector makes.

use super::RgbImage;

/// The resampling filter (the two the projectors use: Gemma 3's bilinear, idefics3's Lanczos).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Triangle, support 1.
    Bilinear,
    /// Lanczos with 3 lobes, support 3.
    Lanczos,
}

/// Fractional bits of the fixed-point weights: 32 - 8 (a byte) - 2 (headroom).
const PRECISION_BITS: u32 = 22;

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Lanczos => {
                if !(-3.0..3.0).contains(&x) {
                    return 0.0;
                }
                let sinc = |v: f64| if v == 0.0 { 1.0 } else { (v * std::f64::consts::PI).sin() / (v * std::f64::consts::PI) };
                sinc(x) * sinc(x / 3.0)
            }
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
        }
    }
}

/// For each output pixel of one axis: its first input pixel, their count, and `ksize`
/// fixed-point weights.
struct Coefficients {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
}

fn coefficients(in_size: usize, out_size: usize, filter: Filter) -> Coefficients {
    let scale = in_size as f64 / out_size as f64;
    // upscaling keeps the filter's own width; downscaling widens it against aliasing
    let filter_scale = scale.max(1.0);
    let support = filter.support() * filter_scale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let fixed = f64::from(1u32 << PRECISION_BITS);
    for (xx, row) in weights.chunks_exact_mut(ksize).enumerate() {
        let center = (xx as f64 + 0.5) * scale;
        // C's truncating casts, as the reference
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let count = xmax.saturating_sub(xmin);
        let mut w: Vec<f64> = (0..count).map(|x| filter.weight((x as f64 + xmin as f64 - center + 0.5) / filter_scale)).collect();
        let total: f64 = w.iter().sum();
        if total != 0.0 {
            w.iter_mut().for_each(|v| *v /= total);
        }
        for (k, v) in row.iter_mut().zip(&w) {
            *k = (v * fixed + if *v < 0.0 { -0.5 } else { 0.5 }) as i32;
        }
        bounds.push((xmin, count));
    }
    Coefficients { ksize, bounds, weights }
}

fn clip8(sum: i64) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Rows of `width` pixels resized to `out_w`.
fn horizontal(src: &[u8], width: usize, height: usize, out_w: usize, filter: Filter) -> Vec<u8> {
    let c = coefficients(width, out_w, filter);
    let mut out = vec![0u8; out_w * height * 3];
    for (src_row, dst_row) in src.chunks_exact(width * 3).zip(out.chunks_exact_mut(out_w * 3)) {
        for (xx, px) in dst_row.chunks_exact_mut(3).enumerate() {
            let (xmin, count) = c.bounds[xx];
            let k = &c.weights[xx * c.ksize..xx * c.ksize + count];
            let mut sum = [1i64 << (PRECISION_BITS - 1); 3];
            for (x, &w) in k.iter().enumerate() {
                let p = &src_row[(xmin + x) * 3..(xmin + x) * 3 + 3];
                for ch in 0..3 {
                    sum[ch] += i64::from(p[ch]) * i64::from(w);
                }
            }
            for ch in 0..3 {
                px[ch] = clip8(sum[ch]);
            }
        }
    }
    out
}

/// Columns of `height` pixels (rows of `width`) resized to `out_h`.
fn vertical(src: &[u8], width: usize, height: usize, out_h: usize, filter: Filter) -> Vec<u8> {
    let c = coefficients(height, out_h, filter);
    let row = width * 3;
    let mut out = vec![0u8; row * out_h];
    let mut acc = vec![0i64; row];
    for (yy, dst_row) in out.chunks_exact_mut(row).enumerate() {
        let (ymin, count) = c.bounds[yy];
        acc.fill(1i64 << (PRECISION_BITS - 1));
        for (y, &w) in c.weights[yy * c.ksize..yy * c.ksize + count].iter().enumerate() {
            let src_row = &src[(ymin + y) * row..(ymin + y + 1) * row];
            acc.iter_mut().zip(src_row).for_each(|(a, &p)| *a += i64::from(p) * i64::from(w));
        }
        dst_row.iter_mut().zip(&acc).for_each(|(d, &a)| *d = clip8(a));
    }
    out
}

/// `img` resized to `width x height` (a copy when it is that size already).
pub fn resize(img: &RgbImage, width: u32, height: u32, filter: Filter) -> RgbImage {
    let (w, h) = (img.width as usize, img.height as usize);
    let (ow, oh) = (width.max(1) as usize, height.max(1) as usize);
    let mut pixels = img.pixels.clone();
    if ow != w {
        pixels = horizontal(&pixels, w, h, ow, filter);
    }
    if oh != h {
        pixels = vertical(&pixels, ow, h, oh, filter);
    }
    RgbImage { width: ow as u32, height: oh as u32, pixels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_in_fixed_point_and_cover_the_support() {
        for filter in [Filter::Bilinear, Filter::Lanczos] {
            for (i, o) in [(64, 32), (32, 64), (100, 7), (7, 100)] {
                let c = coefficients(i, o, filter);
                for (xx, &(xmin, count)) in c.bounds.iter().enumerate() {
                    assert!(xmin + count <= i && count >= 1);
                    let sum: i64 = c.weights[xx * c.ksize..(xx + 1) * c.ksize].iter().map(|&w| i64::from(w)).sum();
                    assert!((sum - (1 << PRECISION_BITS)).abs() <= c.ksize as i64, "{filter:?} {i}->{o} pixel {xx}: {sum}");
                }
            }
        }
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let flat = RgbImage { width: 9, height: 5, pixels: vec![77; 9 * 5 * 3] };
        for filter in [Filter::Bilinear, Filter::Lanczos] {
            let r = resize(&flat, 4, 11, filter);
            assert!(r.pixels.iter().all(|&p| p == 77), "{filter:?}");
        }
    }
}
