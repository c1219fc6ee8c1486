//! A transcript in the formats of OpenAI's transcription API: `srt` and `vtt` cues (one per
//! segment) and the `verbose_json` object. The server's route and `engine-cli transcribe` both
//! write them.

use serde_json::{json, Value};

use super::{Segment, Transcription};

/// The segments, or one spanning the whole audio when the backend gave none.
pub fn timed(t: &Transcription) -> Vec<Segment> {
    if t.segments.is_empty() {
        vec![Segment { start: 0.0, end: t.duration.unwrap_or(0.0), text: t.text.clone(), ..Segment::default() }]
    } else {
        t.segments.clone()
    }
}

/// SRT cues (numbered; `,` before milliseconds) or VTT cues (`.`, no numbers).
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

pub fn srt(t: &Transcription) -> String {
    cues(t, ',')
}

pub fn vtt(t: &Transcription) -> String {
    format!("WEBVTT\n\n{}", cues(t, '.'))
}

/// `verbose_json`: task, language, duration, text and the segments with what decoding said.
pub fn verbose_json(t: &Transcription, task: &str) -> Value {
    let segments: Vec<Value> = timed(t)
        .iter()
        .enumerate()
        .map(|(id, s)| {
            json!({"id": id, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text, "tokens": s.tokens,
                   "temperature": s.temperature, "avg_logprob": s.avg_logprob, "compression_ratio": s.compression_ratio,
                   "no_speech_prob": s.no_speech_prob})
        })
        .collect();
    json!({
        "task": task,
        "language": t.language.clone().unwrap_or_else(|| "unknown".into()),
        "duration": t.duration.unwrap_or(0.0),
        "text": t.text,
        "segments": segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srt_and_vtt_cues() {
        let t = Transcription {
            text: "Hello there. General Kenobi.".into(),
            segments: vec![
                Segment { start: 0.0, end: 1.5, text: " Hello there.".into(), ..Segment::default() },
                Segment { start: 3661.25, end: 3662.0, text: "General Kenobi.".into(), ..Segment::default() },
            ],
            ..Default::default()
        };
        assert_eq!(srt(&t), "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:01:01,250 --> 01:01:02,000\nGeneral Kenobi.\n\n");
        assert!(vtt(&t).starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n"));
        let v = verbose_json(&t, "transcribe");
        assert_eq!(v["segments"][1]["start"], 3661.25);
        assert_eq!(v["language"], "unknown");
    }
}
