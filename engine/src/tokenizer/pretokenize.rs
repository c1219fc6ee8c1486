//! BPE pre-tokenizers: the splitting of text into words before merges, chosen by
//! `tokenizer.ggml.pre`, with the same rules llama.cpp applies for each name.
//!
//! A pre-tokenizer is a list of steps; each step splits every chunk the previous step produced
//! (a match is one chunk, and so is each stretch of text between matches). The two regexes
//! nearly every model uses (GPT-2's and Llama 3's, the latter also with single digits for Qwen 2)
//! are hand-written scanners over code points; the rarer ones run on `fancy-regex`, whose
//! leftmost-first backtracking semantics are those of the ECMAScript regexes llama.cpp uses.

use std::ops::Range;

use super::unicode::{flags, to_lower, CptFlags};

/// The regex families llama.cpp knows, one per distinct list of split rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreFamily {
    Default,
    Llama3,
    DeepseekLlm,
    Deepseek3,
    DeepseekCoder,
    Falcon,
    Starcoder,
    Gpt2,
    Qwen2,
    Qwen35,
    /// GPT-4o's o200k rule (gpt-oss, Llama 4): case runs, contractions, digits in threes.
    Gpt4o,
    /// Mistral's tekken rule: GPT-4o's without contractions, single digits.
    Tekken,
    Bloom,
    Viking,
}

/// What a pre-tokenizer name implies beyond its split rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizerConfig {
    pub family: PreFamily,
    /// A word that is itself a token is emitted whole, without merging (Llama 3 and friends).
    pub ignore_merges: bool,
    pub add_bos: bool,
    pub clean_spaces: bool,
    /// The vocabulary has no BOS token (ChatGLM).
    pub no_bos: bool,
}

impl PreTokenizerConfig {
    /// The configuration for `tokenizer.ggml.pre = name`, or `None` for a name this engine does
    /// not implement.
    pub fn for_name(name: &str) -> Option<PreTokenizerConfig> {
        use PreFamily::*;
        let (family, clean_spaces) = match name {
            "default" => (Default, true),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "jina-v5-nano" => {
                (Llama3, true)
            }
            "dbrx" | "smaug-bpe" | "chatglm-bpe" | "glm4" | "glm5" => (Llama3, true),
            "deepseek-llm" => (DeepseekLlm, false),
            "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => (Deepseek3, false),
            "deepseek-coder" => (DeepseekCoder, false),
            "falcon" => (Falcon, true),
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => (Starcoder, true),
            "command-r" | "smollm" => (Starcoder, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert"
            | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "exaone4" | "mpt" | "olmo" | "jais" => (Gpt2, true),
            "trillion" | "granite-docling" => (Gpt2, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => (Qwen2, false),
            "megrez" | "stablelm2" => (Qwen2, true),
            "qwen35" => (Qwen35, false),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" => (Gpt4o, false),
            "tekken" => (Tekken, false),
            "poro-chat" => (Bloom, false),
            "bloom" | "gpt3-finnish" => (Bloom, true),
            "viking" => (Viking, false),
            _ => return None,
        };
        let llama3_like = matches!(
            name,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "jina-v5-nano"
        );
        Some(PreTokenizerConfig {
            family,
            ignore_merges: llama3_like || matches!(name, "glm4" | "glm5" | "tekken"),
            add_bos: llama3_like || name == "tekken",
            clean_spaces,
            no_bos: matches!(name, "chatglm-bpe" | "glm4" | "glm5"),
        })
    }
}

/// GPT-2's rule: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
const GPT2: &str = "gpt2";
/// Llama 3's rule, case-insensitive contractions, digits in groups of up to three.
const LLAMA3: &str = "llama3";

const DEEPSEEK_LLM_LETTERS: &str = "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+";
const CJK_HANGUL: &str = "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+";
const BLOOM: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+";

fn family_rules(family: PreFamily) -> &'static [&'static str] {
    use PreFamily::*;
    match family {
        Default => &["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
        Llama3 => &[LLAMA3],
        DeepseekLlm => &[
            "[\r\n]",
            DEEPSEEK_LLM_LETTERS,
            "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
            "\\s+$",
            CJK_HANGUL,
            "\\p{N}+",
        ],
        Deepseek3 => &[
            "\\p{N}{1,3}",
            "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
        ],
        DeepseekCoder => &["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK_HANGUL, "\\p{N}"],
        Falcon => &["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
        Starcoder => &["\\p{N}", GPT2],
        Gpt2 => &[GPT2],
        Qwen2 => &["qwen2"],
        Qwen35 => &[
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        // llama.cpp runs these on its collapsed text, where every letter outside ASCII is one
        // letter class: its `\p{Lu}` ... `\p{Lo}` are all `\p{L}`, so "a letter that is not a-z"
        // (upper-case ASCII or any other letter) is how its rules say "upper", and likewise
        // "a letter that is not A-Z" "lower".
        Gpt4o => &[concat!(
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?",
            "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?",
            "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        )],
        Tekken => &[concat!(
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+",
            "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*",
            "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        )],
        Bloom => &[BLOOM],
        Viking => &[BLOOM, "\\p{N}"],
    }
}

enum Step {
    Gpt2,
    /// Llama 3's scanner; Qwen 2 is the same rule with single digits.
    Llama3 {
        max_digits: usize,
    },
    Regex(fancy_regex::Regex),
}

/// A compiled pre-tokenizer.
pub(crate) struct PreTokenizer {
    steps: Vec<Step>,
}

impl PreTokenizer {
    pub fn new(family: PreFamily) -> PreTokenizer {
        let steps = family_rules(family)
            .iter()
            .map(|&rule| match rule {
                GPT2 => Step::Gpt2,
                LLAMA3 => Step::Llama3 { max_digits: 3 },
                "qwen2" => Step::Llama3 { max_digits: 1 },
                // The rules are constants of this file and covered by tests; a failure to compile
                // one is a programming error.
                re => Step::Regex(fancy_regex::Regex::new(re).expect("pre-tokenizer regex compiles")),
            })
            .collect();
        PreTokenizer { steps }
    }

    /// Splits `text` into words, returned as byte ranges of `text` in order; together they cover
    /// all of it.
    pub fn split(&self, text: &str) -> Vec<Range<usize>> {
        let mut chunks = Vec::new();
        if text.is_empty() {
            return chunks;
        }
        chunks.push(0..text.len());
        let mut next = Vec::with_capacity(text.len() / 4 + 1);
        let mut cpts = Vec::new();
        for step in &self.steps {
            next.clear();
            for chunk in &chunks {
                match step {
                    Step::Gpt2 => {
                        load_cpts(text, chunk.clone(), &mut cpts);
                        scan_gpt2(&cpts, chunk.end, &mut next);
                    }
                    Step::Llama3 { max_digits } => {
                        load_cpts(text, chunk.clone(), &mut cpts);
                        scan_llama3(&cpts, chunk.end, *max_digits, &mut next);
                    }
                    Step::Regex(re) => split_regex(re, text, chunk.clone(), &mut next),
                }
            }
            std::mem::swap(&mut chunks, &mut next);
        }
        chunks
    }
}

/// One code point of a chunk: its byte offset in the text, the character and its flags.
#[derive(Clone, Copy)]
struct Cpt {
    at: usize,
    c: char,
    f: CptFlags,
}

fn load_cpts(text: &str, chunk: Range<usize>, out: &mut Vec<Cpt>) {
    out.clear();
    let base = chunk.start;
    out.extend(text[chunk].char_indices().map(|(i, c)| Cpt { at: base + i, c, f: flags(c) }));
}

/// Emits the words of a chunk: positions are code point indices, turned into byte ranges.
struct Emitter<'a> {
    cpts: &'a [Cpt],
    end_byte: usize,
    prev: usize,
    out: &'a mut Vec<Range<usize>>,
}

impl Emitter<'_> {
    fn byte(&self, pos: usize) -> usize {
        self.cpts.get(pos).map_or(self.end_byte, |c| c.at)
    }
    fn emit(&mut self, end: usize) {
        if end > self.prev {
            let r = self.byte(self.prev)..self.byte(end);
            self.out.push(r);
        }
        self.prev = end;
    }
}

/// Flags at `pos`, empty past the chunk's end (so no class matches there).
fn flags_at(cpts: &[Cpt], pos: usize) -> CptFlags {
    cpts.get(pos).map_or(CptFlags::default(), |c| c.f)
}

fn char_at(cpts: &[Cpt], pos: usize) -> Option<char> {
    cpts.get(pos).map(|c| c.c)
}

fn is_other(f: CptFlags) -> bool {
    // [^\s\p{L}\p{N}], which never matches past the end of the chunk
    f != CptFlags::default() && !(f.is_whitespace() || f.is_letter() || f.is_number())
}

/// Length of a contraction ('s 't 're 've 'm 'll 'd) starting at `pos`, 0 if none.
fn contraction_len(cpts: &[Cpt], pos: usize, fold_case: bool) -> usize {
    let fold = |c: Option<char>| c.map(|c| if fold_case { to_lower(c) } else { c });
    if char_at(cpts, pos) != Some('\'') {
        return 0;
    }
    match fold(char_at(cpts, pos + 1)) {
        Some('s' | 't' | 'm' | 'd') => 2,
        Some(a @ ('r' | 'v' | 'l')) => {
            let want = if a == 'l' { 'l' } else { 'e' };
            if fold(char_at(cpts, pos + 2)) == Some(want) {
                3
            } else {
                0
            }
        }
        _ => 0,
    }
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
fn scan_gpt2(cpts: &[Cpt], end_byte: usize, out: &mut Vec<Range<usize>>) {
    let n = cpts.len();
    let mut em = Emitter { cpts, end_byte, prev: 0, out };
    let mut pos = 0;
    while pos < n {
        let c = cpts[pos].c;
        let k = contraction_len(cpts, pos, false);
        if k > 0 {
            pos += k;
            em.emit(pos);
            continue;
        }
        let lead_space = usize::from(c == ' ');
        let f2 = flags_at(cpts, pos + lead_space);
        let class: Option<fn(CptFlags) -> bool> = if f2.is_letter() {
            Some(CptFlags::is_letter)
        } else if f2.is_number() {
            Some(CptFlags::is_number)
        } else if is_other(f2) {
            Some(is_other)
        } else {
            None
        };
        if let Some(class) = class {
            pos += lead_space;
            while class(flags_at(cpts, pos)) {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        pos = whitespace_end(cpts, pos, false);
        em.emit(pos);
    }
}

/// Where `\s*[\r\n]+` (if `newlines`), else `\s+(?!\S)`, else `\s+`, matching at `pos` ends; a
/// single code point when none matches.
fn whitespace_end(cpts: &[Cpt], pos: usize, newlines: bool) -> usize {
    let mut run = 0;
    let mut after_last_newline = None;
    while flags_at(cpts, pos + run).is_whitespace() {
        if newlines && matches!(cpts[pos + run].c, '\r' | '\n') {
            after_last_newline = Some(pos + run + 1);
        }
        run += 1;
    }
    if let Some(end) = after_last_newline {
        return end;
    }
    if run > 1 && pos + run < cpts.len() {
        // leave the last whitespace to prefix the word that follows
        return pos + run - 1;
    }
    if run > 0 {
        return pos + run;
    }
    pos + 1
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn scan_llama3(cpts: &[Cpt], end_byte: usize, max_digits: usize, out: &mut Vec<Range<usize>>) {
    let n = cpts.len();
    let mut em = Emitter { cpts, end_byte, prev: 0, out };
    let mut pos = 0;
    while pos < n {
        let Cpt { c, f, .. } = cpts[pos];
        let k = contraction_len(cpts, pos, true);
        if k > 0 {
            pos += k;
            em.emit(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(c == '\r' || c == '\n' || f.is_number()) && (f.is_letter() || flags_at(cpts, pos + 1).is_letter()) {
            pos += 1;
            while flags_at(cpts, pos).is_letter() {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        // \p{N}{1,D}
        if f.is_number() {
            let mut start = pos;
            while flags_at(cpts, pos).is_number() {
                pos += 1;
                if pos - start >= max_digits {
                    em.emit(pos);
                    start = pos;
                }
            }
            em.emit(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`; a lone space at the chunk's end also lands here and is a
        // word by itself, as `\s+` would make it.
        let lead_space = usize::from(c == ' ');
        let f2 = flags_at(cpts, pos + lead_space);
        if !(f2.is_whitespace() || f2.is_letter() || f2.is_number()) {
            pos += lead_space;
            while is_other(flags_at(cpts, pos)) {
                pos += 1;
            }
            while matches!(char_at(cpts, pos), Some('\r' | '\n')) {
                pos += 1;
            }
            em.emit(pos);
            continue;
        }
        pos = whitespace_end(cpts, pos, true);
        em.emit(pos);
    }
}

fn split_regex(re: &fancy_regex::Regex, text: &str, chunk: Range<usize>, out: &mut Vec<Range<usize>>) {
    let base = chunk.start;
    let s = &text[chunk.clone()];
    let mut last = 0;
    for m in re.find_iter(s) {
        let Ok(m) = m else {
            // Only a pathological input can exhaust the backtracking limit: keep the rest of
            // the chunk as one word rather than fail the whole tokenization.
            tracing::warn!("pre-tokenizer regex gave up on a chunk; kept unsplit");
            break;
        };
        if m.start() > last {
            out.push(base + last..base + m.start());
        }
        if m.end() > m.start() {
            out.push(base + m.start()..base + m.end());
        }
        last = m.end();
    }
    if last < s.len() {
        out.push(base + last..chunk.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(family: PreFamily, text: &str) -> Vec<String> {
        PreTokenizer::new(family).split(text).into_iter().map(|r| text[r].to_string()).collect()
    }

    #[test]
    fn every_family_compiles_and_covers_the_text() {
        use PreFamily::*;
        let text = "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～\n\n  \t x 3333 ' era";
        for family in [Default, Llama3, DeepseekLlm, Deepseek3, DeepseekCoder, Falcon, Starcoder, Gpt2, Qwen2, Qwen35, Bloom, Viking] {
            let joined: String = words(family, text).concat();
            assert_eq!(joined, text, "{family:?}");
        }
    }

    #[test]
    fn gpt2_rule() {
        assert_eq!(words(PreFamily::Gpt2, "Hello world"), ["Hello", " world"]);
        assert_eq!(words(PreFamily::Gpt2, "a  b"), ["a", " ", " b"]);
        assert_eq!(words(PreFamily::Gpt2, "it's 12abc"), ["it", "'s", " 12", "abc"]);
        assert_eq!(words(PreFamily::Gpt2, "x  "), ["x", "  "]);
        assert_eq!(words(PreFamily::Gpt2, "IT'S"), ["IT", "'", "S"]);
    }

    #[test]
    fn llama3_rule() {
        assert_eq!(words(PreFamily::Llama3, "IT'S 12345"), ["IT", "'S", " ", "123", "45"]);
        assert_eq!(words(PreFamily::Llama3, "a\n\n  b"), ["a", "\n\n", " ", " b"]);
        assert_eq!(words(PreFamily::Llama3, "x ...\n"), ["x", " ...\n"]);
        assert_eq!(words(PreFamily::Qwen2, "123"), ["1", "2", "3"]);
    }

    #[test]
    fn known_names_and_unknown_ones() {
        assert_eq!(PreTokenizerConfig::for_name("refact").unwrap().family, PreFamily::Starcoder);
        assert!(PreTokenizerConfig::for_name("llama-bpe").unwrap().ignore_merges);
        assert!(PreTokenizerConfig::for_name("no-such-pre").is_none());
    }
}
