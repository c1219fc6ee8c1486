//! `engine-cli transcribe`: speech to text with a Whisper GGUF, printed in one of the formats
//! the server's transcription route answers with; progress on stderr for long recordings.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use engine::audio::decode_16k_mono;
use engine::backend::Device;
use engine::model::whisper::WhisperModel;
use engine::transcribe::whisper::{transcribe_samples, WhisperOptions, MAX_SECONDS};
use engine::transcribe::{formats, Transcription};

use crate::load::{parse_device, parse_positive};

#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// A Whisper GGUF (`tools/fetch-models.sh whisper-tiny.en` or `whisper-base`).
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The spoken language (ISO-639-1, `en`); detected when left out (multilingual models).
    #[arg(long)]
    pub language: Option<String>,
    /// json, text, srt, vtt or verbose_json.
    #[arg(long, default_value = "text", value_parser = ["json", "text", "srt", "vtt", "verbose_json"])]
    pub format: String,
    /// Earlier text, names or spellings the transcript should follow.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Sampling temperature; 0 (the default) decodes greedily and retries hotter only when a
    /// window's text looks wrong.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Translate into English instead of transcribing.
    #[arg(long)]
    pub translate: bool,
    /// Worker threads (default all cores).
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
    /// The audio file: WAV, FLAC, MP3 or Ogg Vorbis.
    pub audio: PathBuf,
}

pub fn run(args: TranscribeArgs) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&args.temperature) {
        anyhow::bail!("--temperature must be between 0 and 1");
    }
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().context("starting the worker threads")?;
    }
    let bytes = std::fs::read(&args.audio).with_context(|| args.audio.display().to_string())?;
    let audio = decode_16k_mono(&bytes, MAX_SECONDS).with_context(|| args.audio.display().to_string())?;
    let model = WhisperModel::load_on(&args.model, args.device).with_context(|| args.model.display().to_string())?;
    let options = WhisperOptions {
        language: args.language.clone(),
        translate: args.translate,
        prompt: args.prompt.clone(),
        temperature: Some(args.temperature).filter(|&t| t > 0.0),
        condition_on_previous_text: true,
        seed: 0,
    };
    let long = audio.duration() > 30.0;
    let t = transcribe_samples(&model, &audio.samples, &options, &mut |done, total| {
        if long {
            eprint!("\r{done:.0} / {total:.0} s");
        }
    })?;
    if long {
        eprintln!();
    }
    let mut out = std::io::stdout().lock();
    out.write_all(render(&t, &args.format, args.translate).as_bytes())?;
    Ok(())
}

/// The transcript in `format`, as the server's route writes it.
fn render(t: &Transcription, format: &str, translate: bool) -> String {
    match format {
        "json" => format!("{}\n", serde_json::json!({ "text": t.text })),
        "srt" => formats::srt(t),
        "vtt" => formats::vtt(t),
        "verbose_json" => format!("{}\n", formats::verbose_json(t, if translate { "translate" } else { "transcribe" })),
        _ => format!("{}\n", t.text),
    }
}
