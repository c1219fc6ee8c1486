//! Writing GGUF files: `GgufWriter` builds a file from metadata and tensors, `write_file`
//! writes a read file back byte for byte.
//!
//! Layout, as llama.cpp writes it: header, metadata, tensor records, zero padding to the
//! alignment, then each tensor's data followed by zero padding to the alignment (the last
//! tensor too, so the file length is a multiple of the alignment past the data section start).

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::Write;

use super::error::{GgufError, Place, Problem};
use super::file::GgufFile;
use super::reader::{describe, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH};
use super::tensor_info::TensorInfo;
use super::types::GgmlType;
use super::value::{Array, Value};

/// A tensor added to a [`GgufWriter`]: name, dimensions, type, data.
type Pending<'a> = (String, Vec<u64>, GgmlType, Cow<'a, [u8]>);

/// Builds a GGUF file: metadata in the order added, tensors in the order added with offsets
/// computed from the alignment.
#[derive(Default)]
pub struct GgufWriter<'a> {
    version: Option<u32>,
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<Pending<'a>>,
    names: HashSet<String>,
}

impl std::fmt::Debug for GgufWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tensor data is left out: it can be gigabytes.
        f.debug_struct("GgufWriter")
            .field("version", &self.version)
            .field("keys", &self.metadata.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("tensors", &self.tensors.iter().map(|(n, d, t, _)| (n, d, t)).collect::<Vec<_>>())
            .finish()
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty version-3 file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the version number written in the header (2 and 3 share one layout).
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = Some(version);
        self
    }

    /// Adds a metadata entry; a key may appear once.
    pub fn add(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<&mut Self, GgufError> {
        let key = key.into();
        let value = value.into();
        if value.as_array().is_some_and(|a| a.depth() > MAX_ARRAY_DEPTH) {
            // The reader would refuse the file.
            return Err(GgufError::Invalid { place: Place::Key(key), problem: Problem::TooDeep(MAX_ARRAY_DEPTH) });
        }
        if !self.keys.insert(key.clone()) {
            return Err(GgufError::Invalid { place: Place::Key(key), problem: Problem::DuplicateKey });
        }
        self.metadata.push((key, value));
        Ok(self)
    }

    /// Adds a tensor; `data` must be exactly the bytes its shape and type need.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        let data = data.into();
        let invalid = |name: &str, problem| GgufError::Invalid { place: Place::Tensor(name.to_owned()), problem };
        let info = TensorInfo::new(name.clone(), dims.to_vec(), ty, 0).map_err(|p| invalid(&name, p))?;
        if info.n_bytes != data.len() as u64 {
            return Err(invalid(&name, Problem::DataLength { given: data.len() as u64, expected: info.n_bytes }));
        }
        if !self.names.insert(name.clone()) {
            return Err(invalid(&name, Problem::DuplicateTensor));
        }
        self.tensors.push((name, dims.to_vec(), ty, data));
        Ok(self)
    }

    /// The alignment the file will use: `general.alignment` if added, else 32.
    pub fn alignment(&self) -> Result<u64, GgufError> {
        match self.metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY).map(|(_, v)| v) {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
            Some(other) => {
                Err(GgufError::Invalid { place: Place::Key(ALIGNMENT_KEY.to_owned()), problem: Problem::BadAlignment(describe(other)) })
            }
        }
    }

    /// The tensor records with the offsets they will get.
    pub fn tensor_infos(&self) -> Result<Vec<TensorInfo>, GgufError> {
        let alignment = self.alignment()?;
        let mut offset = 0u64;
        let mut infos = Vec::with_capacity(self.tensors.len());
        for (name, dims, ty, data) in &self.tensors {
            let info = TensorInfo::new(name.clone(), dims.clone(), *ty, offset)
                .map_err(|problem| GgufError::Invalid { place: Place::Tensor(name.clone()), problem })?;
            offset = align(offset + data.len() as u64, alignment);
            infos.push(info);
        }
        Ok(infos)
    }

    /// Writes the file; returns the number of bytes written.
    pub fn write<W: Write>(&self, mut w: W) -> Result<u64, GgufError> {
        let alignment = self.alignment()?;
        let infos = self.tensor_infos()?;
        let header = encode_header(self.version.unwrap_or(3), &self.metadata, &infos);
        w.write_all(&header)?;
        let mut written = header.len() as u64;
        written += pad(&mut w, written, alignment)?;
        for (_, _, _, data) in &self.tensors {
            w.write_all(data)?;
            written += data.len() as u64;
            written += pad(&mut w, written, alignment)?;
        }
        w.flush()?;
        Ok(written)
    }

    /// The file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let mut out = Vec::new();
        self.write(&mut out)?;
        Ok(out)
    }
}

/// Writes a read file back. Files laid out as llama.cpp writes them (see the module doc) come
/// out byte-identical; elsewhere gaps between tensors are written as zeros, and bytes past the
/// last tensor's padding are not kept. Returns the number of bytes written.
pub fn write_file<W: Write>(file: &GgufFile, mut w: W) -> Result<u64, GgufError> {
    let alignment = file.alignment();
    let header = encode_header(file.version(), file.metadata(), file.tensors());
    w.write_all(&header)?;
    let mut written = header.len() as u64;
    written += pad(&mut w, written, alignment)?;
    // The reader checked that ranges are in bounds and do not overlap, so in offset order
    // each tensor starts at or after the end of the previous one.
    let mut order: Vec<&TensorInfo> = file.tensors().iter().collect();
    order.sort_by_key(|t| t.offset);
    let mut pos = 0u64;
    for t in order {
        written += zeros(&mut w, t.offset.saturating_sub(pos))?;
        w.write_all(file.tensor_data(t))?;
        written += t.n_bytes;
        pos = t.end();
    }
    written += pad(&mut w, written, alignment)?;
    w.flush()?;
    Ok(written)
}

fn align(x: u64, alignment: u64) -> u64 {
    x.div_ceil(alignment) * alignment
}

/// Zero bytes from `written` up to the next multiple of `alignment`.
fn pad<W: Write>(w: &mut W, written: u64, alignment: u64) -> std::io::Result<u64> {
    zeros(w, align(written, alignment) - written)
}

fn zeros<W: Write>(w: &mut W, mut n: u64) -> std::io::Result<u64> {
    let total = n;
    let block = [0u8; 4096];
    while n > 0 {
        let k = n.min(block.len() as u64) as usize;
        w.write_all(&block[..k])?;
        n -= k as u64;
    }
    Ok(total)
}

/// Magic, version, counts, metadata and tensor records.
pub fn encode_header(version: u32, metadata: &[(String, Value)], tensors: &[TensorInfo]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_string(&mut out, key.as_bytes());
        out.extend_from_slice(&value.value_type().id().to_le_bytes());
        put_value(&mut out, value);
    }
    for t in tensors {
        put_string(&mut out, t.name.as_bytes());
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.id().to_le_bytes());
        out.extend_from_slice(&t.offset.to_le_bytes());
    }
    out
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A value without its type id.
fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// Element type id, count, elements.
fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.elem_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::U16(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::I16(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::U32(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::I32(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::F32(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::U64(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::I64(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::F64(v) => out.extend_from_slice(bytemuck::cast_slice(v)),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_output_reads_back() {
        let mut w = GgufWriter::new();
        w.add("general.architecture", "llama").unwrap();
        w.add("a.list", Array::Array(vec![Array::I32(vec![1, 2]), Array::empty(super::super::ValueType::String)])).unwrap();
        w.add_tensor("x", &[2, 3], GgmlType::F32, vec![0u8; 24]).unwrap();
        w.add_tensor("y", &[32], GgmlType::Q8_0, vec![1u8; 34]).unwrap();
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(f.architecture(), Some("llama"));
        assert_eq!(f.tensor("y").map(|t| t.offset), Some(32));
        assert_eq!(f.tensor_data(f.tensor("y").unwrap()), &[1u8; 34][..]);
        assert_eq!(bytes.len() as u64, f.data_offset() + 96);
        let mut again = Vec::new();
        f.write_to(&mut again).unwrap();
        assert_eq!(again, bytes);
    }

    #[test]
    fn writer_refuses_bad_input() {
        let mut w = GgufWriter::new();
        w.add("k", 1u32).unwrap();
        assert!(w.add("k", 2u32).is_err());
        let e = w.add_tensor("t", &[3], GgmlType::F32, vec![0u8; 8]).unwrap_err();
        assert_eq!(e.to_string(), "tensor \"t\": 8 bytes of data given, the shape and type need 12");
        assert!(w.add_tensor("q", &[100], GgmlType::Q4_K, vec![]).is_err());
        w.add(ALIGNMENT_KEY, 24u32).unwrap();
        assert!(w.to_bytes().is_err());
    }
}
