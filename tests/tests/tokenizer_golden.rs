//! Tokenizers against llama.cpp: the ids of every `.inp` text of llama.cpp's vocab test files
//! (`fixtures/tokenizer/`), and of the real gemma-3-270m tokenizer.

use engine::gguf::GgufFile;
use engine::tokenizer::Tokenizer;
use engine_tests::{fixture, read_json};

/// The 13 vocabularies with llama.cpp test vectors.
const VOCABS: &[&str] = &[
    "llama-spm", "phi-3", "llama-bpe", "gpt-2", "refact", "starcoder", "qwen2", "deepseek-coder",
    "deepseek-llm", "falcon", "mpt", "command-r", "bert-bge",
];

fn load(name: &str) -> Tokenizer {
    let path = fixture(&format!("tokenizer/ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The texts of a `.inp` file and the ids of its `.out` file.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(fixture(&format!("tokenizer/ggml-vocab-{name}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(fixture(&format!("tokenizer/ggml-vocab-{name}.gguf.out"))).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""), "{name}.inp ends with a separator");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: .inp and .out disagree on the number of cases");
    texts.into_iter().map(String::from).zip(ids).collect()
}

#[test]
fn every_vocab_matches_llama_cpp_on_every_case() {
    let mut failures = Vec::new();
    let mut total = 0;
    for name in VOCABS {
        let tok = load(name);
        for (text, want) in cases(name) {
            total += 1;
            let got = tok.encode(&text, false, false);
            if got != want {
                failures.push(format!("{name}: {text:?}\n   want {want:?}\n    got {got:?}"));
            }
        }
    }
    assert_eq!(total, 13 * 46);
    assert!(failures.is_empty(), "{} of {total} cases differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn round_trip_where_the_tokenizer_is_lossless() {
    // WordPiece lowercases and strips accents; SentencePiece falls back to byte tokens for
    // characters it has no piece for, and BPE is byte-exact. So decode(encode) is the text for
    // every vocabulary but BERT's, except where llama.cpp's detokenizer tidies spaces (" ," to
    // ",") for the vocabularies that ask for it.
    for name in VOCABS.iter().filter(|n| **n != "bert-bge") {
        let tok = load(name);
        for (text, _) in cases(name) {
            let ids = tok.encode(&text, false, false);
            let back = String::from_utf8(tok.detokenize(&ids, false, false)).unwrap();
            if back != text {
                // only space clean-up may differ; then the text must contain such a pattern
                let cleanable = [" ?", " !", " .", " ,", " '"].iter().any(|p| text.contains(p));
                assert!(cleanable, "{name}: {text:?} came back as {back:?}");
            }
        }
    }
}

#[test]
fn gemma_tokenizer_matches_llama_cpp() {
    let model = engine_tests::fetch_model("gemma");
    let file = GgufFile::open(&model).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let lines = std::fs::read_to_string(fixture("real/gemma-3-270m.tokenize.jsonl")).unwrap();
    let mut n = 0;
    for line in lines.lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = case["text"].as_str().unwrap();
        for (key, add, parse) in [
            ("ids_bos_special", true, true),
            ("ids_bos_nospecial", true, false),
            ("ids_nobos_special", false, true),
            ("ids_nobos_nospecial", false, false),
        ] {
            let want: Vec<u32> =
                case[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(tok.encode(text, add, parse), want, "{key} of {text:?}");
        }
        for (id, piece) in case["pieces"].as_object().unwrap() {
            let id: u32 = id.parse().unwrap();
            // JSON cannot hold a lone byte: the fixture has U+FFFD where a byte token's is
            assert_eq!(String::from_utf8_lossy(tok.token_bytes(id)), piece.as_str().unwrap(), "piece of {id}");
        }
        let ids: Vec<u32> = case["ids_bos_special"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let detok = String::from_utf8(tok.detokenize(&ids, false, true)).unwrap();
        assert_eq!(detok, case["detokenized_bos_special"].as_str().unwrap(), "detokenize {text:?}");
        n += 1;
    }
    assert_eq!(n, 30);

    let info = read_json(&fixture("real/gemma-3-270m.info.json"));
    let _ = info;
    assert_eq!(tok.eog_ids(), &[1, 106, 212]);
    assert_eq!((tok.bos(), tok.eos()), (Some(2), Some(1)));
}
