//! Why a backend could not do what was asked.

use super::Device;
use crate::quant::MatmulError;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("device {0}: this build has no CUDA support")]
    NotBuilt(Device),
    #[error("{op}: {reason}")]
    Shape { op: &'static str, reason: String },
    #[error("the KV cache was made for another device than the model's ({0})")]
    ForeignKvCache(Device),
    #[error(transparent)]
    Matmul(#[from] MatmulError),
    /// The device could not do what was asked (a driver, compiler or launch failure).
    #[error("device {device}: {message}")]
    Device { device: Device, message: String },
    #[error("device {device}: out of memory in {op} ({bytes} bytes asked for)")]
    OutOfMemory { device: Device, op: &'static str, bytes: usize },
}

impl BackendError {
    pub(crate) fn shape(op: &'static str, reason: impl Into<String>) -> BackendError {
        BackendError::Shape { op, reason: reason.into() }
    }
}
