//! A random-weight model shaped like gpt-oss-20b (24 layers 2880 wide, 64 query heads and 8 KV
//! heads of 64, attention biases and sinks, every other layer a 128-position sliding window, 32
//! experts of 2880 with biases of which 4 per token, YaRN), its experts in MXFP4 and every other
//! matrix in Q8_0 as the published GGUF keeps them, for speed beside llama.cpp on the same file.
//! 12 layers of the 24 keep it inside a small machine's memory; the template (a Qwen2.5 GGUF)
//! gives the vocabulary, whose size sizes the embedding and output matrices.

use std::borrow::Cow;

use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::quant::GgmlType;
use rayon::prelude::*;

use crate::shaped::{f32_bytes, random_matrix, template_writer};

const ARCH: &str = "gpt-oss";

/// A gpt-oss model's dimensions.
#[derive(Clone, Copy, Debug)]
pub struct GptOss {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_expert: usize,
    pub n_used: usize,
    pub n_ff: usize,
    pub window: usize,
}

/// 12 of gpt-oss-20b's 24 layers.
pub const GPT_OSS_20B_12_LAYERS: GptOss =
    GptOss { n_layer: 12, n_embd: 2880, n_head: 64, n_head_kv: 8, head_dim: 64, n_expert: 32, n_used: 4, n_ff: 2880, window: 128 };

/// The gpt-oss-shaped model of `shape` with `template`'s vocabulary.
pub fn writer(shape: &GptOss, template: &GgufFile) -> Result<GgufWriter<'static>, String> {
    let GptOss { n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_used, n_ff, window } = *shape;
    let n_vocab =
        template.get("tokenizer.ggml.tokens").and_then(Value::as_array).map(|a| a.len()).ok_or("the template has no vocabulary")?;
    let mut w = template_writer(template, ARCH)?;
    let err = |e: engine::gguf::GgufError| e.to_string();
    let u32v = |v: usize| Value::U32(v as u32);
    w.add("general.architecture", Value::String(ARCH.into())).map_err(err)?;
    w.add("general.file_type", Value::U32(38)).map_err(err)?; // MOSTLY_MXFP4_MOE
    let keys: Vec<(&str, Value)> = vec![
        ("context_length", u32v(131_072)),
        ("embedding_length", u32v(n_embd)),
        ("block_count", u32v(n_layer)),
        ("feed_forward_length", u32v(n_ff)),
        ("attention.head_count", u32v(n_head)),
        ("attention.head_count_kv", u32v(n_head_kv)),
        ("attention.key_length", u32v(head_dim)),
        ("attention.value_length", u32v(head_dim)),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("attention.sliding_window", u32v(window)),
        ("rope.freq_base", Value::F32(150_000.0)),
        ("rope.scaling.type", Value::String("yarn".into())),
        ("rope.scaling.factor", Value::F32(32.0)),
        ("rope.scaling.original_context_length", u32v(4096)),
        ("expert_count", u32v(n_expert)),
        ("expert_used_count", u32v(n_used)),
        ("expert_feed_forward_length", u32v(n_ff)),
        ("vocab_size", u32v(n_vocab)),
    ];
    for (k, v) in keys {
        w.add(format!("{ARCH}.{k}"), v).map_err(err)?;
    }
    // (name, dims, type) of every matrix: [cols, rows] or [cols, rows, experts]
    let (q_dim, kv_dim) = (n_head * head_dim, n_head_kv * head_dim);
    let mut matrices: Vec<(String, Vec<usize>, GgmlType)> = vec![
        ("token_embd.weight".into(), vec![n_embd, n_vocab], GgmlType::Q8_0),
        ("output.weight".into(), vec![n_embd, n_vocab], GgmlType::Q8_0),
    ];
    for i in 0..n_layer {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        matrices.push((n("attn_q"), vec![n_embd, q_dim], GgmlType::Q8_0));
        matrices.push((n("attn_k"), vec![n_embd, kv_dim], GgmlType::Q8_0));
        matrices.push((n("attn_v"), vec![n_embd, kv_dim], GgmlType::Q8_0));
        matrices.push((n("attn_output"), vec![q_dim, n_embd], GgmlType::Q8_0));
        matrices.push((n("ffn_gate_exps"), vec![n_embd, n_ff, n_expert], GgmlType::MXFP4));
        matrices.push((n("ffn_up_exps"), vec![n_embd, n_ff, n_expert], GgmlType::MXFP4));
        matrices.push((n("ffn_down_exps"), vec![n_ff, n_embd, n_expert], GgmlType::MXFP4));
    }
    let datas: Vec<Vec<u8>> = matrices
        .par_iter()
        .enumerate()
        .map(|(k, (_, dims, ty))| random_matrix(*ty, dims[1..].iter().product(), dims[0], 1000 + k as u64))
        .collect();
    for ((name, dims, ty), data) in matrices.into_iter().zip(datas) {
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        w.add_tensor(name, &dims, ty, Cow::Owned(data)).map_err(err)?;
    }
    // norms of ones, small biases and sinks, a router in F32 (as the published file keeps them)
    let mut vector = |name: String, dims: &[usize], f: &dyn Fn(usize) -> f32| {
        let n: usize = dims.iter().product();
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        w.add_tensor(name, &dims, GgmlType::F32, f32_bytes((0..n).map(f))).map(|_| ()).map_err(err)
    };
    let small = |j: usize| ((j * 7919 % 1000) as f32 - 500.0) * 1e-4;
    vector("output_norm.weight".into(), &[n_embd], &|_| 1.0)?;
    for i in 0..n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        vector(n("attn_norm.weight"), &[n_embd], &|_| 1.0)?;
        vector(n("post_attention_norm.weight"), &[n_embd], &|_| 1.0)?;
        vector(n("attn_q.bias"), &[q_dim], &small)?;
        vector(n("attn_k.bias"), &[kv_dim], &small)?;
        vector(n("attn_v.bias"), &[kv_dim], &small)?;
        vector(n("attn_output.bias"), &[n_embd], &small)?;
        vector(n("attn_sinks.weight"), &[n_head], &small)?;
        vector(n("ffn_gate_inp.weight"), &[n_embd, n_expert], &small)?;
        vector(n("ffn_gate_inp.bias"), &[n_expert], &small)?;
        vector(n("ffn_gate_exps.bias"), &[n_ff, n_expert], &small)?;
        vector(n("ffn_up_exps.bias"), &[n_ff, n_expert], &small)?;
        vector(n("ffn_down_exps.bias"), &[n_embd, n_expert], &small)?;
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model::{BatchEntry, Model};

    #[test]
    fn a_gpt_oss_shaped_model_loads_with_mxfp4_experts_and_runs() {
        let template = GgufFile::open(crate::fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
        let shape = GptOss {
            n_layer: 2,
            n_embd: 256,
            n_head: 4,
            n_head_kv: 2,
            n_expert: 4,
            n_used: 2,
            n_ff: 256,
            window: 8,
            ..GPT_OSS_20B_12_LAYERS
        };
        let bytes = writer(&shape, &template).unwrap().to_bytes().unwrap();
        let file = std::sync::Arc::new(GgufFile::from_bytes(bytes).unwrap());
        assert_eq!(file.tensor("blk.1.ffn_down_exps.weight").map(|t| (t.ty, t.dims.clone())), Some((GgmlType::MXFP4, vec![256, 256, 4])));
        assert_eq!(file.tensor("blk.0.attn_q.weight").unwrap().ty, GgmlType::Q8_0);
        let model = Model::from_file(file).unwrap();
        assert_eq!(model.config().experts.map(|x| (x.n_expert, x.n_used)), Some((4, 2)));
        let mut kv = model.new_kv_cache(engine::kv_cache::KvType::F32, 64);
        // past the window of 8, so that the sliding layers drop positions
        let tokens: Vec<u32> = (1..13).collect();
        let logits = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, true)).unwrap();
        let last = logits.row(tokens.len() - 1);
        assert!(last.iter().all(|v| v.is_finite()) && last.iter().any(|&v| v != last[0]));
    }
}
