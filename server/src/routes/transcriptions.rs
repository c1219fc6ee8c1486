//! `POST /v1/audio/transcriptions` (multipart/form-data), served only when a transcription
//! backend is configured: the audio `file` and the form fields go to the [`Transcriber`], the
//! result comes back as `json` (default), `text`, `srt`, `vtt` or `verbose_json`.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Response;
use serde_json::json;

use engine::transcribe::{Segment, TranscribeOptions, Transcriber, Transcription};

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
            // timestamp_granularities[], include[], chunking_strategy...: accepted, not used
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
        .map_err(|e| ApiError::server(format!("the transcription backend failed: {e}")))?;
    Ok(match format {
        Format::Json => ok_json(&json!({"text": t.text})),
        Format::Text => text_response("text/plain; charset=utf-8", t.text),
        Format::Srt => text_response("text/plain; charset=utf-8", cues(&t, ',')),
        Format::Vtt => text_response("text/vtt; charset=utf-8", format!("WEBVTT\n\n{}", cues(&t, '.'))),
        Format::VerboseJson => {
            let segments: Vec<_> = timed(&t)
                .iter()
                .enumerate()
                .map(|(id, s)| json!({"id": id, "seek": 0, "start": s.start, "end": s.end, "text": s.text, "tokens": [], "temperature": 0.0, "avg_logprob": 0.0, "compression_ratio": 0.0, "no_speech_prob": 0.0}))
                .collect();
            ok_json(&json!({
                "task": "transcribe",
                "language": t.language.clone().unwrap_or_else(|| "unknown".into()),
                "duration": t.duration.unwrap_or(0.0),
                "text": t.text,
                "segments": segments,
            }))
        }
    })
}

/// The segments, or one spanning the whole audio when the backend gave none.
fn timed(t: &Transcription) -> Vec<Segment> {
    if t.segments.is_empty() {
        vec![Segment { start: 0.0, end: t.duration.unwrap_or(0.0), text: t.text.clone() }]
    } else {
        t.segments.clone()
    }
}

/// SRT cues (numbered; `,` before milliseconds) or VTT cues (`.`).
fn cues(t: &Transcription, ms_sep: char) -> String {
    let stamp = |secs: f64| {
        let ms = (secs.max(0.0) * 1000.0).round() as u64;
        format!("{:02}:{:02}:{:02}{ms_sep}{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
    };
    let mut out = String::new();
    for (i, s) in timed(t).iter().enumerate() {
        if ms_sep == ',' {
            out.push_str(&format!("{}\n", i + 1));
        }
        out.push_str(&format!("{} --> {}\n{}\n\n", stamp(s.start), stamp(s.end), s.text.trim()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srt_and_vtt_cues() {
        let t = Transcription {
            text: "Hello there. General Kenobi.".into(),
            segments: vec![
                Segment { start: 0.0, end: 1.5, text: " Hello there.".into() },
                Segment { start: 3661.25, end: 3662.0, text: "General Kenobi.".into() },
            ],
            ..Default::default()
        };
        assert_eq!(
            cues(&t, ','),
            "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:01:01,250 --> 01:01:02,000\nGeneral Kenobi.\n\n"
        );
        assert!(cues(&t, '.').starts_with("00:00:00.000 --> 00:00:01.500\nHello there.\n\n"));
    }
}
