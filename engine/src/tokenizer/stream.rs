//! Streaming detokenization: text is released token by token, but never half a UTF-8 character
//! (an emoji spelled by four byte tokens comes out whole, with the fourth).

use super::{TokenId, Tokenizer};

/// Turns a stream of token ids into a stream of complete UTF-8 text.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    special: bool,
}

impl StreamDecoder {
    /// `special`: spell control tokens out (`<end_of_turn>`) instead of dropping them.
    pub fn new(special: bool) -> StreamDecoder {
        StreamDecoder { pending: Vec::new(), special }
    }

    /// Adds one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: TokenId) -> String {
        self.push_bytes(tokenizer.token_to_piece(id, self.special))
    }

    /// Adds raw bytes; returns the text they complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // the first `valid_up_to` bytes are UTF-8 by definition
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        // an incomplete character at the end: wait for the next token
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        // bytes that can never become a character: show them as U+FFFD
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whether bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ends the stream: an unfinished character is released as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = if self.pending.is_empty() { String::new() } else { char::REPLACEMENT_CHARACTER.to_string() };
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_partial_characters() {
        let mut d = StreamDecoder::new(false);
        let rocket = "🚀".as_bytes();
        assert_eq!(d.push_bytes(b"a"), "a");
        assert_eq!(d.push_bytes(&rocket[..1]), "");
        assert_eq!(d.push_bytes(&rocket[1..3]), "");
        assert!(d.has_pending());
        assert_eq!(d.push_bytes(&rocket[3..]), "🚀");
        let han = "中".as_bytes();
        assert_eq!(d.push_bytes(&[b'x', han[0]]), "x");
        assert_eq!(d.push_bytes(&han[1..]), "中");
        assert_eq!(d.finish(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut d = StreamDecoder::new(false);
        assert_eq!(d.push_bytes(b"a\xFFb"), "a\u{FFFD}b");
        assert_eq!(d.push_bytes(&"é".as_bytes()[..1]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
