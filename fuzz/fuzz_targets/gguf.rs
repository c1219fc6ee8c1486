//! The GGUF reader on arbitrary bytes: parsing never panics; a file it accepts has every
//! metadata value readable, every tensor's data in place, each supported tensor's first row
//! dequantized alike by every SIMD tier the CPU has and the scalar reference, the tokenizer
//! metadata read (or refused) cleanly, and the file written back and read again unchanged.
#![no_main]

use engine::gguf::{GgufFile, Value};
use engine::quant::{ops_on, Isa};
use engine::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else { return };
    for (key, value) in file.metadata() {
        walk(value);
        assert!(file.get(key).is_some(), "metadata key {key:?} not found by name");
    }
    let _ = (file.architecture(), file.n_parameters(), file.tensor_data_bytes(), file.version(), file.alignment());
    for tensor in file.tensors() {
        let bytes = file.tensor_data(tensor);
        assert_eq!(bytes.len() as u64, tensor.n_bytes, "tensor {:?}", tensor.name);
        assert!(file.tensor(&tensor.name).is_some());
        dequantize_first_row(tensor.ty, tensor.row_len() as usize, bytes);
    }
    if file.get("tokenizer.ggml.model").is_some() {
        if let Ok(tokenizer) = Tokenizer::from_gguf(&file) {
            let ids = tokenizer.encode("Hello world <|im_start|> 123", true, true);
            let _ = tokenizer.decode(&ids);
        }
    }
    // Written back, the file reads again and writes the same bytes (values compared as bytes:
    // a NaN metadata float is still the same value).
    let mut written = Vec::new();
    if file.write_to(&mut written).is_ok() {
        let again = GgufFile::from_bytes(written.clone()).expect("a file the writer wrote reads back");
        assert_eq!(again.metadata().len(), file.metadata().len());
        assert_eq!(again.tensors().len(), file.tensors().len());
        for (a, b) in again.tensors().iter().zip(file.tensors()) {
            assert_eq!((&a.name, &a.dims, a.ty), (&b.name, &b.dims, b.ty));
            assert_eq!(again.tensor_data(a), file.tensor_data(b), "tensor {:?} data changed", a.name);
        }
        let mut rewritten = Vec::new();
        again.write_to(&mut rewritten).expect("a file the writer wrote writes again");
        assert!(rewritten == written, "writing the file read back gives other bytes");
    }
});

/// Reads every value, arrays to any depth.
fn walk(value: &Value) {
    let _ = (value.as_str(), value.as_u64(), value.as_f64());
    if let Value::Array(array) = value {
        let _ = (array.len(), array.depth());
        for item in array.values() {
            walk(&item);
        }
    }
}

/// The first row of a tensor of a supported type, by each tier against the scalar kernel: the
/// same bits (NaN for NaN).
fn dequantize_first_row(ty: engine::quant::GgmlType, row_len: usize, bytes: &[u8]) {
    let (Ok(scalar), Some(row_bytes)) = (ops_on(ty, Isa::Scalar), ty.row_bytes(row_len)) else { return };
    if row_len == 0 || row_len > 1 << 16 || row_bytes > bytes.len() || !row_len.is_multiple_of(ty.block_size()) {
        return;
    }
    let row = &bytes[..row_bytes];
    let mut want = vec![0f32; row_len];
    (scalar.dequantize)(row, &mut want);
    for isa in Isa::available() {
        let Ok(ops) = ops_on(ty, isa) else { continue };
        let mut got = vec![0f32; row_len];
        (ops.dequantize)(row, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{ty} on {}: value {i} is {g}, the scalar kernel's {w}",
                isa.name()
            );
        }
    }
}
