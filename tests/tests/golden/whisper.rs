//! Whisper against faster-whisper (`tools/make-whisper-goldens.py` made the fixtures in
//! `tests/fixtures/whisper/`): the clips' log-mel spectrograms equal the reference's within
//! 1e-4, and greedy decoding of each clip's window gives the reference's token ids (timestamps
//! included), no-speech probability and average log-probability, for tiny.en and base.

use engine::audio::{decode_16k_mono, log_mel, mel_filters};
use engine_tests::{fixture, words};

const CLIPS: [&str; 5] = ["weather", "numbers", "science", "question", "story"];

/// A `.mel` fixture: (n_mels, n_frames, values band-major).
fn read_mel(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(fixture(&format!("whisper/{name}.mel"))).unwrap();
    let word = |i: usize| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap()) as usize;
    let (n_mels, n_frames) = (word(0), word(1));
    let values: Vec<f32> = bytes[8..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(values.len(), n_mels * n_frames);
    (n_mels, n_frames, values)
}

#[test]
fn log_mel_matches_faster_whisper() {
    let filters = mel_filters(80);
    for name in CLIPS {
        let wav = std::fs::read(fixture(&format!("whisper/clips/{name}.wav"))).unwrap();
        let audio = decode_16k_mono(&wav, 600.0).unwrap();
        let (n_mels, n_frames, want) = read_mel(name);
        let got = log_mel(&audio.samples, &filters, n_mels);
        assert_eq!((got.n_mels, got.n_frames), (n_mels, n_frames), "{name}: shape");
        let worst = got.data.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
        println!("{name}: {n_frames} frames, largest difference from faster-whisper {worst:.2e}");
        assert!(worst <= 1e-4, "{name}: log-mel differs from faster-whisper's by {worst}");
    }
}

/// Greedy decoding of each clip's single window equals faster-whisper's token ids.
fn greedy_matches(model_target: &str, language: Option<&str>) {
    use engine::model::whisper::WhisperModel;
    use engine::sampling::Rng;
    use engine::transcribe::logit_rules::LogitRules;
    use engine::transcribe::window::{decode_window, WindowPrompt};
    let model = WhisperModel::load(engine_tests::fetch_model(model_target)).unwrap();
    let c = model.config();
    let rules = LogitRules::new(c, model.tokenizer());
    let goldens = engine_tests::read_json(&fixture("whisper/goldens.json"));
    let filters = mel_filters(c.n_mels);
    let lang = language.map(|l| c.tokens.languages.iter().find(|(_, code)| code == l).unwrap().0);
    let (mut said_all, mut ours_all, mut reference_all) = (Vec::new(), Vec::new(), Vec::new());
    for name in CLIPS {
        let wav = std::fs::read(fixture(&format!("whisper/clips/{name}.wav"))).unwrap();
        let audio = decode_16k_mono(&wav, 600.0).unwrap();
        let mel = log_mel(&audio.samples, &filters, c.n_mels);
        let mel = mel.window(0, mel.n_frames - 1);
        let encoded = model.encode(&mel.data).unwrap();
        let prompt = WindowPrompt { language: lang, timestamps: true, ..Default::default() };
        let got = decode_window(&model, &encoded, &rules, &prompt, 0.0, &mut Rng::new(0)).unwrap();
        let golden = &goldens[model_target][name];
        let want: Vec<u32> = golden["segments"].as_array().unwrap().iter().flat_map(|s| engine_tests::json_ids(&s["tokens"])).collect();
        println!("{model_target} {name}: {:?}", model.tokenizer().decode(&got.tokens));
        assert_eq!(got.tokens, want, "{model_target} {name}");
        said_all.extend(words(&std::fs::read_to_string(fixture(&format!("whisper/clips/{name}.txt"))).unwrap()));
        ours_all.extend(words(&model.tokenizer().decode(&got.tokens.iter().copied().filter(|&t| t < c.tokens.eot).collect::<Vec<_>>())));
        reference_all.extend(words(golden["text"].as_str().unwrap()));
        let want_nsp = golden["segments"][0]["no_speech_prob"].as_f64().unwrap();
        let want_avg = golden["segments"][0]["avg_logprob"].as_f64().unwrap();
        println!(
            "  no-speech probability {:.5} (faster-whisper {want_nsp:.5}), average log-probability {:.5} ({want_avg:.5})",
            got.no_speech_prob, got.avg_logprob
        );
        assert!(
            (got.no_speech_prob.ln() - want_nsp.ln()).abs() < 1e-3,
            "{name}: no-speech probability {} vs {want_nsp}",
            got.no_speech_prob
        );
        assert!((got.avg_logprob - want_avg).abs() < 1e-3, "{name}: average log-probability {} vs {want_avg}", got.avg_logprob);
    }
    let (ours, reference) = (engine_tests::word_error_rate(&said_all, &ours_all), engine_tests::word_error_rate(&said_all, &reference_all));
    println!("{model_target}: word error rate {ours:.3} over the clips (faster-whisper {reference:.3})");
    assert_eq!(ours, reference);
}

#[test]
fn greedy_tokens_match_faster_whisper_tiny_en() {
    greedy_matches("whisper-tiny.en", None);
}

#[test]
fn greedy_tokens_match_faster_whisper_base() {
    greedy_matches("whisper-base", Some("en"));
}

/// Tiny.en with its matrices quantized to Q8_0 (`tools/fetch-models.sh whisper-tiny.en-q8_0`)
/// through the same products: the clips' transcripts within a word of the f16 model's.
#[test]
fn q8_0_whisper_transcribes_like_f16() {
    use engine::model::whisper::WhisperModel;
    use engine::transcribe::whisper::{transcribe_samples, WhisperOptions};
    let model = WhisperModel::load(engine_tests::fetch_model("whisper-tiny.en-q8_0")).unwrap();
    let goldens = engine_tests::read_json(&fixture("whisper/goldens.json"));
    let (mut said_all, mut heard_all) = (Vec::new(), Vec::new());
    for name in CLIPS {
        let wav = std::fs::read(fixture(&format!("whisper/clips/{name}.wav"))).unwrap();
        let audio = decode_16k_mono(&wav, 600.0).unwrap();
        let t = transcribe_samples(&model, &audio.samples, &WhisperOptions::default(), &mut |_, _| {}).unwrap();
        let f16_words = words(goldens["whisper-tiny.en"][name]["text"].as_str().unwrap());
        let heard = words(&t.text);
        let apart = engine_tests::word_error_rate(&f16_words, &heard) * f16_words.len() as f64;
        println!("{name}: {:?} ({apart} words from f16)", t.text);
        assert!(apart <= 1.0 + 1e-9, "{name}: {:?} is {apart} words from the f16 model's", t.text);
        said_all.extend(words(&std::fs::read_to_string(fixture(&format!("whisper/clips/{name}.txt"))).unwrap()));
        heard_all.extend(heard);
    }
    println!("whisper-tiny.en Q8_0: word error rate {:.3}", engine_tests::word_error_rate(&said_all, &heard_all));
}

/// The recorded clips of `tools/fetch-models.sh speech-clips` (pytest-audioeval's: 27 short
/// sentences in 9 languages, 16 kHz float WAV) transcribed end to end, language detected (base),
/// temperature 0, no previous text, as faster-whisper transcribed them for
/// `tests/fixtures/whisper/speech-clips.json`: the same language and the same token ids (a clip
/// whose temperature-0 text fails the checks is decoded again by the fallback schedule, which
/// the golden did not run; a near tie may part the two), and the error rates against the clips'
/// texts (printed per language: words, or characters for Chinese and Japanese).
fn speech_clips_match_faster_whisper(model_target: &str) {
    use std::collections::BTreeMap;

    use engine::model::whisper::WhisperModel;
    use engine::transcribe::whisper::{language_name, transcribe_samples, WhisperOptions};
    let model = WhisperModel::load(engine_tests::fetch_model(model_target)).unwrap();
    let folder = engine_tests::fetch_model("speech-clips");
    let goldens = engine_tests::read_json(&fixture("whisper/speech-clips.json"));
    let options = WhisperOptions { temperature: Some(0.0), condition_on_previous_text: false, ..Default::default() };
    let units = |language: &str, text: &str| -> Vec<String> {
        if matches!(language, "ja" | "zh") {
            text.chars().filter(|c| c.is_alphanumeric()).map(|c| c.to_string()).collect()
        } else {
            words(text)
        }
    };
    /// Units said, units heard, units faster-whisper heard.
    type Heard = (Vec<String>, Vec<String>, Vec<String>);
    let mut rates: BTreeMap<String, Heard> = BTreeMap::new();
    let clips = goldens[model_target].as_object().unwrap();
    assert!(!clips.is_empty());
    let (mut near_ties, mut fallbacks) = (0, 0);
    for (clip, golden) in clips {
        let wav = std::fs::read(folder.join(format!("{clip}.wav"))).unwrap();
        let audio = decode_16k_mono(&wav, 600.0).unwrap();
        let got = transcribe_samples(&model, &audio.samples, &options, &mut |_, _| {}).unwrap();
        let language = golden["language"].as_str().unwrap();
        if model.config().multilingual {
            assert_eq!(got.language.as_deref(), Some(language_name(language).unwrap_or(language)), "{model_target} {clip}: language");
        }
        let want: Vec<u32> = golden["segments"].as_array().unwrap().iter().flat_map(|s| engine_tests::json_ids(&s["tokens"])).collect();
        let tokens: Vec<u32> = got.segments.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        println!("{model_target} {clip} ({language}): {:?}", got.text);
        let fell_back = got.segments.iter().any(|s| s.temperature > 0.0);
        if fell_back {
            // The golden is faster-whisper at temperature 0 alone; this transcription ran the
            // fallback schedule, which takes over only when the temperature-0 text fails the
            // checks: faster-whisper's own text must fail them too.
            let segment = &golden["segments"][0];
            let (ratio, logprob) = (segment["compression_ratio"].as_f64().unwrap(), segment["avg_logprob"].as_f64().unwrap());
            println!("  decoded again at a higher temperature; faster-whisper's temperature-0 text: compression ratio {ratio:.2}, average log-probability {logprob:.2}");
            assert!(ratio > 2.4 || logprob < -1.0, "{model_target} {clip}: fell back though faster-whisper's text passes the checks");
            fallbacks += 1;
        } else if tokens != want {
            // Only a near tie may part the two: at the first token where they differ, the two
            // choices' logits (after the shared prefix, under this model) must be within 0.05,
            // what two float32 implementations summing in other orders can disagree on.
            let at = tokens.iter().zip(&want).take_while(|(a, b)| a == b).count();
            assert!(at < tokens.len().min(want.len()), "{model_target} {clip}: one transcript is a prefix of the other");
            let language_token = model.config().tokens.languages.iter().find(|(_, code)| code == language).map(|&(id, _)| id);
            let gap = logit_gap(&model, &audio.samples, language_token, &want[..at], tokens[at], want[at]);
            println!("  parts from faster-whisper ({:?}) at token {at}: logits {gap:+.4} apart", golden["text"]);
            assert!(
                gap.abs() < 0.05,
                "{model_target} {clip}: {:?}, faster-whisper {:?}; token {at} is no near tie ({gap})",
                got.text,
                golden["text"]
            );
            near_ties += 1;
        }
        let spoken = clip.split('/').next().unwrap().to_string();
        let entry = rates.entry(spoken.clone()).or_default();
        entry.0.extend(units(&spoken, golden["reference"].as_str().unwrap()));
        entry.1.extend(units(&spoken, &got.text));
        entry.2.extend(units(&spoken, golden["text"].as_str().unwrap()));
    }
    for (language, (said, heard, reference)) in &rates {
        let unit = if matches!(language.as_str(), "ja" | "zh") { "character" } else { "word" };
        let (ours, theirs) = (engine_tests::word_error_rate(said, heard), engine_tests::word_error_rate(said, reference));
        println!("{model_target} {language}: {unit} error rate {ours:.3} (faster-whisper at temperature 0: {theirs:.3})");
    }
    println!(
        "{model_target}: {} of {} clips token for token, {near_ties} parted at a near tie, {fallbacks} decoded again by the fallback",
        clips.len() - near_ties - fallbacks,
        clips.len()
    );
    assert!(near_ties * 10 <= clips.len(), "{near_ties} near ties in {} clips", clips.len());
}

/// `logit(ours) - logit(theirs)` after the first window's prompt (timestamps on, `language`)
/// and `prefix`.
fn logit_gap(
    model: &engine::model::whisper::WhisperModel,
    samples: &[f32],
    language: Option<u32>,
    prefix: &[u32],
    ours: u32,
    theirs: u32,
) -> f32 {
    use engine::transcribe::window::{prompt_tokens, WindowPrompt};
    let c = model.config();
    let mel = log_mel(samples, &mel_filters(c.n_mels), c.n_mels);
    let encoded = model.encode(&mel.window(0, mel.n_frames - 1).data).unwrap();
    let (mut tokens, _) = prompt_tokens(model, &WindowPrompt { language, timestamps: true, ..Default::default() });
    tokens.extend_from_slice(prefix);
    let logits = model.decode(&encoded, &mut model.new_cache(), &tokens, 0).unwrap();
    logits[ours as usize] - logits[theirs as usize]
}

#[test]
fn speech_clips_match_faster_whisper_tiny_en() {
    speech_clips_match_faster_whisper("whisper-tiny.en");
}

#[test]
fn speech_clips_match_faster_whisper_base() {
    speech_clips_match_faster_whisper("whisper-base");
}

/// A minute of speech and pauses (the clips one after another, a second of silence after each,
/// twice, padded to 60 s) through base with faster-whisper's defaults: three windows, each
/// prompted with the text before it, timestamps included: the same segments (seek, tokens,
/// temperature) as faster-whisper's in `tests/fixtures/whisper/long-form.json`.
#[test]
fn long_form_matches_faster_whisper_base() {
    use engine::model::whisper::WhisperModel;
    use engine::transcribe::whisper::{transcribe_samples, WhisperOptions};
    let mut pcm: Vec<u8> = Vec::new();
    for _ in 0..2 {
        for name in CLIPS {
            pcm.extend_from_slice(&std::fs::read(fixture(&format!("whisper/clips/{name}.wav"))).unwrap()[44..]);
            pcm.extend(std::iter::repeat_n(0u8, 2 * 16_000));
        }
    }
    pcm.resize(pcm.len().max(2 * 60 * 16_000), 0);
    let samples: Vec<f32> = pcm.chunks_exact(2).map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0).collect();
    let model = WhisperModel::load(engine_tests::fetch_model("whisper-base")).unwrap();
    let options = WhisperOptions { language: Some("en".into()), condition_on_previous_text: true, ..Default::default() };
    let got = transcribe_samples(&model, &samples, &options, &mut |_, _| {}).unwrap();
    let golden = engine_tests::read_json(&fixture("whisper/long-form.json"));
    let want = golden["whisper-base"].as_array().unwrap();
    for (i, s) in got.segments.iter().enumerate() {
        println!("{i}: seek {} {:.1}-{:.1} t={} {:?}", s.seek, s.start, s.end, s.temperature, s.text);
    }
    assert_eq!(got.segments.len(), want.len(), "segments");
    for (i, (s, w)) in got.segments.iter().zip(want).enumerate() {
        assert_eq!(s.seek as u64, w["seek"].as_u64().unwrap(), "segment {i}: seek");
        assert_eq!(f64::from(s.temperature), w["temperature"].as_f64().unwrap(), "segment {i}: temperature");
        assert_eq!(s.tokens, engine_tests::json_ids(&w["tokens"]), "segment {i}: {:?} vs {:?}", s.text, w["text"]);
    }
}

/// A small random-weight Whisper (`engine_tests::shaped_whisper::SMALL`, tiny.en's vocabulary, F32
/// matrices) on the kernel backend, run by the CPU execution harness, against the CPU backend:
/// the encoded window, then a prompt and three more tokens fed to both, one step at a time, give
/// the same logits to within f32 rounding at every step, and the same best token.
#[cfg(feature = "sim")]
#[test]
fn whisper_on_the_kernel_backend_gives_the_cpu_backends_logits() {
    use engine::backend::Device;
    use engine::gguf::GgufFile;
    use engine::model::whisper::WhisperModel;
    use engine_tests::shaped_whisper::{self, SMALL};
    let template = GgufFile::open(engine_tests::fetch_model("whisper-tiny.en-q8_0")).unwrap();
    let file = shaped_whisper::make(&template, &SMALL, 7).unwrap();
    let cpu = WhisperModel::from_file_on(file.clone(), Device::Cpu).unwrap();
    let sim = WhisperModel::from_file_simulated(file).unwrap();
    assert_eq!(sim.device(), Device::Cuda(0));
    let n_mels = cpu.config().n_mels;
    // a smooth random spectrogram in Whisper's log-mel range
    let mel: Vec<f32> = (0..n_mels * 2 * SMALL.audio_ctx).map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 1.5).collect();
    let (a_cpu, a_sim) = (cpu.encode(&mel).unwrap(), sim.encode(&mel).unwrap());
    let (mut kv_cpu, mut kv_sim) = (cpu.new_cache(), sim.new_cache());
    let t = &cpu.config().tokens;
    let tokens = [t.sot, t.no_timestamps, 440, 1029, 3000];
    let mut start = 0;
    for (step, end) in [2, 3, 4, 5].into_iter().enumerate() {
        let fed = &tokens[start..end];
        let want = cpu.decode(&a_cpu, &mut kv_cpu, fed, start).unwrap();
        let got = sim.decode(&a_sim, &mut kv_sim, fed, start).unwrap();
        let err: f64 = got.iter().zip(&want).map(|(g, w)| f64::from(g - w).powi(2)).sum();
        let energy: f64 = want.iter().map(|w| f64::from(*w).powi(2)).sum();
        let best = |x: &[f32]| x.iter().enumerate().fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b }).0;
        println!("step {step}: NMSE {:.2e}, best token {} (cpu {})", err / energy, best(&got), best(&want));
        assert!(err / energy < 1e-10, "step {step}: NMSE {:e}", err / energy);
        assert_eq!(best(&got), best(&want), "step {step}");
        start = end;
    }
    // audio encoded by one model is refused by a model on another device
    let e = cpu.decode(&a_sim, &mut cpu.new_cache(), &[t.sot], 0).unwrap_err().to_string();
    assert!(e.contains("another device"), "{e}");
}
