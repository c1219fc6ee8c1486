//! LoRA adapters made for the tests: seeded random low-rank pairs, in the layout llama.cpp's
//! `convert_lora_to_gguf.py` writes (`NAME.lora_a` of `[n_in, rank]`, `NAME.lora_b` of
//! `[rank, n_out]`; for `token_embd`, `[rank, n_vocab]` and `[rank, n_embd]`), for the tiny
//! architecture models. Their corrections mean nothing; they are the same numbers in llama.cpp
//! and the engine, which is what the goldens check (`tools/make-lora-goldens.py` runs
//! llama.cpp with `llama_set_adapters_lora` on the files the `lora-adapters` binary writes).

use std::borrow::Cow;

use engine::gguf::{GgufFile, GgufWriter};
use engine::quant::GgmlType;

use crate::reranker::uniform;

/// One adapter: which tensors of which base model it corrects, at which rank and type.
pub struct AdapterSpec {
    pub name: &'static str,
    /// The base model, a fixture path.
    pub base: &'static str,
    /// Tensor kinds corrected in every block (`attn_q` for `blk.N.attn_q.weight`).
    pub blocks: &'static [&'static str],
    /// Whole-model tensors corrected (`output`, `token_embd`).
    pub global: &'static [&'static str],
    pub rank: usize,
    pub ty: GgmlType,
    /// `adapter.lora.alpha` (0: the scale alone).
    pub alpha: f32,
    pub seed: u64,
    /// The bounds of the uniform values of `lora_a` and `lora_b`.
    pub magnitudes: (f32, f32),
    /// An activated LoRA's `adapter.alora.invocation_tokens` (empty: a plain adapter).
    pub invocation: &'static [u32],
}

/// Corrections large enough to move the tiny models' logits by several units (so that a
/// correction left out fails the comparison by far).
const TEST_MAGNITUDES: (f32, f32) = (0.5, 0.05);

/// Every projection of the tiny llama, the output and the embeddings.
const LLAMA_ALL: AdapterSpec = AdapterSpec {
    name: "llama-all",
    base: "archs/llama-s1.gguf",
    blocks: &["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"],
    global: &["token_embd", "output"],
    rank: 8,
    ty: GgmlType::F32,
    alpha: 16.0,
    seed: 1,
    magnitudes: TEST_MAGNITUDES,
    invocation: &[],
};

pub const ADAPTERS: &[AdapterSpec] = &[
    LLAMA_ALL,
    AdapterSpec {
        name: "llama-qv",
        base: "archs/llama-s1.gguf",
        blocks: &["attn_q", "attn_v"],
        global: &[],
        rank: 4,
        ty: GgmlType::F16,
        alpha: 0.0,
        seed: 2,
        magnitudes: TEST_MAGNITUDES,
        invocation: &[],
    },
    // fused projections (attn_qkv, ffn_up holding gate and up): corrected whole, taken apart
    AdapterSpec {
        name: "phi3-fused",
        base: "archs/phi3-s1.gguf",
        blocks: &["attn_qkv", "attn_output", "ffn_up", "ffn_down"],
        global: &[],
        rank: 8,
        ty: GgmlType::F32,
        alpha: 8.0,
        seed: 3,
        magnitudes: TEST_MAGNITUDES,
        invocation: &[],
    },
    // biased projections, the experts' router and the shared expert
    AdapterSpec {
        name: "qwen2moe-router",
        base: "archs/qwen2moe-s1.gguf",
        blocks: &["attn_q", "attn_k", "attn_v", "ffn_gate_inp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"],
        global: &[],
        rank: 4,
        ty: GgmlType::F32,
        alpha: 4.0,
        seed: 4,
        magnitudes: TEST_MAGNITUDES,
        invocation: &[],
    },
    // the experts of a mixture: every expert's gate, up and down
    AdapterSpec {
        name: "qwen2moe-experts",
        base: "archs/qwen2moe-s1.gguf",
        blocks: &["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"],
        global: &[],
        rank: 4,
        ty: GgmlType::F32,
        alpha: 8.0,
        seed: 6,
        magnitudes: TEST_MAGNITUDES,
        invocation: &[],
    },
    // experts with biases (corrected before the bias) and attention with sinks
    AdapterSpec {
        name: "gpt-oss-experts",
        base: "archs/gpt-oss-s1.gguf",
        blocks: &["attn_q", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"],
        global: &[],
        rank: 4,
        ty: GgmlType::F32,
        alpha: 4.0,
        seed: 7,
        magnitudes: TEST_MAGNITUDES,
        invocation: &[],
    },
    // gate and up experts fused in one stack (`ffn_gate_up_exps`), taken apart
    AdapterSpec {
        name: "deepseek2-fused-experts",
        base: "archs/deepseek2-s1.gguf",
        blocks: &["ffn_gate_up_exps", "ffn_down_exps"],
        global: &[],
        rank: 4,
        ty: GgmlType::F32,
        alpha: 4.0,
        seed: 8,
        magnitudes: TEST_MAGNITUDES,
        invocation: &[],
    },
    // an activated LoRA (aLoRA): every projection, run from its invocation [7, 33] on
    AdapterSpec { name: "llama-alora", seed: 5, invocation: &[7, 33], ..LLAMA_ALL },
];

/// An adapter of the tiny Guardian 3.0 model (q, v and up of every block), for the guard's
/// tests: they compare the guard with and without it, not with llama.cpp.
pub const GUARD_QV: AdapterSpec = AdapterSpec {
    name: "guard-qv",
    base: "guardian/models/guardian-tiny-3.0-q8_0.gguf",
    blocks: &["attn_q", "attn_v", "ffn_up"],
    global: &[],
    rank: 4,
    ty: GgmlType::F32,
    alpha: 4.0,
    seed: 11,
    magnitudes: TEST_MAGNITUDES,
    invocation: &[],
};

/// One golden case: a base model with adapters at scales, over one sequence of ids.
pub struct LoraCase {
    pub name: &'static str,
    pub base: &'static str,
    pub adapters: &'static [(&'static str, f32)],
    /// The first position its adapters correct (an activated adapter's invocation in `IDS`;
    /// 0 for plain ones): llama.cpp runs the ids before it without them.
    pub from: u32,
}

pub const CASES: &[LoraCase] = &[
    LoraCase { name: "llama-all", base: "archs/llama-s1.gguf", adapters: &[("llama-all", 1.0)], from: 0 },
    LoraCase { name: "llama-two", base: "archs/llama-s1.gguf", adapters: &[("llama-all", 0.5), ("llama-qv", 2.0)], from: 0 },
    LoraCase { name: "phi3-fused", base: "archs/phi3-s1.gguf", adapters: &[("phi3-fused", 1.0)], from: 0 },
    LoraCase { name: "qwen2moe-router", base: "archs/qwen2moe-s1.gguf", adapters: &[("qwen2moe-router", 0.75)], from: 0 },
    LoraCase { name: "qwen2moe-experts", base: "archs/qwen2moe-s1.gguf", adapters: &[("qwen2moe-experts", 1.0)], from: 0 },
    LoraCase { name: "gpt-oss-experts", base: "archs/gpt-oss-s1.gguf", adapters: &[("gpt-oss-experts", 1.0)], from: 0 },
    LoraCase { name: "deepseek2-fused-experts", base: "archs/deepseek2-s1.gguf", adapters: &[("deepseek2-fused-experts", 1.0)], from: 0 },
    LoraCase { name: "llama-alora", base: "archs/llama-s1.gguf", adapters: &[("llama-alora", 1.0)], from: 7 },
];

/// The ids every case runs (one batch of all of them).
pub const IDS: &[u32] = &[1, 17, 42, 99, 3, 64, 120, 7, 33, 58, 91, 12, 77, 5, 101, 26];

pub fn spec(name: &str) -> &'static AdapterSpec {
    ADAPTERS.iter().find(|a| a.name == name).unwrap_or_else(|| panic!("no adapter {name}"))
}

fn encode(values: &[f32], ty: GgmlType) -> Vec<u8> {
    match ty {
        GgmlType::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// The adapter's GGUF bytes for `base` (the model file `spec.base` names).
pub fn make(base: &GgufFile, spec: &AdapterSpec) -> Result<Vec<u8>, String> {
    let err = |e: engine::gguf::GgufError| e.to_string();
    let arch = base.architecture().ok_or("no general.architecture")?.to_string();
    let mut w = GgufWriter::new();
    w.add("general.architecture", arch.as_str()).map_err(err)?;
    w.add("general.type", "adapter").map_err(err)?;
    w.add("general.name", spec.name).map_err(err)?;
    w.add("adapter.type", "lora").map_err(err)?;
    w.add("adapter.lora.alpha", spec.alpha).map_err(err)?;
    if !spec.invocation.is_empty() {
        w.add("adapter.alora.invocation_tokens", engine::gguf::Value::Array(engine::gguf::Array::U32(spec.invocation.to_vec())))
            .map_err(err)?;
    }
    fn kind_of<'n>(spec: &AdapterSpec, name: &'n str) -> Option<&'n str> {
        let kind = name.strip_suffix(".weight")?;
        let in_block = kind.strip_prefix("blk.").and_then(|r| r.split_once('.')).map(|(_, k)| k);
        (in_block.is_some_and(|k| spec.blocks.contains(&k)) || spec.global.contains(&kind)).then_some(kind)
    }
    let rank = spec.rank as u64;
    let mut seed = spec.seed * 1000;
    for t in base.tensors() {
        let Some(kind) = kind_of(spec, &t.name) else { continue };
        // the embeddings' pair is read by token rows: `a` holds one rank-sized row per token;
        // an expert stack's pairs are stacked likewise, one per expert
        let (a_dims, b_dims) = match t.dims[..] {
            [cols, rows] if kind == "token_embd" => (vec![rank, rows], vec![rank, cols]),
            [cols, rows] => (vec![cols, rank], vec![rank, rows]),
            [cols, rows, n] => (vec![cols, rank, n], vec![rank, rows, n]),
            _ => return Err(format!("{} is neither a matrix nor a stack of them", t.name)),
        };
        for (suffix, dims, scale) in [("lora_a", a_dims, spec.magnitudes.0), ("lora_b", b_dims, spec.magnitudes.1)] {
            seed += 1;
            let values = uniform(seed, dims.iter().product::<u64>() as usize, scale);
            w.add_tensor(format!("{}.{suffix}", t.name), &dims, spec.ty, Cow::Owned(encode(&values, spec.ty))).map_err(err)?;
        }
    }
    let mut bytes = Vec::new();
    w.write(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}
