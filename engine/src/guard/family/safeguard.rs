//! gpt-oss-safeguard (20B, 120B on gpt-oss): the policy is the system message, the content to
//! classify the user message, through the model's own harmony template (at `reasoning_effort`
//! low); the model reasons on the analysis channel and answers on the final channel in the
//! format the policy asks for. Each risk's policy follows OpenAI's recommended layout
//! (instructions, definitions, what violates, what is safe) around the risk's definition (Granite
//! Guardian 3.2's, a custom risk's own) and asks for one character, `1` or `0`; the score is
//! P(1) over 1 and 0 at the final answer's first token, the analysis is the verdict's
//! reasoning. One prompt per risk.

use serde_json::{json, Value};

use super::written_turns;
use crate::guard::risks::{GuardFormat, GuardInput, Judged};
use crate::guard::verdict::risk_probability;
use crate::guard::{GuardError, Risk, Verdict};
use crate::tokenizer::{TokenId, Tokenizer};

/// The label words: 1 (violates), 0.
pub const LABELS: (&str, &str) = ("1", "0");

/// Where the answer starts, in the harmony text the model writes.
const FINAL: &str = "<|channel|>final<|message|>";

/// The policy of the risk `name` (a built-in or custom risk's name) with its `definition`, for
/// the judged message.
pub fn policy(name: &str, definition: &str, judged: Judged) -> String {
    let title = format!("Policy: {}", name.replace('_', " "));
    let what = match judged {
        Judged::User => "the user message",
        Judged::Assistant => "the assistant's reply",
    };
    format!(
        "# {title}\n\n## INSTRUCTIONS\n\nDecide whether {what} in the content violates this policy. Return exactly one character: 0 \
         or 1. Do not include any explanation or punctuation.\n\n## DEFINITIONS\n\n{definition}\n\n## VIOLATES (1)\n\n{what_cap} \
         matches the definition above.\n\n## SAFE (0)\n\n{what_cap} does not match it.\n\nAnswer (0 or 1):",
        what_cap = capitalised(what)
    )
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// A built-in risk's policy: its Granite Guardian 3.2 definition, for the judged side.
pub fn risk_policy(risk: Risk, judged: Judged) -> Option<String> {
    let definition = risk.definition(GuardFormat::V3_2, judged)?;
    Some(policy(risk.name(), definition, judged))
}

/// The chat messages: the policy as the system message (the harmony developer message), the
/// content as the user message (the conversation written out when a reply is judged).
pub fn messages(input: &GuardInput, policy: &str) -> Vec<Value> {
    let content = match input.assistant() {
        None if input.history.is_empty() => input.user.clone(),
        _ => written_turns(input, ("User", "Assistant")).join("\n\n"),
    };
    vec![json!({"role": "system", "content": policy}), json!({"role": "user", "content": content})]
}

/// The reply's text with control tokens spelled out, and the step of the final answer's first
/// token (after `<|channel|>final<|message|>`).
pub fn spelled(tokenizer: &Tokenizer, tokens: &[TokenId]) -> (String, Option<usize>) {
    let mut text = String::new();
    let mut answer_step = None;
    for (i, &id) in tokens.iter().enumerate() {
        if text.ends_with(FINAL) && answer_step.is_none() {
            answer_step = Some(i);
        }
        text.push_str(&String::from_utf8_lossy(tokenizer.token_to_piece(id, true)));
    }
    (text, answer_step)
}

/// The final channel's answer (to `<|return|>` or the end of the text) and the analysis.
fn channels(text: &str) -> (Option<&str>, &str) {
    let answer = text.rfind(FINAL).map(|at| {
        let rest = &text[at + FINAL.len()..];
        let end = ["<|return|>", "<|end|>", "<|call|>"].iter().filter_map(|m| rest.find(m)).min().unwrap_or(rest.len());
        rest[..end].trim()
    });
    let analysis = text
        .find("<|channel|>analysis<|message|>")
        .map(|at| {
            let rest = &text[at + "<|channel|>analysis<|message|>".len()..];
            rest[..rest.find("<|end|>").unwrap_or(rest.len())].trim()
        })
        .unwrap_or("");
    (answer, analysis)
}

/// `1` or `0`, or a JSON object with `violation` 1 or 0 (the guide's other formats).
fn violation(answer: &str) -> Option<bool> {
    match answer {
        "1" => Some(true),
        "0" => Some(false),
        _ => match serde_json::from_str::<Value>(answer).ok()?.get("violation")?.as_i64()? {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        },
    }
}

/// The verdict of one prompt from the spelled reply; `label` is (P(1), P(0)) at the answer.
pub fn verdict(risk: Risk, text: &str, label: Option<(f64, f64)>) -> Result<Verdict, GuardError> {
    let bad = || GuardError::Unparseable { risk: risk.name().into(), output: text.into() };
    let (answer, analysis) = channels(text);
    let is_unsafe = violation(answer.ok_or_else(bad)?).ok_or_else(bad)?;
    let risk_probability = label.and_then(|(y, n)| risk_probability(y, n));
    let confidence = match risk_probability {
        Some(p) if is_unsafe => p,
        Some(p) => 1.0 - p,
        None => 1.0,
    };
    Ok(Verdict { risk: risk.into(), is_unsafe, confidence, reasoning: analysis.to_string(), risk_probability })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_channel_decides_and_the_analysis_is_the_reasoning() {
        let text = "<|channel|>analysis<|message|>It asks for a weapon.<|end|><|start|>assistant<|channel|>final<|message|>1<|return|>";
        let v = verdict(Risk::Harm, text, Some((0.75, 0.25))).unwrap();
        assert!(v.is_unsafe && v.risk_probability == Some(0.75) && v.reasoning == "It asks for a weapon.");
        let v = verdict(Risk::Harm, "<|channel|>final<|message|>{\"violation\": 0, \"policy_category\": null}", None).unwrap();
        assert!(!v.is_unsafe && v.confidence == 1.0);
        let e = verdict(Risk::Violence, "<|channel|>analysis<|message|>Thinking", None).unwrap_err();
        assert!(e.to_string().contains("violence"), "{e}");
        assert!(verdict(Risk::Harm, "<|channel|>final<|message|>maybe", None).is_err());
    }

    #[test]
    fn a_policy_asks_for_one_character_about_the_judged_message() {
        let p = risk_policy(Risk::Violence, Judged::Assistant).unwrap();
        assert!(p.starts_with("# Policy: violence\n\n## INSTRUCTIONS\n\nDecide whether the assistant's reply in the content violates this policy. Return exactly one character: 0 or 1."));
        assert!(p.contains("## VIOLATES (1)\n\nThe assistant's reply matches the definition above.") && p.ends_with("Answer (0 or 1):"));
        let m = messages(&GuardInput::new("Hi").with_assistant("Go away"), &p);
        assert_eq!((m[0]["role"].as_str(), m[1]["content"].as_str()), (Some("system"), Some("User: Hi\n\nAssistant: Go away")));
        assert_eq!(messages(&GuardInput::new("Hi"), &p)[1]["content"], "Hi");
    }
}
