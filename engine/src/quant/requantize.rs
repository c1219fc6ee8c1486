//! Whole-file quantization as `llama-quantize --pure` writes it: every 2-D weight matrix in one
//! target type by ggml's scalar reference quantizers, everything else copied, the same metadata
//! order, tensor order and padding, so a file made here equals llama.cpp's byte for byte.
//!
//! What llama-quantize does that this follows:
//! - tensors are written in the order of llama.cpp's loader map: by layer (`blk.N.`; tensors of
//!   no layer first), then by name;
//! - a tensor is quantized when its name ends in `weight`, it has at least 2 dimensions and is
//!   not a norm; it is left alone when it already has the target type;
//! - `general.quantization_version` (2) and `general.file_type` are removed from where they were
//!   and appended in that order;
//! - without an importance matrix the quantizers are the `quantize_row_*_ref` ones.
//!
//! A row length the target's blocks do not divide is an error naming the tensor (llama-quantize
//! would fall back to another type; a `--pure` file promises one type).

use std::borrow::Cow;

use thiserror::Error;

use super::dispatch::{ops_on, Isa};
use super::GgmlType;
use super::QuantError;
use crate::gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, Value};

/// ggml's `GGML_QNT_VERSION`, written as `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

#[derive(Debug, Error)]
pub enum RequantizeError {
    #[error("{0}")]
    Gguf(#[from] GgufError),
    #[error("{0}")]
    Quant(#[from] QuantError),
    #[error("{tensor}: a row of {row_len} values is not a whole number of {target} blocks ({block} values)")]
    RowNotBlocks { tensor: String, row_len: u64, target: GgmlType, block: usize },
    #[error("{0} has no quantizer here (llama-quantize makes it from an importance matrix)")]
    NoQuantizer(GgmlType),
}

/// The llama.cpp file type (`general.file_type`, `enum llama_ftype`) llama-quantize writes when
/// every matrix has type `ty` (K-quants under their `_M` / `_S` mixture names, as `--pure` keeps
/// them), or `None` for a type it does not quantize to.
pub fn file_type_of(ty: GgmlType) -> Option<u32> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => 0,
        T::F16 => 1,
        T::Q4_0 => 2,
        T::Q4_1 => 3,
        T::Q8_0 => 7,
        T::Q5_0 => 8,
        T::Q5_1 => 9,
        T::Q2_K => 10,
        T::Q3_K => 12,
        T::Q4_K => 15,
        T::Q5_K => 17,
        T::Q6_K => 18,
        T::IQ4_NL => 25,
        T::IQ4_XS => 30,
        // LLAMA_FTYPE_MOSTLY_MXFP4_MOE: --pure makes every matrix MXFP4
        T::MXFP4 => 38,
        T::BF16 => 32,
        _ => return None,
    })
}

/// Whether llama-quantize quantizes this tensor (its name and shape say it is a weight matrix).
fn is_matrix(info: &TensorInfo) -> bool {
    info.name.ends_with("weight") && info.dims.len() >= 2 && !info.name.ends_with("_norm.weight")
}

/// The loader's order: layer number (`blk.N.`, none first), then name.
fn loader_order(name: &str) -> (i64, &str) {
    let layer = name.strip_prefix("blk.").and_then(|rest| rest.split('.').next()).and_then(|n| n.parse::<i64>().ok()).unwrap_or(-1);
    (layer, name)
}

/// `src` with every weight matrix in `target`: a writer holding the new file (its untouched
/// tensors borrow `src`'s bytes). `file_type` is what `general.file_type` says.
pub fn quantize_pure(src: &GgufFile, target: GgmlType, file_type: u32) -> Result<GgufWriter<'_>, RequantizeError> {
    let quantize = ops_on(target, Isa::Scalar)?.quantize.ok_or(RequantizeError::NoQuantizer(target))?;
    let mut out = GgufWriter::new();
    out.set_version(src.version());
    for (key, value) in src.metadata() {
        if key != "general.quantization_version" && key != "general.file_type" {
            out.add(key.clone(), value.clone())?;
        }
    }
    out.add("general.quantization_version", Value::U32(QUANTIZATION_VERSION))?;
    out.add("general.file_type", Value::U32(file_type))?;

    let mut tensors: Vec<&TensorInfo> = src.tensors().iter().collect();
    tensors.sort_by(|a, b| loader_order(&a.name).cmp(&loader_order(&b.name)));
    for info in tensors {
        let data = src.tensor_data(info);
        if !is_matrix(info) || info.ty == target {
            out.add_tensor(info.name.clone(), &info.dims, info.ty, Cow::Borrowed(data))?;
            continue;
        }
        let row_len = info.row_len();
        let block = target.block_size();
        let out_row = target.row_bytes(row_len as usize).ok_or_else(|| RequantizeError::RowNotBlocks {
            tensor: info.name.clone(),
            row_len,
            target,
            block,
        })?;
        let dequantize = ops_on(info.ty, Isa::Scalar)?.dequantize;
        let in_row = info.row_bytes() as usize;
        let mut values = vec![0f32; row_len as usize];
        let mut bytes = vec![0u8; out_row * info.n_rows() as usize];
        // [n_rows][row_len] -> [n_rows][out_row]: row by row, as ggml_quantize_chunk does
        for (src_row, dst_row) in data.chunks_exact(in_row).zip(bytes.chunks_exact_mut(out_row)) {
            dequantize(src_row, &mut values);
            quantize(&values, dst_row);
        }
        out.add_tensor(info.name.clone(), &info.dims, target, Cow::Owned(bytes))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_go_in_the_loaders_order() {
        let mut names = ["blk.10.attn_q.weight", "output.weight", "blk.2.ffn_up.weight", "blk.2.attn_k.weight", "token_embd.weight"];
        names.sort_by(|a, b| loader_order(a).cmp(&loader_order(b)));
        assert_eq!(names, ["output.weight", "token_embd.weight", "blk.2.attn_k.weight", "blk.2.ffn_up.weight", "blk.10.attn_q.weight"]);
    }

    #[test]
    fn only_weight_matrices_are_quantized() {
        let info = |name: &str, dims: Vec<u64>| TensorInfo::new(name, dims, GgmlType::F32, 0).unwrap();
        assert!(is_matrix(&info("blk.0.attn_q.weight", vec![256, 256])));
        assert!(!is_matrix(&info("blk.0.attn_norm.weight", vec![256])));
        assert!(!is_matrix(&info("blk.0.attn_q_norm.weight", vec![64, 2])));
        assert!(!is_matrix(&info("blk.0.attn_q.bias", vec![256, 2])));
    }

    #[test]
    fn file_types_are_llama_cpps() {
        assert_eq!(file_type_of(GgmlType::Q4_K), Some(15));
        assert_eq!(file_type_of(GgmlType::Q3_K), Some(12));
        assert_eq!(file_type_of(GgmlType::BF16), Some(32));
        assert_eq!(file_type_of(GgmlType::Q8_K), None);
    }
}
