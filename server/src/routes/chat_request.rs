//! A checked chat request's prompt: its messages and tools rendered by the model's template
//! (opening a new assistant turn, or continuing the last one's text) and tokenized, one output
//! per choice with its parameters (and grammar); and a reply's tool calls parsed back out. The
//! request itself is read and checked in `requests/chat.rs`.

use engine::chat::{parse_tool_calls, tokenize_rendered, ChatInput, ChatTemplate};
use serde_json::{json, Value};

use super::generation::{output, params_for, random_id};
use super::reply::ReplySyntax;
use crate::error::ApiError;
use crate::registry::ModelEntry;
use crate::requests::chat::{ChatCompletionRequest, ChatDefaults};
pub(crate) use crate::requests::chat::{ChatRequest, PromptEnd, ToolChoice};
use crate::worker::SeqSpec;
use engine::model::vision::PromptImages;
use engine::tokenizer::TokenId;

/// `input` rendered by the model's chat template (its failure is a 400 on `messages`).
pub(crate) fn render(entry: &ModelEntry, input: &ChatInput) -> Result<String, ApiError> {
    entry.worker.template().render(input).map_err(|e| ApiError::invalid_param("messages", format!("the chat template failed: {e}")))
}

/// Stands for a continued message's text while the template renders it, to find where that text
/// goes: private-use characters, which no template or tokenizer treats specially.
const CONTINUED_MARK: &str = "\u{F8FF}continued\u{F8FF}";

/// A chat request's prompt as rendered.
pub(crate) struct ChatPrompt {
    pub text: String,
    /// Where the continued assistant text starts in `text` (`None`: nothing is continued).
    pub continued_from: Option<usize>,
}

impl ChatPrompt {
    /// The prompt before the continued text, and that text.
    pub fn parts(&self) -> (&str, Option<&str>) {
        match self.continued_from {
            Some(at) => (&self.text[..at], Some(&self.text[at..])),
            None => (&self.text, None),
        }
    }
}

/// The prompt of `input`'s messages rendered by the model's template, ending as `end` says. A
/// continued last message is printed by the template as any assistant turn and cut where its
/// text starts, the text then following exactly as sent (transformers' and vLLM's way, which
/// keeps a template's own markup for an assistant turn, such as harmony's channel); where the
/// template does not print a message's text once as given (it drops or rewrites it, or refuses a
/// conversation that ends with the assistant), the prompt is the messages before it with the
/// generation prompt, then the text (llama-server's way).
fn render_prompt(entry: &ModelEntry, mut input: ChatInput, end: PromptEnd) -> Result<ChatPrompt, ApiError> {
    let continued = match (end, input.messages.last()) {
        (PromptEnd::Continue, Some(last)) => last.get("content").and_then(Value::as_str).unwrap_or_default().to_string(),
        _ => {
            input.add_generation_prompt = end == PromptEnd::NewTurn;
            return Ok(ChatPrompt { text: render(entry, &input)?, continued_from: None });
        }
    };
    let head = match head_of_last_turn(entry.worker.template(), &input) {
        Some(head) => head,
        None => {
            input.messages.pop();
            input.add_generation_prompt = true;
            render(entry, &input)?
        }
    };
    Ok(ChatPrompt { continued_from: Some(head.len()), text: head + &continued })
}

/// The prompt of a chat request as sent (not yet checked): what `/apply-template` shows and
/// `count_tokens` counts.
pub(crate) fn typed_prompt(entry: &ModelEntry, typed: &ChatCompletionRequest, defaults: &ChatDefaults) -> Result<ChatPrompt, ApiError> {
    let input = ChatInput { tools: typed.tools(), extra: typed.template_vars()?, ..ChatInput::new(typed.messages()?) };
    render_prompt(entry, input, typed.prompt_end(defaults)?)
}

/// The prompt up to where the template prints the last message's text (`None` when it does not
/// print it exactly once, or fails on a conversation that ends there).
fn head_of_last_turn(template: &ChatTemplate, input: &ChatInput) -> Option<String> {
    let mut marked = input.clone();
    marked.add_generation_prompt = false;
    marked.messages.last_mut()?["content"] = Value::from(CONTINUED_MARK);
    let text = template.render(&marked).ok()?;
    match text.split_once(CONTINUED_MARK) {
        Some((head, tail)) if !tail.contains(CONTINUED_MARK) => Some(head.to_string()),
        _ => None,
    }
}

/// A request's outputs, ready to submit.
pub(crate) struct Outputs {
    pub seqs: Vec<SeqSpec>,
    /// The syntax the prompt asks the reply in.
    pub syntax: ReplySyntax,
}

/// The outputs of a request: its prompt (the messages rendered by the model's template and
/// tokenized) and one output per choice, each with its own parameters (and grammar).
pub(crate) fn outputs(entry: &ModelEntry, request: &ChatRequest, stream: bool) -> Result<Outputs, ApiError> {
    let (rendered, prompt, images) = prompt(entry, request)?;
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    let seqs = (0..request.common.n)
        .map(|i| {
            let params = params_for(&entry.worker, &request.common, request.logprobs, request.constraint.as_ref(), prompt.len(), i)?;
            let mut spec = output(prompt.clone(), params, &request.common, stream, lora.clone());
            spec.images = images.clone();
            Ok(spec)
        })
        .collect::<Result<_, ApiError>>()?;
    // under a grammar the reply is what the grammar says from its first token: never reasoning
    let syntax = ReplySyntax::of_prompt(&rendered, request.constraint.is_some());
    Ok(Outputs { seqs, syntax })
}

/// A request's prompt: the messages rendered by the model's template, and its ids (the rows of
/// its images in their places).
pub(crate) fn prompt(entry: &ModelEntry, request: &ChatRequest) -> Result<(ChatPrompt, Vec<TokenId>, PromptImages), ApiError> {
    let input =
        ChatInput { tools: request.tools.clone(), extra: request.template_vars.clone(), ..ChatInput::new(request.messages.clone()) };
    let rendered = render_prompt(entry, input, request.prompt_end)?;
    let (ids, images) = prompt_with_images(entry, request, &rendered.text)?;
    Ok((rendered, ids, images))
}

/// The rendered prompt's ids: its tokens, and the rows of its images (through the model's
/// projector) in their places.
fn prompt_with_images(entry: &ModelEntry, request: &ChatRequest, text: &str) -> Result<(Vec<TokenId>, PromptImages), ApiError> {
    if request.images.is_empty() {
        return Ok((tokenize_rendered(entry.model.tokenizer(), text), PromptImages::default()));
    }
    let Some(projector) = &entry.vision else {
        return Err(ApiError::invalid_param(
            &request.images[0].1,
            format!("the model `{}` has no vision projector: start the server with --mmproj for it to read images", entry.id),
        ));
    };
    let prompt = projector.prompt(&entry.model, text, &request.images)?;
    Ok((prompt.ids, prompt.images))
}

/// A tool call the reply made, parsed, with the id the answer gives it.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl Call {
    /// A call the reply made, with a fresh id (`call_` and 22 random characters).
    pub fn new(name: String, arguments: String) -> Call {
        Call { id: format!("call_{}", &random_id()[..22]), name, arguments }
    }

    /// The call as a chat completion's `tool_calls` entry.
    pub fn to_openai(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }
}

/// The reply's text and its tool calls (none when tools are off).
pub(crate) fn split_tool_calls(text: &str, choice: &ToolChoice) -> (String, Vec<Call>) {
    if *choice == ToolChoice::None {
        return (text.to_string(), Vec::new());
    }
    let parsed = parse_tool_calls(text);
    let calls: Vec<Call> = parsed
        .tool_calls
        .iter()
        .filter(|c| match choice {
            ToolChoice::Named(name) => &c.name == name,
            _ => true,
        })
        .map(|c| Call::new(c.name.clone(), c.arguments.to_string()))
        .collect();
    if calls.is_empty() {
        (text.to_string(), Vec::new())
    } else {
        (parsed.content, calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(source: &str, messages: Value) -> Option<String> {
        let template = ChatTemplate::new(source, Some("<s>"), Some("</s>")).unwrap();
        head_of_last_turn(&template, &ChatInput::new(messages.as_array().unwrap().clone()))
    }

    #[test]
    fn a_continued_turn_is_cut_where_the_template_prints_its_text() {
        let chat = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]);
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                      {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        assert_eq!(head(chatml, chat.clone()).unwrap(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        // a template's own markup for an assistant turn stays (harmony's channel), and a trimmed
        // text is cut at the same place
        let harmony = "{% for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}\
                       <|message|>{{ m.content | trim }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}";
        assert_eq!(head(harmony, chat.clone()).unwrap(), "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>");
        // a template that drops the assistant's text, prints it twice or refuses to end with the
        // assistant gives no head: the caller then writes the text after the generation prompt
        let drops = "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}";
        assert_eq!(head(drops, chat.clone()), None);
        let twice = "{% for m in messages %}{{ m.content }}|{{ m.content }}{% endfor %}";
        assert_eq!(head(twice, chat.clone()), None);
        let refuses = "{% if messages[-1].role != 'user' %}{{ raise_exception('end with the user') }}{% endif %}{{ messages[-1].content }}";
        assert_eq!(head(refuses, chat), None);
    }
}
