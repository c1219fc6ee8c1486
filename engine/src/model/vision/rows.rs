//! An image's embedding rows as prompts hold them: each row stands in the prompt as an id past
//! the vocabulary, so that prompts, sequence histories and the prefix cache stay lists of ids.
//! The ids of an image come from [`ImageRowCache`], keyed by a hash of its pixels: a second
//! prompt with the same image gets the same ids (its rows are found in the prefix cache) and the
//! same rows (the image is not encoded again).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::backend::RowInput;
use crate::image::RgbImage;
use crate::kv_cache::SeqId;
use crate::model::InputEntry;
use crate::tokenizer::TokenId;

/// The rows one image became, and the ids that stand for them.
#[derive(Debug)]
pub struct ImageRows {
    /// The id of row 0; row `i` is `first_id + i`.
    pub first_id: TokenId,
    pub n_embd: usize,
    /// `n_rows x n_embd`.
    pub rows: Vec<f32>,
    /// The rows see each other both ways while the language model reads them (Gemma 3's).
    pub non_causal: bool,
    /// idefics3: the grid of tiles the rows come from (then the overview's rows last).
    pub grid: Option<(usize, usize)>,
}

impl ImageRows {
    pub fn n_rows(&self) -> usize {
        self.rows.len() / self.n_embd
    }

    /// The ids of rows `range` (the prompt places an image's rows in one or more runs).
    pub fn ids(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = TokenId> + '_ {
        range.map(|i| self.first_id + i as TokenId)
    }

    fn index(&self, id: TokenId) -> Option<usize> {
        let i = id.checked_sub(self.first_id)? as usize;
        (i < self.n_rows()).then_some(i)
    }
}

/// The images of one prompt: what its ids past the vocabulary stand for.
#[derive(Clone, Debug, Default)]
pub struct PromptImages(pub Vec<Arc<ImageRows>>);

impl PromptImages {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The image holding `id` and the row's index in it.
    fn find(&self, id: TokenId) -> Option<(&ImageRows, usize)> {
        self.0.iter().find_map(|img| img.index(id).map(|i| (&**img, i)))
    }

    /// The input of one prompt id: a token, or an image's row (and whether it is non-causal).
    /// An id past the vocabulary that is no row of these images is `None`.
    pub fn input(&self, id: TokenId, n_vocab: usize) -> Option<(RowInput<'_>, bool)> {
        if (id as usize) < n_vocab {
            return Some((RowInput::Token(id), false));
        }
        let (img, i) = self.find(id)?;
        Some((RowInput::Embedding(&img.rows[i * img.n_embd..(i + 1) * img.n_embd]), img.non_causal))
    }

    /// How far a batch that starts a chunk at `ids[0]` and would stop before `ids[take]` must
    /// reach instead: past the end of a non-causal image whose rows it would otherwise cut (its
    /// rows must all be in one forward pass to see each other).
    pub fn chunk_end(&self, ids: &[TokenId], take: usize) -> usize {
        let mut end = take.min(ids.len());
        while end > 0 && end < ids.len() {
            match (self.find(ids[end - 1]), self.find(ids[end])) {
                (Some((a, _)), Some((b, _))) if a.non_causal && std::ptr::eq(a, b) => end += 1,
                _ => break,
            }
        }
        end
    }

    /// The batch entries of `ids` continuing `seq` at position `start`; logits for the last one
    /// when `logits_last`. An id that is neither a token nor a row of these images is an error.
    pub fn entries(
        &self,
        seq: SeqId,
        ids: &[TokenId],
        start: u32,
        n_vocab: usize,
        logits_last: bool,
    ) -> Result<Vec<InputEntry<'_>>, TokenId> {
        ids.iter()
            .enumerate()
            .map(|(i, &id)| {
                let (input, non_causal) = self.input(id, n_vocab).ok_or(id)?;
                Ok(InputEntry {
                    seq,
                    input,
                    pos: start + i as u32,
                    logits: logits_last && i + 1 == ids.len(),
                    non_causal,
                    lora: None,
                    hidden: false,
                })
            })
            .collect()
    }
}

/// A hash of an image's pixels (and size): the key its rows are cached and shared by.
pub fn pixel_digest(image: &RgbImage) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(image.width.to_le_bytes());
    h.update(image.height.to_le_bytes());
    h.update(&image.pixels);
    h.finalize().into()
}

/// The images one projector encoded recently, by pixel hash, and the ids given out so far.
/// Ids are never given out twice, so a prefix-cache entry holding an image that has since left
/// this cache can never be matched by a different image's rows.
pub struct ImageRowCache {
    inner: Mutex<CacheInner>,
}

struct CacheInner {
    next_id: u64,
    by_digest: lru::LruCache<[u8; 32], Arc<ImageRows>>,
}

/// The cache ran out of ids (after about four billion image rows): restart the process.
#[derive(Debug, thiserror::Error)]
#[error("no ids are left for image rows in this process")]
pub struct OutOfIds;

impl ImageRowCache {
    /// A cache of `capacity` images whose ids start past a vocabulary of `n_vocab` tokens.
    pub fn new(n_vocab: usize, capacity: usize) -> ImageRowCache {
        let cap = NonZeroUsize::new(capacity.max(1)).expect("at least one");
        ImageRowCache { inner: Mutex::new(CacheInner { next_id: n_vocab as u64, by_digest: lru::LruCache::new(cap) }) }
    }

    /// The rows of the image with pixel hash `digest`: cached, or made by `encode` (its rows,
    /// `n_rows x n_embd`) and given fresh ids. `encode` runs outside the cache's lock.
    pub fn get_or_encode<E>(
        &self,
        digest: [u8; 32],
        non_causal: bool,
        grid: Option<(usize, usize)>,
        encode: impl FnOnce() -> Result<(Vec<f32>, usize), E>,
    ) -> Result<(Arc<ImageRows>, bool), E>
    where
        E: From<OutOfIds>,
    {
        if let Some(found) = self.lock().by_digest.get(&digest) {
            return Ok((found.clone(), true));
        }
        let (rows, n_embd) = encode()?;
        let mut inner = self.lock();
        if let Some(found) = inner.by_digest.get(&digest) {
            // encoded twice at once: the first one's ids win
            return Ok((found.clone(), true));
        }
        let n_rows = (rows.len() / n_embd.max(1)) as u64;
        let first_id = inner.next_id;
        if first_id + n_rows > u64::from(TokenId::MAX) {
            return Err(OutOfIds.into());
        }
        inner.next_id += n_rows;
        let img = Arc::new(ImageRows { first_id: first_id as TokenId, n_embd, rows, non_causal, grid });
        inner.by_digest.put(digest, img.clone());
        Ok((img, false))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(first_id: TokenId, n_rows: usize, non_causal: bool) -> Arc<ImageRows> {
        Arc::new(ImageRows { first_id, n_embd: 2, rows: (0..2 * n_rows).map(|v| v as f32).collect(), non_causal, grid: None })
    }

    #[test]
    fn ids_past_the_vocabulary_are_the_images_rows() {
        let images = PromptImages(vec![image(100, 3, false)]);
        assert_eq!(images.input(5, 100), Some((RowInput::Token(5), false)));
        assert_eq!(images.input(101, 100), Some((RowInput::Embedding(&[2.0, 3.0]), false)));
        assert_eq!(images.input(103, 100), None);
        let e = images.entries(7, &[5, 100, 101, 102, 6], 10, 100, true).unwrap();
        assert_eq!(e.len(), 5);
        assert_eq!((e[1].pos, e[4].pos, e[4].logits, e[3].logits), (11, 14, true, false));
        assert_eq!(images.entries(7, &[5, 103], 0, 100, true).unwrap_err(), 103);
    }

    #[test]
    fn a_chunk_never_cuts_a_non_causal_image() {
        let images = PromptImages(vec![image(100, 3, true), image(200, 2, false)]);
        let ids = [1, 2, 100, 101, 102, 3, 200, 201, 4];
        assert_eq!(images.chunk_end(&ids, 2), 2); // before the image
        assert_eq!(images.chunk_end(&ids, 3), 5); // inside: to its end
        assert_eq!(images.chunk_end(&ids, 5), 5);
        assert_eq!(images.chunk_end(&ids, 7), 7); // a causal image may be cut
        assert_eq!(images.chunk_end(&ids, 20), 9);
    }

    #[test]
    fn the_same_pixels_get_the_same_ids_and_new_pixels_new_ones() {
        let cache = ImageRowCache::new(50, 2);
        let rows = || Ok::<_, OutOfIds>((vec![0.0; 8], 2));
        let (a, hit) = cache.get_or_encode([1; 32], false, None, rows).unwrap();
        assert!(!hit);
        assert_eq!((a.first_id, a.n_rows()), (50, 4));
        let (again, hit) = cache.get_or_encode([1; 32], false, None, || -> Result<_, OutOfIds> { panic!("encoded twice") }).unwrap();
        assert!(hit && Arc::ptr_eq(&a, &again));
        let (b, _) = cache.get_or_encode([2; 32], false, None, rows).unwrap();
        assert_eq!(b.first_id, 54);
        // evicted (capacity 2) and encoded again: fresh ids, never the old ones
        cache.get_or_encode([3; 32], false, None, rows).unwrap();
        let (a2, hit) = cache.get_or_encode([1; 32], false, None, rows).unwrap();
        assert!(!hit);
        assert_eq!(a2.first_id, 62);
    }
}
