//! Tokenizers against llama.cpp: the ids of every `.inp` text of llama.cpp's vocab test files
//! (`fixtures/tokenizer/`), and of the real gemma-3-270m tokenizer.

use engine::gguf::GgufFile;
use engine::tokenizer::Tokenizer;
use engine_tests::{fixture, json_ids, read_json, vocab_tokenizer, VOCABS};

/// The texts of a `.inp` file and the ids of its `.out` file.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(fixture(&format!("tokenizer/ggml-vocab-{name}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(fixture(&format!("tokenizer/ggml-vocab-{name}.gguf.out"))).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""), "{name}.inp ends with a separator");
    let ids: Vec<Vec<u32>> = out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect();
    assert_eq!(texts.len(), ids.len(), "{name}: .inp and .out disagree on the number of cases");
    texts.into_iter().map(String::from).zip(ids).collect()
}

#[test]
fn every_vocab_matches_llama_cpp_on_every_case() {
    let mut failures = Vec::new();
    let mut total = 0;
    for name in VOCABS {
        let tok = vocab_tokenizer(name);
        for (text, want) in cases(name) {
            total += 1;
            let got = tok.encode(&text, false, false);
            if got != want {
                failures.push(format!("{name}: {text:?}\n   want {want:?}\n    got {got:?}"));
            }
        }
    }
    // 46 texts for each vocabulary but qwen35's 50
    assert_eq!(total, 13 * 46 + 50);
    assert!(failures.is_empty(), "{} of {total} cases differ:\n{}", failures.len(), failures.join("\n"));
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// `golden/NAME.json` (the vocab's own texts) and `golden/NAME.special.json` (chat and control
/// tokens of every vocabulary in text), made by llama.cpp's `llama-golden`
/// (tools/make-tokenizer-goldens.sh): ids for add_special x parse_special, every id's piece, and
/// the detokenization of the add_special + parse_special ids.
#[test]
fn every_vocab_matches_llama_cpp_with_special_tokens_pieces_and_detokenization() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for name in VOCABS {
        let tok = vocab_tokenizer(name);
        for golden in [format!("tokenizer/golden/{name}.json"), format!("tokenizer/golden/{name}.special.json")] {
            checked += check_golden(&tok, &golden, &mut failures);
        }
    }
    assert!(checked > (13 * (46 + 17) + 50 + 17) * 4 - 1);
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// The pre-tokenizers no test vocabulary names: gpt-oss's (`gpt-4o`), Mistral 3's (`tekken`),
/// GLM-4's (`glm4`, and GLM-4-9B-chat's `chatglm-bpe`), OLMo's (`olmo`, and OLMo 2's `dbrx`),
/// DeepSeek-V3's (`deepseek-v3`), SmolLM's (`smollm`) and `smaug-bpe`: llama-bpe's vocabulary
/// relabelled in memory, against llama.cpp on the same relabelling
/// (tools/make-pretokenizer-goldens.sh, `golden/llama-bpe-as-PRE.json`).
const RELABELLED_PRE_TOKENIZERS: [&str; 9] =
    ["gpt-4o", "tekken", "glm4", "chatglm-bpe", "dbrx", "olmo", "deepseek-v3", "smollm", "smaug-bpe"];

#[test]
fn relabelled_vocabularies_split_words_as_llama_cpp() {
    let base = engine_tests::vocab_file("llama-bpe");
    let mut failures = Vec::new();
    for pre in RELABELLED_PRE_TOKENIZERS {
        let mut w = engine::gguf::GgufWriter::new();
        for (key, value) in base.metadata() {
            let value = if key == "tokenizer.ggml.pre" { engine::gguf::Value::String(pre.into()) } else { value.clone() };
            w.add(key.clone(), value).unwrap();
        }
        let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let tok = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{pre}: {e}"));
        let checked = check_golden(&tok, &format!("tokenizer/golden/llama-bpe-as-{pre}.json"), &mut failures);
        assert_eq!(checked, 59 * 4, "{pre}: every text in every mode");
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// Compares `tok` with one llama-golden tokenization file (`fixture` path): ids for add_special
/// x parse_special, every id's piece, the detokenization of the add + parse ids. Returns the id
/// lists compared; differences go to `failures`.
fn check_golden(tok: &Tokenizer, golden: &str, failures: &mut Vec<String>) -> usize {
    let g = read_json(&fixture(golden));
    assert_eq!(g["n_vocab"].as_u64(), Some(tok.n_vocab() as u64), "{golden}");
    assert_eq!(g["add_bos"].as_bool(), Some(tok.add_bos()), "{golden}: add_bos");
    assert_eq!(g["add_eos"].as_bool(), Some(tok.add_eos()), "{golden}: add_eos");
    let mut checked = 0;
    for case in g["texts"].as_array().unwrap() {
        let text = String::from_utf8(unhex(case["hex"].as_str().unwrap())).unwrap();
        for add in [false, true] {
            for parse in [false, true] {
                let key = format!("ids_add{}_parse{}", add as u8, parse as u8);
                let want = json_ids(&case[&key]);
                let got = tok.encode(&text, add, parse);
                if got != want {
                    failures.push(format!("{golden} {key} {text:?}\n   want {want:?}\n    got {got:?}"));
                }
                checked += 1;
            }
        }
        for (id, hex) in case["pieces_hex"].as_object().unwrap() {
            let id: u32 = id.parse().unwrap();
            if tok.token_bytes(id) != unhex(hex.as_str().unwrap()) {
                failures.push(format!("{golden}: piece of {id}"));
            }
        }
        let detok = tok.detokenize(&json_ids(&case["ids_add1_parse1"]), false, true);
        if detok != unhex(case["detok_add1_parse1_hex"].as_str().unwrap()) {
            failures.push(format!("{golden}: detokenize {text:?}"));
        }
    }
    checked
}

/// decode(encode(text)) == text wherever llama.cpp's own round trip holds (it does not where
/// WordPiece lowercases or where a vocabulary's detokenizer tidies " ," into ",").
#[test]
fn round_trip_wherever_llama_cpp_round_trips() {
    let mut held = 0;
    for name in VOCABS {
        let tok = vocab_tokenizer(name);
        let g = read_json(&fixture(&format!("tokenizer/golden/{name}.json")));
        for case in g["texts"].as_array().unwrap() {
            let text = unhex(case["hex"].as_str().unwrap());
            let with_bos = json_ids(&case["ids_add1_parse1"]);
            let mut expect = with_bos.first().filter(|_| tok.add_bos()).map(|&b| tok.token_bytes(b).to_vec()).unwrap_or_default();
            expect.extend_from_slice(&text);
            if tok.kind() == engine::tokenizer::TokenizerKind::Wpm {
                continue; // [CLS] text [SEP]: never the text itself
            }
            if unhex(case["detok_add1_parse1_hex"].as_str().unwrap()) != expect {
                continue;
            }
            let text = String::from_utf8(text).unwrap();
            let ours = tok.encode(&text, false, false);
            assert_eq!(tok.detokenize(&ours, false, false), text.as_bytes(), "{name}: {text:?}");
            assert_eq!(tok.decode(&ours), text, "{name}: {text:?}");
            held += 1;
        }
    }
    // llama.cpp round-trips most of the 12 x 46 non-WordPiece cases
    assert!(held > 400, "only {held} cases round-trip");
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
            let want: Vec<u32> = case[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(tok.encode(text, add, parse), want, "{key} of {text:?}");
        }
        for (id, piece) in case["pieces"].as_object().unwrap() {
            let id: u32 = id.parse().unwrap();
            // JSON cannot hold a lone byte: the fixture has U+FFFD where a byte token's is
            assert_eq!(String::from_utf8_lossy(tok.token_bytes(id)), piece.as_str().unwrap(), "piece of {id}");
        }
        let ids: Vec<u32> = case["ids_bos_special"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let detok = String::from_utf8(tok.detokenize(&ids, false, true)).unwrap();
        assert_eq!(detok, case["detokenized_bos_special"].as_str().unwrap(), "detokenize {text:?}");
        n += 1;
    }
    assert_eq!(n, 30);

    // the end-of-generation set and special ids llama.cpp reported for the file
    let info = read_json(&fixture("real/gemma-3-270m.info.json"));
    assert_eq!(tok.eog_ids(), json_ids(&info["eog_token_ids_llama_cpp"]));
    assert_eq!(tok.eog_ids(), &[1, 106, 212]);
    let t = &info["tokenizer"];
    let id = |k: &str| t[k].as_u64().map(|v| v as u32);
    assert_eq!((tok.bos(), tok.eos()), (id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id")));
    assert_eq!((tok.bos(), tok.eos()), (Some(2), Some(1)));
}

/// 1 MiB of English (the benchmark text) under three vocabularies: the whole id sequence equals
/// llama-tokenize's (compared by count and sha256 of its printed list).
#[test]
fn a_megabyte_of_english_matches_llama_cpp() {
    use sha2::{Digest, Sha256};
    let golden = read_json(&fixture("tokenizer/golden/english-1mib.json"));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(golden["text"].as_str().unwrap())).unwrap();
    for name in ["llama-bpe", "refact", "llama-spm"] {
        let ids = vocab_tokenizer(name).encode(&text, false, false);
        let listed = format!("{ids:?}");
        let sha = format!("{:x}", Sha256::digest(listed.as_bytes()));
        assert_eq!(ids.len() as u64, golden[name]["n_tokens"].as_u64().unwrap(), "{name}");
        assert_eq!(sha, golden[name]["sha256_ids"].as_str().unwrap(), "{name}");
    }
}

/// Fill-in-the-middle prompts: `[BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>` with the
/// tokens llama.cpp finds in each vocabulary (by metadata or by their text), the code read as
/// plain text; a vocabulary without them is an error naming the token it lacks.
#[test]
fn fim_prompts_lay_out_prefix_suffix_and_middle_with_each_vocabulary_s_tokens() {
    use engine::tokenizer::fim::{can_fill, fim_prompt, FimOrder, NoFimToken};
    let (prefix, suffix) = ("def f(x):\n    <|im_start|>return ", "\n\nprint(f(2))\n");
    let mut filling = Vec::new();
    for name in engine_tests::VOCABS {
        let tok = engine_tests::vocab_tokenizer(name);
        match fim_prompt(&tok, prefix, suffix, FimOrder::PrefixSuffixMiddle) {
            Ok(ids) => {
                let s = tok.special_tokens();
                let mut expected: Vec<_> = tok.add_bos().then(|| tok.bos().unwrap()).into_iter().collect();
                expected.push(s.fim_pre.unwrap());
                expected.extend(tok.encode(prefix, false, false));
                expected.push(s.fim_suf.unwrap());
                expected.extend(tok.encode(suffix, false, false));
                expected.push(s.fim_mid.unwrap());
                assert_eq!(ids, expected, "{name}");
                // the special token's text in the code stays text
                assert!(tok.token_id("<|im_start|>").is_none_or(|im| !ids.contains(&im)), "{name}");
                assert!(can_fill(&tok));
                filling.push(*name);
            }
            Err(NoFimToken(which)) => assert!(!can_fill(&tok) && ["pre", "suf", "mid"].contains(&which), "{name}"),
        }
    }
    // the code models' vocabularies have them (found by their text); the others do not
    assert_eq!(filling, ["refact", "starcoder", "deepseek-coder"]);
    let starcoder = engine_tests::vocab_tokenizer("starcoder");
    let ids = fim_prompt(&starcoder, "a", "b", FimOrder::PrefixSuffixMiddle).unwrap();
    let text: Vec<String> = ids.iter().map(|&t| String::from_utf8_lossy(starcoder.token_bytes(t)).into_owned()).collect();
    assert_eq!(text, ["<fim_prefix>", "a", "<fim_suffix>", "b", "<fim_middle>"]);
    // suffix first (llama.cpp's --spm-infill)
    let ids = fim_prompt(&starcoder, "a", "b", FimOrder::SuffixPrefixMiddle).unwrap();
    let text: Vec<String> = ids.iter().map(|&t| String::from_utf8_lossy(starcoder.token_bytes(t)).into_owned()).collect();
    assert_eq!(text, ["<fim_suffix>", "b", "<fim_prefix>", "a", "<fim_middle>"]);
}

/// llama-server's `/infill` prompt: the repository-level layout as far as the vocabulary has its
/// tokens (Refact's `<reponame>`, but no file separator that llama.cpp knows: the files are
/// then parted by a snippet line), the prefix cut to its last three quarters of a batch, the
/// suffix to what the last quarter leaves after the middle's start, the other files to what the
/// context leaves after a batch and twice the generation.
#[test]
fn infill_prompts_keep_llama_server_s_layout_and_budget() {
    use engine::tokenizer::fim::{fim_prompt, infill_prompt, FimOrder, Infill, InfillBudget};
    let tok = engine_tests::vocab_tokenizer("refact");
    let s = tok.special_tokens();
    let (rep, pre, suf, mid) = (s.fim_rep.unwrap(), s.fim_pre.unwrap(), s.fim_suf.unwrap(), s.fim_mid.unwrap());
    assert_eq!(s.fim_sep, None);
    let text = |t: &str| tok.encode(t, false, false);
    let extra = vec![("util.py".to_string(), "def helper():\n    pass\n".to_string())];
    let infill = Infill { prefix: "def f(x):\n    return ", suffix: "\n\nprint(f(2))\n", middle_start: "x", extra: &extra };
    let roomy = InfillBudget { n_batch: 2048, n_ctx: 4096, n_predict: Some(64) };
    let mut expected = vec![rep];
    expected.extend(text("myproject\n"));
    expected.extend(text("\n\n--- snippet ---\n\n"));
    expected.extend(text("def helper():\n    pass\n"));
    expected.push(pre);
    expected.extend(text("def f(x):\n    return "));
    expected.extend(text("x"));
    expected.push(suf);
    expected.extend(text("\n\nprint(f(2))\n"));
    expected.push(mid);
    assert_eq!(infill_prompt(&tok, &infill, roomy, FimOrder::PrefixSuffixMiddle).unwrap(), expected);
    // no room in the context for the other files: one file's layout with the middle's start
    let tight = InfillBudget { n_batch: 2048, n_ctx: 2048, n_predict: Some(16) };
    let plain = Infill { middle_start: "", extra: &[], ..infill };
    assert_eq!(
        infill_prompt(&tok, &plain, tight, FimOrder::PrefixSuffixMiddle).unwrap(),
        fim_prompt(&tok, plain.prefix, plain.suffix, FimOrder::PrefixSuffixMiddle).unwrap()
    );
    // a batch of 8: the prefix keeps its last 6 tokens, the suffix none (8/4 - 2 - 1 < 0, the
    // middle's start being one token), the context none for the other files
    let small = InfillBudget { n_batch: 8, n_ctx: 8, n_predict: Some(1) };
    let ids = infill_prompt(&tok, &infill, small, FimOrder::PrefixSuffixMiddle).unwrap();
    let prefix = text(infill.prefix);
    assert!(prefix.len() > 6, "the prefix is longer than its budget");
    let mut expected = vec![pre];
    expected.extend_from_slice(&prefix[prefix.len() - 6..]);
    expected.extend(text("x"));
    expected.extend([suf, mid]);
    assert_eq!(ids, expected);
}
