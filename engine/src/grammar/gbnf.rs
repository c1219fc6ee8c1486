//! llama.cpp's GBNF grammar syntax read into rules, every mistake reported by line and column.
//!
//! The syntax is llama.cpp's (`grammars/README.md` there): `name ::= alternatives` rules, one per
//! line unless a group or a trailing `|` carries it on; string literals, character classes
//! (`[a-z]`, `[^"\\]`), `.` for any character, rule references, groups, the repetitions `*`, `+`,
//! `?`, `{m}`, `{m,}`, `{m,n}` (and `{,n}` for `{0,n}`), `#` comments, and tokens (`<[id]>`,
//! `<text>`, and `!` before either for any other token). Escapes are llama.cpp's: `\x..`, `\u....`,
//! `\U........`, `\t`, `\r`, `\n`, `\\`, `\"`, `\[`, `\]`, `\-`. The grammar starts at `root`.
//!
//! Where llama.cpp quietly accepts what can never match (an empty class, a reversed range, a
//! code point that is no character) this reader says so instead; where it refuses what is
//! meaningful (left recursion, more than 2000 repetitions) this reader takes it.

/// One line of a grammar: where a mistake is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct GbnfError {
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    pub message: String,
}

/// A parsed grammar: its rules in order of first mention, `root` among them.
#[derive(Clone, Debug, PartialEq)]
pub struct Gbnf {
    pub rules: Vec<Rule>,
    /// Index of the `root` rule.
    pub root: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: String,
    pub body: Alternatives,
}

/// `a | b | ...`: one sequence per alternative (an empty sequence matches the empty string).
pub type Alternatives = Vec<Vec<Item>>;

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A string literal (maybe empty).
    Literal(String),
    /// A character class: inclusive code point ranges, or every character outside them.
    Class { negated: bool, ranges: Vec<(char, char)> },
    /// `.`: any one character.
    Any,
    /// A reference to the rule of this index.
    Rule(usize),
    /// One token (`<[id]>`, `<text>`), or with `negated` any one token but that.
    Token { token: TokenRef, negated: bool },
    /// `( alternatives )`.
    Group(Alternatives),
    /// `item{min,max}`; `max` `None` is unbounded.
    Repeat { item: Box<Item>, min: u32, max: Option<u32> },
}

/// How a grammar names a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenRef {
    /// `<[id]>`.
    Id(u32),
    /// `<text>`: the one token whose text is `text` (the angle brackets included).
    Text(String),
}

/// Repetition counts above this are refused: a bound this large is a mistake, and the
/// compiled grammar grows with the logarithm of it.
pub const MAX_REPETITIONS: u32 = 100_000;

/// Reads `text` as a GBNF grammar.
pub fn parse(text: &str) -> Result<Gbnf, GbnfError> {
    let mut p = Parser { chars: text.chars().collect(), pos: 0, rules: Vec::new(), defined: Vec::new(), first_use: Vec::new() };
    p.skip_space(true);
    while !p.at_end() {
        p.rule()?;
    }
    for (i, defined) in p.defined.iter().enumerate() {
        if !defined {
            let at = p.first_use[i].unwrap_or(0);
            return Err(p.error_at(at, format!("rule `{}` is used but never defined", p.rules[i].name)));
        }
    }
    let Some(root) = p.rules.iter().position(|r| r.name == "root") else {
        return Err(GbnfError { line: 1, column: 1, message: "the grammar has no `root` rule (where generation starts)".into() });
    };
    Ok(Gbnf { rules: p.rules, root })
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    rules: Vec<Rule>,
    defined: Vec<bool>,
    /// Where each rule was first referenced (for "never defined").
    first_use: Vec<Option<usize>>,
}

/// The characters of rule names: llama.cpp's `[a-zA-Z0-9-]`.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn error_at(&self, at: usize, message: String) -> GbnfError {
        let before = &self.chars[..at.min(self.chars.len())];
        let line = 1 + before.iter().filter(|&&c| c == '\n').count();
        let column = 1 + before.iter().rev().take_while(|&&c| c != '\n').count();
        GbnfError { line, column, message }
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        self.error_at(self.pos, message.into())
    }

    /// What stands at the cursor, for messages.
    fn found(&self) -> String {
        match self.peek() {
            None => "the end of the grammar".into(),
            Some('\n') | Some('\r') => "the end of the line".into(),
            Some(c) => format!("`{c}`"),
        }
    }

    /// Spaces, tabs and `#` comments; line ends too where `newlines` (inside groups, after
    /// `::=` and `|`, between rules).
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\r' && c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        while self.peek().is_some_and(is_name_char) {
            self.pos += 1;
        }
        (self.pos > start).then(|| self.chars[start..self.pos].iter().collect())
    }

    /// The index of rule `name`, registered on first mention.
    fn rule_index(&mut self, name: String, at: usize, definition: bool) -> usize {
        let i = match self.rules.iter().position(|r| r.name == name) {
            Some(i) => i,
            None => {
                self.rules.push(Rule { name, body: Vec::new() });
                self.defined.push(false);
                self.first_use.push(None);
                self.rules.len() - 1
            }
        };
        if !definition && self.first_use[i].is_none() {
            self.first_use[i] = Some(at);
        }
        i
    }

    /// `name ::= alternatives` and the end of its line. A second definition of a name replaces
    /// the first, as in llama.cpp.
    fn rule(&mut self) -> Result<(), GbnfError> {
        let at = self.pos;
        let Some(name) = self.name() else {
            return Err(self.error(format!("expected a rule name, found {}", self.found())));
        };
        let index = self.rule_index(name, at, true);
        self.skip_space(false);
        if !(self.peek() == Some(':') && self.peek_at(1) == Some(':') && self.peek_at(2) == Some('=')) {
            return Err(self.error(format!("expected `::=` after the rule name `{}`, found {}", self.rules[index].name, self.found())));
        }
        self.pos += 3;
        self.skip_space(true);
        let body = self.alternatives(false)?;
        match self.peek() {
            None | Some('\n') | Some('\r') => {}
            Some(_) => {
                return Err(self.error(format!("expected an item, `|` or the end of the line, found {}", self.found())));
            }
        }
        self.rules[index].body = body;
        self.defined[index] = true;
        self.skip_space(true);
        Ok(())
    }

    fn alternatives(&mut self, nested: bool) -> Result<Alternatives, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    /// Items up to what cannot start one (`|`, `)`, the end of a top-level line, ...).
    fn sequence(&mut self, nested: bool) -> Result<Vec<Item>, GbnfError> {
        let mut items: Vec<Item> = Vec::new();
        while let Some(c) = self.peek() {
            let at = self.pos;
            let item = match c {
                '"' => self.literal()?,
                '[' => self.class()?,
                '<' | '!' => self.token()?,
                '(' => {
                    self.pos += 1;
                    self.skip_space(true);
                    let alts = self.alternatives(true)?;
                    if self.peek() != Some(')') {
                        let opened = self.error_at(at, String::new());
                        return Err(self.error(format!(
                            "expected `)` to close the group opened at line {}, column {}, found {}",
                            opened.line,
                            opened.column,
                            self.found()
                        )));
                    }
                    self.pos += 1;
                    Item::Group(alts)
                }
                '.' => {
                    self.pos += 1;
                    Item::Any
                }
                '*' | '+' | '?' | '{' => {
                    let (min, max) = self.repetition()?;
                    let Some(last) = items.pop() else {
                        return Err(self.error_at(at, format!("`{c}` has nothing before it to repeat")));
                    };
                    Item::Repeat { item: Box::new(last), min, max }
                }
                c if is_name_char(c) => {
                    let name = self.name().expect("a name character");
                    Item::Rule(self.rule_index(name, at, false))
                }
                _ => break,
            };
            items.push(item);
            self.skip_space(nested);
        }
        Ok(items)
    }

    fn literal(&mut self) -> Result<Item, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error_at(start, "this string is never closed with `\"`".into())),
                Some('"') => break,
                Some(_) => s.push(self.char()?),
            }
        }
        self.pos += 1;
        Ok(Item::Literal(s))
    }

    fn class(&mut self) -> Result<Item, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error_at(start, "this character class is never closed with `]`".into())),
                Some(']') => break,
                Some(_) => {
                    let from_at = self.pos;
                    let lo = self.char()?;
                    let mut hi = lo;
                    // `-` before `]` is the character itself
                    if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                        self.pos += 1;
                        hi = self.char()?;
                        if hi < lo {
                            return Err(self.error_at(from_at, format!("the range {lo:?}-{hi:?} runs backwards and matches nothing")));
                        }
                    }
                    ranges.push((lo, hi));
                }
            }
        }
        self.pos += 1;
        if ranges.is_empty() {
            return Err(self.error_at(start, "an empty character class matches nothing".into()));
        }
        Ok(Item::Class { negated, ranges })
    }

    /// One character of a literal or class, escapes read.
    fn char(&mut self) -> Result<char, GbnfError> {
        let at = self.pos;
        let c = self.peek().ok_or_else(|| self.error("unexpected end of the grammar"))?;
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let e = self.peek().ok_or_else(|| self.error("unexpected end of the grammar after `\\`"))?;
        self.pos += 1;
        let digits = match e {
            't' => return Ok('\t'),
            'r' => return Ok('\r'),
            'n' => return Ok('\n'),
            '\\' | '"' | '[' | ']' | '-' => return Ok(e),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => return Err(self.error_at(at, format!("unknown escape `\\{e}`"))),
        };
        let mut value: u32 = 0;
        for _ in 0..digits {
            let Some(d) = self.peek().and_then(|c| c.to_digit(16)) else {
                return Err(self.error(format!("`\\{e}` takes {digits} hexadecimal digits, found {}", self.found())));
            };
            value = value << 4 | d;
            self.pos += 1;
        }
        char::from_u32(value).ok_or_else(|| self.error_at(at, format!("U+{value:04X} is not a Unicode character")))
    }

    /// `<[id]>`, `<text>`, or either after `!`.
    fn token(&mut self) -> Result<Item, GbnfError> {
        let negated = self.peek() == Some('!');
        if negated {
            self.pos += 1;
            if self.peek() != Some('<') {
                return Err(self.error(format!("expected a token (`<[id]>` or `<text>`) after `!`, found {}", self.found())));
            }
        }
        let start = self.pos;
        self.pos += 1;
        if self.peek() == Some('[') {
            self.pos += 1;
            let digits_at = self.pos;
            let digits = self.digits();
            let id = digits
                .parse::<u32>()
                .map_err(|_| self.error_at(digits_at, format!("expected a token id (a number) after `<[`, found {}", self.found())))?;
            if !(self.peek() == Some(']') && self.peek_at(1) == Some('>')) {
                return Err(self.error(format!("expected `]>` after the token id, found {}", self.found())));
            }
            self.pos += 2;
            return Ok(Item::Token { token: TokenRef::Id(id), negated });
        }
        while self.peek().is_some_and(|c| c != '>' && c != '\n') {
            self.pos += 1;
        }
        if self.peek() != Some('>') {
            return Err(self.error_at(start, "this token is never closed with `>`".into()));
        }
        self.pos += 1;
        Ok(Item::Token { token: TokenRef::Text(self.chars[start..self.pos].iter().collect()), negated })
    }

    fn digits(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// A count inside `{...}`.
    fn count(&mut self) -> Result<u32, GbnfError> {
        let at = self.pos;
        let digits = self.digits();
        if digits.is_empty() {
            return Err(self.error(format!("expected a number, found {}", self.found())));
        }
        // digits only: a parse fails only past u64, which is past the bound too
        match digits.parse::<u64>() {
            Ok(n) if n <= MAX_REPETITIONS as u64 => Ok(n as u32),
            _ => Err(self.error_at(at, format!("{digits} repetitions: at most {MAX_REPETITIONS} are allowed"))),
        }
    }

    /// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`, `{,n}`: (min, max).
    fn repetition(&mut self) -> Result<(u32, Option<u32>), GbnfError> {
        let at = self.pos;
        let c = self.peek().expect("a repetition");
        self.pos += 1;
        match c {
            '*' => return Ok((0, None)),
            '+' => return Ok((1, None)),
            '?' => return Ok((0, Some(1))),
            _ => {}
        }
        self.skip_space(true);
        let min = if self.peek() == Some(',') { 0 } else { self.count()? };
        self.skip_space(true);
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.pos += 1;
                self.skip_space(true);
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) { Some(self.count()?) } else { None };
                self.skip_space(true);
                if self.peek() != Some('}') {
                    return Err(self.error(format!("expected `}}` to end the repetition, found {}", self.found())));
                }
                max
            }
            _ => return Err(self.error(format!("expected `,` or `}}` in the repetition, found {}", self.found()))),
        };
        self.pos += 1;
        if let Some(max) = max {
            if max < min {
                return Err(self.error_at(at, format!("at least {min} and at most {max} repetitions: the maximum is below the minimum")));
            }
        }
        Ok((min, max))
    }
}
