//! Audio files to 16 kHz mono f32 samples: the container and codec read by `symphonia`
//! (WAV with 8/16/24/32-bit integer or float PCM, FLAC, MP3, Ogg Vorbis), channels averaged,
//! the rate converted by `rubato`'s sinc resampler when it is not 16 kHz already.

use std::io::Cursor;

use rubato::{Resampler, SincFixedIn, SincInterpolationParameters, SincInterpolationType, WindowFunction};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::mel::SAMPLE_RATE;

/// Why a file could not be read as audio; the message says what to fix.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AudioError {
    #[error("the file is empty")]
    Empty,
    #[error("not a supported audio file (WAV, FLAC, MP3 or Ogg Vorbis): {0}")]
    Format(String),
    #[error("the audio is corrupt: {0}")]
    Corrupt(String),
    #[error("the audio has no samples")]
    NoSamples,
    #[error("the audio is too long: {seconds:.0} s, at most {max:.0} s")]
    TooLong { seconds: f64, max: f64 },
}

/// Decoded audio at 16 kHz, mono.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedAudio {
    pub samples: Vec<f32>,
    /// The file's own rate and channel count, before conversion.
    pub source_rate: u32,
    pub source_channels: usize,
}

impl DecodedAudio {
    /// Length in seconds.
    pub fn duration(&self) -> f64 {
        self.samples.len() as f64 / SAMPLE_RATE as f64
    }
}

/// Decodes a whole audio file held in memory. Refuses more than `max_seconds` of audio (so a
/// small compressed upload cannot expand into gigabytes of samples).
pub fn decode_16k_mono(bytes: &[u8], max_seconds: f64) -> Result<DecodedAudio, AudioError> {
    if bytes.is_empty() {
        return Err(AudioError::Empty);
    }
    let (rate, channels, mono) = decode_mono(bytes.to_vec(), max_seconds)?;
    if mono.is_empty() {
        return Err(AudioError::NoSamples);
    }
    // resampling rings a little past full scale next to clipped stretches: clipped again
    let samples: Vec<f32> = if rate as usize == SAMPLE_RATE { mono } else { resample(&mono, rate)?.into_iter().map(full_scale).collect() };
    if samples.is_empty() {
        // a few samples at a high rate: less than one at 16 kHz
        return Err(AudioError::NoSamples);
    }
    Ok(DecodedAudio { samples, source_rate: rate, source_channels: channels })
}

/// The sample rate a RIFF/WAVE file's `fmt ` chunk gives, if the bytes are one and have it.
fn wav_header_rate(bytes: &[u8]) -> Option<u32> {
    if bytes.get(..4)? != b"RIFF" || bytes.get(8..12)? != b"WAVE" {
        return None;
    }
    let mut at = 12;
    while let Some(header) = bytes.get(at..at + 8) {
        let size = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
        if &header[..4] == b"fmt " {
            let rate = bytes.get(at + 12..at + 16)?;
            return Some(u32::from_le_bytes(rate.try_into().expect("4 bytes")));
        }
        // chunks are padded to an even length
        at = at.checked_add(8)?.checked_add(size.checked_add(size % 2)?)?;
    }
    None
}

/// The file's samples with channels averaged, at its own rate: (rate, channels, samples).
fn decode_mono(bytes: Vec<u8>, max_seconds: f64) -> Result<(u32, usize, Vec<f32>), AudioError> {
    // symphonia 0.5's WAV reader panics on a rate of 0 (`TimeBase::new`): refused before it reads
    if wav_header_rate(&bytes) == Some(0) {
        return Err(AudioError::Format("the WAV header gives a sample rate of 0".into()));
    }
    let stream = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let probed = symphonia::default::get_probe()
        .format(&Hint::new(), stream, &FormatOptions::default(), &MetadataOptions::default())
        .map_err(|e| AudioError::Format(e.to_string()))?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| AudioError::Format("no audio track".into()))?;
    let track_id = track.id;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|e| AudioError::Format(e.to_string()))?;
    let (mut rate, mut channels) = (track.codec_params.sample_rate.unwrap_or(0), 0usize);
    let mut mono = Vec::new();
    let mut interleaved: Option<SampleBuffer<f32>> = None;
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(SymphoniaError::ResetRequired) => break,
            Err(e) => return Err(AudioError::Corrupt(e.to_string())),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            Err(e) => return Err(AudioError::Corrupt(e.to_string())),
        };
        let spec = *decoded.spec();
        rate = spec.rate;
        channels = spec.channels.count().max(1);
        if interleaved.as_ref().is_none_or(|b| b.capacity() < decoded.capacity() * channels) {
            interleaved = Some(SampleBuffer::new(decoded.capacity() as u64, spec));
        }
        let buf = interleaved.as_mut().expect("allocated above");
        buf.copy_interleaved_ref(decoded);
        mono.extend(buf.samples().chunks_exact(channels).map(|frame| full_scale(frame.iter().sum::<f32>() / channels as f32)));
        if rate > 0 && mono.len() as f64 / rate as f64 > max_seconds {
            return Err(AudioError::TooLong { seconds: mono.len() as f64 / rate as f64, max: max_seconds });
        }
    }
    if rate == 0 {
        return Err(AudioError::Format("the stream has no sample rate".into()));
    }
    Ok((rate, channels, mono))
}

/// A sample clipped to full scale, as 16-bit PCM holds it (what faster-whisper's decoder gives
/// the model): float files may carry values past it, and NaN or infinities, which would poison
/// every window after them; those become silence.
fn full_scale(x: f32) -> f32 {
    if x.is_finite() {
        x.clamp(-1.0, 1.0)
    } else {
        0.0
    }
}

/// `samples` at `rate` Hz converted to 16 kHz by a windowed-sinc resampler (256 taps,
/// Blackman-Harris window, cubic interpolation between 256 oversampled points).
fn resample(samples: &[f32], rate: u32) -> Result<Vec<f32>, AudioError> {
    const CHUNK: usize = 4096;
    let ratio = SAMPLE_RATE as f64 / rate as f64;
    let params = SincInterpolationParameters {
        sinc_len: 256,
        f_cutoff: 0.95,
        interpolation: SincInterpolationType::Cubic,
        oversampling_factor: 256,
        window: WindowFunction::BlackmanHarris2,
    };
    let mut resampler =
        SincFixedIn::<f32>::new(ratio, 1.0, params, CHUNK, 1).map_err(|e| AudioError::Format(format!("sample rate {rate} Hz: {e}")))?;
    let want = (samples.len() as f64 * ratio).round() as usize;
    let mut out = Vec::with_capacity(want + CHUNK);
    let mut chunks = samples.chunks_exact(CHUNK);
    for chunk in &mut chunks {
        let o = resampler.process(&[chunk], None).map_err(|e| AudioError::Corrupt(e.to_string()))?;
        out.extend_from_slice(&o[0]);
    }
    let rest = chunks.remainder();
    let o = resampler.process_partial(Some(&[rest]), None).map_err(|e| AudioError::Corrupt(e.to_string()))?;
    out.extend_from_slice(&o[0]);
    // flush what the filter still holds (its output is aligned with its input: no delay to cut)
    while out.len() < want {
        let o = resampler.process_partial::<&[f32]>(None, None).map_err(|e| AudioError::Corrupt(e.to_string()))?;
        if o[0].is_empty() {
            break;
        }
        out.extend_from_slice(&o[0]);
    }
    out.truncate(want);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAV file of 16-bit PCM.
    fn wav(rate: u32, channels: u16, samples: &[i16]) -> Vec<u8> {
        let data_len = (samples.len() * 2) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF");
        b.extend_from_slice(&(36 + data_len).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * channels as u32 * 2).to_le_bytes());
        b.extend_from_slice(&(channels * 2).to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&data_len.to_le_bytes());
        for s in samples {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn sixteen_khz_mono_pcm_is_read_exactly() {
        let samples: Vec<i16> = (0..1600).map(|i| ((i * 37) % 2000 - 1000) as i16).collect();
        let a = decode_16k_mono(&wav(16_000, 1, &samples), 60.0).unwrap();
        assert_eq!(a.samples.len(), 1600);
        for (got, &want) in a.samples.iter().zip(&samples) {
            assert_eq!(*got, want as f32 / 32768.0);
        }
    }

    #[test]
    fn stereo_is_averaged() {
        let frames: Vec<i16> = (0..800).flat_map(|i| [(i % 100) as i16 * 100, -((i % 50) as i16) * 100]).collect();
        let a = decode_16k_mono(&wav(16_000, 2, &frames), 60.0).unwrap();
        assert_eq!(a.source_channels, 2);
        for (i, got) in a.samples.iter().enumerate() {
            let want = (((i % 100) as f32 * 100.0) + (-((i % 50) as f32) * 100.0)) / 2.0 / 32768.0;
            assert!((got - want).abs() < 1e-6);
        }
    }

    #[test]
    fn other_rates_are_resampled_to_16_khz() {
        // a 440 Hz tone at 44.1 kHz: as many seconds after, and still 440 Hz (zero crossings)
        let tone: Vec<i16> =
            (0..44_100).map(|i| ((2.0 * std::f64::consts::PI * 440.0 * i as f64 / 44_100.0).sin() * 16000.0) as i16).collect();
        let a = decode_16k_mono(&wav(44_100, 1, &tone), 60.0).unwrap();
        assert_eq!(a.source_rate, 44_100);
        assert_eq!(a.samples.len(), 16_000);
        let middle = &a.samples[2000..14_000];
        let crossings = middle.windows(2).filter(|w| (w[0] < 0.0) != (w[1] < 0.0)).count();
        // 0.75 s of 440 Hz: 660 crossings
        assert!((655..=665).contains(&crossings), "{crossings} zero crossings");
        // in time with the source: a click at 0.5 s is at 0.5 s (within a sample)
        let mut click = vec![0i16; 44_100];
        click[22_050] = 30_000;
        let c = decode_16k_mono(&wav(44_100, 1, &click), 60.0).unwrap();
        let peak = (0..c.samples.len()).max_by(|&x, &y| c.samples[x].total_cmp(&c.samples[y])).unwrap();
        assert!((7999..=8001).contains(&peak), "the click is at {peak}, not 8000");
    }

    /// A WAV file of `bits`-bit samples (integer PCM, or IEEE float for 32 with `float`).
    fn wav_bits(rate: u32, channels: u16, bits: u16, float: bool, samples: &[f64]) -> Vec<u8> {
        let bytes_per = (bits / 8) as usize;
        let mut data = Vec::new();
        for &x in samples {
            match (bits, float) {
                (8, _) => data.push(((x * 127.0).round() as i16 + 128) as u8),
                (24, _) => data.extend_from_slice(&(((x * 8_388_607.0).round() as i32).to_le_bytes()[..3])),
                (32, true) => data.extend_from_slice(&(x as f32).to_le_bytes()),
                (32, false) => data.extend_from_slice(&(((x * 2_147_483_647.0).round() as i32).to_le_bytes())),
                _ => data.extend_from_slice(&(((x * 32767.0).round() as i16).to_le_bytes())),
            }
        }
        let mut b = b"RIFF".to_vec();
        b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&(if float { 3u16 } else { 1u16 }).to_le_bytes());
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * channels as u32 * bytes_per as u32).to_le_bytes());
        b.extend_from_slice(&(channels * bits / 8).to_le_bytes());
        b.extend_from_slice(&bits.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&data);
        b
    }

    /// Zero crossings per second of the middle of `samples` (16 kHz): twice the frequency.
    fn crossings_per_second(samples: &[f32]) -> f64 {
        let middle = &samples[samples.len() / 5..samples.len() * 4 / 5];
        let n = middle.windows(2).filter(|w| (w[0] < 0.0) != (w[1] < 0.0)).count();
        n as f64 / (middle.len() as f64 / 16_000.0)
    }

    #[test]
    fn every_wav_sample_format_decodes() {
        // a 440 Hz tone at half scale, 0.5 s at 22.05 kHz
        let tone: Vec<f64> = (0..11_025).map(|i| 0.5 * (2.0 * std::f64::consts::PI * 440.0 * i as f64 / 22_050.0).sin()).collect();
        let stereo: Vec<f64> = tone.iter().flat_map(|&x| [x, x]).collect();
        for (bits, float, channels) in [(8, false, 1), (16, false, 2), (24, false, 1), (32, false, 1), (32, true, 2)] {
            let samples = if channels == 2 { &stereo } else { &tone };
            let a = decode_16k_mono(&wav_bits(22_050, channels, bits, float, samples), 60.0).unwrap_or_else(|e| panic!("{bits}-bit: {e}"));
            assert_eq!((a.source_rate, a.source_channels), (22_050, channels as usize));
            assert_eq!(a.samples.len(), 8000, "{bits}-bit");
            let peak = a.samples.iter().fold(0f32, |m, s| m.max(s.abs()));
            assert!((peak - 0.5).abs() < 0.02, "{bits}-bit: peak {peak}");
            assert!((crossings_per_second(&a.samples) - 880.0).abs() < 15.0, "{bits}-bit");
        }
    }

    #[test]
    fn flac_mp3_and_ogg_vorbis_decode() {
        // tests/fixtures/audio: the same tone encoded by ffmpeg (stereo for the Vorbis file)
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/audio");
        for name in ["tone-440hz.flac", "tone-440hz.mp3", "tone-440hz.ogg"] {
            let bytes = std::fs::read(dir.join(name)).unwrap();
            let a = decode_16k_mono(&bytes, 60.0).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(a.source_rate, 22_050, "{name}");
            // an MP3 carries an encoder delay and padding of up to a frame or two
            assert!((a.duration() - 0.5).abs() < 0.12, "{name}: {} s", a.duration());
            assert!((crossings_per_second(&a.samples) - 880.0).abs() < 20.0, "{name}: {}", crossings_per_second(&a.samples));
        }
    }

    #[test]
    fn float_samples_past_full_scale_are_clipped_and_non_numbers_silenced() {
        // found by the fuzz target `audio` (fuzz/regressions/audio/): a float WAV whose samples
        // are 7.5, -3, NaN, infinity
        let weird = [0.25, 7.5, -3.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.5];
        let a = decode_16k_mono(&wav_bits(16_000, 1, 32, true, &weird), 60.0).unwrap();
        assert_eq!(a.samples, [0.25, 1.0, -1.0, 0.0, 0.0, 0.0, -0.5]);
        let regression = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/audio/float-wav-out-of-range");
        let a = decode_16k_mono(&std::fs::read(regression).unwrap(), 60.0).unwrap();
        assert!(a.samples.iter().all(|s| s.is_finite() && s.abs() <= 1.0), "resampled samples stay within full scale");
    }

    #[test]
    fn less_than_a_sample_at_16_khz_is_no_audio() {
        // found by the fuzz target `audio` (fuzz/regressions/audio/huge-rate-wav, a WAV claiming
        // 67 MHz): audio shorter than one 16 kHz sample decoded to nothing
        assert_eq!(decode_16k_mono(&wav_bits(48_000, 1, 16, false, &[0.5]), 60.0), Err(AudioError::NoSamples));
        let regression = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/audio/huge-rate-wav");
        assert_eq!(decode_16k_mono(&std::fs::read(regression).unwrap(), 60.0), Err(AudioError::NoSamples));
    }

    #[test]
    fn a_wav_of_rate_zero_is_refused() {
        // found by the fuzz target `audio` (fuzz/regressions/audio/zero-rate-wav): the WAV
        // reader panicked on a `fmt ` chunk of rate 0
        let want = Err(AudioError::Format("the WAV header gives a sample rate of 0".into()));
        assert_eq!(decode_16k_mono(&wav(0, 1, &[1; 100]), 60.0), want);
        let regression = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/audio/zero-rate-wav");
        assert_eq!(decode_16k_mono(&std::fs::read(regression).unwrap(), 60.0), want);
    }

    #[test]
    fn bad_files_say_why() {
        assert_eq!(decode_16k_mono(b"", 60.0), Err(AudioError::Empty));
        assert!(matches!(decode_16k_mono(b"this is not audio at all", 60.0), Err(AudioError::Format(_))));
        let mut truncated = wav(16_000, 1, &[1; 1000]);
        truncated.truncate(30);
        assert!(decode_16k_mono(&truncated, 60.0).is_err());
        let long = wav(16_000, 1, &vec![0; 16_000 * 3]);
        assert!(matches!(decode_16k_mono(&long, 2.0), Err(AudioError::TooLong { .. })));
    }
}
