//! Custom risks: a risk of the caller's own, a new name with its definition, judged like the
//! built-in ones. Granite Guardian 3.0 and 3.2 take it as `guardian_config = {risk_name,
//! risk_definition}` (their templates accept a user-provided name with a definition), 3.3 as
//! `custom_criteria`; a generic model gets the definition as its question's criterion ("Does the
//! last user message match this description: ..."). The judged message is the assistant's reply
//! when the input has one, else the user's message.

use serde_json::{json, Map, Value};

use super::error::GuardError;
use super::family::granite_guardian::NativeRequest;
use super::risks::{GuardFormat, GuardInput, Risk};

/// The longest definition accepted (characters).
pub const MAX_DEFINITION_CHARS: usize = 4000;

/// Names the Guardian templates keep for their own risks (a custom risk may not take them).
const NATIVE_NAMES: [&str; 3] = ["jailbreak", "function_call", "relevance"];

/// A risk of the caller's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomRisk {
    pub name: String,
    pub definition: String,
}

impl CustomRisk {
    /// A name of 1 to 64 lowercase letters, digits and underscores (starting with a letter) that
    /// is no built-in risk's, and a definition of 1 to [`MAX_DEFINITION_CHARS`] characters.
    pub fn new(name: &str, definition: &str) -> Result<CustomRisk, GuardError> {
        let bad = |m: String| GuardError::CustomRisk(m);
        let well_formed = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !well_formed {
            return Err(bad(format!(
                "custom risk name `{name}`: use 1 to 64 lowercase letters, digits and underscores, starting with a letter"
            )));
        }
        if Risk::from_name(name).is_some() || NATIVE_NAMES.contains(&name) {
            return Err(bad(format!("custom risk name `{name}` is a built-in risk: its definition cannot be replaced")));
        }
        let chars = definition.trim().chars().count();
        if chars == 0 || chars > MAX_DEFINITION_CHARS {
            return Err(bad(format!("the definition of {name} must have 1 to {MAX_DEFINITION_CHARS} characters")));
        }
        Ok(CustomRisk { name: name.to_string(), definition: definition.trim().to_string() })
    }

    /// The native inputs of a Guardian model for this risk: the conversation, then the judged
    /// message, with the definition where the format takes one.
    pub fn native(&self, format: GuardFormat, input: &GuardInput, think: bool) -> NativeRequest {
        let mut messages: Vec<Value> = input.history.clone();
        messages.push(json!({"role": "user", "content": input.user}));
        if let Some(a) = input.assistant() {
            messages.push(json!({"role": "assistant", "content": a}));
        }
        let mut config = Map::new();
        let mut extra = Map::new();
        match format {
            GuardFormat::V3_0 | GuardFormat::V3_2 => {
                config.insert("risk_name".into(), self.name.clone().into());
                config.insert("risk_definition".into(), self.definition.clone().into());
            }
            GuardFormat::V3_3 => {
                config.insert("custom_criteria".into(), self.definition.clone().into());
                extra.insert("think".into(), think.into());
            }
        }
        NativeRequest { messages, guardian_config: Some(config), extra, add_generation_prompt: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_definitions_are_checked() {
        let ok = CustomRisk::new("competitor_mentions", "  The message names a competitor's product.  ").unwrap();
        assert_eq!(ok.definition, "The message names a competitor's product.");
        for (name, def, message) in [
            ("Competitor", "x", "use 1 to 64 lowercase"),
            ("1st", "x", "use 1 to 64 lowercase"),
            ("with-dash", "x", "use 1 to 64 lowercase"),
            ("harm", "x", "is a built-in risk"),
            ("jailbreak", "x", "is a built-in risk"),
            ("pii", "   ", "must have 1 to 4000 characters"),
        ] {
            let e = CustomRisk::new(name, def).unwrap_err().to_string();
            assert!(e.contains(message), "{name}: {e}");
        }
        assert!(CustomRisk::new(&"a".repeat(65), "x").is_err());
        assert!(CustomRisk::new("pii", &"x".repeat(4001)).is_err());
    }

    #[test]
    fn each_format_gets_the_definition_its_own_way() {
        let r = CustomRisk::new("pii", "The message contains a phone number.").unwrap();
        let mut input = GuardInput::new("Call me at 555-0100").with_assistant("Sure.");
        input.history = vec![json!({"role": "user", "content": "Hi"})];
        let n = r.native(GuardFormat::V3_2, &input, false);
        let roles: Vec<&str> = n.messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "user", "assistant"]);
        let config = n.guardian_config.as_ref().unwrap();
        assert_eq!(
            (config["risk_name"].as_str(), config["risk_definition"].as_str()),
            (Some("pii"), Some("The message contains a phone number."))
        );
        let n = r.native(GuardFormat::V3_3, &input, true);
        assert_eq!(n.guardian_config.as_ref().unwrap()["custom_criteria"], "The message contains a phone number.");
        assert_eq!(n.extra["think"], true);
    }
}
