//! Samplers in a named order (llama-server's `samplers`) on a real vocabulary (StarCoder's):
//! temperature only where named, the order changing the result, and llama.cpp's `infill` step
//! (the fill ended when its ends weigh enough, a token whose text starts another's merged into
//! the likelier, only clear favourites kept).

use engine::sampling::{Distribution, Sampler, SamplerStep, SamplingParams};
use engine::tokenizer::{TokenId, Tokenizer};

fn starcoder() -> Tokenizer {
    engine_tests::vocab_tokenizer("starcoder")
}

/// Logits over `n` tokens: `given` where named, -10 elsewhere.
fn logits(n: usize, given: &[(TokenId, f32)]) -> Vec<f32> {
    let mut l = vec![-10.0; n];
    given.iter().for_each(|&(id, v)| l[id as usize] = v);
    l
}

fn ordered(order: &[SamplerStep], f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams { order: Some(order.to_vec()), ..SamplingParams::default() };
    f(&mut p);
    p
}

fn ids(d: &Distribution) -> Vec<TokenId> {
    d.candidates().map(|(id, _)| id).collect()
}

fn dist(tok: &Tokenizer, params: SamplingParams, l: &[f32]) -> Distribution {
    Sampler::new(params, &[]).distribution(l, tok).unwrap()
}

#[test]
fn temperature_applies_only_where_named_and_the_order_matters() {
    let tok = starcoder();
    let n = tok.n_vocab();
    let l = logits(n, &[(100, 2.0), (101, 1.0), (102, 0.0)]);
    // temperature 0 but not named: the three best at temperature 1, as llama-server's chain
    let d = dist(&tok, ordered(&[SamplerStep::TopK], |p| (p.temperature, p.top_k) = (0.0, 3)), &l);
    assert_eq!(ids(&d), [100, 101, 102]);
    let p: Vec<f32> = d.candidates().map(|(_, p)| p).collect();
    let e = [1.0f32, (-1.0f32).exp(), (-2.0f32).exp()];
    let total: f32 = e.iter().sum();
    for (got, want) in p.iter().zip(e.iter().map(|x| x / total)) {
        assert!((got - want).abs() < 1e-5, "{p:?}");
    }
    // named, 0 keeps the best
    let d = dist(&tok, ordered(&[SamplerStep::TopK, SamplerStep::Temperature], |p| (p.temperature, p.top_k) = (0.0, 3)), &l);
    assert_eq!(ids(&d), [100]);
    // a high temperature before top-p flattens what top-p sees: it keeps more
    let hot_first = ordered(&[SamplerStep::Temperature, SamplerStep::TopP], |p| (p.temperature, p.top_p) = (8.0, 0.5));
    let hot_last = ordered(&[SamplerStep::TopP, SamplerStep::Temperature], |p| (p.temperature, p.top_p) = (8.0, 0.5));
    let (first, last) = (dist(&tok, hot_first, &l), dist(&tok, hot_last, &l));
    assert_eq!(ids(&last), [100]);
    assert!(ids(&first).len() > 1000, "{} kept", ids(&first).len());
    // no order: the fixed pipeline, where temperature 0 is greedy
    let d = dist(&tok, SamplingParams { temperature: 0.0, top_k: 3, ..SamplingParams::default() }, &l);
    assert_eq!(ids(&d), [100]);
    // the names llama-server takes, its one-letter forms among them
    assert_eq!(SamplerStep::from_name("top-k"), Some(SamplerStep::TopK));
    assert_eq!(SamplerStep::from_name("nucleus"), Some(SamplerStep::TopP));
    assert_eq!(SamplerStep::from_name("typ_p"), Some(SamplerStep::TypicalP));
    assert_eq!(SamplerStep::from_name("top-n-sigma"), Some(SamplerStep::TopNSigma));
    assert_eq!(SamplerStep::from_name("dry"), Some(SamplerStep::Inert));
    assert_eq!(SamplerStep::from_name("mirostat"), None);
    assert_eq!(
        "kpi".chars().map(SamplerStep::from_char).collect::<Option<Vec<_>>>(),
        Some(vec![SamplerStep::TopK, SamplerStep::TopP, SamplerStep::Infill])
    );
    assert_eq!(
        "ysxd".chars().map(SamplerStep::from_char).collect::<Option<Vec<_>>>(),
        Some(vec![SamplerStep::TypicalP, SamplerStep::TopNSigma, SamplerStep::Xtc, SamplerStep::Inert])
    );
}

#[test]
fn the_infill_step_ends_merges_and_keeps_clear_favourites() {
    let tok = starcoder();
    let n = tok.n_vocab();
    let eot = tok.eos().unwrap();
    assert!(tok.is_eog(eot));
    let (ret, return_) = (tok.token_id("ret").unwrap(), tok.token_id("return").unwrap());
    let (x, y) = (tok.token_id("x").unwrap(), tok.token_id("y").unwrap());
    let infill = |l: &[f32], k: usize| dist(&tok, ordered(&[SamplerStep::TopK, SamplerStep::Infill], |p| p.top_k = k), l);
    // among 4 candidates, the end has a tenth of the text's weight: 3 x 0.09 x 4 > 0.91, so the
    // fill ends (only ends are left)
    let l = logits(n, &[(eot, 0.1f32.ln()), (x, 0.3f32.ln()), (y, 0.3f32.ln()), (ret, 0.3f32.ln())]);
    assert_eq!(ids(&infill(&l, 4)), [eot]);
    // the end too light: "ret" starts "return", so "return" gives its weight to the likelier
    // "ret" (0.30 + 0.25), then only it clears 0.2, then 1 / 2; the end stays
    let l = logits(n, &[(eot, 0.001f32.ln()), (ret, 0.30f32.ln()), (return_, 0.25f32.ln()), (x, 0.15f32.ln()), (y, 0.15f32.ln())]);
    let d = infill(&l, 5);
    let mut kept = vec![eot, ret];
    kept.sort_unstable();
    assert_eq!(ids(&d), kept);
    // the draw is by the survivors' own logits (llama.cpp's `dist` recomputes the softmax)
    let p_ret = d.candidates().find(|&(id, _)| id == ret).unwrap().1;
    assert!((p_ret - 0.30 / 0.301).abs() < 1e-4, "{p_ret}");
    // without the merge "return" (0.25) would have stayed beside "ret": two favourites
    let l = logits(
        n,
        &[(eot, 0.001f32.ln()), (ret, 0.30f32.ln()), (x, 0.25f32.ln()), (y, 0.15f32.ln()), (tok.token_id("z").unwrap(), 0.15f32.ln())],
    );
    assert_eq!(ids(&infill(&l, 5)).len(), 3, "the end, ret and x");
    // no text clears 0.2 (and no end among them): the end of text for certain
    let flat: Vec<(TokenId, f32)> = (200..210).map(|id| (id, 0.0)).collect();
    let d = infill(&logits(n, &flat), 10);
    assert_eq!(d.candidates().collect::<Vec<_>>(), [(eot, 1.0)]);
}
