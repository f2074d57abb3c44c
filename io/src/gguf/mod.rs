//! GGUF, the llama.cpp model format: a validating reader over `memmap2` and a streaming writer.
//!
//! Layout of a file (versions 2 and 3, little-endian):
//!
//! ```text
//! magic "GGUF" | version u32 | tensor count u64 | kv count u64
//! kv pairs:     key (u64 len + UTF-8) | value type u32 | value
//! tensor infos: name (u64 len + UTF-8) | n_dims u32 | dims u64 x n_dims | type u32 | offset u64
//! padding to `general.alignment` (default 32)
//! tensor data, each tensor at data_offset + its (aligned) offset
//! ```
//!
//! [`GgufFile`] validates everything when it opens a file (counts, lengths, UTF-8, types, sizes,
//! alignment, bounds, overlaps), so that later accessors such as [`GgufFile::tensor_data`] are
//! infallible slices into the mapped file.

#![warn(missing_docs)]

mod error;
mod parse;
mod value;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use memmap2::Mmap;
pub use strata_quant::GgmlType;

pub use error::GgufError;
pub use parse::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS, MAX_TENSOR_ELEMS};
pub use value::{MetaArray, MetaType, MetaValue, Metadata, StrArray};
pub use writer::{GgufStream, GgufWriter};

/// One tensor's description, validated against the file it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// The dimensions in GGML order: `dims[0]` is the row length (the contiguous one).
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// The ABSOLUTE file offset of the first byte of the data.
    pub offset: u64,
    /// The data's size in bytes.
    pub bytes: u64,
}

impl TensorInfo {
    /// The number of elements (the product of the dims).
    pub fn elems(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The number of rows: the product of `dims[1..]` (1 for a vector).
    pub fn rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

enum Backing {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed and validated GGUF file, owning its bytes (a memory map, or a vector).
pub struct GgufFile {
    backing: Backing,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_bytes", &self.file_bytes())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("kv_count", &self.metadata.len())
            .field("tensor_count", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps the file at `path` read-only and parses it.
    ///
    /// The mapping is shared with the page cache: the file must not be modified while it is open
    /// (the usual contract of model files).
    ///
    /// # Errors
    /// [`GgufError::File`] naming `path`, wrapping [`GgufError::Io`] when the file cannot be opened
    /// or mapped, or any validation error of [`GgufFile::from_bytes`].
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let map = || -> Result<Backing, GgufError> {
            let file = std::fs::File::open(path).map_err(|e| GgufError::io("opening", e))?;
            let len = file
                .metadata()
                .map_err(|e| GgufError::io("reading metadata of", e))?
                .len();
            if len == 0 {
                // Mapping an empty file fails on some platforms; it is simply truncated.
                return Ok(Backing::Owned(Vec::new()));
            }
            // SAFETY: the map is read-only; like every mmap-based model loader we require that the
            // file is not truncated or rewritten while open. All reads are bounds-checked against
            // the length of the map itself.
            let m = unsafe { Mmap::map(&file) }.map_err(|e| GgufError::io("memory-mapping", e))?;
            Ok(Backing::Mapped(m))
        };
        let backing = map().map_err(|e| e.in_file(path))?;
        Self::from_backing(backing).map_err(|e| e.in_file(path))
    }

    /// Parses a file held in memory (tests, fuzzing, small files).
    ///
    /// # Errors
    /// Any validation error: [`GgufError::BadMagic`], [`GgufError::UnsupportedVersion`],
    /// [`GgufError::BigEndian`], [`GgufError::Truncated`], [`GgufError::TooManyKvs`],
    /// [`GgufError::TooManyTensors`], [`GgufError::StringTooLong`], [`GgufError::ArrayTooLong`],
    /// the UTF-8 errors, [`GgufError::BadValueType`], [`GgufError::BadArrayType`],
    /// [`GgufError::ArrayTooDeep`], [`GgufError::BadBool`], [`GgufError::DuplicateKey`],
    /// [`GgufError::DuplicateTensor`], the alignment errors, the tensor shape and type errors,
    /// [`GgufError::MisalignedTensor`], [`GgufError::TensorOutOfBounds`] and
    /// [`GgufError::TensorOverlap`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<GgufFile, GgufError> {
        let p = parse::parse(backing.bytes())?;
        Ok(GgufFile {
            backing,
            version: p.version,
            alignment: p.alignment,
            data_offset: p.data_offset,
            metadata: p.metadata,
            tensors: p.tensors,
            index: p.index,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The absolute offset of the tensor data section (the end of the tensor descriptions,
    /// rounded up to the alignment). May equal or, in a file without tensors, exceed the file
    /// length.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The file's length in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, in O(1).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// The data of tensor `t`, in place (no copy).
    ///
    /// `t` should come from this file's [`GgufFile::tensors`], whose ranges were validated; a
    /// `TensorInfo` whose range does not lie inside this file yields an empty slice.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = usize::try_from(t.offset)
            .ok()
            .zip(usize::try_from(t.bytes).ok())
            .and_then(|(s, n)| Some(s..s.checked_add(n)?));
        range.and_then(|r| self.bytes().get(r)).unwrap_or(&[])
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }
}
