//! Errors of the GGUF layer: every message says where in the file (which key, which tensor)
//! the problem is, so a bad file can be diagnosed from one line.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

use super::types::GgmlType;
use super::value::ValueType;

/// Why a GGUF file could not be read or written.
#[derive(Debug, Error)]
pub enum GgufError {
    /// Something went wrong with the file at `path`. `error` is part of the message and not
    /// reported as a separate source, so chained printers (`{:#}`) do not repeat it.
    #[error("{}: {error}", path.display())]
    File { path: PathBuf, error: Box<GgufError> },

    #[error("{0}")]
    Io(#[from] std::io::Error),

    #[error("not a GGUF file: it starts with {} instead of \"GGUF\"", show_magic(.0))]
    BadMagic(Vec<u8>),

    #[error("GGUF version {0} is not supported (only versions 2 and 3 are)")]
    UnsupportedVersion(u32),

    /// The version field only makes sense byte-swapped: a big-endian file.
    #[error("big-endian GGUF file (version field reads {0}); only little-endian files are supported")]
    BigEndian(u32),

    /// The file's content is inconsistent; `offset` is the byte where the bad field starts.
    #[error("{place}: {problem} (at byte {offset})")]
    Malformed { place: Place, offset: u64, problem: Problem },

    /// The writer was asked to write something that would not be a valid file.
    #[error("{place}: {problem}")]
    Invalid { place: Place, problem: Problem },
}

impl GgufError {
    /// The underlying error, without the file path.
    pub fn without_path(&self) -> &GgufError {
        match self {
            Self::File { error, .. } => error.without_path(),
            other => other,
        }
    }

    /// The problem of a malformed or invalid file, if that is what this error is.
    pub fn problem(&self) -> Option<&Problem> {
        match self.without_path() {
            Self::Malformed { problem, .. } | Self::Invalid { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

fn show_magic(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

/// Where in a file a problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    Header,
    /// A metadata entry whose key was read.
    Key(String),
    /// A metadata entry (0-based) whose key could not be read.
    KeyIndex(u64),
    /// A tensor record whose name was read.
    Tensor(String),
    /// A tensor record (0-based) whose name could not be read.
    TensorIndex(u64),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header => f.write_str("header"),
            Self::Key(k) => write!(f, "metadata key {k:?}"),
            Self::KeyIndex(i) => write!(f, "metadata entry #{i}"),
            Self::Tensor(t) => write!(f, "tensor {t:?}"),
            Self::TensorIndex(i) => write!(f, "tensor record #{i}"),
        }
    }
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Problem {
    #[error("{what} needs {need} bytes but only {left} are left in the file")]
    Truncated { what: &'static str, need: u64, left: u64 },

    #[error("{what} {len} exceeds the {left} bytes left in the file")]
    LengthTooLarge { what: &'static str, len: u64, left: u64 },

    #[error(
        "array length {len} exceeds the {left} bytes left in the file (each {elem} takes at least {} bytes)",
        .elem.min_size()
    )]
    ArrayTooLong { len: u64, elem: ValueType, left: u64 },

    #[error("{what} {count} is more than the {left} bytes left in the file can hold")]
    CountTooLarge { what: &'static str, count: u64, left: u64 },

    #[error("unknown value type id {0}")]
    UnknownValueType(u32),

    #[error("arrays are nested more than {0} levels deep")]
    TooDeep(usize),

    #[error("boolean byte {0} is neither 0 nor 1")]
    BadBool(u8),

    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(&'static str),

    #[error("the key appears twice")]
    DuplicateKey,

    #[error("the tensor name appears twice")]
    DuplicateTensor,

    #[error("general.alignment must be a u32 power of two, found {0}")]
    BadAlignment(String),

    #[error("unknown tensor type id {0}")]
    UnknownTensorType(u32),

    #[error("{0} dimensions (1 to 4 are allowed)")]
    BadDimCount(u32),

    #[error("dimension {index} is {dim} (must be between 1 and 2^63 - 1)")]
    BadDim { index: usize, dim: u64 },

    #[error("element count of dimensions {0:?} overflows")]
    TooManyElements(Vec<u64>),

    #[error("row length {row_len} is not a multiple of {ty}'s block size {}", .ty.block_size())]
    PartialBlock { row_len: u64, ty: GgmlType },

    #[error("data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned { offset: u64, alignment: u64 },

    #[error("data at offset {offset} ({n_bytes} bytes) ends past the {section} bytes of tensor data in the file")]
    DataPastEnd { offset: u64, n_bytes: u64, section: u64 },

    #[error("data at offset {offset} ({n_bytes} bytes) overlaps tensor {other:?}")]
    Overlap { offset: u64, n_bytes: u64, other: String },

    #[error("{given} bytes of data given, the shape and type need {expected}")]
    DataLength { given: u64, expected: u64 },
}
