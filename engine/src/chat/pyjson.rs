//! Python's `json.dumps` and `float.__repr__` over template values: the `tojson` that Hugging Face
//! installs in its chat-template environment, byte for byte.

use std::fmt::Write as _;

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

/// The arguments of `json.dumps` that HF's `tojson` passes through.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    pub ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: items on their own lines, each level indented by `s`
    /// (Python's `indent=2` is `"  "`, `indent=0` is `""` and still breaks lines).
    pub indent: Option<String>,
    /// `(item separator, key separator)`; `None` gives Python's defaults, which depend on `indent`.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

/// `json.dumps(value, **opts)`.
pub fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, Error> {
    // Python's defaults: `", "` between items on one line, but `","` when `indent` breaks lines,
    // so that lines carry no trailing space.
    let (item_sep, key_sep) = match &opts.separators {
        Some((i, k)) => (i.as_str(), k.as_str()),
        None if opts.indent.is_some() => (",", ": "),
        None => (", ", ": "),
    };
    let mut out = String::new();
    let mut w = Writer { opts, item_sep, key_sep, out: &mut out };
    w.value(value, 0)?;
    Ok(out)
}

struct Writer<'a> {
    opts: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
    out: &'a mut String,
}

impl Writer<'_> {
    fn value(&mut self, v: &Value, depth: usize) -> Result<(), Error> {
        match v.kind() {
            ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self.out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.number(v)?,
            ValueKind::String => string(self.out, v.as_str().unwrap_or_default(), self.opts.ensure_ascii),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.open_close('[', ']', depth, items.len(), |w, i, d| w.value(&items[i], d))?;
            }
            ValueKind::Map => {
                let mut pairs = Vec::new();
                for k in v.try_iter()? {
                    let val = v.get_item(&k)?;
                    pairs.push((key_string(&k)?, val));
                }
                if self.opts.sort_keys {
                    pairs.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.open_close('{', '}', depth, pairs.len(), |w, i, d| {
                    string(w.out, &pairs[i].0, w.opts.ensure_ascii);
                    w.out.push_str(w.key_sep);
                    w.value(&pairs[i].1, d)
                })?;
            }
            // Python raises for anything JSON cannot hold (Undefined, functions, namespaces...).
            kind => {
                let what = if v.is_undefined() { "Undefined".to_string() } else { kind.to_string() };
                return Err(Error::new(ErrorKind::InvalidOperation, format!("Object of type {what} is not JSON serializable")));
            }
        }
        Ok(())
    }

    /// Writes `open items close`, one item per line when indenting (`[]`/`{}` stay closed up).
    fn open_close(
        &mut self,
        open: char,
        close: char,
        depth: usize,
        len: usize,
        mut item: impl FnMut(&mut Self, usize, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.out.push(open);
        if len > 0 {
            for i in 0..len {
                if i > 0 {
                    self.out.push_str(self.item_sep);
                }
                self.newline(depth + 1);
                item(self, i, depth + 1)?;
            }
            self.newline(depth);
        }
        self.out.push(close);
        Ok(())
    }

    fn newline(&mut self, depth: usize) {
        if let Some(indent) = &self.opts.indent {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str(indent);
            }
        }
    }

    fn number(&mut self, v: &Value) -> Result<(), Error> {
        if v.is_integer() {
            write!(self.out, "{v}").ok();
        } else {
            let f = f64::try_from(v.clone())?;
            // json.dumps writes the non-finite floats as JavaScript names (allow_nan=True).
            if f.is_nan() {
                self.out.push_str("NaN");
            } else if f.is_infinite() {
                self.out.push_str(if f < 0.0 { "-Infinity" } else { "Infinity" });
            } else {
                self.out.push_str(&float_repr(f));
            }
        }
        Ok(())
    }
}

/// A dict key as json.dumps converts it: str as is, numbers, booleans and None to their JSON text.
fn key_string(k: &Value) -> Result<String, Error> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or_default().to_string()),
        ValueKind::None => Ok("null".into()),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.into()),
        ValueKind::Number if k.is_integer() => Ok(k.to_string()),
        ValueKind::Number => Ok(float_repr(f64::try_from(k.clone())?)),
        kind => Err(Error::new(ErrorKind::InvalidOperation, format!("keys must be str, int, float, bool or None, not {kind}"))),
    }
}

/// A JSON string literal as Python's encoder writes it.
fn string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                write!(out, "\\u{:04x}", c as u32).ok();
            }
            // ensure_ascii escapes everything outside printable ASCII, DEL included, with
            // UTF-16 surrogate pairs above the BMP.
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(out, "\\u{u:04x}").ok();
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that round-trip, in positional notation when the
/// decimal exponent is in [-4, 16), otherwise `d.ddde+XX` (at least two exponent digits).
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f < 0.0 { "-inf".into() } else { "inf".into() };
    }
    // Rust's `{:e}` gives the same shortest round-trip digits as Python's repr.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always writes an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` writes an integer exponent");
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            let (int, frac) = digits.split_at((exp + 1) as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (1e100, "1e+100"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(f), want, "{f:e}");
        }
    }
}
