//! Typed reads of a model's `<arch>.<suffix>` GGUF metadata keys: a missing required key or a
//! value of the wrong type is a `ModelError` naming the key.

use super::error::ModelError;
use crate::gguf::{GgufFile, Value};

/// Reads `<arch>.<suffix>` keys.
pub(crate) struct Meta<'a> {
    pub file: &'a GgufFile,
    pub arch: &'a str,
}

impl Meta<'_> {
    pub fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    pub fn value(&self, suffix: &str) -> Option<&Value> {
        self.file.get(&self.key(suffix))
    }

    pub fn usize_opt(&self, suffix: &str) -> Result<Option<usize>, ModelError> {
        match self.value(suffix) {
            None => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(ModelError::BadKey {
                    key: self.key(suffix),
                    reason: format!("expected an unsigned integer, found {:?}", v.value_type()),
                }),
            },
        }
    }

    pub fn usize(&self, suffix: &str) -> Result<usize, ModelError> {
        self.usize_opt(suffix)?.ok_or_else(|| ModelError::MissingKey(self.key(suffix)))
    }

    /// A per-layer count (`attention.head_count_kv` of a hybrid): one number for every layer,
    /// or an array of `n_layer` (or more: a file's blocks beyond the layers) numbers.
    pub fn per_layer(&self, suffix: &str, n_layer: usize) -> Result<Option<Vec<usize>>, ModelError> {
        let Some(v) = self.value(suffix) else { return Ok(None) };
        if let Some(a) = v.as_array() {
            return match a.to_u64s() {
                Some(ns) if ns.len() >= n_layer => Ok(Some(ns[..n_layer].iter().map(|&n| n as usize).collect())),
                _ => Err(ModelError::BadKey { key: self.key(suffix), reason: format!("expected {n_layer} unsigned integers") }),
            };
        }
        Ok(self.usize_opt(suffix)?.map(|n| vec![n; n_layer]))
    }

    /// A count that may be given per layer, as the one value of its non-zero entries (the
    /// attention layers' heads of a hybrid).
    pub fn uniform(&self, suffix: &str, n_layer: usize) -> Result<Option<usize>, ModelError> {
        let Some(ns) = self.per_layer(suffix, n_layer)? else { return Ok(None) };
        let mut nonzero = ns.iter().copied().filter(|&n| n > 0);
        let first = nonzero.next().unwrap_or(0);
        if nonzero.any(|n| n != first) {
            return Err(ModelError::BadKey { key: self.key(suffix), reason: "layers with different counts are not supported".into() });
        }
        Ok(Some(first))
    }

    pub fn f32_opt(&self, suffix: &str) -> Result<Option<f32>, ModelError> {
        match self.value(suffix) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x as f32)),
                _ => Err(ModelError::BadKey { key: self.key(suffix), reason: "expected a finite number".into() }),
            },
        }
    }

    pub fn f32(&self, suffix: &str) -> Result<f32, ModelError> {
        self.f32_opt(suffix)?.ok_or_else(|| ModelError::MissingKey(self.key(suffix)))
    }
}
