//! The guard evaluator (guard.md §4, §5, §7): checks a request, renders one prompt per risk,
//! computes the prompts' shared prefix once per input (KV fork), then runs every suffix of every
//! input as one batch and decodes all of them in lockstep (greedy), reading the verdicts. The
//! prompts stay in the evaluator's prompt cache, where later prompts find their common start.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use serde::Serialize;

use super::custom::{CustomRisk, CustomVerdict};
use super::prompt_cache::{PromptCache, PromptCounters, PromptStats};
use super::verdict::{risk_probability, verdict_3_0, verdict_3_2, verdict_3_3, Verdict, YesNoTokens};
use super::{check_request, GenericPrompt, GuardError, GuardFormat, GuardInput, GuardPrompt, Prompter, Risk};
use crate::backend::{BackendError, Device};
use crate::chat::tokenize_rendered;
use crate::generate::{decode_lockstep, prefill_shared_prefixes, GenerateError, GenerateParams, LockstepSeq, SequenceDecoder};
use crate::kv_cache::{KvCache, KvType};
use crate::model::{Model, ModelError};
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
            prompt_cache_bytes: DEFAULT_PROMPT_CACHE_BYTES,
        }
    }
}

/// One evaluation: an input and the risks to judge it for.
#[derive(Clone, Debug, Default)]
pub struct GuardRequest {
    pub input: GuardInput,
    /// Risk names; empty = the 9 harm risks.
    pub risks: Vec<String>,
    pub format: Option<String>,
    pub think: bool,
}

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

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchItem {
    pub index: usize,
    pub flagged: bool,
    pub verdicts: Vec<Verdict>,
}

/// A loaded guard model and how to prompt it.
pub struct Evaluator {
    model: Arc<Model>,
    prompter: Prompter,
    yes_no: YesNoTokens,
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
        let prompter = Prompter::from_model(&model)?.with_generic_prompt(options.generic_prompt);
        let yes_no = YesNoTokens::of(model.tokenizer());
        Ok(Evaluator { model, prompter, yes_no, options, prompt_cache: Mutex::new(None), counters: PromptCounters::default() })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn prompter(&self) -> &Prompter {
        &self.prompter
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
        self.options.default_format.unwrap_or_else(|| self.prompter.default_format())
    }

    pub fn evaluate(&self, request: &GuardRequest) -> Result<GuardResult, GuardError> {
        self.evaluate_cancellable(request, &AtomicBool::new(false))
    }

    /// The prompts a request is judged with, one per risk (empty risks: the 9 harm risks).
    pub fn prompts(&self, request: &GuardRequest) -> Result<Vec<GuardPrompt>, GuardError> {
        let checked = check_request(&request.input, &request.risks, request.format.as_deref(), request.think, self.default_format())?;
        self.prompter.render_all(&checked, &request.input)
    }

    /// [`Evaluator::evaluate`] that stops (with [`GuardError::Cancelled`]) once `cancel` is set.
    pub fn evaluate_cancellable(&self, request: &GuardRequest, cancel: &AtomicBool) -> Result<GuardResult, GuardError> {
        let prompts = self.prompts(request)?;
        let verdicts = self.run(vec![prompts], cancel)?.pop().unwrap_or_default();
        Ok(GuardResult { flagged: verdicts.iter().any(|v| v.is_unsafe), verdicts })
    }

    /// The request's risks and custom risks judged together (one batch; the prompts share the
    /// conversation): the built-in verdicts, and the custom ones in the order given. With custom
    /// risks and no `risks`, only the custom risks are judged (not the 9 harm risks).
    pub fn evaluate_with_custom(
        &self,
        request: &GuardRequest,
        customs: &[CustomRisk],
        cancel: &AtomicBool,
    ) -> Result<(GuardResult, Vec<CustomVerdict>), GuardError> {
        if customs.is_empty() {
            return Ok((self.evaluate_cancellable(request, cancel)?, Vec::new()));
        }
        // the request's checks (input, format, think) apply whatever risks it names
        let only_custom = request.risks.is_empty();
        let stand_in = ["harm".to_string()];
        let named: &[String] = if only_custom { &stand_in } else { &request.risks };
        let checked = check_request(&request.input, named, request.format.as_deref(), request.think, self.default_format())?;
        let mut prompts = if only_custom { Vec::new() } else { self.prompter.render_all(&checked, &request.input)? };
        let builtin = prompts.len();
        for c in customs {
            prompts.push(self.prompter.render_custom(checked.format, c, &request.input, checked.think)?);
        }
        let mut verdicts = self.run(vec![prompts], cancel)?.pop().unwrap_or_default();
        let custom: Vec<CustomVerdict> =
            verdicts.split_off(builtin).into_iter().zip(customs).map(|(v, c)| CustomVerdict::named(&c.name, v)).collect();
        let flagged = verdicts.iter().any(|v| v.is_unsafe) || custom.iter().any(|v| v.is_unsafe);
        Ok((GuardResult { flagged, verdicts }, custom))
    }

    /// The 9 harm risks; `highest_risk` is the unsafe verdict with the highest confidence (ties to
    /// the earlier category).
    pub fn scan(&self, input: &GuardInput) -> Result<ScanResult, GuardError> {
        self.scan_cancellable(input, None, false, &AtomicBool::new(false))
    }

    pub fn scan_cancellable(
        &self,
        input: &GuardInput,
        format: Option<&str>,
        think: bool,
        cancel: &AtomicBool,
    ) -> Result<ScanResult, GuardError> {
        let request = GuardRequest { input: input.clone(), risks: Vec::new(), format: format.map(String::from), think };
        let GuardResult { flagged, verdicts } = self.evaluate_cancellable(&request, cancel)?;
        let highest_risk = highest_risk(&verdicts);
        Ok(ScanResult { flagged, verdicts, highest_risk })
    }

    /// Every input judged for `risks` (empty: the 9 harm risks), results in input order.
    pub fn evaluate_batch<S: AsRef<str>>(&self, inputs: &[GuardInput], risks: &[S]) -> Result<Vec<BatchItem>, GuardError> {
        self.evaluate_batch_cancellable(inputs, risks, &AtomicBool::new(false))
    }

    pub fn evaluate_batch_cancellable<S: AsRef<str>>(
        &self,
        inputs: &[GuardInput],
        risks: &[S],
        cancel: &AtomicBool,
    ) -> Result<Vec<BatchItem>, GuardError> {
        if inputs.is_empty() {
            return Err(GuardError::BatchEmpty);
        }
        if inputs.len() > MAX_BATCH {
            return Err(GuardError::BatchTooLarge { max: MAX_BATCH });
        }
        let mut groups = Vec::with_capacity(inputs.len());
        for input in inputs {
            let checked = check_request(input, risks, None, false, self.default_format())?;
            groups.push(self.prompter.render_all(&checked, input)?);
        }
        let per_pass = (MAX_SEQS_PER_PASS / groups[0].len().max(1)).max(1);
        let mut items = Vec::with_capacity(inputs.len());
        let mut iter = groups.into_iter().peekable();
        while iter.peek().is_some() {
            let chunk: Vec<Vec<GuardPrompt>> = iter.by_ref().take(per_pass).collect();
            for verdicts in self.run(chunk, cancel)? {
                items.push(BatchItem { index: items.len(), flagged: verdicts.iter().any(|v| v.is_unsafe), verdicts });
            }
        }
        Ok(items)
    }

    /// Runs groups of prompts (a group = one input's prompts, sharing a prefix) and returns
    /// each group's verdicts in prompt order.
    fn run(&self, groups: Vec<Vec<GuardPrompt>>, cancel: &AtomicBool) -> Result<Vec<Vec<Verdict>>, GuardError> {
        let tok = self.model.tokenizer();
        let prompts: Vec<(usize, GuardPrompt, Vec<TokenId>)> = groups
            .into_iter()
            .enumerate()
            .flat_map(|(g, ps)| ps.into_iter().map(move |p| (g, p)))
            .map(|(g, p)| {
                let ids = tokenize_rendered(tok, &p.text);
                (g, p, ids)
            })
            .collect();
        let n_groups = prompts.iter().map(|p| p.0 + 1).max().unwrap_or(0);
        let budget = |p: &GuardPrompt| match p.format {
            GuardFormat::V3_0 => 1,
            GuardFormat::V3_2 => self.options.max_tokens_3_2,
            GuardFormat::V3_3 if p.think => self.options.max_tokens_think,
            GuardFormat::V3_3 => self.options.max_tokens_3_3,
        };
        let n_ctx = prompts.iter().map(|(_, p, ids)| ids.len() + budget(p)).max().unwrap_or(1);
        let mut seqs: Vec<LockstepSeq> = prompts
            .iter()
            .map(|(_, p, ids)| {
                let decoder = SequenceDecoder::new(tok, ids, GenerateParams::greedy(budget(p)))?;
                Ok(LockstepSeq { decoder, tokens: ids.clone() })
            })
            .collect::<Result<_, GuardError>>()?;
        let groups: Vec<Vec<usize>> = (0..n_groups).map(|g| (0..prompts.len()).filter(|&i| prompts[i].0 == g).collect()).collect();
        let mut masses: Vec<Vec<(f64, f64)>> = vec![Vec::new(); prompts.len()];
        if cancel.load(Ordering::Relaxed) {
            return Err(GuardError::Cancelled);
        }

        // the prompt cache when it is free and long enough, else a cache for this run alone
        let ids: Vec<&[TokenId]> = prompts.iter().map(|(_, _, ids)| ids.as_slice()).collect();
        let mut cache = self.lock_prompt_cache(n_ctx);
        let decoded = match cache.as_deref_mut().and_then(Option::as_mut) {
            Some(cache) => {
                let held = cache.seed(&ids).map_err(|e| GuardError::from(ModelError::from(e)))?;
                self.counters.record(ids.iter().map(|p| p.len()), &held);
                let decoded = self.decode(cache.kv(), &mut seqs, &groups, &mut masses, cancel);
                match decoded {
                    Ok(()) => cache.keep(&ids),
                    Err(_) => cache.release_run(ids.len()),
                }
                decoded
            }
            None => {
                self.counters.record(ids.iter().map(|p| p.len()), &vec![0; ids.len()]);
                let mut kv = self.model.new_kv_cache(self.options.kv_type, n_ctx);
                self.decode(&mut kv, &mut seqs, &groups, &mut masses, cancel)
            }
        };
        drop(cache);
        decoded?;

        let mut out: Vec<Vec<Verdict>> = vec![Vec::new(); n_groups];
        for (((g, prompt, _), seq), masses) in prompts.into_iter().zip(seqs).zip(masses) {
            out[g].push(self.read_verdict(&prompt, &seq.decoder, &masses)?);
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
        decode_lockstep(&self.model, kv, seqs, cancel, |i, row| masses[i].push(self.yes_no.probabilities(row))).map_err(cancelled)
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

    /// The verdict of one finished sequence; the risk probability is read at the label token.
    fn read_verdict(&self, prompt: &GuardPrompt, decoder: &SequenceDecoder, masses: &[(f64, f64)]) -> Result<Verdict, GuardError> {
        let at = |step: usize| masses.get(step).and_then(|&(y, n)| risk_probability(y, n));
        match prompt.format {
            GuardFormat::V3_0 => {
                let (y, n) = masses.first().copied().unwrap_or((0.0, 0.0));
                verdict_3_0(prompt.risk, y, n)
            }
            GuardFormat::V3_2 => verdict_3_2(prompt.risk, decoder.text(), at(0)),
            GuardFormat::V3_3 => {
                let label = decoder.tokens().iter().rposition(|&t| self.yes_no.contains(t));
                verdict_3_3(prompt.risk, decoder.text(), label.and_then(at))
            }
        }
    }
}

/// Among unsafe verdicts the highest confidence, ties to the earlier category.
pub fn highest_risk(verdicts: &[Verdict]) -> Option<Risk> {
    verdicts.iter().filter(|v| v.is_unsafe).min_by(|a, b| b.confidence.total_cmp(&a.confidence).then(a.risk.cmp(&b.risk))).map(|v| v.risk)
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
        Verdict { risk, is_unsafe, confidence, reasoning: String::new(), risk_probability: None }
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
