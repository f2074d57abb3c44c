//! The errors of GGUF reading, metadata access and writing.

use std::path::PathBuf;

/// Everything that can go wrong reading, querying or writing a GGUF file.
///
/// A file is hostile input: each variant names where the problem is (a byte offset, a key, a tensor
/// name) and the numbers involved, so that a user can tell a truncated download from a bad
/// converter. Errors from [`GgufFile::open`](super::GgufFile::open) and the path writers are
/// wrapped in [`GgufError::File`], which names the path; [`GgufError::root`] strips that wrapper.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// An error about a particular file: the path, then the error itself.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<GgufError>,
    },

    /// An operating-system error (opening, mapping, reading or writing a file).
    #[error("I/O error while {action}: {source}")]
    Io {
        /// What was being done, e.g. "opening" or "writing tensor data".
        action: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?} (expected \"GGUF\" = [47, 47, 55, 46])")]
    BadMagic {
        /// The first four bytes found.
        found: [u8; 4],
    },

    /// The version field reads as a small number only when byte-swapped: a big-endian file.
    #[error(
        "big-endian GGUF (version {swapped} byte-swapped) is not supported; convert the model on a \
         little-endian machine"
    )]
    BigEndian {
        /// The version as read big-endian.
        swapped: u32,
    },

    /// A version this reader does not understand (only 2 and 3 are supported).
    #[error(
        "unsupported GGUF version {version}: only versions 2 and 3 are supported{}",
        if *version == 1 { " (version 1 is obsolete; re-convert the model with a current llama.cpp)" } else { "" }
    )]
    UnsupportedVersion {
        /// The version found.
        version: u32,
    },

    /// The file ends before a field that must be there.
    #[error(
        "file truncated: {what} needs {needed} bytes at offset {offset}, but the file is only \
         {file_len} bytes long"
    )]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// The byte offset of the field.
        offset: u64,
        /// The bytes the field needs.
        needed: u64,
        /// The file's length.
        file_len: u64,
    },

    /// The header's metadata count cannot fit in the bytes that follow it.
    #[error(
        "header claims {count} metadata entries, but only {remaining} bytes follow the header \
         (each entry needs at least {min_each} bytes): the file is corrupt or truncated"
    )]
    TooManyKvs {
        /// The count in the header.
        count: u64,
        /// Bytes after the header.
        remaining: u64,
        /// The minimum size of one entry.
        min_each: u64,
    },

    /// The header's tensor count cannot fit in the bytes that follow it.
    #[error(
        "header claims {count} tensors, but only {remaining} bytes are left for their descriptions \
         at offset {offset} (each needs at least {min_each} bytes): the file is corrupt or truncated"
    )]
    TooManyTensors {
        /// The count in the header.
        count: u64,
        /// Where the check was made.
        offset: u64,
        /// Bytes left from there.
        remaining: u64,
        /// The minimum size of one tensor description.
        min_each: u64,
    },

    /// A string's length runs past the end of the file.
    #[error(
        "{what} at offset {offset} claims a length of {len} bytes, but only {remaining} bytes \
         remain in the file"
    )]
    StringTooLong {
        /// Which string (a key, a value of a key, a tensor name).
        what: String,
        /// The offset of the length field.
        offset: u64,
        /// The claimed length.
        len: u64,
        /// The bytes left after the length field.
        remaining: u64,
    },

    /// An array's element count cannot fit in the rest of the file.
    #[error(
        "array `{key}` at offset {offset} claims {len} elements of type {elem_type}, but only \
         {remaining} bytes remain (each element needs at least {min_each} bytes)"
    )]
    ArrayTooLong {
        /// The metadata key.
        key: String,
        /// The offset of the count field.
        offset: u64,
        /// The claimed count.
        len: u64,
        /// The element type's name.
        elem_type: &'static str,
        /// Bytes left after the count.
        remaining: u64,
        /// The minimum size of one element.
        min_each: u64,
    },

    /// A metadata key is not valid UTF-8.
    #[error("metadata key at offset {offset} is not valid UTF-8 (prefix {prefix:?})")]
    KeyNotUtf8 {
        /// The offset of the key's bytes.
        offset: u64,
        /// The key, lossily decoded, at most 64 characters.
        prefix: String,
    },

    /// A string value is not valid UTF-8.
    #[error("value of metadata key `{key}` at offset {offset} is not valid UTF-8")]
    ValueNotUtf8 {
        /// The key.
        key: String,
        /// The offset of the string's bytes.
        offset: u64,
    },

    /// A tensor name is not valid UTF-8.
    #[error("tensor name at offset {offset} is not valid UTF-8 (prefix {prefix:?})")]
    TensorNameNotUtf8 {
        /// The offset of the name's bytes.
        offset: u64,
        /// The name, lossily decoded, at most 64 characters.
        prefix: String,
    },

    /// A value type id outside 0..=12.
    #[error("metadata key `{key}` at offset {offset} has unknown value type id {type_id} (valid: 0..=12)")]
    BadValueType {
        /// The key.
        key: String,
        /// The offset of the type field.
        offset: u64,
        /// The id found.
        type_id: u32,
    },

    /// An array element type id outside 0..=12.
    #[error(
        "array `{key}` at offset {offset} has unknown element type id {type_id} (valid: 0..=12)"
    )]
    BadArrayType {
        /// The key.
        key: String,
        /// The offset of the element-type field.
        offset: u64,
        /// The id found.
        type_id: u32,
    },

    /// Arrays nested deeper than an array of arrays.
    #[error(
        "array `{key}` at offset {offset} nests arrays more than one level deep (arrays of arrays \
         of arrays are not supported)"
    )]
    ArrayTooDeep {
        /// The key.
        key: String,
        /// The offset of the innermost element-type field.
        offset: u64,
    },

    /// A boolean byte other than 0 or 1.
    #[error("metadata key `{key}` at offset {offset} holds boolean byte {value} (must be 0 or 1)")]
    BadBool {
        /// The key.
        key: String,
        /// The offset of the byte.
        offset: u64,
        /// The byte found.
        value: u8,
    },

    /// The same metadata key twice.
    #[error("duplicate metadata key `{key}` (second occurrence at offset {offset})")]
    DuplicateKey {
        /// The key.
        key: String,
        /// The offset of the second occurrence (0 when adding to a writer).
        offset: u64,
    },

    /// The same tensor name twice.
    #[error("duplicate tensor name `{name}` (second occurrence at offset {offset})")]
    DuplicateTensor {
        /// The name.
        name: String,
        /// The offset of the second occurrence (0 when adding to a writer).
        offset: u64,
    },

    /// `general.alignment` has a type other than U32.
    #[error("`general.alignment` must be of type U32, found {found}")]
    AlignmentType {
        /// The type found.
        found: &'static str,
    },

    /// `general.alignment` is zero or not a power of two.
    #[error("`general.alignment` is {value}; it must be a nonzero power of two")]
    BadAlignment {
        /// The value found.
        value: u64,
    },

    /// A tensor with a dimension count outside 1..=4.
    #[error("tensor `{tensor}` has {n_dims} dimensions; GGUF tensors have 1 to 4")]
    BadDimCount {
        /// The tensor.
        tensor: String,
        /// The count found.
        n_dims: u64,
    },

    /// A tensor dimension of zero.
    #[error("tensor `{tensor}` has dimension {index} equal to 0 (dims {dims:?}); every dimension must be at least 1")]
    ZeroDim {
        /// The tensor.
        tensor: String,
        /// Which dimension.
        index: usize,
        /// All dims.
        dims: Vec<u64>,
    },

    /// The product of a tensor's dims overflows, or exceeds the sanity bound.
    #[error("tensor `{tensor}` has dims {dims:?} whose element count overflows or exceeds the limit of {max} elements")]
    TooManyElems {
        /// The tensor.
        tensor: String,
        /// The dims.
        dims: Vec<u64>,
        /// The limit.
        max: u64,
    },

    /// A tensor type id that no GGML version has assigned.
    #[error(
        "tensor `{tensor}` has unknown GGML type id {type_id}; the file may need a newer strata-rt"
    )]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The id found.
        type_id: u32,
    },

    /// A row length that is not a whole number of the type's blocks.
    #[error(
        "tensor `{tensor}` of type {ty} has rows of {row_len} elements, not a multiple of the \
         type's block size {block}"
    )]
    RowNotBlockMultiple {
        /// The tensor.
        tensor: String,
        /// The type name.
        ty: &'static str,
        /// The row length, `dims[0]`.
        row_len: u64,
        /// The block size in elements.
        block: u64,
    },

    /// A tensor offset that is not a multiple of the alignment.
    #[error(
        "tensor `{tensor}` has data offset {offset} (relative to the data section), which is not a \
         multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        /// The tensor.
        tensor: String,
        /// The relative offset in the file.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },

    /// A tensor's data extends past the end of the file.
    #[error(
        "tensor `{tensor}` data spans bytes {start}..{end} of the file, but the file is only \
         {file_len} bytes long: the file is truncated or corrupt"
    )]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Absolute start (saturated on overflow).
        start: u64,
        /// Absolute end (saturated on overflow).
        end: u64,
        /// The file's length.
        file_len: u64,
    },

    /// Two tensors' data overlap.
    #[error(
        "tensors `{first}` (bytes {first_start}..{first_end}) and `{second}` (from byte \
         {second_start}) overlap"
    )]
    TensorOverlap {
        /// The tensor that starts first.
        first: String,
        /// Its absolute start.
        first_start: u64,
        /// Its absolute end.
        first_end: u64,
        /// The tensor that starts inside it.
        second: String,
        /// Its absolute start.
        second_start: u64,
    },

    /// A required metadata key is absent.
    #[error("metadata key `{key}` is missing")]
    MissingKey {
        /// The key.
        key: String,
    },

    /// A metadata value of a type other than the one asked for.
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What the file holds.
        found: &'static str,
    },

    /// An integer metadata value (or array element) that does not fit the type asked for.
    #[error("metadata key `{key}`{}: value {value} of type {found} does not fit in {expected}", index.map(|i| format!(" element {i}")).unwrap_or_default())]
    OutOfRange {
        /// The key.
        key: String,
        /// The array index, for array getters.
        index: Option<usize>,
        /// The value found.
        value: String,
        /// Its type.
        found: &'static str,
        /// What the caller asked for.
        expected: &'static str,
    },

    /// Tensor data given to the writer of the wrong length.
    #[error("tensor `{tensor}`: expected {expected} bytes of data, got {got}")]
    DataSize {
        /// The tensor.
        tensor: String,
        /// Bytes the dims and type call for.
        expected: u64,
        /// Bytes given.
        got: u64,
    },

    /// The writer was used out of order (e.g. finished before every tensor's data was written).
    #[error("GGUF writer misuse: {0}")]
    WriterState(String),
}

impl GgufError {
    /// The error without any [`GgufError::File`] wrappers, for matching on the cause.
    pub fn root(&self) -> &GgufError {
        let mut e = self;
        while let GgufError::File { source, .. } = e {
            e = source;
        }
        e
    }

    pub(crate) fn in_file(self, path: &std::path::Path) -> GgufError {
        GgufError::File {
            path: path.to_path_buf(),
            source: Box::new(self),
        }
    }

    pub(crate) fn io(action: &'static str, source: std::io::Error) -> GgufError {
        GgufError::Io { action, source }
    }
}
