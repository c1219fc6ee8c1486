//! Reading verdicts (guard.md §4): the Yes/No probabilities at a label position (every token
//! whose trimmed lowercase text is "yes" / "no" counts), and the 3.2 / 3.3 output formats.
//! "Yes" means the risk is present, in every format. A verdict names a built-in risk or a
//! custom one (`RiskName`): both are judged, thresholded and printed the same way.

use std::fmt;

use serde::Serialize;

use super::{GuardError, Risk};
use crate::logprobs::log_normalizer;
use crate::tokenizer::{TokenId, Tokenizer};

/// The risk a verdict is about: one of the 13 categories, or a custom risk of the request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RiskName {
    Builtin(Risk),
    Custom(String),
}

impl RiskName {
    /// The API name (a custom risk's own name).
    pub fn name(&self) -> &str {
        match self {
            RiskName::Builtin(r) => r.name(),
            RiskName::Custom(n) => n,
        }
    }

    /// The built-in risk, `None` for a custom one.
    pub fn builtin(&self) -> Option<Risk> {
        match self {
            RiskName::Builtin(r) => Some(*r),
            RiskName::Custom(_) => None,
        }
    }
}

impl From<Risk> for RiskName {
    fn from(r: Risk) -> RiskName {
        RiskName::Builtin(r)
    }
}

impl PartialEq<Risk> for RiskName {
    fn eq(&self, other: &Risk) -> bool {
        self.builtin() == Some(*other)
    }
}

impl fmt::Display for RiskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for RiskName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One risk's verdict, as the HTTP response and `--json` print it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub risk: RiskName,
    #[serde(rename = "unsafe")]
    pub is_unsafe: bool,
    pub confidence: f32,
    pub reasoning: String,
    /// P(yes) / (P(yes) + P(no)) at the label position, when the engine saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk_probability: Option<f32>,
}

impl Verdict {
    /// The same verdict about another risk (a custom risk's prompt is read as a stand-in
    /// built-in one).
    pub fn named(self, risk: RiskName) -> Verdict {
        Verdict { risk, ..self }
    }
}

/// The token ids whose trimmed lowercase text is "yes" and "no" (" Yes", "YES", "no"...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct YesNoTokens {
    pub yes: Vec<TokenId>,
    pub no: Vec<TokenId>,
    /// A label between the two (Qwen3Guard's `Controversial`): its mass counts half to each.
    pub between: Vec<TokenId>,
}

impl YesNoTokens {
    pub fn of(tokenizer: &Tokenizer) -> YesNoTokens {
        YesNoTokens::words(tokenizer, "yes", "no")
    }

    /// The tokens of another pair of label words (lowercase): `yes` holds the word that says
    /// the risk is present (Llama Guard's `unsafe`), `no` the other.
    pub fn words(tokenizer: &Tokenizer, yes: &str, no: &str) -> YesNoTokens {
        let mut out = YesNoTokens::default();
        for id in 0..tokenizer.n_vocab() as TokenId {
            let text = String::from_utf8_lossy(tokenizer.token_bytes(id));
            let word = text.trim().to_lowercase();
            if word == yes {
                out.yes.push(id);
            } else if word == no {
                out.no.push(id);
            }
        }
        out
    }

    /// These labels with a word between them, known by the tokens that start it (with or
    /// without a leading space, lowercase or capitalised): a label that splits into pieces is
    /// decided at its first one.
    pub fn with_between(mut self, tokenizer: &Tokenizer, word: &str) -> YesNoTokens {
        let mut chars = word.chars();
        let capital: String = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
        let spellings = [word.to_string(), format!(" {word}"), capital.clone(), format!(" {capital}")];
        let piece = |id: TokenId| String::from_utf8_lossy(tokenizer.token_bytes(id)).trim().to_lowercase();
        let mut firsts: Vec<String> = spellings
            .iter()
            .filter_map(|s| tokenizer.encode(s, false, false).first().map(|&id| piece(id)))
            .filter(|p| !p.is_empty())
            .collect();
        // a vocabulary may hold the whole word, though its tokenizer spells it otherwise
        firsts.push(word.to_lowercase());
        for id in 0..tokenizer.n_vocab() as TokenId {
            if firsts.contains(&piece(id)) && !self.contains(id) {
                self.between.push(id);
            }
        }
        self
    }

    /// Whether `token` is one of them (a label token).
    pub fn contains(&self, token: TokenId) -> bool {
        self.yes.contains(&token) || self.no.contains(&token) || self.between.contains(&token)
    }

    /// The summed softmax probabilities of the yes and no tokens in `logits` (the model's
    /// logit-scaled output row), in f64.
    pub fn probabilities(&self, logits: &[f32]) -> (f64, f64) {
        let Some(log_z) = log_normalizer(logits) else { return (0.0, 0.0) };
        let p = |ids: &[TokenId]| ids.iter().filter_map(|&id| logits.get(id as usize)).map(|&v| (f64::from(v) - log_z).exp()).sum::<f64>();
        let half = p(&self.between) / 2.0;
        (p(&self.yes) + half, p(&self.no) + half)
    }
}

/// P(yes) normalised over yes and no; `None` when neither has any probability.
pub fn risk_probability(p_yes: f64, p_no: f64) -> Option<f32> {
    let total = p_yes + p_no;
    (total > 0.0).then(|| (p_yes / total) as f32)
}

/// Format 3.0: the label is the likelier of yes / no; confidence is its normalised probability.
pub fn verdict_3_0(risk: Risk, p_yes: f64, p_no: f64) -> Result<Verdict, GuardError> {
    let prob = risk_probability(p_yes, p_no)
        .ok_or_else(|| GuardError::Unparseable { risk: risk.name().into(), output: "(no yes/no token has any probability)".into() })?;
    let is_unsafe = p_yes > p_no;
    let confidence = if is_unsafe { prob } else { 1.0 - prob };
    Ok(Verdict { risk: risk.into(), is_unsafe, confidence, reasoning: String::new(), risk_probability: Some(prob) })
}

/// Format 3.2: `Yes` / `No` first, then `<confidence> High|Low </confidence>` (0.9 / 0.3).
pub fn verdict_3_2(risk: Risk, output: &str, risk_probability: Option<f32>) -> Result<Verdict, GuardError> {
    let bad = || GuardError::Unparseable { risk: risk.name().into(), output: output.into() };
    let first = output.split_whitespace().next().ok_or_else(bad)?;
    let word: String = first.chars().take_while(|c| c.is_alphabetic()).collect::<String>().to_lowercase();
    let is_unsafe = match word.as_str() {
        "yes" => true,
        "no" => false,
        _ => return Err(bad()),
    };
    let level = last_tag(output, "confidence").ok_or_else(bad)?;
    let confidence = match level.trim().to_lowercase().as_str() {
        "high" => 0.9,
        "low" => 0.3,
        _ => return Err(bad()),
    };
    Ok(Verdict { risk: risk.into(), is_unsafe, confidence, reasoning: String::new(), risk_probability })
}

/// Format 3.3: the last `<score> yes|no </score>`; reasoning is the last `<think>...</think>`.
pub fn verdict_3_3(risk: Risk, output: &str, risk_probability: Option<f32>) -> Result<Verdict, GuardError> {
    let bad = || GuardError::Unparseable { risk: risk.name().into(), output: output.into() };
    let score = last_tag(output, "score").ok_or_else(bad)?;
    let is_unsafe = match score.trim().to_lowercase().as_str() {
        "yes" => true,
        "no" => false,
        _ => return Err(bad()),
    };
    let reasoning = last_tag(output, "think").map(|t| t.trim().to_string()).unwrap_or_default();
    Ok(Verdict { risk: risk.into(), is_unsafe, confidence: 1.0, reasoning, risk_probability })
}

/// The text inside the last `<tag>...</tag>` of `text`.
fn last_tag<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let start = text.rfind(&open)? + open.len();
    let end = text[start..].find(&close)? + start;
    Some(&text[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_two_reads_the_label_and_the_confidence() {
        let v = verdict_3_2(Risk::Harm, "Yes\n<confidence> High </confidence>", Some(0.8)).unwrap();
        assert!(v.is_unsafe && v.confidence == 0.9 && v.risk_probability == Some(0.8));
        let v = verdict_3_2(Risk::Harm, "no <confidence> low </confidence>", None).unwrap();
        assert!(!v.is_unsafe && v.confidence == 0.3);
        let e = verdict_3_2(Risk::Violence, "Maybe <confidence> High </confidence>", None).unwrap_err();
        assert!(e.to_string().contains("violence") && e.to_string().contains("Maybe"), "{e}");
        assert!(verdict_3_2(Risk::Harm, "Yes", None).is_err());
        assert!(verdict_3_2(Risk::Harm, "", None).is_err());
    }

    #[test]
    fn three_three_reads_the_last_score_and_think() {
        let out = "<think> The user asks for <score> no </score> ... it is harmful. </think>\n<score> yes </score>";
        let v = verdict_3_3(Risk::Harm, out, None).unwrap();
        assert!(v.is_unsafe && v.confidence == 1.0);
        assert!(v.reasoning.starts_with("The user asks") && v.reasoning.ends_with("harmful."), "{}", v.reasoning);
        let v = verdict_3_3(Risk::Harm, "<score> No </score>", Some(0.1)).unwrap();
        assert!(!v.is_unsafe && v.reasoning.is_empty());
        assert!(verdict_3_3(Risk::Harm, "<score> perhaps </score>", None).is_err());
        assert!(verdict_3_3(Risk::Harm, "yes", None).is_err());
    }

    #[test]
    fn three_zero_takes_the_likelier_label() {
        let v = verdict_3_0(Risk::Profanity, 0.6, 0.2).unwrap();
        assert!(v.is_unsafe && (v.confidence - 0.75).abs() < 1e-6 && v.risk_probability == Some(0.75));
        let v = verdict_3_0(Risk::Profanity, 0.1, 0.3).unwrap();
        assert!(!v.is_unsafe && (v.confidence - 0.75).abs() < 1e-6);
        assert!(verdict_3_0(Risk::Profanity, 0.0, 0.0).is_err());
    }

    #[test]
    fn verdict_json_uses_the_contract_names() {
        let v = verdict_3_0(Risk::Jailbreaking, 0.6, 0.2).unwrap();
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["risk"], "jailbreaking");
        assert_eq!(j["unsafe"], true);
        assert!(j.get("risk_probability").is_some());
    }
}
