//! Where an image's rows go in a prompt, with the model's own markers around them, as
//! llama.cpp's `mtmd_tokenize` places them:
//!
//! - idefics3: per tile, row by row, `<fake_token_around_image><row_R_col_C>` then its rows; a
//!   `\n` token after every grid row but the last; then the overview as the tokens `\n\n`,
//!   `<fake_token_around_image>`, `<global-img>`, its rows, `<fake_token_around_image>`.
//! - Gemma 3: `<start_of_image>`, the rows, `<end_of_image>`.
//!
//! Text around the media markers is tokenized piece by piece (special tokens parsed), with BOS
//! first when the model adds one and the text does not start with it.

use std::sync::Arc;

use super::config::{Projector, VisionConfig};
use super::rows::{ImageRows, PromptImages};
use crate::model::error::ModelError;
use crate::tokenizer::{TokenId, Tokenizer};

/// One piece of an image's place in the prompt.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// Text tokenized with special tokens parsed.
    Text(String),
    /// The token whose piece is exactly this text (llama.cpp's `lookup_token`).
    Token(&'static str),
    /// The rows of tile `i` (tiles in the order `Tiles` holds them: the grid, then the overview).
    Tile(usize),
}

/// The pieces of one image cut into `grid` tiles (idefics3) or one tile.
pub fn pieces(projector: Projector, grid: Option<(usize, usize)>) -> Vec<Piece> {
    match (projector, grid) {
        (Projector::Idefics3 { .. }, grid) => {
            let (rows, cols) = grid.unwrap_or((1, 1));
            let mut p = Vec::new();
            for y in 0..rows {
                for x in 0..cols {
                    p.push(Piece::Text(format!("<fake_token_around_image><row_{}_col_{}>", y + 1, x + 1)));
                    p.push(Piece::Tile(y * cols + x));
                }
                if y + 1 != rows {
                    p.push(Piece::Token("\n"));
                }
            }
            p.extend([
                Piece::Token("\n\n"),
                Piece::Token("<fake_token_around_image>"),
                Piece::Token("<global-img>"),
                Piece::Tile(rows * cols),
                Piece::Token("<fake_token_around_image>"),
            ]);
            p
        }
        (Projector::Gemma3 { .. }, _) => {
            vec![Piece::Text("<start_of_image>".into()), Piece::Tile(0), Piece::Text("<end_of_image>".into())]
        }
    }
}

/// The tokens of the model this projector needs (the markers looked up by piece).
pub fn marker_tokens(projector: Projector) -> &'static [&'static str] {
    match projector {
        Projector::Idefics3 { .. } => &["\n", "\n\n", "<fake_token_around_image>", "<global-img>"],
        Projector::Gemma3 { .. } => &["<start_of_image>", "<end_of_image>"],
    }
}

/// The token whose piece (special tokens rendered) is exactly `text`: the first such id.
pub fn find_piece(tokenizer: &Tokenizer, text: &str) -> Option<TokenId> {
    (0..tokenizer.n_vocab() as TokenId).find(|&id| tokenizer.token_to_piece(id, true) == text.as_bytes())
}

/// A prompt of text with images: its ids (tokens, and the images' row ids) and the rows.
#[derive(Clone, Debug)]
pub struct ImagePrompt {
    pub ids: Vec<TokenId>,
    pub images: PromptImages,
}

/// `text` with each `marker` replaced by the next image of `images` (its rows placed with the
/// model's markers), tokenized for `tokenizer`.
pub fn build_prompt(
    c: &VisionConfig,
    tokenizer: &Tokenizer,
    text: &str,
    marker: &str,
    images: &[Arc<ImageRows>],
) -> Result<ImagePrompt, ModelError> {
    let parts: Vec<&str> = text.split(marker).collect();
    if parts.len() != images.len() + 1 {
        return Err(ModelError::BadBatch(format!("the prompt has {} image markers for {} images", parts.len() - 1, images.len())));
    }
    let per_tile = c.rows_per_tile();
    let mut ids = Vec::new();
    let bos_text = tokenizer.bos().and_then(|b| tokenizer.token_text(b));
    if let Some(bos) = tokenizer.bos().filter(|_| tokenizer.add_bos()) {
        if !bos_text.is_some_and(|b| !b.is_empty() && text.as_bytes().starts_with(b)) {
            ids.push(bos);
        }
    }
    for (i, part) in parts.iter().enumerate() {
        ids.extend(tokenizer.encode(part, false, true));
        let Some(img) = images.get(i) else { break };
        for piece in pieces(c.projector, img.grid) {
            match piece {
                Piece::Text(t) => ids.extend(tokenizer.encode(&t, false, true)),
                Piece::Token(t) => ids.push(find_piece(tokenizer, t).ok_or_else(|| missing_marker(t))?),
                Piece::Tile(t) => {
                    if (t + 1) * per_tile > img.n_rows() {
                        return Err(ModelError::BadBatch(format!("image rows for tile {t} missing ({} rows)", img.n_rows())));
                    }
                    ids.extend(img.ids(t * per_tile..(t + 1) * per_tile));
                }
            }
        }
    }
    Ok(ImagePrompt { ids, images: PromptImages(images.to_vec()) })
}

pub(crate) fn missing_marker(text: &str) -> ModelError {
    ModelError::BadKey {
        key: "tokenizer.ggml.tokens".into(),
        reason: format!("the language model has no {text:?} token, which the projector's image markers need"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idefics3_tiles_come_row_by_row_then_the_overview() {
        let p = pieces(Projector::Idefics3 { scale: 2 }, Some((2, 2)));
        let text = |s: &str| Piece::Text(s.to_string());
        assert_eq!(
            p,
            vec![
                text("<fake_token_around_image><row_1_col_1>"),
                Piece::Tile(0),
                text("<fake_token_around_image><row_1_col_2>"),
                Piece::Tile(1),
                Piece::Token("\n"),
                text("<fake_token_around_image><row_2_col_1>"),
                Piece::Tile(2),
                text("<fake_token_around_image><row_2_col_2>"),
                Piece::Tile(3),
                Piece::Token("\n\n"),
                Piece::Token("<fake_token_around_image>"),
                Piece::Token("<global-img>"),
                Piece::Tile(4),
                Piece::Token("<fake_token_around_image>"),
            ]
        );
    }
}
