//! The GGUF parser: a bounds-checked cursor over the file's bytes and the validation of every
//! field. Nothing here panics or indexes out of bounds, and every allocation is preceded by a check
//! that the file holds at least as many bytes as the allocation's elements need.

use std::collections::HashMap;

use strata_quant::GgmlType;

use super::value::{MetaArray, MetaType, MetaValue, Metadata, StrArray};
use super::{GgufError, TensorInfo};

/// The magic at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The key that sets the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The most dimensions a tensor may have.
pub const MAX_DIMS: usize = 4;
/// The most elements a tensor may have (2^50), a sanity bound far above any real model.
pub const MAX_TENSOR_ELEMS: u64 = 1 << 50;

/// Header bytes: magic, version, tensor count, kv count.
const HEADER_BYTES: u64 = 24;
/// The fewest bytes a key-value pair takes: key length, type, one byte of value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The fewest bytes a tensor description takes: name length, n_dims, one dim, type, offset.
const MIN_TENSOR_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// What [`parse`] found.
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: u64,
    pub data_offset: u64,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub index: HashMap<String, usize>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn lossy_prefix(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    s.chars().take(64).collect()
}

impl<'a> Cursor<'a> {
    fn off(&self) -> u64 {
        self.pos as u64
    }

    fn len(&self) -> u64 {
        self.buf.len() as u64
    }

    fn remaining(&self) -> u64 {
        (self.buf.len().saturating_sub(self.pos)) as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let truncated = || GgufError::Truncated {
            what,
            offset: self.pos as u64,
            needed: n,
            file_len: self.buf.len() as u64,
        };
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let s = self.buf.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }

    /// A length-prefixed byte string; `what` names it in errors.
    fn bytes(
        &mut self,
        len_what: &'static str,
        what: impl FnOnce() -> String,
    ) -> Result<&'a [u8], GgufError> {
        let offset = self.off();
        let len = self.u64(len_what)?;
        if len > self.remaining() {
            return Err(GgufError::StringTooLong {
                what: what(),
                offset,
                len,
                remaining: self.remaining(),
            });
        }
        self.take(len, len_what)
    }
}

/// The byte size of a tensor of `dims` and `ty`, after checking the dims.
///
/// # Errors
/// [`GgufError::BadDimCount`], [`GgufError::ZeroDim`], [`GgufError::TooManyElems`],
/// [`GgufError::RowNotBlockMultiple`].
pub(crate) fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64, GgufError> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(GgufError::BadDimCount {
            tensor: name.to_string(),
            n_dims: dims.len() as u64,
        });
    }
    if let Some(index) = dims.iter().position(|&d| d == 0) {
        return Err(GgufError::ZeroDim {
            tensor: name.to_string(),
            index,
            dims: dims.to_vec(),
        });
    }
    let elems = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    if !matches!(elems, Some(e) if e <= MAX_TENSOR_ELEMS) {
        return Err(GgufError::TooManyElems {
            tensor: name.to_string(),
            dims: dims.to_vec(),
            max: MAX_TENSOR_ELEMS,
        });
    }
    let block = ty.block_elems() as u64;
    let row_len = dims[0];
    if row_len % block != 0 {
        return Err(GgufError::RowNotBlockMultiple {
            tensor: name.to_string(),
            ty: ty.name(),
            row_len,
            block,
        });
    }
    // Rows fit: their product divides the element count, which did not overflow; and the byte
    // size cannot overflow either (at most 2^50 elements of at most 8 bytes), but stay checked.
    let rows: u64 = dims[1..].iter().product();
    ty.row_bytes(row_len)
        .and_then(|rb| rb.checked_mul(rows))
        .ok_or_else(|| GgufError::TooManyElems {
            tensor: name.to_string(),
            dims: dims.to_vec(),
            max: MAX_TENSOR_ELEMS,
        })
}

/// Checks an alignment value.
pub(crate) fn check_alignment(v: &MetaValue) -> Result<u64, GgufError> {
    match *v {
        MetaValue::U32(a) if a != 0 && a.is_power_of_two() => Ok(a.into()),
        MetaValue::U32(a) => Err(GgufError::BadAlignment { value: a.into() }),
        ref other => Err(GgufError::AlignmentType {
            found: other.type_desc(),
        }),
    }
}

/// Reads `count` fixed-size little-endian numbers.
fn numbers<T, const N: usize>(
    c: &mut Cursor<'_>,
    count: u64,
    conv: fn([u8; N]) -> T,
) -> Result<Vec<T>, GgufError> {
    let total = count.saturating_mul(N as u64);
    let raw = c.take(total, "array elements")?;
    Ok(raw
        .chunks_exact(N)
        .map(|ch| {
            let mut a = [0u8; N];
            a.copy_from_slice(ch);
            conv(a)
        })
        .collect())
}

fn read_bool(c: &mut Cursor<'_>, key: &str) -> Result<bool, GgufError> {
    let offset = c.off();
    match c.arr::<1>("bool value")?[0] {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::BadBool {
            key: key.to_string(),
            offset,
            value,
        }),
    }
}

fn read_string(c: &mut Cursor<'_>, key: &str, index: Option<usize>) -> Result<String, GgufError> {
    let name = || match index {
        Some(i) => format!("{key}[{i}]"),
        None => key.to_string(),
    };
    let bytes = c.bytes("string length", || format!("string value of `{}`", name()))?;
    let offset = c.off() - bytes.len() as u64;
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(GgufError::ValueNotUtf8 {
            key: name(),
            offset,
        }),
    }
}

fn read_type(c: &mut Cursor<'_>, key: &str, elem: bool) -> Result<MetaType, GgufError> {
    let offset = c.off();
    let type_id = c.u32(if elem {
        "array element type"
    } else {
        "value type"
    })?;
    MetaType::from_id(type_id).ok_or_else(|| {
        if elem {
            GgufError::BadArrayType {
                key: key.to_string(),
                offset,
                type_id,
            }
        } else {
            GgufError::BadValueType {
                key: key.to_string(),
                offset,
                type_id,
            }
        }
    })
}

/// Reads an array body (element type, count, elements); `depth` is 0 for a top-level array.
fn read_array(c: &mut Cursor<'_>, key: &str, depth: u32) -> Result<MetaArray, GgufError> {
    let type_offset = c.off();
    let et = read_type(c, key, true)?;
    if et == MetaType::Array && depth >= 1 {
        return Err(GgufError::ArrayTooDeep {
            key: key.to_string(),
            offset: type_offset,
        });
    }
    let count_offset = c.off();
    let count = c.u64("array length")?;
    let min_each = et.min_bytes();
    if count
        .checked_mul(min_each)
        .is_none_or(|need| need > c.remaining())
    {
        return Err(GgufError::ArrayTooLong {
            key: key.to_string(),
            offset: count_offset,
            len: count,
            elem_type: et.name(),
            remaining: c.remaining(),
            min_each,
        });
    }
    // `count * min_each <= remaining <= usize::MAX`, so the count fits a usize.
    let n = count as usize;
    Ok(match et {
        MetaType::U8 => MetaArray::U8(c.take(count, "array elements")?.to_vec()),
        MetaType::I8 => MetaArray::I8(numbers(c, count, i8::from_le_bytes)?),
        MetaType::U16 => MetaArray::U16(numbers(c, count, u16::from_le_bytes)?),
        MetaType::I16 => MetaArray::I16(numbers(c, count, i16::from_le_bytes)?),
        MetaType::U32 => MetaArray::U32(numbers(c, count, u32::from_le_bytes)?),
        MetaType::I32 => MetaArray::I32(numbers(c, count, i32::from_le_bytes)?),
        MetaType::F32 => MetaArray::F32(numbers(c, count, f32::from_le_bytes)?),
        MetaType::U64 => MetaArray::U64(numbers(c, count, u64::from_le_bytes)?),
        MetaType::I64 => MetaArray::I64(numbers(c, count, i64::from_le_bytes)?),
        MetaType::F64 => MetaArray::F64(numbers(c, count, f64::from_le_bytes)?),
        MetaType::Bool => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_bool(c, key)?);
            }
            MetaArray::Bool(v)
        }
        MetaType::Str => {
            let mut v = StrArray::with_capacity(n, 0);
            for i in 0..n {
                let bytes = c.bytes("string length", || format!("string value of `{key}[{i}]`"))?;
                let offset = c.off() - bytes.len() as u64;
                let s = std::str::from_utf8(bytes).map_err(|_| GgufError::ValueNotUtf8 {
                    key: format!("{key}[{i}]"),
                    offset,
                })?;
                v.push(s);
            }
            MetaArray::Str(v)
        }
        MetaType::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            MetaArray::Array(v)
        }
    })
}

fn read_value(c: &mut Cursor<'_>, key: &str, ty: MetaType) -> Result<MetaValue, GgufError> {
    Ok(match ty {
        MetaType::U8 => MetaValue::U8(c.arr::<1>("U8 value")?[0]),
        MetaType::I8 => MetaValue::I8(i8::from_le_bytes(c.arr("I8 value")?)),
        MetaType::U16 => MetaValue::U16(u16::from_le_bytes(c.arr("U16 value")?)),
        MetaType::I16 => MetaValue::I16(i16::from_le_bytes(c.arr("I16 value")?)),
        MetaType::U32 => MetaValue::U32(u32::from_le_bytes(c.arr("U32 value")?)),
        MetaType::I32 => MetaValue::I32(i32::from_le_bytes(c.arr("I32 value")?)),
        MetaType::F32 => MetaValue::F32(f32::from_le_bytes(c.arr("F32 value")?)),
        MetaType::U64 => MetaValue::U64(u64::from_le_bytes(c.arr("U64 value")?)),
        MetaType::I64 => MetaValue::I64(i64::from_le_bytes(c.arr("I64 value")?)),
        MetaType::F64 => MetaValue::F64(f64::from_le_bytes(c.arr("F64 value")?)),
        MetaType::Bool => MetaValue::Bool(read_bool(c, key)?),
        MetaType::Str => MetaValue::Str(read_string(c, key, None)?),
        MetaType::Array => MetaValue::Array(read_array(c, key, 0)?),
    })
}

/// Parses and validates a whole GGUF file held in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0 };
    let magic: [u8; 4] = c.arr("magic")?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    if version & 0xFFFF == 0 && version != 0 {
        let swapped = version.swap_bytes();
        return Err(GgufError::BigEndian { swapped });
    }
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    let remaining = c.remaining();
    debug_assert_eq!(c.off(), HEADER_BYTES);
    let kv_need = n_kv.checked_mul(MIN_KV_BYTES);
    if kv_need.is_none_or(|n| n > remaining) {
        return Err(GgufError::TooManyKvs {
            count: n_kv,
            remaining,
            min_each: MIN_KV_BYTES,
        });
    }
    let tensor_need = n_tensors
        .checked_mul(MIN_TENSOR_BYTES)
        .and_then(|t| t.checked_add(kv_need.unwrap_or(0)));
    if tensor_need.is_none_or(|n| n > remaining) {
        return Err(GgufError::TooManyTensors {
            count: n_tensors,
            offset: c.off(),
            remaining: remaining.saturating_sub(kv_need.unwrap_or(0)),
            min_each: MIN_TENSOR_BYTES,
        });
    }

    // Both counts are bounded by the file length, so they fit a usize.
    let mut metadata = Metadata::with_capacity(n_kv as usize);
    for _ in 0..n_kv {
        let key_offset = c.off();
        let kb = c.bytes("key length", || "metadata key".to_string())?;
        let key = std::str::from_utf8(kb).map_err(|_| GgufError::KeyNotUtf8 {
            offset: key_offset + 8,
            prefix: lossy_prefix(kb),
        })?;
        if metadata.contains(key) {
            return Err(GgufError::DuplicateKey {
                key: key.to_string(),
                offset: key_offset,
            });
        }
        let ty = read_type(&mut c, key, false)?;
        let value = read_value(&mut c, key, ty)?;
        metadata.insert(key.to_string(), value)?;
    }

    let alignment = match metadata.get(ALIGNMENT_KEY) {
        Some(v) => check_alignment(v)?,
        None => DEFAULT_ALIGNMENT,
    };

    if n_tensors
        .checked_mul(MIN_TENSOR_BYTES)
        .is_none_or(|n| n > c.remaining())
    {
        return Err(GgufError::TooManyTensors {
            count: n_tensors,
            offset: c.off(),
            remaining: c.remaining(),
            min_each: MIN_TENSOR_BYTES,
        });
    }
    let n_t = n_tensors as usize;
    let mut tensors = Vec::with_capacity(n_t);
    let mut index = HashMap::with_capacity(n_t);
    let mut rel_offsets = Vec::with_capacity(n_t);
    for _ in 0..n_t {
        let name_offset = c.off();
        let nb = c.bytes("tensor name length", || "tensor name".to_string())?;
        let name = std::str::from_utf8(nb).map_err(|_| GgufError::TensorNameNotUtf8 {
            offset: name_offset + 8,
            prefix: lossy_prefix(nb),
        })?;
        if index.contains_key(name) {
            return Err(GgufError::DuplicateTensor {
                name: name.to_string(),
                offset: name_offset,
            });
        }
        let n_dims = c.u32("tensor dimension count")?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(GgufError::BadDimCount {
                tensor: name.to_string(),
                n_dims: n_dims.into(),
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64("tensor dimension")?);
        }
        let type_id = c.u32("tensor type")?;
        let rel = c.u64("tensor offset")?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            tensor: name.to_string(),
            type_id,
        })?;
        let bytes = tensor_bytes(name, &dims, ty)?;
        index.insert(name.to_string(), tensors.len());
        rel_offsets.push(rel);
        tensors.push(TensorInfo {
            name: name.to_string(),
            dims,
            ty,
            offset: 0,
            bytes,
        });
    }

    // `pos <= len` and `alignment <= 2^31`, so this cannot overflow.
    let data_offset = c.off().div_ceil(alignment) * alignment;
    let file_len = c.len();
    for (t, &rel) in tensors.iter_mut().zip(&rel_offsets) {
        if rel % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: t.name.clone(),
                offset: rel,
                alignment,
            });
        }
        let start = data_offset.checked_add(rel);
        let end = start.and_then(|s| s.checked_add(t.bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => t.offset = s,
            _ => {
                let s = data_offset.saturating_add(rel);
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    start: s,
                    end: s.saturating_add(t.bytes),
                    file_len,
                });
            }
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_unstable_by_key(|&i| tensors[i].offset);
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        // Both ends were checked to fit in the file above.
        if a.offset + a.bytes > b.offset {
            return Err(GgufError::TensorOverlap {
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a.offset + a.bytes,
                second: b.name.clone(),
                second_start: b.offset,
            });
        }
    }

    Ok(Parsed {
        version,
        alignment,
        data_offset,
        metadata,
        tensors,
        index,
    })
}
