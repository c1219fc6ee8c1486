//! Thinking blocks: the `<think>...</think>` a reasoning model writes before its answer, split
//! from the reply's content as it decodes. The block is opened either by the chat template (the
//! rendered prompt ends with `<think>`, as Qwen3's and DeepSeek-R1's do) or by the reply itself
//! (its first non-blank text is `<think>`); a reply that never closes it is all reasoning.
//! Whitespace that opens the reasoning, or the content after the block, is dropped, as the
//! reasoning parsers of llama-server and vLLM drop it.

use engine::tokenizer::{TokenId, Tokenizer};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Whether the rendered prompt leaves a thinking block open for the reply.
pub fn prompt_opens_thinking(prompt: &str) -> bool {
    prompt.trim_end().ends_with(OPEN)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing but whitespace yet: the reply may still open a block.
    Opening,
    Thinking,
    Content,
}

/// What a piece of the reply turned out to be.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

/// The splitter of one reply, fed its decoded pieces in order.
pub struct ThinkSplit {
    phase: Phase,
    /// Text not yet given out: a possible partial `<think>` or `</think>`.
    held: String,
    /// Leading whitespace of the current part is still to be dropped.
    trim: bool,
    /// The reply has (or had) a thinking block.
    had_block: bool,
}

impl ThinkSplit {
    /// `opened`: the prompt opened the block ([`prompt_opens_thinking`]).
    pub fn new(opened: bool) -> Self {
        ThinkSplit { phase: if opened { Phase::Thinking } else { Phase::Opening }, held: String::new(), trim: true, had_block: opened }
    }

    /// Whether the reply is inside its thinking block (the next token counts as reasoning).
    pub fn thinking(&self) -> bool {
        self.phase == Phase::Thinking
    }

    /// Adds a decoded piece; returns what of the reply is now known to be reasoning or content.
    pub fn push(&mut self, piece: &str) -> Split {
        self.held.push_str(piece);
        let mut out = Split::default();
        loop {
            match self.phase {
                Phase::Opening => {
                    let text = self.held.trim_start();
                    if text.is_empty() || (OPEN.starts_with(text) && text.len() < OPEN.len()) {
                        return out;
                    }
                    if let Some(rest) = text.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.phase = Phase::Thinking;
                        self.had_block = true;
                    } else {
                        self.phase = Phase::Content;
                        self.trim = false;
                    }
                }
                Phase::Thinking => {
                    if self.trim {
                        self.held = self.held.trim_start().to_string();
                        self.trim = self.held.is_empty();
                    }
                    if let Some(at) = self.held.find(CLOSE) {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held = self.held[at + CLOSE.len()..].to_string();
                        self.phase = Phase::Content;
                        self.trim = true;
                        continue;
                    }
                    let keep = partial_suffix(&self.held, CLOSE);
                    let give = self.held.len() - keep;
                    out.reasoning.push_str(&self.held[..give]);
                    self.held.drain(..give);
                    return out;
                }
                Phase::Content => {
                    let text = std::mem::take(&mut self.held);
                    let text = if self.trim { text.trim_start() } else { text.as_str() };
                    if !text.is_empty() {
                        self.trim = false;
                    }
                    out.content.push_str(text);
                    return out;
                }
            }
        }
    }

    /// The end of the reply: what was held back, as what it was.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Thinking => Split { reasoning: held, content: String::new() },
            // a reply of whitespace alone (or a bare `<thi`) is content
            Phase::Opening | Phase::Content => Split { reasoning: String::new(), content: held },
        }
    }
}

/// A whole reply split: its reasoning (`None` when it had no thinking block) and its content.
pub fn split(text: &str, opened: bool) -> (Option<String>, String) {
    let mut s = ThinkSplit::new(opened);
    let (a, b) = (s.push(text), s.finish());
    (s.had_block.then(|| a.reasoning + &b.reasoning), a.content + &b.content)
}

/// How many of the reply's `tokens` were spent inside its thinking block.
pub fn reasoning_tokens(tokenizer: &Tokenizer, tokens: &[TokenId], opened: bool) -> usize {
    let mut s = ThinkSplit::new(opened);
    let mut n = 0;
    for &t in tokens {
        // the tags are ASCII: a multi-byte character cut across tokens cannot hide one
        let piece = String::from_utf8_lossy(tokenizer.token_bytes(t)).into_owned();
        let before = s.thinking();
        s.push(&piece);
        if before || s.thinking() {
            n += 1;
        }
    }
    n
}

/// The length of the longest proper prefix of `tag` that `text` ends with (0 if none): text a
/// streamed reply holds back because the next piece may complete the tag.
pub(super) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len()).rev().find(|&k| text.ends_with(&tag[..k])).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(opened: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ThinkSplit::new(opened);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let out = s.push(p);
            r += &out.reasoning;
            c += &out.content;
        }
        let out = s.finish();
        (r + &out.reasoning, c + &out.content)
    }

    #[test]
    fn a_block_the_reply_opens_is_reasoning_and_the_rest_content() {
        let pieces = ["<th", "ink>\n", "Two plus", " two is four.", "\n</", "think", ">\n\n", "4"];
        assert_eq!(run(false, &pieces), ("Two plus two is four.\n".into(), "4".into()));
        // every way of cutting the text gives the same split
        let text: String = pieces.concat();
        for cut in 1..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(run(false, &[a, b]), ("Two plus two is four.\n".into(), "4".into()), "cut at {cut}");
        }
    }

    #[test]
    fn a_block_the_prompt_opened_needs_no_opening_tag() {
        assert_eq!(run(true, &["Let me see", "</think>", "Yes."]), ("Let me see".into(), "Yes.".into()));
        // never closed: all reasoning, a trailing partial tag included
        assert_eq!(run(true, &["still going </thi"]), ("still going </thi".into(), String::new()));
    }

    #[test]
    fn a_reply_without_a_block_is_content_as_it_decodes() {
        let mut s = ThinkSplit::new(false);
        assert_eq!(s.push("  "), Split::default());
        assert_eq!(s.push("<"), Split::default());
        assert_eq!(s.push("b>bold"), Split { reasoning: String::new(), content: "  <b>bold".into() });
        assert_eq!(s.push(" <think> later"), Split { reasoning: String::new(), content: " <think> later".into() });
        assert_eq!(split("plain", false), (None, "plain".into()));
        assert_eq!(split("<think>a</think>b", false), (Some("a".into()), "b".into()));
        assert_eq!(split("<think></think>b", false), (Some(String::new()), "b".into()));
    }

    #[test]
    fn the_prompt_opens_a_block_when_it_ends_with_the_tag() {
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n"));
    }
}
