//! The `/v1/chat/completions` request, typed: messages (roles, text or content parts, earlier
//! tool calls), function tools, `tool_choice`, `response_format`, llama-server's `grammar`
//! (GBNF), logprobs, `reasoning_format`,
//! the guardrails field and the shared sampling fields. `/v1/messages` and `/v1/responses` build
//! the typed request they mean (`ConvertedChat`: messages, tools and settings already read by
//! their own parsers), never a JSON body to read again. `ChatCompletionRequest::check` applies
//! the cross-field rules and gives the `ChatRequest` the route runs.

use engine::grammar::{Constraint, ToolSpec};
use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};

use super::guard::GuardrailsField;
use super::sampling::{int_in, CommonParams, SamplingRequest, Timeouts};
use super::{nested_error, parse, ModelName};
use crate::error::ApiError;
use crate::vision::{media_marker, ImagePart};

#[derive(Debug, Default, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    /// Required but by `/apply-template` (see [`ChatCompletionRequest::model_id`]).
    #[serde(default)]
    model: Option<ModelName>,
    #[serde(default)]
    messages: Option<Vec<ChatMessage>>,
    #[serde(default)]
    tools: Option<Vec<ToolDef>>,
    #[serde(default)]
    tool_choice: Option<ToolChoiceField>,
    #[serde(default)]
    response_format: Option<ResponseFormat>,
    /// llama-server's `grammar`: a GBNF grammar the reply follows (empty: none).
    #[serde(default)]
    grammar: Option<String>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default, deserialize_with = "crate::requests::whole_number")]
    top_logprobs: Option<u64>,
    #[serde(default)]
    reasoning_format: Option<ReasoningFormat>,
    /// OpenAI's `reasoning_effort`, given to the template as `reasoning_effort` (gpt-oss's
    /// `Reasoning: low|medium|high`).
    #[serde(default)]
    reasoning_effort: Option<ReasoningEffort>,
    /// Further template variables (llama-server's and vLLM's `chat_template_kwargs`, e.g.
    /// Qwen3's `enable_thinking`).
    #[serde(default)]
    chat_template_kwargs: Option<Map<String, Value>>,
    /// vLLM's `continue_final_message`: the reply goes on from the text of the last message, an
    /// assistant's (absent: the server's [`ChatDefaults`] decide).
    #[serde(default)]
    continue_final_message: Option<bool>,
    /// vLLM's `add_generation_prompt`: false ends the prompt where the template's messages end,
    /// without opening an assistant turn.
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    /// The request's guardrails (`guardrails.rs` reads it against the guard models).
    #[serde(default)]
    pub guard: Option<GuardrailsField>,
    #[serde(skip)]
    pub sampling: SamplingRequest,
}

/// What the server assumes where a chat request does not say.
#[derive(Clone, Copy, Debug)]
pub struct ChatDefaults {
    /// A last message that is an assistant's text is continued, as llama-server does
    /// (`--no-prefill-assistant` turns it off: a new assistant turn follows it).
    pub prefill_assistant: bool,
}

impl Default for ChatDefaults {
    fn default() -> ChatDefaults {
        ChatDefaults { prefill_assistant: true }
    }
}

/// Where the rendered prompt leaves the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PromptEnd {
    /// At a new assistant turn: the template's generation prompt (the usual case).
    NewTurn,
    /// Inside the last message, an assistant's: the reply continues its text (a prefill).
    Continue,
    /// Right after the messages as the template prints them (`add_generation_prompt: false`).
    AfterMessages,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ChatMessage {
    role: Role,
    #[serde(default)]
    content: Option<MessageContent>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallIn>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    /// Fields this server does not read, passed on to the template.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// A message's content: text, or content parts whose texts are joined, each image part
/// standing as the media marker in the text (its rows replace it in the prompt).
#[derive(Debug, Clone)]
struct MessageContent {
    text: String,
    /// Each image part and its index among the parts.
    images: Vec<(usize, ImagePart)>,
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MessageContent, D::Error> {
        struct Content;
        impl<'de> Visitor<'de> for Content {
            type Value = MessageContent;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MessageContent, E> {
                Ok(MessageContent { text: s.to_string(), images: Vec::new() })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MessageContent, A::Error> {
                let mut content = MessageContent { text: String::new(), images: Vec::new() };
                let mut index = 0;
                while let Some(part) = seq.next_element::<ContentPart>()? {
                    match part {
                        ContentPart::Text(t) => content.text.push_str(&t),
                        ContentPart::Image(image) => {
                            content.text.push_str(media_marker());
                            content.images.push((index, image));
                        }
                    }
                    index += 1;
                }
                Ok(content)
            }
        }
        d.deserialize_any(Content)
    }
}

/// A content part: text, or an image (`image_url`: `{"url", "detail"}`); audio parts need an
/// encoder no model has.
enum ContentPart {
    Text(String),
    Image(ImagePart),
}

impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ContentPart, D::Error> {
        let part = Value::deserialize(d)?;
        match part.get("type").and_then(Value::as_str) {
            Some("text") => part
                .get("text")
                .and_then(Value::as_str)
                .map(|t| ContentPart::Text(t.to_string()))
                .ok_or_else(|| D::Error::custom(".text must be a string")),
            Some("image_url") => {
                let Some(Value::Object(image)) = part.get("image_url") else {
                    return Err(D::Error::custom(".image_url must be an object: {\"url\": ..., \"detail\": ...}"));
                };
                let url = image.get("url").and_then(Value::as_str).ok_or_else(|| D::Error::custom(".image_url.url must be a string"))?;
                let detail = match part.pointer("/image_url/detail") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(d)) if matches!(d.as_str(), "auto" | "low" | "high") => Some(d.clone()),
                    Some(_) => return Err(D::Error::custom(".image_url.detail must be auto, low or high")),
                };
                Ok(ContentPart::Image(ImagePart { url: url.to_string(), detail }))
            }
            Some("input_image") | Some("input_audio") => {
                Err(D::Error::custom("is an input_image or audio part; chat messages take images as image_url parts"))
            }
            _ => Err(D::Error::custom("has an unknown type")),
        }
    }
}

/// An earlier tool call of an assistant turn, as the templates read it.
#[derive(Debug, Clone, Deserialize)]
struct ToolCallIn {
    id: String,
    #[serde(rename = "type")]
    #[allow(dead_code)]
    kind: FunctionKind,
    function: FunctionCallIn,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FunctionKind {
    Function,
}

#[derive(Debug, Clone, Deserialize)]
struct FunctionCallIn {
    name: String,
    arguments: Arguments,
}

/// A call's arguments: JSON text, or the object.
#[derive(Debug, Clone)]
struct Arguments(Value);

impl<'de> Deserialize<'de> for Arguments {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Arguments, D::Error> {
        match Value::deserialize(d)? {
            v @ (Value::String(_) | Value::Object(_)) => Ok(Arguments(v)),
            _ => Err(D::Error::custom("must be JSON text or an object")),
        }
    }
}

/// A function tool: checked, and kept as sent (the templates print it).
#[derive(Debug, Clone)]
pub struct ToolDef {
    name: String,
    parameters: Option<Value>,
    raw: Value,
}

#[derive(Deserialize)]
struct ToolShape {
    #[serde(rename = "type")]
    #[allow(dead_code)]
    kind: FunctionKind,
    function: FunctionDef,
}

#[derive(Deserialize)]
struct FunctionDef {
    name: ToolName,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

struct ToolName(String);

/// What a tool's name may be: what the tool-call grammar and the templates can carry.
const TOOL_NAME_RULE: &str = "must be a non-empty name of letters, digits, _ or -";

fn is_tool_name(n: &str) -> bool {
    !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl<'de> Deserialize<'de> for ToolName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolName, D::Error> {
        match Value::deserialize(d)? {
            Value::String(n) if is_tool_name(&n) => Ok(ToolName(n)),
            _ => Err(D::Error::custom(TOOL_NAME_RULE)),
        }
    }
}

impl<'de> Deserialize<'de> for ToolDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolDef, D::Error> {
        let raw = Value::deserialize(d)?;
        let shape: ToolShape = serde_path_to_error::deserialize(&raw).map_err(|e| D::Error::custom(nested_error(e)))?;
        Ok(ToolDef { name: shape.function.name.0, parameters: shape.function.parameters.map(Value::Object), raw })
    }
}

/// `tool_choice`: `none`, `auto`, `required` or `{"type": "function", "function": {"name"}}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

#[derive(Debug, Clone)]
struct ToolChoiceField(ToolChoice);

impl<'de> Deserialize<'de> for ToolChoiceField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolChoiceField, D::Error> {
        let choice = match Value::deserialize(d)? {
            Value::String(s) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => return Err(D::Error::custom(format!("must be none, auto, required or a function, got {other:?}"))),
            },
            v => match v.pointer("/function/name").and_then(Value::as_str) {
                Some(name) => ToolChoice::Named(name.to_string()),
                None => {
                    return Err(D::Error::custom("must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}"))
                }
            },
        };
        Ok(ToolChoiceField(choice))
    }
}

/// `response_format`: text, or JSON (any object, or under a schema) decoded under the grammar.
#[derive(Debug, Clone)]
struct ResponseFormat(Option<Constraint>);

impl<'de> Deserialize<'de> for ResponseFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ResponseFormat, D::Error> {
        let rf = Value::deserialize(d)?;
        match rf.get("type").and_then(Value::as_str) {
            Some("text") => Ok(ResponseFormat(None)),
            Some("json_object") => Ok(ResponseFormat(Some(Constraint::JsonObject))),
            Some("json_schema") => match rf.pointer("/json_schema/schema") {
                Some(schema @ Value::Object(_)) => Ok(ResponseFormat(Some(Constraint::JsonSchema(schema.clone())))),
                _ => Err(D::Error::custom(".json_schema.schema must be a JSON schema object")),
            },
            _ => Err(D::Error::custom(".type must be text, json_object or json_schema")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ReasoningFormat {
    Auto,
    Separate,
    None,
}

/// OpenAI's `reasoning_effort` (the Responses API's `reasoning.effort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// Everything a chat request asks for, checked.
pub(crate) struct ChatRequest {
    /// The messages as the templates read them: text content, `developer` as `system`,
    /// earlier calls' arguments as objects.
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    /// `none`: never parse calls; `auto` / `required` / a named function: parse them.
    pub tool_choice: ToolChoice,
    /// What the reply is decoded under: `response_format`, the forced tool call or `grammar`.
    pub constraint: Option<Constraint>,
    pub common: CommonParams,
    pub logprobs: Option<usize>,
    /// `reasoning_format: "none"` keeps a thinking block inline in the content; by default it is
    /// returned apart (`reasoning_content`).
    pub inline_reasoning: bool,
    /// Template variables beside the messages and tools ([`ChatCompletionRequest::template_vars`]).
    pub template_vars: Map<String, Value>,
    /// The image parts of the messages in order, each standing as the media marker in
    /// `messages`, with the field that holds it (for errors).
    pub images: Vec<(ImagePart, String)>,
    pub prompt_end: PromptEnd,
}

impl ChatRequest {
    /// The assistant text the reply continues (empty when it starts a new turn).
    pub fn continued_text(&self) -> &str {
        match (self.prompt_end, self.messages.last()) {
            (PromptEnd::Continue, Some(last)) => last.get("content").and_then(Value::as_str).unwrap_or_default(),
            _ => "",
        }
    }

    /// The messages with their images' markers taken out (what the guard reads).
    pub fn text_messages(&self) -> Vec<Value> {
        if self.images.is_empty() {
            return self.messages.clone();
        }
        self.messages
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if let Some(Value::String(text)) = m.get_mut("content") {
                    *text = text.replace(media_marker(), "");
                }
                m
            })
            .collect()
    }
}

/// The chat request that a `/v1/messages` or `/v1/responses` request means, built from what
/// their own parsers read.
pub(crate) struct ConvertedChat {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Option<Vec<ToolDef>>,
    /// `None`: the default (`auto` with tools).
    pub tool_choice: Option<ToolChoice>,
    pub response_format: Option<Constraint>,
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Whether a last message that is an assistant's text is continued (the converting API's
    /// rule, never the server's default).
    pub continue_final_message: bool,
    pub sampling: SamplingRequest,
}

impl From<ConvertedChat> for ChatCompletionRequest {
    fn from(c: ConvertedChat) -> ChatCompletionRequest {
        let continued = c.continue_final_message && c.messages.last().is_some_and(ChatMessage::continuable);
        ChatCompletionRequest {
            model: Some(ModelName(c.model)),
            messages: Some(c.messages),
            tools: c.tools,
            tool_choice: c.tool_choice.map(ToolChoiceField),
            response_format: Some(ResponseFormat(c.response_format)),
            reasoning_effort: c.reasoning_effort,
            continue_final_message: Some(continued),
            sampling: c.sampling,
            ..ChatCompletionRequest::default()
        }
    }
}

impl ToolDef {
    /// A function tool (`at`: the field that named it, for the error of a bad name), kept as the
    /// templates print a chat request's tools.
    pub(crate) fn function(
        name: &str,
        description: Option<&str>,
        parameters: Option<&Map<String, Value>>,
        at: &str,
    ) -> Result<ToolDef, ApiError> {
        if !is_tool_name(name) {
            return Err(ApiError::invalid_param(at, format!("{at} {TOOL_NAME_RULE}")));
        }
        let raw = json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}});
        Ok(ToolDef { name: name.to_string(), parameters: parameters.cloned().map(Value::Object), raw })
    }
}

/// Function tools `(name, description, parameters)` in order, as a converting route read them
/// (`tools[i].name` names a bad name).
pub(crate) fn function_tools<'a>(
    tools: impl Iterator<Item = (&'a str, Option<&'a str>, Option<&'a Map<String, Value>>)>,
) -> Result<Vec<ToolDef>, ApiError> {
    tools
        .enumerate()
        .map(|(i, (name, description, parameters))| ToolDef::function(name, description, parameters, &format!("tools[{i}].name")))
        .collect()
}

impl ChatMessage {
    /// A message of `role` with `text`.
    pub(crate) fn text(role: Role, text: String) -> ChatMessage {
        ChatMessage {
            role,
            content: Some(MessageContent { text, images: Vec::new() }),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            extra: Map::new(),
        }
    }

    /// The result of the call `call_id`.
    pub(crate) fn tool_result(call_id: String, text: String) -> ChatMessage {
        ChatMessage { tool_call_id: Some(call_id), ..ChatMessage::text(Role::Tool, text) }
    }

    /// An assistant turn: its text (none when empty and it made calls) and calls.
    pub(crate) fn assistant(text: String, calls: Vec<CallMade>) -> ChatMessage {
        let mut m = ChatMessage::text(Role::Assistant, text);
        for call in calls {
            m.add_call(call);
        }
        m
    }

    pub(crate) fn role(&self) -> Role {
        self.role
    }

    /// Adds a call to this assistant turn (a turn of calls alone has no text).
    pub(crate) fn add_call(&mut self, call: CallMade) {
        if self.content.as_ref().is_some_and(|c| c.text.is_empty() && c.images.is_empty()) {
            self.content = None;
        }
        let call = ToolCallIn {
            id: call.id,
            kind: FunctionKind::Function,
            function: FunctionCallIn { name: call.name, arguments: Arguments(call.arguments) },
        };
        self.tool_calls.get_or_insert_with(Vec::new).push(call);
    }

    /// The size of the message as the templates read it, in bytes of JSON (for bounds on what is
    /// kept).
    pub(crate) fn json_len(&self) -> usize {
        self.template_json().to_string().len()
    }
}

/// A call an assistant turn made: its id, the function, and the arguments (JSON text, or the
/// object).
pub(crate) struct CallMade {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

impl ChatCompletionRequest {
    pub fn from_body(body: &Value) -> Result<ChatCompletionRequest, ApiError> {
        let mut request: ChatCompletionRequest = parse(body)?;
        request.sampling = parse(body)?;
        Ok(request)
    }

    /// The model the request names.
    pub fn model_id(&self) -> Result<String, ApiError> {
        self.model.as_ref().map(|m| m.0.clone()).ok_or_else(|| ApiError::missing("model"))
    }

    /// The model, when the request names one.
    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.0.as_str())
    }

    /// The messages as the templates read them.
    pub fn messages(&self) -> Result<Vec<Value>, ApiError> {
        match &self.messages {
            None => Err(ApiError::missing("messages")),
            Some(list) if list.is_empty() => Err(ApiError::invalid_param("messages", "messages must be a non-empty array")),
            Some(list) => Ok(list.iter().map(ChatMessage::template_json).collect()),
        }
    }

    /// The image parts of the messages in order, with the field each came from.
    fn images(&self) -> Vec<(ImagePart, String)> {
        let mut out = Vec::new();
        for (i, m) in self.messages.iter().flatten().enumerate() {
            if let Some(content) = &m.content {
                for (j, image) in &content.images {
                    out.push((image.clone(), format!("messages[{i}].content[{j}].image_url.url")));
                }
            }
        }
        out
    }

    /// The variables the template is rendered with beside the messages and tools: the
    /// `chat_template_kwargs`, and `reasoning_effort` when the request names one. The kwargs may
    /// not replace what the request itself says (the messages the guardrails judge, the tools,
    /// the generation prompt): such a key is a 400.
    pub fn template_vars(&self) -> Result<Map<String, Value>, ApiError> {
        const RESERVED: [&str; 3] = ["messages", "tools", "add_generation_prompt"];
        let mut vars = self.chat_template_kwargs.clone().unwrap_or_default();
        if let Some(key) = RESERVED.iter().find(|k| vars.contains_key(**k)) {
            return Err(ApiError::invalid_param(
                "chat_template_kwargs",
                format!("chat_template_kwargs may not set {key}: the request's own field says it"),
            ));
        }
        if let Some(effort) = self.reasoning_effort {
            vars.insert("reasoning_effort".into(), Value::from(effort.as_str()));
        }
        Ok(vars)
    }

    /// Where the prompt ends. An explicit `continue_final_message: true` needs a last message
    /// that is an assistant's text without tool calls, and no `add_generation_prompt: true`
    /// beside it (vLLM's rules); left unsaid, such a last message is continued when `defaults`
    /// say so, and an explicit `add_generation_prompt` decides the rest.
    pub(crate) fn prompt_end(&self, defaults: &ChatDefaults) -> Result<PromptEnd, ApiError> {
        let continuable = self.messages.iter().flatten().last().is_some_and(ChatMessage::continuable);
        match (self.continue_final_message, self.add_generation_prompt) {
            (Some(true), Some(true)) => Err(ApiError::invalid_param(
                "continue_final_message",
                "continue_final_message and add_generation_prompt cannot both be true",
            )),
            (Some(true), _) if !continuable => Err(ApiError::invalid_param(
                "continue_final_message",
                "continue_final_message needs the last message to be an assistant's text without tool_calls",
            )),
            (Some(true), _) => Ok(PromptEnd::Continue),
            (_, Some(false)) => Ok(PromptEnd::AfterMessages),
            (None, None) if continuable && defaults.prefill_assistant => Ok(PromptEnd::Continue),
            _ => Ok(PromptEnd::NewTurn),
        }
    }

    /// The tools as sent (`None` when there are none).
    pub fn tools(&self) -> Option<Vec<Value>> {
        self.tools.as_ref().filter(|t| !t.is_empty()).map(|t| t.iter().map(|t| t.raw.clone()).collect())
    }

    fn tool_choice(&self) -> Result<ToolChoice, ApiError> {
        let tools = self.tools.as_deref().filter(|t| !t.is_empty());
        let bad = |m: String| ApiError::invalid_param("tool_choice", m);
        let choice = match &self.tool_choice {
            None => return Ok(if tools.is_some() { ToolChoice::Auto } else { ToolChoice::None }),
            Some(ToolChoiceField(c)) => c.clone(),
        };
        if choice != ToolChoice::None && tools.is_none() {
            return Err(bad("tool_choice needs tools".into()));
        }
        if let ToolChoice::Named(name) = &choice {
            if !tools.unwrap_or_default().iter().any(|t| &t.name == name) {
                return Err(bad(format!("tool_choice names {name:?}, which is not in tools")));
            }
        }
        Ok(choice)
    }

    /// The tool-call constraint over the tools (or only the one named).
    fn tool_specs(&self, only: Option<&str>) -> Constraint {
        let specs = self
            .tools
            .iter()
            .flatten()
            .filter(|t| only.is_none() || only == Some(t.name.as_str()))
            .map(|t| ToolSpec { name: t.name.clone(), parameters: t.parameters.clone().unwrap_or(Value::Null) })
            .collect();
        Constraint::ToolCall(specs)
    }

    /// The request checked for a model of `n_vocab` tokens.
    pub(crate) fn check(&self, n_vocab: usize, timeouts: &Timeouts, defaults: &ChatDefaults) -> Result<ChatRequest, ApiError> {
        let messages = self.messages()?;
        let prompt_end = self.prompt_end(defaults)?;
        let tool_choice = self.tool_choice()?;
        let logprobs = match (self.logprobs.unwrap_or(false), int_in("top_logprobs", self.top_logprobs, 0, 20)?) {
            (true, top) => Some(top.unwrap_or(0) as usize),
            (false, Some(_)) => return Err(ApiError::invalid_param("top_logprobs", "top_logprobs requires logprobs to be true")),
            (false, None) => None,
        };
        // a forced call (`required`, or a named function) is decoded under the tool-call grammar
        let forced = match &tool_choice {
            ToolChoice::Required => Some(self.tool_specs(None)),
            ToolChoice::Named(name) => Some(self.tool_specs(Some(name))),
            ToolChoice::None | ToolChoice::Auto => None,
        };
        let format = self.response_format.as_ref().and_then(|f| f.0.clone());
        let grammar = self.grammar.as_ref().filter(|g| !g.is_empty()).map(|g| Constraint::Grammar(g.clone()));
        let constraint = match (format, forced, grammar) {
            (Some(_), Some(_), _) => {
                return Err(ApiError::invalid_param("response_format", "response_format cannot be combined with a forced tool_choice"))
            }
            (Some(_), None, Some(_)) => {
                return Err(ApiError::invalid_param("grammar", "grammar cannot be combined with a JSON response_format"))
            }
            (None, Some(_), Some(_)) => {
                return Err(ApiError::invalid_param("grammar", "grammar cannot be combined with a forced tool_choice"))
            }
            (format, forced, grammar) => format.or(forced).or(grammar),
        };
        Ok(ChatRequest {
            messages,
            tools: self.tools(),
            tool_choice,
            constraint,
            common: self.sampling.params(n_vocab, timeouts)?,
            logprobs,
            inline_reasoning: self.reasoning_format == Some(ReasoningFormat::None),
            template_vars: self.template_vars()?,
            images: self.images(),
            prompt_end,
        })
    }
}

impl ChatMessage {
    /// An assistant's text without tool calls, which a reply may continue (a prefill).
    fn continuable(&self) -> bool {
        self.role == Role::Assistant
            && self.tool_calls.as_ref().is_none_or(Vec::is_empty)
            && self.content.as_ref().is_some_and(|c| c.images.is_empty())
    }

    /// The message as the templates read it: its content as text (an assistant turn of tool
    /// calls alone has none; other roles read a missing text as empty), `developer` as `system`
    /// (the templates know no `developer`), earlier calls' arguments as the objects the
    /// templates expect (`tool_call.arguments | tojson` would otherwise write the JSON text as
    /// one quoted string, which the model then imitates; arguments that are not a JSON object
    /// stay as they were sent).
    fn template_json(&self) -> Value {
        let mut m = self.extra.clone();
        let role = if self.role == Role::Developer { Role::System } else { self.role };
        m.insert("role".into(), json!(role));
        let content = match (&self.content, self.role) {
            (Some(MessageContent { text, .. }), _) => json!(text),
            (None, Role::Assistant) => Value::Null,
            (None, _) => json!(""),
        };
        m.insert("content".into(), content);
        if let Some(name) = &self.name {
            m.insert("name".into(), json!(name));
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), json!(id));
        }
        if let Some(calls) = &self.tool_calls {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    let arguments = match &c.function.arguments.0 {
                        Value::String(text) => match serde_json::from_str::<Value>(text) {
                            Ok(object @ Value::Object(_)) => object,
                            _ => Value::String(text.clone()),
                        },
                        other => other.clone(),
                    };
                    json!({"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": arguments}})
                })
                .collect();
            m.insert("tool_calls".into(), Value::Array(calls));
        }
        Value::Object(m)
    }
}
