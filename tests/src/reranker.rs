//! A cross-encoder made for the tests: the all-MiniLM-L6-v2 fixture (a real BERT encoder and
//! vocabulary) with a seeded random classification head (`cls` 384 x 384 with its bias, then
//! `cls.output` 1 x 384 with its bias, all F32) and `bert.pooling_type` 4 (rank), the shape of
//! the BERT rerankers llama.cpp converts. Its scores mean nothing; they are the same numbers in
//! llama.cpp and the engine, which is what the goldens check (`tools/make-rerank-goldens.py`).

use std::borrow::Cow;

use engine::gguf::{GgufFile, GgufWriter};
use engine::quant::GgmlType;

/// Uniform values in `[-scale, scale]` from a xorshift generator.
pub(crate) fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The reranker's GGUF bytes, built from the MiniLM `encoder` file.
pub fn make(encoder: &GgufFile) -> Result<Vec<u8>, String> {
    let arch = encoder.get("general.architecture").and_then(|v| v.as_str()).ok_or("no general.architecture")?.to_string();
    let e = encoder.get(&format!("{arch}.embedding_length")).and_then(|v| v.as_u64()).ok_or("no embedding_length")? as usize;
    let pooling = format!("{arch}.pooling_type");
    let mut w = GgufWriter::new();
    for (key, value) in encoder.metadata() {
        if key != &pooling && key != "general.name" {
            w.add(key.clone(), value.clone()).map_err(|e| e.to_string())?;
        }
    }
    w.add(pooling, 4u32).map_err(|e| e.to_string())?;
    w.add("general.name", "tiny-reranker").map_err(|e| e.to_string())?;
    for t in encoder.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, encoder.tensor_data(t)).map_err(|e| e.to_string())?;
    }
    let f32s = |v: Vec<f32>| Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let e64 = e as u64;
    w.add_tensor("cls.weight", &[e64, e64], GgmlType::F32, f32s(uniform(11, e * e, 0.1))).map_err(|e| e.to_string())?;
    w.add_tensor("cls.bias", &[e64], GgmlType::F32, f32s(uniform(12, e, 0.1))).map_err(|e| e.to_string())?;
    w.add_tensor("cls.output.weight", &[e64, 1], GgmlType::F32, f32s(uniform(13, e, 0.1))).map_err(|e| e.to_string())?;
    w.add_tensor("cls.output.bias", &[1], GgmlType::F32, f32s(vec![0.25])).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    w.write(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}
