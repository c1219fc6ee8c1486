//! Every guard family's own categories mapped onto the guard API's risks (the 13 of guard.md §1)
//! and OpenAI's moderation categories, one table per family. A mapping is `Exact` when the
//! family's category and the risk describe the same content, `Approximate` when they overlap
//! (the family judges more or less than the risk says); a risk no category of a family maps to
//! is refused for that family (`GuardError::RiskNotJudged`). README's taxonomy table says the
//! same; `the_readme_table_is_this_table` keeps them equal.

use crate::guard::verdict::RiskName;
use crate::guard::{Risk, Verdict};

/// How well a family's category stands for a risk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Exact,
    Approximate,
}

/// One category of a family: its code as the model writes it, its name in the prompt, and the
/// risks and OpenAI categories it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Category {
    pub code: &'static str,
    pub name: &'static str,
    pub risks: &'static [(Risk, Fit)],
    pub openai: &'static [(&'static str, Fit)],
}

use Fit::{Approximate as A, Exact as E};

/// Llama Guard 3 (MLCommons' 13 hazards and S14). Any unsafe answer is `harm` (the umbrella
/// risk); the hazards with a narrower risk of their own say so too. S6 (specialized advice), S7
/// (privacy), S13 (elections) and S14 (code interpreter abuse) have no risk of their own.
pub const LLAMA_GUARD: [Category; 14] = [
    Category {
        code: "S1",
        name: "Violent Crimes",
        risks: &[(Risk::Harm, A), (Risk::Violence, A)],
        openai: &[("violence", A), ("illicit/violent", A)],
    },
    Category { code: "S2", name: "Non-Violent Crimes", risks: &[(Risk::Harm, A), (Risk::UnethicalBehavior, A)], openai: &[("illicit", A)] },
    Category { code: "S3", name: "Sex Crimes", risks: &[(Risk::Harm, A), (Risk::SexualContent, A)], openai: &[("sexual", A)] },
    Category {
        code: "S4",
        name: "Child Exploitation",
        risks: &[(Risk::Harm, A), (Risk::SexualContent, A)],
        openai: &[("sexual/minors", E)],
    },
    Category { code: "S5", name: "Defamation", risks: &[(Risk::Harm, A), (Risk::UnethicalBehavior, A)], openai: &[] },
    Category { code: "S6", name: "Specialized Advice", risks: &[(Risk::Harm, A)], openai: &[] },
    Category { code: "S7", name: "Privacy", risks: &[(Risk::Harm, A)], openai: &[] },
    Category { code: "S8", name: "Intellectual Property", risks: &[(Risk::Harm, A), (Risk::UnethicalBehavior, A)], openai: &[] },
    Category {
        code: "S9",
        name: "Indiscriminate Weapons",
        risks: &[(Risk::Harm, A), (Risk::Violence, A)],
        openai: &[("illicit/violent", A)],
    },
    Category { code: "S10", name: "Hate", risks: &[(Risk::Harm, A), (Risk::SocialBias, A)], openai: &[("hate", A)] },
    Category {
        code: "S11",
        name: "Self-Harm",
        risks: &[(Risk::Harm, A)],
        openai: &[("self-harm", E), ("self-harm/instructions", A), ("self-harm/intent", A)],
    },
    Category { code: "S12", name: "Sexual Content", risks: &[(Risk::Harm, A), (Risk::SexualContent, E)], openai: &[("sexual", E)] },
    Category { code: "S13", name: "Elections", risks: &[(Risk::Harm, A)], openai: &[] },
    Category { code: "S14", name: "Code Interpreter Abuse", risks: &[(Risk::Harm, A)], openai: &[] },
];

/// ShieldGemma's four harm types, one policy per prompt (`shieldgemma::policy`).
pub const SHIELDGEMMA: [Category; 4] = [
    Category {
        code: "dangerous",
        name: "No Dangerous Content",
        risks: &[(Risk::Harm, A)],
        openai: &[("illicit/violent", A), ("self-harm", A), ("self-harm/instructions", A), ("self-harm/intent", A), ("violence", A)],
    },
    Category {
        code: "harassment",
        name: "No Harassment",
        risks: &[(Risk::Profanity, A)],
        openai: &[("harassment", E), ("harassment/threatening", A)],
    },
    Category { code: "hate", name: "No Hate Speech", risks: &[(Risk::SocialBias, A)], openai: &[("hate", E), ("hate/threatening", A)] },
    Category {
        code: "sexual",
        name: "No Sexually Explicit Information",
        risks: &[(Risk::SexualContent, E)],
        openai: &[("sexual", E), ("sexual/minors", A)],
    },
];

/// Qwen3Guard-Gen's categories (`Jailbreak` only when a user message is judged). Any unsafe
/// answer is `harm`; Unethical Acts covers bias, hate speech, offensive language and
/// harassment besides unethical acts.
pub const QWEN3GUARD: [Category; 9] = [
    Category {
        code: "Violent",
        name: "Violent",
        risks: &[(Risk::Harm, A), (Risk::Violence, A)],
        openai: &[("violence", A), ("illicit/violent", A)],
    },
    Category {
        code: "Non-violent Illegal Acts",
        name: "Non-violent Illegal Acts",
        risks: &[(Risk::Harm, A), (Risk::UnethicalBehavior, A)],
        openai: &[("illicit", A)],
    },
    Category {
        code: "Sexual Content or Sexual Acts",
        name: "Sexual Content or Sexual Acts",
        risks: &[(Risk::Harm, A), (Risk::SexualContent, E)],
        openai: &[("sexual", E)],
    },
    Category { code: "PII", name: "PII", risks: &[(Risk::Harm, A)], openai: &[] },
    Category {
        code: "Suicide & Self-Harm",
        name: "Suicide & Self-Harm",
        risks: &[(Risk::Harm, A)],
        openai: &[("self-harm", E), ("self-harm/instructions", A), ("self-harm/intent", A)],
    },
    Category {
        code: "Unethical Acts",
        name: "Unethical Acts",
        risks: &[(Risk::Harm, A), (Risk::UnethicalBehavior, A), (Risk::SocialBias, A), (Risk::Profanity, A)],
        openai: &[("hate", A), ("harassment", A)],
    },
    Category { code: "Politically Sensitive Topics", name: "Politically Sensitive Topics", risks: &[(Risk::Harm, A)], openai: &[] },
    Category {
        code: "Copyright Violation",
        name: "Copyright Violation",
        risks: &[(Risk::Harm, A), (Risk::UnethicalBehavior, A)],
        openai: &[],
    },
    Category { code: "Jailbreak", name: "Jailbreak", risks: &[(Risk::Jailbreaking, E)], openai: &[] },
];

/// An answer that names categories: unsafe or not, the codes named, and its score (the
/// family's probability that the content is unsafe) when the engine saw the label.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryAnswer {
    pub unsafe_: bool,
    pub codes: Vec<String>,
    pub score: Option<f32>,
    /// The confidence of the answer's own label.
    pub confidence: f32,
    pub reasoning: String,
}

/// The verdicts of `risks` from an answer naming categories of `table`: a risk is unsafe when
/// the answer is unsafe and names one of its categories. Its `risk_probability` is the
/// answer's score when the answer is not unsafe (the chance that anything is unsafe bounds
/// each risk) or names one of the risk's categories, and 0 when an unsafe answer names none
/// of them: these families score the answer, not each category.
pub fn verdicts(table: &'static [Category], risks: &[Risk], answer: &CategoryAnswer) -> Vec<Verdict> {
    risks
        .iter()
        .map(|&risk| {
            let named = categories_of(table, risk).any(|c| answer.codes.iter().any(|code| code == c.code));
            let risk_probability = if answer.unsafe_ && !named { Some(0.0) } else { answer.score };
            Verdict {
                risk: RiskName::Builtin(risk),
                is_unsafe: answer.unsafe_ && named,
                confidence: answer.confidence,
                reasoning: answer.reasoning.clone(),
                risk_probability,
            }
        })
        .collect()
}

/// The risks some category of `table` stands for, in the contract's order.
pub fn judged_risks(table: &[Category]) -> Vec<Risk> {
    Risk::ALL.into_iter().filter(|r| table.iter().any(|c| c.risks.iter().any(|(x, _)| x == r))).collect()
}

/// The categories of `table` that stand for `risk`.
pub fn categories_of(table: &'static [Category], risk: Risk) -> impl Iterator<Item = &'static Category> {
    table.iter().filter(move |c| c.risks.iter().any(|&(r, _)| r == risk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapping_names_a_harm_risk_and_an_openai_category() {
        let openai: Vec<&str> = crate::guard::moderation::OPENAI_CATEGORIES.iter().map(|c| c.0).collect();
        for c in LLAMA_GUARD.iter().chain(&SHIELDGEMMA).chain(&QWEN3GUARD) {
            assert!(c.risks.iter().all(|(r, _)| Risk::HARM.contains(r)), "{}", c.code);
            assert!(c.openai.iter().all(|(o, _)| openai.contains(o)), "{}", c.code);
        }
        assert_eq!(
            judged_risks(&LLAMA_GUARD),
            [Risk::Harm, Risk::SexualContent, Risk::SocialBias, Risk::UnethicalBehavior, Risk::Violence]
        );
        assert_eq!(judged_risks(&SHIELDGEMMA), [Risk::Harm, Risk::Profanity, Risk::SexualContent, Risk::SocialBias]);
        assert_eq!(judged_risks(&QWEN3GUARD).len(), 7, "all but evasiveness and harm_engagement");
        let codes: Vec<&str> = categories_of(&LLAMA_GUARD, Risk::Violence).map(|c| c.code).collect();
        assert_eq!(codes, ["S1", "S9"]);
        assert_eq!(categories_of(&LLAMA_GUARD, Risk::Harm).count(), 14);
    }
}
