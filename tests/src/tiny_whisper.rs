//! A random-weight Whisper of two small layers per stack, made in memory with the vocabulary and
//! every other key of a real Whisper file (the template): for checks that run a whole model
//! through a backend quickly (the kernel backend on the CPU execution harness against the CPU
//! backend). Its matrices are F32, so two backends computing in f32 must agree closely.

use std::sync::Arc;

use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::quant::GgmlType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The sizes of the two stacks: audio frames after the stride-2 convolution, state width, heads
/// and layers; the decoder's positions.
pub const AUDIO_CTX: usize = 16;
pub const TEXT_CTX: usize = 32;
pub const STATE: usize = 64;
pub const HEADS: usize = 4;
pub const LAYERS: usize = 2;

struct Tensors {
    w: GgufWriter<'static>,
    rng: StdRng,
}

impl Tensors {
    /// F32 values scaled to keep activations near unit size: `scale · U(-1, 1)`, plus `offset`.
    fn add(&mut self, name: &str, dims: &[u64], scale: f32, offset: f32) -> Result<(), String> {
        let n: u64 = dims.iter().product();
        let bytes: Vec<u8> = (0..n).flat_map(|_| (offset + scale * self.rng.random_range(-1.0f32..1.0)).to_le_bytes()).collect();
        self.w.add_tensor(name, dims, GgmlType::F32, bytes).map(|_| ()).map_err(|e| e.to_string())
    }

    /// A `rows x cols` matrix (GGUF dims `[cols, rows]`) and, when `bias`, its bias.
    fn linear(&mut self, name: &str, rows: usize, cols: usize, bias: bool) -> Result<(), String> {
        self.add(&format!("{name}.weight"), &[cols as u64, rows as u64], (3.0 / cols as f32).sqrt(), 0.0)?;
        if bias {
            self.add(&format!("{name}.bias"), &[rows as u64], 0.1, 0.0)?;
        }
        Ok(())
    }

    fn norm(&mut self, name: &str) -> Result<(), String> {
        self.add(&format!("{name}.weight"), &[STATE as u64], 0.1, 1.0)?;
        self.add(&format!("{name}.bias"), &[STATE as u64], 0.1, 0.0)
    }

    /// Whisper's attention: q, v and out biased, k not.
    fn attention(&mut self, prefix: &str) -> Result<(), String> {
        for (part, bias) in [("q", true), ("k", false), ("v", true), ("out", true)] {
            self.linear(&format!("{prefix}_{part}"), STATE, STATE, bias)?;
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
        self.linear(&n("ffn_up"), 4 * STATE, STATE, true)?;
        self.linear(&n("ffn_down"), STATE, 4 * STATE, true)
    }
}

/// The model, from `template`'s vocabulary, special tokens, mel bands and suppression lists.
pub fn make(template: &GgufFile, seed: u64) -> Result<Arc<GgufFile>, String> {
    let mut w = GgufWriter::new();
    for (key, value) in template.metadata() {
        if key.starts_with("whisper.encoder.") || key.starts_with("whisper.decoder.") || key == "general.file_type" {
            continue;
        }
        w.add(key.clone(), value.clone()).map_err(|e| e.to_string())?;
    }
    w.add("general.file_type", Value::U32(0)).map_err(|e| e.to_string())?; // ALL_F32
    for (side, n_ctx) in [("encoder", AUDIO_CTX), ("decoder", TEXT_CTX)] {
        for (key, v) in [("context_length", n_ctx), ("embedding_length", STATE), ("attention.head_count", HEADS), ("block_count", LAYERS)] {
            w.add(format!("whisper.{side}.{key}"), Value::U32(v as u32)).map_err(|e| e.to_string())?;
        }
    }
    let n_mels = template.get_u64("whisper.audio.n_mels").ok_or("the template has no whisper.audio.n_mels")? as usize;
    let n_vocab = template.tensor("dec.token_embd.weight").ok_or("the template has no dec.token_embd.weight")?.dims[1] as usize;
    let mut t = Tensors { w, rng: StdRng::seed_from_u64(seed) };
    // the convolutions: [kernel 3, in, out]
    t.add("enc.conv1.weight", &[3, n_mels as u64, STATE as u64], (1.0 / (3 * n_mels) as f32).sqrt(), 0.0)?;
    t.add("enc.conv1.bias", &[STATE as u64], 0.1, 0.0)?;
    t.add("enc.conv2.weight", &[3, STATE as u64, STATE as u64], (1.0 / (3 * STATE) as f32).sqrt(), 0.0)?;
    t.add("enc.conv2.bias", &[STATE as u64], 0.1, 0.0)?;
    t.add("enc.position", &[STATE as u64, AUDIO_CTX as u64], 0.5, 0.0)?;
    for i in 0..LAYERS {
        t.layer("enc", i, false)?;
    }
    t.norm("enc.output_norm")?;
    t.add("dec.token_embd.weight", &[STATE as u64, n_vocab as u64], 0.5, 0.0)?;
    t.add("dec.position", &[STATE as u64, TEXT_CTX as u64], 0.5, 0.0)?;
    for i in 0..LAYERS {
        t.layer("dec", i, true)?;
    }
    t.norm("dec.output_norm")?;
    let bytes = t.w.to_bytes().map_err(|e| e.to_string())?;
    GgufFile::from_bytes(bytes).map(Arc::new).map_err(|e| e.to_string())
}
