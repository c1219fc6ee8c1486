//! `engine-cli run` on the tiny fixture models: greedy output equals llama.cpp's greedy tokens,
//! only the continuation goes to stdout, and unsupported options are one-line errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use engine::gguf::GgufFile;
use engine::tokenizer::{StreamDecoder, TokenId, Tokenizer};
use serde_json::Value;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models").join(rel)
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engine-cli")).arg("run").args(args).output().expect("run engine-cli")
}

/// The text `run` streams for `ids`: each token's piece through a stream decoder.
fn streamed_text(model: &Path, ids: &[TokenId]) -> String {
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(model).unwrap()).unwrap();
    let mut d = StreamDecoder::new(false);
    let mut text: String = ids.iter().map(|&id| d.push(&tokenizer, id)).collect();
    text.push_str(&d.finish());
    text
}

fn golden_greedy(name: &str) -> Vec<TokenId> {
    let text = std::fs::read_to_string(fixture(&format!("golden/{name}.logits.json"))).unwrap();
    let j: Value = serde_json::from_str(&text).unwrap();
    j["sequences"][1]["greedy"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as TokenId).collect()
}

#[test]
fn greedy_continuation_matches_llama_cpp() {
    for (name, prompt) in [("tiny-llama-F32", "The quick"), ("tiny-granite-F32", "The quick b")] {
        let model = fixture(&format!("{name}.gguf"));
        let m = model.to_str().unwrap();
        let out = run(&["--model", m, "--prompt", prompt, "-n", "16", "--temp", "0", "--kv-type", "f32"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let want = streamed_text(&model, &golden_greedy(name));
        assert!(!want.is_empty());
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{name}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("prompt: 7 tokens") && err.contains("generation: 16 tokens"), "{err}");
    }
}

/// A Mixture-of-experts model given token ids (`--tokens`): the greedy continuation is
/// llama.cpp's, each id printed as the id-only vocabulary spells it (hex).
#[test]
fn token_ids_continue_greedily_as_llama_cpp_does() {
    let archs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/archs");
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(archs.join("golden/qwen3moe-s1.logits.json")).unwrap()).unwrap();
    let seq = &golden["sequences"][0];
    let ids: Vec<String> = seq["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    let model = archs.join("qwen3moe-s1.gguf");
    let out = run(&["-m", model.to_str().unwrap(), "--tokens", &ids.join(","), "-n", "12", "--temp", "0", "--kv-type", "f32"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want: String = seq["gen"].as_array().unwrap()[..12].iter().map(|id| format!("{:x}", id.as_u64().unwrap())).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}

#[test]
fn stops_at_end_of_generation_without_printing_it() {
    // tiny-granite repeats its last token: after <|end_of_text|> (parsed as the control token)
    // it picks <|end_of_text|>, so nothing is generated
    let model = fixture("tiny-granite-F32.gguf");
    let out = run(&["-m", model.to_str().unwrap(), "-p", "The quick b<|end_of_text|>", "-n", "8", "-t", "1", "--temp", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "{:?}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("prompt: 8 tokens") && err.contains("finish reason stop"), "{err}");
}

#[test]
fn seeded_sampling_repeats_and_bad_values_are_refused_in_one_line() {
    let model = fixture("tiny-llama-F32.gguf");
    let m = model.to_str().unwrap();
    let args = ["-m", m, "-p", "The quick", "-n", "12", "--temp", "1.2", "--top-k", "0", "--seed", "18446744073709551615"];
    let (a, b) = (run(&args), run(&args));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    assert!(String::from_utf8_lossy(&a.stderr).contains("seed 18446744073709551615"));

    // llama.cpp's other samplers: seeded, they repeat too, and XTC changes the text
    let xtc = [
        args.as_slice(),
        &["--xtc-probability", "1", "--xtc-threshold", "0.01", "--typical", "0.9", "--dynatemp-range", "0.3", "--dry-multiplier", "0.8"],
    ]
    .concat();
    let (c, d) = (run(&xtc), run(&xtc));
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert_eq!(c.stdout, d.stdout);
    assert_ne!(c.stdout, a.stdout);
    for (flag, value) in [
        ("--top-p", "1.5"),
        ("--temp", "-1"),
        ("--logit-bias", "99999=1"),
        ("--presence-penalty", "3"),
        ("--draft-p-min", "1.5"),
        ("--xtc-probability", "2"),
        ("--typical", "1.5"),
        ("--dry-base", "0.5"),
    ] {
        let out = run(&["-m", m, "-p", "The quick", flag, value]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_draft_model_gives_the_same_greedy_text() {
    let target = fixture("tiny-llama-F32.gguf");
    let draft = fixture("tiny-llama-Q4_0.gguf");
    let base = ["-m", target.to_str().unwrap(), "-p", "The quick", "-n", "16", "--temp", "0", "--kv-type", "f32"];
    let alone = run(&base);
    let mut with = base.to_vec();
    with.extend(["--draft", draft.to_str().unwrap(), "--draft-n", "4"]);
    let drafted = run(&with);
    assert!(drafted.status.success(), "{}", String::from_utf8_lossy(&drafted.stderr));
    assert_eq!(alone.stdout, drafted.stdout);
    let err = String::from_utf8(drafted.stderr).unwrap();
    assert!(err.contains("draft: ") && err.contains("accepted"), "{err}");

    // a head of the draft's first 200 of 512 token ids: the same text
    with.extend(["--draft-vocab", "200"]);
    let headed = run(&with);
    assert!(headed.status.success(), "{}", String::from_utf8_lossy(&headed.stderr));
    assert_eq!(alone.stdout, headed.stdout);
    let err = String::from_utf8(headed.stderr).unwrap();
    assert!(err.contains("logits for its first 200 of 512 token ids"), "{err}");
}

#[test]
fn errors_are_one_line_with_exit_code_2() {
    let out = run(&["-m", "/no/such/model.gguf", "-p", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.lines().count() == 1 && err.contains("/no/such/model.gguf"), "{err}");

    // a context too small for the prompt and -n
    let model = fixture("tiny-llama-F32.gguf");
    let out = run(&["-m", model.to_str().unwrap(), "-p", "The quick", "-n", "16", "--ctx-size", "8"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.lines().count() == 1 && err.contains("--ctx-size 8"), "{err}");
}

fn vision(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vision").join(rel)
}

/// `--mmproj --image`: the first greedy token after the image prompt is llama.cpp's top token
/// after the same prompt (`tests/fixtures/vision/gemma3-tile-32.logits.bin`), for both
/// placements of the image (its marker in the text, or none: the image goes first).
#[test]
fn an_image_prompt_continues_with_llama_cpps_top_token() {
    let lm = vision("tiny-vlm.gguf");
    let prompt = std::fs::read_to_string(vision("prompt.txt")).unwrap();
    let bytes = std::fs::read(vision("gemma3-tile-32.logits.bin")).unwrap();
    let logits: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let top = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as TokenId;
    let (m, p, i) = (lm.to_str().unwrap(), vision("tiny-gemma3-mmproj.gguf"), vision("tile-32.png"));
    let args =
        ["--model", m, "--mmproj", p.to_str().unwrap(), "--image", i.to_str().unwrap(), "-n", "1", "--temp", "0", "--kv-type", "f32"];
    let out = run(&[&args[..], &["--prompt", &prompt]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), streamed_text(&lm, &[top]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 tile(s), 4 rows"), "{stderr}");

    // two markers for one image, a missing image, an image without a projector: one line each
    let two = prompt.replace("<__media__>", "<__media__> <__media__>");
    let out = run(&[&args[..], &["--prompt", &two]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 <__media__> markers for 1 --image"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["--model", m, "--mmproj", p.to_str().unwrap(), "--image", "/nonexistent.png", "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.png"));
    let out = run(&["--model", m, "--image", i.to_str().unwrap(), "--prompt", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mmproj"));
    // a projector whose rows do not fit the model's embeddings
    let other = fixture("tiny-llama-F32.gguf");
    let out = run(&["--model", other.to_str().unwrap(), "--mmproj", p.to_str().unwrap(), "--image", i.to_str().unwrap(), "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("projection_dim"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_grammar_file_shapes_the_output_and_a_bad_one_is_one_line() {
    let dir = std::env::temp_dir().join(format!("engine-cli-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("answer.gbnf");
    std::fs::write(&good, "root ::= ( \"yes\" | \"no\" ) \", \" [a-z]{2,5} \".\"\n").unwrap();
    let model = fixture("tiny-llama-F32.gguf");
    let m = model.to_str().unwrap();
    for seed in ["1", "2", "3"] {
        let out = run(&["-m", m, "-p", "Well?", "-n", "40", "--temp", "1", "--seed", seed, "--grammar", good.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let word = text.strip_prefix("yes, ").or_else(|| text.strip_prefix("no, ")).and_then(|r| r.strip_suffix('.'));
        assert!(word.is_some_and(|w| (2..=5).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase())), "{text:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("finish reason stop"));
    }
    let bad = dir.join("bad.gbnf");
    std::fs::write(&bad, "root ::= word\nword ::= [a-z\n").unwrap();
    let out = run(&["-m", m, "-p", "Well?", "--grammar", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.lines().count() == 1 && err.contains("bad.gbnf") && err.contains("line 2, column 10"), "{err}");
    let out = run(&["-m", m, "-p", "Well?", "--json", "--grammar", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "--json and --grammar conflict");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A quantized KV cache, or keys and values of their own types, runs and says so; the greedy
/// continuation of the tiny model with a q8_0 cache begins as with an f32 one (its margins are
/// clear at the first tokens).
#[test]
fn quantized_kv_caches_run_and_are_named_on_stderr() {
    let model = fixture("tiny-llama-F32.gguf");
    let m = model.to_str().unwrap();
    let base = ["--model", m, "--prompt", "The quick", "-n", "4", "--temp", "0"];
    let f32_out = run(&[&base[..], &["--kv-type", "f32"]].concat());
    for (flags, named) in [
        (&["--kv-type", "q8_0"][..], "KV cache q8_0,"),
        (&["--kv-type", "q4_0"], "KV cache q4_0,"),
        (&["--kv-type", "f16", "--cache-type-k", "q8_0"], "KV cache q8_0 keys, f16 values,"),
        (&["--cache-type-v", "q4_0"], "KV cache f16 keys, q4_0 values,"),
    ] {
        let out = run(&[&base[..], flags].concat());
        assert!(out.status.success(), "{flags:?}: {}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{flags:?}: {err}");
        if flags == ["--kv-type", "q8_0"] {
            let (q8, f32) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&f32_out.stdout));
            assert_eq!(q8.chars().next(), f32.chars().next(), "{q8:?} vs {f32:?}");
        }
    }
}

/// `--spec ngram`: proposals from the prompt and output themselves; the greedy text is the
/// same, and the tiny model's looping output gives it plenty to propose.
#[test]
fn ngram_speculation_gives_the_same_greedy_text() {
    let target = fixture("tiny-llama-F32.gguf");
    let base = ["-m", target.to_str().unwrap(), "-p", "one two three one two three one two", "-n", "48", "--temp", "0", "--kv-type", "f32"];
    let alone = String::from_utf8(run(&base).stdout).unwrap();
    // the same text as without speculation, with proposals (the count `run` prints on stderr)
    let proposes_with = |flags: &[&str]| {
        let out = run(&[&base[..], flags].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{flags:?}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), alone, "{flags:?}");
        let line = err.lines().find(|l| l.starts_with("draft: ")).unwrap_or_else(|| panic!("{err}"));
        let proposed: usize = line["draft: ".len()..].split(' ').next().unwrap().parse().unwrap();
        assert!(proposed > 0, "{flags:?}: {line}");
    };
    proposes_with(&["--spec", "ngram", "--draft-n", "6"]);
    // with a draft model too (the lookup first, the draft once the lookups are quiet)
    let draft = fixture("tiny-llama-Q4_0.gguf");
    proposes_with(&["--spec", "ngram", "--draft-n", "6", "--draft", draft.to_str().unwrap(), "--draft-p-min", "0"]);
}

#[test]
fn a_suffix_fills_the_gap_with_a_code_model_and_is_one_line_without_one() {
    let qwen = engine_tests::fetch_model("qwen2.5-coder");
    let (prefix, suffix) = ("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n");
    let out = run(&["-m", qwen.to_str().unwrap(), "-p", prefix, "--suffix", suffix, "-n", "16", "--temp", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // the FIM prompt's greedy continuation, as --tokens gives it
    let ids = engine::tokenizer::fim::fim_prompt(
        engine_tests::shared_model("qwen2.5-coder").tokenizer(),
        prefix,
        suffix,
        engine::tokenizer::fim::FimOrder::PrefixSuffixMiddle,
    )
    .unwrap();
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    let by_ids = run(&["-m", qwen.to_str().unwrap(), "--tokens", &ids.join(","), "-n", "16", "--temp", "0"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("a + b"), "{text}");
    assert_eq!(text, String::from_utf8(by_ids.stdout).unwrap());
    // suffix first: the same as that prompt's ids
    let spm = run(&["-m", qwen.to_str().unwrap(), "-p", prefix, "--suffix", suffix, "--spm-infill", "-n", "16", "--temp", "0"]);
    let order = engine::tokenizer::fim::FimOrder::SuffixPrefixMiddle;
    let ids = engine::tokenizer::fim::fim_prompt(engine_tests::shared_model("qwen2.5-coder").tokenizer(), prefix, suffix, order).unwrap();
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    let by_ids = run(&["-m", qwen.to_str().unwrap(), "--tokens", &ids.join(","), "-n", "16", "--temp", "0"]);
    assert!(spm.status.success(), "{}", String::from_utf8_lossy(&spm.stderr));
    assert_eq!(spm.stdout, by_ids.stdout);
    let tiny = fixture("tiny-llama-F32.gguf");
    let out = run(&["-m", tiny.to_str().unwrap(), "-p", "a", "--suffix", "b"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.lines().count() == 1 && err.contains("--suffix: the model has no fill-in-the-middle"), "{err}");
}

#[test]
fn samplers_run_in_the_order_named_and_an_unknown_one_is_refused() {
    let tiny = fixture("tiny-llama-F32.gguf");
    let model = tiny.to_str().unwrap();
    let text = |extra: &[&str]| {
        let out = run(&[&["-m", model, "-p", "Once upon a time", "-n", "12", "--temp", "0"], extra].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let greedy = text(&[]);
    // temperature named: 0 is greedy there
    assert_eq!(text(&["--samplers", "top_k;temperature", "--seed", "3"]), greedy);
    // not named: drawn at temperature 1 from the top 40 (llama.cpp's chain)
    let drawn: Vec<String> = (1..=4).map(|seed| text(&["--samplers", "top_k", "--seed", &seed.to_string()])).collect();
    assert!(drawn.iter().any(|d| *d != greedy), "{drawn:?}");
    let out = run(&["-m", model, "-p", "a", "--samplers", "top_k;mirostat"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    // clap's error line, which names the flag and the sampler
    assert!(err.lines().next().unwrap().contains("--samplers <SAMPLERS>': \"mirostat\" is not a sampler of llama.cpp's"), "{err}");
}
