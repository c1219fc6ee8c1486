//! Conversation input (`input.messages`): an OpenAI chat message list becomes the guard's input.
//! The judged turn is the last user message, or, when the conversation ends after it (an
//! assistant reply, tool calls, tool results), the assistant's turn: everything after the last
//! user message, its tool calls and their results included. The turns before the last user
//! message are the conversation the Guardian template receives (`GuardInput::history`).
//!
//! The Guardian templates know only `user` and `assistant` turns of text, so tool calls are
//! written into their assistant message (`Tool call: name({...})`) and a tool result into the
//! assistant turn that asked for it (`Tool result: ...`). System and developer messages are
//! instructions to the assistant, not part of what is judged, and are left out (a 3.2 template
//! would read a leading system message as a risk name).

use serde_json::{json, Value};

use super::error::GuardError;
use super::risks::GuardInput;

/// The guard input of a conversation (see the module documentation).
pub fn from_messages(messages: &[Value]) -> Result<GuardInput, GuardError> {
    let mut turns: Vec<(Role, String)> = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let bad = |what: &str| GuardError::Messages(format!("input.messages[{i}]{what}"));
        if !m.is_object() {
            return Err(bad(" must be a message object"));
        }
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| bad(".role must be a string"))?;
        let content = content(m.get("content")).map_err(|e| bad(&format!(".content {e}")))?;
        match role {
            "system" | "developer" => {}
            "user" => turns.push((Role::User, content.ok_or_else(|| bad(".content is required"))?)),
            "assistant" => {
                let mut text = content.unwrap_or_default();
                for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let f = call.get("function").ok_or_else(|| bad(".tool_calls: each tool call needs a function"))?;
                    let name = f.get("name").and_then(Value::as_str).ok_or_else(|| bad(".tool_calls: each function needs a name"))?;
                    let args = match f.get("arguments") {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => "{}".into(),
                        Some(other) => other.to_string(),
                    };
                    push_line(&mut text, &format!("Tool call: {name}({args})"));
                }
                if text.is_empty() {
                    return Err(bad(" has neither content nor tool_calls"));
                }
                turns.push((Role::Assistant, text));
            }
            "tool" | "function" => {
                let result = content.ok_or_else(|| bad(".content is required"))?;
                match turns.last_mut() {
                    Some((Role::Assistant, text)) => push_line(text, &format!("Tool result: {result}")),
                    _ => return Err(bad(": a tool result must follow the assistant message that called the tool")),
                }
            }
            other => return Err(bad(&format!(".role `{other}` is not one of system, developer, user, assistant, tool"))),
        }
    }
    let last_user = turns
        .iter()
        .rposition(|(r, _)| *r == Role::User)
        .ok_or_else(|| GuardError::Messages("input.messages must contain a user message".into()))?;
    // the assistant's turn: every assistant message after the last user message
    let replies: Vec<&str> = turns[last_user + 1..].iter().map(|(_, t)| t.as_str()).collect();
    let mut input = GuardInput::new(turns[last_user].1.clone());
    if !replies.is_empty() {
        input.assistant = Some(replies.join("\n"));
    }
    input.history = turns[..last_user].iter().map(|(r, t)| json!({"role": r.name(), "content": t})).collect();
    Ok(input)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A message's text: a string, or the text parts of a content array joined by newlines; `None`
/// when absent, null or empty.
fn content(v: Option<&Value>) -> Result<Option<String>, String> {
    let text = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => texts.push(t.as_str()),
                    (Some("image_url" | "input_image" | "input_audio"), _) => {
                        return Err("has a part the guard cannot read: only text parts are judged".into())
                    }
                    _ => return Err("parts must be {\"type\": \"text\", \"text\": ...}".into()),
                }
            }
            texts.join("\n")
        }
        Some(_) => return Err("must be a string or an array of text parts".into()),
    };
    Ok((!text.trim().is_empty()).then_some(text))
}

fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(v: Value) -> Vec<Value> {
        v.as_array().unwrap().clone()
    }

    #[test]
    fn the_last_user_turn_is_judged_with_the_earlier_turns_as_history() {
        let input = from_messages(&msgs(json!([
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": [{"type": "text", "text": "How do I"}, {"type": "text", "text": "pick a lock?"}]},
        ])))
        .unwrap();
        assert_eq!(input.user, "How do I\npick a lock?");
        assert_eq!(input.assistant, None);
        assert_eq!(input.history, msgs(json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])));
    }

    #[test]
    fn an_assistant_turn_with_tool_calls_and_results_is_judged_when_last() {
        let input = from_messages(&msgs(json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C, sunny"},
            {"role": "assistant", "content": "It is 18C and sunny."},
        ])))
        .unwrap();
        assert_eq!(input.user, "Weather in Paris?");
        assert_eq!(
            input.assistant.as_deref(),
            Some("Tool call: weather({\"city\":\"Paris\"})\nTool result: 18C, sunny\nIt is 18C and sunny.")
        );
        assert!(input.history.is_empty());
    }

    #[test]
    fn bad_conversations_are_refused_naming_the_message() {
        let err = |v: Value| from_messages(&msgs(v)).unwrap_err().to_string();
        assert_eq!(err(json!([{"role": "assistant", "content": "Hi"}])), "input.messages must contain a user message");
        assert_eq!(err(json!([{"role": "user"}])), "input.messages[0].content is required");
        assert_eq!(
            err(json!([{"role": "tool", "content": "x"}, {"role": "user", "content": "a"}])),
            "input.messages[0]: a tool result must follow the assistant message that called the tool"
        );
        assert!(err(json!([{"role": "critic", "content": "x"}])).starts_with("input.messages[0].role `critic`"));
        assert!(err(json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])).contains("only text parts"));
        assert_eq!(
            err(json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}])),
            "input.messages[1] has neither content nor tool_calls"
        );
        assert_eq!(err(json!(["hi"])), "input.messages[0] must be a message object");
    }
}
