//! A checked chat request's prompt: its messages and tools rendered by the model's template and
//! tokenized, one output per choice with its parameters (and grammar); and a reply's tool calls
//! parsed back out. The request itself is read and checked in `requests/chat.rs`.

use engine::chat::{parse_tool_calls, tokenize_rendered, ChatInput};
use serde_json::{json, Value};

use super::generation::{output, params_for, random_id};
use super::reply::ReplySyntax;
use crate::error::ApiError;
use crate::registry::ModelEntry;
pub(crate) use crate::requests::chat::{ChatRequest, ToolChoice};
use crate::worker::SeqSpec;
use engine::model::vision::PromptImages;
use engine::tokenizer::TokenId;

/// `input` rendered by the model's chat template (its failure is a 400 on `messages`).
pub(crate) fn render(entry: &ModelEntry, input: &ChatInput) -> Result<String, ApiError> {
    entry.worker.template().render(input).map_err(|e| ApiError::invalid_param("messages", format!("the chat template failed: {e}")))
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
    let input = ChatInput {
        tools: request.tools.clone(),
        add_generation_prompt: true,
        extra: request.template_vars.clone(),
        ..ChatInput::new(request.messages.clone())
    };
    let text = render(entry, &input)?;
    let (prompt, images) = prompt_with_images(entry, request, &text)?;
    let lora = entry.adapters.resolve(request.common.lora.as_deref())?;
    let seqs = (0..request.common.n)
        .map(|i| {
            let params = params_for(&entry.worker, &request.common, request.logprobs, request.constraint.as_ref(), prompt.len(), i)?;
            let mut spec = output(prompt.clone(), params, stream, request.common.deadline, lora.clone());
            spec.images = images.clone();
            Ok(spec)
        })
        .collect::<Result<_, ApiError>>()?;
    // under a grammar the reply is what the grammar says from its first token: never reasoning
    let syntax = ReplySyntax::of_prompt(&text, request.constraint.is_some());
    Ok(Outputs { seqs, syntax })
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
