//! Whisper transcription of audio of any length, as faster-whisper runs it: the log-mel
//! spectrogram cut into 30-second windows from a moving `seek`; each window decoded with the
//! temperature fallback (0, 0.2, ..., 1.0 until the text compresses no better than 2.4:1 and
//! its average log-probability is at least -1, unless the window is silence); windows whose
//! no-speech probability is above 0.6 (and whose text is not confident) skipped; segments cut
//! at consecutive timestamp pairs; `seek` moved to the last complete segment's end. Without a
//! `language`, a multilingual model detects it from the first window.

use std::io::Write;

use super::logit_rules::{LogitRules, TIMESTAMP_STEP};
use super::window::{decode_window, logprob, WindowPrompt, WindowResult};
use super::{Segment, TranscribeError, TranscribeOptions, Transcriber, Transcription};
use crate::audio::{decode_16k_mono, log_mel, mel_filters, HOP, SAMPLE_RATE};
use crate::logprobs::argmax;
use crate::model::whisper::{EncodedWindow, WhisperModel};
use crate::model::ModelError;
use crate::sampling::Rng;
use crate::tokenizer::TokenId;

/// The temperatures tried in turn when a window's text looks wrong.
const TEMPERATURES: [f32; 6] = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0];
/// Text that compresses better than this is repetitive: decode again hotter.
const COMPRESSION_RATIO_THRESHOLD: f64 = 2.4;
/// An average log-probability below this is not confident: decode again hotter.
const LOG_PROB_THRESHOLD: f64 = -1.0;
/// A window likelier than this to hold no speech (and not confidently decoded) is skipped.
const NO_SPEECH_THRESHOLD: f64 = 0.6;
/// A window decoded hotter than this does not prompt the next one.
const PROMPT_RESET_ON_TEMPERATURE: f32 = 0.5;
/// Frames per encoder position (the second convolution's stride).
const INPUT_STRIDE: usize = 2;
/// The longest audio accepted, in seconds (three hours).
pub const MAX_SECONDS: f64 = 3.0 * 3600.0;

/// What the caller asks of one transcription.
#[derive(Clone, Debug, Default)]
pub struct WhisperOptions {
    /// ISO-639-1 code; `None`: English for English-only models, detected otherwise.
    pub language: Option<String>,
    pub translate: bool,
    /// Earlier text (names, spellings) the first window is prompted with.
    pub prompt: Option<String>,
    /// `None`: the fallback schedule; `Some(t)`: only `t`.
    pub temperature: Option<f32>,
    /// Each window is prompted with the text before it.
    pub condition_on_previous_text: bool,
    pub seed: u64,
}

/// `len(text) / len(zlib(text))` of the window's text: above 2.4 it repeats itself.
pub fn compression_ratio(text: &str) -> f64 {
    if text.is_empty() {
        return 0.0;
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(text.as_bytes()).expect("writing to memory");
    let compressed = z.finish().expect("writing to memory");
    text.len() as f64 / compressed.len() as f64
}

/// A window's result with its text and compression ratio.
struct Decoded {
    result: WindowResult,
    compression_ratio: f64,
}

fn text_of(model: &WhisperModel, tokens: &[TokenId]) -> String {
    let eot = model.config().tokens.eot;
    let text: Vec<TokenId> = tokens.iter().copied().filter(|&t| t < eot).collect();
    model.tokenizer().decode(&text)
}

/// Decodes a window at each temperature of the schedule until its text passes the checks;
/// when none does, the most confident result below the compression threshold (or the last).
fn decode_with_fallback(
    model: &WhisperModel,
    audio: &EncodedWindow,
    rules: &LogitRules,
    prompt: &WindowPrompt,
    temperatures: &[f32],
    rng: &mut Rng,
) -> Result<Decoded, ModelError> {
    let mut tried: Vec<Decoded> = Vec::new();
    for &t in temperatures {
        let result = decode_window(model, audio, rules, prompt, t, rng)?;
        let compression_ratio = compression_ratio(&text_of(model, &result.tokens));
        let mut needs_fallback = compression_ratio > COMPRESSION_RATIO_THRESHOLD || result.avg_logprob < LOG_PROB_THRESHOLD;
        if result.no_speech_prob > NO_SPEECH_THRESHOLD && result.avg_logprob < LOG_PROB_THRESHOLD {
            // silence: no other temperature will find words in it
            needs_fallback = false;
        }
        let decoded = Decoded { result, compression_ratio };
        if !needs_fallback {
            return Ok(decoded);
        }
        tried.push(decoded);
    }
    let below: Vec<usize> = (0..tried.len()).filter(|&i| tried[i].compression_ratio <= COMPRESSION_RATIO_THRESHOLD).collect();
    let pool = if below.is_empty() { (0..tried.len()).collect() } else { below };
    let best = pool
        .into_iter()
        .max_by(|&a, &b| tried[a].result.avg_logprob.total_cmp(&tried[b].result.avg_logprob))
        .expect("one temperature at least");
    Ok(tried.swap_remove(best))
}

/// The language token likeliest after `<|startoftranscript|>` for this window, with its code.
pub fn detect_language(model: &WhisperModel, audio: &EncodedWindow) -> Result<(TokenId, String, f64), ModelError> {
    let c = model.config();
    let mut cache = model.new_cache();
    let logits = model.decode(audio, &mut cache, &[c.tokens.sot], 0)?;
    let lang_logits: Vec<f32> = c.tokens.languages.iter().map(|&(id, _)| logits[id as usize]).collect();
    if lang_logits.is_empty() {
        return Err(ModelError::BadBatch("the model lists no languages".into()));
    }
    let best = argmax(&lang_logits);
    let (id, code) = c.tokens.languages[best as usize].clone();
    Ok((id, code, logprob(&lang_logits, best).exp()))
}

/// Transcribes 16 kHz mono samples. `progress` hears the seconds done after each window.
pub fn transcribe_samples(
    model: &WhisperModel,
    samples: &[f32],
    options: &WhisperOptions,
    progress: &mut dyn FnMut(f64, f64),
) -> Result<Transcription, ModelError> {
    let c = model.config();
    let rules = LogitRules::new(c, model.tokenizer());
    let mel = log_mel(samples, &mel_filters(c.n_mels), c.n_mels);
    let content_frames = mel.n_frames.saturating_sub(1);
    let frame_seconds = HOP as f64 / SAMPLE_RATE as f64;
    let duration = samples.len() as f64 / SAMPLE_RATE as f64;
    let ts_begin = c.tokens.timestamp_begin;
    let mut rng = Rng::new(options.seed);
    let temperatures: Vec<f32> = match options.temperature {
        Some(t) if t > 0.0 => vec![t],
        _ => TEMPERATURES.to_vec(),
    };

    let mut language: Option<(TokenId, String)> = match &options.language {
        Some(code) if c.multilingual => {
            let found = c.tokens.languages.iter().find(|(_, l)| l == code).cloned();
            Some(found.ok_or_else(|| ModelError::BadBatch(format!("unknown language {code:?}")))?)
        }
        Some(code) if code != "en" => {
            return Err(ModelError::BadBatch(format!("this model is English-only; language {code:?} is not supported")))
        }
        _ => None,
    };
    let mut all_tokens: Vec<TokenId> = Vec::new();
    if let Some(p) = options.prompt.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        all_tokens.extend(model.tokenizer().encode(&format!(" {p}"), false, false));
    }
    let mut prompt_reset_since = 0;
    let mut segments: Vec<Segment> = Vec::new();
    let mut seek = 0usize;
    while seek < content_frames {
        let time_offset = seek as f64 * frame_seconds;
        let segment_size = (content_frames - seek).min(crate::audio::FRAMES_PER_WINDOW);
        let window = mel.window(seek, segment_size);
        let audio = model.encode(&window.data)?;
        if c.multilingual && language.is_none() {
            let (id, code, _) = detect_language(model, &audio)?;
            language = Some((id, code));
        }
        let prompt = WindowPrompt {
            previous: all_tokens[prompt_reset_since..].to_vec(),
            language: language.as_ref().map(|(id, _)| *id),
            translate: options.translate,
            timestamps: true,
        };
        let Decoded { result, compression_ratio } = decode_with_fallback(model, &audio, &rules, &prompt, &temperatures, &mut rng)?;
        if result.no_speech_prob > NO_SPEECH_THRESHOLD && result.avg_logprob <= LOG_PROB_THRESHOLD {
            seek += segment_size;
            progress((seek as f64 * frame_seconds).min(duration), duration);
            continue;
        }
        let tokens = &result.tokens;
        let is_ts = |t: TokenId| t >= ts_begin;
        let seconds = |t: TokenId| (t - ts_begin) as f64 * TIMESTAMP_STEP;
        let single_timestamp_ending = tokens.len() >= 2 && !is_ts(tokens[tokens.len() - 2]) && is_ts(tokens[tokens.len() - 1]);
        let pairs: Vec<usize> = (1..tokens.len()).filter(|&i| is_ts(tokens[i]) && is_ts(tokens[i - 1])).collect();
        let window_seek = seek;
        let mut pieces: Vec<(f64, f64, Vec<TokenId>)> = Vec::new();
        if !pairs.is_empty() {
            let mut slices = pairs.clone();
            if single_timestamp_ending {
                slices.push(tokens.len());
            }
            let mut last = 0;
            for &cut in &slices {
                let piece = &tokens[last..cut];
                if let (Some(&first), Some(&end)) = (piece.first(), piece.last()) {
                    pieces.push((time_offset + seconds(first.max(ts_begin)), time_offset + seconds(end.max(ts_begin)), piece.to_vec()));
                }
                last = cut;
            }
            if single_timestamp_ending {
                seek += segment_size;
            } else {
                seek += (tokens[last - 1] - ts_begin) as usize * INPUT_STRIDE;
            }
        } else {
            let mut end = segment_size as f64 * frame_seconds;
            if let Some(&t) = tokens.iter().rev().find(|&&t| is_ts(t)).filter(|&&t| t != ts_begin) {
                end = seconds(t);
            }
            pieces.push((time_offset, time_offset + end, tokens.clone()));
            seek += segment_size;
        }
        for (start, end, piece) in pieces {
            let text = text_of(model, &piece);
            if start == end || text.trim().is_empty() {
                continue;
            }
            // timestamps included: the next window's prompt carries them, as faster-whisper's
            // and openai-whisper's do (left out, base lost its footing after a pause and fell
            // back to sampling)
            all_tokens.extend_from_slice(&piece);
            segments.push(Segment {
                start,
                end,
                text,
                seek: window_seek,
                tokens: piece,
                temperature: result.temperature,
                avg_logprob: result.avg_logprob,
                compression_ratio,
                no_speech_prob: result.no_speech_prob,
            });
        }
        if !options.condition_on_previous_text || result.temperature > PROMPT_RESET_ON_TEMPERATURE {
            prompt_reset_since = all_tokens.len();
        }
        progress((seek as f64 * frame_seconds).min(duration), duration);
    }
    let text = segments.iter().map(|s| s.text.as_str()).collect::<String>().trim().to_string();
    let language = match language {
        Some((_, code)) => Some(code),
        None if !c.multilingual => Some("en".into()),
        None => None,
    };
    Ok(Transcription {
        text,
        language: language.map(|code| language_name(&code).unwrap_or(&code).to_string()),
        duration: Some(duration),
        segments,
    })
}

/// The English name OpenAI's API gives a language (`"english"` for `en`), for the codes
/// Whisper knows most often; others keep their code.
pub fn language_name(code: &str) -> Option<&'static str> {
    const NAMES: [(&str, &str); 20] = [
        ("en", "english"),
        ("zh", "chinese"),
        ("de", "german"),
        ("es", "spanish"),
        ("ru", "russian"),
        ("ko", "korean"),
        ("fr", "french"),
        ("ja", "japanese"),
        ("pt", "portuguese"),
        ("tr", "turkish"),
        ("pl", "polish"),
        ("ca", "catalan"),
        ("nl", "dutch"),
        ("ar", "arabic"),
        ("sv", "swedish"),
        ("it", "italian"),
        ("id", "indonesian"),
        ("hi", "hindi"),
        ("fi", "finnish"),
        ("vi", "vietnamese"),
    ];
    NAMES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// A Whisper model behind the server's transcription route. Transcriptions take turns: each
/// already runs its matrix products on every core.
pub struct WhisperTranscriber {
    model: WhisperModel,
    id: String,
    turn: std::sync::Mutex<()>,
}

impl WhisperTranscriber {
    pub fn new(model: WhisperModel, id: String) -> WhisperTranscriber {
        WhisperTranscriber { model, id, turn: std::sync::Mutex::new(()) }
    }
}

impl Transcriber for WhisperTranscriber {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn transcribe(&self, audio: &[u8], options: &TranscribeOptions) -> Result<Transcription, TranscribeError> {
        let decoded = decode_16k_mono(audio, MAX_SECONDS).map_err(|e| TranscribeError::BadAudio(e.to_string()))?;
        let _turn = self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let options = WhisperOptions {
            language: options.language.clone(),
            prompt: options.prompt.clone(),
            temperature: Some(options.temperature).filter(|&t| t > 0.0),
            condition_on_previous_text: true,
            ..WhisperOptions::default()
        };
        transcribe_samples(&self.model, &decoded.samples, &options, &mut |_, _| {}).map_err(|e| match e {
            ModelError::BadBatch(m) => TranscribeError::BadAudio(m),
            e => TranscribeError::Failed(e.to_string()),
        })
    }
}
