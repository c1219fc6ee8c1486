//! GGUF files read and written back: the fixture models (written by llama.cpp's tools) come out
//! byte-identical, and files built with the writer read back equal.

use std::io::Write;

use engine::gguf::GgmlType;
use engine::gguf::{Array, GgufFile, GgufWriter, Value, ValueType};
use engine_tests::{fetch_model, fixture, read_json};

/// The 26 fixture models, as (file name, index.json entry).
fn fixture_models() -> Vec<(String, serde_json::Value)> {
    let index = read_json(&fixture("models/index.json"));
    let files = index["files"].as_object().expect("index.json: files").clone();
    let models: Vec<_> = files.into_iter().collect();
    assert_eq!(models.len(), 26);
    models
}

#[test]
fn fixture_models_round_trip_byte_identical() {
    for (name, entry) in fixture_models() {
        let path = fixture(&format!("models/{name}"));
        let original = std::fs::read(&path).unwrap();
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(original.len() as u64, entry["bytes"].as_u64().unwrap(), "{name}");

        // What the reader says agrees with index.json.
        let types = entry["tensor_types"].as_object().unwrap();
        assert_eq!(file.tensors().len(), types.len(), "{name}");
        for (tensor, ty) in types {
            let t = file.tensor(tensor).unwrap_or_else(|| panic!("{name}: no tensor {tensor}"));
            assert_eq!(t.ty.name(), ty.as_str().unwrap(), "{name}: {tensor}");
        }
        assert_eq!(file.get_u64("general.file_type"), entry["general.file_type"].as_u64(), "{name}");

        let mut written = Vec::new();
        let n = file.write_to(&mut written).unwrap();
        assert_eq!(n, written.len() as u64);
        assert!(written == original, "{name}: written back differs");
    }
}

/// A `Write` that compares what it is given with expected bytes, so a large file can be
/// checked without a second copy in memory.
struct CompareWriter<'a> {
    expected: &'a [u8],
    pos: usize,
    first_difference: Option<usize>,
}

impl Write for CompareWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.pos + buf.len();
        let same = self.expected.get(self.pos..end) == Some(buf);
        if !same && self.first_difference.is_none() {
            self.first_difference = Some(self.pos);
        }
        self.pos = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn real_gemma_reads_fast_and_round_trips() {
    let path = fetch_model("gemma");
    let start = std::time::Instant::now();
    let file = GgufFile::open(&path).unwrap();
    println!("opened {} in {:?}", path.display(), start.elapsed());
    assert_eq!(file.architecture(), Some("gemma3"));
    assert_eq!(file.tensors().len(), 236);
    let tokens = file.get("tokenizer.ggml.tokens").and_then(Value::as_array).unwrap();
    assert_eq!((tokens.elem_type(), tokens.len()), (ValueType::String, 262_144));
    assert_eq!(file.n_parameters(), 268_098_176);
    assert_eq!(file.tensor_data_bytes(), 246_587_904);
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!((embd.ty, embd.row_len(), embd.n_rows()), (GgmlType::Q8_0, 640, 262_144));
    assert_eq!(file.tensor_data(embd).len() as u64, embd.n_bytes);

    let mut cmp = CompareWriter { expected: file.bytes(), pos: 0, first_difference: None };
    let n = file.write_to(&mut cmp).unwrap();
    assert_eq!(cmp.first_difference, None);
    assert_eq!(n, file.bytes().len() as u64);
}

/// One value of every type, arrays of every element type (empty ones too) and nested arrays.
fn every_value() -> Vec<(String, Value)> {
    let mut values: Vec<(String, Value)> = vec![
        ("general.architecture".into(), "llama".into()),
        ("v.u8".into(), Value::U8(255)),
        ("v.i8".into(), Value::I8(-128)),
        ("v.u16".into(), Value::U16(65535)),
        ("v.i16".into(), Value::I16(-32768)),
        ("v.u32".into(), Value::U32(u32::MAX)),
        ("v.i32".into(), Value::I32(i32::MIN)),
        ("v.f32".into(), Value::F32(-1.5e-7)),
        ("v.bool.true".into(), Value::Bool(true)),
        ("v.bool.false".into(), Value::Bool(false)),
        ("v.string".into(), "héllo, wörld".into()),
        ("v.string.empty".into(), "".into()),
        ("v.string.not_utf8".into(), Value::String(vec![0xff, 0xfe, 0])),
        ("v.u64".into(), Value::U64(u64::MAX)),
        ("v.i64".into(), Value::I64(i64::MIN)),
        ("v.f64".into(), Value::F64(std::f64::consts::PI)),
        ("a.u8".into(), Value::Array(Array::U8(vec![0, 1, 255]))),
        ("a.i8".into(), Value::Array(Array::I8(vec![-1, 1]))),
        ("a.u16".into(), Value::Array(Array::U16(vec![1, 65535]))),
        ("a.i16".into(), Value::Array(Array::I16(vec![-2, 2]))),
        ("a.u32".into(), Value::Array(Array::U32(vec![7; 5]))),
        ("a.i32".into(), Value::Array(Array::I32(vec![-7, 0, 7]))),
        ("a.f32".into(), Value::Array(Array::F32(vec![0.25, -0.0, f32::INFINITY]))),
        ("a.bool".into(), Value::Array(Array::Bool(vec![true, false, true]))),
        ("a.string".into(), Value::Array(Array::String(vec![b"a".to_vec(), vec![], vec![0xc3]]))),
        ("a.u64".into(), Value::Array(Array::U64(vec![u64::MAX, 0]))),
        ("a.i64".into(), Value::Array(Array::I64(vec![i64::MIN, i64::MAX]))),
        ("a.f64".into(), Value::Array(Array::F64(vec![1e300, -1e-300]))),
        (
            "a.nested".into(),
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2, 3]),
                Array::String(vec![b"x".to_vec()]),
                Array::empty(ValueType::F64),
                Array::Array(vec![Array::Array(vec![Array::U8(vec![9])]), Array::empty(ValueType::Array)]),
            ])),
        ),
    ];
    for t in ValueType::ALL {
        values.push((format!("a.empty.{}", t.name()), Value::Array(Array::empty(t))));
    }
    values
}

type Tensors = Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>;

/// A writer-built file with every value type and tensors of several types, some of which the
/// engine does not compute with.
fn build(version: u32) -> (Vec<u8>, Vec<(String, Value)>, Tensors) {
    let metadata = every_value();
    let tensors: Tensors = [
        ("f32", vec![3, 2], GgmlType::F32),
        ("q4k", vec![256, 2], GgmlType::Q4_K),
        ("iq2", vec![256], GgmlType::IQ2_XXS),
        ("i8", vec![5, 1, 1, 2], GgmlType::I8),
        ("q8", vec![64, 3, 2], GgmlType::Q8_0),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (name, dims, ty))| {
        let n = engine::gguf::shape_size(&dims, ty).unwrap().1 as usize;
        let data = (0..n).map(|j| (j * 31 + i * 7) as u8).collect();
        (name.to_owned(), dims, ty, data)
    })
    .collect();
    let mut w = GgufWriter::new();
    w.set_version(version);
    for (k, v) in &metadata {
        w.add(k.clone(), v.clone()).unwrap();
    }
    for (name, dims, ty, data) in &tensors {
        w.add_tensor(name.clone(), dims, *ty, data.as_slice()).unwrap();
    }
    (w.to_bytes().unwrap(), metadata, tensors)
}

#[test]
fn writer_built_file_reads_back_equal() {
    for version in [2, 3] {
        let (bytes, metadata, tensors) = build(version);
        let file = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(file.version(), version);
        assert_eq!(file.alignment(), 32);
        assert_eq!(file.data_offset() % 32, 0);
        assert_eq!(file.metadata(), metadata.as_slice());
        assert_eq!(file.get_str("v.string"), Some("héllo, wörld"));
        assert_eq!(file.get_u64("v.u32"), Some(u64::from(u32::MAX)));
        assert_eq!(file.get_u64("v.i8"), None);
        assert_eq!(file.get_f64("v.f64"), Some(std::f64::consts::PI));
        assert_eq!(file.get("v.string.not_utf8").and_then(Value::as_bytes), Some(&[0xff, 0xfe, 0][..]));
        for (k, v) in &metadata {
            assert_eq!(file.get(k), Some(v), "{k}");
        }
        assert_eq!(file.tensors().len(), tensors.len());
        for (t, (name, dims, ty, data)) in file.tensors().iter().zip(&tensors) {
            assert_eq!((&t.name, &t.dims, t.ty), (name, dims, *ty));
            assert_eq!(t.offset % 32, 0);
            assert_eq!(file.tensor_data(t), data.as_slice());
        }
        let i8t = file.tensor("i8").unwrap();
        assert_eq!((i8t.row_len(), i8t.n_rows(), i8t.n_elements, i8t.n_bytes), (5, 2, 10, 10));
        let mut again = Vec::new();
        file.write_to(&mut again).unwrap();
        assert!(again == bytes, "version {version}: written back differs");
    }
}

#[test]
fn custom_alignment_is_used_for_offsets() {
    let mut w = GgufWriter::new();
    w.add("general.alignment", 64u32).unwrap();
    w.add_tensor("a", &[3], GgmlType::F32, vec![1u8; 12]).unwrap();
    w.add_tensor("b", &[32], GgmlType::Q4_0, vec![2u8; 18]).unwrap();
    let bytes = w.to_bytes().unwrap();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.data_offset() % 64, 0);
    assert_eq!(file.tensor("b").unwrap().offset, 64);
    assert_eq!(bytes.len() as u64, file.data_offset() + 128);
}

#[test]
fn file_without_tensors_or_metadata_reads() {
    let bytes = GgufWriter::new().to_bytes().unwrap();
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert!(file.metadata().is_empty() && file.tensors().is_empty());
    assert_eq!(file.architecture(), None);
}
