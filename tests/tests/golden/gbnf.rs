//! GBNF grammars against llama.cpp's own grammar engine: for every grammar of
//! `fixtures/gbnf/llama-cpp.json` (tools/make-gbnf-goldens.py), the engine's compiler takes a
//! text whole exactly when llama.cpp does, and refuses the grammars llama.cpp refuses, saying
//! where. The texts go in one byte per token, as a model could write them.

use engine::grammar::{Constraint, GrammarCompiler, GrammarError};
use engine::tokenizer::{TokenId, Tokenizer};
use engine_tests::{fixture, read_json, vocab_tokenizer};

/// The GPT-2 vocabulary: every byte is a token of its own.
fn byte_tokens(tok: &Tokenizer) -> Vec<TokenId> {
    (0..=255u8)
        .map(|b| (0..tok.n_vocab() as TokenId).find(|&id| tok.token_bytes(id) == [b]).unwrap_or_else(|| panic!("no token for byte {b}")))
        .collect()
}

/// Whether the grammar takes `text` whole and may end after it.
fn takes(compiler: &GrammarCompiler, bytes: &[TokenId], eog: TokenId, grammar: &str, text: &str) -> bool {
    let mut m = compiler.compile(&Constraint::Grammar(grammar.into())).unwrap();
    for b in text.bytes() {
        if m.accept(bytes[b as usize]).is_err() {
            return false;
        }
    }
    let mut logits = vec![0.0; compiler.n_vocab()];
    m.mask_logits(&mut logits).unwrap();
    logits[eog as usize].is_finite()
}

#[test]
fn grammars_take_exactly_the_texts_llama_cpp_takes() {
    let tok = vocab_tokenizer("gpt-2");
    let compiler = GrammarCompiler::new(&tok).unwrap();
    let bytes = byte_tokens(&tok);
    let eog = tok.eog_ids()[0];
    let goldens = read_json(&fixture("gbnf/llama-cpp.json"));
    let mut differences = Vec::new();
    let (mut grammars, mut texts) = (0, 0);
    for case in goldens["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let grammar = case["grammar"].as_str().unwrap();
        let compiled = compiler.compile(&Constraint::Grammar(grammar.into()));
        if !case["valid"].as_bool().unwrap() {
            match compiled {
                Err(GrammarError::Gbnf(e)) => assert!(e.line >= 1 && e.column >= 1 && !e.message.is_empty(), "{name}: {e:?}"),
                other => differences.push(format!("{name}: llama.cpp refuses the grammar, the engine gives {other:?}")),
            }
            continue;
        }
        if let Err(e) = compiled {
            differences.push(format!("{name}: llama.cpp takes the grammar, the engine refuses it: {e}"));
            continue;
        }
        grammars += 1;
        for t in case["texts"].as_array().unwrap() {
            let text = t["text"].as_str().unwrap();
            let expected = t["takes"].as_bool().unwrap();
            texts += 1;
            if takes(&compiler, &bytes, eog, grammar, text) != expected {
                differences.push(format!("{name}: {text:?}: llama.cpp {}", if expected { "takes it" } else { "refuses it" }));
            }
        }
    }
    assert!(grammars >= 14 && texts >= 100, "{grammars} grammars, {texts} texts");
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn a_malformed_grammar_is_refused_at_its_line_and_column() {
    let compiler = GrammarCompiler::new(&vocab_tokenizer("gpt-2")).unwrap();
    let cases = [
        ("root ::= \"a\"\nitem ::= \"b\" )\n", 2, 14, "expected an item"),
        ("root ::= ( \"a\"\n  \"b\" ]\n", 2, 7, "group opened at line 1, column 10"),
        ("root ::= \"abc\n", 1, 10, "never closed"),
        ("root ::= [b-a]\n", 1, 11, "runs backwards"),
        ("root ::= x\n", 1, 10, "`x` is used but never defined"),
        ("x ::= \"a\"\n", 1, 1, "no `root` rule"),
        ("root ::= \"\\q\"\n", 1, 11, "unknown escape"),
        ("root\n::= \"a\"\n", 1, 5, "expected `::=`"),
        ("root ::= \"a\"{3,2}\n", 1, 13, "below the minimum"),
        ("root ::= \"\\uD800\"\n", 1, 11, "not a Unicode character"),
    ];
    for (grammar, line, column, words) in cases {
        match compiler.compile(&Constraint::Grammar(grammar.into())) {
            Err(GrammarError::Gbnf(e)) => {
                assert_eq!((e.line, e.column), (line, column), "{grammar:?}: {e}");
                assert!(e.message.contains(words), "{grammar:?}: {e}");
                assert!(e.to_string().starts_with(&format!("line {line}, column {column}: ")), "{e}");
            }
            other => panic!("{grammar:?}: {other:?}"),
        }
    }
}
