//! Parsing of GGUF bytes: a bounds-checked cursor and the header, metadata and tensor-record
//! parser with every consistency check a file must pass before any tensor is used.
//!
//! A file is untrusted input: every length, count and offset is compared with the bytes that
//! are actually left before it is used, with checked arithmetic, and before anything is
//! allocated, so a hostile file gets an error (naming the key or tensor), never a panic or an
//! allocation sized by a field.

use std::collections::HashMap;

use super::error::{GgufError, Place, Problem};
use super::tensor_info::{TensorInfo, MAX_DIMS};
use super::types::GgmlType;
use super::value::{Array, Value, ValueType};

/// The 4 bytes every GGUF file starts with.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Alignment of tensor data when the file has no `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Arrays may nest this many levels (an array of arrays is 2); deeper nesting is refused so
/// a hostile file cannot drive the parser's recursion.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Fewest bytes of one metadata entry: key length (8), value type (4), a 1-byte value.
const MIN_ENTRY_BYTES: u64 = 13;

/// Fewest bytes of one tensor record: name length (8), n_dims (4), one dimension (8),
/// type (4), offset (8).
const MIN_TENSOR_RECORD_BYTES: u64 = 32;

/// Most elements reserved ahead of parsing them. Counts are already checked against the bytes
/// left, but an in-memory element is larger than its smallest encoding (a `String` key or a
/// `Vec<u8>` is 24 bytes, an empty string 8 in the file), so a count the file cannot back is
/// not trusted with more than this; vectors grow past it as elements are actually read.
const PREALLOC_LIMIT: usize = 1 << 16;

fn prealloc(count: u64) -> usize {
    usize::try_from(count).map_or(PREALLOC_LIMIT, |n| n.min(PREALLOC_LIMIT))
}

/// A read position over a byte slice; every read checks the bytes left first.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Start of the field read last, reported in errors.
    field: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0, field: 0 }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Start of the field read last.
    pub(crate) fn field_offset(&self) -> u64 {
        self.field as u64
    }

    pub(crate) fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Problem> {
        self.field = self.pos;
        let left = self.left();
        let truncated = Problem::Truncated { what, need: n, left };
        let n = usize::try_from(n).map_err(|_| truncated.clone())?;
        let end = self.pos.checked_add(n).ok_or_else(|| truncated.clone())?;
        let bytes = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Problem> {
        self.field = self.pos;
        let rest = &self.buf[self.pos..];
        let (head, _) = rest.split_first_chunk::<N>().ok_or(Problem::Truncated { what, need: N as u64, left: rest.len() as u64 })?;
        self.pos += N;
        Ok(*head)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, Problem> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, Problem> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, Problem> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: a u64 length, then that many bytes. `what` names the length field.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<&'a [u8], Problem> {
        let len = self.u64(what)?;
        let start = self.field;
        if len > self.left() {
            return Err(Problem::LengthTooLarge { what, len, left: self.left() });
        }
        let bytes = self.take(len, what)?;
        self.field = start;
        Ok(bytes)
    }
}

/// Everything the header region of a file says.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub key_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// Parses and checks a whole file held in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut cur = Cursor::new(buf);
    let header = |cur: &Cursor, problem| GgufError::Malformed { place: Place::Header, offset: cur.field_offset(), problem };

    let magic = cur.take(4, "magic").map_err(|p| header(&cur, p))?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic(magic.to_vec()));
    }
    let version = cur.u32("version").map_err(|p| header(&cur, p))?;
    match version {
        2 | 3 => {}
        v if (1..=3).contains(&v.swap_bytes()) => return Err(GgufError::BigEndian(v)),
        v => return Err(GgufError::UnsupportedVersion(v)),
    }
    let n_tensors = cur.u64("tensor count").map_err(|p| header(&cur, p))?;
    let n_kv = cur.u64("metadata entry count").map_err(|p| header(&cur, p))?;
    // Both counts are checked against the bytes left before either sizes an allocation.
    let left = cur.left();
    if n_kv > left / MIN_ENTRY_BYTES {
        let problem = Problem::CountTooLarge { what: "metadata entry count", count: n_kv, left };
        return Err(GgufError::Malformed { place: Place::Header, offset: 16, problem });
    }
    if n_tensors > left / MIN_TENSOR_RECORD_BYTES {
        let problem = Problem::CountTooLarge { what: "tensor count", count: n_tensors, left };
        return Err(GgufError::Malformed { place: Place::Header, offset: 8, problem });
    }

    let (metadata, key_index, entry_offsets) = read_metadata(&mut cur, n_kv)?;
    let alignment = alignment(&metadata, &key_index, &entry_offsets)?;
    let (tensors, tensor_index, record_offsets) = read_tensor_records(&mut cur, n_tensors, alignment)?;

    let header_end = cur.pos();
    // Cannot overflow: header_end is at most the file length and alignment at most 2^31.
    let data_offset = header_end.div_ceil(alignment) * alignment;
    check_tensor_data(&tensors, &record_offsets, (buf.len() as u64).saturating_sub(data_offset))?;

    Ok(Parsed { version, metadata, key_index, tensors, tensor_index, alignment, data_offset })
}

type Metadata = (Vec<(String, Value)>, HashMap<String, usize>, Vec<u64>);

fn read_metadata(cur: &mut Cursor, n_kv: u64) -> Result<Metadata, GgufError> {
    let cap = prealloc(n_kv);
    let mut metadata = Vec::with_capacity(cap);
    let mut key_index = HashMap::with_capacity(cap);
    let mut entry_offsets = Vec::with_capacity(cap);
    for i in 0..n_kv {
        let entry_start = cur.pos();
        let bad = |cur: &Cursor, place: Place, problem| GgufError::Malformed { place, offset: cur.field_offset(), problem };
        let key = cur.string("key length").map_err(|p| bad(cur, Place::KeyIndex(i), p))?;
        let key = std::str::from_utf8(key).map_err(|_| bad(cur, Place::KeyIndex(i), Problem::InvalidUtf8("key")))?.to_owned();
        let place = Place::Key(key.clone());
        let value = read_typed_value(cur).map_err(|p| bad(cur, place.clone(), p))?;
        if key_index.contains_key(&key) {
            return Err(GgufError::Malformed { place, offset: entry_start, problem: Problem::DuplicateKey });
        }
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
        entry_offsets.push(entry_start);
    }
    Ok((metadata, key_index, entry_offsets))
}

/// A value type id followed by a value of that type.
fn read_typed_value(cur: &mut Cursor) -> Result<Value, Problem> {
    let id = cur.u32("value type")?;
    let ty = ValueType::from_id(id).ok_or(Problem::UnknownValueType(id))?;
    read_value(cur, ty)
}

pub(crate) fn read_value(cur: &mut Cursor, ty: ValueType) -> Result<Value, Problem> {
    Ok(match ty {
        ValueType::U8 => Value::U8(cur.u8("u8 value")?),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cur.array("i8 value")?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array("u16 value")?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array("i16 value")?)),
        ValueType::U32 => Value::U32(cur.u32("u32 value")?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array("i32 value")?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array("f32 value")?)),
        ValueType::Bool => Value::Bool(read_bool(cur.u8("bool value")?)?),
        ValueType::String => Value::String(cur.string("string length")?.to_vec()),
        ValueType::Array => Value::Array(read_array(cur, 1)?),
        ValueType::U64 => Value::U64(cur.u64("u64 value")?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array("i64 value")?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array("f64 value")?)),
    })
}

fn read_bool(b: u8) -> Result<bool, Problem> {
    // Only 0 and 1 are accepted, so that writing the value back gives the same byte.
    match b {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(Problem::BadBool(other)),
    }
}

/// An array (element type, count, elements) at nesting level `depth` (1 = outermost).
fn read_array(cur: &mut Cursor, depth: usize) -> Result<Array, Problem> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(Problem::TooDeep(MAX_ARRAY_DEPTH));
    }
    let id = cur.u32("array element type")?;
    let elem = ValueType::from_id(id).ok_or(Problem::UnknownValueType(id))?;
    let len = cur.u64("array length")?;
    let left = cur.left();
    if len > left / elem.min_size() {
        return Err(Problem::ArrayTooLong { len, elem, left });
    }
    // From here on `len * size` is at most `left`, which fits in usize.
    let what = "array data";
    Ok(match elem {
        ValueType::U8 => Array::U8(cur.take(len, what)?.to_vec()),
        ValueType::I8 => Array::I8(pod_vec(cur.take(len, what)?)),
        ValueType::U16 => Array::U16(pod_vec(cur.take(len * 2, what)?)),
        ValueType::I16 => Array::I16(pod_vec(cur.take(len * 2, what)?)),
        ValueType::U32 => Array::U32(pod_vec(cur.take(len * 4, what)?)),
        ValueType::I32 => Array::I32(pod_vec(cur.take(len * 4, what)?)),
        ValueType::F32 => Array::F32(pod_vec(cur.take(len * 4, what)?)),
        ValueType::U64 => Array::U64(pod_vec(cur.take(len * 8, what)?)),
        ValueType::I64 => Array::I64(pod_vec(cur.take(len * 8, what)?)),
        ValueType::F64 => Array::F64(pod_vec(cur.take(len * 8, what)?)),
        ValueType::Bool => Array::Bool(cur.take(len, what)?.iter().map(|&b| read_bool(b)).collect::<Result<_, _>>()?),
        ValueType::String => {
            let mut items = Vec::with_capacity(prealloc(len));
            for _ in 0..len {
                items.push(cur.string("string length")?.to_vec());
            }
            Array::String(items)
        }
        ValueType::Array => {
            let mut items = Vec::with_capacity(prealloc(len));
            for _ in 0..len {
                items.push(read_array(cur, depth + 1)?);
            }
            Array::Array(items)
        }
    })
}

/// Little-endian values copied out of `bytes` (whose length is a whole number of values).
fn pod_vec<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    v
}

/// `general.alignment` when present: a u32 power of two.
fn alignment(metadata: &[(String, Value)], key_index: &HashMap<String, usize>, entry_offsets: &[u64]) -> Result<u64, GgufError> {
    let Some(&i) = key_index.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let value = &metadata[i].1;
    match value {
        Value::U32(a) if a.is_power_of_two() => Ok(u64::from(*a)),
        other => Err(GgufError::Malformed {
            place: Place::Key(ALIGNMENT_KEY.to_owned()),
            offset: entry_offsets[i],
            problem: Problem::BadAlignment(describe(other)),
        }),
    }
}

/// A short description of a value for error messages.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::String(_) => "a string".to_owned(),
        Value::Array(a) => format!("an array of {} {}", a.len(), a.elem_type()),
        other => format!("{} {}", other.value_type(), other.as_f64().unwrap_or(f64::NAN)),
    }
}

type Records = (Vec<TensorInfo>, HashMap<String, usize>, Vec<u64>);

fn read_tensor_records(cur: &mut Cursor, n_tensors: u64, alignment: u64) -> Result<Records, GgufError> {
    let cap = prealloc(n_tensors);
    let mut tensors = Vec::with_capacity(cap);
    let mut index = HashMap::with_capacity(cap);
    let mut record_offsets = Vec::with_capacity(cap);
    for i in 0..n_tensors {
        let start = cur.pos();
        let bad = |cur: &Cursor, place: Place, problem| GgufError::Malformed { place, offset: cur.field_offset(), problem };
        let name = cur.string("name length").map_err(|p| bad(cur, Place::TensorIndex(i), p))?;
        let name = std::str::from_utf8(name).map_err(|_| bad(cur, Place::TensorIndex(i), Problem::InvalidUtf8("tensor name")))?.to_owned();
        let place = Place::Tensor(name.clone());
        let (dims, ty, offset) = read_record_body(cur).map_err(|p| bad(cur, place.clone(), p))?;
        let info = TensorInfo::new(name, dims, ty, offset).map_err(|problem| GgufError::Malformed {
            place: place.clone(),
            offset: start,
            problem,
        })?;
        if !offset.is_multiple_of(alignment) {
            let problem = Problem::Misaligned { offset, alignment };
            return Err(GgufError::Malformed { place, offset: start, problem });
        }
        if index.contains_key(&info.name) {
            return Err(GgufError::Malformed { place, offset: start, problem: Problem::DuplicateTensor });
        }
        index.insert(info.name.clone(), tensors.len());
        tensors.push(info);
        record_offsets.push(start);
    }
    Ok((tensors, index, record_offsets))
}

/// The fields of a tensor record after its name: dimensions, type and data offset.
fn read_record_body(cur: &mut Cursor) -> Result<(Vec<u64>, GgmlType, u64), Problem> {
    let n_dims = cur.u32("dimension count")?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(Problem::BadDimCount(n_dims));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64("dimension")?);
    }
    let id = cur.u32("tensor type")?;
    let ty = GgmlType::from_id(id).ok_or(Problem::UnknownTensorType(id))?;
    let offset = cur.u64("data offset")?;
    Ok((dims, ty, offset))
}

/// Every tensor's data lies inside the data section (`section` bytes) and no two overlap.
fn check_tensor_data(tensors: &[TensorInfo], record_offsets: &[u64], section: u64) -> Result<(), GgufError> {
    for (t, &at) in tensors.iter().zip(record_offsets) {
        let fits = t.offset.checked_add(t.n_bytes).is_some_and(|end| end <= section);
        if !fits {
            let problem = Problem::DataPastEnd { offset: t.offset, n_bytes: t.n_bytes, section };
            return Err(GgufError::Malformed { place: Place::Tensor(t.name.clone()), offset: at, problem });
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| (tensors[i].offset, i));
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        // Ends cannot overflow: every range was checked against the section above.
        if b.offset < a.offset + a.n_bytes {
            let problem = Problem::Overlap { offset: b.offset, n_bytes: b.n_bytes, other: a.name.clone() };
            let at = record_offsets[pair[1]];
            return Err(GgufError::Malformed { place: Place::Tensor(b.name.clone()), offset: at, problem });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reads_and_refuses_past_the_end() {
        let mut c = Cursor::new(&[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(c.u32("a"), Ok(1));
        assert_eq!(c.u64("b"), Ok(2));
        assert_eq!(c.u32("c"), Err(Problem::Truncated { what: "c", need: 4, left: 1 }));
        assert_eq!(c.take(u64::MAX, "d"), Err(Problem::Truncated { what: "d", need: u64::MAX, left: 1 }));
        assert_eq!(c.u8("e"), Ok(7));
        assert_eq!(c.left(), 0);
    }

    #[test]
    fn string_length_is_checked_before_reading() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.string("key length"), Err(Problem::LengthTooLarge { what: "key length", len: u64::MAX, left: 3 }));
    }

    #[test]
    fn array_count_is_checked_against_the_element_size() {
        // A u32 array claiming 2 elements with only 7 bytes left.
        let mut bytes = 4u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.extend_from_slice(&[0; 7]);
        let mut c = Cursor::new(&bytes);
        assert_eq!(read_array(&mut c, 1), Err(Problem::ArrayTooLong { len: 2, elem: ValueType::U32, left: 7 }));
    }

    #[test]
    fn nesting_is_limited() {
        let mut bytes = Vec::new();
        for _ in 0..=MAX_ARRAY_DEPTH {
            bytes.extend_from_slice(&9u32.to_le_bytes());
            bytes.extend_from_slice(&1u64.to_le_bytes());
        }
        assert_eq!(read_array(&mut Cursor::new(&bytes), 1), Err(Problem::TooDeep(MAX_ARRAY_DEPTH)));
    }
}
