//! What the model-running subcommands share: loading a model (with a spinner for large files),
//! tokenizing a prompt, the KV type flag and the worker thread pool.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use engine::backend::Device;
use engine::generate::{DraftSettings, NgramDraft};
use engine::kv_cache::{KvType, KvTypes};
use engine::model::{LoadOptions, Model, ModelError};
use engine::tokenizer::TokenId;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Files larger than this get a spinner while they load (smaller ones load too fast to need it).
const SPINNER_BYTES: u64 = 100 * 1000 * 1000;

/// Loads the model at `path`. The spinner goes to stderr, and only to a terminal: piped
/// output and logs stay clean.
pub fn load_model(path: &Path, device: Device) -> anyhow::Result<Model> {
    load_model_with(path, device, LoadOptions::default())
}

/// [`load_model`], leaving out of the model what `options` says.
pub fn load_model_with(path: &Path, device: Device, options: LoadOptions) -> anyhow::Result<Model> {
    let large = std::fs::metadata(path).is_ok_and(|m| m.len() > SPINNER_BYTES);
    let spinner = (large && std::io::stderr().is_terminal()).then(|| {
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        pb.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").unwrap_or_else(|_| ProgressStyle::default_spinner()));
        // the file name only: a long path would wrap, and a wrapped line redraws badly
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        pb.set_message(format!("loading {name}"));
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    });
    let model = Model::load_with(path, device, options);
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    model.map_err(|e| match e {
        // file errors already start with the path
        ModelError::Gguf(g) => anyhow!(g),
        other => anyhow!(other).context(path.display().to_string()),
    })
}

/// The process's resident memory in MiB (`VmRSS` of Linux's `/proc/self/status`), `None`
/// elsewhere: read right after loading, it is what the model costs (its weights as the backend
/// holds them).
pub fn resident_mib() -> Option<u64> {
    Some(proc_kib("/proc/self/status", "VmRSS:")? >> 10)
}

/// The memory Linux says is available for new allocations (`MemAvailable` of `/proc/meminfo`)
/// in bytes, `None` elsewhere.
pub fn memory_available() -> Option<usize> {
    Some(proc_kib("/proc/meminfo", "MemAvailable:")? as usize * 1024)
}

/// The value of the `key` line (`key   1234 kB`) of a Linux `/proc` file, in KiB.
fn proc_kib(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// A prompt given as text or as token ids (`--tokens 1,2,3`: no tokenizer involved, for comparing
/// logits with another implementation on the same ids, and for files whose vocabulary is ids only).
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct PromptArgs {
    /// The prompt text (BOS added when the model asks for it; control-token text such as
    /// "<start_of_turn>" is parsed).
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// The prompt as comma-separated token ids, run exactly as given (no BOS added).
    #[arg(long, value_delimiter = ',', value_name = "ID,ID,...")]
    pub tokens: Option<Vec<TokenId>>,
}

impl PromptArgs {
    /// The prompt's tokens: the text tokenized as llama.cpp's tools do (BOS or whatever the
    /// vocabulary adds when the file asks for it, control-token text parsed), or the ids as
    /// given, each checked to be in the vocabulary.
    pub fn tokens(&self, model: &Model) -> anyhow::Result<Vec<TokenId>> {
        let n_vocab = model.config().n_vocab;
        let tokens = match (&self.prompt, &self.tokens) {
            (_, Some(ids)) => {
                if let Some(bad) = ids.iter().find(|&&id| id as usize >= n_vocab) {
                    bail!("--tokens: id {bad} is outside the vocabulary of {n_vocab}");
                }
                ids.clone()
            }
            (Some(text), None) => model.tokenizer().encode(text, true, true),
            (None, None) => bail!("give --prompt or --tokens"),
        };
        if tokens.is_empty() {
            bail!("the prompt gives no tokens (this model adds no BOS to an empty text)");
        }
        Ok(tokens)
    }

    /// The prompt's text, for commands that need text (images are placed in it).
    pub fn text(&self) -> anyhow::Result<&str> {
        self.prompt.as_deref().ok_or_else(|| anyhow!("--image needs --prompt text, not --tokens"))
    }
}

/// How a generating command runs its model (`run`, `chat`): context, KV cache, threads, device.
#[derive(clap::Args)]
pub struct RuntimeArgs {
    /// Context size in tokens [default: the model's, at most 4096; `run`: at least prompt + n].
    #[arg(long, short = 'c', value_parser = parse_positive)]
    pub ctx_size: Option<usize>,
    #[command(flatten)]
    pub kv: KvCacheArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Worker threads [default: all cores].
    #[arg(long, short = 't', value_parser = parse_positive)]
    pub threads: Option<usize>,
    /// Device: cpu, cuda or cuda:N (a build without CUDA refuses cuda with an error).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
}

/// LoRA adapters to run the model with, as llama.cpp's `--lora` / `--lora-scaled` give them.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LoraArgs {
    /// A LoRA adapter GGUF (as llama.cpp's convert_lora_to_gguf.py writes it) applied at SCALE
    /// (default 1) on the fly, not merged into the weights (repeat for several); an activated
    /// one (aLoRA) from the last occurrence of its invocation tokens in the prompt on.
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = parse_lora)]
    pub lora: Vec<(PathBuf, f32)>,
}

impl LoraArgs {
    /// Loads the adapters into `model`, each used by default at its scale.
    pub fn load_into(&self, model: &mut Model) -> anyhow::Result<()> {
        load_adapters(model, &self.lora)
    }

    /// [`LoraArgs::load_into`] for a command that runs no prompt of its own (`command`): an
    /// activated adapter, which runs from its invocation in a prompt, is refused.
    pub fn load_plain_into(&self, model: &mut Model, command: &str) -> anyhow::Result<()> {
        let first = model.adapters().len();
        self.load_into(model)?;
        if let Some(((path, _), _)) = self.lora.iter().zip(&model.adapters()[first..]).find(|(_, a)| a.is_activated()) {
            anyhow::bail!(
                "{}: an activated LoRA (adapter.alora.invocation_tokens) runs from its invocation tokens in a prompt; \
                 {command} runs none (it runs with `run`, `chat`, `logits`, `guard` and the server)",
                path.display()
            );
        }
        Ok(())
    }
}

/// Loads `adapters` (file, scale) into `model`, each used by default at its scale.
pub fn load_adapters(model: &mut Model, adapters: &[(PathBuf, f32)]) -> anyhow::Result<()> {
    for (path, scale) in adapters {
        model.load_adapter(path, Some(*scale)).with_context(|| format!("--lora {}", path.display()))?;
    }
    Ok(())
}

/// Parses `FILE[:SCALE]` (a file whose name ends in `:` and a number is written `FILE:1`).
pub fn parse_lora(s: &str) -> Result<(PathBuf, f32), String> {
    match s.rsplit_once(':').map(|(path, scale)| (path, scale.parse::<f32>())) {
        Some((path, Ok(scale))) if scale.is_finite() && !path.is_empty() => Ok((PathBuf::from(path), scale)),
        Some((_, Ok(_))) => Err(format!("{s:?}: the scale must be a finite number after a file name")),
        _ if s.is_empty() => Err("an empty adapter file name".into()),
        _ => Ok((PathBuf::from(s), 1.0)),
    }
}

/// Parses `--device`: `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(s: &str) -> Result<Device, String> {
    s.parse::<Device>().map_err(|e| e.to_string())
}

/// The KV cache's element types, named as llama.cpp names them.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct KvCacheArgs {
    /// Element type of the KV cache's keys and values: f32, f16, q8_0 (about half the memory of
    /// f16) or q4_0 (about 28%).
    #[arg(long, default_value = "f16", value_parser = parse_kv_type)]
    pub kv_type: KvType,
    /// The keys' element type, in place of --kv-type's (llama.cpp's --cache-type-k).
    #[arg(long, value_name = "TYPE", value_parser = parse_kv_type)]
    pub cache_type_k: Option<KvType>,
    /// The values' element type, in place of --kv-type's (llama.cpp's --cache-type-v).
    #[arg(long, value_name = "TYPE", value_parser = parse_kv_type)]
    pub cache_type_v: Option<KvType>,
}

impl KvCacheArgs {
    pub fn types(&self) -> KvTypes {
        KvTypes { key: self.cache_type_k.unwrap_or(self.kv_type), value: self.cache_type_v.unwrap_or(self.kv_type) }
    }
}

/// Parses a KV cache type (`--kv-type`, `--cache-type-k`, `--cache-type-v`).
pub fn parse_kv_type(s: &str) -> Result<KvType, String> {
    let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
    KvType::from_name(s).ok_or_else(|| format!("unknown KV cache type {s:?} ({})", names.join(", ")))
}

/// A pool of `threads` workers for the CPU kernels (all cores when `None`, or what
/// `RAYON_NUM_THREADS` says).
pub fn thread_pool(threads: Option<usize>) -> anyhow::Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new().num_threads(threads.unwrap_or(0)).build().context("starting the worker threads")
}

/// The default context size for `model`: its training context, at most 4096 (the server's
/// rule, so that every front-end sizes caches alike).
pub use server::default_ctx;

/// Text given on the command line, or else read from `file` (`-` is standard input); `None`
/// when there is neither.
pub fn text_or_file(text: Option<&str>, file: Option<&Path>) -> anyhow::Result<Option<String>> {
    match (text, file) {
        (Some(t), _) => Ok(Some(t.to_string())),
        (None, Some(p)) if p.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
            Ok(Some(s))
        }
        (None, Some(p)) => Ok(Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)),
        (None, None) => Ok(None),
    }
}

/// How speculation drafts (`run`, `serve`): tokens per round, and the least probability a draft
/// model may give a token it proposes.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct DraftArgs {
    /// Tokens the draft model (or the n-gram lookup) proposes per round and sequence, at most.
    #[arg(long, default_value_t = DraftSettings::DEFAULT.n_draft, value_parser = parse_positive)]
    pub draft_n: usize,
    /// The least probability the draft model may give a token it proposes: it stops drafting at
    /// the first below (as llama.cpp's --draft-p-min; 0 proposes all --draft-n).
    #[arg(long, value_name = "P", default_value_t = DraftSettings::DEFAULT.p_min)]
    pub draft_p_min: f32,
    /// The draft model computes logits for its first N token ids only (0: all of them). Its
    /// proposals are checked by the model either way; a vocabulary numbered by merge rank puts
    /// the frequent tokens first, so the head costs a fraction and keeps most proposals.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub draft_vocab: usize,
}

impl DraftArgs {
    /// The settings, or an error naming a flag out of range.
    pub fn settings(&self) -> anyhow::Result<DraftSettings> {
        let settings = DraftSettings { n_draft: self.draft_n, p_min: self.draft_p_min };
        settings.check().context("--draft-p-min")?;
        Ok(settings)
    }

    /// The draft model at `path` on `device`, its logits limited by `--draft-vocab`.
    pub fn load_draft(&self, path: &Path, device: Device) -> anyhow::Result<Model> {
        // the rest of the head is never read nor repacked
        let options = LoadOptions { logits_below: (self.draft_vocab > 0).then_some(self.draft_vocab) };
        let model = load_model_with(path, device, options);
        let model = if self.draft_vocab > 0 { model.with_context(|| format!("--draft-vocab {}", self.draft_vocab))? } else { model? };
        let n_vocab = model.config().n_vocab;
        if self.draft_vocab > 0 && self.draft_vocab < n_vocab {
            eprintln!("draft {}: logits for its first {} of {n_vocab} token ids", path.display(), self.draft_vocab);
        }
        Ok(model)
    }

    /// The n-gram lookup with `--draft-n` tokens per round.
    pub fn ngram(&self) -> NgramDraft {
        NgramDraft { n_draft: self.draft_n, ..NgramDraft::DEFAULT }
    }
}

/// Parses a count that must be at least 1 (threads, repetitions).
pub fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
