//! Guard model families: how each family is prompted, how its answer is read, and which risks
//! its own categories stand for (`taxonomy`). Granite Guardian and the generic path
//! (`guard::prompt`) judge one risk per prompt in the contract's formats; Llama Guard and
//! Qwen3Guard judge every category in one answer (one prompt per input); ShieldGemma scores one
//! policy per prompt; gpt-oss-safeguard reasons over one policy per prompt and answers 1 or 0.
//! A model's family is detected from its chat template and names, or chosen
//! (`EvaluatorOptions::family`, `--guard-family`).

pub mod generic;
pub mod granite_guardian;
pub mod llama_guard;
pub mod qwen3guard;
pub mod safeguard;
pub mod shieldgemma;
pub mod taxonomy;

use std::fmt;

use super::custom::CustomRisk;
use super::prompt::{GuardPrompt, PromptPath, Reader};
use super::risks::{GuardFormat, GuardInput, Judged};
use super::verdict::RiskName;
use super::{GuardError, Risk};
use crate::chat::{ChatInput, ChatTemplate};
use crate::model::Model;
use taxonomy::Category;

/// A family of guard models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardFamily {
    /// IBM Granite Guardian 3.0 / 3.2 / 3.3: one risk per prompt, formats 3.0, 3.2, 3.3.
    GraniteGuardian,
    /// Meta Llama Guard 3: every category in one answer.
    LlamaGuard,
    /// Google ShieldGemma: one policy per prompt, P(Yes).
    ShieldGemma,
    /// Qwen3Guard-Gen: every category in one answer, Safe / Controversial / Unsafe.
    Qwen3Guard,
    /// OpenAI gpt-oss-safeguard: a policy per prompt as the system message, 1 / 0 on the final
    /// channel after the analysis.
    GptOssSafeguard,
    /// Any other chat model, asked a yes/no question per risk (`generic`).
    Generic,
}

impl GuardFamily {
    pub const ALL: [GuardFamily; 6] = [
        GuardFamily::GraniteGuardian,
        GuardFamily::LlamaGuard,
        GuardFamily::ShieldGemma,
        GuardFamily::Qwen3Guard,
        GuardFamily::GptOssSafeguard,
        GuardFamily::Generic,
    ];

    /// The name the CLI, the API's `format` and the audit fields use.
    pub fn name(self) -> &'static str {
        match self {
            GuardFamily::GraniteGuardian => "granite-guardian",
            GuardFamily::LlamaGuard => "llama-guard",
            GuardFamily::ShieldGemma => "shieldgemma",
            GuardFamily::Qwen3Guard => "qwen3guard",
            GuardFamily::GptOssSafeguard => "gpt-oss-safeguard",
            GuardFamily::Generic => "generic",
        }
    }

    pub fn parse(s: &str) -> Option<GuardFamily> {
        GuardFamily::ALL.into_iter().find(|f| f.name() == s)
    }

    /// The family's own categories, for the families that have a table of them.
    pub fn taxonomy(self) -> Option<&'static [Category]> {
        match self {
            GuardFamily::LlamaGuard => Some(&taxonomy::LLAMA_GUARD),
            GuardFamily::ShieldGemma => Some(&taxonomy::SHIELDGEMMA),
            GuardFamily::Qwen3Guard => Some(&taxonomy::QWEN3GUARD),
            GuardFamily::GraniteGuardian | GuardFamily::GptOssSafeguard | GuardFamily::Generic => None,
        }
    }
}

impl fmt::Display for GuardFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The family a GGUF's chat template or names say, among those with a module here (Llama
/// Guard, ShieldGemma, Qwen3Guard); `None` leaves the choice between Granite Guardian and the generic path
/// to `risks::detect_format`.
pub fn detect(template: Option<&str>, names: &[&str]) -> Option<GuardFamily> {
    if let Some(t) = template {
        // Qwen3Guard's template lists its categories under the same heading as Llama Guard's
        if t.contains("<BEGIN UNSAFE CONTENT CATEGORIES>") && t.contains("'safe' or 'unsafe'") {
            return Some(GuardFamily::LlamaGuard);
        }
        if t.contains("You are a policy expert trying to help determine whether") {
            return Some(GuardFamily::ShieldGemma);
        }
        if t.contains("<BEGIN SAFETY POLICY>") && t.contains("Safety: Controversial") {
            return Some(GuardFamily::Qwen3Guard);
        }
    }
    let named = |words: &[&str]| {
        names.iter().any(|n| {
            let n: String = n.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            words.iter().any(|w| n.contains(w))
        })
    };
    if named(&["llamaguard"]) {
        Some(GuardFamily::LlamaGuard)
    } else if named(&["shieldgemma"]) {
        Some(GuardFamily::ShieldGemma)
    } else if named(&["qwen3guard"]) {
        Some(GuardFamily::Qwen3Guard)
    } else if named(&["safeguard"]) {
        // its template is gpt-oss's own: only the name tells it apart
        Some(GuardFamily::GptOssSafeguard)
    } else {
        None
    }
}

/// The conversation as `WHO: text` lines: the earlier turns, the user message, the reply when
/// there is one; `who` names the user and the assistant.
pub fn written_turns(input: &GuardInput, who: (&str, &str)) -> Vec<String> {
    let line = |is_assistant: bool, text: &str| format!("{}: {text}", if is_assistant { who.1 } else { who.0 });
    let mut turns: Vec<String> =
        input.history.iter().map(|m| line(m["role"] == "assistant", m["content"].as_str().unwrap_or(""))).collect();
    turns.push(line(false, &input.user));
    turns.extend(input.assistant().map(|a| line(true, a)));
    turns
}

/// The definition of the custom risk `name` (the request's checks made sure it is there).
fn custom_definition<'a>(customs: &'a [CustomRisk], name: &str) -> &'a str {
    customs.iter().find(|c| c.name == name).map_or("", |c| c.definition.as_str())
}

/// Prompts of a family with its own module (Llama Guard, ShieldGemma, Qwen3Guard,
/// gpt-oss-safeguard), through the model's template when it is the family's, else the family's
/// published layout.
#[derive(Debug)]
pub struct FamilyPrompter {
    family: GuardFamily,
    template: Option<ChatTemplate>,
    /// The BOS text a built-in ShieldGemma prompt starts with (its template writes `bos_token`).
    bos: String,
}

impl FamilyPrompter {
    /// The prompter of `family` (one with its own module) for this model.
    pub fn from_model(model: &Model, family: GuardFamily) -> Result<FamilyPrompter, GuardError> {
        let file = model.file();
        // gpt-oss-safeguard's template is gpt-oss's harmony template: the file's is its own
        let own = file
            .get_str("tokenizer.chat_template")
            .is_some_and(|t| family == GuardFamily::GptOssSafeguard || detect(Some(t), &[]) == Some(family));
        let template = if own { Some(ChatTemplate::from_model(model)?) } else { None };
        let tok = model.tokenizer();
        // the published layout is Llama Guard 3's, in Llama 3's header tokens: Llama Guard 4's
        // vocabulary (Llama 4's `<|header_start|>`) needs the file's own template
        if family == GuardFamily::LlamaGuard && template.is_none() && tok.token_id("<|start_header_id|>").is_none() {
            return Err(GuardError::Prompt {
                message: "this Llama Guard file has no Llama Guard chat template and its vocabulary has no <|start_header_id|> (Llama Guard 4's is \
                          Llama 4's): its prompt needs the model's own template in tokenizer.chat_template"
                    .into(),
            });
        }
        let bos = tok.bos().map(|id| String::from_utf8_lossy(tok.token_bytes(id)).into_owned()).unwrap_or_default();
        FamilyPrompter::new(family, template, bos)
    }

    /// A prompter with this template (`None`: the published layout) and BOS text; Granite
    /// Guardian and the generic path are `Prompter`'s, not this.
    pub fn new(family: GuardFamily, template: Option<ChatTemplate>, bos: String) -> Result<FamilyPrompter, GuardError> {
        match family {
            GuardFamily::GraniteGuardian | GuardFamily::Generic => {
                Err(GuardError::Prompt { message: format!("{family} prompts are written by the Granite Guardian prompter") })
            }
            _ => Ok(FamilyPrompter { family, template, bos }),
        }
    }

    pub fn family(&self) -> GuardFamily {
        self.family
    }

    /// The risks a request naming none judges: every risk the family's categories stand for
    /// (gpt-oss-safeguard takes any policy: the 9 harm risks, each in its definition's words).
    pub fn default_risks(&self) -> Vec<Risk> {
        match self.family.taxonomy() {
            Some(table) => taxonomy::judged_risks(table),
            None => Risk::HARM.to_vec(),
        }
    }

    /// The request's checks for this family, then its prompts in verdict order, each with the
    /// risks its answer is read for. `risks` in request order (built-in and custom names).
    pub fn render(
        &self,
        input: &GuardInput,
        risks: &[String],
        customs: &[CustomRisk],
        think: bool,
    ) -> Result<Vec<(GuardPrompt, Vec<RiskName>)>, GuardError> {
        if input.user.trim().is_empty() {
            return Err(GuardError::UserRequired);
        }
        if think {
            return Err(GuardError::ThinkRequiresFormat33);
        }
        let judged = self.default_risks();
        let mut names: Vec<RiskName> = Vec::new();
        let defaults: Vec<String> = match (risks.is_empty(), customs.is_empty()) {
            (true, true) => judged.iter().map(|r| r.name().to_string()).collect(),
            (true, false) => customs.iter().map(|c| c.name.clone()).collect(),
            (false, _) => risks.to_vec(),
        };
        for name in &defaults {
            let risk = match (customs.iter().find(|c| c.name == *name), Risk::from_name(name)) {
                (Some(c), _) => RiskName::Custom(c.name.clone()),
                (None, Some(r)) if judged.contains(&r) => RiskName::Builtin(r),
                (None, Some(r)) => return Err(GuardError::RiskNotJudged { family: self.family, risk: r, judged: judged.clone() }),
                (None, None) => return Err(GuardError::InvalidRisk(name.clone())),
            };
            if !names.contains(&risk) {
                names.push(risk);
            }
        }
        match self.family {
            GuardFamily::ShieldGemma => names.into_iter().map(|name| Ok((self.shieldgemma(input, &name, customs)?, vec![name]))).collect(),
            GuardFamily::GptOssSafeguard => {
                names.into_iter().map(|name| Ok((self.safeguard(input, &name, customs)?, vec![name]))).collect()
            }
            _ => self.one_answer(input, names, customs),
        }
    }

    /// One prompt for all the risks (Llama Guard, Qwen3Guard): the answer names categories.
    fn one_answer(
        &self,
        input: &GuardInput,
        names: Vec<RiskName>,
        customs: &[CustomRisk],
    ) -> Result<Vec<(GuardPrompt, Vec<RiskName>)>, GuardError> {
        if let Some(c) = customs.first() {
            return Err(GuardError::CustomRisk(format!(
                "{}: {} judges its own categories and takes no definition; custom risks need granite-guardian, shieldgemma or a generic model",
                c.name, self.family
            )));
        }
        let risks: Vec<Risk> = names.iter().filter_map(RiskName::builtin).collect();
        let parts = self.template.as_ref().is_some_and(|t| llama_guard::reads_content_parts(t.source()));
        let messages = llama_guard::messages(input, parts);
        let text = match (&self.template, self.family) {
            // Qwen3Guard's template writes its own assistant header: its model card renders it
            // without the generation prompt
            (Some(t), family) => {
                let add_generation_prompt = family != GuardFamily::Qwen3Guard;
                t.render(&ChatInput { add_generation_prompt, ..ChatInput::new(messages) })?
            }
            (None, GuardFamily::Qwen3Guard) => qwen3guard::render_builtin(input),
            (None, _) => llama_guard::render_builtin(input)?,
        };
        let first = risks.first().copied().unwrap_or(Risk::Harm);
        let reader = match self.family {
            GuardFamily::Qwen3Guard => Reader::Qwen3Guard(risks),
            _ => Reader::LlamaGuard(risks),
        };
        Ok(vec![(self.prompt(first, reader, text), names)])
    }

    /// One prompt per policy: a risk's harm type, or a custom risk's definition.
    fn shieldgemma(&self, input: &GuardInput, name: &RiskName, customs: &[CustomRisk]) -> Result<GuardPrompt, GuardError> {
        let guideline = match name {
            RiskName::Custom(n) => custom_definition(customs, n).to_string(),
            RiskName::Builtin(r) => shieldgemma::policy(*r, input.assistant().is_some()).unwrap_or_default(),
        };
        let text = match &self.template {
            Some(t) => {
                let (messages, extra) = shieldgemma::template_input(input, &guideline);
                t.render(&ChatInput { add_generation_prompt: true, extra, ..ChatInput::new(messages) })?
            }
            None => shieldgemma::render_builtin(&self.bos, input, &guideline),
        };
        // scored as Granite Guardian 3.0 is: P(Yes) at the first position
        Ok(self.prompt(name.builtin().unwrap_or(Risk::Harm), Reader::Guardian, text))
    }

    /// One prompt per policy, through the model's harmony template (which it needs).
    fn safeguard(&self, input: &GuardInput, name: &RiskName, customs: &[CustomRisk]) -> Result<GuardPrompt, GuardError> {
        let judged = if input.assistant().is_some() { Judged::Assistant } else { Judged::User };
        let policy = match name {
            RiskName::Custom(n) => safeguard::policy(n, custom_definition(customs, n), judged),
            RiskName::Builtin(r) => safeguard::risk_policy(*r, judged).unwrap_or_default(),
        };
        let template = self.template.as_ref().ok_or_else(|| GuardError::Prompt {
            message: "a gpt-oss-safeguard model needs its harmony chat template (tokenizer.chat_template)".into(),
        })?;
        let mut extra = serde_json::Map::new();
        extra.insert("reasoning_effort".into(), "low".into());
        let text =
            template.render(&ChatInput { add_generation_prompt: true, extra, ..ChatInput::new(safeguard::messages(input, &policy)) })?;
        Ok(self.prompt(name.builtin().unwrap_or(Risk::Harm), Reader::Safeguard, text))
    }

    fn prompt(&self, risk: Risk, reader: Reader, text: String) -> GuardPrompt {
        let path = if self.template.is_some() { PromptPath::FamilyTemplate } else { PromptPath::Builtin };
        GuardPrompt { risk, format: GuardFormat::V3_0, think: false, path, text, reader }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_told_by_template_or_name() {
        let lg = "... <BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violent Crimes.\n ... - First line must read 'safe' or 'unsafe'.";
        assert_eq!(detect(Some(lg), &[]), Some(GuardFamily::LlamaGuard));
        let qwen3guard = "<BEGIN SAFETY POLICY> ... <BEGIN UNSAFE CONTENT CATEGORIES> ... 'Safety: Controversial'";
        assert_eq!(detect(Some(qwen3guard), &[]), Some(GuardFamily::Qwen3Guard));
        assert_eq!(detect(None, &["Qwen3Guard Gen 0.6B"]), Some(GuardFamily::Qwen3Guard));
        assert_eq!(detect(Some("<|channel|> ... <|start|>"), &["Gpt Oss Safeguard 20b"]), Some(GuardFamily::GptOssSafeguard));
        assert_eq!(detect(Some("<|channel|> ... <|start|>"), &["Gpt Oss 20b"]), None);
        let sg = "{{- bos_token }}You are a policy expert trying to help determine whether a user prompt";
        assert_eq!(detect(Some(sg), &[]), Some(GuardFamily::ShieldGemma));
        assert_eq!(detect(None, &["Llama Guard 3 8B"]), Some(GuardFamily::LlamaGuard));
        assert_eq!(detect(None, &["Llama-Guard-3-1B"]), Some(GuardFamily::LlamaGuard));
        assert_eq!(detect(None, &["Shieldgemma 2b"]), Some(GuardFamily::ShieldGemma));
        assert_eq!(detect(Some("{{ messages }}"), &["granite-guardian-3.2-5b"]), None);
        for f in GuardFamily::ALL {
            assert_eq!(GuardFamily::parse(f.name()), Some(f));
        }
    }
}
