//! KV arena memory. The arena is one allocation (in chunks) made by the device that exports it;
//! another device imports the same memory and reads it in place, and only the bookkeeping (the KV
//! broker's block tables) moves between them.
//!
//! The interface is [`KvExport`] (what an exporting device hands over: host pages, opaque fds or
//! dma-bufs, with the layout they were allocated for) and [`check_import`] (what every importing
//! device runs first: the layout it computed itself must hash equal to the exporter's, or the
//! start is refused with both layouts printed). This module also holds the CPU device's half:
//! page-aligned host memory that Vulkan can import with `VK_EXT_external_memory_host`.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::DeviceError;

/// Host pages are the unit of import for `VK_EXT_external_memory_host`.
pub const HOST_PAGE_BYTES: usize = 4096;

/// Where one layer's K or V tensor lies in the arena.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KvTensorPlace {
    pub chunk: usize,
    pub offset_bytes: u64,
    pub bytes: u64,
}

/// The placement of every layer's K and V tensors, one row of `row_stride_bytes` per cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvPlacement {
    pub chunk_bytes: Vec<u64>,
    pub k: Vec<KvTensorPlace>,
    pub v: Vec<KvTensorPlace>,
    pub row_stride_bytes: u64,
    pub n_cells: u64,
}

/// One page-aligned, zeroed host allocation.
struct HostChunk {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Drop for HostChunk {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly `layout` and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The KV arena in host memory.
///
/// Cells are written by the device thread that owns them (the KV broker hands ownership out by
/// message, and a cell is never owned twice), so the memory is shared without a lock; the
/// `unsafe` accessors state that contract.
pub struct HostKvMemory {
    chunks: Vec<HostChunk>,
    placement: KvPlacement,
    layout: Option<strata_kv::KvLayout>,
}

/// An exported KV arena: the memory of each chunk, as the importing API needs it, and the layout
/// it was allocated for.
#[derive(Debug)]
pub enum KvExport {
    /// Page-aligned host memory (`VK_EXT_external_memory_host`): base pointer and length of each
    /// chunk. Valid while the exporting [`HostKvMemory`] lives.
    Host { chunks: Vec<(usize, usize)>, layout: strata_kv::KvLayout },
    /// One opaque POSIX fd per chunk (`cuMemExportToShareableHandle`, `VK_KHR_external_memory_fd`).
    OpaqueFd { fds: Vec<std::os::fd::OwnedFd>, layout: strata_kv::KvLayout },
    /// One dma-buf fd per chunk (HIP on AMD, `VK_EXT_external_memory_dma_buf`).
    DmaBuf { fds: Vec<std::os::fd::OwnedFd>, layout: strata_kv::KvLayout },
}

impl KvExport {
    /// The layout the exporter allocated for.
    pub fn layout(&self) -> &strata_kv::KvLayout {
        match self {
            KvExport::Host { layout, .. } | KvExport::OpaqueFd { layout, .. } | KvExport::DmaBuf { layout, .. } => layout,
        }
    }

    /// Number of chunks exported.
    pub fn n_chunks(&self) -> usize {
        match self {
            KvExport::Host { chunks, .. } => chunks.len(),
            KvExport::OpaqueFd { fds, .. } | KvExport::DmaBuf { fds, .. } => fds.len(),
        }
    }
}

/// What an importing device checks before it touches exported memory: the layout it computed on
/// its own from the model and the configuration must equal the exporter's (compared by hash),
/// and every chunk must be there.
///
/// # Errors
/// [`DeviceError::LayoutMismatch`], naming both layouts' parameters.
pub fn check_import(mine: &strata_kv::KvLayout, export: &KvExport) -> Result<(), DeviceError> {
    mine.check_same(export.layout()).map_err(|e| DeviceError::LayoutMismatch(e.to_string()))?;
    if export.n_chunks() != mine.chunks.len() {
        return Err(DeviceError::LayoutMismatch(format!("{} chunks exported, the layout has {}", export.n_chunks(), mine.chunks.len())));
    }
    Ok(())
}

// SAFETY: the chunks are plain heap memory owned by this value; concurrent access to cells is
// governed by the arena's ownership rules, which the unsafe accessors make the caller uphold.
unsafe impl Send for HostKvMemory {}
// SAFETY: as above; shared references hand out raw pointers only through unsafe methods.
unsafe impl Sync for HostKvMemory {}

impl HostKvMemory {
    /// Allocates zeroed, page-aligned chunks for `placement`.
    ///
    /// # Errors
    /// [`DeviceError::OutOfMemory`] when an allocation fails, and [`DeviceError::BadBatch`] when a
    /// tensor of the placement lies outside its chunk.
    pub fn allocate(placement: KvPlacement) -> Result<Self, DeviceError> {
        for p in placement.k.iter().chain(&placement.v) {
            let size = placement.chunk_bytes.get(p.chunk).copied().unwrap_or(0);
            let needed = placement.row_stride_bytes.checked_mul(placement.n_cells);
            let end = p.offset_bytes.checked_add(p.bytes);
            if end.is_none_or(|e| e > size) || needed.is_none_or(|n| n > p.bytes) {
                return Err(DeviceError::BadBatch(format!("KV tensor placement {p:?} does not fit its chunk of {size} bytes")));
            }
        }
        let mut chunks = Vec::with_capacity(placement.chunk_bytes.len());
        for &bytes in &placement.chunk_bytes {
            let size = usize::try_from(bytes.max(1)).map_err(|_| oom(bytes))?;
            let layout = Layout::from_size_align(size, HOST_PAGE_BYTES).map_err(|_| oom(bytes))?;
            // SAFETY: `layout` has a nonzero size.
            let raw = unsafe { alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(raw).ok_or_else(|| oom(bytes))?;
            chunks.push(HostChunk { ptr, layout });
        }
        Ok(HostKvMemory { chunks, placement, layout: None })
    }

    /// Allocates host memory for `layout` (f16 K/V), remembering the layout for export.
    ///
    /// # Errors
    /// As [`HostKvMemory::allocate`], and a layout the CPU device cannot read.
    pub fn allocate_for(layout: &strata_kv::KvLayout) -> Result<Self, DeviceError> {
        let mut mem = Self::allocate(KvPlacement::from_layout(layout)?)?;
        mem.layout = Some(layout.clone());
        Ok(mem)
    }

    /// Exports the arena for another device to import in place (no copy is made).
    ///
    /// # Errors
    /// Memory allocated without a layout ([`HostKvMemory::allocate`]) cannot be checked by an
    /// importer, so it is not exported.
    pub fn export(&self) -> Result<KvExport, DeviceError> {
        let layout = self.layout.clone().ok_or_else(|| DeviceError::Unsupported { device: "cpu".into(), what: "exporting KV memory allocated without a layout".into() })?;
        let chunks = self.chunks.iter().map(|c| (c.ptr.as_ptr() as usize, c.layout.size())).collect();
        Ok(KvExport::Host { chunks, layout })
    }

    /// The placement this memory was allocated for.
    pub fn placement(&self) -> &KvPlacement {
        &self.placement
    }

    /// Total bytes allocated.
    pub fn total_bytes(&self) -> u64 {
        self.placement.chunk_bytes.iter().sum()
    }

    /// Base pointer and length of chunk `i`, for export to another device.
    pub fn chunk_raw(&self, i: usize) -> Option<(*mut u8, usize)> {
        self.chunks.get(i).map(|c| (c.ptr.as_ptr(), c.layout.size()))
    }

    /// Pointer to the row of `cell` in `layer`'s K (`v == false`) or V tensor.
    ///
    /// # Safety
    /// `layer` and `cell` must be in range (`cell < n_cells`). The caller may write through the
    /// pointer only for cells its device owns, and may read only cells no one is writing.
    pub unsafe fn row_ptr(&self, layer: usize, v: bool, cell: u64) -> *mut u8 {
        let p = if v { &self.placement.v[layer] } else { &self.placement.k[layer] };
        let base = self.chunks[p.chunk].ptr.as_ptr();
        // SAFETY: `allocate` checked that the tensor, n_cells rows of row_stride_bytes, lies inside
        // its chunk, and the caller guarantees cell < n_cells.
        unsafe { base.add((p.offset_bytes + cell * self.placement.row_stride_bytes) as usize) }
    }

    /// Copies the rows of `n_cells` cells from `from_cell` on to `to_cell` on, in every layer's
    /// K and V tensor (a prefix-cache copy of part of a block).
    ///
    /// # Errors
    /// [`DeviceError::BadBatch`] for cells out of range or overlapping ranges.
    ///
    /// # Safety
    /// No one may write the source cells or read or write the destination cells while the
    /// copy runs (the KV broker makes it for a block it has just given to a sequence that has
    /// not run yet, from a cached block, which is read-only).
    pub unsafe fn copy_cells(&self, from_cell: u64, to_cell: u64, n_cells: u64) -> Result<(), DeviceError> {
        let n = self.placement.n_cells;
        let in_range = |c: u64| c.checked_add(n_cells).is_some_and(|end| end <= n);
        // Evaluated only for ranges in the arena, so the sums cannot overflow.
        let overlap = || n_cells > 0 && from_cell < to_cell + n_cells && to_cell < from_cell + n_cells;
        if !in_range(from_cell) || !in_range(to_cell) || overlap() {
            return Err(DeviceError::BadBatch(format!("KV cell copy of {n_cells} cells from {from_cell} to {to_cell} (arena of {n} cells)")));
        }
        let bytes = (n_cells * self.placement.row_stride_bytes) as usize;
        for layer in 0..self.placement.k.len() {
            for v in [false, true] {
                // SAFETY: both ranges are in range (checked above, so `row_ptr`'s rows and the
                // `bytes` after them lie in the tensor) and do not overlap; the caller
                // guarantees no one else touches them now.
                unsafe { std::ptr::copy_nonoverlapping(self.row_ptr(layer, v, from_cell), self.row_ptr(layer, v, to_cell), bytes) };
            }
        }
        Ok(())
    }
}

fn oom(bytes: u64) -> DeviceError {
    DeviceError::OutOfMemory { device: "cpu".into(), bytes, what: "KV arena chunk".into() }
}

impl KvPlacement {
    /// The K and V placements of a KV arena layout (f16 layouts; int8 scale tensors are not read
    /// by the CPU device yet).
    ///
    /// # Errors
    /// [`DeviceError::Unsupported`] for a layout whose dtype the CPU device cannot read.
    pub fn from_layout(layout: &strata_kv::KvLayout) -> Result<KvPlacement, DeviceError> {
        use strata_kv::{KvDtype, KvTensorKind};
        if layout.params.shape.dtype != KvDtype::F16 {
            return Err(DeviceError::Unsupported { device: "cpu".into(), what: format!("a {} KV cache (only f16 for now)", layout.params.shape.dtype) });
        }
        let n_layers = layout.params.shape.n_layers;
        let place = |layer: u32, kind| {
            layout.place(layer, kind).map(|p| KvTensorPlace { chunk: p.chunk as usize, offset_bytes: p.offset_bytes, bytes: p.bytes }).ok_or_else(|| DeviceError::Unsupported { device: "cpu".into(), what: format!("KV layout lacks {kind:?} of layer {layer}") })
        };
        let k = (0..n_layers).map(|l| place(l, KvTensorKind::K)).collect::<Result<Vec<_>, _>>()?;
        let v = (0..n_layers).map(|l| place(l, KvTensorKind::V)).collect::<Result<Vec<_>, _>>()?;
        let row_stride_bytes = layout.place(0, KvTensorKind::K).map_or(0, |p| p.row_stride_bytes);
        Ok(KvPlacement { chunk_bytes: layout.chunks.clone(), k, v, row_stride_bytes, n_cells: layout.params.n_cells })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_kv::{KvDtype, KvLayout, KvShape, LayoutParams};

    fn layout(n_cells: u64, chunk_limit: u64) -> KvLayout {
        let shape = KvShape { n_layers: 3, n_kv_heads: 2, head_dim: 64, dtype: KvDtype::F16 };
        let mut p = LayoutParams::new(shape, n_cells);
        p.chunk_limit_bytes = chunk_limit;
        KvLayout::compute(&p).expect("layout")
    }

    #[test]
    fn an_export_is_the_same_memory_and_imports_only_into_the_same_layout() {
        let l = layout(256, 1 << 16);
        let mem = HostKvMemory::allocate_for(&l).expect("allocate");
        let export = mem.export().expect("export");
        assert!(l.chunks.len() > 1, "the small chunk limit splits the arena");
        // Zero copy: the exported chunks are the allocation itself.
        match &export {
            KvExport::Host { chunks, .. } => {
                for (i, &(ptr, len)) in chunks.iter().enumerate() {
                    let (mine, my_len) = mem.chunk_raw(i).expect("chunk");
                    assert_eq!((ptr, len), (mine as usize, my_len));
                }
            }
            other => panic!("unexpected export {other:?}"),
        }
        check_import(&l, &export).expect("same layout imports");
        // Cell copies move every layer's K and V rows, and refuse ranges out of the arena.
        // SAFETY: nothing else uses `mem` in this test.
        unsafe {
            for layer in 0..3 {
                *mem.row_ptr(layer, false, 5) = 10 + layer as u8;
                *mem.row_ptr(layer, true, 6) = 20 + layer as u8;
            }
            mem.copy_cells(4, 100, 3).expect("copy");
            for layer in 0..3 {
                assert_eq!((*mem.row_ptr(layer, false, 101), *mem.row_ptr(layer, true, 102)), (10 + layer as u8, 20 + layer as u8));
                assert_eq!(*mem.row_ptr(layer, false, 102), 0);
            }
            assert!(mem.copy_cells(250, 0, 7).is_err(), "past the arena's end");
            assert!(mem.copy_cells(0, 2, 4).is_err(), "overlapping");
        }
        let err = check_import(&layout(128, 1 << 16), &export).expect_err("another layout is refused");
        let msg = err.to_string();
        assert!(msg.contains("128") && msg.contains("256"), "the error names both layouts: {msg}");
    }
}
