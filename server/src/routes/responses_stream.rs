//! The Responses event stream of one turn: `response.created` and `response.in_progress`, then
//! each output item as it decodes (`response.output_item.added`, its content part, its deltas:
//! `response.reasoning_text.delta`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`; their `.done` events and
//! `response.output_item.done`), then `response.completed` (or `response.incomplete` when the
//! token budget ran out) with the whole response. Every event carries its `sequence_number`; a
//! failure after the start is an `error` event.

use engine::generate::FinishReason;
use serde_json::{json, Value};

use super::chat_turn::{Turn, TurnEvent};
use super::responses::{assistant_turn, call_item, item_id, message_item, reasoning_item, Keep, ResponseShell};
use crate::error::ApiError;
use crate::http::SseSender;
use crate::AppState;

/// The item being streamed, with its id and the text it has so far.
enum Open {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
}

struct Events<'a> {
    sse: &'a SseSender,
    sequence: u64,
}

impl Events<'_> {
    /// Sends `event` (its type is its name) with the next sequence number.
    async fn send(&mut self, mut event: Value) -> bool {
        event["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        let name = event["type"].as_str().unwrap_or_default().to_string();
        self.sse.send_event(&name, &event).await
    }
}

/// A failure as the Responses stream says it (its `sequence_number` is added when it is sent).
pub(crate) fn error_event(e: &ApiError) -> Value {
    json!({"type": "error", "code": e.code, "message": e.message, "param": e.param})
}

pub(crate) async fn run(mut turn: Turn, shell: ResponseShell, keep: Keep, state: &AppState, sse: &SseSender) {
    let mut keep = Some(keep);
    let mut events = Events { sse, sequence: 0 };
    for kind in ["response.created", "response.in_progress"] {
        if !events.send(json!({"type": kind, "response": shell.in_progress()})).await {
            return;
        }
    }
    // the finished items, and the one open
    let mut output: Vec<Value> = Vec::new();
    let mut open: Option<Open> = None;
    let mut content = String::new();
    let mut calls = Vec::new();
    while let Some(step) = turn.next(state, sse).await {
        let step = match step {
            Ok(step) => step,
            Err(e) => {
                events.send(error_event(&e)).await;
                return;
            }
        };
        for event in step {
            let mut out: Vec<Value> = Vec::new();
            match event {
                TurnEvent::Reasoning(delta) => {
                    if !matches!(open, Some(Open::Reasoning { .. })) {
                        close(&mut open, &mut output, &mut out, "completed");
                        let id = item_id("rs");
                        let index = output.len();
                        out.push(json!({"type": "response.output_item.added", "output_index": index, "item": reasoning_item(&id, "", "in_progress")}));
                        let part = json!({"type": "reasoning_text", "text": ""});
                        out.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": part}));
                        open = Some(Open::Reasoning { id, text: String::new() });
                    }
                    if let Some(Open::Reasoning { id, text }) = &mut open {
                        text.push_str(&delta);
                        let index = output.len();
                        out.push(json!({"type": "response.reasoning_text.delta", "item_id": id, "output_index": index, "content_index": 0, "delta": delta}));
                    }
                }
                TurnEvent::ReasoningDone => close(&mut open, &mut output, &mut out, "completed"),
                TurnEvent::Text(delta) => {
                    if !matches!(open, Some(Open::Message { .. })) {
                        close(&mut open, &mut output, &mut out, "completed");
                        let id = item_id("msg");
                        let index = output.len();
                        out.push(json!({"type": "response.output_item.added", "output_index": index, "item": message_item(&id, None, "in_progress")}));
                        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                        out.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": part}));
                        open = Some(Open::Message { id, text: String::new() });
                    }
                    if let Some(Open::Message { id, text }) = &mut open {
                        text.push_str(&delta);
                        content.push_str(&delta);
                        let index = output.len();
                        out.push(json!({
                            "type": "response.output_text.delta", "item_id": id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": [],
                        }));
                    }
                }
                TurnEvent::Call(call) => {
                    close(&mut open, &mut output, &mut out, "completed");
                    let (id, index) = (item_id("fc"), output.len());
                    out.push(json!({"type": "response.output_item.added", "output_index": index, "item": call_item(&id, &call, "", "in_progress")}));
                    out.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": call.arguments}));
                    out.push(json!({
                        "type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments,
                    }));
                    let item = call_item(&id, &call, &call.arguments, "completed");
                    out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
                    output.push(item);
                    calls.push(call);
                }
                TurnEvent::Done(end) => {
                    let status = if end.finish == FinishReason::Length { "incomplete" } else { "completed" };
                    close(&mut open, &mut output, &mut out, status);
                    if output.is_empty() {
                        // a reply with no text at all is still one (empty) message, as answered whole
                        let (id, index) = (item_id("msg"), output.len());
                        out.push(json!({"type": "response.output_item.added", "output_index": index, "item": message_item(&id, None, "in_progress")}));
                        let mut closing = Some(Open::Message { id, text: String::new() });
                        close(&mut closing, &mut output, &mut out, status);
                    }
                    let response = shell.finished(std::mem::take(&mut output), &end);
                    let kind = if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
                    out.push(json!({"type": kind, "response": response}));
                    if let Some(keep) = keep.take() {
                        keep.save(state, &response, assistant_turn(&content, &calls));
                    }
                }
            }
            for event in out {
                if !events.send(event).await {
                    return;
                }
            }
        }
    }
}

/// Closes the open item: its text's `.done`, its part's and its own `.done` events.
fn close(open: &mut Option<Open>, output: &mut Vec<Value>, out: &mut Vec<Value>, status: &str) {
    let index = output.len();
    let item = match open.take() {
        None => return,
        Some(Open::Reasoning { id, text }) => {
            out.push(
                json!({"type": "response.reasoning_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text}),
            );
            let part = json!({"type": "reasoning_text", "text": text});
            out.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": 0, "part": part}));
            reasoning_item(&id, &text, status)
        }
        Some(Open::Message { id, text }) => {
            out.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
            let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
            out.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": 0, "part": part}));
            message_item(&id, Some(&text), status)
        }
    };
    out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    output.push(item);
}
