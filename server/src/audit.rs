//! What every guard and moderation response says of how it was judged (the audit trail): the
//! guard model's id, the sha256 of its GGUF file, the prompt format, and the policy and
//! thresholds applied. The digest is computed once per guard model when the server starts: at
//! once for small files, on a background thread for large ones (`model_sha256` is null in the
//! responses until it is done, a few seconds for a 1 GB file).

use std::sync::{Arc, OnceLock};

use engine::guard::{Policy, Thresholds};
use engine::model::Model;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// Files up to this size are hashed before the server starts.
const HASH_INLINE_BYTES: usize = 64 << 20;

/// The sha256 of a model's GGUF file, hex, once computed.
#[derive(Clone, Default)]
pub struct ModelDigest(Arc<OnceLock<String>>);

impl ModelDigest {
    /// Starts hashing the model's file (the mapped bytes the model was loaded from).
    pub fn start(model: &Arc<Model>) -> ModelDigest {
        let digest = ModelDigest::default();
        if model.file().bytes().len() <= HASH_INLINE_BYTES {
            let _ = digest.0.set(sha256_hex(model.file().bytes()));
            return digest;
        }
        let (slot, model) = (digest.0.clone(), model.clone());
        let spawned = std::thread::Builder::new().name("gguf-sha256".into()).spawn(move || {
            let _ = slot.set(sha256_hex(model.file().bytes()));
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the thread hashing the guard model: {e}; responses carry no model_sha256");
        }
        digest
    }

    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    // in 1 MiB pieces: the same digest, and the mapped pages are touched in order
    for chunk in bytes.chunks(1 << 20) {
        hasher.update(chunk);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The policy and thresholds a request is judged by: its `policy` (or the server's default
/// policy), with its own `thresholds` replacing the policy's risk by risk.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    pub policy: Option<String>,
    pub thresholds: Thresholds,
}

impl Applied {
    pub fn new(policy: Option<&Policy>, request: Thresholds) -> Applied {
        match policy {
            Some(p) => Applied { policy: Some(p.name.clone()), thresholds: p.thresholds.overridden_by(&request) },
            None => Applied { policy: None, thresholds: request },
        }
    }
}

/// The audit fields of a response: `model`, `model_sha256`, `format`, `policy`, and
/// `thresholds` when any applied.
pub fn fields(model: &str, digest: Option<&ModelDigest>, format: &str, applied: &Applied) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    out.insert("model_sha256".into(), json!(digest.and_then(ModelDigest::get)));
    out.insert("format".into(), json!(format));
    out.insert("policy".into(), json!(applied.policy));
    if !applied.thresholds.is_empty() {
        out.insert("thresholds".into(), json!(applied.thresholds));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_the_standard_digest() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let long = vec![7u8; (1 << 20) + 3];
        let mut whole = Sha256::new();
        whole.update(&long);
        let expected: String = whole.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sha256_hex(&long), expected);
    }
}
