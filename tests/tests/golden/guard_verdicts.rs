//! The answer-position Yes/No probabilities of the tiny Guardian-shaped models against
//! llama.cpp's (`fixtures/guardian/models/goldens.json`), and the yes/no token sets.
//!
//! The goldens were made with llama.cpp's defaults: flash attention (its tiled CPU kernel for
//! prompts) and an f16 KV cache. Our logits are bit-equal to llama.cpp's at every position of
//! all 24 prompts (the attention, SwiGLU, rope and Q8_0 matmul follow ggml's arithmetic), so the
//! test asks for 1e-6, far inside the fixture's 1e-3: the random N(0, 0.6) weights make these
//! models chaotic, and before that arithmetic was matched, single-ulp differences grew into
//! 1.6e-3 of risk probability and 3.7e-2 of log-prob on three prompts.

use engine::guard::verdict::risk_probability;
use engine::guard::YesNoTokens;
use engine::kv_cache::KvType;
use engine::logprobs::log_softmax;
use engine::model::{BatchEntry, Model};
use engine_tests::{fixture, json_ids, read_json};

#[test]
fn answer_position_yes_no_matches_llama_cpp() {
    let goldens = read_json(&fixture("guardian/models/goldens.json"));
    let mut total = 0;
    for (format, cases) in goldens["formats"].as_object().unwrap() {
        let model = Model::load(fixture(&format!("guardian/models/guardian-tiny-{format}-q8_0.gguf"))).unwrap();
        let yn = YesNoTokens::of(model.tokenizer());
        assert_eq!(yn.yes, json_ids(&goldens["yes_ids"]), "{format}");
        assert_eq!(yn.no, json_ids(&goldens["no_ids"]), "{format}");
        for case in cases.as_array().unwrap() {
            let tokens = json_ids(&case["tokens"]);
            let mut kv = model.new_kv_cache(KvType::F16, tokens.len());
            let logits = model.forward(&mut kv, &BatchEntry::sequence(0, &tokens, 0, false)).unwrap();
            let row = logits.row(0);
            let lp = log_softmax(row);
            let mut worst_lp = 0.0f64;
            for key in ["logprob_yes", "logprob_no"] {
                for (id, want) in case[key].as_object().unwrap() {
                    let got = f64::from(lp[id.parse::<usize>().unwrap()]);
                    worst_lp = worst_lp.max((got - want.as_f64().unwrap()).abs());
                }
            }
            let (p_yes, p_no) = yn.probabilities(row);
            let prob = f64::from(risk_probability(p_yes, p_no).unwrap());
            let diff = (prob - case["risk_probability"].as_f64().unwrap()).abs();
            assert!(
                diff < 1e-6 && worst_lp < 1e-5,
                "{format} {}: risk probability off by {diff:.2e}, log-prob by {worst_lp:.2e}",
                case["case"]
            );
            total += 1;
        }
    }
    assert_eq!(total, 24);
}
