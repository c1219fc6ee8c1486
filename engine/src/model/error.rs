//! Why a model could not be loaded or run.

use crate::backend::BackendError;
use crate::gguf::GgufError;
use crate::kv_cache::{KvError, KvWriteError};
use crate::quant::{GgmlType, QuantError};
use crate::tokenizer::TokenizerError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unsupported architecture {0:?} (supported: {list})", list = crate::model::arch::names().join(", "))]
    UnsupportedArchitecture(String),
    #[error("the file has no general.architecture")]
    NoArchitecture,
    #[error("metadata key {0} is required and missing")]
    MissingKey(String),
    #[error("metadata key {key}: {reason}")]
    BadKey { key: String, reason: String },
    #[error("tensor {0} is required and missing")]
    MissingTensor(String),
    #[error("tensor {name} is not used by the engine's {arch} graph (a feature it does not compute); refusing to give wrong results")]
    UnusedTensor { name: String, arch: String },
    #[error("tensor {name} has shape {got:?}, expected {expected:?}")]
    TensorShape { name: String, expected: Vec<u64>, got: Vec<u64> },
    #[error("tensor {name} has type {ty}, which the engine cannot compute with")]
    TensorType { name: String, ty: GgmlType },
    #[error("LoRA adapter: {0}")]
    Adapter(String),
    #[error("batch: {0}")]
    BadBatch(String),
    /// `Model::limit_logits` refused (no token ids, or an encoder).
    #[error("output head: {0}")]
    Head(String),
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("{model} does not fit on {device}: its weights take {need} bytes{}", free.map_or(String::new(), |f| format!(", {f} are free")))]
    DoesNotFit { model: String, device: crate::backend::Device, need: u64, free: Option<u64> },
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Quant(#[from] QuantError),
}

impl From<KvWriteError> for ModelError {
    fn from(e: KvWriteError) -> Self {
        match e {
            KvWriteError::Kv(e) => ModelError::Kv(e),
            KvWriteError::Backend(e) => ModelError::Backend(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Device;

    #[test]
    fn a_model_too_large_for_the_gpu_names_the_model_and_the_bytes() {
        let e =
            ModelError::DoesNotFit { model: "Qwen2.5 0.5B".into(), device: Device::Cuda(1), need: 397_000_000, free: Some(120_000_000) };
        assert_eq!(e.to_string(), "Qwen2.5 0.5B does not fit on cuda:1: its weights take 397000000 bytes, 120000000 are free");
        let e = ModelError::DoesNotFit { model: "m".into(), device: Device::Cuda(0), need: 10, free: None };
        assert_eq!(e.to_string(), "m does not fit on cuda:0: its weights take 10 bytes");
    }
}
