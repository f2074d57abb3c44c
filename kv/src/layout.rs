//! The KV arena's memory layout: where every layer's K and V tensor lives, and a hash of it.
//!
//! The layout is a pure function of [`LayoutParams`]. The exporting device and the importing
//! device each compute it on their own and compare [`KvLayout::hash`]; a mismatch refuses to
//! start ([`KvLayout::check_same`]), with an error that prints both sides' parameters.
//!
//! # Rules
//!
//! * Tensors are placed in a fixed order: layer 0 K, layer 0 V, (layer 0 K-scale, layer 0
//!   V-scale for [`KvDtype::Int8`]), layer 1 K, ... .
//! * Every tensor starts on an `alignment` boundary (4 KiB by default) relative to the start of
//!   its chunk; chunks themselves are separate allocations (or separate Vulkan buffers over one
//!   allocation), each a multiple of `alignment` in size.
//! * Tensors are packed greedily: a tensor goes into the current chunk if it ends within
//!   `chunk_limit_bytes`, otherwise a new chunk is started. **A tensor is never split across
//!   chunks**: a tensor larger than the chunk limit is a [`LayoutError::TensorTooLarge`] error
//!   that says how many cells would fit. At the default 1 GiB limit that allows, for example,
//!   524,288 cells of a 8-head x 128-dim f16 model, far more than a single workstation serves;
//!   keeping a tensor in one buffer keeps the attention kernels' addressing to one base pointer
//!   plus `cell * row_stride`.
//! * A tensor holds `n_cells` rows; row `c` is cell `c`, `row_stride_bytes` long:
//!   `n_kv_heads * head_dim * element size` for K and V. Rows are contiguous, unpadded.
//! * [`KvDtype::Int8`] stores K and V as signed 8-bit values with one `f32` scale per
//!   (cell, head), symmetric (value = q * scale). The scales live in two side tensors per layer,
//!   [`KvTensorKind::KScale`] and [`KvTensorKind::VScale`], each `n_cells` rows of
//!   `n_kv_heads * 4` bytes, placed by the same rules as K and V.
//!
//! # Hash
//!
//! [`KvLayout::hash`] is SHA-256 over a canonical little-endian encoding of a version tag, every
//! parameter, every chunk size and every tensor placement (see `canonical_encoding`). It does
//! not depend on the machine, the compiler or the run; a test pins one golden value.

use std::fmt;

use sha2::{Digest, Sha256};

/// Default number of cells per block.
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
/// Default tensor alignment: 4 KiB.
pub const DEFAULT_ALIGNMENT: u64 = 4096;
/// Default chunk limit: 1 GiB (Vulkan drivers misread single buffers past about 4 GiB).
pub const DEFAULT_CHUNK_LIMIT: u64 = 1 << 30;

/// Version tag at the start of the canonical encoding; bump it whenever the rules change.
const LAYOUT_ENCODING_TAG: &[u8] = b"strata-kv-layout-v1";

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvDtype {
    /// IEEE half precision, 2 bytes per element.
    F16,
    /// Signed 8-bit, 1 byte per element, plus an `f32` scale per (cell, head) in side tensors.
    Int8,
}

impl KvDtype {
    /// Bytes per K or V element.
    pub fn elem_bytes(self) -> u64 {
        match self {
            KvDtype::F16 => 2,
            KvDtype::Int8 => 1,
        }
    }

    /// Whether the dtype needs the per-(cell, head) scale side tensors.
    pub fn has_scales(self) -> bool {
        matches!(self, KvDtype::Int8)
    }

    /// Stable code used in the canonical encoding (never reuse a code).
    fn code(self) -> u8 {
        match self {
            KvDtype::F16 => 1,
            KvDtype::Int8 => 2,
        }
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvDtype::F16 => "f16",
            KvDtype::Int8 => "int8",
        })
    }
}

/// The model dimensions that shape the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvShape {
    /// Number of transformer layers (each has one K and one V tensor).
    pub n_layers: u32,
    /// Number of KV heads (GQA: fewer than the query heads).
    pub n_kv_heads: u32,
    /// Head dimension, the same for K and V.
    pub head_dim: u32,
    /// Element type.
    pub dtype: KvDtype,
}

/// Everything the layout depends on. Two devices with equal params compute equal layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayoutParams {
    /// Model dimensions and dtype.
    pub shape: KvShape,
    /// Total number of cells (one cell holds one position of one sequence); a multiple of
    /// `block_size`.
    pub n_cells: u64,
    /// Cells per block.
    pub block_size: u32,
    /// Alignment of every tensor's start within its chunk; a power of two.
    pub alignment: u64,
    /// Largest chunk in bytes; a positive multiple of `alignment`.
    pub chunk_limit_bytes: u64,
}

impl LayoutParams {
    /// Params with the default block size (16), alignment (4 KiB) and chunk limit (1 GiB).
    pub fn new(shape: KvShape, n_cells: u64) -> Self {
        LayoutParams {
            shape,
            n_cells,
            block_size: DEFAULT_BLOCK_SIZE,
            alignment: DEFAULT_ALIGNMENT,
            chunk_limit_bytes: DEFAULT_CHUNK_LIMIT,
        }
    }

    /// Number of blocks (`n_cells / block_size`).
    pub fn n_blocks(&self) -> u64 {
        self.n_cells / u64::from(self.block_size.max(1))
    }

    fn validate(&self) -> Result<(), LayoutError> {
        let s = &self.shape;
        let bad = |reason: &str| {
            Err(LayoutError::InvalidParams {
                reason: reason.to_string(),
                params: *self,
            })
        };
        if s.n_layers == 0 || s.n_kv_heads == 0 || s.head_dim == 0 {
            return bad("n_layers, n_kv_heads and head_dim must all be positive");
        }
        if self.block_size == 0 {
            return bad("block_size must be positive");
        }
        if self.n_cells == 0 {
            return bad("n_cells must be positive");
        }
        if self.n_cells % u64::from(self.block_size) != 0 {
            return bad("n_cells must be a multiple of block_size");
        }
        if self.n_cells / u64::from(self.block_size) > u64::from(u32::MAX) {
            return bad("too many blocks: n_cells / block_size must fit in u32");
        }
        if !self.alignment.is_power_of_two() {
            return bad("alignment must be a power of two");
        }
        if self.chunk_limit_bytes == 0 || self.chunk_limit_bytes % self.alignment != 0 {
            return bad("chunk_limit_bytes must be a positive multiple of alignment");
        }
        Ok(())
    }
}

impl fmt::Display for LayoutParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n_layers={} n_kv_heads={} head_dim={} dtype={} n_cells={} block_size={} \
             alignment={} chunk_limit_bytes={}",
            self.shape.n_layers,
            self.shape.n_kv_heads,
            self.shape.head_dim,
            self.shape.dtype,
            self.n_cells,
            self.block_size,
            self.alignment,
            self.chunk_limit_bytes
        )
    }
}

/// Which tensor of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KvTensorKind {
    /// Keys.
    K,
    /// Values.
    V,
    /// Per-(cell, head) `f32` scales of K ([`KvDtype::Int8`] only).
    KScale,
    /// Per-(cell, head) `f32` scales of V ([`KvDtype::Int8`] only).
    VScale,
}

impl KvTensorKind {
    fn code(self) -> u8 {
        match self {
            KvTensorKind::K => 1,
            KvTensorKind::V => 2,
            KvTensorKind::KScale => 3,
            KvTensorKind::VScale => 4,
        }
    }

    /// Position of this kind within a layer's tensors, if the dtype has it.
    fn index_in_layer(self, dtype: KvDtype) -> Option<usize> {
        match (self, dtype.has_scales()) {
            (KvTensorKind::K, _) => Some(0),
            (KvTensorKind::V, _) => Some(1),
            (KvTensorKind::KScale, true) => Some(2),
            (KvTensorKind::VScale, true) => Some(3),
            _ => None,
        }
    }
}

/// Where one tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorPlace {
    /// Layer index.
    pub layer: u32,
    /// K, V or one of their scale tensors.
    pub kind: KvTensorKind,
    /// Index into [`KvLayout::chunks`].
    pub chunk: u32,
    /// Byte offset of row 0 within the chunk; a multiple of the alignment.
    pub offset_bytes: u64,
    /// Bytes of one cell's row.
    pub row_stride_bytes: u64,
    /// Bytes of the whole tensor (`n_cells * row_stride_bytes`).
    pub bytes: u64,
}

/// Address of one cell's row of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CellAddr {
    /// Chunk index.
    pub chunk: u32,
    /// Byte offset within the chunk.
    pub offset_bytes: u64,
    /// Bytes of the row.
    pub len_bytes: u64,
}

/// Errors computing or comparing layouts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A parameter is out of range.
    #[error("invalid KV layout parameters ({reason}): {params}")]
    InvalidParams {
        /// What is wrong.
        reason: String,
        /// The offending parameters.
        params: LayoutParams,
    },
    /// A single tensor is larger than the chunk limit (tensors are never split).
    #[error(
        "KV tensor layer {layer} {kind:?} needs {bytes} bytes, more than the chunk limit of \
         {chunk_limit_bytes} bytes; at most {max_cells} cells fit (params: {params})"
    )]
    TensorTooLarge {
        /// Layer of the tensor.
        layer: u32,
        /// Kind of the tensor.
        kind: KvTensorKind,
        /// Its size.
        bytes: u64,
        /// The chunk limit.
        chunk_limit_bytes: u64,
        /// The most cells (rounded down to whole blocks) for which every tensor fits.
        max_cells: u64,
        /// The parameters.
        params: LayoutParams,
    },
    /// Sizes overflow `u64`.
    #[error("KV layout size overflows u64: {params}")]
    Overflow {
        /// The parameters.
        params: LayoutParams,
    },
    /// Two independently computed layouts differ.
    #[error(
        "KV layout mismatch between devices; refusing to start.\n  ours:   {ours} hash={ours_hash}\n  \
         theirs: {theirs} hash={theirs_hash}\n  differing: {differing}"
    )]
    Mismatch {
        /// Our parameters.
        ours: Box<LayoutParams>,
        /// Our hash, hex.
        ours_hash: String,
        /// The other side's parameters.
        theirs: Box<LayoutParams>,
        /// The other side's hash, hex.
        theirs_hash: String,
        /// Names of the parameters that differ (or a note when only placements differ).
        differing: String,
    },
}

/// The computed layout: chunk sizes, tensor placements and the layout hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KvLayout {
    /// The parameters it was computed from.
    pub params: LayoutParams,
    /// Size of each chunk in bytes, each a multiple of the alignment and at most the limit.
    pub chunks: Vec<u64>,
    /// Every tensor, in placement order (layer-major, then K, V, KScale, VScale).
    pub tensors: Vec<TensorPlace>,
    /// SHA-256 over the canonical encoding.
    pub hash: [u8; 32],
}

fn align_up(x: u64, alignment: u64) -> Option<u64> {
    // alignment is a power of two (validated).
    x.checked_add(alignment - 1).map(|v| v & !(alignment - 1))
}

impl KvLayout {
    /// Compute the layout for `p`. Pure and deterministic.
    pub fn compute(p: &LayoutParams) -> Result<KvLayout, LayoutError> {
        p.validate()?;
        let overflow = || LayoutError::Overflow { params: *p };
        let s = &p.shape;
        let kinds: &[KvTensorKind] = if s.dtype.has_scales() {
            &[
                KvTensorKind::K,
                KvTensorKind::V,
                KvTensorKind::KScale,
                KvTensorKind::VScale,
            ]
        } else {
            &[KvTensorKind::K, KvTensorKind::V]
        };
        let kv_row = u64::from(s.n_kv_heads)
            .checked_mul(u64::from(s.head_dim))
            .and_then(|x| x.checked_mul(s.dtype.elem_bytes()))
            .ok_or_else(overflow)?;
        let scale_row = u64::from(s.n_kv_heads) * 4;

        let mut chunks: Vec<u64> = Vec::new();
        let mut tensors = Vec::with_capacity(s.n_layers as usize * kinds.len());
        // End (unaligned) of the last tensor in the current chunk; None before the first chunk.
        let mut cur_end: Option<u64> = None;
        for layer in 0..s.n_layers {
            for &kind in kinds {
                let row = match kind {
                    KvTensorKind::K | KvTensorKind::V => kv_row,
                    KvTensorKind::KScale | KvTensorKind::VScale => scale_row,
                };
                let bytes = p.n_cells.checked_mul(row).ok_or_else(overflow)?;
                if bytes > p.chunk_limit_bytes {
                    let bs = u64::from(p.block_size);
                    // The widest row of any tensor bounds the cells (a scale row is wider
                    // than an int8 K row when head_dim < 4).
                    let widest = if s.dtype.has_scales() {
                        kv_row.max(scale_row)
                    } else {
                        kv_row
                    };
                    let max_cells = p.chunk_limit_bytes / widest / bs * bs;
                    return Err(LayoutError::TensorTooLarge {
                        layer,
                        kind,
                        bytes,
                        chunk_limit_bytes: p.chunk_limit_bytes,
                        max_cells,
                        params: *p,
                    });
                }
                let start = match cur_end {
                    Some(end) => {
                        let start = align_up(end, p.alignment).ok_or_else(overflow)?;
                        // start <= limit because end <= limit and limit is aligned.
                        if bytes <= p.chunk_limit_bytes - start {
                            Some(start)
                        } else {
                            None
                        }
                    }
                    None => None,
                };
                let offset = match start {
                    Some(start) => start,
                    None => {
                        if let Some(end) = cur_end {
                            chunks.push(align_up(end, p.alignment).ok_or_else(overflow)?);
                        }
                        0
                    }
                };
                cur_end = Some(offset + bytes);
                let chunk = u32::try_from(chunks.len()).map_err(|_| overflow())?;
                tensors.push(TensorPlace {
                    layer,
                    kind,
                    chunk,
                    offset_bytes: offset,
                    row_stride_bytes: row,
                    bytes,
                });
            }
        }
        if let Some(end) = cur_end {
            chunks.push(align_up(end, p.alignment).ok_or_else(overflow)?);
        }
        let mut layout = KvLayout {
            params: *p,
            chunks,
            tensors,
            hash: [0; 32],
        };
        layout.hash = Sha256::digest(layout.canonical_encoding()).into();
        Ok(layout)
    }

    /// The canonical byte encoding the hash is taken over: the version tag, then every field as
    /// fixed-width little-endian integers (dtype and kind as one-byte codes), then the chunk
    /// count and sizes, then the tensor count and each placement's fields.
    pub fn canonical_encoding(&self) -> Vec<u8> {
        let p = &self.params;
        let mut e = Vec::with_capacity(128 + self.chunks.len() * 8 + self.tensors.len() * 34);
        e.extend_from_slice(LAYOUT_ENCODING_TAG);
        e.extend_from_slice(&p.shape.n_layers.to_le_bytes());
        e.extend_from_slice(&p.shape.n_kv_heads.to_le_bytes());
        e.extend_from_slice(&p.shape.head_dim.to_le_bytes());
        e.push(p.shape.dtype.code());
        e.extend_from_slice(&p.n_cells.to_le_bytes());
        e.extend_from_slice(&p.block_size.to_le_bytes());
        e.extend_from_slice(&p.alignment.to_le_bytes());
        e.extend_from_slice(&p.chunk_limit_bytes.to_le_bytes());
        e.extend_from_slice(&(self.chunks.len() as u64).to_le_bytes());
        for c in &self.chunks {
            e.extend_from_slice(&c.to_le_bytes());
        }
        e.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        for t in &self.tensors {
            e.extend_from_slice(&t.layer.to_le_bytes());
            e.push(t.kind.code());
            e.extend_from_slice(&t.chunk.to_le_bytes());
            e.extend_from_slice(&t.offset_bytes.to_le_bytes());
            e.extend_from_slice(&t.row_stride_bytes.to_le_bytes());
            e.extend_from_slice(&t.bytes.to_le_bytes());
        }
        e
    }

    /// The hash as lowercase hex.
    pub fn hash_hex(&self) -> String {
        self.hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Sum of all chunk sizes: the bytes to allocate.
    pub fn total_bytes(&self) -> u64 {
        self.chunks.iter().sum()
    }

    /// Number of blocks the layout holds.
    pub fn n_blocks(&self) -> u32 {
        // validated to fit in u32
        self.params.n_blocks() as u32
    }

    /// The placement of `(layer, kind)`, or `None` if the layer is out of range or the dtype
    /// has no such tensor (scales for f16).
    pub fn place(&self, layer: u32, kind: KvTensorKind) -> Option<&TensorPlace> {
        if layer >= self.params.shape.n_layers {
            return None;
        }
        let per_layer = if self.params.shape.dtype.has_scales() {
            4
        } else {
            2
        };
        let i = layer as usize * per_layer + kind.index_in_layer(self.params.shape.dtype)?;
        self.tensors.get(i)
    }

    /// Where cell `cell`'s row of tensor `(layer, kind)` lives, or `None` if any index is out
    /// of range.
    pub fn cell_addr(&self, layer: u32, kind: KvTensorKind, cell: u64) -> Option<CellAddr> {
        if cell >= self.params.n_cells {
            return None;
        }
        let t = self.place(layer, kind)?;
        Some(CellAddr {
            chunk: t.chunk,
            offset_bytes: t.offset_bytes + cell * t.row_stride_bytes,
            len_bytes: t.row_stride_bytes,
        })
    }

    /// Check that `other` (computed independently, e.g. on the importing device) is the same
    /// layout. On mismatch the error prints both sides' parameters and hashes and names the
    /// parameters that differ.
    pub fn check_same(&self, other: &KvLayout) -> Result<(), LayoutError> {
        if self.hash == other.hash && self == other {
            return Ok(());
        }
        let (a, b) = (&self.params, &other.params);
        let mut differing = Vec::new();
        let mut cmp = |name: &str, x: String, y: String| {
            if x != y {
                differing.push(format!("{name} ({x} vs {y})"));
            }
        };
        cmp(
            "n_layers",
            a.shape.n_layers.to_string(),
            b.shape.n_layers.to_string(),
        );
        cmp(
            "n_kv_heads",
            a.shape.n_kv_heads.to_string(),
            b.shape.n_kv_heads.to_string(),
        );
        cmp(
            "head_dim",
            a.shape.head_dim.to_string(),
            b.shape.head_dim.to_string(),
        );
        cmp(
            "dtype",
            a.shape.dtype.to_string(),
            b.shape.dtype.to_string(),
        );
        cmp("n_cells", a.n_cells.to_string(), b.n_cells.to_string());
        cmp(
            "block_size",
            a.block_size.to_string(),
            b.block_size.to_string(),
        );
        cmp(
            "alignment",
            a.alignment.to_string(),
            b.alignment.to_string(),
        );
        cmp(
            "chunk_limit_bytes",
            a.chunk_limit_bytes.to_string(),
            b.chunk_limit_bytes.to_string(),
        );
        let differing = if differing.is_empty() {
            "none of the parameters; the placements or hash differ (different layout rules?)"
                .to_string()
        } else {
            differing.join(", ")
        };
        Err(LayoutError::Mismatch {
            ours: Box::new(*a),
            ours_hash: self.hash_hex(),
            theirs: Box::new(*b),
            theirs_hash: other.hash_hex(),
            differing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smol() -> LayoutParams {
        LayoutParams::new(
            KvShape {
                n_layers: 30,
                n_kv_heads: 3,
                head_dim: 64,
                dtype: KvDtype::F16,
            },
            8192,
        )
    }

    #[test]
    fn smol_fits_one_chunk() {
        let l = KvLayout::compute(&smol()).unwrap();
        assert_eq!(l.chunks.len(), 1);
        assert_eq!(l.tensors.len(), 60);
        // 3*64*2 = 384 bytes per row, 8192 cells = 3 MiB per tensor, already aligned.
        assert_eq!(l.place(0, KvTensorKind::K).unwrap().bytes, 3 << 20);
        assert_eq!(l.total_bytes(), 60 * (3 << 20));
        assert!(l.place(0, KvTensorKind::KScale).is_none());
        assert!(l.place(30, KvTensorKind::K).is_none());
    }

    #[test]
    fn cell_addr_is_offset_plus_stride() {
        let l = KvLayout::compute(&smol()).unwrap();
        let t = *l.place(7, KvTensorKind::V).unwrap();
        let a = l.cell_addr(7, KvTensorKind::V, 100).unwrap();
        assert_eq!(a.offset_bytes, t.offset_bytes + 100 * 384);
        assert_eq!(a.len_bytes, 384);
        assert!(l.cell_addr(7, KvTensorKind::V, 8192).is_none());
    }
}
