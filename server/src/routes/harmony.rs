//! OpenAI's harmony reply format (gpt-oss): a reply is a run of messages, each a header (an
//! optional recipient `to=functions.NAME`, `<|channel|>` and the channel, an optional content type)
//! then `<|message|>` and the body, ended by `<|end|>` (another message follows after
//! `<|start|>assistant`), `<|call|>` or `<|return|>`. The `analysis` channel is the reasoning; a
//! message to `functions.NAME` is a tool call whose body is the arguments; `final` and
//! `commentary` without a recipient are content. Messages to any other recipient (the built-in
//! browser and python tools, or a function the request does not offer) are not part of the reply,
//! as llama-server consumes them. A reply that does not open with a header is plain content.
//! [`HarmonySplit`] reads the reply as it decodes; the whole reply is read by the same machine, so
//! a stream's deltas add up to the reply read whole.

use serde_json::Value;

use super::chat_request::ToolChoice;
use super::reasoning::{partial_suffix, Split};

/// The generation prompt of a harmony template: the reply opens with a message header.
const GENERATION_PROMPT: &str = "<|start|>assistant";
const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const START: &str = "<|start|>";
/// How the reply's first header may begin (the prompt ended with the role).
const HEADER_OPENERS: [&str; 3] = [CHANNEL, "to=", "<|constrain|>"];
/// What ends a message body (`<|call|>` and `<|return|>` end generation too, so they are rarely
/// seen in the text; `<|start|>` tolerates a missing `<|end|>`).
const BODY_ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", START];
/// The analysis message's header as `reasoning_format: "none"` keeps it in the content.
const INLINE_ANALYSIS: &str = "<|channel|>analysis<|message|>";
const INLINE_END: &str = "<|end|>";

/// Whether the rendered prompt asks for a harmony reply.
pub fn prompt_opens_harmony(prompt: &str) -> bool {
    prompt.ends_with(GENERATION_PROMPT)
}

/// What a message's body is, from its header.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// A call of the named function the request offers: its body is the arguments.
    Call(String),
    /// To a recipient the reply does not answer for.
    Dropped,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// The reply's first header, which may still turn out to be plain text.
    FirstHeader,
    /// A header after `<|start|>`.
    Header,
    Body(Body),
    /// After a message's end: the next `<|start|>` (anything else is content).
    Between,
    /// A reply without harmony structure: all content.
    Plain,
}

/// A tool call read from a harmony reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarmonyCall {
    pub name: String,
    /// The arguments as compact JSON text.
    pub arguments: String,
}

/// The reader of one harmony reply, fed its decoded pieces in order.
pub struct HarmonySplit {
    phase: Phase,
    /// Text not yet given out: a header, a call's body, or a possible partial end marker.
    held: String,
    tools: ToolChoice,
    /// Keep the analysis in the content (`reasoning_format: "none"`).
    inline: bool,
    had_reasoning: bool,
    calls: Vec<HarmonyCall>,
}

impl HarmonySplit {
    pub fn new(tools: &ToolChoice, inline: bool) -> Self {
        HarmonySplit {
            phase: Phase::FirstHeader,
            held: String::new(),
            tools: tools.clone(),
            inline,
            had_reasoning: false,
            calls: Vec::new(),
        }
    }

    /// Whether the next token belongs to the reasoning.
    pub fn thinking(&self) -> bool {
        self.phase == Phase::Body(Body::Reasoning)
    }

    /// Whether the reply has had an analysis message.
    pub fn had_reasoning(&self) -> bool {
        self.had_reasoning
    }

    /// Adds a decoded piece; returns what of the reply is now known to be reasoning or content.
    pub fn push(&mut self, piece: &str) -> Split {
        self.held.push_str(piece);
        let mut out = Split::default();
        while self.step(&mut out) {}
        out
    }

    /// The end of the reply: what was held back, as what it was, and the reply's tool calls.
    pub fn finish(&mut self) -> (Split, Vec<HarmonyCall>) {
        let mut out = Split::default();
        let held = std::mem::take(&mut self.held);
        match std::mem::replace(&mut self.phase, Phase::Between) {
            // a reply cut short inside a header, or ended after a message (its rest is blank or
            // the start of `<|start|>`), has nothing more to say
            Phase::Header | Phase::Between => {}
            Phase::FirstHeader if opens_header(held.trim_start()) => {}
            Phase::FirstHeader | Phase::Plain => out.content = held,
            Phase::Body(body) => self.end_body(body, &held, &mut out),
        }
        (out, std::mem::take(&mut self.calls))
    }

    /// One move of the machine over the held text; false when it needs more text.
    fn step(&mut self, out: &mut Split) -> bool {
        match self.phase.clone() {
            Phase::FirstHeader => {
                let text = self.held.trim_start();
                if !opens_header(text) && !HEADER_OPENERS.iter().any(|m| m.starts_with(text)) {
                    self.phase = Phase::Plain;
                    return true;
                }
                self.read_header(out)
            }
            Phase::Header => self.read_header(out),
            Phase::Plain => {
                out.content.push_str(&std::mem::take(&mut self.held));
                false
            }
            Phase::Between => {
                let text = self.held.trim_start();
                if let Some(rest) = text.strip_prefix(START) {
                    self.held = rest.to_string();
                    self.phase = Phase::Header;
                    return true;
                }
                if text.is_empty() || START.starts_with(text) {
                    return false;
                }
                // text after a message that opens no new one: content, until a message ends
                self.phase = Phase::Body(Body::Content);
                true
            }
            Phase::Body(body) => {
                let end = BODY_ENDS.iter().filter_map(|m| self.held.find(m).map(|at| (at, *m))).min();
                if let Some((at, marker)) = end {
                    let text = self.held[..at].to_string();
                    let after = at + if marker == START { 0 } else { marker.len() };
                    self.held.drain(..after);
                    self.end_body(body, &text, out);
                    self.phase = Phase::Between;
                    return true;
                }
                if matches!(body, Body::Reasoning | Body::Content) {
                    let keep = BODY_ENDS.iter().map(|m| partial_suffix(&self.held, m)).max().unwrap_or(0);
                    let give: String = self.held.drain(..self.held.len() - keep).collect();
                    self.emit(&body, &give, out);
                }
                false
            }
        }
    }

    /// Reads a complete header from the held text and enters its body.
    fn read_header(&mut self, out: &mut Split) -> bool {
        let Some(at) = self.held.find(MESSAGE) else { return false };
        let header = self.held[..at].to_string();
        self.held.drain(..at + MESSAGE.len());
        let body = self.classify(&header);
        if body == Body::Reasoning {
            self.had_reasoning = true;
            if self.inline {
                out.content.push_str(INLINE_ANALYSIS);
            }
        }
        self.phase = Phase::Body(body);
        true
    }

    /// What the message with `header` holds. The header's last channel counts (gpt-oss sometimes
    /// writes a stray `<|channel|>commentary to=assistant` before the real one).
    fn classify(&self, header: &str) -> Body {
        let channel = header.rsplit_once(CHANNEL).map(|(_, c)| word(c)).unwrap_or_default();
        let recipient = header.rsplit_once("to=").map(|(_, r)| word(r)).filter(|r| *r != "assistant");
        match recipient {
            Some(r) => match r.strip_prefix("functions.") {
                Some(name) if self.offers(name) => Body::Call(name.to_string()),
                _ => Body::Dropped,
            },
            None if channel == "analysis" => Body::Reasoning,
            None => Body::Content,
        }
    }

    fn offers(&self, name: &str) -> bool {
        match &self.tools {
            ToolChoice::None => false,
            ToolChoice::Named(n) => n == name,
            _ => true,
        }
    }

    /// Gives out a part of a body.
    fn emit(&self, body: &Body, text: &str, out: &mut Split) {
        match body {
            Body::Reasoning if !self.inline => out.reasoning.push_str(text),
            Body::Reasoning | Body::Content => out.content.push_str(text),
            Body::Call(_) | Body::Dropped => {}
        }
    }

    /// The last part of a message's body: a call is read whole (arguments that are not JSON are
    /// content, so that nothing the model said is lost).
    fn end_body(&mut self, body: Body, text: &str, out: &mut Split) {
        match body {
            Body::Call(name) => match serde_json::from_str::<Value>(text.trim()) {
                Ok(args) => self.calls.push(HarmonyCall { name, arguments: args.to_string() }),
                Err(_) => out.content.push_str(text),
            },
            Body::Reasoning if self.inline => out.content.push_str(&format!("{text}{INLINE_END}")),
            body => self.emit(&body, text, out),
        }
    }
}

/// Whether `text` opens with a message header.
fn opens_header(text: &str) -> bool {
    HEADER_OPENERS.iter().any(|m| text.starts_with(m))
}

/// The word a header field starts with (up to a space or the next marker).
fn word(text: &str) -> &str {
    let end = text.find(|c: char| c.is_whitespace() || c == '<').unwrap_or(text.len());
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply read piece by piece: (reasoning, content, calls).
    fn run(tools: &ToolChoice, inline: bool, pieces: &[&str]) -> (String, String, Vec<HarmonyCall>) {
        let mut h = HarmonySplit::new(tools, inline);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let out = h.push(p);
            r += &out.reasoning;
            c += &out.content;
        }
        let (out, calls) = h.finish();
        (r + &out.reasoning, c + &out.content, calls)
    }

    /// Every way of cutting `text` in two or three gives the same reading.
    fn every_cut(tools: &ToolChoice, inline: bool, text: &str) -> (String, String, Vec<HarmonyCall>) {
        let whole = run(tools, inline, &[text]);
        let cuts: Vec<usize> = (1..text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        for &a in &cuts {
            assert_eq!(run(tools, inline, &[&text[..a], &text[a..]]), whole, "cut at {a}");
            for &b in cuts.iter().filter(|&&b| b > a).step_by(7) {
                assert_eq!(run(tools, inline, &[&text[..a], &text[a..b], &text[b..]]), whole, "cuts at {a}, {b}");
            }
        }
        whole
    }

    const ANSWER: &str = "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.";

    #[test]
    fn the_analysis_channel_is_reasoning_and_the_final_channel_content() {
        let (r, c, calls) = every_cut(&ToolChoice::Auto, false, ANSWER);
        assert_eq!((r.as_str(), c.as_str(), calls.len()), ("User asks 2+2. Easy.", "2 + 2 = 4.", 0));
        // streamed, the reasoning goes out before the final header has arrived
        let mut h = HarmonySplit::new(&ToolChoice::Auto, false);
        assert_eq!(h.push("<|channel|>analysis<|message|>User"), Split { reasoning: "User".into(), content: String::new() });
        assert!(h.thinking());
        assert_eq!(h.push(" asks<|e").reasoning, " asks");
        assert_eq!(h.push("nd|>").reasoning, "");
        assert!(!h.thinking() && h.had_reasoning());
    }

    #[test]
    fn a_message_to_an_offered_function_is_a_tool_call() {
        // the recipient in the channel header, with a content type
        let text = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
        let (r, c, calls) = every_cut(&ToolChoice::Auto, false, text);
        assert_eq!((r.as_str(), c.as_str()), ("Need the weather.", ""));
        assert_eq!(calls, [HarmonyCall { name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() }]);
        // the recipient in the role header, ended by <|call|>
        let text = " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}<|call|>";
        let (_, c, calls) = every_cut(&ToolChoice::Required, false, text);
        assert_eq!((c.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()), ("", "lookup", r#"{"q":1}"#));
        // a named tool_choice offers that function alone; other recipients are not the reply's
        let (_, c, calls) = run(&ToolChoice::Named("other".into()), false, &[text]);
        assert_eq!((c.as_str(), calls.len()), ("", 0));
        let builtin = "<|channel|>analysis<|message|>Search.<|end|><|start|>assistant to=browser.search<|channel|>commentary<|message|>{\"query\": \"x\"}<|call|>";
        assert_eq!(run(&ToolChoice::Auto, false, &[builtin]), ("Search.".into(), String::new(), vec![]));
        // arguments that are not JSON are kept as content
        let broken = "<|channel|>commentary to=functions.f<|message|>{\"q\": ";
        assert_eq!(run(&ToolChoice::Auto, false, &[broken]), (String::new(), "{\"q\": ".into(), vec![]));
    }

    #[test]
    fn preambles_stray_headers_and_plain_replies_are_content() {
        let text = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=assistant<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Done.";
        assert_eq!(every_cut(&ToolChoice::Auto, false, text), ("hm".into(), "Checking.Done.".into(), vec![]));
        // a reply without a header (a model that ignores the format) is content as it decodes
        let mut h = HarmonySplit::new(&ToolChoice::Auto, false);
        assert_eq!(h.push(" t").content, "");
        assert_eq!(h.push("oday").content, " today");
        assert_eq!(every_cut(&ToolChoice::Auto, false, "Hello <|end|> there"), (String::new(), "Hello <|end|> there".into(), vec![]));
        // a reply cut inside a header says nothing more
        assert_eq!(
            run(&ToolChoice::Auto, false, &["<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan"]),
            ("a".into(), String::new(), vec![])
        );
    }

    #[test]
    fn inline_reasoning_keeps_the_analysis_message_in_the_content() {
        let (r, c, _) = every_cut(&ToolChoice::None, true, ANSWER);
        assert_eq!((r.as_str(), c.as_str()), ("", "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|>2 + 2 = 4."));
    }

    #[test]
    fn the_prompt_asks_for_harmony_when_it_ends_with_the_assistant_role() {
        assert!(prompt_opens_harmony("<|start|>user<|message|>hi<|end|><|start|>assistant"));
        assert!(!prompt_opens_harmony("<|im_start|>assistant\n"));
    }
}
