//! `engine-cli serve`: the OpenAI-style HTTP server over one or more models, with a guard.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use engine::backend::{BackendError, Device};
use engine::guard::{Evaluator, EvaluatorOptions, GenericPrompt, GuardFamily, Policies};
use engine::model::vision::VisionModel;
use engine::model::whisper::WhisperModel;
use engine::model::Model;
use engine::serving::SpecPolicy;
use engine::tokenizer::fim::FimOrder;
use engine::transcribe::whisper::WhisperTranscriber;
use server::batch_scheduler::BatchConfig;
use server::vision::{MediaOptions, Projector};
use server::{ConnectionLimits, ModelSpec, Scheduling, Server, ServerGuardrails};

use crate::load::{load_adapters, load_model, memory_available, parse_device, parse_lora, parse_positive, DraftArgs, KvCacheArgs};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// A model to serve (repeat for several). Its id is the file name without `.gguf`.
    #[arg(long = "model", short = 'm', required_unless_present_any = ["models_dir", "transcribe"])]
    pub models: Vec<PathBuf>,
    /// A directory whose GGUF files `POST /v1/models` may load (by file name) while the server
    /// runs.
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Unload a model nobody used for this many seconds; the next request that names it loads
    /// it again (and waits for it). Guard models stay loaded.
    #[arg(long, value_name = "SECONDS", value_parser = parse_positive)]
    pub idle_unload: Option<usize>,
    /// A Whisper GGUF (`tools/fetch-models.sh whisper-base`) serving
    /// `POST /v1/audio/transcriptions`; its id is the file name without `.gguf` (or
    /// --transcribe-id).
    #[arg(long, value_name = "GGUF")]
    pub transcribe: Option<PathBuf>,
    /// The id requests name the --transcribe model by.
    #[arg(long, value_name = "ID", requires = "transcribe")]
    pub transcribe_id: Option<String>,
    /// The id of the corresponding --model (repeat in the same order).
    #[arg(long)]
    pub alias: Vec<String>,
    /// A vision projector GGUF (mmproj, as llama.cpp's converters write it: idefics3 for
    /// SmolVLM, gemma3 for Gemma 3) for the corresponding --model (repeat in the same order):
    /// its chat requests may then carry image_url parts.
    #[arg(long, value_name = "GGUF")]
    pub mmproj: Vec<PathBuf>,
    /// A folder whose images `file://` image URLs may name (without it they are refused;
    /// remote http(s) images are never fetched).
    #[arg(long, value_name = "DIR")]
    pub allowed_local_media_path: Option<PathBuf>,
    /// The most bytes of one image (a larger one is a 413). The default, 10 MiB, fits as a
    /// base64 data: URI in the 16 MiB a request body may hold.
    #[arg(long, value_name = "BYTES", default_value_t = 10 << 20, value_parser = parse_positive)]
    pub max_image_bytes: usize,
    /// The most pixels of one image, width x height (a larger one is a 413).
    #[arg(long, value_name = "PIXELS", default_value_t = 50_000_000, value_parser = parse_positive)]
    pub max_image_pixels: usize,
    /// The guard model for /v1/guard*: a Granite Guardian, Llama Guard 3, ShieldGemma,
    /// Qwen3Guard or gpt-oss-safeguard GGUF, or a chat model (the generic path; it may be one
    /// of the --model files). Without it, a --model that is a guard model of those families
    /// serves as the guard.
    #[arg(long)]
    pub guard: Option<PathBuf>,
    /// Guard policy presets (TOML, or JSON for a `.json` file): named per-risk thresholds that
    /// guard requests select with `policy`, and the `default` one for requests that name none.
    #[arg(long, value_name = "FILE")]
    pub guard_policy: Option<PathBuf>,
    /// Guard every chat completion: `input` (the last user turn is judged before generation; a
    /// flagged one is refused), `output` (the reply is judged as it is generated and cut when
    /// flagged), or both (`input,output`), with the guard model and the default policy.
    #[arg(long, value_delimiter = ',', value_parser = ["input", "output"])]
    pub guardrails: Vec<String>,
    /// How a chat model serving as guard is asked: layout, direct, few-shot or question-first
    /// (as `guard --generic-prompt`).
    #[arg(long, value_parser = crate::guard::parse_generic_prompt, default_value = "direct")]
    pub generic_prompt: GenericPrompt,
    /// The guard model's family when its file does not say it (as `guard --guard-family`).
    #[arg(long, value_parser = crate::guard::parse_family)]
    pub guard_family: Option<GuardFamily>,
    /// MiB of keys and values the guard model keeps of earlier prompts, so that a later prompt
    /// starting the same way (the format's start, a text judged again, a conversation or a
    /// streamed reply judged as it grows) reuses them (0 turns it off).
    #[arg(long, value_name = "MIB", default_value_t = engine::guard::DEFAULT_PROMPT_CACHE_BYTES >> 20)]
    pub guard_cache_mib: usize,
    /// Responses the Responses API keeps in memory (for `previous_response_id` and
    /// `GET /v1/responses/{id}`; the least recently used go first, 256 MiB at most together; 0
    /// keeps none).
    #[arg(long, value_name = "N", default_value_t = server::response_store::DEFAULT_CAPACITY)]
    pub responses_store: usize,
    /// Seconds a chat or text completion may take when it names no `timeout`: past them its
    /// generation ends (finish reason `length`), or it fails with 408 when no token came yet.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub request_timeout: Option<Duration>,
    /// The most seconds a request's `timeout` may ask for (a larger one is a 400).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub max_request_timeout: Option<Duration>,
    /// Connections held at once; more are answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = parse_positive)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (the connection is closed after them).
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_seconds)]
    pub header_timeout: Duration,
    /// Seconds a client has to send a request's body (408 after them).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds)]
    pub body_timeout: Duration,
    /// Seconds SIGINT / SIGTERM waits for open requests before cutting them and exiting.
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_seconds)]
    pub drain_timeout: Duration,
    /// A smaller model with the same vocabulary that drafts tokens for the chat models
    /// (speculative decoding: it drafts for every decoding sequence in shared passes, and the
    /// model checks every sequence's proposals in the step's one pass; greedy or seeded, the
    /// output is unchanged).
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Speculation from each sequence's own tokens: `ngram` proposes the tokens that followed the
    /// latest earlier occurrence of a sequence's last 4, 3 or 2 tokens in its own prompt and
    /// output (for every decoding sequence, checked in the step's one pass; greedy or seeded, the
    /// output is unchanged). With --draft: first, the draft model drafting for the sequences
    /// whose lookup finds nothing.
    #[arg(long, value_parser = ["ngram"])]
    pub spec: Option<String>,
    /// Check every drafting sequence's proposals in every step. By default a sequence proposes
    /// only when its rounds are expected to raise the step's tokens per second: the rows its
    /// proposals add (and the draft's passes) against the tokens its rounds have kept, at the
    /// pass times measured while serving.
    #[arg(long)]
    pub spec_always: bool,
    #[command(flatten)]
    pub drafting: DraftArgs,
    /// A LoRA adapter GGUF for the first --model, at SCALE (default 1) unless a request's `lora`
    /// says otherwise (repeat for several; ids in this order). `GET /lora-adapters` lists them,
    /// `POST /lora-adapters` changes their scales.
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = parse_lora)]
    pub lora: Vec<(PathBuf, f32)>,
    /// A LoRA adapter GGUF for the guard model, applied to every guard prompt at SCALE
    /// (default 1; repeat for several) unless a guard request's `lora` says otherwise.
    #[arg(long, value_name = "FILE[:SCALE]", value_parser = parse_lora)]
    pub guard_lora: Vec<(PathBuf, f32)>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/* (also read from ENGINE_API_KEY).
    #[arg(long, env = "ENGINE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Do not serve the playground page at `/`.
    #[arg(long)]
    pub no_webui: bool,
    /// Answer a chat completion whose last message is an assistant's with a new turn instead of
    /// continuing its text, unless the request's `continue_final_message` says otherwise.
    #[arg(long)]
    pub no_prefill_assistant: bool,
    /// Lay fill-in-the-middle prompts (`/infill`, a completion's `suffix`) out suffix first,
    /// the order some code models were trained on (llama-server's --spm-infill).
    #[arg(long)]
    pub spm_infill: bool,
    /// Bucket bounds of the latency histograms, in milliseconds.
    #[arg(long, value_delimiter = ',')]
    pub latency_buckets: Vec<f64>,
    /// Context size per model [default: the model's, at most 4096].
    #[arg(long, short = 'c', value_parser = parse_positive)]
    pub ctx_size: Option<usize>,
    /// Device of every model: cpu, cuda or cuda:N (a build without CUDA refuses cuda with an error).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
    /// Worker threads for the engine [default: all cores].
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub kv: KvCacheArgs,
    /// MiB of KV cache per chat model: it holds as many positions as fit in the cache's types
    /// (q8_0 about twice as many as f16), shared by the sequences running and the prefix cache
    /// [default: context x parallel positions].
    #[arg(long, value_name = "MIB", value_parser = parse_positive)]
    pub kv_memory: Option<usize>,
    /// Sequences each model decodes at once (continuous batching); each may use the whole
    /// context, and the KV cache holds context x parallel positions (or --kv-memory).
    #[arg(long, default_value_t = 8, value_parser = parse_positive)]
    pub parallel: usize,
    /// Requests that may wait for a free sequence; beyond them a request gets 503 with
    /// Retry-After.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Prompt tokens read per step: a long prompt is read in chunks of this size, between which
    /// the other sequences keep generating.
    #[arg(long, default_value_t = 256, value_parser = parse_positive)]
    pub prefill_chunk: usize,
    /// Finished sequences kept in the KV cache for reuse by prompts that start the same way
    /// (0 turns the prefix cache off).
    #[arg(long, default_value_t = 16)]
    pub prompt_cache: usize,
    /// Route non-streaming completions through the batch scheduler, flushing a batch at this
    /// many requests [default with --batch-timeout-ms: --parallel].
    #[arg(long, value_parser = parse_positive)]
    pub max_batch: Option<usize>,
    /// ... or this many milliseconds after its first request [default with --max-batch: 5].
    #[arg(long)]
    pub batch_timeout_ms: Option<u64>,
}

/// What a chat model's KV cache takes: a sequence of the whole context, the whole cache, and on
/// the CPU how many whole-context sequences the memory available now would hold.
fn kv_summary(model: &Model, config: &server::worker::LoopConfig) -> String {
    let per_position = model.kv_bytes_per_position(config.kv_types);
    let positions = config.kv_capacity();
    let per_sequence = per_position * config.n_ctx;
    let mut line = format!(
        "KV cache {}: {per_position} bytes per position, {} per sequence of {} positions; the cache holds {positions} positions ({} whole sequences) and a copy-on-write block per slot in {}",
        config.kv_types,
        mib(per_sequence),
        config.n_ctx,
        positions / config.n_ctx.max(1),
        mib(per_position * config.kv_pool_positions()),
    );
    if let (Device::Cpu, Some(available)) = (model.device(), memory_available()) {
        line += &format!("; {} whole sequences would fit in the {} of memory available", available / per_sequence.max(1), mib(available));
    }
    let states = model.state_bytes_per_sequence();
    if states > 0 {
        line += &format!("; recurrent states {} per sequence, as much again per checkpoint kept", kib(states));
    }
    line
}

/// `bytes` in KiB.
fn kib(bytes: usize) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// `bytes` in MiB, or GiB from 1 GiB on.
fn mib(bytes: usize) -> String {
    match bytes as f64 / f64::from(1 << 20) {
        m if m >= 1024.0 => format!("{:.1} GiB", m / 1024.0),
        m => format!("{m:.1} MiB"),
    }
}

fn id_of(path: &Path) -> String {
    path.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().trim_end_matches(".gguf").to_string())
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if !args.device.is_built() {
        anyhow::bail!(BackendError::NotBuilt(args.device));
    }
    if args.alias.len() > args.models.len() {
        anyhow::bail!("{} --alias for {} --model", args.alias.len(), args.models.len());
    }
    if args.mmproj.len() > args.models.len() {
        anyhow::bail!(
            "{} --mmproj for {} --model (each projector goes with the --model in the same place)",
            args.mmproj.len(),
            args.models.len()
        );
    }
    let media = MediaOptions {
        allowed_local_dir: args
            .allowed_local_media_path
            .as_ref()
            .map(|d| d.canonicalize().with_context(|| format!("--allowed-local-media-path {}", d.display())))
            .transpose()?,
        max_image_bytes: args.max_image_bytes,
        max_image_pixels: args.max_image_pixels as u64,
        ..MediaOptions::default()
    };
    if args.latency_buckets.iter().any(|b| !b.is_finite() || *b <= 0.0) || args.latency_buckets.windows(2).any(|w| w[0] >= w[1]) {
        anyhow::bail!("--latency-buckets must be increasing positive numbers");
    }
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().context("starting the worker threads")?;
    }
    // read before any model: a bad policy file is a start-up error naming its line
    let policies = args.guard_policy.as_deref().map(Policies::load).transpose()?;
    let guard_path = args.guard.as_ref().map(|p| p.canonicalize().with_context(|| p.display().to_string())).transpose()?;
    let scheduling = Scheduling {
        parallel: args.parallel,
        queue: args.queue,
        prefill_chunk: args.prefill_chunk,
        cache_entries: args.prompt_cache,
        kv_positions: None,
        kv_bytes: args.kv_memory.map(|mib| mib.saturating_mul(1 << 20)),
        kv_types: args.kv.types(),
        ngram: args.spec.as_ref().map(|_| args.drafting.ngram()),
        speculation: if args.spec_always { SpecPolicy::Always } else { SpecPolicy::WhenItPays },
        draft: args.drafting.settings()?,
    };
    let mut builder = Server::builder()
        .api_key(args.api_key.clone())
        .webui(!args.no_webui)
        .prefill_assistant(!args.no_prefill_assistant)
        .fim_order(FimOrder::suffix_first(args.spm_infill))
        .scheduling(scheduling)
        .guard_policies(policies.clone().unwrap_or_default())
        .generic_prompt(args.generic_prompt)
        .guard_family(args.guard_family)
        .guard_prompt_cache_bytes(args.guard_cache_mib.saturating_mul(1 << 20))
        .responses_store(args.responses_store)
        .guardrails(ServerGuardrails {
            input: args.guardrails.iter().any(|s| s == "input"),
            output: args.guardrails.iter().any(|s| s == "output"),
        });
    if let Some(dir) = &args.models_dir {
        builder = builder.models_dir(dir.clone(), args.device, args.ctx_size);
    }
    builder = builder.request_timeouts(args.request_timeout, args.max_request_timeout);
    builder = builder.connection_limits(ConnectionLimits {
        max_connections: args.max_connections,
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
    });
    if let Some(secs) = args.idle_unload {
        builder = builder.idle_unload(std::time::Duration::from_secs(secs as u64));
    }
    if args.max_batch.is_some() || args.batch_timeout_ms.is_some() {
        builder = builder.batch_scheduler(BatchConfig {
            max_batch_size: args.max_batch.unwrap_or(args.parallel),
            batch_timeout: std::time::Duration::from_millis(args.batch_timeout_ms.unwrap_or(5)),
            max_in_flight: args.parallel,
        });
    }
    if !args.latency_buckets.is_empty() {
        builder = builder.latency_buckets(args.latency_buckets.clone());
    }
    let draft = args.draft.as_deref().map(|p| args.drafting.load_draft(p, args.device)).transpose()?.map(Arc::new);
    let mut guard_served = false;
    for (i, path) in args.models.iter().enumerate() {
        let mut model = Arc::new(load_model(path, args.device)?);
        let id = args.alias.get(i).cloned().unwrap_or_else(|| id_of(path));
        let named_guard = guard_path.is_some() && path.canonicalize().ok() == guard_path;
        let guardian = guard_path.is_none() && is_guardian(&model);
        // the guardian check's evaluator is gone: the model is held here alone
        let held = Arc::get_mut(&mut model).context("the model is shared before its adapters load")?;
        if i == 0 {
            load_adapters(held, &args.lora)?;
        }
        if named_guard || guardian {
            load_adapters(held, &args.guard_lora)?;
        }
        guard_served |= named_guard || guardian;
        if let Some(mmproj) = args.mmproj.get(i) {
            let vision = VisionModel::load_on(mmproj, args.device).with_context(|| mmproj.display().to_string())?;
            let projector =
                Projector::new(vision, &model, media.clone()).with_context(|| format!("{} with {}", mmproj.display(), path.display()))?;
            eprintln!("{id}: vision projector {} ({})", mmproj.display(), projector.model.config().projector.name());
            builder = builder.projector(id.clone(), Arc::new(projector));
        }
        // an encoder (an embedding model, a reranker) serves embeddings or reranking, never chat
        let chat = !model.is_encoder();
        let spec = ModelSpec { id, model, chat, guard: named_guard || guardian, n_ctx: args.ctx_size, draft: draft.clone() };
        builder = builder.model_file(spec, path.clone());
    }
    if let (Some(path), false) = (&args.guard, guard_served) {
        let mut model = load_model(path, args.device)?;
        load_adapters(&mut model, &args.guard_lora)?;
        let spec = ModelSpec { id: id_of(path), model: Arc::new(model), chat: false, guard: true, n_ctx: args.ctx_size, draft: None };
        builder = builder.model_file(spec, path.clone());
    }
    if let Some(path) = &args.transcribe {
        let model = WhisperModel::load_on(path, args.device).with_context(|| path.display().to_string())?;
        let id = args.transcribe_id.clone().unwrap_or_else(|| id_of(path));
        eprintln!("serving {id} (transcription)");
        builder = builder.transcriber(Arc::new(WhisperTranscriber::new(model, id)));
    }
    let server = builder.build().map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the runtime")?;
    runtime.block_on(async {
        let (listener, addr) =
            Server::bind(SocketAddr::new(args.host, args.port)).await.with_context(|| format!("binding {}:{}", args.host, args.port))?;
        for m in server.state().registry.list() {
            let role = match (m.generates, m.guard) {
                (true, true) => "chat + guard",
                (true, false) => "chat",
                (false, true) => "guard",
                (false, false) if engine::rerank::is_reranker(&m.model) => "rerank",
                (false, false) => "embedding",
            };
            eprintln!("serving {} ({role}, context {}, {} sequences at once)", m.id, m.n_ctx, args.parallel);
            if m.generates {
                eprintln!("{}: {}", m.id, kv_summary(&m.model, m.worker.config()));
            }
            for (id, a) in m.model.adapters().iter().enumerate() {
                let scale = m.model.default_scale(id).unwrap_or(0.0);
                let file = a.path.as_deref().unwrap_or("");
                eprintln!("{}: LoRA adapter {id} {file} (rank {}, alpha {}) at scale {scale}", m.id, a.rank, a.alpha);
            }
        }
        if let Some(p) = &policies {
            let names: Vec<&str> = p.names().collect();
            let default = p.default_policy().map_or(String::new(), |d| format!(" (default {})", d.name));
            eprintln!("guard policies: {}{default}", names.join(", "));
        }
        if let Some(dir) = &args.models_dir {
            eprintln!("loading models of {} on request (POST /v1/models)", dir.display());
        }
        eprintln!("listening on http://{addr}");
        let server = Arc::new(server);
        let stopper = server.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            eprintln!("shutting down");
            stopper.close();
        });
        server.serve_draining(listener, Some(args.drain_timeout)).await.context("serving")
    })?;
    // requests cut by the drain are dropped with the runtime; a model still loading is not waited for
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}

/// Parses a number of seconds above 0 (fractions allowed).
fn parse_seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 => Duration::try_from_secs_f64(v).map_err(|_| "too many seconds".to_string()),
        Ok(_) => Err("must be a number of seconds above 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether the model is a guard model of a known family (Granite Guardian, Llama Guard,
/// ShieldGemma), by its template or names.
fn is_guardian(model: &Arc<Model>) -> bool {
    Evaluator::from_model(model.clone(), EvaluatorOptions { device: model.device(), ..EvaluatorOptions::default() })
        .is_ok_and(|e| e.family() != GuardFamily::Generic)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return ctrl_c.await.unwrap_or(()),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
