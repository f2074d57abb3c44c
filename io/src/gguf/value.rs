//! Metadata values: their on-disk types, arrays, and the ordered key-value map with typed getters.

use std::collections::HashMap;

use super::GgufError;

/// A metadata value type, by its on-disk id.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MetaType {
    /// `uint8`
    U8 = 0,
    /// `int8`
    I8 = 1,
    /// `uint16`
    U16 = 2,
    /// `int16`
    I16 = 3,
    /// `uint32`
    U32 = 4,
    /// `int32`
    I32 = 5,
    /// `float32`
    F32 = 6,
    /// `bool` (one byte, 0 or 1)
    Bool = 7,
    /// `string` (u64 length, UTF-8 bytes)
    Str = 8,
    /// `array` (element type u32, u64 count, elements)
    Array = 9,
    /// `uint64`
    U64 = 10,
    /// `int64`
    I64 = 11,
    /// `float64`
    F64 = 12,
}

impl MetaType {
    /// The type with on-disk id `id`, or `None` for ids outside 0..=12.
    pub fn from_id(id: u32) -> Option<MetaType> {
        use MetaType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => Str,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The upper-case name used in error messages (`U32`, `STRING`, ...).
    pub fn name(self) -> &'static str {
        use MetaType::*;
        match self {
            U8 => "U8",
            I8 => "I8",
            U16 => "U16",
            I16 => "I16",
            U32 => "U32",
            I32 => "I32",
            F32 => "F32",
            Bool => "BOOL",
            Str => "STRING",
            Array => "ARRAY",
            U64 => "U64",
            I64 => "I64",
            F64 => "F64",
        }
    }

    /// The fewest bytes one value of this type takes on disk (a string's length field, an array's
    /// type and count fields).
    pub fn min_bytes(self) -> u64 {
        use MetaType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | Str => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// `uint8`
    U8(u8),
    /// `int8`
    I8(i8),
    /// `uint16`
    U16(u16),
    /// `int16`
    I16(i16),
    /// `uint32`
    U32(u32),
    /// `int32`
    I32(i32),
    /// `float32`
    F32(f32),
    /// `bool`
    Bool(bool),
    /// `string`
    Str(String),
    /// `array`
    Array(MetaArray),
    /// `uint64`
    U64(u64),
    /// `int64`
    I64(i64),
    /// `float64`
    F64(f64),
}

impl MetaValue {
    /// The value's type.
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::Str(_) => MetaType::Str,
            MetaValue::Array(_) => MetaType::Array,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F64(_) => MetaType::F64,
        }
    }

    /// A description of the type for messages: `U32`, or `ARRAY[STRING]` for arrays.
    pub fn type_desc(&self) -> &'static str {
        match self {
            MetaValue::Array(a) => a.type_desc(),
            v => v.meta_type().name(),
        }
    }

    /// The value as an integer, for any integer type; `None` otherwise.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v.into(),
            MetaValue::I8(v) => v.into(),
            MetaValue::U16(v) => v.into(),
            MetaValue::I16(v) => v.into(),
            MetaValue::U32(v) => v.into(),
            MetaValue::I32(v) => v.into(),
            MetaValue::U64(v) => v.into(),
            MetaValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The string, for `Str` values.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The array, for `Array` values.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A packed list of strings: one buffer and the end offset of each string.
///
/// Tokenizer vocabularies hold ~150k strings; this costs the bytes plus 8 per string, with no
/// per-string allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StrArray {
    buf: String,
    ends: Vec<usize>,
}

impl StrArray {
    /// An empty list.
    pub fn new() -> StrArray {
        StrArray::default()
    }

    /// An empty list with room for `n` strings totalling `bytes` bytes.
    pub fn with_capacity(n: usize, bytes: usize) -> StrArray {
        StrArray {
            buf: String::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        }
    }

    /// Appends a string.
    pub fn push(&mut self, s: &str) {
        self.buf.push_str(s);
        self.ends.push(self.buf.len());
    }

    /// The number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th string, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.buf.get(start..end)
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.ends.len()).map(move |i| self.get(i).unwrap_or(""))
    }
}

impl<S: AsRef<str>> FromIterator<S> for StrArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> StrArray {
        let mut a = StrArray::new();
        for s in iter {
            a.push(s.as_ref());
        }
        a
    }
}

/// A metadata array: one typed vector per element type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    /// `uint8` elements
    U8(Vec<u8>),
    /// `int8` elements
    I8(Vec<i8>),
    /// `uint16` elements
    U16(Vec<u16>),
    /// `int16` elements
    I16(Vec<i16>),
    /// `uint32` elements
    U32(Vec<u32>),
    /// `int32` elements
    I32(Vec<i32>),
    /// `float32` elements
    F32(Vec<f32>),
    /// `bool` elements
    Bool(Vec<bool>),
    /// `string` elements
    Str(StrArray),
    /// Arrays of arrays (one level only: the inner arrays hold no arrays).
    Array(Vec<MetaArray>),
    /// `uint64` elements
    U64(Vec<u64>),
    /// `int64` elements
    I64(Vec<i64>),
    /// `float64` elements
    F64(Vec<f64>),
}

impl MetaArray {
    /// The element type.
    pub fn elem_type(&self) -> MetaType {
        match self {
            MetaArray::U8(_) => MetaType::U8,
            MetaArray::I8(_) => MetaType::I8,
            MetaArray::U16(_) => MetaType::U16,
            MetaArray::I16(_) => MetaType::I16,
            MetaArray::U32(_) => MetaType::U32,
            MetaArray::I32(_) => MetaType::I32,
            MetaArray::F32(_) => MetaType::F32,
            MetaArray::Bool(_) => MetaType::Bool,
            MetaArray::Str(_) => MetaType::Str,
            MetaArray::Array(_) => MetaType::Array,
            MetaArray::U64(_) => MetaType::U64,
            MetaArray::I64(_) => MetaType::I64,
            MetaArray::F64(_) => MetaType::F64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A description of the type for messages, e.g. `ARRAY[STRING]`.
    pub fn type_desc(&self) -> &'static str {
        match self.elem_type() {
            MetaType::U8 => "ARRAY[U8]",
            MetaType::I8 => "ARRAY[I8]",
            MetaType::U16 => "ARRAY[U16]",
            MetaType::I16 => "ARRAY[I16]",
            MetaType::U32 => "ARRAY[U32]",
            MetaType::I32 => "ARRAY[I32]",
            MetaType::F32 => "ARRAY[F32]",
            MetaType::Bool => "ARRAY[BOOL]",
            MetaType::Str => "ARRAY[STRING]",
            MetaType::Array => "ARRAY[ARRAY]",
            MetaType::U64 => "ARRAY[U64]",
            MetaType::I64 => "ARRAY[I64]",
            MetaType::F64 => "ARRAY[F64]",
        }
    }

    /// Element `i` as an integer, for integer arrays.
    fn int_at(&self, i: usize) -> Option<i128> {
        Some(match self {
            MetaArray::U8(v) => (*v.get(i)?).into(),
            MetaArray::I8(v) => (*v.get(i)?).into(),
            MetaArray::U16(v) => (*v.get(i)?).into(),
            MetaArray::I16(v) => (*v.get(i)?).into(),
            MetaArray::U32(v) => (*v.get(i)?).into(),
            MetaArray::I32(v) => (*v.get(i)?).into(),
            MetaArray::U64(v) => (*v.get(i)?).into(),
            MetaArray::I64(v) => (*v.get(i)?).into(),
            _ => return None,
        })
    }

    fn is_int(&self) -> bool {
        matches!(
            self,
            MetaArray::U8(_)
                | MetaArray::I8(_)
                | MetaArray::U16(_)
                | MetaArray::I16(_)
                | MetaArray::U32(_)
                | MetaArray::I32(_)
                | MetaArray::U64(_)
                | MetaArray::I64(_)
        )
    }

    /// Whether arrays nest more than one level (an array of arrays of arrays).
    pub(crate) fn too_deep(&self) -> bool {
        match self {
            MetaArray::Array(inner) => inner.iter().any(|a| matches!(a, MetaArray::Array(_))),
            _ => false,
        }
    }
}

/// The metadata of a GGUF file: key-value pairs in file order, with O(1) lookup by key.
#[derive(Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, MetaValue)>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for Metadata {
    /// The pairs in file order (deterministic, unlike the index).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

/// Converts an integer to `T`, or reports it out of range.
fn fit<T: TryFrom<i128>>(
    key: &str,
    index: Option<usize>,
    v: i128,
    found: &'static str,
    expected: &'static str,
) -> Result<T, GgufError> {
    T::try_from(v).map_err(|_| GgufError::OutOfRange {
        key: key.to_string(),
        index,
        value: v.to_string(),
        found,
        expected,
    })
}

impl Metadata {
    /// An empty map.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    pub(crate) fn with_capacity(n: usize) -> Metadata {
        Metadata {
            entries: Vec::with_capacity(n),
            index: HashMap::with_capacity(n),
        }
    }

    /// Appends a pair.
    ///
    /// # Errors
    /// [`GgufError::DuplicateKey`] (with offset 0) when `key` is already present.
    pub fn insert(&mut self, key: String, value: MetaValue) -> Result<(), GgufError> {
        if self.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key, offset: 0 });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// The number of pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.index
            .get(key)
            .and_then(|&i| self.entries.get(i))
            .map(|(_, v)| v)
    }

    /// The pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn need(&self, key: &str) -> Result<&MetaValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    fn opt<T>(
        &self,
        key: &str,
        f: impl FnOnce(&Self, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.get(key).is_some() {
            f(self, key).map(Some)
        } else {
            Ok(None)
        }
    }

    fn int<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<T, GgufError> {
        let v = self.need(key)?;
        match v.as_int() {
            Some(i) => fit(key, None, i, v.type_desc(), expected),
            None => Err(GgufError::WrongType {
                key: key.to_string(),
                expected,
                found: v.type_desc(),
            }),
        }
    }

    fn array(&self, key: &str, expected: &'static str) -> Result<&MetaArray, GgufError> {
        let v = self.need(key)?;
        v.as_array().ok_or_else(|| GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_desc(),
        })
    }

    fn int_array<T: TryFrom<i128>>(
        &self,
        key: &str,
        expected: &'static str,
        elem: &'static str,
    ) -> Result<Vec<T>, GgufError> {
        let a = self.array(key, expected)?;
        if !a.is_int() {
            return Err(GgufError::WrongType {
                key: key.to_string(),
                expected,
                found: a.type_desc(),
            });
        }
        (0..a.len())
            .map(|i| {
                fit(
                    key,
                    Some(i),
                    a.int_at(i).unwrap_or_default(),
                    a.elem_type().name(),
                    elem,
                )
            })
            .collect()
    }

    /// The value of `key` as a `u32`; any integer type whose value fits is accepted.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for non-integers,
    /// [`GgufError::OutOfRange`] when the value does not fit.
    pub fn u32(&self, key: &str) -> Result<u32, GgufError> {
        self.int(key, "U32")
    }

    /// Like [`Metadata::u32`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::u32`], except for a missing key.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.opt(key, Self::u32)
    }

    /// The value of `key` as a `u64`; any integer type whose value fits is accepted.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for non-integers,
    /// [`GgufError::OutOfRange`] when the value is negative.
    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        self.int(key, "U64")
    }

    /// Like [`Metadata::u64`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::u64`], except for a missing key.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.opt(key, Self::u64)
    }

    /// The value of `key` as an `f32`; `F32` and `F64` values are accepted.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for other types.
    pub fn f32(&self, key: &str) -> Result<f32, GgufError> {
        match self.need(key)? {
            MetaValue::F32(v) => Ok(*v),
            MetaValue::F64(v) => Ok(*v as f32),
            v => Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "F32",
                found: v.type_desc(),
            }),
        }
    }

    /// Like [`Metadata::f32`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::f32`], except for a missing key.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.opt(key, Self::f32)
    }

    /// The value of `key` as a `bool`.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for other types.
    pub fn bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.need(key)? {
            MetaValue::Bool(v) => Ok(*v),
            v => Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "BOOL",
                found: v.type_desc(),
            }),
        }
    }

    /// Like [`Metadata::bool`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::bool`], except for a missing key.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.opt(key, Self::bool)
    }

    /// The value of `key` as a string.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for other types.
    pub fn str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.need(key)?;
        v.as_str().ok_or_else(|| GgufError::WrongType {
            key: key.to_string(),
            expected: "STRING",
            found: v.type_desc(),
        })
    }

    /// Like [`Metadata::str`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::str`], except for a missing key.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.get(key) {
            Some(_) => self.str(key).map(Some),
            None => Ok(None),
        }
    }

    /// The packed string array of `key`, without copying (see [`StrArray`]).
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for anything but an array of strings.
    pub fn str_array_packed(&self, key: &str) -> Result<&StrArray, GgufError> {
        match self.array(key, "ARRAY[STRING]")? {
            MetaArray::Str(s) => Ok(s),
            a => Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "ARRAY[STRING]",
                found: a.type_desc(),
            }),
        }
    }

    /// The value of `key` as a list of strings.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for anything but an array of strings.
    pub fn str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        Ok(self.str_array_packed(key)?.iter().collect())
    }

    /// Like [`Metadata::str_array`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::str_array`], except for a missing key.
    pub fn opt_str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        match self.get(key) {
            Some(_) => self.str_array(key).map(Some),
            None => Ok(None),
        }
    }

    /// The value of `key` as a list of `f32`; arrays of `F32` or `F64` are accepted.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for other types.
    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        match self.array(key, "ARRAY[F32]")? {
            MetaArray::F32(v) => Ok(v.clone()),
            MetaArray::F64(v) => Ok(v.iter().map(|&x| x as f32).collect()),
            a => Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "ARRAY[F32]",
                found: a.type_desc(),
            }),
        }
    }

    /// Like [`Metadata::f32_array`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::f32_array`], except for a missing key.
    pub fn opt_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>, GgufError> {
        self.opt(key, Self::f32_array)
    }

    /// The value of `key` as a list of `i32`; arrays of any integer type are accepted when every
    /// element fits.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for non-integer arrays,
    /// [`GgufError::OutOfRange`] (naming the element) when an element does not fit.
    pub fn i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        self.int_array(key, "ARRAY[I32]", "I32")
    }

    /// Like [`Metadata::i32_array`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::i32_array`], except for a missing key.
    pub fn opt_i32_array(&self, key: &str) -> Result<Option<Vec<i32>>, GgufError> {
        self.opt(key, Self::i32_array)
    }

    /// The value of `key` as a list of `u32`; arrays of any integer type are accepted when every
    /// element fits.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`] for non-integer arrays,
    /// [`GgufError::OutOfRange`] (naming the element) when an element does not fit.
    pub fn u32_array(&self, key: &str) -> Result<Vec<u32>, GgufError> {
        self.int_array(key, "ARRAY[U32]", "U32")
    }

    /// Like [`Metadata::u32_array`], but `Ok(None)` when the key is absent.
    ///
    /// # Errors
    /// As [`Metadata::u32_array`], except for a missing key.
    pub fn opt_u32_array(&self, key: &str) -> Result<Option<Vec<u32>>, GgufError> {
        self.opt(key, Self::u32_array)
    }
}
