//! A llama whose greedy reply is a fixed script of tokens, whatever the prompt: for tests of how a
//! server reads a reply's structure (harmony channels, tool calls) through the real generation
//! path. One layer whose attention and feed-forward weights are zero, so the hidden state is the
//! token's embedding; each script token embeds as its own unit vector and the output matrix maps
//! it to the next script token (every other token to the first), so at temperature 0 the reply
//! walks the script. Its vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte tokens (the prompt is
//! spelled in bytes), the given special tokens (control tokens), then one token per script
//! entry that is not a special token.

use std::borrow::Cow;
use std::sync::Arc;

use engine::gguf::{Array, GgufFile, GgufWriter, Value};
use engine::quant::GgmlType;

const N_EMBD: usize = 64;
/// The SentencePiece token types of the vocabulary.
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const BYTE: i32 = 6;

/// The model: `specials` are control tokens of the vocabulary (each may appear once in the
/// script), `script` the reply's tokens as text, `template` its chat template.
pub fn make(specials: &[&str], script: &[&str], template: &str) -> Result<Arc<GgufFile>, String> {
    make_named("scripted", specials, script, template)
}

/// [`make`] with `general.name` set to `name` (what guard models are told apart by).
pub fn make_named(name: &str, specials: &[&str], script: &[&str], template: &str) -> Result<Arc<GgufFile>, String> {
    let mut texts: Vec<Vec<u8>> = vec![b"<unk>".to_vec(), b"<s>".to_vec(), b"</s>".to_vec()];
    let mut types = vec![UNKNOWN, CONTROL, CONTROL];
    texts.extend((0..=255u8).map(|b| format!("<0x{b:02X}>").into_bytes()));
    types.extend([BYTE; 256]);
    let special_base = texts.len();
    texts.extend(specials.iter().map(|s| s.as_bytes().to_vec()));
    types.extend(vec![CONTROL; specials.len()]);
    let mut script_ids = Vec::new();
    for entry in script {
        match specials.iter().position(|s| s == entry) {
            Some(k) if !script_ids.contains(&(special_base + k)) => script_ids.push(special_base + k),
            Some(_) => return Err(format!("the special token {entry} appears twice in the script")),
            None => {
                script_ids.push(texts.len());
                texts.push(entry.as_bytes().to_vec());
                types.push(NORMAL);
            }
        }
    }
    if script.len() >= N_EMBD {
        return Err(format!("a script of at most {} tokens", N_EMBD - 1));
    }
    let n_vocab = texts.len();
    // token -> the unit vector it embeds as: script entry k at dimension k + 1, the rest at 0
    let dim_of = |id: usize| script_ids.iter().position(|&s| s == id).map_or(0, |k| k + 1);
    let mut embd = vec![0f32; n_vocab * N_EMBD];
    for id in 0..n_vocab {
        embd[id * N_EMBD + dim_of(id)] = 1.0;
    }
    // [n_vocab, N_EMBD]: row `next` reads the dimension of the token it follows
    let mut output = vec![0f32; n_vocab * N_EMBD];
    for (k, &next) in script_ids.iter().enumerate() {
        output[next * N_EMBD + k] = 1.0;
    }

    let mut w = GgufWriter::new();
    let err = |e: engine::gguf::GgufError| e.to_string();
    let n_head = 4u32;
    let keys: Vec<(String, Value)> = vec![
        ("general.architecture".into(), "llama".into()),
        ("general.name".into(), name.into()),
        ("llama.context_length".into(), Value::U32(2048)),
        ("llama.embedding_length".into(), Value::U32(N_EMBD as u32)),
        ("llama.block_count".into(), Value::U32(1)),
        ("llama.feed_forward_length".into(), Value::U32(N_EMBD as u32)),
        ("llama.attention.head_count".into(), Value::U32(n_head)),
        ("llama.attention.head_count_kv".into(), Value::U32(n_head)),
        ("llama.attention.layer_norm_rms_epsilon".into(), Value::F32(1e-6)),
        ("llama.rope.dimension_count".into(), Value::U32(N_EMBD as u32 / n_head)),
        ("tokenizer.ggml.model".into(), "llama".into()),
        ("tokenizer.ggml.tokens".into(), Value::Array(Array::String(texts))),
        ("tokenizer.ggml.scores".into(), Value::Array(Array::F32(vec![0.0; n_vocab]))),
        ("tokenizer.ggml.token_type".into(), Value::Array(Array::I32(types))),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
        ("tokenizer.chat_template".into(), template.into()),
    ];
    for (k, v) in keys {
        w.add(k, v).map_err(err)?;
    }
    let f32s = |v: &[f32]| Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let zeros = |n: usize| f32s(&vec![0.0; n]);
    let ones = |n: usize| f32s(&vec![1.0; n]);
    let (e, v) = (N_EMBD as u64, n_vocab as u64);
    w.add_tensor("token_embd.weight", &[e, v], GgmlType::F32, f32s(&embd)).map_err(err)?;
    w.add_tensor("output.weight", &[e, v], GgmlType::F32, f32s(&output)).map_err(err)?;
    w.add_tensor("output_norm.weight", &[e], GgmlType::F32, ones(N_EMBD)).map_err(err)?;
    for name in ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"] {
        w.add_tensor(format!("blk.0.{name}.weight"), &[e, e], GgmlType::F32, zeros(N_EMBD * N_EMBD)).map_err(err)?;
    }
    for norm in ["attn_norm", "ffn_norm"] {
        w.add_tensor(format!("blk.0.{norm}.weight"), &[e], GgmlType::F32, ones(N_EMBD)).map_err(err)?;
    }
    let bytes = w.to_bytes().map_err(err)?;
    GgufFile::from_bytes(bytes).map(Arc::new).map_err(|e| e.to_string())
}
