//! Reading tool calls out of a model's reply, in the formats chat templates teach: Hermes /
//! Qwen `<tool_call>{json}</tool_call>` blocks, Mistral's `[TOOL_CALLS][...]`, and a bare JSON
//! call or list of calls (Llama 3.x, and what the forced tool-call constraint produces). A
//! call is `{"name": ..., "arguments": {...}}` (`parameters` is accepted for `arguments`, and
//! arguments given as a JSON string are decoded).

use serde_json::Value;

/// One call of one tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments object.
    pub arguments: Value,
}

/// A reply split into its text and its tool calls (none when the reply is plain text).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedReply {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const MISTRAL_MARK: &str = "[TOOL_CALLS]";

/// Splits `text` into content and tool calls. Text that only looks like a call (a block that
/// does not parse, JSON without a name) stays content: nothing is lost.
pub fn parse_tool_calls(text: &str) -> ParsedReply {
    if text.contains(HERMES_OPEN) {
        if let Some(parsed) = parse_hermes(text) {
            return parsed;
        }
    }
    if let Some(at) = text.find(MISTRAL_MARK) {
        if let Some(calls) = calls_from_json(text[at + MISTRAL_MARK.len()..].trim()) {
            return ParsedReply { content: text[..at].trim().to_string(), tool_calls: calls };
        }
    }
    if let Some(calls) = calls_from_json(text.trim()) {
        return ParsedReply { content: String::new(), tool_calls: calls };
    }
    ParsedReply { content: text.to_string(), tool_calls: Vec::new() }
}

/// Every `<tool_call>` block must hold a call; the text around them is the content. An
/// unclosed last block (the reply was cut short) is read to the end.
fn parse_hermes(text: &str) -> Option<ParsedReply> {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(HERMES_OPEN) {
        content.push_str(&rest[..open]);
        let body_start = open + HERMES_OPEN.len();
        let (body, next) = match rest[body_start..].find(HERMES_CLOSE) {
            Some(close) => (&rest[body_start..body_start + close], &rest[body_start + close + HERMES_CLOSE.len()..]),
            None => (&rest[body_start..], ""),
        };
        calls.extend(calls_from_json(body.trim())?);
        rest = next;
    }
    content.push_str(rest);
    Some(ParsedReply { content: content.trim().to_string(), tool_calls: calls })
}

/// One call object, or an array of them.
fn calls_from_json(text: &str) -> Option<Vec<ToolCall>> {
    if !(text.starts_with('{') || text.starts_with('[')) {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    match value {
        Value::Array(items) if !items.is_empty() => items.into_iter().map(call_from_value).collect(),
        Value::Object(_) => Some(vec![call_from_value(value)?]),
        _ => None,
    }
}

fn call_from_value(value: Value) -> Option<ToolCall> {
    let Value::Object(mut obj) = value else { return None };
    // the OpenAI shape nests the call under "function"
    if let Some(Value::Object(f)) = obj.remove("function") {
        obj = f;
    }
    let name = obj.get("name")?.as_str()?.to_string();
    let arguments = match obj.remove("arguments").or_else(|| obj.remove("parameters")) {
        Some(Value::String(s)) => serde_json::from_str(&s).ok()?,
        Some(v @ Value::Object(_)) => v,
        None => Value::Object(Default::default()),
        Some(_) => return None,
    };
    Some(ToolCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall { name: name.into(), arguments }
    }

    #[test]
    fn hermes_blocks_with_text_around_them() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        let r = parse_tool_calls(text);
        assert_eq!(r.content, "Let me check.");
        assert_eq!(r.tool_calls, vec![call("get_weather", json!({"city": "Paris"})), call("get_time", json!({}))]);
    }

    #[test]
    fn an_unclosed_block_is_read_to_the_end() {
        let r = parse_tool_calls("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}");
        assert_eq!(r.tool_calls, vec![call("f", json!({"x": 1}))]);
    }

    #[test]
    fn a_broken_block_stays_text() {
        let text = "<tool_call>\n{\"name\": \"f\", \"argu";
        assert_eq!(parse_tool_calls(text), ParsedReply { content: text.into(), tool_calls: vec![] });
    }

    #[test]
    fn bare_json_calls_and_argument_strings() {
        let r = parse_tool_calls(r#"{"name":"get_weather","arguments":{"city":"Paris","unit":"celsius"}}"#);
        assert_eq!(r.tool_calls, vec![call("get_weather", json!({"city": "Paris", "unit": "celsius"}))]);
        // Llama 3.x says "parameters"; some models send the arguments as a JSON string
        let r = parse_tool_calls(r#" {"name": "f", "parameters": {"a": [1]}} "#);
        assert_eq!(r.tool_calls, vec![call("f", json!({"a": [1]}))]);
        let r = parse_tool_calls(r#"[{"type":"function","function":{"name":"g","arguments":"{\"b\":true}"}}]"#);
        assert_eq!(r.tool_calls, vec![call("g", json!({"b": true}))]);
    }

    #[test]
    fn mistral_marker() {
        let r = parse_tool_calls(r#"[TOOL_CALLS][{"name": "f", "arguments": {"q": "x"}}]"#);
        assert_eq!(r.tool_calls, vec![call("f", json!({"q": "x"}))]);
    }

    #[test]
    fn plain_text_and_plain_json_are_content() {
        for text in ["The weather is fine.", r#"{"city": "Paris"}"#, "[1, 2]", ""] {
            assert_eq!(parse_tool_calls(text), ParsedReply { content: text.into(), tool_calls: vec![] });
        }
    }
}
