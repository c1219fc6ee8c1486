//! A GBNF grammar lowered to llguidance's Lark, keeping GBNF's character-level meaning.
//!
//! llguidance lexes: every string or regex in a rule is a lexeme that takes as many bytes as
//! it can, and a lexeme ends only where no allowed lexeme can go on. GBNF has no lexer: a
//! grammar may end a repetition where a longer match was possible (`[a-z]* "b"`, a trailing
//! `ws` before a required `"\n"`), and a lexer would refuse such texts. So every character of
//! the grammar (one of a literal, a class, `.`) is a lexeme of its own, which nothing can
//! extend: the rules stay rules, and llguidance's parser sees exactly GBNF's language. The
//! cost is a parser step per byte of every allowed token when a mask is computed (3.9 ms inside
//! a JSON string over Qwen2.5's 151,936 tokens, against 0.2 ms for a JSON schema's lexer); a
//! grammar that wants a lexer's speed can be written in llguidance's Lark (`%llguidance` first).

use super::gbnf::{Alternatives, Gbnf, Item, TokenRef};
use crate::tokenizer::TokenId;

/// The vocabulary as a grammar's tokens see it.
pub struct Tokens<'a> {
    /// The one token whose text is exactly this (llama.cpp's `<text>`), if there is one.
    pub by_text: &'a dyn Fn(&str) -> Option<TokenId>,
    /// The end-of-generation tokens: as in llama.cpp, they end a grammar only where it may end,
    /// so a negated token (`!<[id]>`) never matches one and a grammar may not name one.
    pub eog: &'a [TokenId],
}

/// The Lark text of `grammar` (a `<text>` that is not one token of the vocabulary is an
/// error naming it).
pub fn to_lark(grammar: &Gbnf, tokens: &Tokens) -> Result<String, String> {
    let mut out = format!("start: {}\n", rule_name(grammar, grammar.root));
    for (i, rule) in grammar.rules.iter().enumerate() {
        out.push_str(&format!("{}: {}\n", rule_name(grammar, i), alternatives(grammar, tokens, &rule.body)?));
    }
    Ok(out)
}

/// A rule's Lark name: its index (GBNF names are case-sensitive, Lark's case means terminal or
/// rule) and its GBNF name, for readable messages.
fn rule_name(grammar: &Gbnf, i: usize) -> String {
    format!("r{i}_{}", grammar.rules[i].name.replace('-', "_").to_ascii_lowercase())
}

fn alternatives(grammar: &Gbnf, tokens: &Tokens, alts: &Alternatives) -> Result<String, String> {
    let mut out = Vec::with_capacity(alts.len());
    for seq in alts {
        let mut parts = Vec::with_capacity(seq.len());
        for item in seq {
            parts.push(item_lark(grammar, tokens, item)?);
        }
        out.push(if parts.is_empty() { "\"\"".to_string() } else { parts.join(" ") });
    }
    Ok(out.join(" | "))
}

fn item_lark(grammar: &Gbnf, tokens: &Tokens, item: &Item) -> Result<String, String> {
    Ok(match item {
        Item::Literal(s) if s.is_empty() => "\"\"".into(),
        // one lexeme per character (a JSON string is a Lark string literal)
        Item::Literal(s) => s.chars().map(|c| serde_json::Value::String(c.to_string()).to_string()).collect::<Vec<_>>().join(" "),
        Item::Class { negated, ranges } => class_regex(*negated, ranges),
        Item::Any => "/(?s:.)/".into(),
        Item::Rule(j) => rule_name(grammar, *j),
        Item::Group(alts) => format!("({})", alternatives(grammar, tokens, alts)?),
        Item::Repeat { item, min, max } => format!("({}){}", item_lark(grammar, tokens, item)?, repetition(*min, *max)),
        Item::Token { token, negated } => {
            let id = match token {
                TokenRef::Id(id) => *id,
                TokenRef::Text(text) => {
                    (tokens.by_text)(text).ok_or_else(|| format!("the token {text} is not one token of this model's vocabulary"))?
                }
            };
            if *negated {
                let mut except = vec![id];
                except.extend(tokens.eog.iter().filter(|&&t| t != id));
                format!("<[^{}]>", except.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","))
            } else if tokens.eog.contains(&id) {
                // llama.cpp never offers one while the grammar goes on: it ends the output
                return Err(format!(
                    "token {id} ends generation: it ends the output where the grammar may end, and cannot be part of the grammar"
                ));
            } else {
                format!("<[{id}]>")
            }
        }
    })
}

fn repetition(min: u32, max: Option<u32>) -> String {
    match (min, max) {
        (0, None) => "*".into(),
        (1, None) => "+".into(),
        (0, Some(1)) => "?".into(),
        (m, None) => format!("{{{m},}}"),
        (m, Some(n)) if m == n => format!("{{{m}}}"),
        (m, Some(n)) => format!("{{{m},{n}}}"),
    }
}

/// A character class as a Lark regex; every character but ASCII letters and digits escaped
/// by code point, so nothing in it is read as regex syntax or ends the `/.../`.
fn class_regex(negated: bool, ranges: &[(char, char)]) -> String {
    let mut s = String::from("/[");
    if negated {
        s.push('^');
    }
    for &(lo, hi) in ranges {
        s.push_str(&regex_char(lo));
        if hi != lo {
            s.push('-');
            s.push_str(&regex_char(hi));
        }
    }
    s.push_str("]/");
    s
}

fn regex_char(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\x{{{:X}}}", c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{gbnf, token_word, Constraint, GrammarCompiler, GrammarError};
    use crate::tokenizer::TokenId;

    /// Ids 0..256 the single bytes, then `<think>` (a plain token), `<|end|>` (a control
    /// token) and EOS.
    const THINK: TokenId = 256;
    const END: TokenId = 257;
    const EOS: TokenId = 258;

    fn compiler() -> GrammarCompiler {
        let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| token_word(&[b], b as TokenId, false)).collect();
        words.push(token_word(b"<think>", THINK, false));
        words.push(token_word(b"<|end|>", END, true));
        words.push(token_word(b"", EOS, true));
        GrammarCompiler::from_words(words, &[EOS], None).unwrap()
    }

    /// Whether `grammar` takes `tokens` (text as one token per byte) and may end there.
    fn takes(c: &GrammarCompiler, grammar: &str, tokens: &[TokenId]) -> bool {
        let mut m = c.compile(&Constraint::Grammar(grammar.into())).unwrap_or_else(|e| panic!("{grammar}: {e}"));
        if tokens.iter().any(|&t| m.accept(t).is_err()) {
            return false;
        }
        let mut logits = vec![0.0; EOS as usize + 1];
        m.mask_logits(&mut logits).unwrap();
        logits[EOS as usize].is_finite()
    }

    fn accepts(c: &GrammarCompiler, grammar: &str, text: &str) -> bool {
        takes(c, grammar, &text.bytes().map(TokenId::from).collect::<Vec<_>>())
    }

    fn check(grammar: &str, yes: &[&str], no: &[&str]) {
        let c = compiler();
        for s in yes {
            assert!(accepts(&c, grammar, s), "{grammar:?} should take {s:?}\n{}", lark(grammar));
        }
        for s in no {
            assert!(!accepts(&c, grammar, s), "{grammar:?} should refuse {s:?}\n{}", lark(grammar));
        }
    }

    fn lark(grammar: &str) -> String {
        super::to_lark(&gbnf::parse(grammar).unwrap(), &super::Tokens { by_text: &|_| None, eog: &[EOS] }).unwrap_or_else(|e| e)
    }

    #[test]
    fn literals_classes_and_repetitions_match_characters() {
        check(r#"root ::= "a" [b-d]+ "e"?"#, &["ab", "abcde", "adde"], &["a", "ae", "abx", "abee"]);
        check(r#"root ::= [^"\\\x00-\x1F]{2,3}"#, &["ab", "x y", "\u{e9}\u{e8}"], &["a", "abcd", "a\"", "a\n"]);
        check("root ::= .{3}", &["abc", "a\nb", "\u{e9}\u{e8}\u{ea}"], &["ab", "abcd"]);
        check(r#"root ::= "x" ("ab" | "cd"){2} "y""#, &["xabcdy", "xababy"], &["xaby", "xabcdaby"]);
        check(r#"root ::= [a-]+"#, &["a-a", "-"], &["b"]);
    }

    #[test]
    fn empty_alternatives_and_nullable_rules() {
        check("root ::= \"a\" ws \"b\"\nws ::= | \" \" | \"\\n\" [ \\t]{0,2}", &["ab", "a b", "a\n\t\tb"], &["a  b", "a\n\t\t\tb"]);
        check("root ::= x*\nx ::= \"(\" x* \")\"", &["", "()", "(()())()"], &["(", "())"]);
        check("root ::= \"\"", &[""], &["a"]);
    }

    #[test]
    fn lexemes_do_not_change_what_a_character_grammar_takes() {
        // a regular rule ending in a greedy repetition, followed by what the repetition takes
        check("root ::= word \"x\"\nword ::= [a-z]*", &["x", "abx", "xxx"], &["ab"]);
        // a literal that is a prefix of another path through the grammar
        check(r#"root ::= "ab" | "a" "bc""#, &["ab", "abc"], &["a", "abcd"]);
        // recursion around regular parts
        check(
            "root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
            &["1", "1+2", "(1+2)-30", "((4))"],
            &["1+", "(1", "1)", "+1"],
        );
    }

    #[test]
    fn tokens_by_id_by_text_and_negated() {
        let c = compiler();
        let g = "root ::= <think> body <[257]>\nbody ::= !<[257]>*";
        assert!(takes(&c, g, &[THINK, b'h' as TokenId, b'i' as TokenId, END]));
        assert!(takes(&c, g, &[THINK, THINK, END]));
        assert!(!takes(&c, g, &[b'h' as TokenId, END]));
        assert!(!takes(&c, g, &[THINK, b'h' as TokenId]));
        let e = c.compile(&Constraint::Grammar("root ::= <nope>".into())).unwrap_err();
        assert!(matches!(&e, GrammarError::Grammar(m) if m.contains("<nope>")), "{e}");
        // an end-of-generation token is not text the grammar can hold
        let e = c.compile(&Constraint::Grammar(format!("root ::= <[{EOS}]> \"x\""))).unwrap_err();
        assert!(matches!(&e, GrammarError::Grammar(m) if m.contains("ends generation")), "{e}");
        assert!(takes(&c, &format!("root ::= !<[{EOS}]> \"x\""), &[b'a' as TokenId, b'x' as TokenId]));
    }

    #[test]
    fn no_lexer_decides_where_a_match_ends() {
        // a literal that is a prefix of another, each followed by recursion
        let g = "root ::= \"a\" x | \"ab\" y\nx ::= \"b\" x | \"c\"\ny ::= \"d\" y | \"e\"";
        check(g, &["ac", "abc", "abe", "abbc", "abdde"], &["a", "ab", "abd"]);
        // a greedy repetition followed by recursion that starts with what it repeats
        check("root ::= [a-z]* x\nx ::= \"a\" x | \"b\"", &["b", "ab", "zzab", "aab"], &["a", "zz"]);
        // a trailing optional space before a required newline (llama.cpp's arithmetic grammar)
        let g = "root ::= (id \"=\" id \"\\n\")+\nid ::= [a-z]+ ws\nws ::= [ \\n]*";
        check(g, &["a=b\n", "a =b \n\n", "a=b\nc=d\n"], &["a=b", "a=\n"]);
    }

    #[test]
    fn left_recursion_is_taken() {
        check("root ::= list\nlist ::= list \",\" [0-9] | [0-9]", &["1", "1,2,3"], &["1,", ",1"]);
    }

    #[test]
    fn lark_after_llguidance_is_taken_as_is() {
        check("%llguidance {}\nstart: \"a\" /[0-9]+/", &["a1", "a123"], &["a"]);
    }
}
