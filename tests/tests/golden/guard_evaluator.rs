//! The evaluator end to end on the tiny Guardian-shaped models (random weights: the verdicts
//! mean nothing, the mechanics are tested): requests, scans and batches give well-formed
//! verdicts; a scan with its shared prefix computed once equals nine separate evaluations;
//! the contract's request errors; every request decided by its own thresholds and custom
//! risks; cancellation.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use engine::guard::{CustomRisk, Evaluator, EvaluatorOptions, GuardError, GuardInput, GuardRequest, Risk, RiskName, Thresholds};
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
    assert_eq!(scan.verdicts.iter().map(|v| v.risk.builtin().unwrap()).collect::<Vec<_>>(), Risk::HARM);
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
    let inputs = [input(), GuardInput::new("Hello there"), GuardInput::new("Tell me a joke")];
    let requests: Vec<GuardRequest> = inputs.iter().map(|i| GuardRequest::new(i.clone(), &["harm", "profanity"])).collect();
    let items = ev.evaluate_batch(&requests).unwrap();
    assert_eq!(items.len(), 3);
    for (item, request) in items.iter().zip(&requests) {
        assert_eq!(item, &ev.evaluate(request).unwrap());
    }
    assert_eq!(ev.evaluate_batch(&[]).unwrap_err().to_string(), "inputs is required");
    let many = vec![GuardRequest::new::<&str>(GuardInput::new("x"), &[]); 257];
    assert_eq!(ev.evaluate_batch(&many).unwrap_err().to_string(), "inputs exceeds maximum batch size of 256");
}

#[test]
fn each_request_of_a_batch_is_decided_by_its_own_risks_and_thresholds() {
    let ev = evaluator("3.0");
    let raw = ev.evaluate(&GuardRequest::new(input(), &["harm", "violence"])).unwrap();
    let p = |i: usize| f64::from(raw.verdicts[i].risk_probability.unwrap());
    // one threshold just above harm's probability, one at violence's: both decide against the
    // label the probability alone would give on one side
    let above = (p(0) + 1e-6).min(1.0);
    let strict = Thresholds::parse([("harm", above), ("violence", p(1))]).unwrap();
    let requests = vec![
        GuardRequest { thresholds: strict.clone(), ..GuardRequest::new(input(), &["harm", "violence"]) },
        GuardRequest::new(GuardInput::new("Hello there"), &["profanity"]),
        GuardRequest::new(input(), &["harm", "violence"]),
    ];
    let results = ev.evaluate_batch(&requests).unwrap();
    assert_eq!(results[2], raw, "no thresholds: the model's labels");
    let decided = &results[0].verdicts;
    assert_eq!((decided[0].is_unsafe, decided[1].is_unsafe), (p(0) >= above, true), "{decided:?}");
    assert!(results[0].flagged);
    assert_eq!(decided[0].risk_probability, raw.verdicts[0].risk_probability);
    assert_eq!(results[1].verdicts.iter().map(|v| v.risk.name()).collect::<Vec<_>>(), ["profanity"]);
    for (result, request) in results.iter().zip(&requests) {
        assert_eq!(result, &ev.evaluate(request).unwrap(), "judged alone");
    }
}

#[test]
fn custom_risks_take_their_place_in_risks_and_their_thresholds() {
    let ev = evaluator("3.0");
    let pii = CustomRisk::new("pii", "The message contains a phone number or an address.").unwrap();
    let request = |risks: &[&str], thresholds: Thresholds| GuardRequest {
        customs: vec![pii.clone()],
        thresholds,
        ..GuardRequest::new(GuardInput::new("Call me at 555-0100"), risks)
    };
    let r = ev.evaluate(&request(&["harm", "pii", "violence"], Thresholds::default())).unwrap();
    assert_eq!(r.verdicts.iter().map(|v| v.risk.name()).collect::<Vec<_>>(), ["harm", "pii", "violence"]);
    assert_eq!(r.verdicts[1].risk, RiskName::Custom("pii".into()));
    let alone = ev.evaluate(&request(&[], Thresholds::default())).unwrap();
    assert_eq!(alone.verdicts, [r.verdicts[1].clone()], "no risks: only the custom ones");
    // a threshold of 0 flags the custom risk whatever the model says; 1 clears it unless certain
    let p = r.verdicts[1].risk_probability.unwrap();
    let zero = Thresholds::parse_with_custom([("pii", 0.0)], std::slice::from_ref(&pii)).unwrap();
    let flagged = ev.evaluate(&request(&["pii"], zero)).unwrap();
    assert!(flagged.flagged && flagged.verdicts[0].is_unsafe);
    let one = Thresholds::parse_with_custom([("pii", 1.0)], std::slice::from_ref(&pii)).unwrap();
    assert_eq!(ev.evaluate(&request(&["pii"], one)).unwrap().verdicts[0].is_unsafe, p >= 1.0);
    let e = ev.evaluate(&request(&["harm"], Thresholds::default())).unwrap_err();
    assert_eq!(e.to_string(), "pii is defined but not in risks: name it there to judge it");
    let scan = ev.scan_cancellable(&request(&[], Thresholds::default()), &AtomicBool::new(false)).unwrap_err();
    assert_eq!(scan.to_string(), "a scan judges the 9 harm risks: leave risks out");
}

#[test]
fn request_errors_have_the_contract_messages() {
    let ev = evaluator("3.0");
    let req = |input: GuardInput, risks: &[&str], format: Option<&str>, think: bool| GuardRequest {
        format: format.map(String::from),
        think,
        ..GuardRequest::new(input, risks)
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
