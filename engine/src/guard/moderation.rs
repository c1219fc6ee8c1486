//! The guard as OpenAI's moderation API sees it: the 9 harm risks under their own names, and
//! OpenAI's 13 category names, each read from the Guardian risk that covers it. OpenAI's
//! sub-categories (`/threatening`, `/instructions`, `/intent`, `/minors`, `/graphic`) have no
//! finer Guardian risk: they report their parent's (the official `openai` package requires every
//! one of the 13 in a response, so none can be left out).

use super::{Risk, Verdict};

/// OpenAI's moderation categories and the Guardian risk each one reads.
pub const OPENAI_CATEGORIES: [(&str, Risk); 13] = [
    ("harassment", Risk::Profanity),
    ("harassment/threatening", Risk::Violence),
    ("hate", Risk::SocialBias),
    ("hate/threatening", Risk::SocialBias),
    ("illicit", Risk::UnethicalBehavior),
    ("illicit/violent", Risk::Violence),
    ("self-harm", Risk::Harm),
    ("self-harm/instructions", Risk::Harm),
    ("self-harm/intent", Risk::Harm),
    ("sexual", Risk::SexualContent),
    ("sexual/minors", Risk::SexualContent),
    ("violence", Risk::Violence),
    ("violence/graphic", Risk::Violence),
];

/// A verdict's category score: its `risk_probability` (P(yes) normalised over yes and no at the
/// label), never the label's confidence; 1 or 0 by the label when the model gave neither word
/// any probability.
pub fn category_score(v: &Verdict) -> f32 {
    v.risk_probability.unwrap_or(if v.is_unsafe { 1.0 } else { 0.0 })
}

/// `(category name, flagged, score)` of every category of a result: the judged risks under
/// their names, then OpenAI's categories whose risk was judged (a name both use, `violence`,
/// once).
pub fn categories(verdicts: &[Verdict]) -> Vec<(&str, bool, f32)> {
    let mut out: Vec<(&str, bool, f32)> = verdicts.iter().map(|v| (v.risk.name(), v.is_unsafe, category_score(v))).collect();
    for (name, risk) in OPENAI_CATEGORIES {
        if out.iter().any(|(n, _, _)| *n == name) {
            continue;
        }
        if let Some(v) = verdicts.iter().find(|v| v.risk == risk) {
            out.push((name, v.is_unsafe, category_score(v)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(risk: Risk, is_unsafe: bool, p: Option<f32>) -> Verdict {
        Verdict { risk: risk.into(), is_unsafe, confidence: 0.99, reasoning: String::new(), risk_probability: p }
    }

    #[test]
    fn every_openai_category_reads_a_harm_risk() {
        for (name, risk) in OPENAI_CATEGORIES {
            assert!(Risk::HARM.contains(&risk), "{name}");
        }
    }

    #[test]
    fn categories_carry_risk_probabilities_under_both_names() {
        let verdicts: Vec<Verdict> = Risk::HARM.iter().map(|&r| v(r, r == Risk::Violence, Some(0.25))).collect();
        let cats = categories(&verdicts);
        // 9 risks, and the 12 OpenAI names that are not also a risk name
        assert_eq!(cats.len(), 9 + 12);
        let get = |n: &str| cats.iter().find(|c| c.0 == n).copied().unwrap();
        assert_eq!(get("violence"), ("violence", true, 0.25));
        assert_eq!(get("violence/graphic"), ("violence/graphic", true, 0.25));
        assert_eq!(get("hate"), ("hate", false, 0.25));
        assert_eq!(cats.iter().filter(|c| c.0 == "violence").count(), 1);
    }

    #[test]
    fn a_score_is_never_the_confidence() {
        assert_eq!(category_score(&v(Risk::Harm, false, Some(0.3))), 0.3);
        assert_eq!(category_score(&v(Risk::Harm, true, None)), 1.0);
        assert_eq!(category_score(&v(Risk::Harm, false, None)), 0.0);
    }
}
