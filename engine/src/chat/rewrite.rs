//! Source rewrites applied before compiling, for the two places where minijinja's grammar or
//! semantics differ from jinja2 in ways a template can observe: transformers' `{% generation %}`
//! tag, and `for` over `None` (an error in Python, an empty loop in minijinja). Line numbers are
//! kept, so error messages still point at the template's own lines.

/// The filter every `for` loop's iterable goes through; see [`crate::chat`]'s environment.
pub(super) const ITER_CHECK_FILTER: &str = "__jinja2_iter";

/// Rewrites `source` so that minijinja renders it as jinja2 (with transformers' extension) does:
///
/// * `{% generation %}` / `{% endgeneration %}` (transformers' AssistantTracker: it marks
///   assistant text for training masks and renders its body unchanged) become `{% if true %}` /
///   `{% endif %}`, which strip whitespace in the same way;
/// * `{% for TARGET in ITER ... %}` becomes `{% for TARGET in (ITER)|__jinja2_iter ... %}`; the
///   filter raises Python's `TypeError` where Python cannot iterate (`None`).
///
/// Text, `{{ }}` expressions, comments and `{% raw %}` bodies are copied untouched.
pub(super) fn rewrite(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let b = source.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let Some(off) = source[i..].find('{') else { break };
        let at = i + off;
        match b.get(at + 1) {
            Some(b'#') => {
                // A comment: copied as is up to its end.
                let end = source[at..].find("#}").map_or(b.len(), |e| at + e + 2);
                out.push_str(&source[i..end]);
                i = end;
            }
            Some(b'{') => {
                let end = skip_code(source, at + 2, "}}");
                out.push_str(&source[i..end]);
                i = end;
            }
            Some(b'%') => {
                out.push_str(&source[i..at]);
                let end = skip_code(source, at + 2, "%}");
                let tag = &source[at..end];
                if tag_keyword(tag) == Some("raw") {
                    // Everything up to the end of `{% endraw %}` is text.
                    let body_end = find_endraw(source, end).unwrap_or(b.len());
                    out.push_str(&source[at..body_end]);
                    i = body_end;
                } else {
                    out.push_str(&rewrite_tag(tag));
                    i = end;
                }
            }
            _ => {
                out.push_str(&source[i..at + 1]);
                i = at + 1;
            }
        }
    }
    out.push_str(&source[i.min(b.len())..]);
    out
}

/// The index just past `close`, scanning Jinja code from `from` (string literals may hold it).
fn skip_code(source: &str, from: usize, close: &str) -> usize {
    let b = source.as_bytes();
    let mut i = from;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => i = skip_string(b, i, q),
            _ if source[i..].starts_with(close) => return i + close.len(),
            _ => i += 1,
        }
    }
    b.len()
}

/// The index just past the string literal opened by quote `q` at `at`.
fn skip_string(b: &[u8], at: usize, q: u8) -> usize {
    let mut i = at + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// `{%- for x in y -%}` -> (prefix `{%- `, inner `for x in y`, suffix ` -%}`).
fn split_tag(tag: &str) -> (&str, &str, &str) {
    if tag.len() < 4 || !tag.ends_with("%}") {
        // Unterminated: left as is for the parser to report.
        return (tag, "", "");
    }
    let open = 2 + usize::from(tag[2..].starts_with(['-', '+']));
    let body_end = tag.len().saturating_sub(2).max(open);
    let close = if body_end > open && tag[..body_end].ends_with(['-', '+']) { body_end - 1 } else { body_end };
    let inner = &tag[open..close];
    let lead = inner.len() - inner.trim_start().len();
    let trail = inner.trim_end().len();
    (&tag[..open + lead], &inner[lead..trail.max(lead)], &tag[open + trail.max(lead)..])
}

fn tag_keyword(tag: &str) -> Option<&str> {
    let (_, inner, _) = split_tag(tag);
    let end = inner.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(inner.len());
    (end > 0).then(|| &inner[..end])
}

fn find_endraw(source: &str, from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(off) = source[i..].find("{%") {
        let at = i + off;
        let end = skip_code(source, at + 2, "%}");
        if tag_keyword(&source[at..end]) == Some("endraw") {
            return Some(end);
        }
        i = at + 2;
    }
    None
}

fn rewrite_tag(tag: &str) -> String {
    let (pre, inner, post) = split_tag(tag);
    match tag_keyword(tag) {
        Some("generation") if inner == "generation" => format!("{pre}if true{post}"),
        Some("endgeneration") if inner == "endgeneration" => format!("{pre}endif{post}"),
        Some("for") => match for_iterable(inner) {
            Some((s, e)) => {
                format!("{pre}{}({})|{ITER_CHECK_FILTER}{}{post}", &inner[..s], &inner[s..e], &inner[e..])
            }
            None => tag.to_string(),
        },
        _ => tag.to_string(),
    }
}

/// The byte span of ITER in `for TARGET in ITER [if COND] [recursive]`: from after the first
/// top-level `in` to the first top-level `if` / `recursive` (jinja2 parses ITER without
/// conditional expressions, so a bare `if` always starts the filter).
fn for_iterable(inner: &str) -> Option<(usize, usize)> {
    let b = inner.as_bytes();
    let (mut i, mut depth) = (3, 0usize);
    let mut start = None;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i = skip_string(b, i, q);
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            c if (c.is_ascii_alphabetic() || c == b'_') && (i == 0 || !is_word_byte(b[i - 1])) => {
                let end = i + b[i..].iter().take_while(|c| is_word_byte(**c)).count();
                let word = &inner[i..end];
                if depth == 0 {
                    match (start, word) {
                        (None, "in") => start = Some(end),
                        (Some(s), "if" | "recursive") => return Some(trimmed(inner, s, i)),
                        _ => {}
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    start.map(|s| trimmed(inner, s, b.len()))
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `[s, e)` without the whitespace at either end.
fn trimmed(text: &str, s: usize, e: usize) -> (usize, usize) {
    let part = &text[s..e];
    let lead = part.len() - part.trim_start().len();
    (s + lead, s + part.trim_end().len().max(lead))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(rewrite("{%- generation -%}a{%+endgeneration%}"), "{%- if true -%}a{%+endif%}");
        assert_eq!(rewrite("{% generation_x %}"), "{% generation_x %}");
    }

    #[test]
    fn for_iterables_get_the_check() {
        assert_eq!(rewrite("{% for x in xs %}"), "{% for x in (xs)|__jinja2_iter %}");
        assert_eq!(
            rewrite("{%- for k, v in d.items() if k != 'in' recursive -%}"),
            "{%- for k, v in (d.items())|__jinja2_iter if k != 'in' recursive -%}"
        );
        assert_eq!(rewrite("{% for x in [a if b else c] %}"), "{% for x in ([a if b else c])|__jinja2_iter %}");
        assert_eq!(rewrite("{% for info in infos|select('in', ['x']) %}"), "{% for info in (infos|select('in', ['x']))|__jinja2_iter %}");
    }

    #[test]
    fn text_expressions_comments_and_raw_are_untouched() {
        let src = "for x in y {{ '{% for a in b %}' }}{# {% for a in b %} #}{% raw %}{% for a in b %}{% endraw %}";
        assert_eq!(rewrite(src), src);
        assert_eq!(rewrite("a { b } {"), "a { b } {");
    }
}
