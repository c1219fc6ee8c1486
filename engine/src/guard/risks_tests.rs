//! Unit tests of the risk vocabulary, format detection and request validation.

use super::*;

fn check(input: &GuardInput, risks: &[&str], format: Option<&str>, think: bool) -> Result<CheckedRequest, String> {
    check_request(input, risks, format, think, GuardFormat::V3_2).map_err(|e| e.to_string())
}

fn full() -> GuardInput {
    GuardInput::new("q").with_assistant("a").with_context("c")
}

#[test]
fn names_round_trip_in_category_order() {
    let names: Vec<&str> = Risk::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        [
            "evasiveness",
            "harm",
            "harm_engagement",
            "jailbreaking",
            "profanity",
            "sexual_content",
            "social_bias",
            "unethical_behavior",
            "violence",
            "answer_relevance",
            "context_relevance",
            "groundedness",
            "function_call_hallucination"
        ]
    );
    for r in Risk::ALL {
        assert_eq!(Risk::from_name(r.name()), Some(r));
    }
    assert_eq!(&Risk::ALL[..9], &Risk::HARM[..]);
    assert!(Risk::ALL.windows(2).all(|w| w[0] < w[1]), "Ord is category order");
    assert_eq!(Risk::from_name("jailbreak"), None, "native ids are not API names");
    assert_eq!(Risk::from_name("Harm"), None);
}

#[test]
fn native_ids_and_groups() {
    assert_eq!(Risk::Jailbreaking.native_id(), "jailbreak");
    assert_eq!(Risk::FunctionCallHallucination.native_id(), "function_call");
    assert_eq!(Risk::SexualContent.native_id(), "sexual_content");
    let groups: Vec<RiskGroup> = Risk::ALL.iter().map(|r| r.group()).collect();
    assert_eq!(groups.iter().filter(|g| **g == RiskGroup::Harm).count(), 9);
    assert_eq!(groups.iter().filter(|g| **g == RiskGroup::Rag).count(), 3);
    let not_native_3_0: Vec<Risk> = Risk::ALL.into_iter().filter(|r| !r.is_native(GuardFormat::V3_0)).collect();
    assert_eq!(not_native_3_0, [Risk::Evasiveness, Risk::HarmEngagement, Risk::FunctionCallHallucination]);
    assert!(Risk::ALL.iter().all(|r| r.is_native(GuardFormat::V3_2) && r.is_native(GuardFormat::V3_3)));
}

#[test]
fn definitions_per_format() {
    use Judged::*;
    assert_eq!(Risk::Harm.definition(GuardFormat::V3_0, User), Some("The 'User' message is harmful by common-sense."));
    assert_eq!(
        Risk::Harm.definition(GuardFormat::V3_2, Assistant),
        Some("The last 'Assistant' is message considered universally harmful.")
    );
    assert_eq!(
        Risk::Harm.definition(GuardFormat::V3_3, User),
        Some("Texts deemed universally harmful are those that pose harm across all contexts and audiences.")
    );
    // 3.0 sends the 3.2 text for the risks its bank lacks.
    assert_eq!(Risk::Evasiveness.definition(GuardFormat::V3_0, User), Risk::Evasiveness.definition(GuardFormat::V3_2, User));
    assert!(Risk::Groundedness.definition(GuardFormat::V3_0, User).unwrap().starts_with("'Assistant' message is not grounded"));
    assert_eq!(Risk::Groundedness.definition(GuardFormat::V3_2, User), None);
    for format in GuardFormat::ALL {
        for r in Risk::ALL {
            let judged = r.judged(true);
            assert!(r.definition(format, judged).is_some_and(|d| !d.is_empty()), "{r} {format}");
        }
    }
    assert_eq!(Risk::ContextRelevance.judged(true), User);
    assert_eq!(Risk::Violence.judged(false), User);
    assert_eq!(Risk::Violence.judged(true), Assistant);
}

#[test]
fn formats_parse_exactly() {
    for f in GuardFormat::ALL {
        assert_eq!(GuardFormat::parse(f.as_str()).unwrap(), f);
    }
    for bad in ["3.1", "3", "v3.2", " 3.2", "", "4.0"] {
        assert_eq!(GuardFormat::parse(bad).unwrap_err().to_string(), format!("unsupported format \"{bad}\" (must be 3.0, 3.2, or 3.3)"));
    }
}

#[test]
fn detection_from_template_and_names() {
    let t30 = "{%- set risk_bank = ... %}{% if guardian_config %}<start_of_turn>{% endif %}";
    let t32 = "{% if guardian_config %}{% endif %}<start_of_conversation> harm_engagement";
    let t33 = "{% if guardian_config.criteria_id %}<|start_of_role|>judge_protocol<|end_of_role|>{% endif %}";
    let plain = "{% for m in messages %}<|start_of_role|>{{ m.role }}<|end_of_role|>{% endfor %}";
    let d = detect_format(Some(t30), &[]);
    assert_eq!((d.format, d.guardian, d.template_format), (GuardFormat::V3_0, true, Some(GuardFormat::V3_0)));
    assert_eq!(detect_format(Some(t32), &[]).template_format, Some(GuardFormat::V3_2));
    assert_eq!(detect_format(Some(t33), &[]).format, GuardFormat::V3_3);
    // A Guardian by name with a plain template: the built-in renderer of the named version.
    let d = detect_format(Some(plain), &["granite-guardian-3.3-tiny-synthetic"]);
    assert_eq!((d.format, d.guardian, d.template_format), (GuardFormat::V3_3, true, None));
    assert_eq!(detect_format(None, &["Granite Guardian 3.2 5b"]).format, GuardFormat::V3_2);
    assert_eq!(detect_format(None, &["granite3.1-guardian"]).format, GuardFormat::V3_0);
    assert_eq!(detect_format(None, &["guardian"]).format, GuardFormat::V3_0);
    // Anything else is a generic chat model, read by the 3.0 rules.
    let d = detect_format(Some(plain), &["Qwen2.5 Coder 0.5B Instruct"]);
    assert_eq!((d.format, d.guardian, d.template_format), (GuardFormat::V3_0, false, None));
}

#[test]
fn validation_messages() {
    let ok = check(&full(), &[], None, false).unwrap();
    assert_eq!(ok, CheckedRequest { risks: Risk::HARM.to_vec(), format: GuardFormat::V3_2, think: false });

    assert_eq!(check(&GuardInput::default(), &[], None, false).unwrap_err(), "input.user is required");
    assert_eq!(check(&GuardInput::new("  \n"), &[], None, false).unwrap_err(), "input.user is required");
    assert_eq!(check(&full(), &["harm", "jailbreak", "nope"], None, false).unwrap_err(), "invalid risk category: jailbreak");
    for rag in ["groundedness", "context_relevance", "answer_relevance"] {
        let want = format!("risk {rag} requires input.context and input.assistant");
        assert_eq!(check(&GuardInput::new("q").with_assistant("a"), &[rag], None, false).unwrap_err(), want);
        assert_eq!(check(&GuardInput::new("q").with_context("c"), &[rag], None, false).unwrap_err(), want);
        assert_eq!(check(&GuardInput::new("q").with_context("c").with_assistant(""), &[rag], None, false).unwrap_err(), want);
        assert!(check(&full(), &[rag], None, false).is_ok());
    }
    assert_eq!(check(&full(), &[], Some("3.1"), false).unwrap_err(), "unsupported format \"3.1\" (must be 3.0, 3.2, or 3.3)");
    assert_eq!(check(&full(), &[], None, true).unwrap_err(), "thinking mode is only supported with format 3.3");
    assert_eq!(check(&full(), &[], Some("3.0"), true).unwrap_err(), "thinking mode is only supported with format 3.3");
    assert!(check(&full(), &[], Some("3.3"), true).unwrap().think);
    assert_eq!(
        check(&GuardInput::new("q"), &["function_call_hallucination"], None, false).unwrap_err(),
        "risk function_call_hallucination requires input.assistant"
    );
    assert!(check(&GuardInput::new("q").with_assistant("[]"), &["function_call_hallucination"], None, false).is_ok());
}

#[test]
fn validation_order_and_duplicates() {
    // The contract's table order decides which error a request with several faults gets.
    let empty = GuardInput::default();
    assert_eq!(check(&empty, &["nope"], Some("9"), true).unwrap_err(), "input.user is required");
    let user = GuardInput::new("q");
    assert_eq!(check(&user, &["groundedness", "nope"], Some("9"), true).unwrap_err(), "invalid risk category: nope");
    assert_eq!(
        check(&user, &["function_call_hallucination", "groundedness"], Some("9"), true).unwrap_err(),
        "risk groundedness requires input.context and input.assistant"
    );
    assert!(check(&user, &["function_call_hallucination"], Some("9"), true).unwrap_err().starts_with("unsupported format"));
    let r = check(&full(), &["violence", "harm", "violence"], None, false).unwrap();
    assert_eq!(r.risks, [Risk::Violence, Risk::Harm]);
}

#[test]
fn input_deserializes_with_defaults() {
    let input: GuardInput = serde_json::from_str(r#"{"assistant": "a", "tools": [{"type": "function"}]}"#).unwrap();
    assert_eq!(input.user, "");
    assert_eq!(input.assistant(), Some("a"));
    assert_eq!(input.tools().map(<[_]>::len), Some(1));
    let round: GuardInput = serde_json::from_value(serde_json::to_value(full()).unwrap()).unwrap();
    assert_eq!(round, full());
}
