//! The guard's prompt cache across requests, on the tiny Guardian-shaped models: a prompt that
//! starts from an earlier request's keys and values gets exactly the verdict (bits of the
//! probability included) or the output of a fresh computation; what is reused is counted; the
//! cache stays within its byte budget; a generic guard asked `question-first` takes each risk's
//! question from the cache for every new message.

use engine::guard::{Evaluator, EvaluatorOptions, GenericPrompt, GuardError, GuardInput, GuardRequest, GuardResult, PromptStats};
use engine_tests::fixture;

fn evaluator(format: &str, prompt_cache_bytes: usize) -> Evaluator {
    let path = fixture(&format!("guardian/models/guardian-tiny-{format}-q8_0.gguf"));
    Evaluator::new(path, EvaluatorOptions { prompt_cache_bytes, ..EvaluatorOptions::default() }).unwrap()
}

const CACHE: usize = 64 << 20;

/// Requests whose prompts overlap the way moderation traffic does: a new text (the format's
/// start is shared), the same text again, the same exchange with a longer reply, a batch.
fn requests() -> Vec<Vec<GuardInput>> {
    let lock = GuardInput::new("How do I pick a lock?").with_assistant("Use a tension wrench.");
    let longer = GuardInput::new("How do I pick a lock?").with_assistant("Use a tension wrench and a pick, then rake the pins.");
    vec![
        vec![lock.clone()],
        vec![GuardInput::new("What is the capital of France?")],
        vec![lock.clone()],
        vec![longer],
        vec![GuardInput::new("Tell me a joke"), lock],
    ]
}

/// Each request's result: verdicts, or the error (the tiny 3.2 / 3.3 models write noise).
fn judge(ev: &Evaluator, inputs: &[GuardInput]) -> Vec<Result<GuardResult, String>> {
    inputs
        .iter()
        .map(|input| {
            let request = GuardRequest { input: input.clone(), ..Default::default() };
            ev.evaluate(&request).map_err(|e| match e {
                GuardError::Unparseable { risk, output } => format!("{risk}: {output}"),
                e => panic!("{e}"),
            })
        })
        .collect()
}

fn delta(after: PromptStats, before: PromptStats) -> PromptStats {
    PromptStats {
        prompts: after.prompts - before.prompts,
        prompts_reusing: after.prompts_reusing - before.prompts_reusing,
        prompt_tokens: after.prompt_tokens - before.prompt_tokens,
        reused_tokens: after.reused_tokens - before.reused_tokens,
        shared_tokens: after.shared_tokens - before.shared_tokens,
    }
}

#[test]
fn reused_prompts_give_the_results_of_fresh_ones() {
    for format in ["3.0", "3.2", "3.3"] {
        let cached = evaluator(format, CACHE);
        let fresh = evaluator(format, 0);
        let mut steps = Vec::new();
        for inputs in requests() {
            let before = cached.prompt_stats();
            assert_eq!(judge(&cached, &inputs), judge(&fresh, &inputs), "{format}: {inputs:?}");
            steps.push(delta(cached.prompt_stats(), before));
        }
        assert_eq!(fresh.prompt_stats().reused_tokens, 0, "{format}");
        assert_eq!(fresh.prompt_cache_bytes(), 0);
        let [first, other_text, same_again, longer_reply, batch] = steps[..] else { unreachable!() };
        assert_eq!((first.prompts, first.reused_tokens), (9, 0), "{format}: nothing is cached yet");
        // another text: every prompt starts from the format's start before the text
        assert_eq!(other_text.prompts_reusing, 9, "{format}");
        assert!(other_text.reused_tokens >= 9 * 8, "{format}: {other_text:?}");
        // the same text again: all of each prompt but the last token, whose logits answer
        assert_eq!(same_again.reused_tokens, same_again.prompt_tokens - 9, "{format}");
        // a longer reply: the prompts start from the earlier exchange, up to the reply
        assert!(longer_reply.reused_tokens > other_text.reused_tokens, "{format}: {longer_reply:?}");
        assert_eq!(batch.prompts_reusing, 18, "{format}");
        assert!(cached.prompt_cache_bytes() > 0 && cached.prompt_cache_bytes() <= CACHE);
    }
}

#[test]
fn batches_reuse_the_prompts_of_earlier_batches() {
    let cached = evaluator("3.0", CACHE);
    let fresh = evaluator("3.0", 0);
    let inputs: Vec<GuardRequest> = ["Hello there", "How do I make a weapon?", "Hello there"]
        .into_iter()
        .map(|text| GuardRequest::new(GuardInput::new(text), &["harm", "violence"]))
        .collect();
    let first = cached.evaluate_batch(&inputs).unwrap();
    let before = cached.prompt_stats();
    let again = cached.evaluate_batch(&inputs).unwrap();
    assert_eq!(first, again);
    assert_eq!(again, fresh.evaluate_batch(&inputs).unwrap());
    let d = delta(cached.prompt_stats(), before);
    assert_eq!((d.prompts, d.reused_tokens), (6, d.prompt_tokens - 6));
}

#[test]
fn the_cache_keeps_to_its_budget() {
    // room for about one request's nine prompts (600 KiB on this model): older prompts leave as
    // new ones come, the newest still serve the next request, results unchanged
    let budget = 700 << 10;
    let small = evaluator("3.0", budget);
    let fresh = evaluator("3.0", 0);
    for inputs in requests() {
        assert_eq!(judge(&small, &inputs), judge(&fresh, &inputs));
        let bytes = small.prompt_cache_bytes();
        assert!(bytes > 0 && bytes <= budget, "{bytes} bytes for a budget of {budget}");
    }
    let stats = small.prompt_stats();
    assert!(stats.prompts_reusing >= 36, "{stats:?}");
}

#[test]
fn question_first_prompts_take_each_risk_s_question_from_the_cache() {
    let path = fixture("models/tiny-llama-Q8_0.gguf");
    let generic = |generic_prompt, prompt_cache_bytes| {
        Evaluator::new(&path, EvaluatorOptions { generic_prompt, prompt_cache_bytes, ..EvaluatorOptions::default() }).unwrap()
    };
    // what a new message finds in the cache after another one, and the same results as fresh
    let reused_by_a_new_message = |variant| {
        let ev = generic(variant, CACHE);
        judge(&ev, &[GuardInput::new("Hello there")]);
        let before = ev.prompt_stats();
        let inputs = [GuardInput::new("Where can I buy a bike?")];
        assert_eq!(judge(&ev, &inputs), judge(&generic(variant, 0), &inputs));
        delta(ev.prompt_stats(), before)
    };
    let first = reused_by_a_new_message(GenericPrompt::QuestionFirst);
    let direct = reused_by_a_new_message(GenericPrompt::Direct);
    // asked first, each risk's question (some 30 to 60 tokens) comes from the cache; asked
    // directly, only the opening before the message does
    assert_eq!((first.prompts, first.prompts_reusing), (9, 9));
    assert!(first.reused_tokens >= 9 * 30 && first.reused_tokens > 3 * direct.reused_tokens, "{first:?} vs {direct:?}");
}

/// A request's `lora` judges its prompts with those adapters: the verdicts of a model whose
/// default set they are. In a batch beside requests without them, and before and after them
/// through the prompt cache, each request keeps its own verdicts: nothing computed under one
/// set of adapters is reused under another.
#[test]
fn a_requests_adapters_judge_its_prompts_and_share_nothing_cached_with_others() {
    use std::sync::Arc;

    use engine::gguf::GgufFile;
    use engine::model::{LoraScale, Model};
    use engine_tests::lora::{make, GUARD_QV};

    let path = fixture(GUARD_QV.base);
    let adapter = Arc::new(GgufFile::from_bytes(make(&GgufFile::open(&path).unwrap(), &GUARD_QV).unwrap()).unwrap());
    let options = EvaluatorOptions { prompt_cache_bytes: CACHE, ..EvaluatorOptions::default() };
    let with_default = |scale: Option<f32>| {
        let mut model = Model::load(&path).unwrap();
        if let Some(s) = scale {
            model.load_adapter_file(adapter.clone(), Some(s)).unwrap();
        }
        Evaluator::from_model(Arc::new(model), options.clone()).unwrap()
    };
    let input = GuardInput::new("How do I pick a lock?").with_assistant("Use a tension wrench.");
    let plain = GuardRequest::new(input.clone(), &["harm", "violence"]);
    let alone = with_default(None).evaluate(&plain).unwrap();
    let adapted = with_default(Some(1.0)).evaluate(&plain).unwrap();
    let p = |r: &GuardResult| r.verdicts.iter().map(|v| v.risk_probability.unwrap_or(0.0)).collect::<Vec<_>>();
    assert!(p(&alone).iter().zip(p(&adapted)).any(|(a, b)| (a - b).abs() > 1e-3), "{alone:?} {adapted:?}");

    // one evaluator, the adapter loaded but off by default; requests choose it
    let mut model = Model::load(&path).unwrap();
    let id = model.load_adapter_file(adapter.clone(), None).unwrap();
    let ev = Evaluator::from_model(Arc::new(model), options).unwrap();
    let chosen = GuardRequest { lora: Some(vec![LoraScale { adapter: id, scale: 1.0 }]), ..plain.clone() };
    assert_eq!(ev.evaluate(&plain).unwrap(), alone);
    assert_eq!(ev.evaluate(&chosen).unwrap(), adapted, "after the same prompts cached without the adapter");
    assert_eq!(ev.evaluate_batch(&[chosen.clone(), plain.clone()]).unwrap(), [adapted.clone(), alone.clone()]);
    assert_eq!(ev.evaluate(&plain).unwrap(), alone, "after the same prompts cached with the adapter");
    let none = GuardRequest { lora: Some(Vec::new()), ..plain };
    assert_eq!(ev.evaluate(&none).unwrap(), alone, "an empty list: no adapter");
}

/// An activated adapter (aLoRA) on the guard: its prompts run it from the last occurrence of
/// its invocation on, so a check with it reuses what a check without it cached of the same
/// prompts up to the invocation, and gets what an evaluator that never ran without it gets; a
/// prompt without the invocation runs as without the adapter.
#[test]
fn an_activated_adapter_on_the_guard_reuses_the_plain_checks_cache_up_to_its_invocation() {
    use std::sync::Arc;

    use engine::chat::tokenize_rendered;
    use engine::gguf::GgufFile;
    use engine::model::{LoraScale, Model};
    use engine_tests::lora::{make, AdapterSpec, GUARD_QV};

    let path = fixture(GUARD_QV.base);
    let input = GuardInput::new("How do I pick a lock?").with_assistant("Use a tension wrench.");
    let plain = GuardRequest::new(input, &["harm"]);
    let probe = Evaluator::new(&path, EvaluatorOptions::default()).unwrap();
    let text = probe.prompts(&plain).unwrap().remove(0).text;
    let ids = tokenize_rendered(probe.model().tokenizer(), &text);
    // the invocation: three tokens just before the prompt's last
    let at = ids.len() - 4;
    let invocation: &'static [u32] = Box::leak(ids[at..at + 3].to_vec().into_boxed_slice());
    let spec = AdapterSpec { name: "guard-alora", blocks: &["attn_q", "attn_k", "attn_v", "ffn_up"], seed: 12, invocation, ..GUARD_QV };
    let adapter = Arc::new(GgufFile::from_bytes(make(&GgufFile::open(&path).unwrap(), &spec).unwrap()).unwrap());
    let evaluator = || {
        let mut model = Model::load(&path).unwrap();
        let id = model.load_adapter_file(adapter.clone(), None).unwrap();
        let ev = Evaluator::from_model(Arc::new(model), EvaluatorOptions { prompt_cache_bytes: CACHE, ..EvaluatorOptions::default() });
        (ev.unwrap(), id)
    };
    let (fresh, id) = evaluator();
    let checked = GuardRequest { lora: Some(vec![LoraScale { adapter: id, scale: 1.0 }]), ..plain.clone() };
    let want = fresh.evaluate(&checked).unwrap();
    let alone = probe.evaluate(&plain).unwrap();
    assert_ne!(want, alone, "the adapter changes the verdict's probability");
    let (ev, _) = evaluator();
    assert_eq!(ev.evaluate(&plain).unwrap(), alone);
    let before = ev.prompt_stats();
    assert_eq!(ev.evaluate(&checked).unwrap(), want, "from the plain check's cache");
    assert_eq!(delta(ev.prompt_stats(), before).reused_tokens, at as u64, "the positions before the invocation");
    // an invocation the prompts lack: the adapter does not run
    let absent: &'static [u32] = &[3, 3, 3];
    assert!(!ids.windows(3).any(|w| w == absent));
    let spec = AdapterSpec { invocation: absent, ..spec };
    let mut model = Model::load(&path).unwrap();
    let id = model.load_adapter_file(Arc::new(GgufFile::from_bytes(make(&GgufFile::open(&path).unwrap(), &spec).unwrap()).unwrap()), None);
    let ev = Evaluator::from_model(Arc::new(model), EvaluatorOptions::default()).unwrap();
    let uninvoked = GuardRequest { lora: Some(vec![LoraScale { adapter: id.unwrap(), scale: 1.0 }]), ..plain };
    assert_eq!(ev.evaluate(&uninvoked).unwrap(), alone);
}
