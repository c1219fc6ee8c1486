//! Guard policy presets: named sets of per-risk thresholds read from a TOML or JSON file
//! (`engine-cli serve --guard-policy FILE`, `engine-cli guard --policy FILE:NAME`), selected by a
//! request's `policy: "name"`. Every mistake in the file is refused when it is read, naming the
//! file and the line, so that a server never starts with a policy it would apply wrongly.
//!
//! ```toml
//! default = "strict"            # optional: the policy of requests that name none
//!
//! [policies.strict]
//! description = "flags early"   # optional
//! thresholds = { harm = 0.3, violence = 0.25 }
//! ```
//!
//! The same in JSON: `{"default": "strict", "policies": {"strict": {"thresholds": {"harm": 0.3}}}}`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::policy::Thresholds;

/// One named preset.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub description: Option<String>,
    pub thresholds: Thresholds,
}

/// The presets of one file, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policies {
    policies: Vec<Policy>,
    default: Option<String>,
}

/// Why a policy file was refused: `FILE line N: what`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFileError(pub String);

impl std::fmt::Display for PolicyFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyFileError {}

impl Policies {
    /// Reads a policy file: JSON when it ends in `.json` (or starts with `{`), TOML otherwise.
    pub fn load(path: &Path) -> Result<Policies, PolicyFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PolicyFileError(format!("{shown}: {e}")))?;
        let json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) || text.trim_start().starts_with('{');
        if json {
            Policies::from_json(&text, &shown)
        } else {
            Policies::from_toml(&text, &shown)
        }
    }

    /// A TOML policy file's text (`source` names it in errors).
    pub fn from_toml(text: &str, source: &str) -> Result<Policies, PolicyFileError> {
        let at = |offset: usize, what: &str| PolicyFileError(format!("{source} line {}: {what}", line_of(text, offset)));
        let file: TomlFile = toml::from_str(text).map_err(|e| at(e.span().map_or(0, |s| s.start), e.message().trim_end()))?;
        let mut out = Policies::default();
        for (name, policy) in file.policies {
            let entry = policy.get_ref();
            let mut pairs = Vec::with_capacity(entry.thresholds.len());
            for (risk, t) in &entry.thresholds {
                // checked one at a time, so that the error points at the offending entry's line
                Thresholds::parse([(risk.get_ref().as_str(), *t.get_ref())])
                    .map_err(|e| at(risk.span().start, &format!("policy `{name}`: {e}")))?;
                pairs.push((risk.get_ref().clone(), *t.get_ref()));
            }
            let thresholds = Thresholds::parse(pairs).map_err(|e| at(policy.span().start, &format!("policy `{name}`: {e}")))?;
            out.policies.push(Policy { name, description: entry.description.clone(), thresholds });
        }
        if let Some(d) = file.default {
            if out.get(d.get_ref()).is_none() {
                return Err(at(d.span().start, &format!("the default policy `{}` is not defined", d.get_ref())));
            }
            out.default = Some(d.into_inner());
        }
        Ok(out)
    }

    /// A JSON policy file's text. serde_json keeps no positions of values, so a bad entry's line
    /// is the line where its key first appears after its policy's name.
    pub fn from_json(text: &str, source: &str) -> Result<Policies, PolicyFileError> {
        let at = |line: usize, what: &str| PolicyFileError(format!("{source} line {line}: {what}"));
        let file: JsonFile = serde_json::from_str(text).map_err(|e| at(e.line(), &strip_position(&e.to_string())))?;
        let key_line = |after: usize, key: &str| -> (usize, usize) {
            let quoted = serde_json::to_string(key).unwrap_or_default();
            let offset = text[after..].find(&quoted).map_or(after, |i| after + i);
            (line_of(text, offset), offset)
        };
        let mut out = Policies::default();
        for (name, value) in file.policies {
            let (policy_line, policy_offset) = key_line(0, &name);
            let entry: JsonPolicy = serde_json::from_value(value)
                .map_err(|e| at(policy_line, &format!("policy `{name}`: {}", strip_position(&e.to_string()))))?;
            let mut pairs = Vec::with_capacity(entry.thresholds.len());
            for (risk, t) in &entry.thresholds {
                let line = key_line(policy_offset, risk).0;
                let t = t
                    .as_f64()
                    .ok_or_else(|| at(line, &format!("policy `{name}`: the threshold of {risk} must be a number from 0 to 1")))?;
                Thresholds::parse([(risk.as_str(), t)]).map_err(|e| at(line, &format!("policy `{name}`: {e}")))?;
                pairs.push((risk.clone(), t));
            }
            let thresholds = Thresholds::parse(pairs).map_err(|e| at(policy_line, &format!("policy `{name}`: {e}")))?;
            out.policies.push(Policy { name, description: entry.description, thresholds });
        }
        // by name, as a TOML file's are
        out.policies.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(d) = file.default {
            if out.get(&d).is_none() {
                return Err(at(key_line(0, "default").0, &format!("the default policy `{d}` is not defined")));
            }
            out.default = Some(d);
        }
        Ok(out)
    }

    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// The policy of requests that name none.
    pub fn default_policy(&self) -> Option<&Policy> {
        self.default.as_deref().and_then(|d| self.get(d))
    }

    /// The presets, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Policy> {
        self.policies.iter()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|p| p.name.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policy a request asked for (`Some(name)`), or the default: an unknown name is refused
    /// with the names there are.
    pub fn select(&self, requested: Option<&str>) -> Result<Option<&Policy>, String> {
        match requested {
            None => Ok(self.default_policy()),
            Some(name) => self.get(name).map(Some).ok_or_else(|| {
                let known: Vec<&str> = self.names().collect();
                if known.is_empty() {
                    format!("unknown policy `{name}`: the server has no policies (start it with --guard-policy FILE)")
                } else {
                    format!("unknown policy `{name}`: the server has {}", known.join(", "))
                }
            }),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    default: Option<toml::Spanned<String>>,
    #[serde(default)]
    policies: BTreeMap<String, toml::Spanned<TomlPolicy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPolicy {
    description: Option<String>,
    #[serde(default)]
    thresholds: BTreeMap<toml::Spanned<String>, toml::Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonFile {
    default: Option<String>,
    #[serde(default)]
    policies: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonPolicy {
    description: Option<String>,
    #[serde(default)]
    thresholds: serde_json::Map<String, Value>,
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// serde_json's message without its trailing " at line L column C" (the line is said first).
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::Risk;

    const TOML: &str = "default = \"strict\"\n\n[policies.strict]\ndescription = \"flags early\"\nthresholds = { harm = 0.3, violence = 0.25 }\n\n[policies.lenient]\nthresholds = { harm = 0.9 }\n";

    #[test]
    fn toml_and_json_files_give_the_same_presets() {
        let t = Policies::from_toml(TOML, "p.toml").unwrap();
        let json = r#"{
  "default": "strict",
  "policies": {
    "lenient": {"thresholds": {"harm": 0.9}},
    "strict": {"description": "flags early", "thresholds": {"harm": 0.3, "violence": 0.25}}
  }
}"#;
        let j = Policies::from_json(json, "p.json").unwrap();
        assert_eq!(t, j);
        let strict = t.default_policy().unwrap();
        assert_eq!(strict.name, "strict");
        assert_eq!(strict.thresholds.get(&Risk::Violence), Some(0.25));
        assert_eq!(t.select(Some("lenient")).unwrap().unwrap().thresholds.get(&Risk::Harm), Some(0.9));
        assert_eq!(t.select(None).unwrap().unwrap().name, "strict");
        assert_eq!(t.select(Some("nope")).unwrap_err(), "unknown policy `nope`: the server has lenient, strict");
        assert_eq!(Policies::default().select(None), Ok(None));
    }

    #[test]
    fn a_bad_file_is_refused_naming_its_line() {
        let err = |text: &str| Policies::from_toml(text, "p.toml").unwrap_err().0;
        assert_eq!(
            err("[policies.a]\nthresholds = { harm = 0.3,\n  hate = 0.2 }\n"),
            "p.toml line 3: policy `a`: invalid risk category: hate"
        );
        assert_eq!(
            err("[policies.a]\n\nthresholds = { harm = 1.3 }\n"),
            "p.toml line 3: policy `a`: the threshold of harm must be a number from 0 to 1, not 1.3"
        );
        assert!(
            err("[policies.a]\nthreshold = { harm = 0.3 }\n").starts_with("p.toml line 2: unknown field `threshold`"),
            "{}",
            err("[policies.a]\nthreshold = { harm = 0.3 }\n")
        );
        assert!(err("[policies.a]\nthresholds = { harm = \"high\" }\n").starts_with("p.toml line 2:"));
        assert!(err("[policies.a\n").starts_with("p.toml line 1:"));
        assert_eq!(err("\ndefault = \"b\"\n[policies.a]\n"), "p.toml line 2: the default policy `b` is not defined");

        let jerr = |text: &str| Policies::from_json(text, "p.json").unwrap_err().0;
        assert_eq!(
            jerr("{\"policies\": {\n \"a\": {\"thresholds\": {\"harm\": 0.3}},\n \"b\": {\"thresholds\": {\n  \"harm\": 0.3,\n  \"nope\": 0.1}}}}"),
            "p.json line 5: policy `b`: invalid risk category: nope"
        );
        assert_eq!(
            jerr("{\"policies\": {\n \"a\": {\"thresholds\": {\"harm\": \"x\"}}}}"),
            "p.json line 2: policy `a`: the threshold of harm must be a number from 0 to 1"
        );
        assert!(jerr("{\n\"policies\": {\n \"a\": {\"treshold\": 1}}}").starts_with("p.json line 3: policy `a`: unknown field `treshold`"));
        assert!(jerr("{\n\"policies\": {\n").starts_with("p.json line 3:"));
    }

    #[test]
    fn files_are_read_by_their_extension() {
        let dir = std::env::temp_dir().join(format!("presets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.toml");
        std::fs::write(&path, TOML).unwrap();
        assert_eq!(Policies::load(&path).unwrap().names().collect::<Vec<_>>(), ["lenient", "strict"]);
        let missing = Policies::load(&dir.join("none.toml")).unwrap_err().0;
        assert!(missing.contains("none.toml"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
