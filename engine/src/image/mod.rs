//! Image input of vision models: files decoded to RGB pixels (`decode`), then resized, cut into
//! tiles and normalised as a projector type asks (`preprocess`).

pub mod decode;
pub mod preprocess;
pub mod resample;

pub use decode::{decode_rgb, ImageError, RgbImage};
