//! The guard as OpenAI's moderation API sees it: the judged risks under their own names, and
//! OpenAI's 13 category names, each read from the risk that covers it: for Granite Guardian and
//! the generic path the table below; for a family with its own categories, the risk of the
//! family's category that maps to the OpenAI one (`family::taxonomy`). OpenAI's sub-categories
//! (`/threatening`, `/instructions`, `/intent`, `/minors`, `/graphic`) without a finer risk
//! report their parent's. The official `openai` package requires every one of the 13 in a
//! response, so none is left out: a category no judged risk covers is reported not flagged,
//! score 0, and applied to no input type (`category_applied_input_types: []`).

use super::family::taxonomy::Category;
use super::{GuardFamily, Risk, Verdict};

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

/// One category of a moderation result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModerationCategory<'a> {
    pub name: &'a str,
    pub flagged: bool,
    pub score: f32,
    /// Whether a judged risk covers it (else it is reported unflagged, applied to nothing).
    pub applied: bool,
}

/// The risk an OpenAI category reads for `family`: the table's for Granite Guardian and the
/// generic path; otherwise the most specific risk of the first of the family's categories
/// mapping to it (the risk other than `harm` when it has one), and for a sub-category no
/// category maps to, its parent's.
pub fn openai_source(family: GuardFamily, openai: &str) -> Option<Risk> {
    let Some(table) = family.taxonomy() else {
        return OPENAI_CATEGORIES.iter().find(|(name, _)| *name == openai).map(|&(_, r)| r);
    };
    let Some(category) = table.iter().find(|c: &&Category| c.openai.iter().any(|(o, _)| *o == openai)) else {
        return openai.split_once('/').and_then(|(parent, _)| openai_source(family, parent));
    };
    let specific = category.risks.iter().map(|&(r, _)| r).find(|&r| r != Risk::Harm);
    specific.or_else(|| category.risks.first().map(|&(r, _)| r))
}

/// Every category of a result: the judged risks under their names, then OpenAI's 13 (a name
/// both use, `violence`, once), each from the verdict of its source risk when that was judged.
pub fn categories(family: GuardFamily, verdicts: &[Verdict]) -> Vec<ModerationCategory<'_>> {
    let mut out: Vec<ModerationCategory> = verdicts
        .iter()
        .map(|v| ModerationCategory { name: v.risk.name(), flagged: v.is_unsafe, score: category_score(v), applied: true })
        .collect();
    for (name, _) in OPENAI_CATEGORIES {
        if out.iter().any(|c| c.name == name) {
            continue;
        }
        let judged = openai_source(family, name).and_then(|risk| verdicts.iter().find(|v| v.risk == risk));
        out.push(match judged {
            Some(v) => ModerationCategory { name, flagged: v.is_unsafe, score: category_score(v), applied: true },
            None => ModerationCategory { name, flagged: false, score: 0.0, applied: false },
        });
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
        let cats = categories(GuardFamily::GraniteGuardian, &verdicts);
        // 9 risks, and the 12 OpenAI names that are not also a risk name
        assert_eq!(cats.len(), 9 + 12);
        let get = |n: &str| cats.iter().find(|c| c.name == n).map(|c| (c.flagged, c.score, c.applied)).unwrap();
        assert_eq!(get("violence"), (true, 0.25, true));
        assert_eq!(get("violence/graphic"), (true, 0.25, true));
        assert_eq!(get("hate"), (false, 0.25, true));
        assert_eq!(cats.iter().filter(|c| c.name == "violence").count(), 1);
    }

    #[test]
    fn a_family_reads_openai_categories_through_its_own_and_reports_the_rest_unapplied() {
        assert_eq!(openai_source(GuardFamily::ShieldGemma, "violence"), Some(Risk::Harm));
        assert_eq!(openai_source(GuardFamily::ShieldGemma, "harassment"), Some(Risk::Profanity));
        assert_eq!(openai_source(GuardFamily::LlamaGuard, "hate"), Some(Risk::SocialBias));
        assert_eq!(openai_source(GuardFamily::LlamaGuard, "harassment"), None);
        assert_eq!(openai_source(GuardFamily::LlamaGuard, "harassment/threatening"), None);
        assert_eq!(openai_source(GuardFamily::LlamaGuard, "hate/threatening"), Some(Risk::SocialBias), "the parent's");
        assert_eq!(openai_source(GuardFamily::Qwen3Guard, "sexual/minors"), Some(Risk::SexualContent));
        assert_eq!(openai_source(GuardFamily::Generic, "harassment"), Some(Risk::Profanity));
        let judged = [Risk::Harm, Risk::Profanity, Risk::SexualContent, Risk::SocialBias];
        let verdicts: Vec<Verdict> = judged.iter().map(|&r| v(r, r == Risk::Harm, Some(0.7))).collect();
        let cats = categories(GuardFamily::ShieldGemma, &verdicts);
        assert_eq!(cats.len(), 4 + 13, "every OpenAI category is present");
        let get = |n: &str| cats.iter().find(|c| c.name == n).map(|c| (c.flagged, c.score, c.applied)).unwrap();
        assert_eq!(get("violence"), (true, 0.7, true), "dangerous content");
        assert_eq!(get("illicit"), (false, 0.0, false), "no ShieldGemma policy covers it");
    }

    #[test]
    fn a_score_is_never_the_confidence() {
        assert_eq!(category_score(&v(Risk::Harm, false, Some(0.3))), 0.3);
        assert_eq!(category_score(&v(Risk::Harm, true, None)), 1.0);
        assert_eq!(category_score(&v(Risk::Harm, false, None)), 0.0);
    }
}
