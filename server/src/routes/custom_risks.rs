//! Custom risks on `POST /v1/guard`: `risk_definitions: {name: definition}` defines risks of the
//! caller's own, judged when `risks` names them (with or among the built-in ones); a threshold
//! in `thresholds` may name them too. Their verdicts take their place in `verdicts`, in the
//! order of `risks` (`engine::guard::custom`).

use engine::guard::{custom, CustomRisk, CustomVerdict, Verdict};
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// A request's custom risks, checked.
pub struct CustomRisks {
    pub risks: Vec<CustomRisk>,
    /// The built-in risks the request names.
    pub builtin: Vec<String>,
    /// Every risk the request names, in its order.
    order: Vec<String>,
    /// Thresholds on the custom risks.
    limits: Vec<(String, f64)>,
}

impl CustomRisks {
    /// `risk_definitions` with the request's `risks`. Every definition must be used by `risks`.
    /// The custom thresholds are taken out of the request's `thresholds`, leaving the built-in
    /// ones to `routes::guard::applied`.
    pub fn parse(defs: &Map<String, Value>, thresholds: &mut Map<String, Value>, risks: &[String]) -> Result<CustomRisks, ApiError> {
        let mut customs = Vec::with_capacity(defs.len());
        for (name, def) in defs {
            let def = def
                .as_str()
                .ok_or_else(|| ApiError::invalid_param("risk_definitions", format!("the definition of {name} must be a string")))?;
            let custom = CustomRisk::new(name, def)?;
            if !risks.contains(name) {
                return Err(ApiError::invalid_param(
                    "risk_definitions",
                    format!("{name} is defined but not in risks: name it there to judge it"),
                ));
            }
            customs.push(custom);
        }
        // in the order `risks` names them
        customs.sort_by_key(|c| risks.iter().position(|r| *r == c.name));
        let builtin: Vec<String> = risks.iter().filter(|r| !defs.contains_key(r.as_str())).cloned().collect();
        let mut limits = Vec::new();
        for c in &customs {
            if let Some(v) = thresholds.remove(&c.name) {
                match v.as_f64() {
                    Some(p) if (0.0..=1.0).contains(&p) => limits.push((c.name.clone(), p)),
                    _ => {
                        return Err(ApiError::invalid_param(
                            "thresholds",
                            format!("the threshold of {} must be a number from 0 to 1", c.name),
                        ))
                    }
                }
            }
        }
        Ok(CustomRisks { risks: customs, builtin, order: risks.to_vec(), limits })
    }

    /// Decides each custom verdict by its threshold (unsafe exactly when `risk_probability`
    /// reaches it), as the built-in thresholds do.
    pub fn apply(&self, verdicts: &mut [CustomVerdict]) {
        custom::apply_thresholds(verdicts, &self.limits);
    }

    /// The custom thresholds, to echo with the built-in ones.
    pub fn echo(&self, thresholds: &mut Map<String, Value>) {
        for (name, t) in &self.limits {
            thresholds.insert(name.clone(), json!(t));
        }
    }

    /// All verdicts in the order of `risks`.
    pub fn merge(&self, builtin: &[Verdict], custom: &[CustomVerdict]) -> Value {
        let (mut b, mut c) = (builtin.iter(), custom.iter());
        let verdicts: Vec<Value> = self
            .order
            .iter()
            .filter_map(
                |name| if self.risks.iter().any(|r| r.name == *name) { c.next().map(|v| json!(v)) } else { b.next().map(|v| json!(v)) },
            )
            .collect();
        Value::Array(verdicts)
    }
}
