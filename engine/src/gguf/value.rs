//! GGUF metadata values: the 13 value types, scalar values and typed arrays.
//!
//! Arrays are stored as typed vectors rather than a `Vec<Value>`: a vocabulary of 262,144
//! strings or scores then costs one allocation per string (or none, for numbers) instead of an
//! enum per element. The element type is kept for empty arrays too, so a file written back is
//! byte-identical.

use std::fmt;

/// The type id a GGUF file stores before every metadata value (and before array elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// Every type, in id order.
    pub const ALL: [ValueType; 13] = [
        Self::U8,
        Self::I8,
        Self::U16,
        Self::I16,
        Self::U32,
        Self::I32,
        Self::F32,
        Self::Bool,
        Self::String,
        Self::Array,
        Self::U64,
        Self::I64,
        Self::F64,
    ];

    /// The type with GGUF id `id`, or `None` for ids outside 0..=12.
    pub fn from_id(id: u32) -> Option<ValueType> {
        Self::ALL.get(usize::try_from(id).ok()?).copied()
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// Short name used in messages and summaries (`"u32"`, `"string"`, `"array"`...).
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "u8",
            Self::I8 => "i8",
            Self::U16 => "u16",
            Self::I16 => "i16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::F32 => "f32",
            Self::Bool => "bool",
            Self::String => "string",
            Self::Array => "array",
            Self::U64 => "u64",
            Self::I64 => "i64",
            Self::F64 => "f64",
        }
    }

    /// The fewest bytes one value of this type occupies in a file: a string is at least its
    /// 8-byte length, an array at least its 4-byte element type and 8-byte count. Counts read
    /// from a file are checked against `bytes left / min_size` before anything is allocated.
    pub fn min_size(self) -> u64 {
        match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::U16 | Self::I16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 | Self::String => 8,
            Self::Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Raw bytes: GGUF strings are meant to be UTF-8 but a file may hold anything.
    String(Vec<u8>),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// The [`ValueType`] of a [`Value`]'s or an [`Array`]'s variant: both enums have one variant per
/// type, of the type's name.
macro_rules! type_of_variant {
    ($value:expr) => {
        match $value {
            Self::U8(_) => ValueType::U8,
            Self::I8(_) => ValueType::I8,
            Self::U16(_) => ValueType::U16,
            Self::I16(_) => ValueType::I16,
            Self::U32(_) => ValueType::U32,
            Self::I32(_) => ValueType::I32,
            Self::F32(_) => ValueType::F32,
            Self::Bool(_) => ValueType::Bool,
            Self::String(_) => ValueType::String,
            Self::Array(_) => ValueType::Array,
            Self::U64(_) => ValueType::U64,
            Self::I64(_) => ValueType::I64,
            Self::F64(_) => ValueType::F64,
        }
    };
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        type_of_variant!(self)
    }

    /// A string that is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    /// The raw bytes of a string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer value that fits in a `u64` (negative values give `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => i64::try_from(v).ok(),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v),
            _ => None,
        }
    }

    /// A float, or an integer converted to `f64` (some converters store e.g. a rope base as an
    /// integer).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64).or_else(|| self.as_u64().map(|v| v as f64)),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant(v)
            }
        })*
    };
}

value_from!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32, bool => Bool,
    u64 => U64, i64 => I64, f64 => F64, Array => Array,
);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.as_bytes().to_vec())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::String(v.into_bytes())
    }
}

/// A metadata array: one typed vector per element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<Vec<u8>>),
    /// An array of arrays; each inner array carries its own element type.
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Array {
    /// An empty array of the given element type.
    pub fn empty(elem_type: ValueType) -> Array {
        match elem_type {
            ValueType::U8 => Self::U8(Vec::new()),
            ValueType::I8 => Self::I8(Vec::new()),
            ValueType::U16 => Self::U16(Vec::new()),
            ValueType::I16 => Self::I16(Vec::new()),
            ValueType::U32 => Self::U32(Vec::new()),
            ValueType::I32 => Self::I32(Vec::new()),
            ValueType::F32 => Self::F32(Vec::new()),
            ValueType::Bool => Self::Bool(Vec::new()),
            ValueType::String => Self::String(Vec::new()),
            ValueType::Array => Self::Array(Vec::new()),
            ValueType::U64 => Self::U64(Vec::new()),
            ValueType::I64 => Self::I64(Vec::new()),
            ValueType::F64 => Self::F64(Vec::new()),
        }
    }

    pub fn elem_type(&self) -> ValueType {
        type_of_variant!(self)
    }

    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::I8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::I16(v) => v.len(),
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::Bool(v) => v.len(),
            Self::String(v) => v.len(),
            Self::Array(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a [`Value`] (a copy; cheap except for strings and nested arrays).
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Self::U8(v) => Value::U8(*v.get(i)?),
            Self::I8(v) => Value::I8(*v.get(i)?),
            Self::U16(v) => Value::U16(*v.get(i)?),
            Self::I16(v) => Value::I16(*v.get(i)?),
            Self::U32(v) => Value::U32(*v.get(i)?),
            Self::I32(v) => Value::I32(*v.get(i)?),
            Self::F32(v) => Value::F32(*v.get(i)?),
            Self::Bool(v) => Value::Bool(*v.get(i)?),
            Self::String(v) => Value::String(v.get(i)?.clone()),
            Self::Array(v) => Value::Array(v.get(i)?.clone()),
            Self::U64(v) => Value::U64(*v.get(i)?),
            Self::I64(v) => Value::I64(*v.get(i)?),
            Self::F64(v) => Value::F64(*v.get(i)?),
        })
    }

    /// The elements as [`Value`]s (copies).
    pub fn values(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Levels of nesting: 1 for an array of scalars or strings, 2 for an array of such
    /// arrays, ...
    pub fn depth(&self) -> usize {
        match self {
            Self::Array(v) => 1 + v.iter().map(Array::depth).max().unwrap_or(0),
            _ => 1,
        }
    }

    /// The raw bytes of a string array.
    pub fn as_strings(&self) -> Option<&[Vec<u8>]> {
        match self {
            Self::String(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_f32s(&self) -> Option<&[f32]> {
        match self {
            Self::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_i32s(&self) -> Option<&[i32]> {
        match self {
            Self::I32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_u32s(&self) -> Option<&[u32]> {
        match self {
            Self::U32(v) => Some(v),
            _ => None,
        }
    }

    /// Every element as a `u64` when every element is an integer that fits.
    pub fn to_u64s(&self) -> Option<Vec<u64>> {
        self.values().map(|v| v.as_u64()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_round_trip() {
        for t in ValueType::ALL {
            assert_eq!(ValueType::from_id(t.id()), Some(t));
            assert_eq!(Array::empty(t).elem_type(), t);
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(u32::MAX), None);
    }

    #[test]
    fn integer_accessors_convert_only_when_they_fit() {
        assert_eq!(Value::I32(-1).as_u64(), None);
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U16(3).as_f64(), Some(3.0));
        assert_eq!(Value::F32(0.5).as_u64(), None);
        assert_eq!(Value::String(b"x".to_vec()).as_str(), Some("x"));
        assert_eq!(Value::String(vec![0xff]).as_str(), None);
    }

    #[test]
    fn arrays_expose_elements() {
        let a = Array::I32(vec![1, -2]);
        assert_eq!(a.len(), 2);
        assert_eq!(a.get(1), Some(Value::I32(-2)));
        assert_eq!(a.get(2), None);
        assert_eq!(a.to_u64s(), None);
        assert_eq!(Array::U8(vec![1, 2]).to_u64s(), Some(vec![1, 2]));
    }
}
