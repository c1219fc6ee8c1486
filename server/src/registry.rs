//! The loaded models by id: each with its engine thread, what `/v1/models` says of it, and
//! whether it serves chat / completions, embeddings, or guard requests. DELETE (and idle
//! unloading) removes an entry: requests already holding it finish, later ones get 404 (or, for
//! a parked model, load it again).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use engine::model::Model;
use serde_json::{json, Value};

use crate::audit::ModelDigest;
use crate::error::ApiError;
use crate::guard_queue::GuardQueue;
use crate::model_loader::LoadSpec;
use crate::worker::Worker;

pub struct ModelEntry {
    pub id: String,
    pub created: u64,
    pub model: Arc<Model>,
    pub worker: Worker,
    /// Serves `/v1/guard*` (a Granite Guardian model, `--guard`, or a chat model as generic guard).
    pub guard: bool,
    /// Serves chat and text completions (every decoder model).
    pub generates: bool,
    pub n_ctx: usize,
    /// A guard's GGUF sha256 (`audit`), computed at start-up.
    pub digest: Option<ModelDigest>,
    /// A guard's evaluator (the one its engine thread runs): its family and the format labels
    /// of the audit fields.
    pub evaluator: Option<Arc<engine::guard::Evaluator>>,
    /// Moderation and batch requests waiting to be judged together.
    pub guard_queue: Arc<GuardQueue>,
    /// Its file and role, when it can be loaded again (idle unloading parks only these).
    pub source: Option<LoadSpec>,
    /// The vision projector its chat requests' images go through.
    pub vision: Option<Arc<crate::vision::Projector>>,
    /// Its LoRA adapters and their global scales.
    pub adapters: crate::adapters::Adapters,
}

impl ModelEntry {
    /// The `Model` object of `/v1/models`, with our extensions: architecture, context length,
    /// capabilities.
    pub fn describe(&self) -> Value {
        let c = self.model.config();
        let mut capabilities = Vec::new();
        if self.generates {
            capabilities.extend(["chat", "completion"]);
        }
        // a cross-encoder's pooling gives scores, not embeddings
        capabilities.push(if engine::rerank::is_reranker(&self.model) { "rerank" } else { "embedding" });
        if self.vision.is_some() {
            capabilities.push("vision");
        }
        if self.guard {
            capabilities.push("guard");
        }
        json!({
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": "local",
            "architecture": c.arch,
            "context_length": self.n_ctx,
            "capabilities": capabilities,
            "status": "loaded",
        })
    }
}

#[derive(Default)]
pub struct Registry {
    models: RwLock<BTreeMap<String, Arc<ModelEntry>>>,
}

impl Registry {
    pub fn insert(&self, entry: ModelEntry) -> Arc<ModelEntry> {
        let entry = Arc::new(entry);
        self.models.write().expect("registry lock").insert(entry.id.clone(), entry.clone());
        entry
    }

    /// Removes `id` if its model has had no work for `idle` and no request holds its entry
    /// (checked under the lock, so that a request holding it keeps finding it).
    pub fn remove_if_idle(&self, id: &str, idle: Duration) -> bool {
        let mut models = self.models.write().expect("registry lock");
        let unused = models.get(id).is_some_and(|e| Arc::strong_count(e) == 1 && e.worker.idle_for().is_some_and(|d| d >= idle));
        unused && models.remove(id).is_some()
    }

    pub fn get(&self, id: &str) -> Result<Arc<ModelEntry>, ApiError> {
        self.models.read().expect("registry lock").get(id).cloned().ok_or_else(|| ApiError::model_not_found(id))
    }

    /// The model `id` for a chat or text completion: 404 when unknown, 400 when it does not
    /// generate text (a guard-only model).
    pub fn generator(&self, id: &str) -> Result<Arc<ModelEntry>, ApiError> {
        let entry = self.get(id)?;
        if entry.generates {
            Ok(entry)
        } else {
            Err(ApiError::invalid_param("model", format!("the model `{id}` does not generate text")))
        }
    }

    /// The guard model `id` (404 when unknown, 400 naming `param` when it is no guard), or with
    /// no id the first guard the server loaded (400 when there is none).
    pub fn guard(&self, id: Option<&str>, param: &str) -> Result<Arc<ModelEntry>, ApiError> {
        let Some(id) = id else {
            return self.list().into_iter().find(|m| m.guard).ok_or_else(|| {
                ApiError::invalid_param(param, "no guard model is loaded: start the server with --guard or a Granite Guardian model")
            });
        };
        let entry = self.get(id)?;
        if !entry.guard {
            return Err(ApiError::invalid_param(param, format!("the model `{id}` is not a guard model")));
        }
        Ok(entry)
    }

    pub fn remove(&self, id: &str) -> Result<Arc<ModelEntry>, ApiError> {
        self.models.write().expect("registry lock").remove(id).ok_or_else(|| ApiError::model_not_found(id))
    }

    /// The model `id` names, or without one the only model there is: of every model, or of the
    /// generating ones when `generating` (as chat completions take them).
    pub fn named_or_only(&self, id: Option<&str>, generating: bool) -> Result<Arc<ModelEntry>, ApiError> {
        match id {
            Some(id) if generating => self.generator(id),
            Some(id) => self.get(id),
            None => match self.list().into_iter().filter(|m| m.generates || !generating).collect::<Vec<_>>().as_slice() {
                [only] => Ok(only.clone()),
                _ => Err(ApiError::missing("model")),
            },
        }
    }

    pub fn list(&self) -> Vec<Arc<ModelEntry>> {
        self.models.read().expect("registry lock").values().cloned().collect()
    }

    pub fn has_guard(&self) -> bool {
        self.list().iter().any(|m| m.guard)
    }
}
