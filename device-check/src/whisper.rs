//! Whisper on the device: a random-weight model (`engine_tests::shaped_whisper`) with tiny.en's
//! vocabulary (a tensor-less copy of its file travels in the bundle), loaded on the device and on
//! the CPU backend. One window is encoded on each and the same prompt and tokens decoded step by
//! step: the device's logits against the CPU's (normalised squared error, within a bound), then
//! the device's speed: the window's encoding in milliseconds and the decoding steps per second.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use engine::backend::Device;
use engine::gguf::GgufFile;
use engine::model::whisper::WhisperModel;
use engine_tests::shaped_whisper::{make, WhisperShape};

use crate::speed::sig3;

/// Loads a Whisper file on the device under test.
pub type WhisperLoader<'a> = &'a dyn Fn(Arc<GgufFile>) -> Result<WhisperModel, String>;

/// The most normalised squared error of the device's logits against the CPU backend's: both sum
/// f32 products, the CPU rounding F16 matrices' activations to f16 first (about 2^-11 each).
const LOGITS_NMSE_BOUND: f64 = 1e-5;

/// A log-mel window of `n_mels` bands and `frames` frames, in Whisper's range, any smooth values.
fn window(n_mels: usize, frames: usize) -> Vec<f32> {
    (0..n_mels * frames).map(|i| (((i * 7919) % 1000) as f32 / 1000.0 - 0.5) * 1.5 + ((i % frames) as f32 * 0.01).sin() * 0.3).collect()
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(g, w)| f64::from(g - w).powi(2)).sum();
    let energy: f64 = want.iter().map(|w| f64::from(*w).powi(2)).sum();
    err / energy
}

/// Prints one line for `shape`; returns the problem met, if any.
pub fn whisper_on_device(load: WhisperLoader<'_>, shape: &WhisperShape, vocabulary: &Path, steps: usize) -> Result<(), String> {
    let template = GgufFile::open(vocabulary).map_err(|e| format!("{}: {e}", vocabulary.display()))?;
    let t0 = Instant::now();
    let file = make(&template, shape, 11)?;
    let made = t0.elapsed().as_secs_f64();
    let device = load(Arc::clone(&file))?;
    let cpu = WhisperModel::from_file_on(file, Device::Cpu).map_err(|e| e.to_string())?;
    let c = cpu.config();
    let mel = window(c.n_mels, 2 * shape.audio_ctx);
    // the first encoding loads the kernels' modules; the second is timed
    device.encode(&mel).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let audio = device.encode(&mel).map_err(|e| e.to_string())?;
    let encode_ms = t0.elapsed().as_secs_f64() * 1e3;
    let audio_cpu = cpu.encode(&mel).map_err(|e| e.to_string())?;
    // the prompt, then tokens fed one at a time (any ids of the vocabulary)
    let t = &c.tokens;
    let prompt = [t.sot, t.no_timestamps];
    let (mut kv, mut kv_cpu) = (device.new_cache(), cpu.new_cache());
    let got = device.decode(&audio, &mut kv, &prompt, 0).map_err(|e| e.to_string())?;
    let want = cpu.decode(&audio_cpu, &mut kv_cpu, &prompt, 0).map_err(|e| e.to_string())?;
    let mut worst = nmse(&got, &want);
    let steps = steps.min(shape.text_ctx - prompt.len());
    let token = |i: usize| (440 + 97 * i as u32) % t.eot;
    // the timed steps keep the logits of the first 4, compared with the CPU's after
    let mut kept = Vec::new();
    let t0 = Instant::now();
    for i in 0..steps {
        let logits = device.decode(&audio, &mut kv, &[token(i)], prompt.len() + i).map_err(|e| e.to_string())?;
        if i < 4 {
            kept.push(logits);
        }
    }
    let per_second = steps as f64 / t0.elapsed().as_secs_f64();
    for (i, got) in kept.iter().enumerate() {
        let want = cpu.decode(&audio_cpu, &mut kv_cpu, &[token(i)], prompt.len() + i).map_err(|e| e.to_string())?;
        worst = worst.max(nmse(got, &want));
    }
    println!(
        "Whisper {} shape ({} layers of {} in {} heads, {} audio positions; random weights, {} matrices), made in {made:.1} s:",
        shape.name,
        shape.layers,
        shape.state,
        shape.heads,
        shape.audio_ctx,
        shape.matrices.name()
    );
    println!(
        "  encode one window {} ms   decode {} steps/s over {steps} steps   logits against the CPU backend: NMSE {:.2e} (bound {LOGITS_NMSE_BOUND:.0e})",
        sig3(encode_ms),
        sig3(per_second),
        worst
    );
    if worst.is_nan() || worst > LOGITS_NMSE_BOUND {
        return Err(format!("Whisper {}: logits NMSE {worst:e} against the CPU backend", shape.name));
    }
    Ok(())
}
