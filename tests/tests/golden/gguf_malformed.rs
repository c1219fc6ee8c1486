//! Malformed GGUF files: a corpus of broken variants of a valid writer-made file (truncations,
//! huge counts and lengths, bad offsets and types, overlaps, duplicates, deep nesting, bad
//! alignment) must each give an error naming the key or tensor, and a seeded random mutation
//! run must never panic.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

use engine::gguf::writer::encode_header;
use engine::gguf::GgmlType;
use engine::gguf::{Array, GgufError, GgufFile, GgufWriter, Problem, TensorInfo, Value, ValueType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A small valid file with every kind of field: strings, arrays of strings, numbers and bools,
/// nested arrays, an explicit alignment and tensors of several types (two the engine does not
/// compute with).
fn base() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama").unwrap();
    w.add("general.alignment", 32u32).unwrap();
    w.add("general.name", "tiny test model").unwrap();
    w.add("llama.context_length", 128u32).unwrap();
    w.add("llama.rope.freq_base", 10000f32).unwrap();
    let tokens: Vec<Vec<u8>> = (0..12).map(|i| format!("tok{i}").into_bytes()).collect();
    w.add("tokenizer.ggml.tokens", Array::String(tokens)).unwrap();
    w.add("tokenizer.ggml.scores", Array::F32((0..12).map(|i| i as f32 * -0.5).collect())).unwrap();
    w.add("tokenizer.ggml.token_type", Array::I32(vec![1; 12])).unwrap();
    w.add("tokenizer.ggml.add_bos_token", true).unwrap();
    w.add("dup.a", 1u64).unwrap();
    w.add("dup.b", -1i64).unwrap();
    w.add(
        "test.nested",
        Array::Array(vec![Array::U16(vec![1, 2]), Array::empty(ValueType::Bool), Array::Array(vec![Array::F64(vec![0.5])])]),
    )
    .unwrap();
    let data = |n: usize| (0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>();
    w.add_tensor("w.one", &[8, 2], GgmlType::F32, data(64)).unwrap();
    w.add_tensor("w.two", &[64, 2], GgmlType::Q8_0, data(136)).unwrap();
    w.add_tensor("w.kq", &[256], GgmlType::Q4_K, data(144)).unwrap();
    w.add_tensor("w.iq", &[256], GgmlType::IQ2_XXS, data(66)).unwrap();
    w.add_tensor("w.i8", &[3, 1, 1, 2], GgmlType::I8, data(6)).unwrap();
    w.to_bytes().unwrap()
}

/// Position of the only occurrence of `needle`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = hay.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect();
    assert_eq!(hits.len(), 1, "{:?} occurs {} times", String::from_utf8_lossy(needle), hits.len());
    hits[0]
}

/// Offset of the value type id of metadata key `key`.
fn value_type_pos(bytes: &[u8], key: &str) -> usize {
    find(bytes, key.as_bytes()) + key.len()
}

/// Offsets of a tensor record's fields: (n_dims, first dim, type, data offset).
fn record(bytes: &[u8], name: &str) -> (usize, usize, usize, usize) {
    let n_dims_pos = find(bytes, name.as_bytes()) + name.len();
    let n_dims = u32::from_le_bytes(bytes[n_dims_pos..n_dims_pos + 4].try_into().unwrap()) as usize;
    let type_pos = n_dims_pos + 4 + 8 * n_dims;
    (n_dims_pos, n_dims_pos + 4, type_pos, type_pos + 4)
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Parses `bytes`, expecting an error whose message contains every string in `needles`;
/// returns the error.
#[track_caller]
fn expect_err(bytes: Vec<u8>, needles: &[&str]) -> GgufError {
    let err = match GgufFile::from_bytes(bytes) {
        Ok(_) => panic!("a malformed file was accepted (expected {needles:?})"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "multi-line message: {msg}");
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not contain {n:?}");
    }
    err
}

/// A file whose header is `metadata` and `tensors` as given (offsets unchecked), followed by
/// `data_len` bytes of data; for layouts the writer refuses to make.
fn raw_file(version: u32, metadata: &[(String, Value)], tensors: &[TensorInfo], data_len: usize) -> Vec<u8> {
    let mut bytes = encode_header(version, metadata, tensors);
    bytes.resize(bytes.len().div_ceil(32) * 32 + data_len, 0);
    bytes
}

fn tensor(name: &str, dims: &[u64], ty: GgmlType, offset: u64) -> TensorInfo {
    TensorInfo::new(name, dims.to_vec(), ty, offset).unwrap()
}

fn header_end(bytes: &[u8]) -> usize {
    GgufFile::from_bytes(bytes.to_vec()).unwrap().data_offset() as usize
}

#[test]
fn base_file_is_valid() {
    let f = GgufFile::from_bytes(base()).unwrap();
    assert_eq!(f.tensors().len(), 5);
    assert_eq!(f.tensor("w.iq").unwrap().ty, GgmlType::IQ2_XXS);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = base();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    // Bytes past the end of the last tensor's data are padding; every shorter prefix must fail.
    let data_end = file.data_offset() + file.tensors().iter().map(|t| t.end()).max().unwrap();
    let header = file.data_offset() as usize;
    for len in 0..data_end as usize {
        let err = expect_err(bytes[..len].to_vec(), &[]);
        let msg = err.to_string();
        if len < header {
            assert!(
                matches!(
                    err.problem(),
                    Some(
                        Problem::Truncated { .. }
                            | Problem::LengthTooLarge { .. }
                            | Problem::ArrayTooLong { .. }
                            | Problem::CountTooLarge { .. }
                            | Problem::DataPastEnd { .. }
                    )
                ),
                "prefix {len}: {msg}"
            );
        } else {
            assert!(matches!(err.problem(), Some(Problem::DataPastEnd { .. })), "prefix {len}: {msg}");
            assert!(msg.contains("tensor \"w."), "prefix {len}: {msg}");
        }
    }
    // Truncated inside the tokens array: the message names the key.
    let at = value_type_pos(&bytes, "tokenizer.ggml.tokens") + 30;
    expect_err(bytes[..at].to_vec(), &["metadata key \"tokenizer.ggml.tokens\"", "left in the file"]);
    // Inside a tensor record: names the tensor.
    let (_, dims, _, _) = record(&bytes, "w.kq");
    expect_err(bytes[..dims + 3].to_vec(), &["tensor \"w.kq\"", "dimension needs 8 bytes but only 3"]);
}

#[test]
fn bad_magic_and_versions() {
    let bytes = base();
    expect_err(Vec::new(), &["header", "magic needs 4 bytes but only 0"]);
    let mut b = bytes.clone();
    b[0] = b'X';
    expect_err(b, &["not a GGUF file", "XGUF"]);
    for (version, msg) in [(1, "version 1 is not supported"), (4, "version 4"), (0x0300_0000, "big-endian")] {
        let mut b = bytes.clone();
        put_u32(&mut b, 4, version);
        expect_err(b, &[msg]);
    }
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    let bytes = base();
    for count in [u64::MAX, 1 << 63, 1 << 40, bytes.len() as u64] {
        let mut b = bytes.clone();
        put_u64(&mut b, 8, count);
        expect_err(b, &["header", &format!("tensor count {count}")]);
        let mut b = bytes.clone();
        put_u64(&mut b, 16, count);
        expect_err(b, &["header", &format!("metadata entry count {count}")]);
    }
    // One tensor more than the file has: the next record is read from the data padding.
    let mut b = bytes.clone();
    put_u64(&mut b, 8, 6);
    expect_err(b, &[]);
}

#[test]
fn huge_lengths_name_the_key_or_tensor() {
    let bytes = base();
    let left_after = |at: usize| bytes.len() - at - 8;
    for len in [u64::MAX, 1 << 63, bytes.len() as u64] {
        // Length of the first key.
        let mut b = bytes.clone();
        put_u64(&mut b, 24, len);
        expect_err(b, &["metadata entry #0", &format!("key length {len} exceeds the {} bytes left", left_after(24))]);
        // A string value.
        let mut b = bytes.clone();
        let at = value_type_pos(&bytes, "general.name") + 4;
        put_u64(&mut b, at, len);
        expect_err(b, &["metadata key \"general.name\"", &format!("string length {len}")]);
        // The count of an array.
        let mut b = bytes.clone();
        let at = value_type_pos(&bytes, "tokenizer.ggml.tokens") + 8;
        put_u64(&mut b, at, len);
        let left = left_after(at);
        let msg = format!("metadata key \"tokenizer.ggml.tokens\": array length {len} exceeds the {left} bytes left in the file");
        expect_err(b, &[&msg]);
        // A string inside an array.
        let mut b = bytes.clone();
        put_u64(&mut b, at + 8, len);
        expect_err(b, &["metadata key \"tokenizer.ggml.tokens\"", &format!("string length {len}")]);
        // A tensor name.
        let mut b = bytes.clone();
        let at = find(&bytes, b"w.two") - 8;
        put_u64(&mut b, at, len);
        expect_err(b, &["tensor record #1", &format!("name length {len}")]);
    }
    // A scores array one element longer than the rest of the file can hold.
    let mut b = bytes.clone();
    let at = value_type_pos(&bytes, "tokenizer.ggml.scores") + 8;
    let count = (left_after(at) / 4 + 1) as u64;
    put_u64(&mut b, at, count);
    expect_err(b, &["\"tokenizer.ggml.scores\"", &format!("array length {count}"), "each f32 takes at least 4 bytes"]);
}

#[test]
fn unknown_value_types_name_the_key() {
    let bytes = base();
    for id in [13, 255, u32::MAX] {
        let mut b = bytes.clone();
        put_u32(&mut b, value_type_pos(&bytes, "llama.context_length"), id);
        expect_err(b, &["metadata key \"llama.context_length\"", &format!("unknown value type id {id}")]);
        // Element type of an array.
        let mut b = bytes.clone();
        put_u32(&mut b, value_type_pos(&bytes, "tokenizer.ggml.scores") + 4, id);
        expect_err(b, &["metadata key \"tokenizer.ggml.scores\"", &format!("unknown value type id {id}")]);
    }
    // A bool byte other than 0 or 1.
    let mut b = bytes.clone();
    b[value_type_pos(&bytes, "tokenizer.ggml.add_bos_token") + 4] = 2;
    expect_err(b, &["\"tokenizer.ggml.add_bos_token\"", "boolean byte 2"]);
}

#[test]
fn bad_tensor_records_name_the_tensor() {
    let bytes = base();
    let (n_dims, dim0, ty, off) = record(&bytes, "w.two");
    for id in [4, 5, 31, 36, 1000, u32::MAX] {
        let mut b = bytes.clone();
        put_u32(&mut b, ty, id);
        expect_err(b, &["tensor \"w.two\"", &format!("unknown tensor type id {id}")]);
    }
    for n in [0, 5, u32::MAX] {
        let mut b = bytes.clone();
        put_u32(&mut b, n_dims, n);
        expect_err(b, &["tensor \"w.two\"", &format!("{n} dimensions")]);
    }
    for (dim, needle) in [(0, "dimension 0 is 0"), (u64::MAX, "dimension 0 is 18446744073709551615"), (1 << 63, "dimension 0 is")] {
        let mut b = bytes.clone();
        put_u64(&mut b, dim0, dim);
        expect_err(b, &["tensor \"w.two\"", needle]);
    }
    // Two large dimensions whose product overflows.
    let mut b = bytes.clone();
    put_u64(&mut b, dim0, 1 << 40);
    put_u64(&mut b, dim0 + 8, 1 << 40);
    expect_err(b, &["tensor \"w.two\"", "element count"]);
    // A Q8_0 row of 48 elements is not whole blocks of 32.
    let mut b = bytes.clone();
    put_u64(&mut b, dim0, 48);
    expect_err(b, &["tensor \"w.two\"", "row length 48 is not a multiple of Q8_0's block size 32"]);
    // Misaligned, past the end, overflowing offsets.
    let offset = get_u64(&bytes, off);
    let mut b = bytes.clone();
    put_u64(&mut b, off, offset + 1);
    expect_err(b, &["tensor \"w.two\"", "not a multiple of the alignment 32"]);
    let section = (bytes.len() - header_end(&bytes)) as u64;
    for bad in [section, u64::MAX - 31, 1 << 63] {
        let mut b = bytes.clone();
        put_u64(&mut b, off, bad);
        expect_err(b, &["tensor \"w.two\"", "ends past the"]);
    }
    // Overlap: w.two starts where w.one does.
    let mut b = bytes.clone();
    put_u64(&mut b, off, 0);
    let err = expect_err(b, &["overlaps tensor"]);
    assert!(err.to_string().contains("\"w.one\"") && err.to_string().contains("\"w.two\""), "{err}");
}

#[test]
fn overlapping_and_out_of_order_tensors() {
    let t = |name: &str, offset| tensor(name, &[16], GgmlType::F32, offset);
    // Out of file order but disjoint: fine.
    let ok = raw_file(3, &[], &[t("b", 64), t("a", 0)], 128);
    GgufFile::from_bytes(ok).unwrap();
    // Partly overlapping.
    let bad = raw_file(3, &[], &[t("a", 0), t("b", 32)], 128);
    expect_err(bad, &["tensor \"b\"", "overlaps tensor \"a\""]);
    // Identical ranges.
    let bad = raw_file(3, &[], &[t("a", 64), t("b", 64)], 128);
    expect_err(bad, &["tensor \"b\"", "overlaps tensor \"a\""]);
}

#[test]
fn duplicates_are_refused() {
    let bytes = base();
    let mut b = bytes.clone();
    let at = find(&bytes, b"dup.b");
    b[at + 4] = b'a';
    expect_err(b, &["metadata key \"dup.a\"", "appears twice"]);
    let mut b = bytes.clone();
    let at = find(&bytes, b"w.two");
    b[at..at + 5].copy_from_slice(b"w.one");
    expect_err(b, &["tensor \"w.one\"", "appears twice"]);
}

#[test]
fn invalid_utf8_names_are_refused() {
    let bytes = base();
    let mut b = bytes.clone();
    b[find(&bytes, b"general.name")] = 0xff;
    expect_err(b, &["metadata entry #2", "key is not valid UTF-8"]);
    let mut b = bytes.clone();
    b[find(&bytes, b"w.kq")] = 0xc3;
    expect_err(b, &["tensor record #2", "tensor name is not valid UTF-8"]);
}

/// A file with one key holding `depth` nested arrays, each with one element (the innermost
/// empty).
fn nested(depth: usize) -> Vec<u8> {
    let mut bytes = encode_header(3, &[("deep".to_owned(), Value::U8(0))], &[]);
    bytes.truncate(bytes.len() - 5); // the u8 value and its type id
    bytes.extend_from_slice(&ValueType::Array.id().to_le_bytes());
    for level in 0..depth {
        bytes.extend_from_slice(&ValueType::Array.id().to_le_bytes());
        bytes.extend_from_slice(&u64::from(level + 1 < depth).to_le_bytes());
    }
    bytes.resize(bytes.len().div_ceil(32) * 32, 0);
    bytes
}

#[test]
fn deep_nesting_is_refused() {
    GgufFile::from_bytes(nested(engine::gguf::MAX_ARRAY_DEPTH)).unwrap();
    for depth in [engine::gguf::MAX_ARRAY_DEPTH + 1, 1000, 100_000] {
        expect_err(nested(depth), &["metadata key \"deep\"", "nested more than 8 levels"]);
    }
}

#[test]
fn bad_alignment_is_refused() {
    let t = [tensor("t", &[8], GgmlType::F32, 0)];
    for (value, needle) in [
        (Value::U32(0), "found u32 0"),
        (Value::U32(3), "found u32 3"),
        (Value::U32(48), "found u32 48"),
        (Value::U64(32), "found u64 32"),
        (Value::I32(32), "found i32 32"),
        (Value::String(b"32".to_vec()), "found a string"),
    ] {
        let b = raw_file(3, &[("general.alignment".to_owned(), value)], &t, 32);
        expect_err(b, &["metadata key \"general.alignment\"", needle]);
    }
    // A valid larger alignment moves the data section.
    let b = raw_file(3, &[("general.alignment".to_owned(), Value::U32(1 << 20))], &t, 32);
    expect_err(b, &["tensor \"t\"", "ends past the"]);
}

#[test]
fn open_errors_name_the_path() {
    let dir = std::env::temp_dir().join(format!("gguf-malformed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.gguf");
    let msg = GgufFile::open(&missing).unwrap_err().to_string();
    assert!(msg.starts_with(&missing.display().to_string()), "{msg}");
    let path = dir.join("short.gguf");
    std::fs::write(&path, &base()[..100]).unwrap();
    let msg = GgufFile::open(&path).unwrap_err().to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())) && msg.contains("left in the file"), "{msg}");
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(GgufFile::open(&empty).unwrap_err().to_string().contains("magic needs 4 bytes"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Offsets and widths of every fixed-size field of a valid file's header region (counts,
/// lengths, type ids, dimensions, offsets), the places where extreme values do most harm.
fn fields(bytes: &[u8]) -> Vec<(usize, usize)> {
    let u32_at = |p: usize| u32::from_le_bytes(bytes[p..p + 4].try_into().unwrap());
    let u64_at = |p: usize| get_u64(bytes, p) as usize;
    let mut out = vec![(4, 4), (8, 8), (16, 8)];
    let mut p = 24;
    fn value(bytes: &[u8], ty: u32, p: &mut usize, out: &mut Vec<(usize, usize)>) {
        let u32_at = |p: usize| u32::from_le_bytes(bytes[p..p + 4].try_into().unwrap());
        match ty {
            8 => {
                out.push((*p, 8));
                *p += 8 + get_u64(bytes, *p) as usize;
            }
            9 => {
                let elem = u32_at(*p);
                out.push((*p, 4));
                out.push((*p + 4, 8));
                let n = get_u64(bytes, *p + 4);
                *p += 12;
                for _ in 0..n {
                    value(bytes, elem, p, out);
                }
            }
            t => *p += ValueType::from_id(t).unwrap().min_size() as usize,
        }
    }
    for _ in 0..u64_at(16) {
        out.push((p, 8));
        p += 8 + u64_at(p);
        out.push((p, 4));
        let ty = u32_at(p);
        p += 4;
        value(bytes, ty, &mut p, &mut out);
    }
    for _ in 0..u64_at(8) {
        out.push((p, 8));
        p += 8 + u64_at(p);
        out.push((p, 4));
        let n = u32_at(p) as usize;
        p += 4;
        for _ in 0..n {
            out.push((p, 8));
            p += 8;
        }
        out.push((p, 4));
        out.push((p + 4, 8));
        p += 12;
    }
    out
}

const EXTREMES: [u64; 12] = [0, 1, 2, 31, 32, 255, 1 << 31, u32::MAX as u64, 1 << 32, 1 << 63, u64::MAX, u64::MAX - 1];

fn mutate(rng: &mut StdRng, base: &[u8], fields: &[(usize, usize)], header_len: usize) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..rng.random_range(1..=3) {
        if b.is_empty() {
            break;
        }
        // Most mutations land in the header region, where the parser's decisions are.
        let region = if rng.random_bool(0.9) { header_len.min(b.len()) } else { b.len() };
        let at = rng.random_range(0..region);
        match rng.random_range(0..7) {
            0 => b[at] ^= 1 << rng.random_range(0..8),
            1 => b[at] = rng.random(),
            2 => {
                let n = rng.random_range(1..=16);
                for _ in 0..n {
                    b.insert(at, rng.random());
                }
            }
            3 => {
                let n = rng.random_range(1..=16).min(b.len() - at);
                b.drain(at..at + n);
            }
            4 => b.truncate(at),
            _ => {
                let (pos, width) = fields[rng.random_range(0..fields.len())];
                let len = b.len() as u64;
                let v = match rng.random_range(0..4) {
                    0 => EXTREMES[rng.random_range(0..EXTREMES.len())],
                    1 => len.wrapping_add(rng.random_range(0..3)).wrapping_sub(1),
                    2 => (len - pos.min(b.len()) as u64) / rng.random_range(1..=8),
                    _ => rng.random::<u64>() >> rng.random_range(0..64),
                };
                if pos + width <= b.len() {
                    b[pos..pos + width].copy_from_slice(&v.to_le_bytes()[..width]);
                }
            }
        }
    }
    b
}

/// A `Write` that fails past a limit: a mutated file may declare a huge alignment, and writing
/// it back must not pad gigabytes.
struct Limited(Vec<u8>);

impl Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > 1 << 22 {
            return Err(std::io::Error::other("limit"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Uses everything a parsed file offers; a file that was accepted must behave.
fn exercise(file: &GgufFile) {
    for (k, v) in file.metadata() {
        assert!(file.get(k).is_some());
        let _ = (v.as_str(), v.as_u64(), v.as_f64(), v.as_array().map(|a| (a.len(), a.get(0), a.depth())));
    }
    let mut sum = 0u64;
    for t in file.tensors() {
        let data = file.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        sum += data.first().copied().unwrap_or(0) as u64 + t.row_len() + t.n_rows();
    }
    std::hint::black_box(sum);
    let mut out = Limited(Vec::new());
    if file.write_to(&mut out).is_ok() {
        // What was written back reads back and writes the same bytes again.
        let again = GgufFile::from_bytes(out.0.clone()).expect("written-back file reads");
        let mut out2 = Limited(Vec::new());
        again.write_to(&mut out2).unwrap();
        assert!(out.0 == out2.0, "second write differs");
    }
}

#[test]
fn random_mutations_never_panic() {
    let start = std::time::Instant::now();
    let mut small = GgufWriter::new();
    small.add("general.architecture", "x").unwrap();
    small.add("a", Array::Array(vec![Array::String(vec![b"s".to_vec()]), Array::empty(ValueType::U8)])).unwrap();
    small.add_tensor("t", &[32], GgmlType::Q4_0, vec![0u8; 18]).unwrap();
    let bases = [base(), small.to_bytes().unwrap(), nested(8)];
    let mut rng = StdRng::seed_from_u64(0x6767_7566);
    let (mut runs, mut accepted, mut panics) = (0u64, 0u64, 0u64);
    for (i, base) in bases.iter().enumerate() {
        let fields = fields(base);
        let header_len = header_end(base);
        let n = if i == 0 { 200_000 } else { 50_000 };
        for _ in 0..n {
            let input = mutate(&mut rng, base, &fields, header_len);
            let result = catch_unwind(AssertUnwindSafe(|| match GgufFile::from_bytes(input.clone()) {
                Ok(file) => {
                    exercise(&file);
                    true
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    false
                }
            }));
            runs += 1;
            match result {
                Ok(ok) => accepted += u64::from(ok),
                Err(_) => {
                    panics += 1;
                    if panics <= 3 {
                        eprintln!("panic on input {:02x?}", input);
                    }
                }
            }
        }
    }
    println!(
        "{runs} mutated inputs in {:.2?}: {accepted} accepted, {} rejected, {panics} panics",
        start.elapsed(),
        runs - accepted - panics
    );
    assert_eq!(panics, 0);
    assert!(runs >= 100_000);
}
