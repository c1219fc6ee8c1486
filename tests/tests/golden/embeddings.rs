//! BERT sentence embeddings of all-MiniLM-L6-v2 (Q8_0) against llama.cpp's: token ids equal,
//! cosine similarity of every sentence's embedding, bitwise batch invariance, pooling choices,
//! and errors for broken files and bad input.

use std::sync::Arc;

use engine::embed::{embed, embed_tokens, Pooling};
use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::model::{BatchEntry, InputEntry, Model, ModelError};
use engine_tests::{fixture, read_json};

const MODEL: &str = "real/all-MiniLM-L6-v2-Q8_0.gguf";

fn model() -> Model {
    Model::load(fixture(MODEL)).unwrap()
}

struct Sentence {
    text: String,
    ids: Vec<u32>,
    llama_q8_0: Vec<f32>,
    numpy_f64: Vec<f64>,
}

fn sentences() -> Vec<Sentence> {
    let j = read_json(&fixture("real/all-MiniLM-L6-v2.embeddings.json"));
    let floats = |v: &serde_json::Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    j["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Sentence {
            text: s["text"].as_str().unwrap().to_string(),
            ids: s["ids_llama_cpp"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
            llama_q8_0: floats(&s["embedding_llama_cpp_q8_0"]).into_iter().map(|x| x as f32).collect(),
            numpy_f64: floats(&s["embedding_numpy_f64"]),
        })
        .collect()
}

fn cosine(a: &[f32], b: impl IntoIterator<Item = f64>) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, y) in a.iter().zip(b) {
        let x = f64::from(x);
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    dot / (na.sqrt() * nb.sqrt())
}

#[test]
fn loads_with_the_files_hyperparameters() {
    let m = model();
    let c = m.config();
    assert!(m.is_encoder());
    assert_eq!((c.n_embd, c.n_layer, c.n_head, c.n_ff, c.n_vocab, c.n_ctx_train), (384, 6, 12, 1536, 30522, 512));
    assert_eq!(Pooling::of_model(&m).unwrap(), Pooling::Mean);
}

#[test]
fn token_ids_equal_llama_cpp() {
    let m = model();
    for s in sentences() {
        assert_eq!(m.tokenizer().encode(&s.text, true, true), s.ids, "{:?}", s.text);
    }
}

#[test]
fn embeddings_match_llama_cpp() {
    let m = model();
    let sents = sentences();
    assert_eq!(sents.len(), 20);
    let (mut min_llama, mut min_ref) = (f64::INFINITY, f64::INFINITY);
    for s in &sents {
        let e = embed(&m, &[&s.text], None, true).unwrap().remove(0);
        assert_eq!(e.len(), 384);
        let norm: f64 = e.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        let c_llama = cosine(&e, s.llama_q8_0.iter().map(|&x| f64::from(x)));
        let c_ref = cosine(&e, s.numpy_f64.iter().copied());
        assert!(c_llama >= 0.999, "{:?}: cosine {c_llama} with llama.cpp", s.text);
        assert!(c_ref >= 0.998, "{:?}: cosine {c_ref} with the float64 reference", s.text);
        min_llama = min_llama.min(c_llama);
        min_ref = min_ref.min(c_ref);
    }
    eprintln!("minimum cosine: {min_llama:.7} with llama.cpp (Q8_0), {min_ref:.7} with the float64 reference");
}

#[test]
fn batch_invariance_all_at_once_vs_one_by_one() {
    let m = model();
    let sents = sentences();
    let texts: Vec<&str> = sents.iter().map(|s| s.text.as_str()).collect();
    for pooling in [Pooling::Mean, Pooling::Cls, Pooling::Last] {
        let all = embed(&m, &texts, Some(pooling), true).unwrap();
        assert_eq!(all.len(), texts.len());
        for (i, t) in texts.iter().enumerate() {
            let one = embed(&m, &[t], Some(pooling), true).unwrap().remove(0);
            let same = one.iter().zip(&all[i]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{pooling:?}: text {i} differs alone and in the batch");
        }
    }
    // more tokens than one encoder call takes: the texts are split over several calls
    let long: Vec<String> = (0..7).map(|i| format!("sentence number {i} says ") + &"something long ".repeat(170)).collect();
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    let many = embed(&m, &long, None, true).unwrap();
    for i in [0, 3, 6] {
        let one = embed(&m, &[long[i]], None, true).unwrap().remove(0);
        assert!(one.iter().zip(&many[i]).all(|(a, b)| a.to_bits() == b.to_bits()), "long text {i}");
    }
    // reversed order too: a text's neighbours never matter
    let rev: Vec<&str> = texts.iter().rev().copied().collect();
    let a = embed(&m, &texts, None, false).unwrap();
    let b = embed(&m, &rev, None, false).unwrap();
    for (i, v) in a.iter().enumerate() {
        assert!(v.iter().zip(&b[texts.len() - 1 - i]).all(|(x, y)| x.to_bits() == y.to_bits()), "text {i}");
    }
}

#[test]
fn pooling_choices() {
    let m = model();
    let text = "A man is playing a guitar.";
    let tokens = embed_tokens(&m, &[text], false).unwrap().remove(0);
    let n = m.tokenizer().encode(text, true, true).len();
    assert_eq!(tokens.len(), n);
    let cls = embed(&m, &[text], Some(Pooling::Cls), false).unwrap().remove(0);
    let last = embed(&m, &[text], Some(Pooling::Last), false).unwrap().remove(0);
    assert_eq!(cls, tokens[0]);
    assert_eq!(last, tokens[n - 1]);
    let mean = embed(&m, &[text], Some(Pooling::Mean), false).unwrap().remove(0);
    for (d, &v) in mean.iter().enumerate() {
        let expected = tokens.iter().map(|t| f64::from(t[d])).sum::<f64>() / n as f64;
        assert!((f64::from(v) - expected).abs() < 1e-6);
    }
    let err = embed(&m, &[text], Some(Pooling::None), true).unwrap_err();
    assert!(err.to_string().contains("pooling none"), "{err}");
    assert!(embed(&m, &[], None, true).unwrap().is_empty());
}

#[test]
fn empty_text_embeds_cls_sep_and_long_text_is_an_error() {
    let m = model();
    assert_eq!(m.tokenizer().encode("", true, true), vec![101, 102]);
    let e = embed(&m, &[""], None, true).unwrap();
    assert_eq!(e[0].len(), 384);
    assert!(e[0].iter().all(|v| v.is_finite()));

    let long = "word ".repeat(600);
    let err = embed(&m, &["short", &long], None, true).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("text 1") && msg.contains("512") && msg.contains("bert.context_length"), "{msg}");
    // exactly the context fits: 510 words + [CLS] + [SEP]
    let fits = "word ".repeat(510);
    assert_eq!(embed(&m, &[&fits], None, true).unwrap()[0].len(), 384);
}

#[test]
fn forward_on_an_encoder_is_an_error() {
    let m = model();
    let mut kv = m.new_kv_cache(engine::kv_cache::KvType::F32, 8);
    let err = m.forward(&mut kv, &BatchEntry::sequence(0, &[101, 102], 0, false)).unwrap_err();
    assert!(matches!(err, ModelError::BadBatch(_)) && err.to_string().contains("encoder"), "{err}");
    let err = m.encode(&[vec![101u32, 40000]]).unwrap_err();
    assert!(err.to_string().contains("40000"), "{err}");
    let empty: [&[u32]; 1] = [&[]];
    assert!(m.encode(&empty).is_err());
}

/// The fixture model rewritten: metadata through `meta`, tensors through `tensor` (which may
/// drop one or change its shape).
fn rewritten(meta: impl Fn(&str, &Value) -> Option<Value>, tensor: impl Fn(&str, &[u64]) -> Option<Vec<u64>>) -> Result<Model, ModelError> {
    let file = GgufFile::open(fixture(MODEL)).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        if let Some(v) = meta(key, value) {
            w.add(key.clone(), v).unwrap();
        }
    }
    for t in file.tensors() {
        if let Some(dims) = tensor(&t.name, &t.dims) {
            let data = file.tensor_data(t);
            let n_bytes = engine::gguf::TensorInfo::new("x", dims.clone(), t.ty, 0).unwrap().n_bytes as usize;
            // a reshaped tensor keeps a prefix of its data (or zeros past it)
            let mut bytes = data[..n_bytes.min(data.len())].to_vec();
            bytes.resize(n_bytes, 0);
            w.add_tensor(t.name.clone(), &dims, t.ty, bytes).unwrap();
        }
    }
    Model::from_file(Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()))
}

#[test]
fn broken_files_give_errors_naming_the_problem() {
    let keep = |_: &str, v: &Value| Some(v.clone());
    let all = |_: &str, d: &[u64]| Some(d.to_vec());
    // the unchanged copy loads and embeds like the file
    let copy = rewritten(keep, all).unwrap();
    assert_eq!(embed(&copy, &["hello"], None, true).unwrap(), embed(&model(), &["hello"], None, true).unwrap());

    let err = rewritten(keep, |n, d| (n != "blk.3.ffn_up.weight").then(|| d.to_vec())).unwrap_err();
    assert!(matches!(&err, ModelError::MissingTensor(n) if n == "blk.3.ffn_up.weight"), "{err}");
    assert!(err.to_string().contains("blk.3.ffn_up.weight"));

    let err = rewritten(keep, |n, d| (n != "blk.0.attn_output_norm.bias").then(|| d.to_vec())).unwrap_err();
    assert!(matches!(&err, ModelError::MissingTensor(n) if n == "blk.0.attn_output_norm.bias"), "{err}");

    let err = rewritten(keep, |n, d| Some(if n == "position_embd.weight" { vec![384, 256] } else { d.to_vec() })).unwrap_err();
    assert!(matches!(&err, ModelError::TensorShape { name, .. } if name == "position_embd.weight"), "{err}");

    let err = rewritten(keep, |n, d| Some(if n == "token_types.weight" { vec![128, 6] } else { d.to_vec() })).unwrap_err();
    assert!(matches!(&err, ModelError::TensorShape { name, .. } if name == "token_types.weight"), "{err}");

    let err = rewritten(|k, v| (k != "bert.attention.layer_norm_epsilon").then(|| v.clone()), all).unwrap_err();
    assert!(matches!(&err, ModelError::MissingKey(k) if k == "bert.attention.layer_norm_epsilon"), "{err}");

    // an unknown pooling type loads, and embedding says what is wrong
    let m = rewritten(|k, v| Some(if k == "bert.pooling_type" { Value::U32(9) } else { v.clone() }), all).unwrap();
    let err = embed(&m, &["hello"], None, true).unwrap_err();
    assert!(err.to_string().contains("bert.pooling_type"), "{err}");
    assert!(embed(&m, &["hello"], Some(Pooling::Mean), true).is_ok());
}

#[test]
fn decoder_embeddings_are_its_final_hidden_states() {
    let m = Model::load(fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    assert!(!m.is_encoder());
    // longer than one decoder chunk, so the text is fed in several forward calls
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(8);
    let ids = m.tokenizer().encode(&text, true, true);
    assert!(ids.len() > 100, "{}", ids.len());
    let e = m.config().n_embd;
    let mut kv = m.new_kv_cache(engine::kv_cache::KvType::F32, ids.len());
    let entries: Vec<InputEntry> = BatchEntry::sequence(0, &ids, 0, true).into_iter().map(|e| InputEntry::from(e).with_hidden()).collect();
    let all = m.forward_inputs(&mut kv, &entries).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // a generating step leaves the hidden states on the device
    let mut kv = m.new_kv_cache(engine::kv_cache::KvType::F32, ids.len());
    assert!(m.forward(&mut kv, &BatchEntry::sequence(0, &ids, 0, true)).unwrap().hidden.is_empty());

    let rows = embed_tokens(&m, &[&text], false).unwrap().remove(0);
    assert_eq!(rows.len(), ids.len());
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(bits(r), bits(&all.hidden[i * e..(i + 1) * e]), "row {i}");
    }
    let last = embed(&m, &[&text], Some(Pooling::Last), false).unwrap().remove(0);
    assert_eq!(bits(&last), bits(&rows[ids.len() - 1]));
    let cls = embed(&m, &[&text], Some(Pooling::Cls), false).unwrap().remove(0);
    assert_eq!(bits(&cls), bits(&rows[0]));
    let mean = embed(&m, &["short", &text], Some(Pooling::Mean), true).unwrap();
    assert_eq!(bits(&mean[1]), bits(&embed(&m, &[&text], Some(Pooling::Mean), true).unwrap()[0]));

    // the file names no pooling: none, which gives no single vector per text
    let err = embed(&m, &[&text], None, true).unwrap_err();
    assert!(err.to_string().contains("pooling none"), "{err}");
    let err = m.encode(&[ids]).unwrap_err();
    assert!(err.to_string().contains("decoder"), "{err}");
}
