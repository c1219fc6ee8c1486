//! Generation on the tiny fixture models and the real Qwen model: llama.cpp's greedy tokens, each
//! way an output ends (end-of-generation, budget, full context, stop string, constraint),
//! prefix reuse, seeded sampling, log-probabilities, lockstep batches and speculative decoding.

use engine::generate::{
    generate, generate_batch, propose_batch, Completion, DraftRequest, DraftSettings, FinishReason, GenerateError, GenerateParams,
    Generator, NgramDraft, TokenConstraint, Usage, DRAFT_AFTER_QUIET_STEPS,
};
use engine::kv_cache::{KvCache, KvType, SeqId};
use engine::logprobs::{log_softmax, LOGPROB_FLOOR};
use engine::model::{BatchEntry, Model};
use engine::sampling::{Rng, SamplingParams};
use engine::tokenizer::TokenId;
use engine_tests::{fixture, json_ids, read_json, shared_model};

/// The model and its golden 7-token sequence with its 16 greedy tokens.
fn setup(name: &str) -> (Model, Vec<TokenId>, Vec<TokenId>) {
    let model = Model::load(fixture(&format!("models/{name}.gguf"))).unwrap();
    let golden = read_json(&fixture(&format!("models/golden/{name}.logits.json")));
    let seq = &golden["sequences"][1];
    (model, json_ids(&seq["tokens"]), json_ids(&seq["greedy"]))
}

fn run(model: &Model, prompt: &[TokenId], params: GenerateParams) -> Completion {
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    generate(model, &mut kv, prompt, params).unwrap()
}

/// The text of `ids` as a continuation (no space-prefix removal, unlike `decode`).
fn piece_text(model: &Model, ids: &[TokenId]) -> String {
    let mut d = engine::tokenizer::StreamDecoder::new(false);
    let mut text: String = ids.iter().map(|&id| d.push(model.tokenizer(), id)).collect();
    text.push_str(&d.finish());
    text
}

fn sampled(seed: u64, max_tokens: usize) -> GenerateParams {
    GenerateParams { sampling: SamplingParams { seed, ..SamplingParams::default() }, max_tokens, ..GenerateParams::default() }
}

#[test]
fn greedy_equals_llama_cpp_and_streams_every_token() {
    for name in ["tiny-llama-F32", "tiny-granite-F32", "tiny-llama-Q4_K"] {
        let (model, prompt, greedy) = setup(name);
        let mut kv = model.new_kv_cache(KvType::F32, 512);
        let mut streamed = Vec::new();
        let mut text = String::new();
        let mut generator = Generator::new(&model, &mut kv, 0, &prompt, GenerateParams::greedy(16)).unwrap();
        let mut last_finish = None;
        for event in generator.by_ref() {
            let event = event.unwrap();
            assert!(last_finish.is_none(), "an event after the end");
            streamed.extend(event.token);
            text.push_str(&event.text);
            last_finish = event.finish;
        }
        let usage = generator.usage();
        assert_eq!(streamed, greedy, "{name}");
        assert_eq!(last_finish, Some(FinishReason::Length));
        assert_eq!(text, piece_text(&model, &greedy));
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens), (7, 16, 0));
        // the last token is not fed back
        assert_eq!(kv.seq_len(0), prompt.len() + 15);
    }
}

#[test]
fn max_tokens_ends_with_length_and_zero_runs_nothing() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let c = run(&model, &prompt, GenerateParams::greedy(5));
    assert_eq!((c.tokens.as_slice(), c.finish), (&greedy[..5], FinishReason::Length));

    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let c = generate(&model, &mut kv, &prompt, GenerateParams::greedy(0)).unwrap();
    assert!(c.tokens.is_empty() && c.text.is_empty());
    assert_eq!(c.finish, FinishReason::Length);
    assert_eq!(kv.seq_len(0), 0);
}

/// Allows only `token` at step `at` (counting from 1), anything before.
struct ForceAt {
    at: usize,
    token: TokenId,
    step: usize,
}

impl TokenConstraint for ForceAt {
    fn mask_logits(&mut self, logits: &mut [f32]) -> Result<(), String> {
        self.step += 1;
        if self.step == self.at {
            for (i, l) in logits.iter_mut().enumerate() {
                if i as TokenId != self.token {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }
    fn accept(&mut self, _token: TokenId) -> Result<(), String> {
        Ok(())
    }
    fn is_finished(&self) -> bool {
        false
    }
}

#[test]
fn end_of_generation_ends_the_output_without_being_part_of_it() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let eos = model.tokenizer().eos().unwrap();
    let force = || Some(Box::new(ForceAt { at: 4, token: eos, step: 0 }) as Box<dyn TokenConstraint>);
    let c = run(&model, &prompt, GenerateParams { constraint: force(), ..GenerateParams::greedy(16) });
    assert_eq!(c.tokens, greedy[..3]);
    assert_eq!(c.finish, FinishReason::Stop);
    assert_eq!(c.usage.completion_tokens, 3);

    // not stopping at end-of-generation: it is generated like any other token
    let params = GenerateParams { constraint: force(), stop_at_eog: false, ..GenerateParams::greedy(5) };
    let c = run(&model, &prompt, params);
    assert_eq!(c.tokens[..4], [greedy[0], greedy[1], greedy[2], eos]);
    assert_eq!(c.finish, FinishReason::Length);
}

#[test]
fn a_full_context_ends_with_length() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    // 7 prompt positions + 3 fed outputs fill 10; the fourth output is the last one
    let mut kv = model.new_kv_cache(KvType::F32, 10);
    let c = generate(&model, &mut kv, &prompt, GenerateParams::greedy(16)).unwrap();
    assert_eq!(c.tokens, greedy[..4]);
    assert_eq!(c.finish, FinishReason::Length);

    let mut kv = model.new_kv_cache(KvType::F32, 6);
    let e = generate(&model, &mut kv, &prompt, GenerateParams::greedy(1)).unwrap_err();
    assert!(matches!(e, GenerateError::PromptTooLong { prompt: 7, n_ctx: 6 }), "{e}");
    assert!(matches!(generate(&model, &mut kv, &[], GenerateParams::greedy(1)), Err(GenerateError::EmptyPrompt)));
}

#[test]
fn a_cached_prefix_is_reused_not_recomputed() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    model.forward(&mut kv, &BatchEntry::sequence(3, &prompt[..4], 0, false)).unwrap();
    let c = Generator::new(&model, &mut kv, 3, &prompt, GenerateParams::greedy(8)).unwrap().complete().unwrap();
    assert_eq!(c.tokens, greedy[..8]);
    assert_eq!(c.usage.cached_tokens, 4);

    // a cache holding the whole prompt and more: the last prompt token is run again
    let c = Generator::new(&model, &mut kv, 3, &prompt, GenerateParams::greedy(8)).unwrap();
    assert_eq!(c.usage().cached_tokens, 6);
    assert_eq!(c.complete().unwrap().tokens, greedy[..8]);
}

#[test]
fn a_stop_string_across_tokens_ends_the_text_before_it() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let tok = model.tokenizer();
    // a stop string from the end of one token's text through the start of the next but one
    // (text as released by streaming: byte tokens release nothing until a character completes)
    let mut d = engine::tokenizer::StreamDecoder::new(false);
    let pieces: Vec<String> = greedy.iter().map(|&t| d.push(tok, t)).collect();
    let i = (0..pieces.len() - 2).find(|&i| pieces[i..i + 3].iter().all(|p| !p.is_empty())).unwrap();
    let (a, b, c) = (&pieces[i], &pieces[i + 1], &pieces[i + 2]);
    let stop = format!("{}{b}{}", a.chars().last().unwrap(), c.chars().next().unwrap());
    let full = piece_text(&model, &greedy);
    let before = &full[..full.find(&stop).unwrap()];

    let params = GenerateParams { stop: vec![stop.clone()], ..GenerateParams::greedy(16) };
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let mut streamed = String::new();
    let mut generator = Generator::new(&model, &mut kv, 0, &prompt, params).unwrap();
    for event in generator.by_ref() {
        streamed.push_str(&event.unwrap().text);
    }
    assert_eq!(streamed, before, "stop {stop:?}");
    let c = generator.complete().unwrap();
    assert_eq!(c.text, before);
    assert_eq!(c.finish, FinishReason::Stop);
    // the token that completed the stop string was generated, and counts (unless the stop
    // string occurred earlier already)
    if full.find(&stop) == Some(pieces[..i].concat().len() + a.len() - a.chars().last().unwrap().len_utf8()) {
        assert_eq!(c.tokens, greedy[..i + 3]);
    }
}

#[test]
fn seeded_sampling_is_reproducible() {
    let (model, prompt, _) = setup("tiny-granite-F32");
    let a = run(&model, &prompt, sampled(7, 24));
    let b = run(&model, &prompt, sampled(7, 24));
    assert_eq!(a, b);
    // the high half of the seed matters too
    let c = run(&model, &prompt, sampled(7 | 1 << 40, 24));
    assert_ne!(a.tokens, c.tokens);
}

#[test]
fn logprobs_are_finite_ranked_and_match_the_logits() {
    let (model, prompt, greedy) = setup("tiny-llama-F32");
    let params = GenerateParams { logprobs: Some(5), ..GenerateParams::greedy(4) };
    let c = run(&model, &prompt, params);
    assert_eq!(c.logprobs.len(), 4);
    // the first output token's row is the prompt's last row
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let logits = model.forward(&mut kv, &BatchEntry::sequence(0, &prompt, 0, false)).unwrap();
    let lp = log_softmax(logits.row(0));
    let first = &c.logprobs[0];
    assert_eq!(first.token, greedy[0]);
    assert!((first.logprob - lp[greedy[0] as usize]).abs() < 1e-5);
    for (t, entry) in greedy.iter().zip(&c.logprobs) {
        assert_eq!(entry.top.len(), 5);
        // greedy: the chosen token is the best alternative
        assert_eq!(entry.top[0], (*t, entry.logprob));
        assert!(entry.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(entry.top.iter().all(|c| c.1.is_finite() && c.1 >= LOGPROB_FLOOR && c.1 <= 0.0));
    }
    let e = Generator::new(&model, &mut kv, 1, &prompt, GenerateParams { logprobs: Some(101), ..GenerateParams::greedy(1) });
    assert!(matches!(e, Err(GenerateError::TooManyLogprobs(101))));
}

#[test]
fn out_of_range_sampling_is_refused_before_running() {
    let (model, prompt, _) = setup("tiny-llama-F32");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let params = GenerateParams { sampling: SamplingParams { top_p: 2.0, ..SamplingParams::default() }, ..GenerateParams::default() };
    let e = generate(&model, &mut kv, &prompt, params).unwrap_err();
    assert_eq!(e.to_string(), "top_p must be between 0 and 1, got 2");
    assert_eq!(kv.seq_len(0), 0);
}

#[test]
fn a_lockstep_batch_equals_one_sequence_at_a_time() {
    let (model, prompt, _) = setup("tiny-granite-Q8_0");
    let prompts: Vec<Vec<TokenId>> = vec![prompt.clone(), prompt[..3].to_vec(), prompt[2..].to_vec()];
    let params = |i: usize| match i {
        0 => GenerateParams::greedy(12),
        1 => sampled(99, 9),
        _ => GenerateParams { logprobs: Some(2), ..sampled(5, 20) },
    };
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let jobs = prompts.iter().enumerate().map(|(i, p)| (p.clone(), params(i))).collect();
    let batch = generate_batch(&model, &mut kv, jobs).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(batch[i], run(&model, p, params(i)), "sequence {i}");
    }
}

/// Generates with `draft` proposing `n_draft` tokens per round.
fn with_draft(model: &Model, draft: &Model, prompt: &[TokenId], params: GenerateParams, n_draft: usize) -> Completion {
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let mut dkv = draft.new_kv_cache(KvType::F32, 512);
    let g = Generator::new(model, &mut kv, 0, prompt, params).unwrap();
    g.with_draft(draft, &mut dkv, DraftSettings { n_draft, p_min: 0.0 }).unwrap().complete().unwrap()
}

#[test]
fn speculative_greedy_equals_the_target_alone() {
    let (target, prompt, greedy) = setup("tiny-llama-F32");
    let golden = read_json(&fixture("models/golden/tiny-llama-F32.logits.json"));
    // a model drafting for itself: every proposal is accepted
    let c = with_draft(&target, &target, &prompt, GenerateParams::greedy(16), 4);
    assert_eq!(c.tokens, greedy);
    assert_eq!(c.usage.accepted_tokens, c.usage.drafted_tokens);
    assert!(c.usage.drafted_tokens >= 12, "{:?}", c.usage);

    // a lower-precision draft: some proposals fail, the output does not change
    let draft = Model::load(fixture("models/tiny-llama-Q2_K.gguf")).unwrap();
    for seq in golden["sequences"].as_array().unwrap() {
        let prompt = json_ids(&seq["tokens"]);
        if prompt.is_empty() {
            continue;
        }
        let alone = run(&target, &prompt, GenerateParams::greedy(24));
        for n_draft in [1, 3, 8] {
            let c = with_draft(&target, &draft, &prompt, GenerateParams::greedy(24), n_draft);
            assert_eq!(c.tokens, alone.tokens, "n_draft {n_draft}");
            assert_eq!(c.text, alone.text);
            assert!(c.usage.accepted_tokens <= c.usage.drafted_tokens);
        }
    }
}

/// A draft model's proposals at a temperature are drawn with the numbers of the target's own
/// draws: a seeded output is the tokens it has without the draft, kept proposals and rejected
/// ones alike, whatever the number of proposals per round.
#[test]
fn speculative_sampling_keeps_a_seeded_output_token_for_token_and_the_stop_rules() {
    let (target, prompt, _) = setup("tiny-llama-F32");
    let draft = Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap();
    for seed in [11, 12] {
        let plain = run(&target, &prompt, sampled(seed, 20));
        for n_draft in [2, 4] {
            let a = with_draft(&target, &draft, &prompt, sampled(seed, 20), n_draft);
            assert_eq!((&a.tokens, &a.text), (&plain.tokens, &plain.text), "seed {seed}, {n_draft} per round");
            assert_eq!(a.tokens.len(), 20);
            let Usage { drafted_tokens: drafted, accepted_tokens: accepted, .. } = a.usage;
            assert!(drafted > accepted && accepted > 0, "seed {seed}: {drafted} proposed, {accepted} kept");
        }
    }
    // the budget holds mid-round
    let c = with_draft(&target, &draft, &prompt, GenerateParams::greedy(5), 8);
    assert_eq!(c.tokens.len(), 5);
    assert_eq!(c.tokens, run(&target, &prompt, GenerateParams::greedy(5)).tokens);
}

/// Proposals of `draft` (drafting 6 tokens for `target` at least `p_min` likely, catching up
/// within `catch_up` tokens) for sequences `which` of `prompts` in shared passes, each sampled as
/// `params` say with a generator seeded with its index.
fn propose(
    target: &Model,
    draft: &Model,
    prompts: &[Vec<TokenId>],
    params: &[SamplingParams],
    which: &[usize],
    p_min: f32,
    catch_up: usize,
) -> (Vec<Vec<TokenId>>, Vec<usize>) {
    let mut kv = draft.new_kv_cache(KvType::F32, 256);
    let mut requests: Vec<DraftRequest> = which
        .iter()
        .map(|&i| DraftRequest { seq: i as SeqId, history: &prompts[i], k: 6, params: &params[i], rng: Rng::new(i as u64) })
        .collect();
    let settings = DraftSettings { n_draft: 6, p_min };
    let proposals = propose_batch(draft, &mut kv, target.tokenizer(), settings, catch_up, &mut requests).unwrap();
    let held = which.iter().map(|&i| kv.seq_len(i as SeqId)).collect();
    (proposals, held)
}

#[test]
fn batched_drafting_equals_drafting_alone_and_stops_where_the_draft_doubts() {
    let (target, _, _) = setup("tiny-llama-F32");
    let draft = Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap();
    let golden = read_json(&fixture("models/golden/tiny-llama-F32.logits.json"));
    let prompts: Vec<Vec<TokenId>> =
        golden["sequences"].as_array().unwrap().iter().map(|s| json_ids(&s["tokens"])).filter(|p| !p.is_empty()).collect();
    assert!(prompts.len() >= 3);
    let sampled = |seed| SamplingParams { temperature: 0.7, top_k: 3, seed, ..SamplingParams::default() };
    let params: Vec<SamplingParams> =
        (0..prompts.len()).map(|i| if i == 0 { SamplingParams::greedy() } else { sampled(i as u64) }).collect();
    let all: Vec<usize> = (0..prompts.len()).collect();
    let (together, held) = propose(&target, &draft, &prompts, &params, &all, 0.0, usize::MAX);
    let mut probs = Vec::new();
    for (i, p) in together.iter().enumerate() {
        let (alone, alone_held) = propose(&target, &draft, &prompts, &params, &[i], 0.0, usize::MAX);
        assert_eq!(p, &alone[0], "sequence {i}");
        assert_eq!(held[i], alone_held[0]);
        assert_eq!(p.len(), 6, "no end-of-generation token is drawn from these prompts");
        // the draft's cache holds the prompt and every proposal but the last
        assert_eq!(held[i], prompts[i].len() + 5);
        // the draft's own probability of each proposal: the softmax of its logits after the
        // prompt and the proposals before it
        let mut kv = draft.new_kv_cache(KvType::F32, 256);
        let fed = [&prompts[i][..], &p[..5]].concat();
        let logits = draft.forward(&mut kv, &BatchEntry::sequence(0, &fed, 0, true)).unwrap();
        let own: Vec<f32> =
            p.iter().enumerate().map(|(j, &d)| log_softmax(logits.row(prompts[i].len() - 1 + j))[d as usize].exp()).collect();
        probs.push(own);
    }

    // between the middle two of those probabilities, each list ends before its first token less
    // likely to the draft (the same draws: greedy sequences are cut too)
    let mut sorted: Vec<f32> = probs.concat();
    sorted.sort_by(f32::total_cmp);
    let p_min = (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0;
    let (cut, _) = propose(&target, &draft, &prompts, &params, &all, p_min, usize::MAX);
    for (i, (c, full)) in cut.iter().zip(&together).enumerate() {
        let keep = probs[i].iter().take_while(|&&p| p >= p_min).count();
        assert_eq!(c[..], full[..keep], "sequence {i}: {:?} at least {p_min}", probs[i]);
    }
    let total = |ps: &[Vec<TokenId>]| ps.iter().map(Vec::len).sum::<usize>();
    assert!(total(&cut) < total(&together));

    // a catch-up budget the second prompt does not fit in: it only advances its cache
    let budget = prompts[0].len() + 1;
    let (partial, held) = propose(&target, &draft, &prompts, &params, &all[..2], 0.0, budget);
    assert_eq!(partial[0], together[0]);
    assert!(partial[1].is_empty());
    assert_eq!(held[1], 1);
}

/// N-gram proposals are certainties: checked by a plain step's own draw, a seeded sampled output
/// is the same tokens with them or without (kept ones and rejected ones alike).
#[test]
fn ngram_speculation_keeps_a_seeded_sampled_output_token_for_token() {
    let model = shared_model("qwen2.5-coder");
    // a reply that likely repeats its prompt, which the lookup then proposes
    let text =
        "<|im_start|>user\nRepeat this line three times: the quick brown fox jumps over the lazy dog<|im_end|>\n<|im_start|>assistant\n";
    let prompt = model.tokenizer().encode(text, true, true);
    for seed in [1, 2] {
        let params = || GenerateParams {
            sampling: SamplingParams { temperature: 0.3, top_k: 3, seed, ..SamplingParams::default() },
            max_tokens: 32,
            stop_at_eog: false,
            ..GenerateParams::default()
        };
        let plain = run(model, &prompt, params());
        let mut kv = model.new_kv_cache(KvType::F32, 512);
        let g = Generator::new(model, &mut kv, 0, &prompt, params()).unwrap();
        let c = g.with_ngram(NgramDraft::DEFAULT).unwrap().complete().unwrap();
        assert_eq!((&c.tokens, &c.text), (&plain.tokens, &plain.text), "seed {seed}");
        assert!(c.usage.drafted_tokens > c.usage.accepted_tokens && c.usage.accepted_tokens > 0, "seed {seed}: {:?}", c.usage);
    }
}

/// A generator of `target` with the n-gram lookup (4 tokens a round) if `lookup`, and `draft`
/// (every proposal, 4 a round) if given.
fn lookup_and_draft<'a>(
    target: &'a Model,
    kv: &'a mut KvCache,
    dkv: &'a mut KvCache,
    prompt: &[TokenId],
    params: GenerateParams,
    lookup: bool,
    draft: Option<&'a Model>,
) -> Generator<'a> {
    let mut g = Generator::new(target, kv, 0, prompt, params).unwrap();
    if lookup {
        g = g.with_ngram(NgramDraft { n_draft: 4, ..NgramDraft::DEFAULT }).unwrap();
    }
    if let Some(d) = draft {
        g = g.with_draft(d, dkv, DraftSettings { n_draft: 4, p_min: 0.0 }).unwrap();
    }
    g
}

/// An n-gram lookup and a draft model together: each pass the lookup first, and the draft model
/// only once the lookups have proposed nothing for `DRAFT_AFTER_QUIET_STEPS` passes; the output
/// is the target's alone, greedy and seeded.
#[test]
fn a_lookup_first_and_a_draft_model_once_it_is_quiet_change_no_output() {
    let (target, prompt, greedy) = setup("tiny-llama-F32");
    let target = &target;
    // (proposed, kept) after `events` tokens (each pass without proposals gives one), the
    // target drafting for itself (all kept)
    let after = |prompt: &[TokenId], events: u64, lookup: bool, draft: bool| -> (usize, usize) {
        let (mut kv, mut dkv) = (target.new_kv_cache(KvType::F32, 512), target.new_kv_cache(KvType::F32, 512));
        let mut g = lookup_and_draft(target, &mut kv, &mut dkv, prompt, GenerateParams::greedy(24), lookup, draft.then_some(target));
        for _ in 0..events {
            g.next().unwrap().unwrap();
        }
        (g.usage().drafted_tokens, g.usage().accepted_tokens)
    };
    // the prompt and the start of its greedy output, in which the tiny model loops: the first
    // round (the pass after the prompt's) is the lookup's, with or without the draft
    let looping = [&prompt[..], &greedy[..]].concat();
    let looked_up = after(&looping, 2, true, false);
    assert!(looked_up.0 > 0, "{looked_up:?}");
    assert_eq!(after(&looping, 2, true, true), looked_up);
    // distinct ids, where the lookups find nothing: the draft alone drafts at once; beside the
    // lookup it waits for the passes after the prompt's to be quiet, then drafts
    let quiet = DRAFT_AFTER_QUIET_STEPS;
    let distinct = (0..8)
        .map(|k| (20 * k + 1..=20 * k + 12).collect::<Vec<TokenId>>())
        .find(|p| after(p, quiet + 1, true, false) == (0, 0))
        .expect("a prompt of 12 distinct ids whose first passes' lookups find nothing");
    assert!(after(&distinct, 2, false, true).0 > 0);
    assert_eq!(after(&distinct, quiet, true, true), (0, 0));
    let drafted = after(&distinct, quiet + 1, true, true);
    assert!(drafted.0 > 0 && drafted.0 == drafted.1, "{drafted:?}");

    // whole outputs with a draft of other numbers (some of its proposals rejected)
    let draft = Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap();
    for params in [|| GenerateParams::greedy(32), || sampled(5, 32)] {
        let alone = run(target, &prompt, params());
        let (mut kv, mut dkv) = (target.new_kv_cache(KvType::F32, 512), draft.new_kv_cache(KvType::F32, 512));
        let c = lookup_and_draft(target, &mut kv, &mut dkv, &prompt, params(), true, Some(&draft)).complete().unwrap();
        assert_eq!((&c.tokens, &c.text), (&alone.tokens, &alone.text));
        assert!(c.usage.drafted_tokens > c.usage.accepted_tokens, "{:?}", c.usage);
    }
}

/// A draft whose head keeps the vocabulary's first ids only proposes nothing else, and the
/// target's output is the same, greedy and seeded; adapters are refused on such a head.
#[test]
fn a_draft_with_a_head_of_the_first_ids_proposes_those_and_changes_no_output() {
    let (target, prompt, _) = setup("tiny-llama-F32");
    let mut draft = Model::load(fixture("models/tiny-llama-Q4_0.gguf")).unwrap();
    let n = target.config().n_vocab / 2;
    draft.limit_logits(n).unwrap();
    let prompts = [prompt.clone()];
    let params = [SamplingParams::greedy()];
    let (proposed, _) = propose(&target, &draft, &prompts, &params, &[0], 0.0, usize::MAX);
    assert!(!proposed[0].is_empty() && proposed[0].iter().all(|&t| (t as usize) < n), "{proposed:?}");
    for params in [|| GenerateParams::greedy(24), || sampled(7, 24)] {
        let alone = run(&target, &prompt, params());
        let c = with_draft(&target, &draft, &prompt, params(), 4);
        assert_eq!((&c.tokens, &c.text), (&alone.tokens, &alone.text));
        assert!(c.usage.drafted_tokens > 0);
    }
    let adapter = draft.load_adapter(fixture("models/tiny-llama-F32.gguf"), None).unwrap_err();
    assert!(adapter.to_string().contains("limited to its first"), "{adapter}");
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let (target, prompt, _) = setup("tiny-llama-F32");
    let other = Model::load(fixture("models/tiny-granite-F32.gguf")).unwrap();
    let mut kv = target.new_kv_cache(KvType::F32, 64);
    let mut dkv = other.new_kv_cache(KvType::F32, 64);
    let g = Generator::new(&target, &mut kv, 0, &prompt, GenerateParams::greedy(4)).unwrap();
    let e = g.with_draft(&other, &mut dkv, DraftSettings::DEFAULT).err().unwrap();
    assert!(e.to_string().starts_with("draft model: token"), "{e}");
}

#[test]
fn streamed_multibyte_text_equals_the_final_text() {
    let model = shared_model("qwen2.5-coder");
    let tok = model.tokenizer();
    // the answers to the CJK prompts are CJK text; the emoji prompt's answer may be plain ASCII
    // (it depends on the last bits of the logits) and is checked for equality only
    for (prompt, multibyte) in [
        ("<|im_start|>user\n用中文介绍一下北京。<|im_end|>\n<|im_start|>assistant\n", true),
        ("日本の首都は", true),
        ("Emoji for joy: 😂, for fire:", false),
    ] {
        let ids = tok.encode(prompt, true, true);
        for params in [GenerateParams::greedy(24), sampled(3, 24)] {
            let mut kv = model.new_kv_cache(KvType::F16, 256);
            let mut generator = Generator::new(model, &mut kv, 0, &ids, params).unwrap();
            let mut streamed = String::new();
            for event in generator.by_ref() {
                streamed.push_str(&event.unwrap().text);
            }
            let c = generator.complete().unwrap();
            assert_eq!(streamed, c.text, "{prompt}");
            assert_eq!(c.text, piece_text(model, &c.tokens));
            assert!(!multibyte || c.text.chars().any(|ch| ch.len_utf8() > 1), "{prompt}: {:?}", c.text);
        }
    }
}

#[test]
fn samples_of_one_prompt_share_its_prefill() {
    let (model, prompt, _) = setup("tiny-llama-Q8_0");
    let mut kv = model.new_kv_cache(KvType::F32, 512);
    let jobs = (0..4).map(|seed| (prompt.clone(), sampled(seed, 10))).chain([(prompt[..2].to_vec(), sampled(9, 10))]).collect();
    let batch = generate_batch(&model, &mut kv, jobs).unwrap();
    for seed in 0..4 {
        assert_eq!(batch[seed as usize], run(&model, &prompt, sampled(seed, 10)), "seed {seed}");
    }
    assert_eq!(batch[4], run(&model, &prompt[..2], sampled(9, 10)));
}
