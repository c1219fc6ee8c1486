//! Image files to RGB pixels: PNG, JPEG, WEBP and GIF (its first frame) read by the `image`
//! crate, any colour type converted to 8-bit RGB (an alpha channel dropped, as llama.cpp's
//! loader does), with a cap on the pixel count checked before the pixels are allocated.

use std::io::Cursor;

use image::{ImageFormat, ImageReader, Limits};

/// Why bytes could not be read as an image; the message says what to fix.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ImageError {
    #[error("the image is empty")]
    Empty,
    #[error("not a supported image (PNG, JPEG, WEBP or GIF)")]
    Format,
    #[error("the image is corrupt: {0}")]
    Corrupt(String),
    #[error("the image is {width} x {height} pixels; at most {max} pixels are accepted")]
    TooManyPixels { width: u32, height: u32, max: u64 },
}

/// 8-bit RGB pixels, row-major, `[height][width][3]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl RgbImage {
    /// The pixel at `(x, y)`.
    pub fn at(&self, x: u32, y: u32) -> [u8; 3] {
        let i = 3 * (y as usize * self.width as usize + x as usize);
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }
}

/// Decodes a whole image file held in memory; refuses images of more than `max_pixels` pixels
/// (read from the header, so a small compressed file cannot expand into gigabytes).
pub fn decode_rgb(bytes: &[u8], max_pixels: u64) -> Result<RgbImage, ImageError> {
    if bytes.is_empty() {
        return Err(ImageError::Empty);
    }
    let reader = ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| ImageError::Corrupt(e.to_string()))?;
    match reader.format() {
        Some(ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif) => {}
        _ => return Err(ImageError::Format),
    }
    let (width, height) = reader.into_dimensions().map_err(|e| ImageError::Corrupt(e.to_string()))?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(ImageError::TooManyPixels { width, height, max: max_pixels });
    }
    if width == 0 || height == 0 {
        return Err(ImageError::Corrupt("the image has no pixels".into()));
    }
    let mut reader = ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| ImageError::Corrupt(e.to_string()))?;
    let mut limits = Limits::default();
    // the decoder's own buffers: the RGBA frame and a little more
    limits.max_alloc = Some(max_pixels.saturating_mul(8).max(1 << 20));
    reader.limits(limits);
    let decoded = reader.decode().map_err(|e| ImageError::Corrupt(e.to_string()))?;
    let rgb = decoded.into_rgb8();
    Ok(RgbImage { width, height, pixels: rgb.into_raw() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageEncoder, RgbaImage};

    fn png(width: u32, height: u32) -> Vec<u8> {
        let img = RgbaImage::from_fn(width, height, |x, y| image::Rgba([x as u8, y as u8, 7, if x == 0 { 0 } else { 255 }]));
        let mut out = Vec::new();
        image::codecs::png::PngEncoder::new(&mut out).write_image(img.as_raw(), width, height, image::ExtendedColorType::Rgba8).unwrap();
        out
    }

    #[test]
    fn a_png_with_alpha_becomes_its_rgb_pixels() {
        let img = decode_rgb(&png(5, 3), 100).unwrap();
        assert_eq!((img.width, img.height), (5, 3));
        assert_eq!(img.at(4, 2), [4, 2, 7]);
        // a transparent pixel keeps its colour (the alpha channel is dropped, not composited)
        assert_eq!(img.at(0, 1), [0, 1, 7]);
    }

    #[test]
    fn jpeg_webp_and_the_first_frame_of_a_gif_are_read() {
        let img = image::RgbImage::from_fn(6, 4, |x, y| image::Rgb([40 * x as u8, 60 * y as u8, 90]));
        let mut jpeg = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 100)
            .write_image(img.as_raw(), 6, 4, image::ExtendedColorType::Rgb8)
            .unwrap();
        let mut webp = Vec::new();
        image::codecs::webp::WebPEncoder::new_lossless(&mut webp).write_image(img.as_raw(), 6, 4, image::ExtendedColorType::Rgb8).unwrap();
        let mut gif = Vec::new();
        {
            let mut enc = image::codecs::gif::GifEncoder::new(&mut gif);
            for colour in [[200u8, 10, 10, 255], [10, 200, 10, 255]] {
                let frame = image::RgbaImage::from_pixel(6, 4, image::Rgba(colour));
                enc.encode_frame(image::Frame::new(frame)).unwrap();
            }
        }
        let lossless = decode_rgb(&webp, 100).unwrap();
        assert_eq!(lossless.pixels, img.as_raw().clone());
        let lossy = decode_rgb(&jpeg, 100).unwrap();
        assert_eq!((lossy.width, lossy.height), (6, 4));
        assert!(lossy.pixels.iter().zip(img.as_raw()).all(|(&a, &b)| a.abs_diff(b) <= 12));
        let first = decode_rgb(&gif, 100).unwrap();
        assert_eq!(first.at(3, 2), [200, 10, 10]);
    }

    #[test]
    fn bad_bytes_and_large_images_are_clear_errors() {
        assert_eq!(decode_rgb(&[], 100), Err(ImageError::Empty));
        assert_eq!(decode_rgb(b"hello, not an image", 100), Err(ImageError::Format));
        let mut cut = png(5, 3);
        cut.truncate(cut.len() - 20);
        assert!(matches!(decode_rgb(&cut, 100), Err(ImageError::Corrupt(_))), "{:?}", decode_rgb(&cut, 100));
        assert_eq!(decode_rgb(&png(20, 10), 199), Err(ImageError::TooManyPixels { width: 20, height: 10, max: 199 }));
    }
}
