//! How a chat reply is read, whole or as it decodes, by every route that answers one (chat
//! completions, Messages, Responses): its thinking block apart (unless `reasoning_format: "none"`
//! keeps it inline), then its tool calls out of the rest. Streamed, [`ReplyReader`] gives each
//! piece's reasoning and the content that is safe to send (`tool_stream::ContentGate`), and at the
//! end what is left with the calls parsed from the whole text, so that the deltas add up to the
//! reply read whole.

use engine::tokenizer::{TokenId, Tokenizer};

use super::chat_request::{split_tool_calls, Call, ChatRequest, ToolChoice};
use super::reasoning::{self, Split, ThinkSplit};
use super::tool_stream::ContentGate;

/// A reply kept whole (`reasoning_format: "none"`): a thinking block the prompt opened is opened
/// in the content too, so that the content reads as the model's whole turn.
fn inline_thinking(text: &str, opens_thinking: bool) -> String {
    if opens_thinking {
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
pub(crate) fn read(request: &ChatRequest, text: &str, opens_thinking: bool) -> ReadReply {
    let (reasoning, rest) = match request.inline_reasoning {
        true => (None, inline_thinking(text, opens_thinking)),
        false => reasoning::split(text, opens_thinking),
    };
    let (content, calls) = split_tool_calls(&rest, &request.tool_choice);
    ReadReply { reasoning, content, calls }
}

/// The tokens a read reply spent in its thinking block.
pub(crate) fn reasoning_tokens(read: &ReadReply, tokenizer: &Tokenizer, tokens: &[TokenId], opens_thinking: bool) -> usize {
    if read.reasoning.is_some() {
        reasoning::reasoning_tokens(tokenizer, tokens, opens_thinking)
    } else {
        0
    }
}

/// One streamed reply being read.
pub(crate) struct ReplyReader {
    /// Splits a thinking block from the content (none when it is kept inline).
    think: Option<ThinkSplit>,
    /// Holds back text that may turn out to be a tool call (none when tools are off).
    gate: Option<ContentGate>,
    /// Text that opens the reply before its first token (an inline thinking block's tag).
    prefix: String,
    opens_thinking: bool,
    /// Tokens spent in the thinking block so far.
    pub reasoning_tokens: usize,
}

impl ReplyReader {
    pub fn new(request: &ChatRequest, opens_thinking: bool) -> ReplyReader {
        ReplyReader {
            think: (!request.inline_reasoning).then(|| ThinkSplit::new(opens_thinking)),
            gate: (request.tool_choice != ToolChoice::None).then(ContentGate::default),
            prefix: inline_thinking("", opens_thinking && request.inline_reasoning),
            opens_thinking,
            reasoning_tokens: 0,
        }
    }

    /// One token's decoded text: its reasoning, and the content now safe to send.
    pub fn push(&mut self, piece: &str) -> Split {
        let piece = std::mem::take(&mut self.prefix) + piece;
        let split = match self.think.as_mut() {
            Some(think) => {
                let before = think.thinking();
                let split = think.push(&piece);
                self.reasoning_tokens += usize::from(before || think.thinking());
                split
            }
            None => Split { reasoning: String::new(), content: piece },
        };
        let content = match self.gate.as_mut() {
            Some(gate) => gate.push(&split.content),
            None => split.content,
        };
        Split { reasoning: split.reasoning, content }
    }

    /// The end of the reply, whose whole text is `text`: the reasoning and content still to send,
    /// and the reply's tool calls.
    pub fn finish(&mut self, request: &ChatRequest, text: &str) -> (Split, Vec<Call>) {
        let tail = self.think.as_mut().map(ThinkSplit::finish).unwrap_or_default();
        let ReadReply { content, calls, .. } = read(request, text, self.opens_thinking);
        let rest = match self.gate.as_mut() {
            Some(gate) => gate.push(&tail.content) + &gate.finish(&content, !calls.is_empty()),
            None => tail.content,
        };
        (Split { reasoning: tail.reasoning, content: rest }, calls)
    }
}
