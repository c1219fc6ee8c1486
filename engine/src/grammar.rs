//! Structured output: JSON constraints (any object, a JSON schema, one forced tool call) and
//! user grammars (llama.cpp's GBNF, or llguidance's Lark) compiled with llguidance over this
//! engine's own tokenizer, and the per-sequence matcher that masks logits before sampling and
//! follows the tokens chosen.
//!
//! The tokenizer is described to llguidance once, as a token trie over each token's bytes
//! ([`GrammarCompiler::new`]); compiling a constraint then gives a [`GrammarMatcher`] per
//! sequence. JSON may have whitespace between its tokens as llama.cpp's schema grammars allow it
//! (nothing, a space, or one or two line ends and up to 20 spaces or tabs): a model writes its
//! JSON the way it learned to (`{"name": "Ada"}`, or indented), which keeps its values what it
//! would have said (forced into compact JSON, a small model drops list items and garbles
//! strings), and a gap is bounded, so that no model can wander off into whitespace. Numbers are
//! bounded in digits (`numbers`), so that one cannot run on for the whole token budget.

pub mod gbnf;
mod gbnf_lark;
mod numbers;

use std::sync::Arc;

use llguidance::api::{StopReason, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use toktrie::{TokRxInfo, TokTrie, TokenizerEnv};

use crate::tokenizer::{TokenAttr, TokenId, Tokenizer};
use numbers::{asks_for_more, NumberBound, TokenBytes};
pub use numbers::{MAX_EXPONENT_DIGITS, MAX_FRACTION_DIGITS, MAX_INTEGRAL_DIGITS};

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// Any JSON object.
    JsonObject,
    /// A JSON value valid against this schema. Every keyword is enforced; a keyword llguidance
    /// cannot enforce is a compile error, never silently ignored.
    JsonSchema(Value),
    /// One call of one of these tools:
    /// `{"name":<one of the names>,"arguments":<object matching that tool's parameters schema>}`.
    ToolCall(Vec<ToolSpec>),
    /// Text in a user's grammar: llama.cpp's GBNF (from rule `root`), or, when the text starts
    /// with `%llguidance`, llguidance's Lark as llama.cpp built with llguidance takes it.
    Grammar(String),
}

/// A tool the model may call: its name and the JSON schema of its arguments object.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// A JSON schema for an object; `null` or `{}` means any object.
    pub parameters: Value,
}

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The schema is invalid or uses something llguidance cannot enforce; the message is
    /// llguidance's and names the keyword, format or reference.
    #[error("unsupported or invalid JSON schema: {0}")]
    Schema(String),
    #[error("invalid tool-call constraint: {0}")]
    Tools(String),
    /// A GBNF grammar that does not parse: where, and what is wrong.
    #[error("invalid grammar: {0}")]
    Gbnf(#[from] gbnf::GbnfError),
    /// A grammar that parses but cannot be compiled (an unknown token, llguidance's refusal of
    /// a Lark grammar).
    #[error("invalid grammar: {0}")]
    Grammar(String),
    #[error("the tokenizer cannot be used for structured output: {0}")]
    Tokenizer(String),
    #[error("token {token} is outside the tokenizer's vocabulary of {n_vocab}")]
    TokenOutOfRange { token: TokenId, n_vocab: usize },
    #[error("token {token} is not allowed by the grammar here")]
    TokenNotAllowed { token: TokenId },
    /// The matcher failed while running (it stays failed: every later call errors too).
    #[error("grammar matcher: {0}")]
    Matcher(String),
}

/// Compiles constraints for one tokenizer. The token trie and llguidance's token-set slices
/// for a 150k vocabulary take a noticeable moment to build, so this is built once per model
/// and cloned (an `Arc` inside) into whoever compiles constraints.
#[derive(Clone)]
pub struct GrammarCompiler {
    inner: Arc<CompilerInner>,
}

struct CompilerInner {
    factory: ParserFactory,
    n_vocab: usize,
    /// Every end-of-generation id: all of them end a finished grammar, not just EOS.
    eog: Arc<[TokenId]>,
    /// Each token's trie bytes, which the number bound reads.
    tokens: Arc<TokenBytes>,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler").field("n_vocab", &self.inner.n_vocab).field("eog", &self.inner.eog).finish()
    }
}

/// The tokenizer as llguidance sees it: the trie of token bytes, and tokenization by the
/// trie's greedy longest match. llguidance tokenizes only to force bytes (we declare the
/// tokenization non-canonical, so it never forces tokens: the model picks among every token
/// consistent with the forced bytes) and for prompts (which we never hand it).
struct EngineTokEnv {
    trie: TokTrie,
}

impl TokenizerEnv for EngineTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

impl GrammarCompiler {
    /// The compiler for `tokenizer`'s vocabulary; every one of its end-of-generation tokens
    /// ends a grammar that may end.
    pub fn new(tokenizer: &Tokenizer) -> Result<GrammarCompiler, GrammarError> {
        let n = tokenizer.n_vocab();
        let words: Vec<Vec<u8>> = (0..n as TokenId)
            .map(|id| {
                let hidden = tokenizer.token_attr(id).has(TokenAttr::CONTROL | TokenAttr::UNKNOWN);
                token_word(tokenizer.token_bytes(id), id, hidden || tokenizer.is_eog(id))
            })
            .collect();
        Self::from_words(words, tokenizer.eog_ids(), tokenizer.bos())
    }

    /// The compiler for a vocabulary given as each token's trie bytes (see [`token_word`]).
    fn from_words(words: Vec<Vec<u8>>, eog: &[TokenId], bos: Option<TokenId>) -> Result<GrammarCompiler, GrammarError> {
        let n_vocab = words.len();
        let vocab_size = u32::try_from(n_vocab)
            .ok()
            .filter(|&n| n > 0 && n < toktrie::INVALID_TOKEN)
            .ok_or_else(|| GrammarError::Tokenizer(format!("a vocabulary of {n_vocab} tokens")))?;
        // Without an end-of-generation token a grammar that may continue (a number, an open
        // array) could never be ended by the model.
        let eog: Arc<[TokenId]> = eog.iter().copied().filter(|&t| t < vocab_size).collect();
        let Some(&first_eog) = eog.first() else {
            return Err(GrammarError::Tokenizer("no end-of-generation token".into()));
        };
        let info = TokRxInfo {
            vocab_size,
            tok_eos: first_eog,
            tok_bos: bos.filter(|&b| b < vocab_size),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env: toktrie::TokEnv = Arc::new(EngineTokEnv { trie });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Tokenizer(e.to_string()))?;
        // llguidance would print warnings to stderr; they go to `tracing` instead (see compile).
        factory.quiet();
        let tokens = Arc::new(TokenBytes::new(words));
        Ok(GrammarCompiler { inner: Arc::new(CompilerInner { factory, n_vocab, eog, tokens }) })
    }

    /// The tokenizer's vocabulary size (ids at or past it are never allowed).
    pub fn n_vocab(&self) -> usize {
        self.inner.n_vocab
    }

    /// A matcher at the start of `constraint`. Bad or unsupported schemas fail here, with
    /// llguidance's message, never later and never by running unconstrained.
    pub fn compile(&self, constraint: &Constraint) -> Result<GrammarMatcher, GrammarError> {
        let grammar = match constraint {
            Constraint::JsonObject => TopLevelGrammar::from_json_schema(with_json_options(json!({"type": "object"}))?),
            Constraint::JsonSchema(schema) => TopLevelGrammar::from_json_schema(with_json_options(schema.clone())?),
            Constraint::ToolCall(tools) => TopLevelGrammar::from_lark(tool_call_lark(tools)?),
            Constraint::Grammar(text) => TopLevelGrammar::from_lark(self.grammar_lark(text)?),
        };
        let parser = self.inner.factory.create_parser(grammar).map_err(|e| compile_error(constraint, e.to_string()))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(compile_error(constraint, e));
        }
        for w in matcher.grammar_warnings() {
            tracing::warn!(warning = %w, "grammar compiled with a warning");
        }
        let tool_call = matches!(constraint, Constraint::ToolCall(_));
        let unbounded = match constraint {
            Constraint::JsonObject => false,
            Constraint::JsonSchema(schema) => asks_for_more(schema),
            Constraint::ToolCall(tools) => tools.iter().any(|t| asks_for_more(&t.parameters)),
            // a user's grammar says for itself how long its numbers may be
            Constraint::Grammar(_) => true,
        };
        let numbers = (!unbounded).then(|| NumberBound::new(self.inner.tokens.clone()));
        Ok(GrammarMatcher { matcher, n_vocab: self.inner.n_vocab, eog: self.inner.eog.clone(), eog_after_end: 0, tool_call, numbers })
    }

    /// A user's grammar as Lark: GBNF lowered (its `<text>` tokens looked up in the
    /// vocabulary), or the Lark text itself after a `%llguidance` line.
    fn grammar_lark(&self, text: &str) -> Result<String, GrammarError> {
        if text.trim_start().starts_with("%llguidance") {
            return Ok(text.to_string());
        }
        let grammar = gbnf::parse(text)?;
        let words = &self.inner.tokens.words;
        // llama.cpp's `<text>` is the one token whose text is exactly that, special or not
        let token_of = |name: &str| -> Option<TokenId> {
            let marked = |w: &[u8]| w.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) && &w[1..] == name.as_bytes();
            words.iter().position(|w| w == name.as_bytes() || marked(w)).map(|i| i as TokenId)
        };
        gbnf_lark::to_lark(&grammar, &gbnf_lark::Tokens { by_text: &token_of, eog: &self.inner.eog }).map_err(GrammarError::Grammar)
    }
}

/// A token's bytes in the trie. Tokens that must never appear inside the text (control and
/// unknown tokens, and every end-of-generation token, which llguidance allows separately when
/// the grammar may end) get toktrie's special-token marker 0xFF in front: no grammar over
/// UTF-8 text can match that byte. A token with no bytes stays out of the trie.
fn token_word(bytes: &[u8], id: TokenId, special: bool) -> Vec<u8> {
    if !special {
        return bytes.to_vec();
    }
    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    if bytes.is_empty() {
        w.extend_from_slice(format!("[{id}]").as_bytes());
    } else {
        w.extend_from_slice(bytes);
    }
    w
}

/// Whitespace between JSON tokens, as llama.cpp's `space` rule allows it (a gap of no
/// whitespace is no match of it).
const JSON_WHITESPACE: &str = r"( |\n{1,2}[ \t]{0,20})";

/// The options every schema compiles with: `,` and `:` separators with [`JSON_WHITESPACE`]
/// between tokens. They replace any `x-guidance` the caller sent, so a client cannot switch on
/// lenient mode (which ignores what it cannot enforce).
fn with_json_options(schema: Value) -> Result<Value, GrammarError> {
    let mut schema = match schema {
        // `true` is the schema that accepts anything; `false` accepts nothing.
        Value::Bool(true) => json!({}),
        Value::Bool(false) => return Err(GrammarError::Schema("the schema `false` accepts no value".into())),
        Value::Object(o) => Value::Object(o),
        other => return Err(GrammarError::Schema(format!("a schema is an object or a boolean, not {other}"))),
    };
    schema.as_object_mut().expect("an object").insert(
        "x-guidance".into(),
        json!({"whitespace_flexible": true, "whitespace_pattern": JSON_WHITESPACE, "item_separator": ",", "key_separator": ":"}),
    );
    Ok(schema)
}

/// A Lark grammar for `{"name": "<tool>", "arguments": <its arguments>}` with
/// [`JSON_WHITESPACE`] between its tokens: one alternative per tool, the arguments a nested
/// `%json` grammar each, so that every parameters schema keeps its own root (its `#/$defs/...`
/// references resolve as the tool's author meant).
fn tool_call_lark(tools: &[ToolSpec]) -> Result<String, GrammarError> {
    if tools.is_empty() {
        return Err(GrammarError::Tools("no tools to call".into()));
    }
    let mut alts = Vec::with_capacity(tools.len());
    let mut rules = String::new();
    for (i, tool) in tools.iter().enumerate() {
        if tools[..i].iter().any(|t| t.name == tool.name) {
            return Err(GrammarError::Tools(format!("two tools are named {:?}", tool.name)));
        }
        let params = object_parameters(tool)?;
        // Each JSON token is a Lark string literal, which Lark reads as a JSON string.
        let name = Value::String(tool.name.clone()).to_string();
        let tokens = ["{", "\"name\"", ":", &name, ",", "\"arguments\"", ":"].map(|t| Value::String(t.to_string()).to_string());
        rules.push_str(&format!("call_{i}: {} WS? args_{i} WS? \"}}\"\nargs_{i}: %json {params}\n", tokens.join(" WS? ")));
        alts.push(format!("call_{i}"));
    }
    Ok(format!("start: {}\nWS: /{JSON_WHITESPACE}/\n{rules}", alts.join(" | ")))
}

/// A tool's parameters schema, made to describe an object with the JSON options.
fn object_parameters(tool: &ToolSpec) -> Result<Value, GrammarError> {
    let schema = match &tool.parameters {
        Value::Null | Value::Bool(true) => json!({"type": "object"}),
        Value::Object(o) => {
            let mut o = o.clone();
            match o.get("type") {
                None => {
                    o.insert("type".into(), "object".into());
                }
                Some(Value::String(t)) if t == "object" => {}
                Some(t) => {
                    return Err(GrammarError::Tools(format!("the parameters of {:?} must describe an object, not type {t}", tool.name)))
                }
            }
            Value::Object(o)
        }
        other => return Err(GrammarError::Tools(format!("the parameters of {:?} must be a JSON schema object, not {other}", tool.name))),
    };
    with_json_options(schema)
}

fn compile_error(constraint: &Constraint, msg: String) -> GrammarError {
    match constraint {
        Constraint::ToolCall(_) => GrammarError::Tools(msg),
        Constraint::Grammar(_) => GrammarError::Grammar(msg),
        _ => GrammarError::Schema(msg),
    }
}

/// One sequence's position in a compiled constraint.
pub struct GrammarMatcher {
    matcher: Matcher,
    n_vocab: usize,
    eog: Arc<[TokenId]>,
    /// End-of-generation tokens accepted after the grammar had already finished: llguidance
    /// takes no token once stopped, so these are counted here (and rolled back here first).
    eog_after_end: usize,
    /// Compiled from [`Constraint::ToolCall`]: a finished output is a tool call.
    tool_call: bool,
    /// The digits of numbers (none when the schema asks for larger or finer numbers).
    numbers: Option<NumberBound>,
}

/// A copy at the same position that then goes its own way (several choices of one request,
/// a speculative branch).
impl Clone for GrammarMatcher {
    fn clone(&self) -> Self {
        GrammarMatcher {
            matcher: self.matcher.clone(),
            n_vocab: self.n_vocab,
            eog: self.eog.clone(),
            eog_after_end: self.eog_after_end,
            tool_call: self.tool_call,
            numbers: self.numbers.clone(),
        }
    }
}

impl std::fmt::Debug for GrammarMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarMatcher").field("stop", &self.matcher.stop_reason()).finish()
    }
}

impl GrammarMatcher {
    /// Sets every token the grammar does not allow next to `f32::NEG_INFINITY` in `logits` (one
    /// row of the model's vocabulary, which may be longer than the tokenizer's: the extra ids
    /// are never allowed). Where the grammar may end, the end-of-generation tokens stay allowed;
    /// once it has finished, only they do.
    pub fn mask_logits(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        if self.is_finished() {
            let saved: Vec<(usize, f32)> = self.eog.iter().filter_map(|&t| logits.get(t as usize).map(|&l| (t as usize, l))).collect();
            logits.fill(f32::NEG_INFINITY);
            for (i, l) in saved {
                logits[i] = l;
            }
            return Ok(());
        }
        let mask = self.matcher.compute_mask().map_err(|e| GrammarError::Matcher(e.to_string()))?;
        apply_mask(mask.as_slice(), self.n_vocab, logits);
        if let Some(numbers) = &self.numbers {
            numbers.mask(logits);
        }
        Ok(())
    }

    /// Moves past `token`; an error (and no change) when the grammar does not allow it here.
    pub fn accept(&mut self, token: TokenId) -> Result<(), GrammarError> {
        if token as usize >= self.n_vocab {
            return Err(GrammarError::TokenOutOfRange { token, n_vocab: self.n_vocab });
        }
        if self.is_finished() {
            if self.eog.contains(&token) {
                self.eog_after_end += 1;
                return Ok(());
            }
            return Err(GrammarError::TokenNotAllowed { token });
        }
        if self.numbers.as_ref().is_some_and(|n| !n.allows(token)) {
            return Err(GrammarError::TokenNotAllowed { token });
        }
        // try_consume checks the token first, so a refused token leaves the state as it was.
        match self.matcher.try_consume_tokens(&[token]) {
            Ok(1) => {
                if let Some(numbers) = &mut self.numbers {
                    numbers.accept(token);
                }
                Ok(())
            }
            Ok(_) => Err(GrammarError::TokenNotAllowed { token }),
            Err(e) => Err(GrammarError::Matcher(e.to_string())),
        }
    }

    /// Whether nothing may follow: the JSON is complete and cannot be extended, or an
    /// end-of-generation token was accepted. The caller ends generation (finish reason "stop").
    pub fn is_finished(&self) -> bool {
        matches!(self.matcher.stop_reason(), StopReason::NoExtension | StopReason::EndOfSentence)
    }

    /// Undoes the last `n_tokens` accepted tokens (speculative decoding's rejected drafts).
    pub fn rollback(&mut self, n_tokens: usize) -> Result<(), GrammarError> {
        let after_end = n_tokens.min(self.eog_after_end);
        self.eog_after_end -= after_end;
        self.matcher.rollback(n_tokens - after_end).map_err(|e| GrammarError::Matcher(e.to_string()))?;
        if let Some(numbers) = &mut self.numbers {
            numbers.rollback(n_tokens - after_end);
        }
        Ok(())
    }
}

/// Sets the logits of the tokens whose bit is clear in `words` (bit `i % 32` of word `i / 32`),
/// and of every id at or past `n_vocab`, to minus infinity; 32 logits per mask word, so that
/// the common cases (a word of all-disallowed or all-allowed tokens) cost one comparison.
fn apply_mask(words: &[u32], n_vocab: usize, logits: &mut [f32]) {
    let n = n_vocab.min(logits.len());
    let (vocab, extra) = logits.split_at_mut(n);
    extra.fill(f32::NEG_INFINITY);
    for (i, chunk) in vocab.chunks_mut(32).enumerate() {
        let word = words.get(i).copied().unwrap_or(0);
        match word {
            0 => chunk.fill(f32::NEG_INFINITY),
            u32::MAX => {}
            _ => {
                for (bit, l) in chunk.iter_mut().enumerate() {
                    if word >> bit & 1 == 0 {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}

/// The generator's view of a grammar: mask before sampling, advance after.
impl crate::generate::TokenConstraint for GrammarMatcher {
    fn mask_logits(&mut self, logits: &mut [f32]) -> Result<(), String> {
        GrammarMatcher::mask_logits(self, logits).map_err(|e| e.to_string())
    }

    fn accept(&mut self, token: TokenId) -> Result<(), String> {
        GrammarMatcher::accept(self, token).map_err(|e| e.to_string())
    }

    fn is_finished(&self) -> bool {
        GrammarMatcher::is_finished(self)
    }

    fn finish_reason(&self) -> crate::generate::FinishReason {
        if self.tool_call {
            crate::generate::FinishReason::ToolCalls
        } else {
            crate::generate::FinishReason::Stop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A byte-level vocabulary: ids 0..256 the single bytes, then a few merged tokens, a
    // control token, a token whose text is a JSON fragment but is end-of-generation, and EOS.
    const MERGED: &[&str] = &["{\"", "\":", "\",\"", "\"}", "true", "null", "name", "12", "{\"name\":\"", "\"a"];
    const CONTROL: TokenId = 256 + MERGED.len() as TokenId;
    const EOG_TEXT: TokenId = CONTROL + 1;
    const EOS: TokenId = CONTROL + 2;

    fn compiler() -> GrammarCompiler {
        let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| token_word(&[b], b as TokenId, false)).collect();
        words.extend(MERGED.iter().enumerate().map(|(i, m)| token_word(m.as_bytes(), 256 + i as TokenId, false)));
        words.push(token_word(b"<|tool|>", CONTROL, true));
        words.push(token_word(b"}", EOG_TEXT, true));
        words.push(token_word(b"", EOS, true));
        GrammarCompiler::from_words(words, &[EOG_TEXT, EOS], None).unwrap()
    }

    fn id(text: &str) -> TokenId {
        if text.len() == 1 {
            return text.as_bytes()[0] as TokenId;
        }
        256 + MERGED.iter().position(|m| *m == text).unwrap() as TokenId
    }

    fn allowed(m: &mut GrammarMatcher, n: usize) -> Vec<TokenId> {
        let mut logits = vec![0.0; n];
        m.mask_logits(&mut logits).unwrap();
        (0..n as TokenId).filter(|&t| logits[t as usize].is_finite()).collect()
    }

    fn feed(m: &mut GrammarMatcher, pieces: &[&str]) {
        for p in pieces {
            m.accept(id(p)).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        }
    }

    #[test]
    fn numbers_stop_at_their_digit_limits_unless_the_schema_asks_for_more() {
        let c = compiler();
        let n = CONTROL as usize + 10;
        let mut m = c.compile(&Constraint::JsonObject).unwrap();
        feed(&mut m, &["{\"", "a", "\":", "-"]);
        feed(&mut m, &["12"; 8]);
        // 16 integral digits: no 17th (nor a token carrying one), the number may go on otherwise
        let next = allowed(&mut m, n);
        assert!(!next.contains(&id("1")) && !next.contains(&id("12")), "{next:?}");
        assert!(next.contains(&id(".")) && next.contains(&id("e")) && next.contains(&id("}")));
        assert!(matches!(m.accept(id("1")), Err(GrammarError::TokenNotAllowed { .. })));
        feed(&mut m, &["."]);
        feed(&mut m, &["12"; 8]);
        assert!(!allowed(&mut m, n).contains(&id("1")));
        feed(&mut m, &["e", "-", "1", "2", "1"]);
        assert!(!allowed(&mut m, n).contains(&id("1")), "three exponent digits");
        // rolled back into the fraction, the exponent may start again
        m.rollback(5).unwrap();
        assert!(allowed(&mut m, n).contains(&id("e")));
        feed(&mut m, &[","]);
        assert!(allowed(&mut m, n).contains(&id("\"")));
        // digits in strings are text
        feed(&mut m, &["\"a", "\":", "\""]);
        feed(&mut m, &["12"; 20]);

        let big = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1e17}}, "required": ["n"]});
        let mut m = c.compile(&Constraint::JsonSchema(big)).unwrap();
        feed(&mut m, &["{\"", "n", "\":"]);
        feed(&mut m, &["12"; 10]);
        assert!(allowed(&mut m, n).contains(&id("1")), "the schema asks for 18 digits or more");
    }

    #[test]
    fn json_has_llama_cpp_s_whitespace_between_tokens_and_ends_with_the_object() {
        let c = compiler();
        let mut m = c.compile(&Constraint::JsonObject).unwrap();
        // only `{` and tokens starting with it; no whitespace, no control or EOG tokens
        let first = allowed(&mut m, CONTROL as usize + 10);
        assert!(first.contains(&id("{")) && first.contains(&id("{\"")));
        assert!(!first.contains(&id(" ")) && !first.contains(&CONTROL) && !first.contains(&EOS));
        assert!(!first.contains(&EOG_TEXT), "an end-of-generation token is not text");
        feed(&mut m, &["{\"", "a", "\":", " ", "12", ",", "\n", " ", " ", "\"a", "\":", "true"]);
        // a gap is a space, or one or two line ends and at most 20 spaces or tabs
        assert!(m.accept(id("\t")).is_err(), "a tab only after a line end");
        let mut gap = m.clone();
        feed(&mut gap, &["\n", "\n"]);
        assert!(gap.accept(id("\n")).is_err(), "three line ends");
        feed(&mut gap, &["\t"; 20]);
        assert!(gap.accept(id(" ")).is_err(), "21 spaces or tabs");
        feed(&mut gap, &["}"]);
        let mut spaced = m.clone();
        feed(&mut spaced, &[" "]);
        assert!(spaced.accept(id(" ")).is_err(), "two spaces");
        assert!(!m.is_finished());
        feed(&mut m, &["}"]);
        assert!(m.is_finished() && gap.is_finished());
        // finished: only end-of-generation tokens remain allowed, and accepting one is fine
        assert_eq!(allowed(&mut m, CONTROL as usize + 10), vec![EOG_TEXT, EOS]);
        m.accept(EOS).unwrap();
        assert!(m.accept(id("{")).is_err());
    }

    #[test]
    fn refused_tokens_leave_the_state_alone_and_rollback_undoes() {
        let c = compiler();
        let schema =
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false});
        let mut m = c.compile(&Constraint::JsonSchema(schema)).unwrap();
        assert!(matches!(m.accept(id("[")), Err(GrammarError::TokenNotAllowed { .. })));
        assert!(matches!(m.accept(9999), Err(GrammarError::TokenOutOfRange { .. })));
        assert!(matches!(m.accept(CONTROL), Err(GrammarError::TokenNotAllowed { .. })));
        feed(&mut m, &["{\"name\":\"", "x"]);
        let before = allowed(&mut m, 300);
        feed(&mut m, &["\"}"]);
        assert!(m.is_finished());
        m.rollback(1).unwrap();
        assert!(!m.is_finished());
        assert_eq!(allowed(&mut m, 300), before);
        // a clone goes its own way
        let mut fork = m.clone();
        feed(&mut fork, &["\"}"]);
        assert!(fork.is_finished() && !m.is_finished());
        m.rollback(2).unwrap();
        assert!(allowed(&mut m, 300).contains(&id("{")));
        assert!(fork.is_finished());
    }

    #[test]
    fn end_of_generation_is_allowed_only_where_the_value_may_end() {
        let c = compiler();
        let mut m = c.compile(&Constraint::JsonSchema(json!({"type": "integer"}))).unwrap();
        assert!(!allowed(&mut m, 300).contains(&EOS));
        feed(&mut m, &["12"]);
        let a = allowed(&mut m, 300);
        assert!(a.contains(&EOS) && a.contains(&EOG_TEXT) && a.contains(&id("3")));
        // the model's row may be longer than the vocabulary: the extra ids are never allowed
        let mut logits = vec![0.0; 400];
        m.mask_logits(&mut logits).unwrap();
        assert!(logits[EOS as usize + 1..].iter().all(|l| *l == f32::NEG_INFINITY));
        m.accept(EOS).unwrap();
        assert!(m.is_finished());
        m.rollback(1).unwrap();
        assert!(!m.is_finished());
    }

    #[test]
    fn tool_call_names_a_tool_and_takes_its_arguments() {
        let c = compiler();
        let tools = vec![
            ToolSpec {
                name: "name".into(),
                parameters: json!({"properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": false}),
            },
            ToolSpec { name: "other".into(), parameters: Value::Null },
        ];
        let mut m = c.compile(&Constraint::ToolCall(tools)).unwrap();
        feed(&mut m, &["{\"name\":\"", "name", "\",\""]);
        for ch in "arguments\":{\"a\":".split_inclusive(|_| true) {
            feed(&mut m, &[ch]);
        }
        assert!(m.accept(id("null")).is_err());
        feed(&mut m, &["true", "}"]);
        assert!(!m.is_finished());
        feed(&mut m, &["}"]);
        assert!(m.is_finished());
        // with whitespace between the tokens, as a model may write it
        let text = "{\"name\": \"other\",\n  \"arguments\": {\"b\": [1, 2]} }";
        let mut m = c.compile(&Constraint::ToolCall(vec![ToolSpec { name: "other".into(), parameters: Value::Null }])).unwrap();
        for ch in text.split_inclusive(|_| true) {
            feed(&mut m, &[ch]);
        }
        assert!(m.is_finished());
        let mut m = c.compile(&Constraint::ToolCall(vec![ToolSpec { name: "other".into(), parameters: Value::Null }])).unwrap();
        feed(&mut m, &["{"]);
        assert!(m.accept(id("\t")).is_err(), "a tab only after a line end");
    }

    #[test]
    fn unsupported_and_invalid_constraints_are_errors() {
        let c = compiler();
        let schema = |s: Value| c.compile(&Constraint::JsonSchema(s)).unwrap_err();
        let e = schema(json!({"type": "array", "uniqueItems": true}));
        assert!(matches!(&e, GrammarError::Schema(m) if m.contains("uniqueItems")), "{e}");
        // oneOf whose branches may overlap (disjoint ones compile: they are anyOf)
        let e = schema(json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}));
        assert!(e.to_string().contains("oneOf"), "{e}");
        c.compile(&Constraint::JsonSchema(json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}))).unwrap();
        for (s, names) in [
            (json!({"type": "string", "format": "no-such-format"}), "no-such-format"),
            (json!({"type": "object", "properties": {"a": {"$ref": "http://example.com/x"}}}), "http://example.com/x"),
            (json!({"$ref": "#/$defs/missing"}), "/$defs/missing"),
            (json!({"type": "array", "contains": {"type": "integer"}}), "contains"),
            (json!({"not": {"type": "integer"}}), "not"),
            (json!({"if": {"type": "integer"}, "then": {"minimum": 1}}), "if"),
            (json!({"type": "object", "propertyNames": {"pattern": "^a"}}), "propertyNames"),
            (json!({"type": "string", "pattern": "(?=a)b"}), "look-around"),
            (json!({"type": "integer", "minimum": 5, "maximum": 1}), "minimum"),
        ] {
            let e = schema(s.clone());
            assert!(matches!(&e, GrammarError::Schema(m) if m.contains(names)), "{s}: {e}");
        }
        assert!(matches!(schema(json!(false)), GrammarError::Schema(_)));
        assert!(matches!(schema(json!(3)), GrammarError::Schema(_)));
        assert!(matches!(schema(json!({"type": "nonsense"})), GrammarError::Schema(_)));
        // a client cannot switch lenient mode on through x-guidance
        let e = schema(json!({"type": "array", "uniqueItems": true, "x-guidance": {"lenient": true}}));
        assert!(e.to_string().contains("uniqueItems"), "{e}");

        let tools = |t: Vec<ToolSpec>| c.compile(&Constraint::ToolCall(t)).unwrap_err();
        assert!(matches!(tools(vec![]), GrammarError::Tools(_)));
        let t = ToolSpec { name: "a".into(), parameters: json!({}) };
        assert!(matches!(tools(vec![t.clone(), t.clone()]), GrammarError::Tools(_)));
        let bad = ToolSpec { name: "b".into(), parameters: json!({"type": "string"}) };
        assert!(matches!(tools(vec![bad]), GrammarError::Tools(_)));
        let bad = ToolSpec { name: "b".into(), parameters: json!({"type": "object", "not": {}}) };
        let e = tools(vec![t, bad]);
        assert!(e.to_string().contains("not"), "{e}");
    }

    #[test]
    fn compiler_and_matcher_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<GrammarCompiler>();
        send::<GrammarMatcher>();
    }

    #[test]
    fn mask_words_cover_partial_and_extra_ids() {
        let mut logits = vec![1.0; 70];
        apply_mask(&[u32::MAX, 0b101, 0xFFFF_FFFF], 66, &mut logits);
        assert!(logits[..32].iter().all(|l| *l == 1.0));
        let finite: Vec<usize> = (32..70).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(finite, vec![32, 34, 64, 65]);
    }
}
