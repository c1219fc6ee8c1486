//! `POST /v1/audio/transcriptions` (multipart/form-data), served only when a transcription
//! backend is configured: the audio `file` and the form fields go to the [`Transcriber`], the
//! result comes back as `json` (default), `text`, `srt`, `vtt` or `verbose_json`.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use serde_json::json;

use engine::transcribe::{formats, TranscribeError, TranscribeOptions, Transcriber};

use crate::error::ApiError;
use crate::http::{ok_json, text_response, Body};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Text,
    Srt,
    Vtt,
    VerboseJson,
}

/// The largest upload (OpenAI's limit: 25 MB); more is a 413.
pub const MAX_UPLOAD_BYTES: usize = 25 * 1024 * 1024;

/// The multipart boundary of a request's `Content-Type` (400 when it has none).
pub fn boundary(content_type: Option<&str>) -> Result<String, ApiError> {
    multer::parse_boundary(content_type.unwrap_or_default())
        .map_err(|_| ApiError::invalid("the request must be multipart/form-data with a boundary"))
}

/// `body` (read under the size limit) is a multipart form with this `boundary`.
pub async fn handle(transcriber: Arc<dyn Transcriber>, boundary: String, body: Bytes) -> Result<Response<Body>, ApiError> {
    let mut form = multer::Multipart::new(futures_util::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(body) }), boundary);
    let (mut audio, mut model, mut format) = (None, None, Format::Json);
    let mut options = TranscribeOptions::default();
    while let Some(field) = form.next_field().await.map_err(|e| ApiError::invalid(format!("malformed multipart body: {e}")))? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            audio = Some(field.bytes().await.map_err(|e| ApiError::invalid_param("file", e.to_string()))?);
            continue;
        }
        let value = field.text().await.map_err(|e| ApiError::invalid_param(&name, e.to_string()))?;
        match name.as_str() {
            "model" => model = Some(value),
            "language" => options.language = Some(value).filter(|v| !v.is_empty()),
            "prompt" => options.prompt = Some(value).filter(|v| !v.is_empty()),
            "temperature" => {
                options.temperature = value.trim().parse::<f32>().ok().filter(|t| (0.0..=1.0).contains(t)).ok_or_else(|| {
                    ApiError::invalid_param("temperature", format!("temperature must be a number between 0 and 1, got {value:?}"))
                })?
            }
            "response_format" => {
                format = match value.as_str() {
                    "json" => Format::Json,
                    "text" => Format::Text,
                    "srt" => Format::Srt,
                    "vtt" => Format::Vtt,
                    "verbose_json" => Format::VerboseJson,
                    other => {
                        return Err(ApiError::invalid_param(
                            "response_format",
                            format!("response_format must be json, text, srt, vtt or verbose_json, got {other:?}"),
                        ))
                    }
                }
            }
            "stream" if value == "true" => return Err(ApiError::invalid_param("stream", "streaming transcriptions are not supported")),
            "timestamp_granularities[]" | "timestamp_granularities" if value == "word" => {
                return Err(ApiError::invalid_param(
                    "timestamp_granularities",
                    "word timestamps are not supported; segment timestamps come with response_format verbose_json",
                ))
            }
            "timestamp_granularities[]" | "timestamp_granularities" if value != "segment" => {
                return Err(ApiError::invalid_param(
                    "timestamp_granularities",
                    format!("timestamp_granularities must be segment, got {value:?}"),
                ))
            }
            // include[], chunking_strategy...: accepted, not used
            _ => tracing::debug!("transcriptions: ignoring form field {name:?}"),
        }
    }
    let audio = audio.filter(|a| !a.is_empty()).ok_or_else(|| ApiError::missing("file"))?;
    let model = model.ok_or_else(|| ApiError::missing("model"))?;
    if model != transcriber.model_id() {
        return Err(ApiError::model_not_found(&model));
    }
    let t = tokio::task::spawn_blocking(move || transcriber.transcribe(&audio, &options))
        .await
        .map_err(|e| ApiError::server(format!("the transcription backend failed: {e}")))?
        .map_err(|e| match e {
            TranscribeError::BadAudio(m) => ApiError::invalid_param("file", format!("the file cannot be transcribed: {m}")),
            TranscribeError::Failed(m) => ApiError::server(format!("the transcription backend failed: {m}")),
        })?;
    Ok(match format {
        Format::Json => ok_json(&json!({"text": t.text})),
        Format::Text => text_response("text/plain; charset=utf-8", t.text),
        Format::Srt => text_response("text/plain; charset=utf-8", formats::srt(&t)),
        Format::Vtt => text_response("text/vtt; charset=utf-8", formats::vtt(&t)),
        Format::VerboseJson => ok_json(&formats::verbose_json(&t, "transcribe")),
    })
}
