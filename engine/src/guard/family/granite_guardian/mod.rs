//! The Granite Guardian family, and the generic path that asks any chat model in Guardian's
//! layout or in its own words (`super::generic`): how an API request (format, risk, input)
//! becomes the model's native inputs (`messages`, `guardian_config`, template variables —
//! `fixtures/guardian/api-mapping.json`), and how those become the prompt text: through the
//! GGUF's own Guardian chat template, through the built-in renderer of the format when the file
//! has no usable template, or, for any other chat model, as the 3.2 layout inside one user
//! message of the model's own template (guard.md §3).

use serde_json::{json, Map, Value};

use crate::chat::{ChatInput, ChatTemplate};
use crate::model::Model;

use super::generic::{self, GenericPrompt};
use crate::guard::custom::CustomRisk;
use crate::guard::error::GuardError;
use crate::guard::prompt::{GuardPrompt, PromptPath, Reader};
use crate::guard::risks::{detect_format, CheckedRequest, Detection, GuardFormat, GuardInput, Risk, RiskGroup};

/// What a Guardian template (or the built-in renderer, which takes the same inputs) is given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NativeRequest {
    /// `{role, content}` messages in the format's roles (user, assistant, context, tools, system).
    pub messages: Vec<Value>,
    /// `None`: the variable is not passed at all (the template's default risk, `harm`).
    pub guardian_config: Option<Map<String, Value>>,
    /// Further template variables: `documents`, `available_tools`, `think` (3.3).
    pub extra: Map<String, Value>,
    pub add_generation_prompt: bool,
}

fn message(role: &str, content: impl Into<Value>) -> Value {
    json!({ "role": role, "content": content.into() })
}

impl NativeRequest {
    /// The native inputs the guard sends for one risk (`api-mapping.json`): the 9 harm risks judge
    /// `[user]` or `[user, assistant]`, after the conversation's earlier turns (`history`); RAG risks use IBM's cookbook shapes (3.0 context
    /// relevance `[user, context]`, 3.2 `[context, user]`, 3.3 documents); 3.0 gets a custom
    /// definition (the 3.2 text) for the risks its bank lacks. The input should have passed
    /// [`check_request`](crate::guard::risks::check_request); missing parts are simply left out.
    pub fn for_risk(format: GuardFormat, risk: Risk, input: &GuardInput, think: bool) -> NativeRequest {
        let user = || message("user", input.user.as_str());
        let assistant = || input.assistant().map(|a| message("assistant", a));
        let context = || input.context().map(|c| message("context", c));
        let mut messages: Vec<Value> = Vec::new();
        let mut config = Map::new();
        let mut extra = Map::new();
        match format {
            GuardFormat::V3_0 | GuardFormat::V3_2 => {
                config.insert("risk_name".into(), risk.native_id().into());
                match risk {
                    Risk::ContextRelevance if format == GuardFormat::V3_0 => {
                        messages.push(user());
                        messages.extend(context());
                    }
                    Risk::ContextRelevance => {
                        messages.extend(context());
                        messages.push(user());
                    }
                    Risk::Groundedness => {
                        messages.extend(context());
                        messages.extend(assistant());
                    }
                    Risk::FunctionCallHallucination => {
                        messages.push(user());
                        // 3.0 has no slot for tools; 3.2 lists them between user and assistant.
                        if format == GuardFormat::V3_2 {
                            messages.extend(tools_3_2(input).map(|t| message("tools", t)));
                        }
                        messages.extend(assistant());
                    }
                    _ => {
                        messages.extend(input.history.iter().cloned());
                        messages.push(user());
                        messages.extend(assistant());
                    }
                }
                if !risk.is_native(format) {
                    let judged = risk.judged(input.assistant().is_some());
                    if let Some(def) = risk.definition(format, judged) {
                        config.insert("risk_definition".into(), def.into());
                    }
                }
            }
            GuardFormat::V3_3 => {
                config.insert("criteria_id".into(), risk.native_id().into());
                match risk {
                    Risk::ContextRelevance => messages.push(user()),
                    Risk::Groundedness => messages.extend(assistant()),
                    _ => {
                        messages.extend(input.history.iter().cloned());
                        messages.push(user());
                        messages.extend(assistant());
                    }
                }
                if risk.group() == RiskGroup::Rag && risk != Risk::AnswerRelevance {
                    if let Some(c) = input.context() {
                        extra.insert("documents".into(), json!([{ "doc_id": "0", "text": c }]));
                    }
                }
                if risk == Risk::FunctionCallHallucination {
                    if let Some(tools) = tools_3_3(input) {
                        extra.insert("available_tools".into(), tools);
                    }
                }
                extra.insert("think".into(), think.into());
            }
        }
        NativeRequest { messages, guardian_config: Some(config), extra, add_generation_prompt: true }
    }

    /// The same inputs as a chat-template render: `guardian_config` is passed only when present.
    pub fn to_chat_input(&self) -> ChatInput {
        let mut extra = self.extra.clone();
        if let Some(config) = &self.guardian_config {
            extra.insert("guardian_config".into(), Value::Object(config.clone()));
        }
        ChatInput { messages: self.messages.clone(), tools: None, add_generation_prompt: self.add_generation_prompt, now: None, extra }
    }
}

/// IBM's tool shape is the bare `{name, description, parameters}`; an OpenAI tool object wraps it
/// as `{type: "function", function: {...}}`, which is unwrapped so the model sees what it was
/// trained on.
fn unwrap_tool(tool: &Value) -> Value {
    match (tool.get("type").and_then(Value::as_str), tool.get("function")) {
        (Some("function"), Some(f)) if f.is_object() => f.clone(),
        _ => tool.clone(),
    }
}

/// The context as a tool list when it holds JSON (how IBM's cookbooks pass the tools).
fn context_tools(input: &GuardInput) -> Option<(&str, Value)> {
    let text = input.context()?;
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Array(_) | Value::Object(_))) => Some((text, v)),
        _ => None,
    }
}

/// The content of the 3.2 `tools` message: `input.tools` as a JSON list (the template
/// pretty-prints it), else the context's JSON text as the string it is (IBM's 3.2 cookbook passes
/// `json.dumps(tools)`, which the template shows as a JSON string literal).
fn tools_3_2(input: &GuardInput) -> Option<Value> {
    match input.tools() {
        Some(tools) => Some(Value::Array(tools.iter().map(unwrap_tool).collect())),
        None => context_tools(input).map(|(text, _)| Value::String(text.to_string())),
    }
}

/// 3.3's `available_tools`: always a parsed list.
fn tools_3_3(input: &GuardInput) -> Option<Value> {
    match input.tools() {
        Some(tools) => Some(Value::Array(tools.iter().map(unwrap_tool).collect())),
        None => context_tools(input).map(|(_, v)| match v {
            Value::Array(_) => v,
            other => Value::Array(vec![other]),
        }),
    }
}

/// Renders guard prompts for one model. Cheap to share: build once per model.
#[derive(Debug)]
pub struct Prompter {
    detection: Detection,
    /// The Guardian template (when `detection.template_format` is set) or, for a generic model,
    /// its chat template; `None` for a Guardian model rendered by the built-in renderer.
    template: Option<ChatTemplate>,
    /// The prompt variant on the generic path (`generic`).
    generic: GenericPrompt,
}

impl Prompter {
    /// Detects the model's guard format and prompt path from its metadata (guard.md §3).
    pub fn from_model(model: &Model) -> Result<Prompter, GuardError> {
        let file = model.file();
        let names: Vec<&str> = ["general.name", "general.basename", "general.finetune"].iter().filter_map(|k| file.get_str(k)).collect();
        let source = file.get_str("tokenizer.chat_template");
        let mut detection = detect_format(source, &names);
        let template = match (detection.guardian, detection.template_format) {
            (false, _) => Some(ChatTemplate::from_model(model)?),
            (true, None) => None,
            (true, Some(format)) => match ChatTemplate::from_model(model) {
                Ok(t) => Some(t),
                // The built-in renderer says the same thing, so a Guardian template that minijinja
                // cannot compile is no reason to refuse the model.
                Err(e) => {
                    tracing::warn!("the Guardian chat template does not compile ({e}); using the built-in {format} renderer");
                    detection.template_format = None;
                    None
                }
            },
        };
        Ok(Prompter { detection, template, generic: GenericPrompt::default() })
    }

    /// A Guardian model with this chat template source (its format detected from the template).
    pub fn with_guardian_template(source: &str) -> Result<Prompter, GuardError> {
        let detection = detect_format(Some(source), &[]);
        if detection.template_format.is_none() {
            return Err(GuardError::prompt("not a Granite Guardian chat template (it never reads guardian_config)"));
        }
        Ok(Prompter { detection, template: Some(ChatTemplate::new(source, None, None)?), generic: GenericPrompt::default() })
    }

    /// A Guardian model without a usable template: every format through the built-in renderer,
    /// `format` by default.
    pub fn builtin(format: GuardFormat) -> Prompter {
        Prompter {
            detection: Detection { format, guardian: true, template_format: None },
            template: None,
            generic: GenericPrompt::default(),
        }
    }

    /// Any other chat model as a guard, through its own chat template.
    pub fn generic(template: ChatTemplate) -> Prompter {
        Prompter {
            detection: Detection { format: GuardFormat::V3_0, guardian: false, template_format: None },
            template: Some(template),
            generic: GenericPrompt::default(),
        }
    }

    /// The prompt variant a generic model is asked with (no effect on a Guardian model).
    pub fn with_generic_prompt(mut self, variant: GenericPrompt) -> Prompter {
        self.generic = variant;
        self
    }

    pub fn generic_prompt(&self) -> GenericPrompt {
        self.generic
    }

    pub fn detection(&self) -> Detection {
        self.detection
    }

    /// The format a request without one uses (before an evaluator-wide default).
    pub fn default_format(&self) -> GuardFormat {
        self.detection.format
    }

    pub fn is_guardian(&self) -> bool {
        self.detection.guardian
    }

    /// The path a prompt of `format` takes: the model's template only for its own format.
    pub fn path(&self, format: GuardFormat) -> PromptPath {
        match self.detection.template_format {
            _ if !self.detection.guardian => PromptPath::Generic,
            Some(f) if f == format => PromptPath::GuardianTemplate,
            _ => PromptPath::Builtin,
        }
    }

    /// The prompt for one risk. The request should have passed
    /// [`check_request`](crate::guard::risks::check_request).
    pub fn render(&self, format: GuardFormat, risk: Risk, input: &GuardInput, think: bool) -> Result<GuardPrompt, GuardError> {
        let path = self.path(format);
        if path == PromptPath::Generic {
            let text = if self.generic.covers(risk) {
                let template = self.template.as_ref().ok_or_else(|| GuardError::prompt("generic guard without a chat template"))?;
                let messages = generic::messages(self.generic, risk, input);
                template.render(&ChatInput { add_generation_prompt: true, ..ChatInput::new(messages) })?
            } else {
                self.render_generic(&NativeRequest::for_risk(GuardFormat::V3_2, risk, input, false))?
            };
            return Ok(GuardPrompt { risk, format: GuardFormat::V3_0, think: false, path, text, reader: Reader::Guardian });
        }
        let mut native = NativeRequest::for_risk(format, risk, input, think);
        if path == PromptPath::GuardianTemplate {
            self.adapt_to_template(&mut native);
        }
        let text = self.render_native(format, &native)?;
        Ok(GuardPrompt { risk, format, think: think && format == GuardFormat::V3_3, path, text, reader: Reader::Guardian })
    }

    /// The prompt of a custom risk (`custom`). It is decoded as a harm risk of `format` (3.0 on
    /// the generic path): `risk` names that stand-in, the caller knows the real name.
    pub fn render_custom(
        &self,
        format: GuardFormat,
        custom: &CustomRisk,
        input: &GuardInput,
        think: bool,
    ) -> Result<GuardPrompt, GuardError> {
        let path = self.path(format);
        if path == PromptPath::Generic {
            let text = match self.generic {
                GenericPrompt::Layout => self.render_generic(&custom.native(GuardFormat::V3_2, input, false))?,
                GenericPrompt::Direct | GenericPrompt::FewShot | GenericPrompt::QuestionFirst => {
                    let template = self.template.as_ref().ok_or_else(|| GuardError::prompt("generic guard without a chat template"))?;
                    template.render(&ChatInput {
                        add_generation_prompt: true,
                        ..ChatInput::new(generic::custom_messages(self.generic, &custom.definition, input))
                    })?
                }
            };
            return Ok(GuardPrompt { risk: Risk::Harm, format: GuardFormat::V3_0, think: false, path, text, reader: Reader::Guardian });
        }
        let text = self.render_native(format, &custom.native(format, input, think))?;
        Ok(GuardPrompt { risk: Risk::Harm, format, think: think && format == GuardFormat::V3_3, path, text, reader: Reader::Guardian })
    }

    /// The prompts of a checked request, one per risk in its order (a scan: the 9 harm risks).
    pub fn render_all(&self, request: &CheckedRequest, input: &GuardInput) -> Result<Vec<GuardPrompt>, GuardError> {
        request.risks.iter().map(|&r| self.render(request.format, r, input, request.think)).collect()
    }

    /// Renders native inputs of `format` (the template-level interface: custom risks, system
    /// messages, several documents...) through the model's template for its own format, else
    /// through the built-in renderer. On the generic path: the 3.2 layout in the chat template.
    pub fn render_native(&self, format: GuardFormat, native: &NativeRequest) -> Result<String, GuardError> {
        match (self.path(format), &self.template) {
            (PromptPath::GuardianTemplate, Some(t)) => Ok(t.render(&native.to_chat_input())?),
            (PromptPath::Generic, Some(_)) => self.render_generic(native),
            _ => builtin::render(format, native),
        }
    }

    /// guard.md §3 for a non-Guardian model: the 3.2 prompt's user turn (the text between
    /// `<|start_of_role|>user<|end_of_role|>` and `<|end_of_text|>`) as the one user message of
    /// the model's own template, with its generation prompt.
    fn render_generic(&self, native_3_2: &NativeRequest) -> Result<String, GuardError> {
        let template = self.template.as_ref().ok_or_else(|| GuardError::prompt("generic guard without a chat template"))?;
        let body = builtin::user_turn_3_2(native_3_2)?;
        let input = ChatInput { add_generation_prompt: true, ..ChatInput::new(vec![message("user", body)]) };
        Ok(template.render(&input)?)
    }

    /// A 3.0-format template that has one of 3.0's custom risks in its own bank (a 3.1 template
    /// knows `function_call`) refuses a definition for it ("existing risk name..."): send the
    /// name alone (`api-mapping.json` notes).
    fn adapt_to_template(&self, native: &mut NativeRequest) {
        let (Some(template), Some(config)) = (&self.template, native.guardian_config.as_mut()) else { return };
        let Some(name) = config.get("risk_name").and_then(Value::as_str) else { return };
        let source = template.source();
        if config.contains_key("risk_definition") && (source.contains(&format!("\"{name}\"")) || source.contains(&format!("'{name}'"))) {
            config.remove("risk_definition");
        }
    }
}

mod builtin;

#[cfg(test)]
mod tests;
