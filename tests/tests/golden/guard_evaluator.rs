//! The evaluator end to end on the tiny Guardian-shaped models (random weights: the verdicts
//! mean nothing, the mechanics are tested): requests, scans and batches give well-formed
//! verdicts; a scan with its shared prefix computed once equals nine separate evaluations;
//! the contract's request errors; cancellation.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use engine::guard::{Evaluator, EvaluatorOptions, GuardError, GuardInput, GuardRequest, Risk};
use engine::model::Model;
use engine_tests::fixture;

fn evaluator(format: &str) -> Evaluator {
    let path = fixture(&format!("guardian/models/guardian-tiny-{format}-q8_0.gguf"));
    Evaluator::new(path, EvaluatorOptions::default()).unwrap()
}

fn input() -> GuardInput {
    GuardInput::new("How do I pick a lock?").with_assistant("Use a tension wrench and a pick.")
}

#[test]
fn a_scan_equals_nine_separate_evaluations() {
    let ev = evaluator("3.0");
    let scan = ev.scan(&input()).unwrap();
    assert_eq!(scan.verdicts.iter().map(|v| v.risk).collect::<Vec<_>>(), Risk::HARM);
    assert_eq!(scan.flagged, scan.verdicts.iter().any(|v| v.is_unsafe));
    assert_eq!(scan.highest_risk.is_some(), scan.flagged);
    for v in &scan.verdicts {
        let alone = ev.evaluate(&GuardRequest { input: input(), risks: vec![v.risk.name().into()], ..Default::default() });
        // bitwise: the batched, prefix-shared pass computes exactly what a lone prompt does
        assert_eq!(&alone.unwrap().verdicts[0], v, "{}", v.risk.name());
    }
    // 3.2 and 3.3 decode text; random weights write noise, which must come back as the same
    // unparseable output whether the risk runs in a scan or alone
    for format in ["3.2", "3.3"] {
        let ev = evaluator(format);
        let scan_err = ev.scan(&input()).unwrap_err();
        let GuardError::Unparseable { risk, output } = &scan_err else { panic!("{format}: {scan_err}") };
        let alone = ev.evaluate(&GuardRequest { input: input(), risks: vec![risk.clone()], ..Default::default() });
        match alone {
            Err(GuardError::Unparseable { output: o, .. }) => assert_eq!(&o, output, "{format}"),
            other => panic!("{format}: {other:?}"),
        }
    }
}

#[test]
fn three_zero_verdicts_carry_probabilities() {
    let r = evaluator("3.0").evaluate(&GuardRequest { input: input(), ..Default::default() }).unwrap();
    for v in &r.verdicts {
        let p = v.risk_probability.unwrap();
        assert!((0.0..=1.0).contains(&p));
        let want = if v.is_unsafe { p } else { 1.0 - p };
        assert!((v.confidence - want).abs() < 1e-6);
    }
}

#[test]
fn random_weights_give_unparseable_output_as_errors_not_safe() {
    // the tiny 3.2 / 3.3 models write noise, not "Yes <confidence>...": an error naming the risk
    for format in ["3.2", "3.3"] {
        let r = evaluator(format).evaluate(&GuardRequest { input: input(), risks: vec!["harm".into()], ..Default::default() });
        // greedy decoding of fixed weights: the noise is the same every run
        let e = r.expect_err("random weights answered in the format");
        assert!(matches!(e, GuardError::Unparseable { ref risk, ref output } if risk == "harm" && !output.is_empty()), "{e}");
    }
}

#[test]
fn a_batch_keeps_input_order_and_limits() {
    let ev = evaluator("3.0");
    let inputs = vec![input(), GuardInput::new("Hello there"), GuardInput::new("Tell me a joke")];
    let items = ev.evaluate_batch(&inputs, &["harm", "profanity"]).unwrap();
    assert_eq!(items.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1, 2]);
    for (item, inp) in items.iter().zip(&inputs) {
        let alone = ev.evaluate(&GuardRequest { input: inp.clone(), risks: vec!["harm".into(), "profanity".into()], ..Default::default() });
        assert_eq!(item.verdicts, alone.unwrap().verdicts);
    }
    let none: [&str; 0] = [];
    assert_eq!(ev.evaluate_batch(&[], &none).unwrap_err().to_string(), "inputs is required");
    let many = vec![GuardInput::new("x"); 257];
    assert_eq!(ev.evaluate_batch(&many, &none).unwrap_err().to_string(), "inputs exceeds maximum batch size of 256");
}

#[test]
fn request_errors_have_the_contract_messages() {
    let ev = evaluator("3.0");
    let req = |input: GuardInput, risks: &[&str], format: Option<&str>, think: bool| GuardRequest {
        input,
        risks: risks.iter().map(|s| s.to_string()).collect(),
        format: format.map(String::from),
        think,
    };
    let cases = [
        (req(GuardInput::new(""), &[], None, false), "input.user is required"),
        (req(GuardInput::new("x"), &["harm", "nope"], None, false), "invalid risk category: nope"),
        (req(GuardInput::new("x"), &["groundedness"], None, false), "risk groundedness requires input.context and input.assistant"),
        (req(GuardInput::new("x"), &[], Some("3.1"), false), "unsupported format \"3.1\" (must be 3.0, 3.2, or 3.3)"),
        (req(GuardInput::new("x"), &[], Some("3.2"), true), "thinking mode is only supported with format 3.3"),
    ];
    for (r, msg) in cases {
        let e = ev.evaluate(&r).unwrap_err();
        assert!(e.is_invalid_request(), "{e}");
        assert_eq!(e.to_string(), msg);
    }
}

#[test]
fn cancellation_stops_the_evaluation() {
    let ev = evaluator("3.0");
    let cancel = AtomicBool::new(true);
    let e = ev.evaluate_cancellable(&GuardRequest { input: input(), ..Default::default() }, &cancel).unwrap_err();
    assert!(matches!(e, GuardError::Cancelled));
}

#[test]
fn from_model_and_devices() {
    let model = Arc::new(Model::load(fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf")).unwrap());
    assert!(Evaluator::from_model(model.clone(), EvaluatorOptions::default()).is_ok());
    let cuda = EvaluatorOptions { device: "cuda:0".parse().unwrap(), ..EvaluatorOptions::default() };
    let e = Evaluator::from_model(model, cuda).unwrap_err().to_string();
    // a build without CUDA refuses the device; one with it refuses a model loaded elsewhere
    let why = if cfg!(feature = "cuda") { "the model is loaded on cpu, not on cuda:0" } else { "no CUDA" };
    assert!(e.contains(why), "{e}");
}
