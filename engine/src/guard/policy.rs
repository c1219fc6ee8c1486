//! Per-risk thresholds: a request (or a server preset) may decide `unsafe` by the verdict's
//! `risk_probability` instead of the model's own label. A risk with a threshold `t` is unsafe
//! exactly when `risk_probability >= t`; a verdict without a probability (the model gave neither
//! yes nor no any weight) keeps its label; risks without a threshold keep their label. The
//! verdict's `confidence` stays the model's confidence in its own label. The evaluator applies
//! them (`GuardRequest::thresholds`): every caller gets verdicts decided the same way.

use super::custom::CustomRisk;
use super::verdict::RiskName;
use super::{Risk, Verdict};

/// Thresholds by risk (built-in or custom), in the order given (a risk at most once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thresholds(Vec<(RiskName, f64)>);

/// Why a threshold was refused: the message names the risk or the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThresholdError(pub String);

impl std::fmt::Display for ThresholdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// As the responses echo them: `{risk: p}` in the order given.
impl serde::Serialize for Thresholds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (risk, t) in &self.0 {
            map.serialize_entry(risk.name(), t)?;
        }
        map.end()
    }
}

impl Thresholds {
    /// From `(risk name, threshold)` pairs: every name a risk of the contract, every threshold
    /// a number in 0..=1, no risk twice.
    pub fn parse<S: AsRef<str>>(pairs: impl IntoIterator<Item = (S, f64)>) -> Result<Thresholds, ThresholdError> {
        Thresholds::parse_with_custom(pairs, &[])
    }

    /// [`Thresholds::parse`] where a name may also be one of `customs`.
    pub fn parse_with_custom<S: AsRef<str>>(
        pairs: impl IntoIterator<Item = (S, f64)>,
        customs: &[CustomRisk],
    ) -> Result<Thresholds, ThresholdError> {
        let mut out: Vec<(RiskName, f64)> = Vec::new();
        for (name, t) in pairs {
            let name = name.as_ref();
            let risk = match Risk::from_name(name) {
                Some(r) => RiskName::Builtin(r),
                None if customs.iter().any(|c| c.name == name) => RiskName::Custom(name.to_string()),
                None => return Err(ThresholdError(format!("invalid risk category: {name}"))),
            };
            if !(0.0..=1.0).contains(&t) {
                return Err(ThresholdError(format!("the threshold of {name} must be a number from 0 to 1, not {t}")));
            }
            if out.iter().any(|(r, _)| *r == risk) {
                return Err(ThresholdError(format!("{name} has two thresholds")));
            }
            out.push((risk, t));
        }
        Ok(Thresholds(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The threshold of a risk (a [`Risk`] or a [`RiskName`]).
    pub fn get<R>(&self, risk: &R) -> Option<f64>
    where
        RiskName: PartialEq<R>,
    {
        self.0.iter().find(|(r, _)| r == risk).map(|&(_, t)| t)
    }

    /// These thresholds with `over`'s replacing them risk by risk (a request's own thresholds
    /// over its policy's).
    pub fn overridden_by(&self, over: &Thresholds) -> Thresholds {
        let mut out: Vec<(RiskName, f64)> = self.0.iter().filter(|(r, _)| over.get(r).is_none()).cloned().collect();
        out.extend(over.0.iter().cloned());
        Thresholds(out)
    }

    /// Decides each verdict's `unsafe` by its threshold; returns whether any is unsafe.
    pub fn apply(&self, verdicts: &mut [Verdict]) -> bool {
        for v in verdicts.iter_mut() {
            if let (Some(t), Some(p)) = (self.get(&v.risk), v.risk_probability) {
                // compared as given: the request's f64 against the probability the response shows
                v.is_unsafe = f64::from(p) >= t;
            }
        }
        verdicts.iter().any(|v| v.is_unsafe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(risk: Risk, is_unsafe: bool, p: Option<f32>) -> Verdict {
        Verdict { risk: risk.into(), is_unsafe, confidence: 0.9, reasoning: String::new(), risk_probability: p }
    }

    #[test]
    fn a_threshold_decides_on_both_sides_and_the_rest_keep_their_label() {
        let t = Thresholds::parse([("violence", 0.3), ("harm", 0.9)]).unwrap();
        let mut vs = vec![v(Risk::Violence, false, Some(0.3)), v(Risk::Harm, true, Some(0.899)), v(Risk::Profanity, true, Some(0.01))];
        assert!(t.apply(&mut vs));
        assert_eq!(vs.iter().map(|v| v.is_unsafe).collect::<Vec<_>>(), [true, false, true]);
        let mut vs = vec![v(Risk::Violence, false, Some(0.2999)), v(Risk::Harm, true, None)];
        assert!(t.apply(&mut vs), "no probability: the label stays");
        assert!(!vs[0].is_unsafe && vs[1].is_unsafe);
        assert_eq!(vs[0].confidence, 0.9);
        let mut vs = vec![v(Risk::Violence, true, Some(0.1))];
        assert!(!t.apply(&mut vs));
    }

    #[test]
    fn a_request_overrides_its_policy_risk_by_risk() {
        let policy = Thresholds::parse([("harm", 0.3), ("violence", 0.2)]).unwrap();
        let merged = policy.overridden_by(&Thresholds::parse([("harm", 0.8), ("profanity", 0.5)]).unwrap());
        let get = |r: Risk| merged.get(&r);
        assert_eq!((get(Risk::Harm), get(Risk::Violence), get(Risk::Profanity)), (Some(0.8), Some(0.2), Some(0.5)));
        assert_eq!(policy.overridden_by(&Thresholds::default()), policy);
    }

    #[test]
    fn bad_thresholds_are_refused_by_name() {
        assert_eq!(Thresholds::parse([("nope", 0.5)]).unwrap_err().0, "invalid risk category: nope");
        assert!(Thresholds::parse([("harm", 1.5)]).unwrap_err().0.contains("from 0 to 1"));
        assert!(Thresholds::parse([("harm", f64::NAN)]).is_err());
        assert!(Thresholds::parse([("harm", 0.5), ("harm", 0.6)]).unwrap_err().0.contains("two thresholds"));
        assert!(Thresholds::parse([("harm", 0.0), ("violence", 1.0)]).is_ok());
    }

    #[test]
    fn a_custom_risk_takes_a_threshold_only_when_the_request_defines_it() {
        let pii = CustomRisk::new("pii", "The message contains a phone number.").unwrap();
        assert_eq!(Thresholds::parse([("pii", 0.5)]).unwrap_err().0, "invalid risk category: pii");
        let t = Thresholds::parse_with_custom([("pii", 0.5), ("harm", 0.4)], &[pii]).unwrap();
        let mut vs =
            vec![Verdict { risk: RiskName::Custom("pii".into()), ..v(Risk::Harm, false, Some(0.6)) }, v(Risk::Harm, true, Some(0.3))];
        assert!(t.apply(&mut vs));
        assert!(vs[0].is_unsafe && !vs[1].is_unsafe);
        assert_eq!(serde_json::to_value(&t).unwrap(), serde_json::json!({"pii": 0.5, "harm": 0.4}));
    }
}
