//! Random-weight Whisper models made in memory with the vocabulary and every other key of a real
//! Whisper file (the template, whose tensors are never read): a small one whose matrices are F32,
//! for checks that run a whole model through two backends quickly (the kernel backend on the CPU
//! execution harness against the CPU backend: both compute in f32, so they must agree closely),
//! and one shaped like whisper-base with F16 matrices, as the real file has them, for speed.

use std::sync::Arc;

use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::quant::GgmlType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The sizes of the two stacks and the type of the matrices.
#[derive(Clone, Copy, Debug)]
pub struct WhisperShape {
    pub name: &'static str,
    /// Audio positions after the stride-2 convolution (a window is twice as many mel frames).
    pub audio_ctx: usize,
    /// The decoder's positions.
    pub text_ctx: usize,
    pub state: usize,
    pub heads: usize,
    pub layers: usize,
    /// The type of every matrix (F32 or F16); vectors are F32.
    pub matrices: GgmlType,
}

/// Two layers per stack of 64 values, 16 audio positions: seconds on the CPU execution harness.
pub const SMALL: WhisperShape =
    WhisperShape { name: "small", audio_ctx: 16, text_ctx: 32, state: 64, heads: 4, layers: 2, matrices: GgmlType::F32 };

/// whisper-base: 6 layers per stack of 512 values in 8 heads, a 30-second window.
pub const BASE: WhisperShape =
    WhisperShape { name: "whisper-base", audio_ctx: 1500, text_ctx: 448, state: 512, heads: 8, layers: 6, matrices: GgmlType::F16 };

struct Tensors {
    w: GgufWriter<'static>,
    rng: StdRng,
    shape: WhisperShape,
}

impl Tensors {
    /// Values of type `ty` scaled to keep activations near unit size: `scale · U(-1, 1)`, plus
    /// `offset`.
    fn add_as(&mut self, ty: GgmlType, name: &str, dims: &[u64], scale: f32, offset: f32) -> Result<(), String> {
        let n: u64 = dims.iter().product();
        let values = (0..n).map(|_| offset + scale * self.rng.random_range(-1.0f32..1.0));
        let bytes: Vec<u8> = match ty {
            GgmlType::F16 => values.flat_map(|v| half::f16::from_f32(v).to_le_bytes()).collect(),
            _ => values.flat_map(f32::to_le_bytes).collect(),
        };
        self.w.add_tensor(name, dims, ty, bytes).map(|_| ()).map_err(|e| e.to_string())
    }

    fn add(&mut self, name: &str, dims: &[u64], scale: f32, offset: f32) -> Result<(), String> {
        self.add_as(GgmlType::F32, name, dims, scale, offset)
    }

    /// A `rows x cols` matrix (GGUF dims `[cols, rows]`) and, when `bias`, its bias.
    fn linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<(), String> {
        let ty = self.shape.matrices;
        self.add_as(ty, &format!("{name}.weight"), &[cols as u64, rows as u64], (3.0 / cols as f32).sqrt(), 0.0)?;
        if bias {
            self.add(&format!("{name}.bias"), &[rows as u64], 0.1, 0.0)?;
        }
        Ok(())
    }

    fn norm(&mut self, name: &str) -> Result<(), String> {
        let n = self.shape.state as u64;
        self.add(&format!("{name}.weight"), &[n], 0.1, 1.0)?;
        self.add(&format!("{name}.bias"), &[n], 0.1, 0.0)
    }

    /// Whisper's attention: q, v and out biased, k not.
    fn attention(&mut self, prefix: &str) -> Result<(), String> {
        for (part, bias) in [("q", true), ("k", false), ("v", true), ("out", true)] {
            self.linear(&format!("{prefix}_{part}"), self.shape.state, self.shape.state, bias)?;
        }
        Ok(())
    }

    fn layer(&mut self, side: &str, i: usize, cross: bool) -> Result<(), String> {
        let n = |s: &str| format!("{side}.blk.{i}.{s}");
        self.norm(&n("attn_norm"))?;
        self.attention(&n("attn"))?;
        if cross {
            self.norm(&n("cross_norm"))?;
            self.attention(&n("cross"))?;
        }
        self.norm(&n("ffn_norm"))?;
        let d = self.shape.state;
        self.linear(&n("ffn_up"), 4 * d, d, true)?;
        self.linear(&n("ffn_down"), d, 4 * d, true)
    }
}

/// The model of `shape`, from `template`'s vocabulary, special tokens, mel bands and
/// suppression lists.
pub fn make(template: &GgufFile, shape: &WhisperShape, seed: u64) -> Result<Arc<GgufFile>, String> {
    let mut w = GgufWriter::new();
    for (key, value) in template.metadata() {
        if key.starts_with("whisper.encoder.") || key.starts_with("whisper.decoder.") || key == "general.file_type" {
            continue;
        }
        w.add(key.clone(), value.clone()).map_err(|e| e.to_string())?;
    }
    // ALL_F32 or MOSTLY_F16
    w.add("general.file_type", Value::U32(u32::from(shape.matrices == GgmlType::F16))).map_err(|e| e.to_string())?;
    for (side, n_ctx) in [("encoder", shape.audio_ctx), ("decoder", shape.text_ctx)] {
        let keys = [
            ("context_length", n_ctx),
            ("embedding_length", shape.state),
            ("attention.head_count", shape.heads),
            ("block_count", shape.layers),
        ];
        for (key, v) in keys {
            w.add(format!("whisper.{side}.{key}"), Value::U32(v as u32)).map_err(|e| e.to_string())?;
        }
    }
    let n_mels = template.get_u64("whisper.audio.n_mels").ok_or("the template has no whisper.audio.n_mels")? as usize;
    let n_vocab = template
        .get_u64("whisper.vocab_size")
        .map(|v| v as usize)
        .or_else(|| template.tensor("dec.token_embd.weight").map(|t| t.dims[1] as usize));
    let n_vocab = n_vocab.ok_or("the template has neither whisper.vocab_size nor dec.token_embd.weight")?;
    let (d, audio, text) = (shape.state as u64, shape.audio_ctx as u64, shape.text_ctx as u64);
    let mut t = Tensors { w, rng: StdRng::seed_from_u64(seed), shape: *shape };
    // the convolutions: [kernel 3, in, out]
    let conv = shape.matrices;
    t.add_as(conv, "enc.conv1.weight", &[3, n_mels as u64, d], (1.0 / (3 * n_mels) as f32).sqrt(), 0.0)?;
    t.add("enc.conv1.bias", &[d], 0.1, 0.0)?;
    t.add_as(conv, "enc.conv2.weight", &[3, d, d], (1.0 / (3 * shape.state) as f32).sqrt(), 0.0)?;
    t.add("enc.conv2.bias", &[d], 0.1, 0.0)?;
    t.add("enc.position", &[d, audio], 0.5, 0.0)?;
    for i in 0..shape.layers {
        t.layer("enc", i, false)?;
    }
    t.norm("enc.output_norm")?;
    t.add_as(shape.matrices, "dec.token_embd.weight", &[d, n_vocab as u64], 0.5, 0.0)?;
    t.add("dec.position", &[d, text], 0.5, 0.0)?;
    for i in 0..shape.layers {
        t.layer("dec", i, true)?;
    }
    t.norm("dec.output_norm")?;
    let bytes = t.w.to_bytes().map_err(|e| e.to_string())?;
    GgufFile::from_bytes(bytes).map(Arc::new).map_err(|e| e.to_string())
}

/// `template` (any GGUF file) with its tensors left out: the vocabulary and keys [`make`] and
/// `shaped::make` read, small enough to travel (for a Whisper file whisper.vocab_size added,
/// which [`make`] reads in place of the embedding's rows).
pub fn vocabulary_only(template: &GgufFile) -> Result<GgufWriter<'static>, String> {
    let mut w = GgufWriter::new();
    for (key, value) in template.metadata() {
        w.add(key.clone(), value.clone()).map_err(|e| e.to_string())?;
    }
    if template.architecture() == Some("whisper") && template.get_u64("whisper.vocab_size").is_none() {
        let rows = template.tensor("dec.token_embd.weight").ok_or("the template has no dec.token_embd.weight")?.dims[1];
        w.add("whisper.vocab_size", Value::U32(rows as u32)).map_err(|e| e.to_string())?;
    }
    Ok(w)
}
