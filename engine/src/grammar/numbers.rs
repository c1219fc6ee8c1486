//! Bounded JSON numbers. Sampled under a JSON constraint, a model can spend its whole token
//! budget on one number (`{"value":30000000000000000000000...`): llguidance's JSON grammar puts
//! no limit on digits. As llama.cpp's schema grammars do, a number here has at most 16 integral
//! and 16 fractional digits and an exponent of at most 3 digits, unless the schema itself asks
//! for larger or finer numbers (then its constraint is left unbounded). The bound is a second
//! mask over llguidance's: a JSON lexer follows the output, and a token that would take a number
//! past a limit is refused.

use std::sync::Arc;

use serde_json::Value;

use crate::tokenizer::TokenId;

pub const MAX_INTEGRAL_DIGITS: u8 = 16;
pub const MAX_FRACTION_DIGITS: u8 = 16;
pub const MAX_EXPONENT_DIGITS: u8 = 3;

/// Where the output is, lexically: outside any string or number, in a string (after a
/// backslash), or in a number's integral part, fraction or exponent (digits so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lex {
    Outside,
    InString,
    Escape,
    Integral(u8),
    Fraction(u8),
    ExponentStart,
    Exponent(u8),
}

impl Lex {
    /// The state after `byte`; `None` when it takes a number past a limit.
    fn step(self, byte: u8) -> Option<Lex> {
        use Lex::*;
        let digit = byte.is_ascii_digit();
        Some(match self {
            Outside => match byte {
                b'"' => InString,
                b'-' => Integral(0),
                b'0'..=b'9' => Integral(1),
                _ => Outside,
            },
            InString => match byte {
                b'\\' => Escape,
                b'"' => Outside,
                _ => InString,
            },
            Escape => InString,
            Integral(n) if digit => Integral(counted(n, MAX_INTEGRAL_DIGITS)?),
            Integral(_) if byte == b'.' => Fraction(0),
            Fraction(n) if digit => Fraction(counted(n, MAX_FRACTION_DIGITS)?),
            Integral(_) | Fraction(_) if byte == b'e' || byte == b'E' => ExponentStart,
            ExponentStart if byte == b'+' || byte == b'-' => Exponent(0),
            ExponentStart if digit => Exponent(1),
            Exponent(n) if digit => Exponent(counted(n, MAX_EXPONENT_DIGITS)?),
            // anything else ends the number and is read as outside it
            Integral(_) | Fraction(_) | ExponentStart | Exponent(_) => return Outside.step(byte),
        })
    }

    fn in_number(self) -> bool {
        matches!(self, Lex::Integral(_) | Lex::Fraction(_) | Lex::ExponentStart | Lex::Exponent(_))
    }
}

/// One more digit than `n`, unless that passes `max`.
fn counted(n: u8, max: u8) -> Option<u8> {
    (n < max).then_some(n + 1)
}

/// Each token's bytes (as in the grammar's token trie), and the tokens that can open or extend
/// a number: those with a digit, and of them those with a quote (from inside a string): built
/// once per vocabulary.
pub(super) struct TokenBytes {
    pub(super) words: Vec<Vec<u8>>,
    with_digit: Vec<TokenId>,
    with_digit_and_quote: Vec<TokenId>,
}

impl TokenBytes {
    pub(super) fn new(words: Vec<Vec<u8>>) -> TokenBytes {
        let ids = |keep: &dyn Fn(&[u8]) -> bool| -> Vec<TokenId> {
            words.iter().enumerate().filter(|(_, w)| keep(w)).map(|(id, _)| id as TokenId).collect()
        };
        let digit = |w: &[u8]| w.iter().any(u8::is_ascii_digit);
        let with_digit = ids(&digit);
        let with_digit_and_quote = ids(&|w| digit(w) && w.contains(&b'"'));
        TokenBytes { words, with_digit, with_digit_and_quote }
    }
}

/// One output's lexical position, with the position before each token it took (to roll back).
#[derive(Clone)]
pub(super) struct NumberBound {
    tokens: Arc<TokenBytes>,
    state: Lex,
    before: Vec<Lex>,
}

impl NumberBound {
    pub(super) fn new(tokens: Arc<TokenBytes>) -> NumberBound {
        NumberBound { tokens, state: Lex::Outside, before: Vec::new() }
    }

    /// The state after `token`; `None` when it takes a number past a limit.
    fn after(&self, token: TokenId) -> Option<Lex> {
        let word = self.tokens.words.get(token as usize)?;
        word.iter().try_fold(self.state, |s, &b| s.step(b))
    }

    /// Whether `token` keeps every number within the limits.
    pub(super) fn allows(&self, token: TokenId) -> bool {
        self.after(token).is_some()
    }

    /// Sets the still-allowed tokens that would take a number past a limit to minus infinity.
    /// Only a token with a digit can, unless a number is already open; inside a string, only
    /// one that also has a quote, to leave the string.
    pub(super) fn mask(&self, logits: &mut [f32]) {
        let t = &*self.tokens;
        let refuse = |id: TokenId| {
            if let Some(l) = logits.get_mut(id as usize).filter(|l| **l != f32::NEG_INFINITY) {
                if self.after(id).is_none() {
                    *l = f32::NEG_INFINITY;
                }
            }
        };
        match self.state {
            s if s.in_number() => (0..t.words.len() as TokenId).for_each(refuse),
            Lex::InString | Lex::Escape => t.with_digit_and_quote.iter().copied().for_each(refuse),
            _ => t.with_digit.iter().copied().for_each(refuse),
        }
    }

    /// Moves past `token` (which [`NumberBound::allows`]).
    pub(super) fn accept(&mut self, token: TokenId) {
        self.before.push(self.state);
        self.state = self.after(token).unwrap_or(Lex::Outside);
    }

    /// Undoes the last `n` tokens.
    pub(super) fn rollback(&mut self, n: usize) {
        for _ in 0..n.min(self.before.len()) {
            self.state = self.before.pop().expect("counted");
        }
    }
}

/// Whether a schema asks for numbers past the bound: a bound (`minimum`, `maximum`, their
/// exclusive forms) of 10^16 or more in size, a `multipleOf` finer than 10^-16, or a `const` /
/// `enum` number whose text is past the limits.
pub(super) fn asks_for_more(schema: &Value) -> bool {
    let too_large = |v: &Value| v.as_f64().is_some_and(|x| x.abs() >= 1e16);
    let past_limits =
        |v: &Value| v.is_number() && (too_large(v) || v.to_string().bytes().try_fold(Lex::Outside, |s, b| s.step(b)).is_none());
    match schema {
        Value::Object(map) => map.iter().any(|(key, v)| match key.as_str() {
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => too_large(v),
            "multipleOf" => v.as_f64().is_some_and(|x| x > 0.0 && x < 1e-16),
            "const" => past_limits(v),
            "enum" => v.as_array().is_some_and(|items| items.iter().any(past_limits)),
            _ => asks_for_more(v),
        }),
        Value::Array(items) => items.iter().any(asks_for_more),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lexes(text: &str) -> bool {
        text.bytes().try_fold(Lex::Outside, |s, b| s.step(b)).is_some()
    }

    #[test]
    fn numbers_keep_to_the_limits_and_strings_are_free() {
        let sixteen = "1234567890123456";
        for ok in [
            format!("{{\"a\":{sixteen}}}"),
            format!("[-{sixteen}.{sixteen}e+123,0.5E-1]"),
            format!("{{\"{sixteen}{sixteen}\":\"{sixteen}{sixteen}\\\"{sixteen}{sixteen}\"}}"),
            format!("[{sixteen},{sixteen}]"),
        ] {
            assert!(lexes(&ok), "{ok}");
        }
        for past in [format!("[{sixteen}7]"), format!("[0.{sixteen}7]"), "[1e1234]".to_string(), format!("[-{sixteen}0]")] {
            assert!(!lexes(&past), "{past}");
        }
    }

    #[test]
    fn schemas_that_ask_for_more_are_seen_wherever_they_ask() {
        assert!(!asks_for_more(&json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 1e15}}})));
        assert!(asks_for_more(&json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1e17}}})));
        assert!(asks_for_more(&json!({"anyOf": [{"type": "string"}, {"type": "number", "multipleOf": 1e-20}]})));
        assert!(asks_for_more(&json!({"enum": [1, 12345678901234567890u64]})));
        assert!(asks_for_more(&json!({"$defs": {"x": {"const": 0.12345678901234567}}})));
        assert!(!asks_for_more(&json!({"enum": ["12345678901234567890"]})), "a string is no number");
    }

    #[test]
    fn rollback_returns_to_the_state_before_the_tokens() {
        let words = vec![b"1".to_vec(), b"12345678".to_vec(), b",".to_vec(), b"\"".to_vec()];
        let mut bound = NumberBound::new(Arc::new(TokenBytes::new(words)));
        bound.accept(1);
        bound.accept(1);
        assert!(!bound.allows(0), "16 digits: no 17th");
        assert!(bound.allows(2));
        bound.rollback(1);
        assert!(bound.allows(1) && bound.allows(0));
        let mut logits = vec![0.0; 4];
        bound.accept(1);
        bound.mask(&mut logits);
        assert_eq!(logits, [f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, 0.0]);
        bound.rollback(5);
        assert_eq!(bound.state, Lex::Outside);
    }
}
