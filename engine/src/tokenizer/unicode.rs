//! The Unicode facts the tokenizers need, in llama.cpp's terms: a code point's category flags
//! (what `\p{L}`, `\p{N}`, `\s`... match), its simple lowercase, and the first code point of its
//! canonical decomposition (llama.cpp's "NFD", which WordPiece uses to strip accents).
//!
//! The category data comes from `unicode-general-category` and the decompositions from
//! `unicode-normalization`; ASCII, which dominates real text, is answered from a table.

use unicode_general_category::{get_general_category, GeneralCategory as G};

/// Category flags of one code point. Exactly one category bit is set (`\p{L}`, `\p{N}`, ...),
/// plus `WHITESPACE` for the Unicode White_Space code points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CptFlags(u16);

impl CptFlags {
    pub const UNDEFINED: u16 = 0x0001;
    pub const NUMBER: u16 = 0x0002;
    pub const LETTER: u16 = 0x0004;
    pub const SEPARATOR: u16 = 0x0008;
    pub const ACCENT_MARK: u16 = 0x0010;
    pub const PUNCTUATION: u16 = 0x0020;
    pub const SYMBOL: u16 = 0x0040;
    pub const CONTROL: u16 = 0x0080;
    pub const WHITESPACE: u16 = 0x0100;

    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    pub fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    pub fn is_symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
    pub fn is_accent_mark(self) -> bool {
        self.0 & Self::ACCENT_MARK != 0
    }
}

/// White_Space code points (PropList.txt), the set llama.cpp calls whitespace.
fn is_unicode_whitespace(c: char) -> bool {
    matches!(c, '\u{09}'..='\u{0D}' | ' ' | '\u{85}' | '\u{A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}'
        | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}')
}

fn category_flag(c: char) -> u16 {
    match get_general_category(c) {
        G::Unassigned => CptFlags::UNDEFINED,
        G::Control | G::Format | G::PrivateUse | G::Surrogate => CptFlags::CONTROL,
        G::UppercaseLetter | G::LowercaseLetter | G::TitlecaseLetter | G::ModifierLetter | G::OtherLetter => CptFlags::LETTER,
        G::NonspacingMark | G::SpacingMark | G::EnclosingMark => CptFlags::ACCENT_MARK,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => CptFlags::NUMBER,
        G::ConnectorPunctuation
        | G::DashPunctuation
        | G::OpenPunctuation
        | G::ClosePunctuation
        | G::InitialPunctuation
        | G::FinalPunctuation
        | G::OtherPunctuation => CptFlags::PUNCTUATION,
        G::MathSymbol | G::CurrencySymbol | G::ModifierSymbol | G::OtherSymbol => CptFlags::SYMBOL,
        G::SpaceSeparator | G::LineSeparator | G::ParagraphSeparator => CptFlags::SEPARATOR,
        // the enum is non-exhaustive; a category added by a future Unicode is unknown to us
        _ => CptFlags::UNDEFINED,
    }
}

fn compute_flags(c: char) -> CptFlags {
    let ws = if is_unicode_whitespace(c) { CptFlags::WHITESPACE } else { 0 };
    CptFlags(category_flag(c) | ws)
}

static ASCII_FLAGS: [CptFlags; 128] = {
    // Built by hand from the ASCII categories: a const fn cannot call the category lookup.
    let mut t = [CptFlags(CptFlags::CONTROL); 128];
    let mut i = 0;
    while i < 128 {
        let b = i as u8;
        let f = match b {
            b'0'..=b'9' => CptFlags::NUMBER,
            b'A'..=b'Z' | b'a'..=b'z' => CptFlags::LETTER,
            b' ' => CptFlags::SEPARATOR,
            b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~' => CptFlags::SYMBOL,
            0x21..=0x7E => CptFlags::PUNCTUATION,
            _ => CptFlags::CONTROL,
        };
        let ws = if matches!(b, 0x09..=0x0D | b' ') { CptFlags::WHITESPACE } else { 0 };
        t[i] = CptFlags(f | ws);
        i += 1;
    }
    t
};

/// The category flags of `c`.
#[inline]
pub fn flags(c: char) -> CptFlags {
    if c.is_ascii() {
        ASCII_FLAGS[c as usize]
    } else {
        compute_flags(c)
    }
}

/// Unicode's simple lowercase mapping (one code point to one code point, as UnicodeData.txt
/// gives it); `c` itself when it has none.
pub fn to_lower(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    // `to_lowercase` gives the full mapping; its first code point is the simple mapping (the
    // only multi-code-point lowercase, U+0130, maps simply to its first code point 'i').
    c.to_lowercase().next().unwrap_or(c)
}

/// The first code point of the canonical decomposition of `c` ("é" -> "e", "가" -> "ᄀ").
pub fn nfd_first(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let mut first = None;
    unicode_normalization::char::decompose_canonical(c, |d| {
        if first.is_none() {
            first = Some(d);
        }
    });
    first.unwrap_or(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_table_agrees_with_the_category_data() {
        for b in 0u8..128 {
            let c = b as char;
            assert_eq!(flags(c), compute_flags(c), "ASCII {b:#04x}");
        }
    }

    #[test]
    fn categories_of_sample_code_points() {
        assert!(flags('é').is_letter());
        assert!(flags('中').is_letter());
        assert!(flags('٣').is_number());
        assert!(flags('\u{3000}').is_whitespace());
        assert!(flags('\u{0301}').is_accent_mark());
        assert!(flags('…').is_punctuation());
        assert!(flags('€').is_symbol());
        assert!(flags('\u{200D}').is_control());
        assert!(!flags('\u{200B}').is_whitespace());
    }

    #[test]
    fn lowercase_and_decomposition() {
        assert_eq!(to_lower('Ä'), 'ä');
        assert_eq!(to_lower('\u{130}'), 'i');
        assert_eq!(to_lower('ß'), 'ß');
        assert_eq!(nfd_first('é'), 'e');
        assert_eq!(nfd_first('가'), '\u{1100}');
        assert_eq!(nfd_first('x'), 'x');
    }
}
