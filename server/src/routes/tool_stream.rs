//! What of a streamed reply may be sent while tool calls can still follow: text goes out as it
//! decodes, except the part that could turn out to be a call (a reply opening with JSON, a
//! `<tool_call>` / `[TOOL_CALLS]` marker or the start of one) and trailing whitespace (a call
//! after it would trim it away). The concatenated deltas equal the non-streamed `content`, but
//! for whitespace that opens a reply holding a call (sent before the call could be known).

use super::reasoning::partial_suffix;

/// The markers after which a reply is a tool call (Hermes / Qwen, Mistral).
const MARKERS: [&str; 2] = ["<tool_call>", "[TOOL_CALLS]"];

#[derive(Default)]
pub struct ContentGate {
    text: String,
    /// Bytes of `text` already sent as content.
    sent: usize,
    /// A call may have begun: nothing more is sent until the reply is complete.
    held: bool,
}

impl ContentGate {
    /// Adds a decoded piece; returns the content that is now safe to send (often empty).
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        if self.held {
            return String::new();
        }
        let opening = self.text.trim_start();
        if opening.is_empty() {
            return String::new();
        }
        if opening.starts_with('{') || opening.starts_with('[') {
            // a bare JSON call (or list of calls) is possible until the reply ends
            self.held = true;
            return String::new();
        }
        let end = match MARKERS.iter().filter_map(|m| self.text.find(m)).min() {
            Some(at) => {
                self.held = true;
                self.text[..at].trim_end().len()
            }
            None => {
                let partial = MARKERS.iter().map(|m| partial_suffix(&self.text, m)).max().unwrap_or(0);
                self.text[..self.text.len() - partial].trim_end().len()
            }
        };
        if end <= self.sent {
            return String::new();
        }
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }

    /// The content still to send once the reply is complete, given its final `content` and
    /// whether it held tool calls.
    pub fn finish(&self, content: &str, has_calls: bool) -> String {
        if !has_calls {
            return self.text[self.sent..].to_string();
        }
        // the final content of a reply with calls is trimmed: whitespace that opened the reply
        // has gone out already and is the one place the stream differs from it
        let sent = &self.text[..self.sent];
        content.strip_prefix(sent).or_else(|| content.strip_prefix(sent.trim_start())).unwrap_or_default().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str]) -> (ContentGate, String) {
        let mut gate = ContentGate::default();
        let sent: String = pieces.iter().map(|p| gate.push(p)).collect();
        (gate, sent)
    }

    #[test]
    fn plain_text_streams_as_it_decodes_except_trailing_whitespace() {
        let mut gate = ContentGate::default();
        assert_eq!(gate.push("Hello"), "Hello");
        assert_eq!(gate.push(" "), "");
        assert_eq!(gate.push("world\n"), " world");
        assert_eq!(gate.finish("Hello world\n", false), "\n");
    }

    #[test]
    fn text_before_a_hermes_call_is_sent_and_the_call_is_held() {
        let (gate, sent) = run(&["Let me check.", "\n", "<tool", "_call>", "{\"name\": \"f\"}", "</tool_call>"]);
        assert_eq!(sent, "Let me check.");
        assert_eq!(gate.finish("Let me check.", true), "");
        // text after the block is content too
        let (gate, sent) = run(&["Hi <tool_call>{}</tool_call> done"]);
        assert_eq!(sent, "Hi");
        assert_eq!(gate.finish("Hi  done", true), "  done");
        // nothing after the call is lost when the reply opened with whitespace
        let (gate, sent) = run(&["  Hi <tool_call>{}</tool_call> done"]);
        assert_eq!(sent, "  Hi");
        assert_eq!(gate.finish("Hi  done", true), "  done");
    }

    #[test]
    fn a_partial_marker_is_held_until_it_proves_to_be_text() {
        let mut gate = ContentGate::default();
        assert_eq!(gate.push("a <tool"), "a");
        assert_eq!(gate.push("box> b"), " <toolbox> b");
        assert_eq!(gate.push(" [TOOL_"), "");
        assert_eq!(gate.finish("", false), " [TOOL_");
    }

    #[test]
    fn a_reply_opening_with_json_is_held_whole() {
        let (gate, sent) = run(&["  {\"name\"", ": \"f\", \"arguments\": {}}"]);
        assert_eq!(sent, "");
        assert_eq!(gate.finish("", true), "");
        // JSON that is not a call is sent whole at the end
        let (gate, sent) = run(&["[1, 2]"]);
        assert_eq!(sent, "");
        assert_eq!(gate.finish("[1, 2]", false), "[1, 2]");
    }
}
