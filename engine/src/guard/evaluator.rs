//! The guard evaluator (guard.md §4, §5, §7): checks a request, renders one prompt per risk,
//! computes the prompts' shared prefix once per input (KV fork), then runs every suffix of every
//! input as one batch and decodes all of them in lockstep (greedy), reading the verdicts. The
//! prompts stay in the evaluator's prompt cache, where later prompts find their common start.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use serde::Serialize;

use super::custom::CustomRisk;
use super::family::{self, llama_guard, qwen3guard, safeguard, FamilyPrompter, GuardFamily};
use super::policy::Thresholds;
use super::prompt_cache::{PromptCache, PromptCounters, PromptStats};
use super::verdict::{risk_probability, verdict_3_0, verdict_3_2, verdict_3_3, RiskName, Verdict, YesNoTokens};
use super::{check_request, GenericPrompt, GuardError, GuardFormat, GuardInput, GuardPrompt, Prompter, Reader, Risk};
use crate::backend::{BackendError, Device};
use crate::chat::tokenize_rendered;
use crate::chat::ChatTemplate;
use crate::generate::{decode_lockstep, prefill_shared_prefixes, GenerateError, GenerateParams, LockstepSeq, SequenceDecoder};
use crate::kv_cache::{KvCache, KvType};
use crate::model::{LoraScale, LoraSchedule, Model, ModelError};
use crate::tokenizer::TokenId;

/// The most inputs one batch may hold (guard.md §4).
pub const MAX_BATCH: usize = 256;
/// Sequences decoded together at most (bounds the KV cache of a large batch).
const MAX_SEQS_PER_PASS: usize = 64;
/// Bytes of earlier prompts' keys and values kept for reuse, unless the options say otherwise.
pub const DEFAULT_PROMPT_CACHE_BYTES: usize = 1 << 30;

/// How the evaluator runs.
#[derive(Clone, Debug)]
pub struct EvaluatorOptions {
    /// Where the model runs (a device this build lacks is refused).
    pub device: Device,
    /// The format of requests that name none (default: detected from the model).
    pub default_format: Option<GuardFormat>,
    pub kv_type: KvType,
    /// Output budgets: 3.2 answers, 3.3 without and with thinking.
    pub max_tokens_3_2: usize,
    pub max_tokens_3_3: usize,
    pub max_tokens_think: usize,
    /// How a generic (non-Guardian) model is asked (`generic`).
    pub generic_prompt: GenericPrompt,
    /// The model's family (default: detected from its template and names, `family::detect`,
    /// else Granite Guardian or the generic path by `risks::detect_format`).
    pub family: Option<GuardFamily>,
    /// Bytes of keys and values of earlier prompts kept for later ones to start from (0: none).
    pub prompt_cache_bytes: usize,
}

impl Default for EvaluatorOptions {
    fn default() -> EvaluatorOptions {
        EvaluatorOptions {
            device: Device::Cpu,
            default_format: None,
            kv_type: KvType::F16,
            max_tokens_3_2: 32,
            max_tokens_3_3: 64,
            max_tokens_think: 2048,
            generic_prompt: GenericPrompt::default(),
            family: None,
            prompt_cache_bytes: DEFAULT_PROMPT_CACHE_BYTES,
        }
    }
}

/// One evaluation: an input, the risks to judge it for, and how to decide.
#[derive(Clone, Debug, Default)]
pub struct GuardRequest {
    pub input: GuardInput,
    /// Risk names, in the order of the verdicts: built-in risks and the names of `customs`.
    /// Empty: the 9 harm risks, or only the custom risks when there are some.
    pub risks: Vec<String>,
    /// Risks of the caller's own; each must be named in `risks` unless `risks` is empty.
    pub customs: Vec<CustomRisk>,
    pub format: Option<String>,
    pub think: bool,
    /// Risks decided by their `risk_probability` instead of the model's label (a policy's
    /// thresholds with the request's own over them).
    pub thresholds: Thresholds,
    /// The model's LoRA adapters its prompts run with (`None`: the model's default set).
    pub lora: Option<Vec<LoraScale>>,
}

impl GuardRequest {
    /// A request judging `input` for `risks` (empty: the 9 harm risks) by the model's labels.
    pub fn new<S: AsRef<str>>(input: GuardInput, risks: &[S]) -> GuardRequest {
        GuardRequest { input, risks: risks.iter().map(|r| r.as_ref().to_string()).collect(), ..GuardRequest::default() }
    }

    /// The same request for another input (a batch: one request per input).
    pub fn with_input(&self, input: GuardInput) -> GuardRequest {
        GuardRequest { input, ..self.clone() }
    }
}

/// Final verdicts: thresholds applied, `flagged` when any verdict is unsafe.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GuardResult {
    pub flagged: bool,
    pub verdicts: Vec<Verdict>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScanResult {
    pub flagged: bool,
    pub verdicts: Vec<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub highest_risk: Option<Risk>,
}

/// One request's prompts, each with the risk its verdict is about.
struct Plan {
    prompts: Vec<GuardPrompt>,
    names: Vec<RiskName>,
}

/// How a model's prompts are written: one risk per prompt in Granite Guardian's formats (and on
/// the generic path), or by a family module.
#[derive(Debug)]
enum Prompts {
    Granite(Prompter),
    Family(FamilyPrompter),
}

/// A loaded guard model and how to prompt it.
pub struct Evaluator {
    model: Arc<Model>,
    prompts: Prompts,
    /// The label words of the family's answers, whose probability mass is read at the label:
    /// yes / no, Llama Guard's unsafe / safe, Qwen3Guard's Unsafe / Safe with Controversial
    /// between them, gpt-oss-safeguard's 1 / 0.
    labels: YesNoTokens,
    options: EvaluatorOptions,
    /// Made at the first run; `None` inside while none is made.
    prompt_cache: Mutex<Option<PromptCache>>,
    counters: PromptCounters,
}

impl std::fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator").field("model", &self.model).field("format", &self.default_format()).finish()
    }
}

impl Evaluator {
    pub fn new(path: impl AsRef<Path>, options: EvaluatorOptions) -> Result<Evaluator, GuardError> {
        check_device(options.device)?;
        Evaluator::from_model(Arc::new(Model::load_on(path, options.device)?), options)
    }

    pub fn from_model(model: Arc<Model>, options: EvaluatorOptions) -> Result<Evaluator, GuardError> {
        check_device(options.device)?;
        if model.device() != options.device {
            return Err(GuardError::Device(format!("the model is loaded on {}, not on {}", model.device(), options.device)));
        }
        if model.is_encoder() {
            return Err(GuardError::Model(ModelError::BadBatch("an encoder model cannot be a guard".into())));
        }
        let file = model.file();
        let names: Vec<&str> = ["general.name", "general.basename", "general.finetune"].iter().filter_map(|k| file.get_str(k)).collect();
        let family = options.family.or_else(|| family::detect(file.get_str("tokenizer.chat_template"), &names));
        let prompts = match family {
            Some(f @ (GuardFamily::LlamaGuard | GuardFamily::ShieldGemma | GuardFamily::Qwen3Guard | GuardFamily::GptOssSafeguard)) => {
                Prompts::Family(FamilyPrompter::from_model(&model, f)?)
            }
            Some(GuardFamily::Generic) => Prompts::Granite(Prompter::generic(ChatTemplate::from_model(&model)?)),
            Some(GuardFamily::GraniteGuardian) => match Prompter::from_model(&model)? {
                p if p.is_guardian() => Prompts::Granite(p),
                // named Granite Guardian by the caller, not by the file: the built-in renderer
                _ => Prompts::Granite(Prompter::builtin(GuardFormat::V3_0)),
            },
            None => Prompts::Granite(Prompter::from_model(&model)?),
        };
        let prompts = match prompts {
            Prompts::Granite(p) => Prompts::Granite(p.with_generic_prompt(options.generic_prompt)),
            other => other,
        };
        let tok = model.tokenizer();
        let labels = match &prompts {
            Prompts::Family(f) => match f.family() {
                GuardFamily::LlamaGuard => YesNoTokens::words(tok, llama_guard::LABELS.0, llama_guard::LABELS.1),
                GuardFamily::Qwen3Guard => {
                    let (yes, no, between) = qwen3guard::LABELS;
                    YesNoTokens::words(tok, yes, no).with_between(tok, between)
                }
                GuardFamily::GptOssSafeguard => YesNoTokens::words(tok, safeguard::LABELS.0, safeguard::LABELS.1),
                _ => YesNoTokens::of(tok),
            },
            Prompts::Granite(_) => YesNoTokens::of(tok),
        };
        Ok(Evaluator { model, prompts, labels, options, prompt_cache: Mutex::new(None), counters: PromptCounters::default() })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The Granite Guardian / generic prompter; `None` for a family with its own module.
    pub fn prompter(&self) -> Option<&Prompter> {
        match &self.prompts {
            Prompts::Granite(p) => Some(p),
            Prompts::Family(_) => None,
        }
    }

    /// The model's guard family.
    pub fn family(&self) -> GuardFamily {
        match &self.prompts {
            Prompts::Granite(p) if p.is_guardian() => GuardFamily::GraniteGuardian,
            Prompts::Granite(_) => GuardFamily::Generic,
            Prompts::Family(f) => f.family(),
        }
    }

    /// How a request was judged, as the audit fields say it: the Granite Guardian format (the
    /// request's, else the default), `generic/<variant>`, or the family's name.
    pub fn format_label(&self, requested: Option<&str>) -> String {
        match &self.prompts {
            Prompts::Granite(p) if p.is_guardian() => match requested.map(GuardFormat::parse) {
                Some(Ok(f)) => f.to_string(),
                _ => self.default_format().to_string(),
            },
            Prompts::Granite(p) => format!("generic/{}", p.generic_prompt().name()),
            Prompts::Family(f) => f.family().name().to_string(),
        }
    }

    /// What the prompts run so far found in the prompt cache.
    pub fn prompt_stats(&self) -> PromptStats {
        self.counters.snapshot()
    }

    /// Bytes the prompt cache holds between runs.
    pub fn prompt_cache_bytes(&self) -> usize {
        self.prompt_cache.lock().map(|c| c.as_ref().map_or(0, PromptCache::bytes)).unwrap_or(0)
    }

    /// The format of a request that names none.
    pub fn default_format(&self) -> GuardFormat {
        let detected = match &self.prompts {
            Prompts::Granite(p) => p.default_format(),
            Prompts::Family(_) => GuardFormat::V3_0,
        };
        self.options.default_format.unwrap_or(detected)
    }

    pub fn evaluate(&self, request: &GuardRequest) -> Result<GuardResult, GuardError> {
        self.evaluate_cancellable(request, &AtomicBool::new(false))
    }

    /// The adapters a request's prompts run with.
    fn lora_of<'r>(&'r self, request: &'r GuardRequest) -> &'r [LoraScale] {
        request.lora.as_deref().unwrap_or(self.model.default_lora())
    }

    /// The prompts a request is judged with, in the order of its verdicts.
    pub fn prompts(&self, request: &GuardRequest) -> Result<Vec<GuardPrompt>, GuardError> {
        Ok(self.plan(request)?.prompts)
    }

    /// [`Evaluator::evaluate`] that stops (with [`GuardError::Cancelled`]) once `cancel` is set.
    pub fn evaluate_cancellable(&self, request: &GuardRequest, cancel: &AtomicBool) -> Result<GuardResult, GuardError> {
        let plan = self.plan(request)?;
        let verdicts = self.run(vec![(plan.prompts, self.lora_of(request))], cancel)?.pop().unwrap_or_default();
        Ok(decide(request, plan.names, verdicts))
    }

    /// The 9 harm risks (for a family with categories of its own, the risks they stand for);
    /// `highest_risk` is the unsafe verdict with the highest confidence (ties to the earlier
    /// category). The request names no risks of its own.
    pub fn scan(&self, input: &GuardInput) -> Result<ScanResult, GuardError> {
        self.scan_cancellable(&GuardRequest::new::<&str>(input.clone(), &[]), &AtomicBool::new(false))
    }

    pub fn scan_cancellable(&self, request: &GuardRequest, cancel: &AtomicBool) -> Result<ScanResult, GuardError> {
        if !request.risks.is_empty() || !request.customs.is_empty() {
            return Err(GuardError::ScanRisks);
        }
        let GuardResult { flagged, verdicts } = self.evaluate_cancellable(request, cancel)?;
        let highest_risk = highest_risk(&verdicts);
        Ok(ScanResult { flagged, verdicts, highest_risk })
    }

    /// Every request judged (their prompts prefilled and decoded in the same passes), results
    /// in request order; each request decided by its own thresholds.
    pub fn evaluate_batch(&self, requests: &[GuardRequest]) -> Result<Vec<GuardResult>, GuardError> {
        self.evaluate_batch_cancellable(requests, &AtomicBool::new(false))
    }

    pub fn evaluate_batch_cancellable(&self, requests: &[GuardRequest], cancel: &AtomicBool) -> Result<Vec<GuardResult>, GuardError> {
        if requests.is_empty() {
            return Err(GuardError::BatchEmpty);
        }
        if requests.len() > MAX_BATCH {
            return Err(GuardError::BatchTooLarge { max: MAX_BATCH });
        }
        let plans: Vec<Plan> = requests.iter().map(|r| self.plan(r)).collect::<Result<_, _>>()?;
        let mut results = Vec::with_capacity(requests.len());
        let mut plans = plans.into_iter().zip(requests).peekable();
        while plans.peek().is_some() {
            // whole requests, up to MAX_SEQS_PER_PASS prompts (at least one request)
            let (mut groups, mut decided) = (Vec::new(), Vec::new());
            let mut seqs = 0;
            while let Some((plan, _)) = plans.peek() {
                if !groups.is_empty() && seqs + plan.prompts.len() > MAX_SEQS_PER_PASS {
                    break;
                }
                seqs += plan.prompts.len();
                let (plan, request) = plans.next().expect("peeked");
                groups.push((plan.prompts, self.lora_of(request)));
                decided.push((plan.names, request));
            }
            for (verdicts, (names, request)) in self.run(groups, cancel)?.into_iter().zip(decided) {
                results.push(decide(request, names, verdicts));
            }
        }
        Ok(results)
    }

    /// A request's prompts in the order of its verdicts: its built-in risks through the
    /// request's checks (guard.md §2; with only custom risks, the checks of a harm risk), its
    /// custom risks each in its place in `risks`.
    fn plan(&self, request: &GuardRequest) -> Result<Plan, GuardError> {
        let custom = |name: &str| request.customs.iter().find(|c| c.name == name);
        if let Some(c) = request.customs.iter().find(|c| !request.risks.is_empty() && !request.risks.contains(&c.name)) {
            return Err(GuardError::CustomRisk(format!("{} is defined but not in risks: name it there to judge it", c.name)));
        }
        let prompter = match &self.prompts {
            Prompts::Granite(p) => p,
            Prompts::Family(f) => return family_plan(f, request),
        };
        let builtin: Vec<&str> = request.risks.iter().map(String::as_str).filter(|r| custom(r).is_none()).collect();
        let only_custom = builtin.is_empty() && !request.customs.is_empty();
        let named: &[&str] = if only_custom { &["harm"] } else { &builtin };
        let checked = check_request(&request.input, named, request.format.as_deref(), request.think, self.default_format())?;
        let mut plan = Plan { prompts: Vec::new(), names: Vec::new() };
        let mut add = |prompt: GuardPrompt, name: RiskName| {
            if !plan.names.contains(&name) {
                plan.prompts.push(prompt);
                plan.names.push(name);
            }
        };
        let input = &request.input;
        if request.risks.is_empty() {
            for c in &request.customs {
                add(prompter.render_custom(checked.format, c, input, checked.think)?, RiskName::Custom(c.name.clone()));
            }
            if !only_custom {
                for &r in &checked.risks {
                    add(prompter.render(checked.format, r, input, checked.think)?, r.into());
                }
            }
            return Ok(plan);
        }
        for name in &request.risks {
            match (custom(name), Risk::from_name(name)) {
                (Some(c), _) => add(prompter.render_custom(checked.format, c, input, checked.think)?, RiskName::Custom(c.name.clone())),
                (None, Some(r)) => add(prompter.render(checked.format, r, input, checked.think)?, r.into()),
                (None, None) => return Err(GuardError::InvalidRisk(name.clone())),
            }
        }
        Ok(plan)
    }

    /// Runs groups of prompts (a group = one input's prompts, sharing a prefix, and the
    /// adapters they run with) and returns each group's verdicts in prompt order.
    fn run(&self, groups: Vec<(Vec<GuardPrompt>, &[LoraScale])>, cancel: &AtomicBool) -> Result<Vec<Vec<Verdict>>, GuardError> {
        let tok = self.model.tokenizer();
        let prompts: Vec<(usize, GuardPrompt, Vec<TokenId>, LoraSchedule)> = groups
            .into_iter()
            .enumerate()
            .flat_map(|(g, (ps, lora))| ps.into_iter().map(move |p| (g, p, lora)))
            .map(|(g, p, lora)| {
                let ids = tokenize_rendered(tok, &p.text);
                let lora = self.model.lora_schedule(lora, &ids);
                (g, p, ids, lora)
            })
            .collect();
        let n_groups = prompts.iter().map(|p| p.0 + 1).max().unwrap_or(0);
        let budget = |p: &GuardPrompt| match (&p.reader, p.format) {
            (Reader::LlamaGuard(_), _) => llama_guard::MAX_TOKENS,
            (Reader::Qwen3Guard(_), _) => qwen3guard::MAX_TOKENS,
            // it reasons before it answers
            (Reader::Safeguard, _) => self.options.max_tokens_think,
            (Reader::Guardian, GuardFormat::V3_0) => 1,
            (Reader::Guardian, GuardFormat::V3_2) => self.options.max_tokens_3_2,
            (Reader::Guardian, GuardFormat::V3_3) if p.think => self.options.max_tokens_think,
            (Reader::Guardian, GuardFormat::V3_3) => self.options.max_tokens_3_3,
        };
        let n_ctx = prompts.iter().map(|(_, p, ids, _)| ids.len() + budget(p)).max().unwrap_or(1);
        let mut seqs: Vec<LockstepSeq> = prompts
            .iter()
            .map(|(_, p, ids, lora)| {
                let decoder = SequenceDecoder::new(tok, ids, GenerateParams::greedy(budget(p)))?;
                Ok(LockstepSeq { decoder, tokens: ids.clone(), lora: lora.clone() })
            })
            .collect::<Result<_, GuardError>>()?;
        let groups: Vec<Vec<usize>> = (0..n_groups).map(|g| (0..prompts.len()).filter(|&i| prompts[i].0 == g).collect()).collect();
        let mut masses: Vec<Vec<(f64, f64)>> = vec![Vec::new(); prompts.len()];
        if cancel.load(Ordering::Relaxed) {
            return Err(GuardError::Cancelled);
        }

        // the prompt cache when it is free and long enough, else a cache for this run alone
        let ids: Vec<(&[TokenId], &LoraSchedule)> = prompts.iter().map(|(_, _, ids, lora)| (ids.as_slice(), lora)).collect();
        let mut cache = self.lock_prompt_cache(n_ctx);
        let decoded = match cache.as_deref_mut().and_then(Option::as_mut) {
            Some(cache) => {
                let held = cache.seed(&ids).map_err(|e| GuardError::from(ModelError::from(e)))?;
                self.counters.record(ids.iter().map(|p| p.0.len()), &held);
                let decoded = self.decode(cache.kv(), &mut seqs, &groups, &mut masses, cancel);
                match decoded {
                    Ok(()) => cache.keep(&ids),
                    Err(_) => cache.release_run(ids.len()),
                }
                decoded
            }
            None => {
                self.counters.record(ids.iter().map(|p| p.0.len()), &vec![0; ids.len()]);
                let mut kv = self.model.new_kv_cache(self.options.kv_type, n_ctx);
                self.decode(&mut kv, &mut seqs, &groups, &mut masses, cancel)
            }
        };
        drop(cache);
        decoded?;

        let mut out: Vec<Vec<Verdict>> = vec![Vec::new(); n_groups];
        for (((g, prompt, _, _), seq), masses) in prompts.into_iter().zip(seqs).zip(masses) {
            out[g].extend(self.read_verdicts(&prompt, &seq.decoder, &masses)?);
        }
        Ok(out)
    }

    /// Each input's prompts share their common start: computed once (from what the cache holds
    /// of it), then forked; all sequences decode greedily in lockstep, keeping the yes/no mass of
    /// every step.
    fn decode(
        &self,
        kv: &mut KvCache,
        seqs: &mut [LockstepSeq],
        groups: &[Vec<usize>],
        masses: &mut [Vec<(f64, f64)>],
        cancel: &AtomicBool,
    ) -> Result<(), GuardError> {
        let cancelled = |e| match e {
            GenerateError::Cancelled => GuardError::Cancelled,
            e => GuardError::from(e),
        };
        let spared = prefill_shared_prefixes(&self.model, kv, seqs, groups).map_err(cancelled)?;
        self.counters.record_shared(spared);
        decode_lockstep(&self.model, kv, seqs, cancel, |i, row| masses[i].push(self.labels.probabilities(row))).map_err(cancelled)
    }

    /// The prompt cache (made at the first call), unless caching is off, another evaluation
    /// holds it, or its sequences are shorter than `n_ctx` positions.
    fn lock_prompt_cache(&self, n_ctx: usize) -> Option<std::sync::MutexGuard<'_, Option<PromptCache>>> {
        if self.options.prompt_cache_bytes == 0 {
            return None;
        }
        let mut cache = match self.prompt_cache.try_lock() {
            Ok(cache) => cache,
            // a run that panicked left it: start again from an empty cache
            Err(TryLockError::Poisoned(poisoned)) => {
                let mut cache = poisoned.into_inner();
                *cache = None;
                cache
            }
            Err(TryLockError::WouldBlock) => return None,
        };
        let positions = self.model.config().n_ctx_train.max(n_ctx);
        if cache.is_none() {
            *cache = Some(PromptCache::new(self.model.new_kv_cache(self.options.kv_type, positions), self.options.prompt_cache_bytes));
        }
        match cache.as_mut().is_some_and(|c| c.kv().n_ctx() >= n_ctx) {
            true => Some(cache),
            false => None,
        }
    }

    /// The verdicts of one finished sequence (one, or one per risk of a Llama Guard or Qwen3Guard
    /// answer); the label words' masses are read at the answer's first label token.
    fn read_verdicts(&self, prompt: &GuardPrompt, decoder: &SequenceDecoder, masses: &[(f64, f64)]) -> Result<Vec<Verdict>, GuardError> {
        let first_label = || decoder.tokens().iter().position(|&t| self.labels.contains(t)).and_then(|step| masses.get(step).copied());
        match &prompt.reader {
            Reader::Guardian => Ok(vec![self.read_verdict(prompt, decoder, masses)?]),
            Reader::LlamaGuard(risks) => llama_guard::verdicts(risks, decoder.text(), first_label()),
            Reader::Qwen3Guard(risks) => qwen3guard::verdicts(risks, decoder.text(), first_label()),
            Reader::Safeguard => {
                let (text, answer) = safeguard::spelled(self.model.tokenizer(), decoder.tokens());
                Ok(vec![safeguard::verdict(prompt.risk, &text, answer.and_then(|step| masses.get(step).copied()))?])
            }
        }
    }

    /// A Granite Guardian (or generic) verdict, by the prompt's format.
    fn read_verdict(&self, prompt: &GuardPrompt, decoder: &SequenceDecoder, masses: &[(f64, f64)]) -> Result<Verdict, GuardError> {
        let at = |step: usize| masses.get(step).and_then(|&(y, n)| risk_probability(y, n));
        match prompt.format {
            GuardFormat::V3_0 => {
                let (y, n) = masses.first().copied().unwrap_or((0.0, 0.0));
                verdict_3_0(prompt.risk, y, n)
            }
            GuardFormat::V3_2 => verdict_3_2(prompt.risk, decoder.text(), at(0)),
            GuardFormat::V3_3 => {
                let label = decoder.tokens().iter().rposition(|&t| self.labels.contains(t));
                verdict_3_3(prompt.risk, decoder.text(), label.and_then(at))
            }
        }
    }
}

/// A request to a family with its own module: its `format` may only name the family.
fn family_plan(prompter: &FamilyPrompter, request: &GuardRequest) -> Result<Plan, GuardError> {
    let family = prompter.family();
    if let Some(f) = request.format.as_deref().filter(|f| *f != family.name()) {
        return Err(GuardError::FamilyFormat { format: f.to_string(), family });
    }
    let mut plan = Plan { prompts: Vec::new(), names: Vec::new() };
    for (prompt, names) in prompter.render(&request.input, &request.risks, &request.customs, request.think)? {
        plan.prompts.push(prompt);
        plan.names.extend(names);
    }
    Ok(plan)
}

/// The request's final verdicts: each read verdict named by its risk, the thresholds applied.
fn decide(request: &GuardRequest, names: Vec<RiskName>, verdicts: Vec<Verdict>) -> GuardResult {
    let mut verdicts: Vec<Verdict> = verdicts.into_iter().zip(names).map(|(v, name)| v.named(name)).collect();
    let flagged = request.thresholds.apply(&mut verdicts);
    GuardResult { flagged, verdicts }
}

/// Among unsafe verdicts of built-in risks the highest confidence, ties to the earlier category.
pub fn highest_risk(verdicts: &[Verdict]) -> Option<Risk> {
    verdicts
        .iter()
        .filter(|v| v.is_unsafe)
        .filter_map(|v| v.risk.builtin().map(|r| (r, v.confidence)))
        .min_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)))
        .map(|(r, _)| r)
}

/// A device this build lacks is refused clearly, before anything is loaded.
fn check_device(device: Device) -> Result<(), GuardError> {
    match device.is_built() {
        true => Ok(()),
        false => Err(GuardError::Device(BackendError::NotBuilt(device).to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(risk: Risk, is_unsafe: bool, confidence: f32) -> Verdict {
        Verdict { risk: risk.into(), is_unsafe, confidence, reasoning: String::new(), risk_probability: None }
    }

    #[test]
    fn highest_risk_prefers_confidence_then_category_order() {
        let vs = [v(Risk::Harm, true, 0.9), v(Risk::Violence, true, 0.95), v(Risk::Profanity, false, 0.99)];
        assert_eq!(highest_risk(&vs), Some(Risk::Violence));
        let vs = [v(Risk::Violence, true, 0.9), v(Risk::Harm, true, 0.9)];
        assert_eq!(highest_risk(&vs), Some(Risk::Harm));
        assert_eq!(highest_risk(&[v(Risk::Harm, false, 0.9)]), None);
    }

    #[test]
    fn devices() {
        assert!(check_device(Device::Cpu).is_ok());
        // a build with CUDA knows whether a GPU is there only when the model is loaded on it
        let checked = check_device(Device::Cuda(0));
        assert_eq!(checked.is_ok(), cfg!(feature = "cuda"), "{checked:?}");
        if let Err(e) = checked {
            assert!(e.to_string().contains("no CUDA"), "{e}");
        }
    }
}
