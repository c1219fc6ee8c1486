//! Llama Guard 3 (1B, 8B) and 4 (12B, `llama4`): one prompt per input judges every category at
//! once. The prompt is the model's own chat template (the conversation as `User:` / `Agent:`
//! turns, the last one judged) or, for a Llama Guard 3 file without one, the published layout of
//! Llama-Guard-3-8B's template (a Llama Guard 4 file needs its own: its header tokens are Llama
//! 4's).
//! The answer is `safe`, or `unsafe` and a line of violated codes (`S1,S10`). The probability
//! is Meta's classifier score: P(unsafe) at the answer's first label token, normalised over
//! `safe` and `unsafe`. The model names categories but gives no probability per category, so a
//! risk's `risk_probability` is that score when the answer is safe (the chance that anything is
//! unsafe bounds each risk) or names a category of the risk, and 0 when an unsafe answer names
//! none of the risk's categories.

use serde_json::{json, Value};

use super::taxonomy::{self, CategoryAnswer, LLAMA_GUARD};
use crate::guard::risks::GuardInput;
use crate::guard::verdict::risk_probability;
use crate::guard::{GuardError, Risk, Verdict};

/// The words of the answer's label token (trimmed, lowercase): unsafe, safe.
pub const LABELS: (&str, &str) = ("unsafe", "safe");

/// Tokens an answer may take: the label, a newline, up to 14 codes and their commas, the end.
pub const MAX_TOKENS: usize = 40;

/// The conversation as the template's messages: the earlier turns, the user message, and the
/// assistant's reply when there is one (then the reply is judged). Content as text parts when
/// the template reads parts (Llama-Guard-3-1B's does, and shows a plain string as nothing).
pub fn messages(input: &GuardInput, content_parts: bool) -> Vec<Value> {
    let content = |text: &str| if content_parts { json!([{"type": "text", "text": text}]) } else { json!(text) };
    let mut out: Vec<Value> =
        input.history.iter().map(|m| json!({"role": m["role"], "content": content(m["content"].as_str().unwrap_or(""))})).collect();
    out.push(json!({"role": "user", "content": content(&input.user)}));
    if let Some(a) = input.assistant() {
        out.push(json!({"role": "assistant", "content": content(a)}));
    }
    out
}

/// Whether a chat template reads message content as typed parts.
pub fn reads_content_parts(template: &str) -> bool {
    template.contains("selectattr('type', 'equalto', 'text')")
}

/// The published prompt (the layout of Llama-Guard-3-8B's template, from `<|begin_of_text|>`):
/// the task for the role of the last turn, the 14 categories, the conversation, the
/// instructions, the assistant header. Turns must alternate from a user turn, as the template
/// demands.
pub fn render_builtin(input: &GuardInput) -> Result<String, GuardError> {
    let turns = messages(input, false);
    let mut conversation = String::new();
    for (i, m) in turns.iter().enumerate() {
        let is_user = m["role"] == "user";
        if is_user != i.is_multiple_of(2) {
            return Err(GuardError::Prompt { message: "Conversation roles must alternate user/assistant/user/assistant/...".into() });
        }
        let who = if is_user { "User" } else { "Agent" };
        conversation.push_str(&format!("{who}: {}\n\n", m["content"].as_str().unwrap_or("").trim()));
    }
    let role = if turns.len().is_multiple_of(2) { "Agent" } else { "User" };
    let categories: String = LLAMA_GUARD.iter().map(|c| format!("{}: {}.\n", c.code, c.name)).collect();
    Ok(format!(
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nTask: Check if there is unsafe content in '{role}' messages in \
         conversations according our safety policy with the below categories.\n\n<BEGIN UNSAFE CONTENT CATEGORIES>\n{categories}\
         <END UNSAFE CONTENT CATEGORIES>\n\n<BEGIN CONVERSATION>\n\n{conversation}<END CONVERSATION>\n\nProvide your safety \
         assessment for ONLY THE LAST {role} message in the above conversation:\n - First line must read 'safe' or 'unsafe'.\n - If \
         unsafe, a second line must include a comma-separated list of violated categories.<|eot_id|><|start_header_id|>assistant\
         <|end_header_id|>"
    ))
}

/// What the model answered: unsafe or not, and the codes it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub unsafe_: bool,
    pub codes: Vec<String>,
}

/// `safe`, or `unsafe` with a comma-separated code line (leading blank lines and spaces
/// allowed); anything else cannot be read (never taken as safe).
pub fn parse(output: &str) -> Option<Answer> {
    let mut lines = output.trim().lines().map(str::trim);
    match lines.next()? {
        "safe" => Some(Answer { unsafe_: false, codes: Vec::new() }),
        "unsafe" => {
            let codes = lines.next().unwrap_or("").split(',').map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect();
            Some(Answer { unsafe_: true, codes })
        }
        _ => None,
    }
}

/// The verdicts of `risks` from one answer; `label` is (P(unsafe), P(safe)) at the label
/// token when the engine saw it.
pub fn verdicts(risks: &[Risk], output: &str, label: Option<(f64, f64)>) -> Result<Vec<Verdict>, GuardError> {
    let names: Vec<&str> = risks.iter().map(|r| r.name()).collect();
    let answer = parse(output).ok_or_else(|| GuardError::Unparseable { risk: names.join(", "), output: output.into() })?;
    let score = label.and_then(|(u, s)| risk_probability(u, s));
    let reasoning = answer
        .codes
        .iter()
        .map(|code| match LLAMA_GUARD.iter().find(|c| c.code == code.as_str()) {
            Some(c) => format!("{code} ({})", c.name),
            None => code.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let confidence = match (score, answer.unsafe_) {
        (Some(p), true) => p,
        (Some(p), false) => 1.0 - p,
        (None, _) => 1.0,
    };
    let answer = CategoryAnswer { unsafe_: answer.unsafe_, codes: answer.codes, score, confidence, reasoning };
    Ok(taxonomy::verdicts(&LLAMA_GUARD, risks, &answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_with_their_codes() {
        assert_eq!(parse("\n\nsafe"), Some(Answer { unsafe_: false, codes: vec![] }));
        assert_eq!(parse("unsafe\nS1,S10"), Some(Answer { unsafe_: true, codes: vec!["S1".into(), "S10".into()] }));
        assert_eq!(parse(" unsafe \n S2 , S9 "), Some(Answer { unsafe_: true, codes: vec!["S2".into(), "S9".into()] }));
        assert_eq!(parse("I cannot say"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn a_risk_is_unsafe_when_the_answer_names_one_of_its_categories() {
        let risks = [Risk::Harm, Risk::Violence, Risk::SocialBias, Risk::SexualContent];
        let v = verdicts(&risks, "unsafe\nS9", Some((0.8, 0.2))).unwrap();
        let unsafe_: Vec<bool> = v.iter().map(|v| v.is_unsafe).collect();
        assert_eq!(unsafe_, [true, true, false, false]);
        let p: Vec<Option<f32>> = v.iter().map(|v| v.risk_probability).collect();
        assert_eq!(p, [Some(0.8), Some(0.8), Some(0.0), Some(0.0)]);
        assert_eq!(v[0].reasoning, "S9 (Indiscriminate Weapons)");
        let v = verdicts(&risks, "safe", Some((0.1, 0.9))).unwrap();
        assert!(v.iter().all(|v| !v.is_unsafe && v.risk_probability == Some(0.1) && (v.confidence - 0.9).abs() < 1e-6));
        let e = verdicts(&risks, "maybe", None).unwrap_err().to_string();
        assert!(e.contains("harm, violence, social_bias, sexual_content") && e.contains("maybe"), "{e}");
    }

    #[test]
    fn the_builtin_prompt_has_the_published_layout() {
        let p = render_builtin(&GuardInput::new(" How do I pick a lock? ")).unwrap();
        assert!(p.starts_with("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nTask: Check if there is unsafe content in 'User' messages in conversations according our safety policy with the below categories.\n\n<BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violent Crimes.\nS2: Non-Violent Crimes.\n"));
        assert!(p.contains("S14: Code Interpreter Abuse.\n<END UNSAFE CONTENT CATEGORIES>\n\n<BEGIN CONVERSATION>\n\nUser: How do I pick a lock?\n\n<END CONVERSATION>\n\nProvide your safety assessment for ONLY THE LAST User message in the above conversation:\n"));
        assert!(p.ends_with(" - If unsafe, a second line must include a comma-separated list of violated categories.<|eot_id|><|start_header_id|>assistant<|end_header_id|>"));
        let p = render_builtin(&GuardInput::new("Hi").with_assistant("Hello")).unwrap();
        assert!(
            p.contains("in 'Agent' messages")
                && p.contains("User: Hi\n\nAgent: Hello\n\n<END CONVERSATION>")
                && p.contains("ONLY THE LAST Agent message")
        );
        let mut twice = GuardInput::new("Hi");
        twice.history = vec![json!({"role": "assistant", "content": "Hello"})];
        assert!(render_builtin(&twice).unwrap_err().to_string().contains("must alternate"));
    }
}
