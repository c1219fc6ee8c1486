//! How a chat reply is read, whole or as it decodes, by every route that answers one (chat
//! completions, Messages, Responses), in the syntax its prompt asked for ([`ReplySyntax`]): text
//! with its thinking block apart (unless `reasoning_format: "none"` keeps it inline), then its
//! tool calls out of the rest; or harmony messages (`harmony`). Streamed, [`ReplyReader`] gives
//! each piece's reasoning and the content that is safe to send (`tool_stream::ContentGate`), and
//! at the end what is left with the calls parsed from the whole text, so that the deltas add up
//! to the reply read whole.

use engine::tokenizer::{TokenId, Tokenizer};

use super::chat_request::{split_tool_calls, Call, ChatPrompt, ChatRequest, ToolChoice};
use super::harmony::{prompt_opens_harmony, HarmonyCall, HarmonySplit};
use super::reasoning::{self, Split, ThinkSplit, ThinkStart};
use super::tool_stream::ContentGate;

/// The syntax of a reply, from the prompt that asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplySyntax {
    /// Text: a `<think>` block (which the prompt may have opened: `thinking`), then the content
    /// with tool calls in the model family's syntax.
    Text { thinking: ThinkStart },
    /// OpenAI's harmony messages (gpt-oss).
    Harmony,
}

impl ReplySyntax {
    /// The syntax of the reply to the rendered `prompt`; `constrained`: a grammar decides the
    /// reply from its first token (then it is plain text, or goes on from the text it continues).
    pub fn of_prompt(prompt: &ChatPrompt, constrained: bool) -> ReplySyntax {
        let (head, continued) = prompt.parts();
        let thinking = match continued {
            Some(continued) => ThinkStart::of_continued(head, continued),
            None if constrained => ThinkStart::Fresh,
            None if prompt_opens_harmony(head) => return ReplySyntax::Harmony,
            None => ThinkStart::of_prompt(head),
        };
        ReplySyntax::Text { thinking }
    }
}

/// Harmony's calls with the ids the answer gives them.
fn harmony_calls(calls: Vec<HarmonyCall>) -> Vec<Call> {
    calls.into_iter().map(|c| Call::new(c.name, c.arguments)).collect()
}

/// A reply kept whole (`reasoning_format: "none"`): a thinking block the template's generation
/// prompt opened is opened in the content too, so that the content reads as the model's whole
/// turn (a continuation goes on from the text it continues, which has its own tags).
fn inline_thinking(text: &str, thinking: ThinkStart) -> String {
    if thinking == ThinkStart::PromptOpened {
        format!("<think>{text}")
    } else {
        text.to_string()
    }
}

/// A whole reply read: its thinking block (`None` when it had none or it is kept inline), the
/// rest's text outside tool calls, and the calls.
pub(crate) struct ReadReply {
    pub reasoning: Option<String>,
    pub content: String,
    pub calls: Vec<Call>,
}

/// Reads the whole reply `text` of `request`.
pub(crate) fn read(request: &ChatRequest, text: &str, syntax: ReplySyntax) -> ReadReply {
    let thinking = match syntax {
        ReplySyntax::Harmony => {
            let mut h = HarmonySplit::new(&request.tool_choice, request.inline_reasoning);
            let head = h.push(text);
            let (tail, calls) = h.finish();
            let reasoning = h.had_reasoning().then(|| head.reasoning + &tail.reasoning).filter(|_| !request.inline_reasoning);
            return ReadReply { reasoning, content: head.content + &tail.content, calls: harmony_calls(calls) };
        }
        ReplySyntax::Text { thinking } => thinking,
    };
    let (reasoning, rest) = match request.inline_reasoning {
        true => (None, inline_thinking(text, thinking)),
        false => reasoning::split(text, thinking),
    };
    let (content, calls) = split_tool_calls(&rest, &request.tool_choice);
    ReadReply { reasoning, content, calls }
}

/// The tokens a read reply spent in its thinking block.
pub(crate) fn reasoning_tokens(read: &ReadReply, tokenizer: &Tokenizer, tokens: &[TokenId], syntax: ReplySyntax) -> usize {
    match (read.reasoning.is_some(), syntax) {
        (false, _) => 0,
        (true, ReplySyntax::Text { thinking }) => reasoning::reasoning_tokens(tokenizer, tokens, thinking),
        (true, ReplySyntax::Harmony) => {
            let mut h = HarmonySplit::new(&ToolChoice::None, false);
            tokens
                .iter()
                .filter(|&&t| {
                    let before = h.thinking();
                    h.push(&String::from_utf8_lossy(tokenizer.token_bytes(t)));
                    before || h.thinking()
                })
                .count()
        }
    }
}

/// One streamed reply being read.
pub(crate) struct ReplyReader {
    syntax: Syntax,
    /// Tokens spent in the thinking block so far.
    pub reasoning_tokens: usize,
}

/// A streamed reply's reader in its syntax.
enum Syntax {
    Text(TextReader),
    Harmony(HarmonySplit),
}

struct TextReader {
    /// Splits a thinking block from the content (none when it is kept inline).
    think: Option<ThinkSplit>,
    /// Holds back text that may turn out to be a tool call (none when tools are off).
    gate: Option<ContentGate>,
    /// Text that opens the reply before its first token (an inline thinking block's tag).
    prefix: String,
    thinking: ThinkStart,
}

impl ReplyReader {
    pub fn new(request: &ChatRequest, syntax: ReplySyntax) -> ReplyReader {
        let syntax = match syntax {
            ReplySyntax::Harmony => Syntax::Harmony(HarmonySplit::new(&request.tool_choice, request.inline_reasoning)),
            ReplySyntax::Text { thinking } => Syntax::Text(TextReader {
                think: (!request.inline_reasoning).then(|| ThinkSplit::new(thinking)),
                gate: (request.tool_choice != ToolChoice::None).then(ContentGate::default),
                prefix: if request.inline_reasoning { inline_thinking("", thinking) } else { String::new() },
                thinking,
            }),
        };
        ReplyReader { syntax, reasoning_tokens: 0 }
    }

    /// One token's decoded text: its reasoning, and the content now safe to send.
    pub fn push(&mut self, piece: &str) -> Split {
        match &mut self.syntax {
            Syntax::Harmony(h) => {
                let before = h.thinking();
                let split = h.push(piece);
                self.reasoning_tokens += usize::from(before || h.thinking());
                split
            }
            Syntax::Text(r) => {
                let piece = std::mem::take(&mut r.prefix) + piece;
                let split = match r.think.as_mut() {
                    Some(think) => {
                        let before = think.thinking();
                        let split = think.push(&piece);
                        self.reasoning_tokens += usize::from(before || think.thinking());
                        split
                    }
                    None => Split { reasoning: String::new(), content: piece },
                };
                let content = match r.gate.as_mut() {
                    Some(gate) => gate.push(&split.content),
                    None => split.content,
                };
                Split { reasoning: split.reasoning, content }
            }
        }
    }

    /// The end of the reply, whose whole text is `text`: the reasoning and content still to send,
    /// and the reply's tool calls.
    pub fn finish(&mut self, request: &ChatRequest, text: &str) -> (Split, Vec<Call>) {
        let r = match &mut self.syntax {
            Syntax::Harmony(h) => {
                let (tail, calls) = h.finish();
                return (tail, harmony_calls(calls));
            }
            Syntax::Text(r) => r,
        };
        let tail = r.think.as_mut().map(ThinkSplit::finish).unwrap_or_default();
        let ReadReply { content, calls, .. } = read(request, text, ReplySyntax::Text { thinking: r.thinking });
        let rest = match r.gate.as_mut() {
            Some(gate) => gate.push(&tail.content) + &gate.finish(&content, !calls.is_empty()),
            None => tail.content,
        };
        (Split { reasoning: tail.reasoning, content: rest }, calls)
    }
}
