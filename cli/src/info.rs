//! `engine-cli info`: describes a GGUF file (architecture, sizes, tensor types, tokenizer, all
//! metadata) as text or as one JSON object.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use engine::gguf::{Array, GgufFile, Value};
use serde_json::{json, Map, Value as Json};

/// Arrays longer than this are summarised (type, length, first items).
const ARRAY_HEAD: usize = 8;

/// Strings longer than this many characters are cut in the text output.
const STRING_CHARS: usize = 80;

#[derive(clap::Args)]
pub struct InfoArgs {
    /// The GGUF file to describe.
    pub file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InfoArgs) -> anyhow::Result<()> {
    // The error already names the path: "<path>: <reason>".
    let file = GgufFile::open(&args.file)?;
    let summary = Summary::of(&args.file, &file);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary.json(&file))?);
    } else {
        print!("{}", summary.text(&file));
    }
    Ok(())
}

/// Counts and bytes of the tensors of one type.
#[derive(Default)]
struct TypeStats {
    count: u64,
    bytes: u64,
    supported: bool,
}

/// The facts shown at the top of both outputs.
struct Summary {
    path: String,
    arch: Option<String>,
    name: Option<String>,
    parameters: u64,
    tensor_data_bytes: u64,
    types: BTreeMap<&'static str, TypeStats>,
    /// `<arch>.<suffix>` integer hyperparameters, in display order.
    hparams: Vec<(&'static str, Option<u64>)>,
    tokenizer_model: Option<String>,
    tokenizer_pre: Option<String>,
    n_vocab: Option<usize>,
    chat_template: Option<usize>,
}

impl Summary {
    fn of(path: &std::path::Path, file: &GgufFile) -> Summary {
        let arch = file.architecture().map(str::to_owned);
        let prefix = arch.clone().unwrap_or_default();
        let hparam = |suffix: &str| file.get_u64(&format!("{prefix}.{suffix}"));
        let hparams = vec![
            ("context_length", hparam("context_length")),
            ("embedding_length", hparam("embedding_length")),
            ("block_count", hparam("block_count")),
            ("feed_forward_length", hparam("feed_forward_length")),
            ("attention.head_count", hparam("attention.head_count")),
            ("attention.head_count_kv", hparam("attention.head_count_kv")),
        ];
        let mut types: BTreeMap<&'static str, TypeStats> = BTreeMap::new();
        for t in file.tensors() {
            let s = types.entry(t.ty.name()).or_default();
            s.count += 1;
            s.bytes += t.n_bytes;
            s.supported = t.ty.is_supported();
        }
        Summary {
            path: path.display().to_string(),
            arch,
            name: file.get_str("general.name").map(str::to_owned),
            parameters: file.n_parameters(),
            tensor_data_bytes: file.tensor_data_bytes(),
            types,
            hparams,
            tokenizer_model: file.get_str("tokenizer.ggml.model").map(str::to_owned),
            tokenizer_pre: file.get_str("tokenizer.ggml.pre").map(str::to_owned),
            n_vocab: file.get("tokenizer.ggml.tokens").and_then(Value::as_array).map(Array::len),
            chat_template: file.get("tokenizer.chat_template").and_then(Value::as_bytes).map(<[u8]>::len),
        }
    }

    fn hparam(&self, key: &str) -> Option<u64> {
        self.hparams.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v)
    }

    fn json(&self, file: &GgufFile) -> Json {
        let tensor_types: Map<String, Json> = self.types.iter().map(|(name, s)| (name.to_string(), json!(s.count))).collect();
        let tensor_type_bytes: Map<String, Json> = self.types.iter().map(|(name, s)| (name.to_string(), json!(s.bytes))).collect();
        let hyperparameters: Map<String, Json> = self.hparams.iter().filter_map(|(k, v)| Some((k.to_string(), json!((*v)?)))).collect();
        let metadata: Map<String, Json> = file.metadata().iter().map(|(k, v)| (k.clone(), value_json(v))).collect();
        json!({
            "file": self.path,
            "bytes": file.bytes().len(),
            "gguf_version": file.version(),
            "architecture": self.arch,
            "name": self.name,
            "parameters": self.parameters,
            "context_length": self.hparam("context_length"),
            "hyperparameters": hyperparameters,
            "alignment": file.alignment(),
            "data_offset": file.data_offset(),
            "tensor_count": file.tensors().len(),
            "tensor_data_bytes": self.tensor_data_bytes,
            "tensor_types": tensor_types,
            "tensor_type_bytes": tensor_type_bytes,
            "tokenizer": {
                "model": self.tokenizer_model,
                "pre": self.tokenizer_pre,
                "n_vocab": self.n_vocab,
                "chat_template_present": self.chat_template.is_some(),
            },
            "metadata": metadata,
        })
    }

    fn text(&self, file: &GgufFile) -> String {
        let mut s = String::new();
        let none = || "-".to_owned();
        let mut line = |label: &str, value: String| {
            let _ = writeln!(s, "{:<20} {value}", format!("{label}:"));
        };
        line("file", self.path.clone());
        line("GGUF version", file.version().to_string());
        line("architecture", self.arch.clone().unwrap_or_else(none));
        line("name", self.name.clone().unwrap_or_else(none));
        line("parameters", format!("{} ({})", grouped(self.parameters), short(self.parameters)));
        for (key, label) in [
            ("context_length", "context length"),
            ("embedding_length", "embedding length"),
            ("block_count", "blocks"),
            ("feed_forward_length", "feed-forward length"),
            ("attention.head_count", "attention heads"),
            ("attention.head_count_kv", "KV heads"),
        ] {
            if let Some(v) = self.hparam(key) {
                line(label, v.to_string());
            }
        }
        line("tensors", file.tensors().len().to_string());
        line("tensor data", format!("{} bytes ({})", grouped(self.tensor_data_bytes), mib(self.tensor_data_bytes)));
        let tokenizer = match (&self.tokenizer_model, &self.tokenizer_pre) {
            (None, _) => none(),
            (Some(m), None) => m.clone(),
            (Some(m), Some(p)) => format!("{m} (pre-tokenizer {p})"),
        };
        line("tokenizer", tokenizer);
        line("vocabulary", self.n_vocab.map_or_else(none, |n| format!("{n} tokens")));
        line("chat template", self.chat_template.map_or("none".to_owned(), |n| format!("present ({n} bytes)")));
        let _ = writeln!(s, "\ntensor types:");
        for (name, t) in &self.types {
            let note = if t.supported { "" } else { "  (not computed by this engine)" };
            let _ = writeln!(s, "  {name:<8} {:>5} tensors {:>16} bytes{note}", t.count, grouped(t.bytes));
        }
        let _ = writeln!(s, "\nmetadata ({} keys):", file.metadata().len());
        for (k, v) in file.metadata() {
            let _ = writeln!(s, "  {k} = {}", value_text(v));
        }
        s
    }
}

/// A value as JSON; arrays longer than [`ARRAY_HEAD`] become `{"type", "len", "head"}`.
fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => float_json(f64::from(*x)),
        Value::F64(x) => float_json(*x),
        Value::Bool(x) => json!(x),
        Value::String(b) => json!(String::from_utf8_lossy(b)),
        Value::Array(a) => {
            let head: Vec<Json> = a.values().take(ARRAY_HEAD).map(|v| value_json(&v)).collect();
            if a.len() <= ARRAY_HEAD {
                Json::Array(head)
            } else {
                json!({"type": a.elem_type().name(), "len": a.len(), "head": head})
            }
        }
    }
}

/// JSON has no NaN or infinities; those become strings.
fn float_json(x: f64) -> Json {
    serde_json::Number::from_f64(x).map_or_else(|| json!(x.to_string()), Json::Number)
}

/// A value on one line: strings quoted and cut, long arrays as `[type; N] first, items, …`.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(b) => string_text(b),
        Value::F32(x) => x.to_string(),
        Value::Array(a) => {
            let items: Vec<String> = a.values().take(ARRAY_HEAD).map(|v| value_text(&v)).collect();
            if a.len() <= ARRAY_HEAD {
                format!("[{}]", items.join(", "))
            } else {
                format!("[{}; {}] {}, …", a.elem_type(), a.len(), items.join(", "))
            }
        }
        other => match (other.as_u64(), other.as_i64(), other.as_bool(), other.as_f64()) {
            (Some(u), ..) => u.to_string(),
            (None, Some(i), ..) => i.to_string(),
            (_, _, Some(b), _) => b.to_string(),
            (_, _, _, Some(f)) => f.to_string(),
            _ => format!("{other:?}"),
        },
    }
}

/// A string quoted with escapes, cut after [`STRING_CHARS`] characters.
fn string_text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let n = s.chars().count();
    if n <= STRING_CHARS {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(STRING_CHARS).collect();
        format!("{head:?}… ({n} characters)")
    }
}

/// `268098176` as `268,098,176`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `268098176` as `268.1 M`.
fn short(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_readable() {
        assert_eq!(grouped(268_098_176), "268,098,176");
        assert_eq!(grouped(12), "12");
        assert_eq!(short(268_098_176), "268.1 M");
    }

    #[test]
    fn long_values_are_summarised() {
        let a = Value::Array(Array::U32((0..20).collect()));
        assert_eq!(value_text(&a), "[u32; 20] 0, 1, 2, 3, 4, 5, 6, 7, …");
        assert_eq!(value_json(&a), json!({"type": "u32", "len": 20, "head": [0, 1, 2, 3, 4, 5, 6, 7]}));
        assert_eq!(value_json(&Value::Array(Array::I8(vec![-1]))), json!([-1]));
        let long = Value::String("x".repeat(100).into_bytes());
        assert!(value_text(&long).ends_with("… (100 characters)"));
        assert_eq!(value_json(&Value::F32(f32::NAN)), json!("NaN"));
    }
}
