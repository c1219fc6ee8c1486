//! A random-weight model shaped like a 2B Qwen3.5 (24 layers 2048 wide: 18 gated delta nets of 16
//! key and 16 value heads of 128, and every 4th layer gated attention with 8 query heads and 2
//! KV heads of 256, IMROPE over 64 values; a 6144-wide feed-forward block; tied embeddings) in
//! the Q4_K_M-like mix, the delta nets' small tensors in F32 as llama-quantize keeps them, for
//! speed beside llama.cpp on the same file. The template (a Qwen2.5 GGUF) gives the vocabulary,
//! whose size sizes the embedding.

use std::borrow::Cow;

use engine::gguf::{Array, GgufFile, GgufWriter, Value};
use engine::quant::GgmlType;
use rayon::prelude::*;

use crate::shaped::{f32_bytes, q4_k_m_type, random_matrix, template_writer};

const ARCH: &str = "qwen35";

/// A Qwen3.5 model's dimensions.
#[derive(Clone, Copy, Debug)]
pub struct Qwen35 {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    /// Gated attention: query heads, KV heads, their size, the rotated values.
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub rope_dims: usize,
    /// Every `full_attention_interval`-th layer has attention, the others delta nets.
    pub full_attention_interval: usize,
    /// Delta nets: key heads, value heads, their size, the convolution's taps.
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub delta_head: usize,
    pub d_conv: usize,
}

/// About 1.7 B parameters with the template's 151,936-token vocabulary.
pub const QWEN35_2B: Qwen35 = Qwen35 {
    n_layer: 24,
    n_embd: 2048,
    n_ff: 6144,
    n_head: 8,
    n_head_kv: 2,
    head_dim: 256,
    rope_dims: 64,
    full_attention_interval: 4,
    n_k_heads: 16,
    n_v_heads: 16,
    delta_head: 128,
    d_conv: 4,
};

/// The Qwen3.5-shaped model of `shape` with `template`'s vocabulary.
pub fn writer(shape: &Qwen35, template: &GgufFile) -> Result<GgufWriter<'static>, String> {
    let s = *shape;
    let n_vocab =
        template.get("tokenizer.ggml.tokens").and_then(Value::as_array).map(|a| a.len()).ok_or("the template has no vocabulary")?;
    let mut w = template_writer(template, ARCH)?;
    let err = |e: engine::gguf::GgufError| e.to_string();
    let u32v = |v: usize| Value::U32(v as u32);
    let (key_dim, value_dim) = (s.n_k_heads * s.delta_head, s.n_v_heads * s.delta_head);
    w.add("general.architecture", Value::String(ARCH.into())).map_err(err)?;
    w.add("general.file_type", Value::U32(15)).map_err(err)?; // MOSTLY_Q4_K_M
    let keys: Vec<(&str, Value)> = vec![
        ("context_length", u32v(32_768)),
        ("embedding_length", u32v(s.n_embd)),
        ("block_count", u32v(s.n_layer)),
        ("feed_forward_length", u32v(s.n_ff)),
        ("attention.head_count", u32v(s.n_head)),
        ("attention.head_count_kv", u32v(s.n_head_kv)),
        ("attention.key_length", u32v(s.head_dim)),
        ("attention.value_length", u32v(s.head_dim)),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("rope.freq_base", Value::F32(10_000_000.0)),
        ("rope.dimension_count", u32v(s.rope_dims)),
        ("full_attention_interval", u32v(s.full_attention_interval)),
        ("ssm.conv_kernel", u32v(s.d_conv)),
        ("ssm.inner_size", u32v(value_dim)),
        ("ssm.state_size", u32v(s.delta_head)),
        ("ssm.time_step_rank", u32v(s.n_v_heads)),
        ("ssm.group_count", u32v(s.n_k_heads)),
        ("vocab_size", u32v(n_vocab)),
    ];
    for (k, v) in keys {
        w.add(format!("{ARCH}.{k}"), v).map_err(err)?;
    }
    w.add(format!("{ARCH}.rope.dimension_sections"), Value::Array(Array::U32(vec![11, 11, 10, 0]))).map_err(err)?;

    let recurrent = |i: usize| !(i + 1).is_multiple_of(s.full_attention_interval);
    // (name, cols, rows, type) of every quantized matrix
    let mut matrices: Vec<(String, usize, usize, GgmlType)> = Vec::new();
    let mut matrix = |name: String, layer: Option<usize>, cols: usize, rows: usize| {
        let kind = name.trim_end_matches(".weight").rsplit('.').next().unwrap_or_default().to_string();
        matrices.push((name, cols, rows, q4_k_m_type(&kind, layer, s.n_layer, cols, true)));
    };
    matrix("token_embd.weight".into(), None, s.n_embd, n_vocab);
    for i in 0..s.n_layer {
        let n = |t: &str| format!("blk.{i}.{t}.weight");
        if recurrent(i) {
            matrix(n("attn_qkv"), Some(i), s.n_embd, 2 * key_dim + value_dim);
            matrix(n("attn_gate"), Some(i), s.n_embd, value_dim);
            matrix(n("ssm_beta"), Some(i), s.n_embd, s.n_v_heads);
            matrix(n("ssm_alpha"), Some(i), s.n_embd, s.n_v_heads);
            matrix(n("ssm_out"), Some(i), value_dim, s.n_embd);
        } else {
            matrix(n("attn_q"), Some(i), s.n_embd, 2 * s.n_head * s.head_dim);
            matrix(n("attn_k"), Some(i), s.n_embd, s.n_head_kv * s.head_dim);
            matrix(n("attn_v"), Some(i), s.n_embd, s.n_head_kv * s.head_dim);
            matrix(n("attn_output"), Some(i), s.n_head * s.head_dim, s.n_embd);
        }
        matrix(n("ffn_gate"), Some(i), s.n_embd, s.n_ff);
        matrix(n("ffn_up"), Some(i), s.n_embd, s.n_ff);
        matrix(n("ffn_down"), Some(i), s.n_ff, s.n_embd);
    }
    let datas: Vec<Vec<u8>> =
        matrices.par_iter().enumerate().map(|(k, &(_, cols, rows, ty))| random_matrix(ty, rows, cols, k as u64)).collect();
    for ((name, cols, rows, ty), data) in matrices.into_iter().zip(datas) {
        w.add_tensor(name, &[cols as u64, rows as u64], ty, Cow::Owned(data)).map_err(err)?;
    }
    let vector = |w: &mut GgufWriter<'static>, name: String, dims: &[u64], value: &dyn Fn(usize) -> f32| -> Result<(), String> {
        let n = dims.iter().product::<u64>() as usize;
        w.add_tensor(name, dims, GgmlType::F32, Cow::Owned(f32_bytes((0..n).map(value)))).map_err(err)?;
        Ok(())
    };
    let one = |_: usize| 1.0f32;
    vector(&mut w, "output_norm.weight".into(), &[s.n_embd as u64], &one)?;
    let conv_ch = 2 * key_dim + value_dim;
    for i in 0..s.n_layer {
        let n = |t: &str| format!("blk.{i}.{t}");
        vector(&mut w, n("attn_norm.weight"), &[s.n_embd as u64], &one)?;
        vector(&mut w, n("post_attention_norm.weight"), &[s.n_embd as u64], &one)?;
        if recurrent(i) {
            // small taps, steps around 0, decays of -1 .. -8 (as -exp(A_log))
            vector(&mut w, n("ssm_conv1d.weight"), &[s.d_conv as u64, conv_ch as u64], &|j| ((j * 7919 % 100) as f32 - 50.0) * 0.004)?;
            vector(&mut w, n("ssm_dt.bias"), &[s.n_v_heads as u64], &|j| (j % 5) as f32 * 0.1 - 0.2)?;
            vector(&mut w, n("ssm_a"), &[s.n_v_heads as u64], &|j| -1.0 - (j % 8) as f32)?;
            vector(&mut w, n("ssm_norm.weight"), &[s.delta_head as u64], &one)?;
        } else {
            vector(&mut w, n("attn_q_norm.weight"), &[s.head_dim as u64], &one)?;
            vector(&mut w, n("attn_k_norm.weight"), &[s.head_dim as u64], &one)?;
        }
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{BatchEntry, Model};

    #[test]
    fn a_small_qwen35_shape_loads_and_runs_with_the_templates_vocabulary() {
        let template = GgufFile::open(crate::fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
        let shape = Qwen35 {
            n_layer: 4,
            n_embd: 256,
            n_ff: 512,
            n_head: 2,
            head_dim: 128,
            n_k_heads: 2,
            n_v_heads: 4,
            delta_head: 32,
            ..QWEN35_2B
        };
        let bytes = writer(&shape, &template).unwrap().to_bytes().unwrap();
        let model = Model::from_file(std::sync::Arc::new(GgufFile::from_bytes(bytes).unwrap())).unwrap();
        assert_eq!(model.config().recurrent_layers, [true, true, true, false]);
        let mut kv = model.new_kv_cache(engine::kv_cache::KvType::F16, 64);
        let logits = model.forward(&mut kv, &BatchEntry::sequence(0, &[1, 2, 3, 4], 0, true)).unwrap();
        assert!(logits.row(3).iter().all(|v| v.is_finite()));
        assert!(logits.row(3).iter().any(|&v| v != logits.row(3)[0]));
    }
}
