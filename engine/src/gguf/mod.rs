//! GGUF files: memory-mapped reader, value types and writer.
//!
//! [`GgufFile::open`] maps a file and checks all of it before returning: header, every
//! metadata value, every tensor record (shape, type, alignment) and that every tensor's data
//! lies inside the file without overlapping another. After that, [`GgufFile::tensor_data`]
//! hands out slices of the mapping without copies or further checks. [`GgufWriter`] writes
//! files (tests and tools build models with it); [`GgufFile::write_to`] writes a file back
//! byte for byte.

mod error;
mod file;
pub mod reader;
mod tensor_info;
pub mod types;
mod value;
pub mod writer;

pub use error::{GgufError, Place, Problem};
pub use file::GgufFile;
pub use reader::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH};
pub use tensor_info::{shape_size, TensorInfo, MAX_DIMS};
pub use types::{GgmlType, QK_K};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
