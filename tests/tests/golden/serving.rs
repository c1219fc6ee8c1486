//! The engine thread of a served model (`engine::serving`) with no server around it: requests
//! as messages on a standard channel, their events into sinks of the test's own. Requests
//! decoded together give each the tokens a standalone generation gives, a streamed one every
//! token as it comes; a request whose receiver went away leaves at the next step, counted as
//! cancelled; every request's place is given back, and the thread ends when its channel closes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use engine::generate::{generate, Completion, GenerateParams, Timings, TokenEvent};
use engine::kv_cache::KvType;
use engine::model::vision::PromptImages;
use engine::model::Model;
use engine::serving::{EngineLoop, EventSink, LoopConfig, LoopMetrics, Msg, PromptProgress, SeqEvent, SeqSpec, Source, Ticket};
use engine::tokenizer::TokenId;
use engine_tests::fixture;

/// A request's receiving end, as the test sees it: what came, and a flag that says it is gone.
struct Sink {
    tx: mpsc::Sender<SeqEvent>,
    gone: Arc<AtomicBool>,
}

impl EventSink for Sink {
    fn send(&self, event: SeqEvent) -> bool {
        self.tx.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

/// The loop's figures this test reads.
#[derive(Clone, Default)]
struct Counts {
    cancelled: Arc<AtomicUsize>,
    steps: Arc<AtomicUsize>,
    widest_step: Arc<AtomicUsize>,
}

impl LoopMetrics for Counts {
    fn queue_depth(&self, _: usize) {}
    fn running(&self, _: usize) {}
    fn kv_blocks(&self, _: usize) {}
    fn kv_capacity(&self, _: usize) {}
    fn step(&self, sequences: usize) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.widest_step.fetch_max(sequences, Ordering::Relaxed);
    }
    fn prefix_lookup(&self, _: bool) {}
    fn prompt(&self, _: usize, _: usize) {}
    fn drafted(&self, _: Source, _: usize, _: usize) {}
    fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }
}

/// Submits one output of `prompt` (greedy, `max_tokens`) with a place counted in `outstanding`:
/// the receiver of its events and its gone flag.
fn submit(
    tx: &mpsc::Sender<Msg>,
    outstanding: &Arc<AtomicUsize>,
    prompt: &[TokenId],
    max_tokens: usize,
    stream: bool,
) -> (mpsc::Receiver<SeqEvent>, Arc<AtomicBool>) {
    let spec = SeqSpec {
        prompt: prompt.to_vec(),
        params: GenerateParams::greedy(max_tokens),
        stream,
        speculative: false,
        deadline: None,
        images: PromptImages::default(),
        lora: Vec::new(),
        progress: false,
    };
    submit_spec(tx, outstanding, spec)
}

fn submit_spec(tx: &mpsc::Sender<Msg>, outstanding: &Arc<AtomicUsize>, spec: SeqSpec) -> (mpsc::Receiver<SeqEvent>, Arc<AtomicBool>) {
    let (events, received) = mpsc::channel();
    let gone = Arc::new(AtomicBool::new(false));
    outstanding.fetch_add(1, Ordering::Relaxed);
    let sink = Box::new(Sink { tx: events, gone: gone.clone() });
    let msg = Msg::Generate {
        seqs: vec![spec],
        events: sink,
        ticket: Ticket::held(outstanding.clone()),
        stopped: Arc::new(AtomicBool::new(false)),
    };
    tx.send(msg).unwrap();
    (received, gone)
}

/// Every event of a request until the loop lets it go: its streamed tokens and its completion.
fn collect(received: mpsc::Receiver<SeqEvent>) -> (Vec<TokenEvent>, Completion) {
    let (mut tokens, mut done) = (Vec::new(), None);
    for event in received {
        match event {
            SeqEvent::Token { index: 0, event, .. } => tokens.push(event),
            SeqEvent::Done { index: 0, result } => done = Some(result.unwrap()),
            other => panic!("an event of another output: {other:?}"),
        }
    }
    (tokens, done.expect("the request ended without its completion"))
}

#[test]
fn the_engine_thread_serves_requests_together_as_each_alone() {
    let model = Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap());
    let prompts: Vec<Vec<TokenId>> =
        ["Once upon a time", "The capital of France is", "1, 2, 3, 4,"].iter().map(|t| model.tokenizer().encode(t, true, false)).collect();
    let (tx, rx) = mpsc::channel();
    let outstanding = Arc::new(AtomicUsize::new(0));
    let counts = Counts::default();
    let engine = EngineLoop::new(model.clone(), None, None, LoopConfig::new(512), rx, outstanding.clone(), Box::new(counts.clone()));
    // queued before the thread starts, so that its first step finds them all: a request whose
    // client is gone, then three to decode together, the first streamed
    let (cancelled, gone) = submit(&tx, &outstanding, &prompts[0], 400, true);
    gone.store(true, Ordering::Relaxed);
    let requests: Vec<_> = prompts.iter().enumerate().map(|(i, p)| submit(&tx, &outstanding, p, 12, i == 0).0).collect();
    let thread = std::thread::spawn(move || engine.run());
    for (i, (received, prompt)) in requests.into_iter().zip(&prompts).enumerate() {
        let (streamed, completion) = collect(received);
        let mut kv = model.new_kv_cache(KvType::F16, 512);
        let alone = generate(&model, &mut kv, prompt, GenerateParams::greedy(12)).unwrap();
        assert_eq!((&completion.tokens, &completion.text), (&alone.tokens, &alone.text), "request {i}");
        assert_eq!(completion.usage.completion_tokens, alone.tokens.len(), "request {i}");
        let streamed_tokens: Vec<TokenId> = streamed.iter().filter_map(|e| e.token).collect();
        if i == 0 {
            assert_eq!(streamed_tokens, alone.tokens, "the streamed request's tokens as they came");
        } else {
            assert!(streamed.is_empty(), "request {i} did not ask to stream");
        }
    }
    assert!(cancelled.iter().all(|e| !matches!(e, SeqEvent::Done { .. })), "the gone request was completed");
    assert_eq!(counts.cancelled.load(Ordering::Relaxed), 1);
    assert_eq!(counts.widest_step.load(Ordering::Relaxed), 3, "the three requests did not share their steps");
    drop(tx);
    thread.join().unwrap();
    assert_eq!(outstanding.load(Ordering::Relaxed), 0, "a request's place was not given back");
}

#[test]
fn a_hybrid_model_runs_as_many_sequences_at_once_as_it_has_slots() {
    // every slot's positions and recurrent states fit beside each other: a fourth sequence
    // arriving while three others hold their states joins them, and each gives what it would
    // alone
    let model = Arc::new(Model::load(fixture("archs/qwen35-s1.gguf")).unwrap());
    let n_ctx = 128;
    let mut config = LoopConfig::new(n_ctx);
    config.parallel = 4;
    // per sequence its whole context: 4 blocks and the block a fork copies, a quarter of the
    // pool (its states beside)
    let (prompt_len, max_tokens) = (20, 108);
    let prompts: Vec<Vec<TokenId>> = (0..4u32).map(|s| (0..prompt_len as u32).map(|i| 1 + (i * 7 + s * 31) % 100).collect()).collect();
    let (tx, rx) = mpsc::channel();
    let outstanding = Arc::new(AtomicUsize::new(0));
    let counts = Counts::default();
    let engine = EngineLoop::new(model.clone(), None, None, config, rx, outstanding.clone(), Box::new(counts.clone()));
    let mut requests: Vec<_> = prompts[..3].iter().enumerate().map(|(i, p)| submit(&tx, &outstanding, p, max_tokens, i == 0).0).collect();
    let thread = std::thread::spawn(move || engine.run());
    // the first three have run a step (and hold states) when the fourth comes
    assert!(matches!(requests[0].recv().unwrap(), SeqEvent::Token { index: 0, .. }));
    let steps_before = counts.steps.load(Ordering::Relaxed);
    requests.push(submit(&tx, &outstanding, &prompts[3], max_tokens, false).0);
    for (i, (received, prompt)) in requests.into_iter().zip(&prompts).enumerate() {
        let (_, completion) = collect(received);
        let mut kv = model.new_kv_cache(KvType::F16, n_ctx);
        let alone = generate(&model, &mut kv, prompt, GenerateParams::greedy(max_tokens)).unwrap();
        assert_eq!(completion.tokens, alone.tokens, "request {i}");
    }
    // (a test thread kept from running until the three were nearly done proves nothing here)
    if steps_before + 8 < max_tokens {
        assert_eq!(counts.widest_step.load(Ordering::Relaxed), 4, "the fourth sequence did not join the other three");
    }
    drop(tx);
    thread.join().unwrap();
}

#[test]
fn a_sequence_that_asks_reports_its_prompt_read_chunk_by_chunk_and_its_tokens_times() {
    let model = Arc::new(Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap());
    let mut config = LoopConfig::new(256);
    config.prefill_chunk = 16;
    let prompt: Vec<TokenId> = (0..70u32).map(|i| 1 + (i * 13) % 200).collect();
    let (tx, rx) = mpsc::channel();
    let outstanding = Arc::new(AtomicUsize::new(0));
    let engine = EngineLoop::new(model.clone(), None, None, config, rx, outstanding.clone(), Box::new(Counts::default()));
    let thread = std::thread::spawn(move || engine.run());
    let mut kv = model.new_kv_cache(KvType::F16, 256);
    let alone = generate(&model, &mut kv, &prompt, GenerateParams::greedy(5)).unwrap();
    // twice: the second time most of the prompt is in the prefix cache
    for round in 0..2 {
        let spec = SeqSpec {
            prompt: prompt.clone(),
            params: GenerateParams::greedy(5),
            stream: true,
            speculative: false,
            deadline: None,
            images: PromptImages::default(),
            lora: Vec::new(),
            progress: true,
        };
        let (received, _gone) = submit_spec(&tx, &outstanding, spec);
        let (mut reports, mut times, mut tokens, mut done): (Vec<PromptProgress>, Vec<Timings>, Vec<TokenId>, _) = Default::default();
        for event in received {
            match event {
                SeqEvent::Progress { index: 0, progress } => {
                    assert!(times.is_empty(), "round {round}: a progress report after a token");
                    reports.push(progress);
                }
                SeqEvent::Token { index: 0, event, timings } => {
                    tokens.extend(event.token);
                    times.push(timings);
                }
                SeqEvent::Done { index: 0, result } => done = Some(result.unwrap()),
                other => panic!("an event of another output: {other:?}"),
            }
        }
        let done = done.unwrap();
        assert_eq!(tokens, alone.tokens, "round {round}");
        let first = reports[0];
        let cached = done.usage.cached_tokens;
        assert_eq!(first, PromptProgress { total: 70, cached, processed: cached, elapsed: Duration::ZERO }, "round {round}");
        assert_eq!(reports.last().unwrap().processed, 70, "round {round}: the last report has read the whole prompt");
        for pair in reports.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert_eq!((b.total, b.cached), (70, cached), "round {round}");
            assert!(b.processed > a.processed && b.processed - a.processed <= 16, "round {round}: {a:?} then {b:?}");
            assert!(b.elapsed >= a.elapsed, "round {round}");
        }
        if round == 0 {
            let processed: Vec<usize> = reports.iter().map(|r| r.processed).collect();
            assert_eq!(processed, [0, 16, 32, 48, 64, 70], "chunks of 16, the last one whole");
        } else {
            assert!(cached >= 32, "the second reading found {cached} positions cached");
            assert_eq!(reports.len(), 1 + (70 - cached).div_ceil(16), "{reports:?}");
        }
        // a token's times: the prompt's fixed from the first token on, the output's growing
        let timings = done.timings.unwrap();
        assert!(times.iter().all(|t| t.prompt == times[0].prompt) && timings.prompt == times[0].prompt, "round {round}");
        assert!(times.windows(2).all(|w| w[1].output >= w[0].output) && timings.output >= times.last().unwrap().output);
        assert!(timings.prompt >= reports.last().unwrap().elapsed, "round {round}");
    }
    drop(tx);
    thread.join().unwrap();
}
