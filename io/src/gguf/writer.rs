//! The GGUF writer: metadata of every type, tensors given whole or streamed, version 3 output with
//! alignment padding, to any [`Write`] or atomically to a path.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use strata_quant::GgmlType;

use super::parse::{check_alignment, tensor_bytes, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC};
use super::value::{MetaArray, MetaValue, Metadata, StrArray};
use super::{GgufError, TensorInfo};

/// Builds a GGUF file: metadata and tensor descriptions first, then the bytes, written in one pass.
///
/// Small files: [`GgufWriter::add_tensor`] with the data, then [`GgufWriter::write_to`] or
/// [`GgufWriter::write_to_path`]. Large files: [`GgufWriter::add_tensor_info`] for every tensor,
/// then [`GgufWriter::write_to_path_with`] (or [`GgufWriter::start`]) and feed each tensor's bytes
/// in order, in chunks of any size, so no more than a chunk is ever held in memory.
///
/// ```
/// use strata_io::gguf::{GgufWriter, GgufFile, GgmlType};
/// let mut w = GgufWriter::new();
/// w.add_str("general.architecture", "llama")?;
/// w.add_tensor("t", &[4], GgmlType::F32, vec![0u8; 16])?;
/// let mut bytes = Vec::new();
/// w.write_to(&mut bytes)?;
/// let f = GgufFile::from_bytes(bytes)?;
/// assert_eq!(f.tensor("t").map(|t| t.bytes), Some(16));
/// # Ok::<(), strata_io::GgufError>(())
/// ```
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Metadata,
    /// Tensor descriptions with offsets RELATIVE to the data section, and their data if given.
    tensors: Vec<(TensorInfo, Option<Vec<u8>>)>,
    names: HashMap<String, usize>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Writes into `w` while counting bytes.
struct Out<W: Write> {
    w: W,
    pos: u64,
}

impl<W: Write> Out<W> {
    fn put(&mut self, b: &[u8]) -> Result<(), GgufError> {
        self.w
            .write_all(b)
            .map_err(|e| GgufError::io("writing GGUF", e))?;
        self.pos += b.len() as u64;
        Ok(())
    }

    fn u32(&mut self, v: u32) -> Result<(), GgufError> {
        self.put(&v.to_le_bytes())
    }

    fn u64(&mut self, v: u64) -> Result<(), GgufError> {
        self.put(&v.to_le_bytes())
    }

    fn str(&mut self, s: &str) -> Result<(), GgufError> {
        self.u64(s.len() as u64)?;
        self.put(s.as_bytes())
    }

    fn pad_to(&mut self, alignment: u64) -> Result<(), GgufError> {
        const ZEROS: [u8; 256] = [0; 256];
        let mut n = align_up(self.pos, alignment) - self.pos;
        while n > 0 {
            let k = n.min(ZEROS.len() as u64);
            self.put(&ZEROS[..k as usize])?;
            n -= k;
        }
        Ok(())
    }

    fn numbers<T: Copy, const N: usize>(
        &mut self,
        v: &[T],
        conv: fn(T) -> [u8; N],
    ) -> Result<(), GgufError> {
        for x in v {
            self.put(&conv(*x))?;
        }
        Ok(())
    }

    fn array_body(&mut self, a: &MetaArray) -> Result<(), GgufError> {
        self.u32(a.elem_type().id())?;
        self.u64(a.len() as u64)?;
        match a {
            MetaArray::U8(v) => self.put(v),
            MetaArray::I8(v) => self.numbers(v, i8::to_le_bytes),
            MetaArray::U16(v) => self.numbers(v, u16::to_le_bytes),
            MetaArray::I16(v) => self.numbers(v, i16::to_le_bytes),
            MetaArray::U32(v) => self.numbers(v, u32::to_le_bytes),
            MetaArray::I32(v) => self.numbers(v, i32::to_le_bytes),
            MetaArray::F32(v) => self.numbers(v, f32::to_le_bytes),
            MetaArray::U64(v) => self.numbers(v, u64::to_le_bytes),
            MetaArray::I64(v) => self.numbers(v, i64::to_le_bytes),
            MetaArray::F64(v) => self.numbers(v, f64::to_le_bytes),
            MetaArray::Bool(v) => self.numbers(v, |b| [u8::from(b)]),
            MetaArray::Str(v) => v.iter().try_for_each(|s| self.str(s)),
            MetaArray::Array(v) => v.iter().try_for_each(|inner| self.array_body(inner)),
        }
    }

    fn value(&mut self, v: &MetaValue) -> Result<(), GgufError> {
        self.u32(v.meta_type().id())?;
        match v {
            MetaValue::U8(x) => self.put(&[*x]),
            MetaValue::I8(x) => self.put(&x.to_le_bytes()),
            MetaValue::U16(x) => self.put(&x.to_le_bytes()),
            MetaValue::I16(x) => self.put(&x.to_le_bytes()),
            MetaValue::U32(x) => self.u32(*x),
            MetaValue::I32(x) => self.put(&x.to_le_bytes()),
            MetaValue::F32(x) => self.put(&x.to_le_bytes()),
            MetaValue::Bool(x) => self.put(&[u8::from(*x)]),
            MetaValue::Str(s) => self.str(s),
            MetaValue::Array(a) => self.array_body(a),
            MetaValue::U64(x) => self.u64(*x),
            MetaValue::I64(x) => self.put(&x.to_le_bytes()),
            MetaValue::F64(x) => self.put(&x.to_le_bytes()),
        }
    }
}

impl GgufWriter {
    /// An empty version-3 file with the default alignment (32).
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Metadata::new(),
            tensors: Vec::new(),
            names: HashMap::new(),
        }
    }

    /// Sets the version written (2 or 3; the two differ only in the version field). Default 3.
    ///
    /// # Errors
    /// [`GgufError::UnsupportedVersion`] for other versions.
    pub fn set_version(&mut self, version: u32) -> Result<(), GgufError> {
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion { version });
        }
        self.version = version;
        Ok(())
    }

    /// The alignment the file will use: `general.alignment` if added, else 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The metadata added so far.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Adds a metadata pair. Adding `general.alignment` (a power-of-two `U32`) sets the alignment.
    ///
    /// # Errors
    /// [`GgufError::DuplicateKey`], [`GgufError::ArrayTooDeep`] for arrays of arrays of arrays,
    /// [`GgufError::AlignmentType`] / [`GgufError::BadAlignment`] for a bad `general.alignment`.
    pub fn add(&mut self, key: impl Into<String>, value: MetaValue) -> Result<(), GgufError> {
        let key = key.into();
        if let MetaValue::Array(a) = &value {
            if a.too_deep() {
                return Err(GgufError::ArrayTooDeep { key, offset: 0 });
            }
        }
        if self.metadata.contains(&key) {
            return Err(GgufError::DuplicateKey { key, offset: 0 });
        }
        if key == ALIGNMENT_KEY {
            self.alignment = check_alignment(&value)?;
        }
        self.metadata.insert(key, value)
    }

    /// Adds a `U32` value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_u32(&mut self, key: impl Into<String>, v: u32) -> Result<(), GgufError> {
        self.add(key, MetaValue::U32(v))
    }

    /// Adds an `I32` value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_i32(&mut self, key: impl Into<String>, v: i32) -> Result<(), GgufError> {
        self.add(key, MetaValue::I32(v))
    }

    /// Adds a `U64` value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_u64(&mut self, key: impl Into<String>, v: u64) -> Result<(), GgufError> {
        self.add(key, MetaValue::U64(v))
    }

    /// Adds an `F32` value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_f32(&mut self, key: impl Into<String>, v: f32) -> Result<(), GgufError> {
        self.add(key, MetaValue::F32(v))
    }

    /// Adds a `BOOL` value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_bool(&mut self, key: impl Into<String>, v: bool) -> Result<(), GgufError> {
        self.add(key, MetaValue::Bool(v))
    }

    /// Adds a `STRING` value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_str(
        &mut self,
        key: impl Into<String>,
        v: impl Into<String>,
    ) -> Result<(), GgufError> {
        self.add(key, MetaValue::Str(v.into()))
    }

    /// Adds an array value.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_array(&mut self, key: impl Into<String>, v: MetaArray) -> Result<(), GgufError> {
        self.add(key, MetaValue::Array(v))
    }

    /// Adds an array of strings.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_str_array<S: AsRef<str>>(
        &mut self,
        key: impl Into<String>,
        v: impl IntoIterator<Item = S>,
    ) -> Result<(), GgufError> {
        self.add_array(key, MetaArray::Str(v.into_iter().collect::<StrArray>()))
    }

    /// Adds an array of `F32`.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_f32_array(&mut self, key: impl Into<String>, v: Vec<f32>) -> Result<(), GgufError> {
        self.add_array(key, MetaArray::F32(v))
    }

    /// Adds an array of `I32`.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_i32_array(&mut self, key: impl Into<String>, v: Vec<i32>) -> Result<(), GgufError> {
        self.add_array(key, MetaArray::I32(v))
    }

    /// Adds an array of `U32`.
    ///
    /// # Errors
    /// As [`GgufWriter::add`].
    pub fn add_u32_array(&mut self, key: impl Into<String>, v: Vec<u32>) -> Result<(), GgufError> {
        self.add_array(key, MetaArray::U32(v))
    }

    fn push_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Option<Vec<u8>>,
    ) -> Result<(), GgufError> {
        if self.names.contains_key(name) {
            return Err(GgufError::DuplicateTensor {
                name: name.to_string(),
                offset: 0,
            });
        }
        let bytes = tensor_bytes(name, dims, ty)?;
        if let Some(d) = &data {
            if d.len() as u64 != bytes {
                return Err(GgufError::DataSize {
                    tensor: name.to_string(),
                    expected: bytes,
                    got: d.len() as u64,
                });
            }
        }
        self.names.insert(name.to_string(), self.tensors.len());
        let info = TensorInfo {
            name: name.to_string(),
            dims: dims.to_vec(),
            ty,
            offset: 0,
            bytes,
        };
        self.tensors.push((info, data));
        Ok(())
    }

    /// Declares a tensor whose data will be streamed at write time (see
    /// [`GgufWriter::write_to_path_with`]). `dims` are in GGML order (`dims[0]` is the row).
    ///
    /// # Errors
    /// [`GgufError::DuplicateTensor`], and the shape errors: [`GgufError::BadDimCount`],
    /// [`GgufError::ZeroDim`], [`GgufError::TooManyElems`], [`GgufError::RowNotBlockMultiple`].
    pub fn add_tensor_info(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
    ) -> Result<(), GgufError> {
        self.push_tensor(name, dims, ty, None)
    }

    /// Adds a tensor with its data, which must be exactly the size the dims and type call for.
    ///
    /// # Errors
    /// As [`GgufWriter::add_tensor_info`], and [`GgufError::DataSize`] for data of the wrong length.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Vec<u8>>,
    ) -> Result<(), GgufError> {
        self.push_tensor(name, dims, ty, Some(data.into()))
    }

    /// The tensors added so far, with offsets RELATIVE to the data section (laid out in order, each
    /// aligned).
    pub fn tensor_infos(&self) -> Vec<TensorInfo> {
        let mut rel = 0u64;
        self.tensors
            .iter()
            .map(|(t, _)| {
                let mut t = t.clone();
                t.offset = rel;
                rel = align_up(rel + t.bytes, self.alignment);
                t
            })
            .collect()
    }

    /// Writes the header, metadata and tensor descriptions to `w` and returns a stream that takes
    /// the tensors' data in order.
    ///
    /// # Errors
    /// [`GgufError::Io`] when writing fails.
    pub fn start<W: Write>(&self, w: W) -> Result<GgufStream<W>, GgufError> {
        let mut out = Out { w, pos: 0 };
        out.put(&GGUF_MAGIC)?;
        out.u32(self.version)?;
        out.u64(self.tensors.len() as u64)?;
        out.u64(self.metadata.len() as u64)?;
        for (k, v) in self.metadata.iter() {
            out.str(k)?;
            out.value(v)?;
        }
        let mut infos = self.tensor_infos();
        for t in &infos {
            out.str(&t.name)?;
            out.u32(t.dims.len() as u32)?;
            for &d in &t.dims {
                out.u64(d)?;
            }
            out.u32(t.ty.id())?;
            out.u64(t.offset)?;
        }
        out.pad_to(self.alignment)?;
        let data_offset = out.pos;
        for t in &mut infos {
            t.offset += data_offset;
        }
        Ok(GgufStream {
            out,
            alignment: self.alignment,
            infos,
            cur: 0,
            done_in_cur: 0,
        })
    }

    /// Writes the whole file to `w`; every tensor must have been added with its data.
    /// Returns the bytes written.
    ///
    /// # Errors
    /// [`GgufError::WriterState`] when a tensor was declared without data, [`GgufError::Io`].
    pub fn write_to<W: Write>(&self, w: W) -> Result<u64, GgufError> {
        self.write_with(w, |i, _, s| self.write_stored(i, s))
            .map(|(_, n)| n)
    }

    /// Writes the whole file to `w`, calling `fill(index, info, stream)` for each tensor in order;
    /// `fill` must write exactly that tensor's bytes (in one or more
    /// [`GgufStream::write_chunk`] calls). `info.offset` is the absolute file offset.
    /// Returns the writer and the bytes written.
    ///
    /// # Errors
    /// Whatever `fill` returns, [`GgufError::DataSize`] when it writes too many or too few bytes,
    /// [`GgufError::Io`].
    pub fn write_with<W: Write, F>(&self, w: W, mut fill: F) -> Result<(W, u64), GgufError>
    where
        F: FnMut(usize, &TensorInfo, &mut GgufStream<W>) -> Result<(), GgufError>,
    {
        let mut s = self.start(w)?;
        for i in 0..self.tensors.len() {
            let info = s.infos[i].clone();
            fill(i, &info, &mut s)?;
            if s.cur > i + 1 {
                return Err(GgufError::WriterState(format!(
                    "the fill for tensor {i} (`{}`) also wrote the data of the tensors after it",
                    info.name
                )));
            }
            if s.cur != i + 1 {
                return Err(GgufError::DataSize {
                    tensor: info.name.clone(),
                    expected: info.bytes,
                    got: s.done_in_cur,
                });
            }
        }
        s.finish()
    }

    fn write_stored<W: Write>(&self, i: usize, s: &mut GgufStream<W>) -> Result<(), GgufError> {
        match self.tensors.get(i) {
            Some((_, Some(data))) => s.write_chunk(data),
            Some((t, None)) => Err(GgufError::WriterState(format!(
                "tensor `{}` was declared with add_tensor_info but no data was given; use \
                 write_to_path_with / write_with to stream it",
                t.name
            ))),
            None => Err(GgufError::WriterState(format!("no tensor {i}"))),
        }
    }

    /// Writes the whole file to `path` atomically (to `path.tmp`, then renamed); every tensor must
    /// have been added with its data. Returns the bytes written.
    ///
    /// # Errors
    /// As [`GgufWriter::write_to`], wrapped in [`GgufError::File`] naming `path`.
    pub fn write_to_path(&self, path: &Path) -> Result<u64, GgufError> {
        self.write_to_path_with(path, |i, _, s| self.write_stored(i, s))
    }

    /// Writes the whole file to `path` atomically (to `path.tmp`, then renamed), streaming each
    /// tensor's data through `fill` as in [`GgufWriter::write_with`]. Returns the bytes written.
    /// On error the temporary file is removed and `path` is left untouched.
    ///
    /// # Errors
    /// As [`GgufWriter::write_with`], wrapped in [`GgufError::File`] naming `path`.
    pub fn write_to_path_with<F>(&self, path: &Path, fill: F) -> Result<u64, GgufError>
    where
        F: FnMut(usize, &TensorInfo, &mut GgufStream<BufWriter<File>>) -> Result<(), GgufError>,
    {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let run = || -> Result<u64, GgufError> {
            let file = File::create(&tmp).map_err(|e| GgufError::io("creating", e))?;
            let (bw, n) = self.write_with(BufWriter::with_capacity(1 << 20, file), fill)?;
            let file = bw
                .into_inner()
                .map_err(|e| GgufError::io("flushing", e.into_error()))?;
            file.sync_all().map_err(|e| GgufError::io("syncing", e))?;
            drop(file);
            std::fs::rename(&tmp, path)
                .map_err(|e| GgufError::io("renaming the temporary file to", e))?;
            Ok(n)
        };
        run().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            e.in_file(path)
        })
    }
}

/// The data part of a file being written by [`GgufWriter::start`]: takes each tensor's bytes in
/// order and pads between them.
#[derive(Debug)]
pub struct GgufStream<W: Write> {
    out: Out<W>,
    alignment: u64,
    infos: Vec<TensorInfo>,
    cur: usize,
    done_in_cur: u64,
}

impl<W: Write> std::fmt::Debug for Out<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out").field("pos", &self.pos).finish()
    }
}

impl<W: Write> GgufStream<W> {
    /// The tensor whose data is expected next (absolute offset), or `None` when all are written.
    pub fn current(&self) -> Option<&TensorInfo> {
        self.infos.get(self.cur)
    }

    /// The bytes of the current tensor still to be written.
    pub fn remaining_in_current(&self) -> u64 {
        self.current().map_or(0, |t| t.bytes - self.done_in_cur)
    }

    /// The bytes written so far.
    pub fn position(&self) -> u64 {
        self.out.pos
    }

    /// Appends `chunk` to the current tensor's data; when the tensor is complete, pads to the
    /// alignment and moves to the next.
    ///
    /// # Errors
    /// [`GgufError::DataSize`] when `chunk` goes past the end of the current tensor,
    /// [`GgufError::WriterState`] when every tensor is already complete, [`GgufError::Io`].
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), GgufError> {
        let Some(t) = self.infos.get(self.cur) else {
            return Err(GgufError::WriterState(format!(
                "{} bytes of tensor data written after the last tensor",
                chunk.len()
            )));
        };
        let left = t.bytes - self.done_in_cur;
        if chunk.len() as u64 > left {
            return Err(GgufError::DataSize {
                tensor: t.name.clone(),
                expected: t.bytes,
                got: self.done_in_cur + chunk.len() as u64,
            });
        }
        self.out.put(chunk)?;
        self.done_in_cur += chunk.len() as u64;
        if self.done_in_cur == t.bytes {
            self.out.pad_to(self.alignment)?;
            self.cur += 1;
            self.done_in_cur = 0;
        }
        Ok(())
    }

    /// Writes the whole data of the current tensor.
    ///
    /// # Errors
    /// [`GgufError::DataSize`] unless `data` is exactly the current tensor's remaining size,
    /// [`GgufError::WriterState`] when every tensor is already complete, [`GgufError::Io`].
    pub fn write_tensor_data(&mut self, data: &[u8]) -> Result<(), GgufError> {
        if let Some(t) = self.current() {
            if data.len() as u64 != t.bytes - self.done_in_cur {
                return Err(GgufError::DataSize {
                    tensor: t.name.clone(),
                    expected: t.bytes,
                    got: self.done_in_cur + data.len() as u64,
                });
            }
        }
        self.write_chunk(data)
    }

    /// Checks every tensor was written, flushes, and returns the writer and the bytes written.
    ///
    /// # Errors
    /// [`GgufError::WriterState`] when a tensor is incomplete, [`GgufError::Io`].
    pub fn finish(mut self) -> Result<(W, u64), GgufError> {
        if let Some(t) = self.infos.get(self.cur) {
            return Err(GgufError::WriterState(format!(
                "finished with tensor `{}` ({} of {} bytes written) and {} more tensors missing",
                t.name,
                self.done_in_cur,
                t.bytes,
                self.infos.len() - self.cur - 1
            )));
        }
        self.out
            .w
            .flush()
            .map_err(|e| GgufError::io("flushing GGUF", e))?;
        Ok((self.out.w, self.out.pos))
    }
}
