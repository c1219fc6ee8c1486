//! The guard (content-safety evaluation with IBM Granite Guardian 3.0 / 3.2 / 3.3, the other
//! guard families of `family` (Llama Guard 3, ShieldGemma, Qwen3Guard, gpt-oss-safeguard), or
//! any chat model): its vocabulary and request checks (`risks`), the models' protocol texts
//! (`definitions`), prompt rendering through the model's template or the built-in renderers
//! (`prompt`, `builtin`, `family`). The contract is `spec/guard.md`; decoding and verdicts
//! (`verdict`) and the `Evaluator` build on `Prompter`, `FamilyPrompter` and `GuardPrompt`.
//!
//! A request goes: [`check_request`] (the contract's 400 errors, the format resolved) ->
//! [`Prompter::render_all`] (one [`GuardPrompt`] per risk) -> tokenize each prompt
//! (`chat::tokenize_rendered`) -> the prompts' common start prefilled once and forked, every
//! suffix decoded in one lockstep batch (`generate::{prefill_shared_prefixes, decode_lockstep}`),
//! each prompt starting from the longest start of it that the evaluator's `prompt_cache` holds
//! from earlier requests.

pub mod conversation;
pub mod custom;
mod definitions;
pub mod error;
pub mod evaluator;
pub mod family;
pub mod moderation;
pub mod policy;
pub mod presets;
pub mod prompt;
pub mod prompt_cache;
pub mod risks;
pub mod verdict;

pub use custom::CustomRisk;
pub use error::GuardError;
pub use evaluator::{Evaluator, EvaluatorOptions, GuardRequest, GuardResult, ScanResult, DEFAULT_PROMPT_CACHE_BYTES, MAX_BATCH};
pub use family::generic::GenericPrompt;
pub use family::granite_guardian::{NativeRequest, Prompter};
pub use family::GuardFamily;
pub use policy::Thresholds;
pub use presets::{Policies, Policy, PolicyFileError};
pub use prompt::{GuardPrompt, PromptPath, Reader};
pub use prompt_cache::PromptStats;
pub use risks::{
    check_request, detect_format, is_guardian_template, parse_risks, CheckedRequest, Detection, GuardFormat, GuardInput, Judged, Risk,
    RiskGroup,
};
pub use verdict::{RiskName, Verdict, YesNoTokens};
