//! Thinking blocks: the `<think>...</think>` a reasoning model writes before its answer, split
//! from the reply's content as it decodes. The block is opened either by the chat template (the
//! rendered prompt ends with `<think>`, as Qwen3's and DeepSeek-R1's do) or by the reply itself
//! (its first non-blank text is `<think>`); a reply that never closes it is all reasoning.
//! Whitespace that opens the reasoning, or the content after the block, is dropped, as the
//! reasoning parsers of llama-server and vLLM drop it. A reply that continues an assistant's text
//! (a prefill) starts where that text left off, inside its block or after it, and keeps every
//! character.

use engine::tokenizer::{TokenId, Tokenizer};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Whether the rendered prompt leaves a thinking block open for the reply.
pub fn prompt_opens_thinking(prompt: &str) -> bool {
    prompt.trim_end().ends_with(OPEN)
}

/// Where a reply starts, as far as thinking blocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThinkStart {
    /// Outside any block: the reply may open one with its first non-blank text.
    Fresh,
    /// Inside the block the template's generation prompt opened.
    PromptOpened,
    /// Inside the block of the assistant's text it continues.
    ContinuesReasoning,
    /// After (or without) any block of the assistant's text it continues: all content.
    ContinuesContent,
}

impl ThinkStart {
    /// Where the reply to the rendered `prompt` starts.
    pub fn of_prompt(prompt: &str) -> ThinkStart {
        if prompt_opens_thinking(prompt) {
            ThinkStart::PromptOpened
        } else {
            ThinkStart::Fresh
        }
    }

    /// Where a reply continuing `continued` starts, the assistant's text that follows `head` in
    /// the prompt: inside a block when its last tag opens one (or it has none and `head` left one
    /// open).
    pub fn of_continued(head: &str, continued: &str) -> ThinkStart {
        let open = match (continued.rfind(OPEN), continued.rfind(CLOSE)) {
            (Some(o), Some(c)) => o > c,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => prompt_opens_thinking(head),
        };
        if open {
            ThinkStart::ContinuesReasoning
        } else {
            ThinkStart::ContinuesContent
        }
    }

    /// Whether the reply starts inside a block.
    fn thinking(self) -> bool {
        matches!(self, ThinkStart::PromptOpened | ThinkStart::ContinuesReasoning)
    }
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
    pub fn new(start: ThinkStart) -> Self {
        let phase = match start {
            ThinkStart::Fresh => Phase::Opening,
            ThinkStart::PromptOpened | ThinkStart::ContinuesReasoning => Phase::Thinking,
            ThinkStart::ContinuesContent => Phase::Content,
        };
        // a continuation's first characters go on from the text before them
        let trim = matches!(start, ThinkStart::Fresh | ThinkStart::PromptOpened);
        ThinkSplit { phase, held: String::new(), trim, had_block: start.thinking() }
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
pub fn split(text: &str, start: ThinkStart) -> (Option<String>, String) {
    let mut s = ThinkSplit::new(start);
    let (a, b) = (s.push(text), s.finish());
    (s.had_block.then(|| a.reasoning + &b.reasoning), a.content + &b.content)
}

/// How many of the reply's `tokens` were spent inside its thinking block.
pub fn reasoning_tokens(tokenizer: &Tokenizer, tokens: &[TokenId], start: ThinkStart) -> usize {
    let mut s = ThinkSplit::new(start);
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

    fn run(start: ThinkStart, pieces: &[&str]) -> (String, String) {
        let mut s = ThinkSplit::new(start);
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
        assert_eq!(run(ThinkStart::Fresh, &pieces), ("Two plus two is four.\n".into(), "4".into()));
        // every way of cutting the text gives the same split
        let text: String = pieces.concat();
        for cut in 1..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(run(ThinkStart::Fresh, &[a, b]), ("Two plus two is four.\n".into(), "4".into()), "cut at {cut}");
        }
    }

    #[test]
    fn a_block_the_prompt_opened_needs_no_opening_tag() {
        assert_eq!(run(ThinkStart::PromptOpened, &["Let me see", "</think>", "Yes."]), ("Let me see".into(), "Yes.".into()));
        // never closed: all reasoning, a trailing partial tag included
        assert_eq!(run(ThinkStart::PromptOpened, &["still going </thi"]), ("still going </thi".into(), String::new()));
    }

    #[test]
    fn a_reply_without_a_block_is_content_as_it_decodes() {
        let mut s = ThinkSplit::new(ThinkStart::Fresh);
        assert_eq!(s.push("  "), Split::default());
        assert_eq!(s.push("<"), Split::default());
        assert_eq!(s.push("b>bold"), Split { reasoning: String::new(), content: "  <b>bold".into() });
        assert_eq!(s.push(" <think> later"), Split { reasoning: String::new(), content: " <think> later".into() });
        assert_eq!(split("plain", ThinkStart::Fresh), (None, "plain".into()));
        assert_eq!(split("<think>a</think>b", ThinkStart::Fresh), (Some("a".into()), "b".into()));
        assert_eq!(split("<think></think>b", ThinkStart::Fresh), (Some(String::new()), "b".into()));
    }

    #[test]
    fn the_prompt_opens_a_block_when_it_ends_with_the_tag() {
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n"));
    }

    #[test]
    fn a_continuation_goes_on_inside_or_after_the_block_its_text_left_keeping_every_character() {
        let head = "<|im_start|>assistant\n";
        assert_eq!(ThinkStart::of_continued(head, "<think>\nLet me"), ThinkStart::ContinuesReasoning);
        assert_eq!(ThinkStart::of_continued(head, "<think>a</think>\nThe answer"), ThinkStart::ContinuesContent);
        assert_eq!(ThinkStart::of_continued(head, "<think>a</think>b<think>c"), ThinkStart::ContinuesReasoning);
        assert_eq!(ThinkStart::of_continued(head, "Sure"), ThinkStart::ContinuesContent);
        // the template opened the block and the text has not closed it
        assert_eq!(ThinkStart::of_continued("assistant\n<think>\n", "Let me"), ThinkStart::ContinuesReasoning);
        assert_eq!(ThinkStart::of_continued("assistant\n<think>\n", "x</think>y"), ThinkStart::ContinuesContent);
        // leading spaces stay: they join the text before them
        assert_eq!(run(ThinkStart::ContinuesReasoning, &[" see", "</think>", "\n\nYes."]), (" see".into(), "Yes.".into()));
        assert_eq!(run(ThinkStart::ContinuesContent, &[" blue", " <think>x</think>"]), (String::new(), " blue <think>x</think>".into()));
        assert_eq!(split(" more", ThinkStart::ContinuesReasoning), (Some(" more".into()), String::new()));
        assert_eq!(split(" more", ThinkStart::ContinuesContent), (None, " more".into()));
    }
}
