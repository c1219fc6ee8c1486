//! Chat templates: a model's `tokenizer.chat_template` (Jinja) compiled once with minijinja and
//! rendered the way Hugging Face transformers' `render_jinja_template` renders it.
//!
//! transformers uses jinja2's `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True, extensions=[loopcontrols])` plus `raise_exception`, `strftime_now` and a
//! `tojson` that is plain `json.dumps` (no HTML escaping). The environment here reproduces that:
//! the same whitespace rules, Python's string/dict methods (minijinja-contrib's pycompat),
//! Python's printing of values and `json.dumps` byte for byte (`pyjson`).

mod pyjson;
mod rewrite;
mod tool_calls;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use minijinja::value::{Kwargs, Rest, Serde, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior, Value};

/// The clock type of [`ChatInput::now`], re-exported so callers need no chrono dependency.
pub use chrono::NaiveDateTime;
pub use pyjson::{dumps as json_dumps, float_repr, DumpOptions};
pub use tool_calls::{parse_tool_calls, ParsedReply, ToolCall};

/// The name the template is stored under; error messages say `(in chat_template:LINE)`.
const NAME: &str = "chat_template";

/// The fallback for models without a template: ChatML, as llama.cpp and HF's old default use it.
/// Unlike HF's old default it also accepts content given as a list of text parts, or null.
const CHATML: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' }}\
{% if message['content'] is string %}{{ message['content'] }}\
{% elif message['content'] is iterable %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}\
{% endif %}\
{{ '<|im_end|>' + '\\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template does not parse.
    #[error("chat template syntax error at line {line}: {message}")]
    Syntax { line: usize, message: String },
    /// The template called `raise_exception(message)`: usually it rejects the conversation
    /// (a role it does not support, roles not alternating...).
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    /// Rendering failed some other way (a type error, an undefined attribute...).
    #[error("chat template failed to render: {message}")]
    Render { line: Option<usize>, message: String },
}

/// What one render needs besides the template.
#[derive(Debug, Clone, Default)]
pub struct ChatInput {
    /// OpenAI / Hugging Face messages: `role`, `content` (a string or a list of parts),
    /// `tool_calls`, `tool_call_id`, `name`, `reasoning_content`...
    pub messages: Vec<serde_json::Value>,
    /// JSON-schema tools; `None` is passed to the template as `none`, as HF does.
    pub tools: Option<Vec<serde_json::Value>>,
    pub add_generation_prompt: bool,
    /// The clock `strftime_now` reads; `None` is the local time at the call.
    pub now: Option<NaiveDateTime>,
    /// Further template variables (`enable_thinking`, `documents`, ...); they override the
    /// standard ones of the same name.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatInput {
    pub fn new(messages: Vec<serde_json::Value>) -> ChatInput {
        ChatInput { messages, ..ChatInput::default() }
    }
}

/// A compiled chat template with the special-token texts it is rendered with.
/// Compile once, render many times (from any thread).
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
    fallback: bool,
    /// The template reads a message's content only as a list of typed parts (SmolVLM's,
    /// Idefics'): string contents are given to it as one text part, as llama.cpp does.
    typed_content: bool,
    /// The template writes OpenAI's harmony format (gpt-oss): an assistant message with tool
    /// calls may hold its analysis or its content, not both, and a null content is left out, as
    /// llama.cpp passes such messages to it.
    harmony: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// A rendered prompt's tokens: control-token text is parsed, and the vocabulary's BOS is added
/// (when it asks for one) only if the template did not already write it.
pub fn tokenize_rendered(tokenizer: &crate::tokenizer::Tokenizer, text: &str) -> Vec<crate::tokenizer::TokenId> {
    let bos_text = tokenizer.bos().and_then(|b| tokenizer.token_text(b));
    let has_bos = bos_text.is_some_and(|b| !b.is_empty() && text.as_bytes().starts_with(b));
    tokenizer.encode(text, !has_bos, true)
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` / `eos_token` are the tokenizer's texts for them
    /// (`None`: the variable is undefined in the template, as when HF's tokenizer has none).
    pub fn new(source: &str, bos_token: Option<&str>, eos_token: Option<&str>) -> Result<ChatTemplate, ChatError> {
        Self::build(source, bos_token, eos_token, false)
    }

    /// The GGUF's `tokenizer.chat_template` with the tokenizer's BOS/EOS texts; a model without
    /// one gets the ChatML fallback and an `info` line saying so.
    pub fn from_model(model: &crate::model::Model) -> Result<ChatTemplate, ChatError> {
        let tok = model.tokenizer();
        let text =
            |id: Option<crate::tokenizer::TokenId>| id.and_then(|id| tok.token_text(id)).map(|b| String::from_utf8_lossy(b).into_owned());
        let (bos, eos) = (text(tok.bos()), text(tok.eos()));
        match model.file().get_str("tokenizer.chat_template") {
            Some(source) => Self::new(source, bos.as_deref(), eos.as_deref()),
            None => {
                tracing::info!("the model has no tokenizer.chat_template; using the ChatML fallback");
                Self::build(CHATML, bos.as_deref(), eos.as_deref(), true)
            }
        }
    }

    /// The ChatML fallback (`<|im_start|>role\ncontent<|im_end|>\n` per message).
    pub fn chatml() -> ChatTemplate {
        Self::build(CHATML, None, None, true).expect("the built-in ChatML template compiles")
    }

    /// Whether this is the ChatML fallback rather than the model's own template.
    pub fn is_fallback(&self) -> bool {
        self.fallback
    }

    /// The template source as given (before `rewrite`'s changes).
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    fn build(source: &str, bos: Option<&str>, eos: Option<&str>, fallback: bool) -> Result<ChatTemplate, ChatError> {
        let mut env = environment();
        env.add_template_owned(NAME, rewrite::rewrite(source)).map_err(|e| ChatError::Syntax {
            line: e.line().unwrap_or(0),
            message: e.detail().map(str::to_string).unwrap_or_else(|| e.kind().to_string()),
        })?;
        let mut template = ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos.map(str::to_string),
            eos_token: eos.map(str::to_string),
            fallback,
            typed_content: false,
            harmony: source.contains("<|channel|>"),
        };
        template.typed_content = template.reads_only_typed_content();
        Ok(template)
    }

    /// Renders the conversation to the prompt text.
    /// Whether a user message's text shows in the output only when its content is a list of
    /// text parts (checked once, by rendering a probe both ways).
    fn reads_only_typed_content(&self) -> bool {
        const PROBE: &str = "\u{1}content probe\u{1}";
        let shows = |content: serde_json::Value| {
            let input = ChatInput::new(vec![serde_json::json!({"role": "user", "content": content})]);
            self.render(&input).is_ok_and(|out| out.contains(PROBE))
        };
        !shows(serde_json::json!(PROBE)) && shows(serde_json::json!([{"type": "text", "text": PROBE}]))
    }

    pub fn render(&self, input: &ChatInput) -> Result<String, ChatError> {
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        // What `render_jinja_template` passes: messages, tools and documents (None when absent),
        // add_generation_prompt, then the tokenizer's special tokens and the caller's kwargs.
        let mut messages: Vec<serde_json::Value> = input.messages.iter().map(alias_reasoning_fields).collect();
        if self.harmony {
            messages.iter_mut().for_each(harmony_call_message);
        }
        if self.typed_content {
            for m in &mut messages {
                if let Some(content) = m.get_mut("content").filter(|c| c.is_string()) {
                    *content = serde_json::json!([{"type": "text", "text": content.take()}]);
                }
            }
        }
        ctx.insert("messages".into(), Value::from(Serde(&messages)));
        let harmony_tools: Option<Vec<serde_json::Value>> =
            input.tools.as_ref().filter(|_| self.harmony).map(|tools| tools.iter().cloned().map(harmony_tool).collect());
        let tools = harmony_tools.as_ref().or(input.tools.as_ref());
        ctx.insert("tools".into(), tools.map_or(Value::from(()), |t| Value::from(Serde(t))));
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert("add_generation_prompt".into(), Value::from(input.add_generation_prompt));
        if let Some(bos) = &self.bos_token {
            ctx.insert("bos_token".into(), Value::from(bos.as_str()));
        }
        if let Some(eos) = &self.eos_token {
            ctx.insert("eos_token".into(), Value::from(eos.as_str()));
        }
        for (k, v) in &input.extra {
            ctx.insert(k.clone(), Value::from(Serde(v)));
        }
        // The clock differs per render, so strftime_now is a context function, not a global.
        let now = input.now;
        ctx.insert(
            "strftime_now".into(),
            Value::from_function(move |fmt: String| strftime(now.unwrap_or_else(|| chrono::Local::now().naive_local()), &fmt)),
        );
        let tmpl = self.env.get_template(NAME).map_err(render_error)?;
        tmpl.render(Value::from(ctx)).map_err(render_error)
    }
}

/// The environment transformers builds, in minijinja terms.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        // jinja2's default: one trailing newline of the source is dropped.
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // jinja2's default `Undefined`: prints empty, iterates empty, is false; reading an attribute
    // of it is an error.
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(py_method);
    env.add_filter("tojson", tojson);
    env.add_filter(rewrite::ITER_CHECK_FILTER, iter_check);
    // jinja2's tests where minijinja's differ: None is not iterable; strings and dicts are
    // sequences (as is Undefined, which has a length and items); booleans are numbers
    // (Python's bool is an int).
    env.add_test("iterable", |v: &Value| !v.is_none() && v.try_iter().is_ok());
    env.add_test("sequence", |v: &Value| {
        v.is_undefined() || matches!(v.kind(), ValueKind::String | ValueKind::Bytes | ValueKind::Seq | ValueKind::Map)
    });
    env.add_test("number", |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool));
    // jinja2's filters where minijinja's differ.
    env.add_filter("length", |v: &Value| if v.is_undefined() { Ok(0) } else { minijinja::filters::length(v) });
    env.add_filter("count", |v: &Value| if v.is_undefined() { Ok(0) } else { minijinja::filters::length(v) });
    env.add_filter("string", |state: &minijinja::State, v: &Value| match py_float(v) {
        Some(f) => Ok(Value::from(float_repr(f))),
        None => minijinja::filters::string(state, v),
    });
    env.add_filter("int", int_filter);
    env.add_filter("float", float_filter);
    env.add_filter("wordcount", |s: &str| {
        // Python's `len(re.findall(r"\w+", s))`.
        s.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).count()
    });
    env.add_function("raise_exception", raise_exception);
    env.set_formatter(|out, state, value| {
        // Python prints floats with repr (`1e+16`, not minijinja's positional digits).
        if let Some(f) = py_float(value) {
            return out.write_str(&float_repr(f)).map_err(|_| Error::from(ErrorKind::WriteFailure));
        }
        minijinja::escape_formatter(out, state, value)
    });
    env
}

fn py_float(v: &Value) -> Option<f64> {
    (v.kind() == ValueKind::Number && !v.is_integer()).then(|| f64::try_from(v.clone()).ok()).flatten()
}

/// jinja2's `int(value, default=0, base=10)`: a string that does not parse gives the default
/// instead of an error.
fn int_filter(state: &minijinja::State, value: &Value, default: Option<Value>, base: Option<u32>, kwargs: Kwargs) -> Result<Value, Error> {
    let fallback = match &default {
        Some(d) => d.clone(),
        None => kwargs.peek::<Option<Value>>("default")?.unwrap_or(Value::from(0)),
    };
    match minijinja::filters::int(state, value, default, base, kwargs) {
        Err(e) if value.kind() == ValueKind::String && e.kind() == ErrorKind::InvalidOperation => Ok(fallback),
        r => r,
    }
}

/// jinja2's `float(value, default=0.0)`, likewise.
fn float_filter(state: &minijinja::State, value: &Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let fallback = match &default {
        Some(d) => d.clone(),
        None => kwargs.peek::<Option<Value>>("default")?.unwrap_or(Value::from(0.0)),
    };
    match minijinja::filters::float(state, value, default, kwargs) {
        Err(e) if value.kind() == ValueKind::String && e.kind() == ErrorKind::InvalidOperation => Ok(fallback),
        r => r,
    }
}

/// Python methods on values: minijinja-contrib's pycompat plus the string methods it lacks.
fn py_method(state: &mut minijinja::State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "rsplit" => {
                let (sep, maxsplit): (Option<&str>, Option<i64>) = minijinja::value::from_args(args)?;
                return rsplit(s, sep, maxsplit.unwrap_or(-1)).map(Value::from);
            }
            "removeprefix" => {
                let (p,): (&str,) = minijinja::value::from_args(args)?;
                return Ok(Value::from(s.strip_prefix(p).unwrap_or(s)));
            }
            "removesuffix" => {
                let (p,): (&str,) = minijinja::value::from_args(args)?;
                return Ok(Value::from(s.strip_suffix(p).unwrap_or(s)));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Python's `str.rsplit(sep=None, maxsplit=-1)`.
fn rsplit(s: &str, sep: Option<&str>, maxsplit: i64) -> Result<Vec<String>, Error> {
    let limit = usize::try_from(maxsplit).ok();
    let mut parts: Vec<String> = match sep {
        Some("") => return Err(Error::new(ErrorKind::InvalidOperation, "ValueError: empty separator")),
        Some(sep) => match limit {
            Some(n) => s.rsplitn(n + 1, sep).map(str::to_string).collect(),
            None => s.rsplit(sep).map(str::to_string).collect(),
        },
        None => {
            // Runs of whitespace separate; the leftmost part keeps its leading whitespace when
            // the split count runs out.
            let mut out = Vec::new();
            let mut rest = s.trim_end();
            while !rest.is_empty() {
                if limit.is_some_and(|n| out.len() == n) {
                    out.push(rest.to_string());
                    break;
                }
                match rest.rfind(char::is_whitespace) {
                    Some(i) => {
                        let ws = rest[i..].chars().next().map_or(1, char::len_utf8);
                        out.push(rest[i + ws..].to_string());
                        rest = rest[..i].trim_end();
                    }
                    None => {
                        out.push(rest.to_string());
                        rest = "";
                    }
                }
            }
            out
        }
    };
    parts.reverse();
    Ok(parts)
}

/// The error `raise_exception` carries as its source, so that `render` can tell it apart.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Raised(String);

fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = message.to_string();
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

fn render_error(err: Error) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return ChatError::Raised(raised.0.clone());
        }
        source = e.source();
    }
    ChatError::Render { line: err.line(), message: err.to_string() }
}

/// What every `for` loop iterates (see `rewrite`): jinja2 raises where Python cannot iterate,
/// while minijinja would loop zero times over `none`.
fn iter_check(value: Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::None => Err(Error::new(ErrorKind::InvalidOperation, "TypeError: 'NoneType' object is not iterable")),
        _ => Ok(value),
    }
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<String, Error> {
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > NAMES.len() {
        return Err(Error::new(ErrorKind::TooManyArguments, "tojson takes at most 4 arguments"));
    }
    let arg = |i: usize| -> Result<Option<Value>, Error> {
        let kw: Option<Value> = kwargs.get(NAMES[i])?;
        Ok(args.get(i).cloned().or(kw).filter(|v| !v.is_none() && !v.is_undefined()))
    };
    let mut opts = DumpOptions::default();
    if let Some(v) = arg(0)? {
        opts.ensure_ascii = v.is_true();
    }
    if let Some(v) = arg(1)? {
        opts.indent = Some(match v.as_str() {
            Some(s) => s.to_string(),
            None => {
                let n = v.as_i64().ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "indent must be an int or a string"))?;
                " ".repeat(n.max(0) as usize)
            }
        });
    }
    if let Some(v) = arg(2)? {
        let parts: Vec<Value> = v.try_iter()?.collect();
        match parts.as_slice() {
            [i, k] if i.as_str().is_some() && k.as_str().is_some() => {
                opts.separators = Some((i.to_string(), k.to_string()));
            }
            _ => return Err(Error::new(ErrorKind::InvalidOperation, "separators must be a pair of strings")),
        }
    }
    if let Some(v) = arg(3)? {
        opts.sort_keys = v.is_true();
    }
    kwargs.assert_all_used()?;
    pyjson::dumps(value, &opts)
}

/// Python's `datetime.strftime` for the directives chrono shares with C's strftime; an unknown
/// directive is an error instead of chrono's panic.
fn strftime(now: chrono::NaiveDateTime, fmt: &str) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item> = StrftimeItems::new(fmt).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(Error::new(ErrorKind::InvalidOperation, format!("unsupported strftime format {fmt:?}")));
    }
    let mut out = String::new();
    write!(out, "{}", now.format_with_items(items.into_iter()))
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, format!("cannot format a naive time with {fmt:?}")))?;
    Ok(out)
}

/// HF's `_alias_reasoning_fields`: a message's reasoning given as `reasoning_content`, `thinking`
/// or `reasoning` is visible to the template as both `thinking` (first key) and
/// `reasoning_content` (last key unless already present), whichever name the template reads.
fn alias_reasoning_fields(message: &serde_json::Value) -> serde_json::Value {
    let Some(obj) = message.as_object() else { return message.clone() };
    let reasoning = ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| obj.get(*k).filter(|v| !v.is_null()));
    let Some(reasoning) = reasoning else { return message.clone() };
    let mut out = serde_json::Map::new();
    out.insert("thinking".into(), reasoning.clone());
    for (k, v) in obj {
        out.insert(k.clone(), v.clone());
    }
    out.insert("reasoning_content".into(), reasoning.clone());
    serde_json::Value::Object(out)
}

/// llama.cpp's adjustment of a message for the harmony template: an assistant message with tool
/// calls and reasoning (or a null content) passes no content.
fn harmony_call_message(message: &mut serde_json::Value) {
    let Some(obj) = message.as_object_mut() else { return };
    let calls = obj.get("tool_calls").and_then(|c| c.as_array()).is_some_and(|c| !c.is_empty());
    let reasoning = obj.get("thinking").is_some_and(|t| t.is_string());
    if calls && (reasoning || obj.get("content").is_some_and(|c| c.is_null())) {
        obj.remove("content");
    }
}

/// A tool for the harmony template: a function without a description gets an empty one. The
/// template writes `"// " + description` above each function, which fails on an undefined
/// value, while the description is optional in OpenAI's API (and harmony's own renderer leaves
/// the comment out).
fn harmony_tool(mut tool: serde_json::Value) -> serde_json::Value {
    if let Some(function) = tool.get_mut("function").and_then(|f| f.as_object_mut()) {
        if function.get("description").is_none_or(|d| d.is_null()) {
            function.insert("description".into(), serde_json::Value::from(""));
        }
    }
    tool
}

#[cfg(test)]
mod tests;
