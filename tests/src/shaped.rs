//! Random-weight models shaped like real ones (Qwen2.5-0.5B, Llama-3-8B, Granite Guardian 3 2B),
//! made in memory in a Q4_K_M-like mix of weight types, for speed measurements: every byte a
//! forward pass reads is as large as in the real file, and nothing large travels to the machine
//! that measures. The vocabulary, chat template and special tokens come from a small template
//! file; the shape's vocabulary size only sizes the embedding and output matrices.

use std::borrow::Cow;
use std::sync::Arc;

use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::quant::{ops_on, GgmlType, Isa};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// The dimensions of a decoder and the architecture that runs it.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Biases on the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
    /// No `output.weight`: the token embedding is the output head.
    pub tied: bool,
    pub rope_theta: f32,
    /// Per-head RMS norms of q and k (Qwen3).
    pub qk_norm: bool,
    /// A mixture of experts in every layer instead of the dense feed-forward block.
    pub experts: Option<ShapeExperts>,
}

/// A shape's experts: how many, how many each token uses, and each one's width.
#[derive(Clone, Copy, Debug)]
pub struct ShapeExperts {
    pub count: usize,
    pub used: usize,
    pub n_ff: usize,
}

impl Shape {
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }
}

pub const QWEN2_5_0_5B: Shape = Shape {
    name: "Qwen2.5-0.5B",
    arch: "qwen2",
    n_vocab: 151_936,
    n_embd: 896,
    n_layer: 24,
    n_ff: 4864,
    n_head: 14,
    n_head_kv: 2,
    qkv_bias: true,
    tied: true,
    rope_theta: 1_000_000.0,
    qk_norm: false,
    experts: None,
};

pub const LLAMA_3_8B: Shape = Shape {
    name: "Llama-3-8B",
    arch: "llama",
    n_vocab: 128_256,
    n_embd: 4096,
    n_layer: 32,
    n_ff: 14_336,
    n_head: 32,
    n_head_kv: 8,
    qkv_bias: false,
    tied: false,
    rope_theta: 500_000.0,
    qk_norm: false,
    experts: None,
};

/// Granite Guardian 3.x 2B (granite 3.x 2B's decoder; the Granite scalars come from the
/// template file).
pub const GRANITE_GUARDIAN_2B: Shape = Shape {
    name: "granite-guardian-3-2b",
    arch: "granite",
    n_vocab: 49_155,
    n_embd: 2048,
    n_layer: 40,
    n_ff: 8192,
    n_head: 32,
    n_head_kv: 8,
    qkv_bias: false,
    tied: true,
    rope_theta: 10_000.0,
    qk_norm: false,
    experts: None,
};

/// A two-layer llama of 64 dimensions over a template's 512-token vocabulary: about 50 k
/// parameters, so that a build instrumented for fuzzing answers a guard request (nine prompts
/// of about 200 tokens) in a fraction of a second instead of the 13 s the 1.8 M-parameter
/// tiny llama fixture takes there.
pub const MICRO_LLAMA: Shape = Shape {
    name: "micro-llama",
    arch: "llama",
    n_vocab: 512,
    n_embd: 64,
    n_layer: 2,
    n_ff: 128,
    n_head: 2,
    n_head_kv: 1,
    qkv_bias: false,
    tied: false,
    rope_theta: 10_000.0,
    qk_norm: false,
    experts: None,
};

/// Qwen3-1.7B: the dense Qwen3 (2048 wide, 16 query heads of 128, 8 KV heads, per-head q/k
/// norms, tied embeddings), all 28 layers.
pub const QWEN3_1_7B: Shape = Shape {
    name: "Qwen3-1.7B",
    arch: "qwen3",
    n_vocab: 151_936,
    n_embd: 2048,
    n_layer: 28,
    n_ff: 6144,
    n_head: 16,
    n_head_kv: 8,
    qkv_bias: false,
    tied: true,
    rope_theta: 1_000_000.0,
    qk_norm: true,
    experts: None,
};

/// Qwen3-30B-A3B's layers (2048 wide, 32 query heads of 128 (here 16, as the shapes keep
/// `n_embd / n_head`), 4 KV heads, 128 experts of 768 of which 8 per token, per-head q/k norms),
/// 12 of its 48 layers: a 7.7 B-parameter MoE of about 4.3 GB in the Q4_K_M-like mix, whose
/// active parameters per token (about 0.6 B) a 2-core machine generates with in seconds.
pub const QWEN3_30B_A3B_12_LAYERS: Shape = Shape {
    name: "Qwen3-30B-A3B (12 of 48 layers)",
    arch: "qwen3moe",
    n_vocab: 151_936,
    n_embd: 2048,
    n_layer: 12,
    n_ff: 6144,
    n_head: 16,
    n_head_kv: 4,
    qkv_bias: false,
    tied: false,
    rope_theta: 1_000_000.0,
    qk_norm: true,
    experts: Some(ShapeExperts { count: 128, used: 8, n_ff: 768 }),
};

/// The weight type llama-quantize's Q4_K_M gives a tensor, simplified: Q6_K for the output head,
/// for `attn_v` and `ffn_down` in the first and last eighth of the layers and every third layer
/// between, Q4_K elsewhere; Q8_0 for a tied embedding (it is the output head); a K-quant whose
/// rows are not whole 256-value blocks falls back as llama.cpp's does (Q4_K to Q5_0, Q6_K to Q8_0).
pub fn q4_k_m_type(tensor: &str, layer: Option<usize>, n_layer: usize, cols: usize, tied: bool) -> GgmlType {
    let more_bits = |i: usize| i < n_layer / 8 || i >= 7 * n_layer / 8 || (i - n_layer / 8) % 3 == 2;
    let wanted = match (tensor, layer) {
        ("output", _) => GgmlType::Q6_K,
        ("token_embd", _) if tied => GgmlType::Q8_0,
        ("attn_v" | "ffn_down" | "ffn_down_exps", Some(i)) if more_bits(i) => GgmlType::Q6_K,
        _ => GgmlType::Q4_K,
    };
    match wanted {
        GgmlType::Q4_K if !cols.is_multiple_of(256) => GgmlType::Q5_0,
        GgmlType::Q6_K if !cols.is_multiple_of(256) => GgmlType::Q8_0,
        t => t,
    }
}

/// Rows of `cols` random values, quantized to `ty`, reused round-robin to fill a matrix (the
/// values do not matter for speed; quantizing every row would take minutes for 8B).
const DISTINCT_ROWS: usize = 16;

/// A `rows x cols` matrix of `ty`: values uniform in ±sqrt(3 / cols) (variance 1/cols, so
/// activations keep their scale through a layer), `DISTINCT_ROWS` distinct rows.
pub fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    let quantize = ops_on(ty, Isa::Scalar).expect("a supported type").quantize.expect("a type with a quantizer");
    let mut rng = StdRng::seed_from_u64(seed);
    let a = (3.0 / cols as f32).sqrt();
    let distinct = DISTINCT_ROWS.min(rows);
    let mut pool = vec![0u8; distinct * row_bytes];
    let mut values = vec![0f32; cols];
    for row in pool.chunks_exact_mut(row_bytes) {
        values.iter_mut().for_each(|v| *v = rng.random_range(-a..a));
        quantize(&values, row);
    }
    let mut out = vec![0u8; rows * row_bytes];
    out.par_chunks_mut(row_bytes).enumerate().for_each(|(r, dst)| {
        let k = r % distinct;
        dst.copy_from_slice(&pool[k * row_bytes..(k + 1) * row_bytes]);
    });
    out
}

/// The model of `shape` ([`writer`]), in memory.
pub fn make(shape: &Shape, template: &GgufFile) -> Result<Arc<GgufFile>, String> {
    let bytes = writer(shape, template)?.to_bytes().map_err(|e| e.to_string())?;
    GgufFile::from_bytes(bytes).map(Arc::new).map_err(|e| e.to_string())
}

/// The model of `shape` in the Q4_K_M-like mix, its vocabulary, template and every metadata key
/// not of an architecture from `template` (and the architecture's own keys of `template` too
/// when it is the same architecture: the Granite scalars).
pub fn writer(shape: &Shape, template: &GgufFile) -> Result<GgufWriter<'static>, String> {
    let arch = shape.arch;
    let mut w = template_writer(template, arch)?;
    let hd = shape.head_dim();
    let u32v = |v: usize| Value::U32(v as u32);
    let keys: [(&str, Value); 10] = [
        ("context_length", u32v(32_768)),
        ("embedding_length", u32v(shape.n_embd)),
        ("block_count", u32v(shape.n_layer)),
        ("feed_forward_length", u32v(shape.n_ff)),
        ("attention.head_count", u32v(shape.n_head)),
        ("attention.head_count_kv", u32v(shape.n_head_kv)),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("rope.freq_base", Value::F32(shape.rope_theta)),
        ("rope.dimension_count", u32v(hd)),
        ("vocab_size", u32v(shape.n_vocab)),
    ];
    w.add("general.architecture", Value::String(arch.into())).map_err(|e| e.to_string())?;
    w.add("general.file_type", Value::U32(15)).map_err(|e| e.to_string())?; // MOSTLY_Q4_K_M
    for (k, v) in keys {
        w.add(format!("{arch}.{k}"), v).map_err(|e| e.to_string())?;
    }
    if let Some(x) = shape.experts {
        for (k, v) in [("expert_count", x.count), ("expert_used_count", x.used), ("expert_feed_forward_length", x.n_ff)] {
            w.add(format!("{arch}.{k}"), u32v(v)).map_err(|e| e.to_string())?;
        }
    }

    // (name, [cols, rows], type) of every matrix, then the f32 vectors
    let mut matrices: Vec<(String, usize, usize, GgmlType)> = Vec::new();
    let mut matrix = |name: String, layer: Option<usize>, cols: usize, rows: usize| {
        // `blk.3.attn_q.weight` -> `attn_q`, `token_embd.weight` -> `token_embd`
        let kind = name.trim_end_matches(".weight").rsplit('.').next().unwrap_or_default();
        let ty = q4_k_m_type(kind, layer, shape.n_layer, cols, shape.tied);
        matrices.push((name, cols, rows, ty));
    };
    matrix("token_embd.weight".into(), None, shape.n_embd, shape.n_vocab);
    if !shape.tied {
        matrix("output.weight".into(), None, shape.n_embd, shape.n_vocab);
    }
    let (q_dim, kv_dim) = (shape.n_head * hd, shape.n_head_kv * hd);
    for i in 0..shape.n_layer {
        matrix(format!("blk.{i}.attn_q.weight"), Some(i), shape.n_embd, q_dim);
        matrix(format!("blk.{i}.attn_k.weight"), Some(i), shape.n_embd, kv_dim);
        matrix(format!("blk.{i}.attn_v.weight"), Some(i), shape.n_embd, kv_dim);
        matrix(format!("blk.{i}.attn_output.weight"), Some(i), q_dim, shape.n_embd);
        match shape.experts {
            // the experts' 3-D tensors as their stacked rows
            Some(x) => {
                matrix(format!("blk.{i}.ffn_gate_exps.weight"), Some(i), shape.n_embd, x.count * x.n_ff);
                matrix(format!("blk.{i}.ffn_up_exps.weight"), Some(i), shape.n_embd, x.count * x.n_ff);
                matrix(format!("blk.{i}.ffn_down_exps.weight"), Some(i), x.n_ff, x.count * shape.n_embd);
            }
            None => {
                matrix(format!("blk.{i}.ffn_gate.weight"), Some(i), shape.n_embd, shape.n_ff);
                matrix(format!("blk.{i}.ffn_up.weight"), Some(i), shape.n_embd, shape.n_ff);
                matrix(format!("blk.{i}.ffn_down.weight"), Some(i), shape.n_ff, shape.n_embd);
            }
        }
    }
    let datas: Vec<Vec<u8>> =
        matrices.par_iter().enumerate().map(|(k, &(_, cols, rows, ty))| random_matrix(ty, rows, cols, k as u64)).collect();
    for ((name, cols, rows, ty), data) in matrices.into_iter().zip(datas) {
        let dims = match shape.experts {
            Some(x) if name.ends_with("_exps.weight") => vec![cols as u64, (rows / x.count) as u64, x.count as u64],
            _ => vec![cols as u64, rows as u64],
        };
        w.add_tensor(name, &dims, ty, Cow::Owned(data)).map_err(|e| e.to_string())?;
    }
    let ones = |n: usize| f32_bytes(std::iter::repeat_n(1.0, n));
    w.add_tensor("output_norm.weight", &[shape.n_embd as u64], GgmlType::F32, ones(shape.n_embd)).map_err(|e| e.to_string())?;
    for i in 0..shape.n_layer {
        for norm in ["attn_norm", "ffn_norm"] {
            w.add_tensor(format!("blk.{i}.{norm}.weight"), &[shape.n_embd as u64], GgmlType::F32, ones(shape.n_embd))
                .map_err(|e| e.to_string())?;
        }
        if shape.qk_norm {
            for norm in ["attn_q_norm", "attn_k_norm"] {
                w.add_tensor(format!("blk.{i}.{norm}.weight"), &[hd as u64], GgmlType::F32, ones(hd)).map_err(|e| e.to_string())?;
            }
        }
        if let Some(x) = shape.experts {
            // the router in F32, as llama-quantize keeps it
            let router = f32_bytes((0..x.count * shape.n_embd).map(|j| ((j * 7919 % 1000) as f32 - 500.0) * 1e-4));
            w.add_tensor(format!("blk.{i}.ffn_gate_inp.weight"), &[shape.n_embd as u64, x.count as u64], GgmlType::F32, router)
                .map_err(|e| e.to_string())?;
        }
        if shape.qkv_bias {
            for (proj, n) in [("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)] {
                let small = f32_bytes((0..n).map(|j| ((j % 7) as f32 - 3.0) * 0.01));
                w.add_tensor(format!("blk.{i}.{proj}.bias"), &[n as u64], GgmlType::F32, small).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(w)
}

/// A writer holding `template`'s metadata but its architecture and file type, and but its
/// architecture's keys unless that is `arch` (then but the dimensions, which a shape sets).
pub fn template_writer(template: &GgufFile, arch: &str) -> Result<GgufWriter<'static>, String> {
    let template_arch = template.architecture().unwrap_or_default().to_string();
    let mut w = GgufWriter::new();
    for (key, value) in template.metadata() {
        let of_template_arch = key.starts_with(&format!("{template_arch}."));
        if key == "general.architecture" || key == "general.file_type" || (of_template_arch && template_arch != arch) {
            continue;
        }
        if of_template_arch && is_dimension_key(key.trim_start_matches(&format!("{arch}."))) {
            continue;
        }
        w.add(key.clone(), value.clone()).map_err(|e| e.to_string())?;
    }
    Ok(w)
}

/// Little-endian bytes of f32 values.
pub fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// Keys of an architecture that the shape sets itself.
fn is_dimension_key(key: &str) -> bool {
    matches!(
        key,
        "context_length"
            | "embedding_length"
            | "block_count"
            | "feed_forward_length"
            | "attention.head_count"
            | "attention.head_count_kv"
            | "attention.layer_norm_rms_epsilon"
            | "rope.freq_base"
            | "rope.dimension_count"
            | "vocab_size"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{BatchEntry, Model};

    #[test]
    fn the_mix_follows_llama_quantizes_q4_k_m() {
        assert_eq!(q4_k_m_type("output", None, 32, 4096, false), GgmlType::Q6_K);
        assert_eq!(q4_k_m_type("token_embd", None, 32, 4096, false), GgmlType::Q4_K);
        assert_eq!(q4_k_m_type("token_embd", None, 24, 896, true), GgmlType::Q8_0);
        assert_eq!(q4_k_m_type("attn_v", Some(0), 32, 4096, false), GgmlType::Q6_K);
        assert_eq!(q4_k_m_type("attn_v", Some(5), 32, 4096, false), GgmlType::Q4_K);
        assert_eq!(q4_k_m_type("attn_v", Some(6), 32, 4096, false), GgmlType::Q6_K);
        assert_eq!(q4_k_m_type("ffn_down", Some(31), 32, 14_336, false), GgmlType::Q6_K);
        assert_eq!(q4_k_m_type("attn_q", Some(3), 24, 896, true), GgmlType::Q5_0);
        assert_eq!(q4_k_m_type("ffn_down", Some(0), 24, 4864, true), GgmlType::Q6_K);
    }

    #[test]
    fn a_shaped_model_loads_and_runs_with_the_templates_vocabulary() {
        let template = GgufFile::open(crate::fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
        let shape = Shape { name: "mini", n_vocab: 1000, n_embd: 256, n_layer: 2, n_ff: 512, n_head: 4, n_head_kv: 2, ..QWEN2_5_0_5B };
        let file = make(&shape, &template).unwrap();
        assert_eq!(file.tensor("blk.1.attn_q.weight").unwrap().ty, GgmlType::Q4_K);
        assert_eq!(file.tensor("token_embd.weight").unwrap().ty, GgmlType::Q8_0);
        assert!(file.tensor("blk.0.attn_k.bias").is_some());
        let model = Model::from_file(file).unwrap();
        assert_eq!((model.config().arch.as_str(), model.config().n_vocab, model.config().n_layer), ("qwen2", 1000, 2));
        let mut kv = model.new_kv_cache(engine::kv_cache::KvType::F32, 64);
        let logits = model.forward(&mut kv, &BatchEntry::sequence(0, &[1, 2, 3, 999], 0, true)).unwrap();
        let last = logits.row(3);
        assert_eq!(last.len(), 1000);
        assert!(last.iter().all(|v| v.is_finite()));
        // the values vary: the rows of the output head are not all one
        assert!(last.iter().any(|&v| v != last[0]));
    }

    #[test]
    fn a_shaped_mixture_of_experts_loads_with_3d_expert_tensors_and_runs() {
        let template = GgufFile::open(crate::fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
        let experts = Some(ShapeExperts { count: 4, used: 2, n_ff: 256 });
        let shape =
            Shape { name: "mini-moe", n_vocab: 1000, n_embd: 256, n_layer: 2, n_head: 2, n_head_kv: 1, experts, ..QWEN3_30B_A3B_12_LAYERS };
        let file = make(&shape, &template).unwrap();
        assert_eq!(file.tensor("blk.0.ffn_up_exps.weight").unwrap().dims, [256, 256, 4]);
        assert_eq!(file.tensor("blk.0.ffn_down_exps.weight").unwrap().dims, [256, 256, 4]);
        let model = Model::from_file(file).unwrap();
        assert_eq!(model.config().experts.map(|x| (x.n_expert, x.n_used)), Some((4, 2)));
        let mut kv = model.new_kv_cache(engine::kv_cache::KvType::F32, 64);
        let logits = model.forward(&mut kv, &BatchEntry::sequence(0, &[1, 2, 3, 999], 0, true)).unwrap();
        assert!(logits.row(3).iter().all(|v| v.is_finite()));
    }
}
