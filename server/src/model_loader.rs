//! Models started, loaded and unloaded while the server runs. [`start_entry`] starts a model's
//! engine thread (at start-up and later alike). `POST /v1/models` loads a GGUF of the models
//! directory (`--models-dir`: a bare file name, never a path) with its role. With
//! `--idle-unload` a model nobody used for that long is unloaded but kept in mind (parked: its
//! file and settings), and the next request that names it loads it again and waits for it; a
//! stream answers at once and sends progress comments while it waits (see `router.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::backend::{Device, BLOCK_POSITIONS};
use engine::guard::{Evaluator, EvaluatorOptions, GenericPrompt, GuardFamily};
use engine::model::Model;
use engine::serving::state_slots_per_sequence;
use serde_json::{json, Value};

use crate::adapters::Adapters;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::registry::ModelEntry;
use crate::worker::{LoopConfig, Worker};
use crate::{audit, default_ctx, guard_queue, AppState, ModelSpec, Scheduling};

/// What every model's engine thread is started with.
#[derive(Clone, Debug)]
pub struct EntrySettings {
    pub scheduling: Scheduling,
    pub generic_prompt: GenericPrompt,
    /// The guard models' family when the caller names one (`--guard-family`).
    pub guard_family: Option<GuardFamily>,
    pub guard_prompt_cache_bytes: usize,
    /// The context of a model loaded at run time that names none (`-c`).
    pub n_ctx: Option<usize>,
    /// Where models loaded at run time go.
    pub device: Device,
}

/// Starts `spec`'s engine thread (and its guard evaluator when it guards).
pub fn start_entry(spec: ModelSpec, settings: &EntrySettings, metrics: &Metrics, created: u64) -> Result<ModelEntry, String> {
    let evaluator = if spec.guard {
        let options = EvaluatorOptions {
            device: spec.model.device(),
            generic_prompt: settings.generic_prompt,
            family: settings.guard_family,
            prompt_cache_bytes: settings.guard_prompt_cache_bytes,
            ..EvaluatorOptions::default()
        };
        Some(Arc::new(Evaluator::from_model(spec.model.clone(), options).map_err(|e| format!("{}: {e}", spec.id))?))
    } else {
        None
    };
    if let Some(d) = &spec.draft {
        engine::generate::check_draft(&spec.model, d, settings.scheduling.draft).map_err(|e| format!("{}: {e}", spec.id))?;
    }
    let n_ctx = spec.n_ctx.unwrap_or_else(|| default_ctx(&spec.model));
    let sc = settings.scheduling;
    let kv_positions = match sc.kv_bytes {
        Some(bytes) if spec.chat => Some(positions_in(bytes, &spec, sc, n_ctx)?),
        _ if spec.chat => sc.kv_positions,
        // a guard or an encoder only: sized as before (a guard's evaluator has its own cache)
        _ => sc.kv_positions,
    };
    let config = LoopConfig {
        parallel: sc.parallel,
        queue: sc.queue,
        prefill_chunk: sc.prefill_chunk,
        cache_entries: sc.cache_entries,
        kv_positions,
        kv_types: sc.kv_types,
        ngram: sc.ngram.filter(|_| spec.chat),
        draft: sc.draft,
        speculation: sc.speculation,
        ..LoopConfig::new(n_ctx)
    };
    let digest = spec.guard.then(|| audit::ModelDigest::start(&spec.model));
    let worker = Worker::start(&spec.id, spec.model.clone(), config, evaluator.clone(), spec.draft, metrics.for_model(&spec.id))?;
    let adapters = Adapters::of(&spec.model);
    Ok(ModelEntry {
        id: spec.id,
        created,
        model: spec.model,
        worker,
        guard: spec.guard,
        generates: spec.chat,
        n_ctx,
        digest,
        evaluator,
        guard_queue: Arc::new(guard_queue::GuardQueue::new(metrics.requests_cancelled.clone(), metrics.guard_batch_requests.clone())),
        source: None,
        vision: None,
        adapters,
    })
}

/// The KV-cache positions `bytes` hold for `spec`'s model in the cache's types, after the
/// recurrent states of `parallel` sequences (a hybrid model's): at least one context of `n_ctx`,
/// or an error saying how little they hold.
fn positions_in(bytes: usize, spec: &ModelSpec, sc: Scheduling, n_ctx: usize) -> Result<usize, String> {
    let per_position = spec.model.kv_bytes_per_position(sc.kv_types);
    let rollback = if spec.draft.is_some() || sc.ngram.is_some() { sc.draft.n_draft } else { 0 };
    let states = sc.parallel * state_slots_per_sequence(rollback) * spec.model.state_bytes_per_sequence();
    // whole blocks, less every slot's copy-on-write block (the pool holds those beside)
    let pool = bytes.saturating_sub(states) / per_position.max(1) / BLOCK_POSITIONS * BLOCK_POSITIONS;
    let positions = pool.saturating_sub(LoopConfig::copy_positions(sc.parallel));
    if positions < n_ctx {
        return Err(format!(
            "{}: {} MiB of {} KV cache hold {positions} positions, less than one context of {n_ctx}",
            spec.id,
            bytes >> 20,
            sc.kv_types
        ));
    }
    Ok(positions)
}

/// What a model serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Chat and text completions (and embeddings).
    Chat,
    /// Embeddings only (an encoder such as BERT, or a decoder used for its hidden states).
    Embedding,
    /// The guard routes (a Granite Guardian model, or a chat model through the generic path).
    Guard,
}

impl Role {
    fn parse(name: &str) -> Result<Role, ApiError> {
        match name {
            "chat" => Ok(Role::Chat),
            "embedding" => Ok(Role::Embedding),
            "guard" => Ok(Role::Guard),
            "transcription" => Err(ApiError::invalid_param(
                "role",
                "a transcription model is served from start-up (`engine-cli serve --transcribe FILE`), not loaded at run time",
            )),
            "projector" => Err(ApiError::invalid_param(
                "role",
                "a vision projector is given with its model at start (engine-cli serve --model LM.gguf --mmproj MMPROJ.gguf)",
            )),
            other => Err(ApiError::invalid_param("role", format!("role must be chat, embedding or guard, got {other:?}"))),
        }
    }
}

/// How to load a model again: its file and what it serves.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub id: String,
    pub path: PathBuf,
    pub role: Role,
    pub n_ctx: Option<usize>,
    /// A draft model for its completions (models given at start-up with `--draft`).
    pub draft: Option<Arc<Model>>,
    /// Its vision projector (models given at start-up with `--mmproj`).
    pub vision: Option<Arc<crate::vision::Projector>>,
    /// Its LoRA adapters' files, each with the scale it runs with by default (`--lora`).
    pub lora: Vec<(PathBuf, Option<f32>)>,
}

/// The files of `model`'s LoRA adapters with their default scales, to load them again.
pub fn adapter_files(model: &Model) -> Vec<(PathBuf, Option<f32>)> {
    model.adapters().iter().enumerate().filter_map(|(id, a)| Some((PathBuf::from(a.path.as_ref()?), model.default_scale(id)))).collect()
}

/// A model unloaded for idleness: loaded again by the next request that names it.
struct Parked {
    spec: LoadSpec,
    created: u64,
    /// Held while it loads: the requests that wait for it wait for one load.
    reload: tokio::sync::Mutex<()>,
}

pub struct Loader {
    /// The models directory, canonical (`None`: `POST /v1/models` is off).
    dir: Option<PathBuf>,
    idle: Option<Duration>,
    parked: Mutex<BTreeMap<String, Arc<Parked>>>,
    /// Ids being loaded by `POST /v1/models` (a second load of one is a 409).
    loading: Mutex<BTreeSet<String>>,
    pub settings: EntrySettings,
}

impl Loader {
    pub fn new(dir: Option<PathBuf>, idle: Option<Duration>, settings: EntrySettings) -> Result<Loader, String> {
        let dir = dir.map(|d| d.canonicalize().map_err(|e| format!("--models-dir {}: {e}", d.display()))).transpose()?;
        if dir.as_ref().is_some_and(|d| !d.is_dir()) {
            return Err(format!("--models-dir {}: not a directory", dir.unwrap_or_default().display()));
        }
        Ok(Loader { dir, idle, parked: Mutex::default(), loading: Mutex::default(), settings })
    }

    pub fn loads(&self) -> bool {
        self.dir.is_some()
    }

    pub fn idle_unload(&self) -> Option<Duration> {
        self.idle
    }

    /// The file a request names: a bare `.gguf` file name (the extension may be left out) of
    /// the models directory, itself inside it once links are followed.
    fn resolve(&self, name: &str) -> Result<PathBuf, ApiError> {
        let dir =
            self.dir.as_ref().ok_or_else(|| ApiError::invalid("this server loads no models at run time: start it with --models-dir"))?;
        let bad = |why: &str| ApiError::invalid_param("model", format!("model must be a file name of the models directory: {why}"));
        if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) || name.contains("..") {
            return Err(bad("no paths, no names starting with a dot"));
        }
        let file = if name.ends_with(".gguf") { name.to_string() } else { format!("{name}.gguf") };
        let path = dir.join(&file);
        let real = path.canonicalize().map_err(|_| ApiError::not_found("model", format!("the models directory has no file {file:?}")))?;
        if !real.starts_with(dir) || !real.is_file() {
            return Err(bad("it leads outside the directory, or is not a file"));
        }
        Ok(real)
    }

    /// Models unloaded for idleness, as `/v1/models` lists them.
    pub fn parked_models(&self) -> Vec<Value> {
        let parked = self.parked.lock().expect("parked lock");
        parked
            .values()
            .map(|p| json!({"id": p.spec.id, "object": "model", "created": p.created, "owned_by": "local", "status": "unloaded"}))
            .collect()
    }

    pub fn is_parked(&self, id: &str) -> bool {
        self.parked.lock().expect("parked lock").contains_key(id)
    }

    /// Forgets a parked model (`DELETE /v1/models/{id}`); false when none has that id.
    pub fn forget(&self, id: &str) -> bool {
        self.parked.lock().expect("parked lock").remove(id).is_some()
    }
}

/// The `POST /v1/models` request.
#[derive(serde::Deserialize)]
pub struct LoadRequest {
    /// A file name of the models directory.
    pub model: String,
    /// The id requests will name (default: the file name without `.gguf`).
    #[serde(default)]
    pub id: Option<String>,
    /// chat (default), embedding or guard.
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub context_length: Option<usize>,
}

/// Loads a model of the models directory (`POST /v1/models`); its `/v1/models` entry.
pub async fn load(state: &Arc<AppState>, request: LoadRequest) -> Result<Value, ApiError> {
    let loader = &state.loader;
    let path = loader.resolve(&request.model)?;
    let role = request.role.as_deref().map_or(Ok(Role::Chat), Role::parse)?;
    let id = request.id.unwrap_or_else(|| request.model.trim_end_matches(".gguf").to_string());
    if id.is_empty() || id.contains('/') || id.chars().any(char::is_control) {
        return Err(ApiError::invalid_param("id", "id must be a non-empty name without / or control characters"));
    }
    if request.context_length == Some(0) {
        return Err(ApiError::invalid_param("context_length", "context_length must be at least 1"));
    }
    if state.registry.get(&id).is_ok() || loader.is_parked(&id) {
        return Err(ApiError::conflict("id", format!("a model with the id `{id}` is already loaded: unload it first")));
    }
    if !loader.loading.lock().expect("loading lock").insert(id.clone()) {
        return Err(ApiError::conflict("id", format!("the model `{id}` is being loaded")));
    }
    let spec = LoadSpec { id: id.clone(), path, role, n_ctx: request.context_length, draft: None, vision: None, lora: Vec::new() };
    let loaded = start(state, spec).await;
    loader.loading.lock().expect("loading lock").remove(&id);
    let entry = loaded?;
    tracing::info!("loaded model {id}");
    Ok(entry.describe())
}

/// Reads `spec`'s file and starts its engine thread, off the async threads; the entry is in the
/// registry when this returns.
async fn start(state: &Arc<AppState>, spec: LoadSpec) -> Result<Arc<ModelEntry>, ApiError> {
    let st = state.clone();
    let entry = tokio::task::spawn_blocking(move || -> Result<ModelEntry, ApiError> {
        let settings = &st.loader.settings;
        let mut model = Model::load_on(&spec.path, settings.device)
            .map_err(|e| ApiError::invalid_param("model", format!("{}: {e}", file_name(&spec.path))))?;
        for (path, scale) in &spec.lora {
            model.load_adapter(path, *scale).map_err(|e| ApiError::server(format!("{}: {e}", file_name(path))))?;
        }
        if spec.role == Role::Chat && model.is_encoder() {
            let why = format!("an encoder model ({}) cannot chat: load it with role embedding", model.config().arch);
            return Err(ApiError::invalid_param("role", why));
        }
        let model_spec = ModelSpec {
            id: spec.id.clone(),
            model: Arc::new(model),
            chat: spec.role == Role::Chat,
            guard: spec.role == Role::Guard,
            n_ctx: spec.n_ctx.or(settings.n_ctx),
            draft: spec.draft.clone(),
        };
        let mut entry = start_entry(model_spec, settings, &st.metrics, crate::routes::generation::unix_now()).map_err(ApiError::invalid)?;
        entry.vision = spec.vision.clone();
        entry.source = Some(spec);
        Ok(entry)
    })
    .await
    .map_err(|e| ApiError::server(format!("loading the model failed: {e}")))??;
    Ok(state.registry.insert(entry))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// The model `id` held for the request that names it: loaded again first when it was parked
/// (the request waits; `progress` is called when the load starts and about once a second
/// after). `None` when no
/// model has that id (the route answers its own 404).
pub async fn pin(state: &Arc<AppState>, id: &str, mut progress: impl FnMut(Duration)) -> Result<Option<Arc<ModelEntry>>, ApiError> {
    if let Ok(entry) = state.registry.get(id) {
        return Ok(Some(entry));
    }
    let Some(parked) = state.loader.parked.lock().expect("parked lock").get(id).cloned() else { return Ok(None) };
    let started = Instant::now();
    let _one_load = parked.reload.lock().await;
    if let Ok(entry) = state.registry.get(id) {
        // another request loaded it while this one waited
        return Ok(Some(entry));
    }
    progress(started.elapsed());
    let load = start(state, parked.spec.clone());
    tokio::pin!(load);
    let entry = loop {
        tokio::select! {
            done = &mut load => break done?,
            _ = tokio::time::sleep(Duration::from_secs(1)) => progress(started.elapsed()),
        }
    };
    state.loader.parked.lock().expect("parked lock").remove(id);
    tracing::info!("loaded model {id} again after {:.1} s", started.elapsed().as_secs_f64());
    Ok(Some(entry))
}

/// One look for idle models: each model that can be loaded again (it has its file) and does
/// not guard, idle for `--idle-unload` with nobody holding it, is unloaded and parked.
pub fn sweep(state: &AppState) {
    let Some(idle) = state.loader.idle else { return };
    for entry in state.registry.list() {
        let Some(spec) = entry.source.clone() else { continue };
        if entry.guard {
            // the guardrails and moderations find their guard among the loaded models
            continue;
        }
        let created = entry.created;
        drop(entry);
        // parked first, so that a request that no longer finds it loaded finds it parked
        let parked = Arc::new(Parked { spec: spec.clone(), created, reload: tokio::sync::Mutex::new(()) });
        state.loader.parked.lock().expect("parked lock").insert(spec.id.clone(), parked);
        if state.registry.remove_if_idle(&spec.id, idle) {
            tracing::info!("unloaded model {} (idle for {} s)", spec.id, idle.as_secs());
        } else {
            state.loader.parked.lock().expect("parked lock").remove(&spec.id);
        }
    }
}
