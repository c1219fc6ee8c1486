//! `GgufFile`: a checked GGUF file held in memory (memory-mapped, or owned bytes) with typed
//! access to its metadata and zero-copy views of its tensor data.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, UncheckedAdvice};

use super::error::GgufError;
use super::reader::{self, Parsed};
use super::tensor_info::TensorInfo;
use super::value::Value;

enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A GGUF file whose header, metadata and tensor records have been read and checked: every
/// tensor's data lies inside the file, is aligned and overlaps no other.
pub struct GgufFile {
    storage: Storage,
    version: u32,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("bytes", &self.bytes().len())
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and checks the file at `path`. Errors name the path.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let in_file = |error: GgufError| GgufError::File { path: PathBuf::from(path), error: Box::new(error) };
        let file = File::open(path).map_err(|e| in_file(e.into()))?;
        let len = file.metadata().map_err(|e| in_file(e.into()))?.len();
        let storage = if len == 0 {
            // Nothing to map (and mapping an empty file is an error on some systems); the
            // parser reports the empty file as truncated.
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and lives as long as `GgufFile`. Soundness further
            // requires that no one modifies or truncates the file while it is mapped (the
            // usual contract of read-only mappings): model files are written once and then
            // only read, and the engine itself never writes to a file it has open.
            Storage::Mapped(unsafe { Mmap::map(&file) }.map_err(|e| in_file(e.into()))?)
        };
        Self::from_storage(storage).map_err(in_file)
    }

    /// Checks a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<GgufFile, GgufError> {
        let Parsed { version, metadata, key_index, tensors, tensor_index, alignment, data_offset } = reader::parse(storage.bytes())?;
        Ok(GgufFile { storage, version, metadata, key_index, tensors, tensor_index, alignment, data_offset })
    }

    /// Hands the memory pages holding tensor `t`'s data back to the kernel, for a tensor nothing
    /// reads any more (the CPU backend's repacked weights): the bytes stay readable, read from
    /// the file again should anything touch them. Only a mapped file has pages to give back;
    /// returns whether the kernel took the hint.
    pub fn release_pages(&self, t: &TensorInfo) -> bool {
        let Storage::Mapped(map) = &self.storage else { return false };
        let (Ok(start), Ok(len)) = (usize::try_from(self.data_offset + t.offset), usize::try_from(t.n_bytes)) else { return false };
        if start.checked_add(len).is_none_or(|end| end > map.len()) {
            return false;
        }
        // SAFETY: the map is a read-only private mapping of a file no one writes (see `open`):
        // its pages were never written, so after MADV_DONTNEED the next access reads the same
        // bytes from the file again, and every borrow of the map keeps seeing what it saw.
        unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, len) }.is_ok()
    }

    /// GGUF format version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of tensor data: `general.alignment`, or 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the tensor data section (the end of the tensor records, aligned).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// A string value that is valid UTF-8.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// Any integer value that fits in a `u64`.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// A float value, or an integer converted to `f64`.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// Tensor records in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The data of a tensor of this file, in place (no copy).
    ///
    /// # Panics
    /// If `t` was not obtained from this file (its range was checked against this file only).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|start| Some((usize::try_from(start).ok()?, usize::try_from(t.n_bytes).ok()?)))
            .and_then(|(start, n)| Some(start..start.checked_add(n)?));
        range.and_then(|r| self.bytes().get(r)).unwrap_or_else(|| panic!("tensor {:?} is not a tensor of this file", t.name))
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Total bytes of tensor data (without padding).
    pub fn tensor_data_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// Total elements of all tensors.
    pub fn n_parameters(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_elements).sum()
    }

    /// Writes the file back: the same bytes for files laid out as llama.cpp writes them (see
    /// [`super::writer::write_file`]). Returns the number of bytes written.
    pub fn write_to<W: std::io::Write>(&self, w: W) -> Result<u64, GgufError> {
        super::writer::write_file(self, w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;
    use crate::quant::GgmlType;

    /// Released pages read back the same bytes (from the file); a file held in memory has no
    /// pages to release.
    #[test]
    fn released_tensor_pages_read_back_the_same_bytes() {
        let values: Vec<u8> = (0..3 * 4096 * 4).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = GgufWriter::new();
        w.add("general.architecture", Value::from("llama")).unwrap();
        w.add_tensor("big", &[4096, 3], GgmlType::F32, values.clone()).unwrap();
        let bytes = w.to_bytes().unwrap();
        let path = std::env::temp_dir().join(format!("release-pages-{}.gguf", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let file = GgufFile::open(&path).unwrap();
        let t = file.tensor("big").unwrap().clone();
        assert_eq!(file.tensor_data(&t), &values[..]);
        assert!(file.release_pages(&t));
        assert_eq!(file.tensor_data(&t), &values[..]);
        std::fs::remove_file(&path).unwrap();
        let owned = GgufFile::from_bytes(bytes).unwrap();
        assert!(!owned.release_pages(&t));
        assert_eq!(owned.tensor_data(&t), &values[..]);
    }
}
