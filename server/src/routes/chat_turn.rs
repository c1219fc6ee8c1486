//! One assistant turn of a chat request, for the routes that convert into one (`/v1/messages`,
//! `/v1/responses`): answered whole ([`complete`]) or as typed events while it decodes
//! ([`Turn`]): reasoning and text as they come, each tool call once it parses, then how it ended.
//! Both read the reply the same way (thinking block, then tool calls), so a streamed turn's events
//! add up to the reply the whole answer gives.

use std::sync::Arc;
use std::time::Instant;

use engine::generate::{FinishReason, Usage};

pub(crate) use super::chat_request::Call;
use super::chat_request::{outputs, prompt, ChatRequest, Outputs};
use super::generation::{blocking, next_event, submit};
use super::reasoning::Split;
use super::reply::{self, ReadReply, ReplyReader};
use crate::error::ApiError;
use crate::http::SseSender;
use crate::registry::ModelEntry;
use crate::requests::chat::ChatCompletionRequest;
use crate::worker::{Generation, SeqEvent};
use crate::AppState;

/// How a turn ended.
#[derive(Clone, Debug)]
pub(crate) struct TurnEnd {
    /// `ToolCalls` when the reply made calls.
    pub finish: FinishReason,
    pub usage: Usage,
    pub reasoning_tokens: usize,
    /// Everything generated (a stop string included), to tell which stop string ended it.
    pub generated: String,
}

/// A turn answered whole.
pub(crate) struct Reply {
    /// The thinking block's text (`None` when the reply had none).
    pub reasoning: Option<String>,
    /// The text outside the thinking block and the tool calls.
    pub content: String,
    pub calls: Vec<Call>,
    pub end: TurnEnd,
    /// The model's id.
    pub model: String,
}

/// Checks the chat request `typed` (as `/v1/chat/completions` would), renders its prompt and
/// prepares its single output.
async fn prepare(
    state: &AppState,
    typed: ChatCompletionRequest,
    stream: bool,
) -> Result<(Arc<ModelEntry>, Arc<ChatRequest>, Outputs, String), ApiError> {
    let id = typed.model_id()?;
    let entry = state.registry.generator(&id)?;
    let request = Arc::new(typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts, &state.chat_defaults)?);
    if request.common.n != 1 {
        return Err(ApiError::invalid_param("n", "this route gives one reply: n must be 1"));
    }
    let (e, r) = (entry.clone(), request.clone());
    let outputs = blocking(move || outputs(&e, &r, stream)).await?;
    Ok((entry, request, outputs, id))
}

/// Runs the chat request `typed` to its end.
pub(crate) async fn complete(state: &Arc<AppState>, typed: ChatCompletionRequest) -> Result<Reply, ApiError> {
    let (entry, request, Outputs { seqs, syntax }, model) = prepare(state, typed, false).await?;
    let start = Instant::now();
    let generation = submit(state, &entry, seqs).await?;
    let c = generation.collect().await?.pop().ok_or_else(|| ApiError::server("the model returned no reply"))?;
    state.metrics.record_generation(c.usage.completion_tokens, start);
    let read = reply::read(&request, &c.text, syntax);
    let tokenizer = entry.model.tokenizer();
    let reasoning_tokens = reply::reasoning_tokens(&read, tokenizer, &c.tokens, syntax);
    let ReadReply { reasoning, content, calls } = read;
    let finish = if calls.is_empty() { c.finish } else { FinishReason::ToolCalls };
    let end = TurnEnd { finish, usage: c.usage, reasoning_tokens, generated: tokenizer.decode(&c.tokens) };
    Ok(Reply { reasoning, content, calls, end, model })
}

/// The prompt tokens of the chat request `typed` on its model: its messages and tools rendered
/// by the model's template, its images' rows counted, as a reply to it would be asked for (the
/// request checked as that would check it). Blocks on an image's encoding (whose rows the
/// request that follows then finds cached): call it off the async threads.
pub(crate) fn prompt_tokens(state: &AppState, typed: ChatCompletionRequest) -> Result<usize, ApiError> {
    let entry = state.registry.generator(&typed.model_id()?)?;
    let request = typed.check(entry.model.tokenizer().n_vocab(), &state.timeouts, &state.chat_defaults)?;
    Ok(prompt(&entry, &request)?.1.len())
}

/// What a streamed turn says, in order.
#[derive(Debug)]
pub(crate) enum TurnEvent {
    Reasoning(String),
    Text(String),
    /// The reasoning is over (sent before the first text or call after reasoning).
    ReasoningDone,
    Call(Call),
    Done(TurnEnd),
}

/// A turn being streamed.
pub(crate) struct Turn {
    generation: Generation,
    request: Arc<ChatRequest>,
    entry: Arc<ModelEntry>,
    reader: ReplyReader,
    /// Reasoning has been sent and not yet closed by `ReasoningDone`.
    reasoning_open: bool,
    pub model: String,
    pub prompt_tokens: usize,
    start: Instant,
    first_token: bool,
}

impl Turn {
    /// Checks and submits the chat request `typed` for streaming.
    pub async fn start(state: &Arc<AppState>, typed: ChatCompletionRequest) -> Result<Turn, ApiError> {
        let (entry, request, Outputs { seqs, syntax }, model) = prepare(state, typed, true).await?;
        let prompt_tokens = seqs.first().map_or(0, |s| s.prompt.len());
        let generation = entry.worker.generate(seqs)?;
        Ok(Turn {
            generation,
            reader: ReplyReader::new(&request, syntax),
            request,
            entry,
            reasoning_open: false,
            model,
            prompt_tokens,
            start: Instant::now(),
            first_token: true,
        })
    }

    /// The next events (`None` once the turn is done or its client has gone; an error ends it).
    pub async fn next(&mut self, state: &AppState, sse: &SseSender) -> Option<Result<Vec<TurnEvent>, ApiError>> {
        let event = next_event(&mut self.generation, sse).await?;
        Some(match event {
            SeqEvent::Token { event, .. } => {
                if std::mem::take(&mut self.first_token) {
                    state.metrics.time_to_first_token_ms.observe(self.start.elapsed().as_secs_f64() * 1e3);
                }
                let Split { reasoning, content } = self.reader.push(&event.text);
                Ok(self.pieces(reasoning, content))
            }
            SeqEvent::Progress { .. } => Ok(Vec::new()),
            SeqEvent::Done { result: Err(e), .. } => Err(e),
            SeqEvent::Done { result: Ok(c), .. } => {
                state.metrics.record_generation(c.usage.completion_tokens, self.start);
                let (tail, calls) = self.reader.finish(&self.request, &c.text);
                let mut events = self.pieces(tail.reasoning, tail.content);
                if std::mem::take(&mut self.reasoning_open) {
                    events.push(TurnEvent::ReasoningDone);
                }
                let finish = if calls.is_empty() { c.finish } else { FinishReason::ToolCalls };
                events.extend(calls.into_iter().map(TurnEvent::Call));
                let generated = self.entry.model.tokenizer().decode(&c.tokens);
                events.push(TurnEvent::Done(TurnEnd { finish, usage: c.usage, reasoning_tokens: self.reader.reasoning_tokens, generated }));
                Ok(events)
            }
        })
    }

    /// The events of one step's reasoning and text (either may be empty).
    fn pieces(&mut self, reasoning: String, text: String) -> Vec<TurnEvent> {
        let mut events = Vec::new();
        if !reasoning.is_empty() {
            self.reasoning_open = true;
            events.push(TurnEvent::Reasoning(reasoning));
        }
        if !text.is_empty() {
            if std::mem::take(&mut self.reasoning_open) {
                events.push(TurnEvent::ReasoningDone);
            }
            events.push(TurnEvent::Text(text));
        }
        events
    }
}
