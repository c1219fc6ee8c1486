//! The guard's policies, audit fields, conversation input and per-risk metrics: presets chosen
//! by `policy` (and the default one), a request's thresholds over its policy's, `model_sha256`
//! equal to the file's digest, `input.messages` judged as its last turn, and moderation requests
//! of many clients judged together.

use std::sync::Arc;

use engine::guard::Policies;
use engine::model::Model;
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{ModelSpec, Server};
use sha2::{Digest, Sha256};

use super::{guard_path, GUARD};

const POLICIES: &str =
    "default = \"lenient\"\n[policies.lenient]\nthresholds = { harm = 1.0 }\n[policies.all]\nthresholds = { harm = 0.0, violence = 0.0 }\n";

fn start(policies: Policies) -> String {
    let guard = Arc::new(Model::load(guard_path()).unwrap());
    super::start(
        Server::builder()
            .model(ModelSpec { id: GUARD.into(), model: guard, chat: false, guard: true, n_ctx: Some(1024), draft: None })
            .guard_policies(policies),
    )
}

fn post(base: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let r = Client::new().post(format!("{base}{path}")).json(&body).send().unwrap();
    (r.status(), r.json().unwrap())
}

fn unsafe_of(j: &Value) -> Vec<bool> {
    j["verdicts"].as_array().unwrap().iter().map(|v| v["unsafe"].as_bool().unwrap()).collect()
}

#[test]
fn policies_are_chosen_by_name_and_a_request_overrides_their_thresholds() {
    let base = start(Policies::from_toml(POLICIES, "p.toml").unwrap());
    let body = |extra: Value| {
        let mut b = json!({"model": GUARD, "input": {"user": "I love sunny days"}, "risks": ["harm", "violence"]});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let (s, j) = post(&base, "/v1/guard", body(json!({})));
    assert_eq!(s, StatusCode::OK);
    assert_eq!((j["policy"].as_str(), j["thresholds"].clone()), (Some("lenient"), json!({"harm": 1.0})), "the default policy: {j}");
    assert!(!unsafe_of(&j)[0], "{j}");
    let (_, j) = post(&base, "/v1/guard", body(json!({"policy": "all"})));
    assert_eq!((j["policy"].as_str(), j["flagged"].as_bool(), unsafe_of(&j)), (Some("all"), Some(true), vec![true, true]), "{j}");
    let (_, j) = post(&base, "/v1/guard", body(json!({"policy": "all", "thresholds": {"violence": 1.0}})));
    assert_eq!(unsafe_of(&j), [true, false], "{j}");
    assert_eq!(j["thresholds"], json!({"harm": 0.0, "violence": 1.0}));
    let (_, j) = post(&base, "/v1/guard/scan", json!({"model": GUARD, "input": {"user": "Hi"}, "policy": "all"}));
    assert_eq!((j["flagged"].as_bool(), j["policy"].as_str()), (Some(true), Some("all")), "{j}");
    assert!(["harm", "violence"].contains(&j["highest_risk"].as_str().unwrap()), "{j}");
    let (_, j) = post(&base, "/v1/moderations", json!({"input": ["Hi", "Hello"], "policy": "all"}));
    assert_eq!(j["results"].as_array().unwrap().iter().map(|r| r["flagged"].as_bool().unwrap()).collect::<Vec<_>>(), [true, true]);
    assert_eq!(j["policy"], "all");
    for (policy, message) in
        [(json!("strict"), "unknown policy `strict`: the server has all, lenient"), (json!(3), "policy must be the name of a policy")]
    {
        for path in ["/v1/guard", "/v1/moderations"] {
            let (s, e) = post(&base, path, json!({"model": GUARD, "input": {"user": "x"}, "policy": policy.clone()}));
            let e = if path == "/v1/moderations" { post(&base, path, json!({"input": "x", "policy": policy.clone()})).1 } else { e };
            assert_eq!(s, StatusCode::BAD_REQUEST);
            assert_eq!((e["error"]["message"].as_str(), e["error"]["param"].as_str()), (Some(message), Some("policy")), "{path}: {e}");
        }
    }
    // listed with their thresholds, and the default named
    let list: Value = Client::new().get(format!("{base}/v1/guard/policies")).send().unwrap().json().unwrap();
    assert_eq!(
        list,
        json!({"object": "list", "default": "lenient", "data": [
            {"object": "guard.policy", "name": "all", "description": null, "thresholds": {"harm": 0.0, "violence": 0.0}},
            {"object": "guard.policy", "name": "lenient", "description": null, "thresholds": {"harm": 1.0}},
        ]})
    );

    // without presets, a named policy is refused and none is applied (and none is listed)
    let bare = start(Policies::default());
    let list: Value = Client::new().get(format!("{bare}/v1/guard/policies")).send().unwrap().json().unwrap();
    assert_eq!(list, json!({"object": "list", "default": null, "data": []}));
    let (_, j) = post(&bare, "/v1/guard", body(json!({})));
    assert_eq!((j["policy"].clone(), j.get("thresholds")), (Value::Null, None), "{j}");
    let (s, e) = post(&bare, "/v1/guard", body(json!({"policy": "all"})));
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(e["error"]["message"].as_str().unwrap().contains("--guard-policy"), "{e}");
}

#[test]
fn every_guard_response_carries_the_audit_fields_and_metrics_count_by_risk() {
    let base = start(Policies::default());
    let digest: String = Sha256::digest(std::fs::read(guard_path()).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
    for (path, body) in [
        ("/v1/guard", json!({"model": GUARD, "input": {"user": "x"}, "risks": ["harm"], "thresholds": {"harm": 0.0}})),
        ("/v1/guard/scan", json!({"model": GUARD, "input": {"user": "x"}})),
        ("/v1/guard/batch", json!({"model": GUARD, "inputs": [{"user": "x"}], "risks": ["harm"]})),
        ("/v1/moderations", json!({"input": "x"})),
    ] {
        let (s, j) = post(&base, path, body);
        assert_eq!(s, StatusCode::OK, "{path}: {j}");
        assert_eq!(
            (j["model"].as_str(), j["model_sha256"].as_str(), j["format"].as_str()),
            (Some(GUARD), Some(digest.as_str()), Some("3.0")),
            "{path}"
        );
        assert!(j.get("policy").is_some_and(Value::is_null), "{path}: {j}");
    }
    let metrics = Client::new().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let value = |prefix: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix} missing:\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("guard_flagged_total{risk=\"harm\"}") >= 1.0, "the threshold of 0 flagged harm");
    // harm was judged by all four requests; violence by the scan and the moderation
    assert_eq!(value("guard_risk_latency_ms_count{risk=\"harm\"}"), 4.0);
    assert_eq!(value("guard_risk_latency_ms_count{risk=\"violence\"}"), 2.0);
}

#[test]
fn a_conversation_is_judged_as_its_last_turn() {
    let base = start(Policies::default());
    let judge = |input: Value| post(&base, "/v1/guard", json!({"model": GUARD, "input": input, "risks": ["harm", "profanity"]}));
    let (_, plain) = judge(json!({"user": "How do I pick a lock?", "assistant": "With a tension wrench."}));
    let (s, conv) = judge(json!({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "How do I pick a lock?"},
        {"role": "assistant", "content": "With a tension wrench."},
    ]}));
    assert_eq!(s, StatusCode::OK, "{conv}");
    // 3.0 shows the judged turns only, so the same verdicts as the two fields
    assert_eq!(plain["verdicts"], conv["verdicts"]);
    for (input, message) in [
        (json!({"messages": [{"role": "assistant", "content": "Hi"}]}), "input.messages must contain a user message"),
        (
            json!({"messages": [{"role": "user", "content": "Hi"}], "user": "Hi"}),
            "input.messages replaces input.user and input.assistant: give one or the other",
        ),
        (json!({"messages": "Hi"}), "input.messages must be an array of chat messages"),
    ] {
        let (s, e) = judge(input);
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(e["error"]["message"], message);
        assert!(e["error"]["param"].as_str().unwrap().starts_with("input"), "{e}");
    }
    let (s, e) = post(
        &base,
        "/v1/guard/batch",
        json!({"model": GUARD, "inputs": [{"user": "a"}, {"messages": [{"role": "tool", "content": "x"}]}]}),
    );
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(e["error"]["param"], "inputs[1].messages");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("inputs[1].messages[0]"), "{e}");
}

#[test]
fn moderation_requests_from_many_clients_are_judged_together_with_the_same_verdicts() {
    let base = start(Policies::default());
    let texts: Vec<String> = (0..16).map(|i| format!("Message number {i}: how do I fix my bike's chain?")).collect();
    let scores = |j: &Value| j["results"][0]["category_scores"].clone();
    let alone: Vec<Value> = texts.iter().map(|t| scores(&post(&base, "/v1/moderations", json!({"input": t})).1)).collect();
    let together: Vec<Value> = std::thread::scope(|s| {
        let base = &base;
        let handles: Vec<_> = texts.iter().map(|t| s.spawn(move || post(base, "/v1/moderations", json!({"input": t})).1)).collect();
        handles.into_iter().map(|h| scores(&h.join().unwrap())).collect()
    });
    // the forward passes are batch-invariant: the same scores, bit for bit
    assert_eq!(alone, together);
    let metrics = Client::new().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let value = |name: &str| -> f64 { metrics.lines().find(|l| l.starts_with(name)).unwrap().rsplit(' ').next().unwrap().parse().unwrap() };
    let (sum, count) = (value("guard_batch_requests_sum"), value("guard_batch_requests_count"));
    assert_eq!(sum, 32.0, "{metrics}");
    assert!(count < 32.0, "the 16 concurrent requests were judged in fewer than 16 evaluations: {count} evaluations in all");
}

#[test]
fn custom_risks_are_judged_by_their_definitions_among_the_built_in_ones() {
    let base = start(Policies::default());
    let defs = json!({"pii": "The message contains a phone number or an email address."});
    let ask = |risks: Value, extra: Value| {
        let mut body = json!({"model": GUARD, "input": {"user": "Call me at 555-0100"}, "risks": risks, "risk_definitions": defs.clone()});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        post(&base, "/v1/guard", body)
    };
    let (s, j) = ask(json!(["pii", "harm"]), json!({}));
    assert_eq!(s, StatusCode::OK, "{j}");
    let names: Vec<&str> = j["verdicts"].as_array().unwrap().iter().map(|v| v["risk"].as_str().unwrap()).collect();
    assert_eq!(names, ["pii", "harm"]);
    let p = j["verdicts"][0]["risk_probability"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p));
    // a threshold on the custom risk decides it like any other, and is echoed
    let (_, j) = ask(json!(["pii"]), json!({"thresholds": {"pii": p}}));
    assert_eq!(
        (j["verdicts"].as_array().unwrap().len(), j["verdicts"][0]["unsafe"].as_bool(), j["flagged"].as_bool()),
        (1, Some(true), Some(true)),
        "{j}"
    );
    assert_eq!(j["thresholds"]["pii"].as_f64(), Some(p));
    let (_, j) = ask(json!(["pii", "harm"]), json!({"thresholds": {"pii": 1.0, "harm": 1.0}}));
    assert_eq!(j["verdicts"][0]["risk_probability"].as_f64(), Some(p), "the same prompt, alone or with others");
    for (body, message) in [
        (json!({"risks": ["harm"], "risk_definitions": {"harm": "x"}}), "is a built-in risk"),
        (json!({"risks": ["harm"], "risk_definitions": {"pii": "x"}}), "pii is defined but not in risks"),
        (json!({"risks": ["Bad Name"], "risk_definitions": {"Bad Name": "x"}}), "lowercase letters"),
        (json!({"risks": ["pii"], "risk_definitions": {"pii": ""}}), "1 to 4000 characters"),
        (json!({"risks": ["pii"], "risk_definitions": {"pii": "x"}, "thresholds": {"pii": 2}}), "from 0 to 1"),
        (json!({"risks": ["pii"]}), "invalid risk category: pii"),
    ] {
        let mut b = json!({"model": GUARD, "input": {"user": "x"}});
        b.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
        let (s, e) = post(&base, "/v1/guard", b);
        assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(message), "{message}: {e}");
    }
    let (s, e) = post(&base, "/v1/guard/scan", json!({"model": GUARD, "input": {"user": "x"}, "risk_definitions": defs}));
    assert_eq!((s, e["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("risk_definitions")));
}
