//! Device memory: buffers reached by device address, a bump sub-allocator over chunks of at most
//! 1 GiB for data that lives as long as the plan (weights, activations), the staging upload, and
//! the KV arena's memory (allocated here and exported as opaque fds, or imported from host pages,
//! opaque fds or dma-bufs).

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use ash::vk;

use super::context::VulkanContext;
use super::vk_error;
use crate::kv_memory::KvExport;
use crate::DeviceError;

/// Largest chunk the sub-allocator asks the driver for (drivers misbehave past ~4 GiB in one
/// buffer, and NVIDIA's `maxMemoryAllocationSize` is just under 4 GiB).
pub const MAX_CHUNK_BYTES: u64 = 1 << 30;

/// How long a submission may run on a GPU before it is reported as a hung device.
pub const FENCE_TIMEOUT: Duration = Duration::from_secs(120);
/// The same on a device that runs on the CPU (lavapipe): one 512-token prompt step of the
/// default model takes minutes on two cores there, and a CPU does not hang as a GPU does.
pub const CPU_DEVICE_FENCE_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a submission may run on `ctx`'s device before a wait reports it as hung:
/// `STRATA_VULKAN_WAIT_TIMEOUT_MS` if set (read at each blocking wait, so a test can force a
/// timeout after its plan is built), else [`FENCE_TIMEOUT`] or, on a CPU device,
/// [`CPU_DEVICE_FENCE_TIMEOUT`].
pub fn fence_timeout(ctx: &VulkanContext) -> Duration {
    let knob = std::env::var("STRATA_VULKAN_WAIT_TIMEOUT_MS").ok().and_then(|v| v.parse::<u64>().ok()).map(Duration::from_millis);
    knob.unwrap_or(if ctx.info.is_cpu() { CPU_DEVICE_FENCE_TIMEOUT } else { FENCE_TIMEOUT })
}
/// How long a wait for a submission polls before it blocks.
const SPIN_WAIT: Duration = Duration::from_millis(20);

/// Where a buffer's memory came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Allocated by this device.
    Allocated,
    /// Host pages imported with `VK_EXT_external_memory_host`, at this address.
    HostPointer(usize),
    /// An opaque fd imported with `VK_KHR_external_memory_fd`.
    OpaqueFd,
    /// A dma-buf fd imported with `VK_EXT_external_memory_dma_buf`.
    DmaBuf,
}

/// Whether an import's fd is still the caller's after [`Buffer::bind`] returned `result`: the
/// driver takes an imported fd only when vkAllocateMemory succeeds, and a failure after that
/// frees the memory, closing the fd with it (closing it again could close an unrelated file).
fn fd_left_with_caller(result: &Result<Buffer, DeviceError>) -> bool {
    match result {
        Ok(_) => false,
        Err(DeviceError::OutOfMemory { .. }) => true,
        Err(DeviceError::Vulkan { call, .. }) => *call == "vkAllocateMemory",
        Err(_) => false,
    }
}

/// The size of a dma-buf in bytes: its end, found by seeking a duplicate of the fd (a dma-buf's
/// `fstat` size is not reliable on every kernel; `lseek(SEEK_END)` is the documented way).
fn dma_buf_bytes(fd: &OwnedFd) -> std::io::Result<u64> {
    use std::io::Seek;
    let mut file = std::fs::File::from(fd.try_clone()?);
    file.seek(std::io::SeekFrom::End(0))
}

/// A buffer with its own memory, usable as a storage buffer by address and as a copy source and
/// destination.
pub struct Buffer {
    ctx: Arc<VulkanContext>,
    pub(crate) buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) address: u64,
    mapped: Option<*mut u8>,
    pub(crate) origin: Origin,
}

// SAFETY: the handles are plain values; the mapped pointer is only dereferenced through `&mut self`
// (writes) or `&self` (reads of memory the device no longer writes), by the plan's one thread.
unsafe impl Send for Buffer {}

const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::INDIRECT_BUFFER.as_raw()
        | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS.as_raw(),
);

/// What kind of memory a new buffer wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Fast for the device; falls back to any memory.
    DeviceLocal,
    /// Mapped and coherent, for the host to write (step parameters, staging) and read (logits).
    HostVisible,
    /// Mapped and coherent, in device memory where the device offers such a type (resizable BAR),
    /// else as [`MemoryKind::HostVisible`]: small buffers the host writes once per step and every
    /// kernel reads, so that a kernel's read does not cross the bus.
    HostWriteDeviceRead,
    /// Mapped, coherent and cached on the host where the device offers such a type, else as
    /// [`MemoryKind::HostVisible`]: what the host reads back every step (logits). Uncached
    /// (write-combined) memory reads at a small fraction of the host's memory speed.
    HostRead,
    /// Device-local and exportable as an opaque fd.
    Exportable,
}

impl Buffer {
    /// Allocates a buffer of `size` bytes.
    ///
    /// # Errors
    /// Out of device memory, or no memory type of the kind.
    pub fn new(ctx: &Arc<VulkanContext>, size: u64, kind: MemoryKind, what: &str) -> Result<Buffer, DeviceError> {
        let name = ctx.name();
        let size = size.max(16);
        let handle_types = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle_types);
        let mut info = vk::BufferCreateInfo::default().size(size).usage(USAGE).sharing_mode(vk::SharingMode::EXCLUSIVE);
        if kind == MemoryKind::Exportable {
            info = info.push_next(&mut external);
        }
        // SAFETY: a valid device and create info.
        let buffer = unsafe { ctx.device.create_buffer(&info, None) }.map_err(|e| vk_error(&name, "vkCreateBuffer", e))?;
        // SAFETY: `buffer` was just created on this device.
        let req = unsafe { ctx.device.get_buffer_memory_requirements(buffer) };
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let (flags, fallback) = match kind {
            MemoryKind::DeviceLocal | MemoryKind::Exportable => (vk::MemoryPropertyFlags::DEVICE_LOCAL, Some(vk::MemoryPropertyFlags::empty())),
            MemoryKind::HostVisible => (host, None),
            MemoryKind::HostWriteDeviceRead => (host | vk::MemoryPropertyFlags::DEVICE_LOCAL, Some(host)),
            MemoryKind::HostRead => (host | vk::MemoryPropertyFlags::HOST_CACHED, Some(host)),
        };
        let Some(type_index) = ctx.memory_type(req.memory_type_bits, flags).or_else(|| fallback.and_then(|f| ctx.memory_type(req.memory_type_bits, f))) else {
            // SAFETY: the buffer is unused.
            unsafe { ctx.device.destroy_buffer(buffer, None) };
            return Err(DeviceError::Unsupported { device: name, what: format!("no memory type for {what} ({flags:?})") });
        };
        let mut alloc_flags = vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(handle_types);
        let mut alloc = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(type_index).push_next(&mut alloc_flags);
        if kind == MemoryKind::Exportable {
            alloc = alloc.push_next(&mut export);
        }
        Self::bind(ctx, buffer, &alloc, size, what, matches!(kind, MemoryKind::HostVisible | MemoryKind::HostWriteDeviceRead | MemoryKind::HostRead), Origin::Allocated)
    }

    fn bind(ctx: &Arc<VulkanContext>, buffer: vk::Buffer, alloc: &vk::MemoryAllocateInfo<'_>, size: u64, what: &str, map: bool, origin: Origin) -> Result<Buffer, DeviceError> {
        let name = ctx.name();
        // SAFETY: a valid allocate info whose chain outlives the call.
        let memory = match unsafe { ctx.device.allocate_memory(alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: the buffer is unused.
                unsafe { ctx.device.destroy_buffer(buffer, None) };
                return Err(match e {
                    vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => DeviceError::OutOfMemory { device: name, bytes: size, what: what.to_string() },
                    e => vk_error(&name, "vkAllocateMemory", e),
                });
            }
        };
        let mut b = Buffer { ctx: ctx.clone(), buffer, memory, size, address: 0, mapped: None, origin };
        // SAFETY: the memory was allocated for this buffer's requirements and is bound once.
        unsafe { ctx.device.bind_buffer_memory(buffer, memory, 0) }.map_err(|e| vk_error(&name, "vkBindBufferMemory", e))?;
        // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage and memory allocated with DEVICE_ADDRESS.
        b.address = unsafe { ctx.device.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer)) };
        if map {
            // SAFETY: host-visible memory, mapped once for its whole life.
            let p = unsafe { ctx.device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }.map_err(|e| vk_error(&name, "vkMapMemory", e))?;
            b.mapped = Some(p.cast());
        }
        Ok(b)
    }

    /// Imports `len` bytes of page-aligned host memory at `ptr` (`VK_EXT_external_memory_host`).
    ///
    /// # Safety
    /// The memory must stay allocated, and must not be freed, for as long as the returned buffer
    /// lives; the device reads and writes it directly.
    pub unsafe fn import_host(ctx: &Arc<VulkanContext>, ptr: *mut u8, len: u64, what: &str) -> Result<Buffer, DeviceError> {
        let name = ctx.name();
        let ext = ctx.host_import.as_ref().ok_or_else(|| DeviceError::Unsupported { device: name.clone(), what: "VK_EXT_external_memory_host (importing host memory)".into() })?;
        let align = ctx.info.min_imported_host_alignment.max(1);
        if !(ptr as u64).is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(DeviceError::Unsupported { device: name, what: format!("host memory at {ptr:p} of {len} bytes is not aligned to the {align} bytes the driver imports") });
        }
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the pointer is a live, aligned host allocation (the caller's contract).
        unsafe { (ext.fp().get_memory_host_pointer_properties_ext)(ctx.device.handle(), handle, ptr.cast(), &mut props) }.result().map_err(|e| vk_error(&name, "vkGetMemoryHostPointerPropertiesEXT", e))?;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default().size(len).usage(USAGE).sharing_mode(vk::SharingMode::EXCLUSIVE).push_next(&mut external);
        // SAFETY: a valid create info.
        let buffer = unsafe { ctx.device.create_buffer(&info, None) }.map_err(|e| vk_error(&name, "vkCreateBuffer", e))?;
        // SAFETY: just created.
        let req = unsafe { ctx.device.get_buffer_memory_requirements(buffer) };
        let bits = props.memory_type_bits & req.memory_type_bits;
        let Some(type_index) = ctx.memory_type(bits, vk::MemoryPropertyFlags::empty()) else {
            // SAFETY: unused.
            unsafe { ctx.device.destroy_buffer(buffer, None) };
            return Err(DeviceError::Unsupported { device: name, what: "no memory type can import this host memory".into() });
        };
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default().handle_type(handle).host_pointer(ptr.cast());
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(len).memory_type_index(type_index).push_next(&mut import).push_next(&mut flags);
        Self::bind(ctx, buffer, &alloc, len, what, false, Origin::HostPointer(ptr as usize))
    }

    /// Imports memory another device (or another Vulkan context) exported as an opaque fd.
    ///
    /// # Errors
    /// No `VK_KHR_external_memory_fd`, or the driver refuses the fd.
    pub fn import_opaque_fd(ctx: &Arc<VulkanContext>, fd: OwnedFd, size: u64, what: &str) -> Result<Buffer, DeviceError> {
        if ctx.memory_fd.is_none() {
            return Err(DeviceError::Unsupported { device: ctx.name(), what: "VK_KHR_external_memory_fd (importing an opaque fd)".into() });
        }
        Self::import_fd(ctx, fd, size, what, vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD, Origin::OpaqueFd, |req| {
            ctx.memory_type(req.memory_type_bits, vk::MemoryPropertyFlags::DEVICE_LOCAL).ok_or_else(|| "no device-local memory type to import into".to_string())
        })
    }

    /// Imports `size` bytes of a dma-buf (HIP's export on AMD) with
    /// `VK_EXT_external_memory_dma_buf`. On success the driver owns the fd; on failure it is
    /// closed.
    ///
    /// # Errors
    /// A dma-buf smaller than `size` (checked before the driver sees it: an import past the end
    /// of the buffer is undefined behaviour in the driver), no `VK_EXT_external_memory_dma_buf`,
    /// no memory type that can hold it, or the driver refusing the fd.
    pub fn import_dma_buf(ctx: &Arc<VulkanContext>, fd: OwnedFd, size: u64, what: &str) -> Result<Buffer, DeviceError> {
        let name = ctx.name();
        let fd_bytes = dma_buf_bytes(&fd).map_err(|e| DeviceError::Unsupported { device: name.clone(), what: format!("{what}: the dma-buf's size cannot be read ({e})") })?;
        if fd_bytes < size {
            return Err(DeviceError::LayoutMismatch(format!("{what}: the dma-buf holds {fd_bytes} bytes, the layout's chunk {size}")));
        }
        let ext = match (&ctx.memory_fd, ctx.info.has(super::context::EXT_EXTERNAL_MEMORY_DMA_BUF)) {
            (Some(ext), true) => ext,
            _ => return Err(DeviceError::Unsupported { device: name, what: "VK_EXT_external_memory_dma_buf (importing a dma-buf)".into() }),
        };
        let handle = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
        let mut props = vk::MemoryFdPropertiesKHR::default();
        // SAFETY: a live fd (still ours) of the handle type this query is for.
        unsafe { ext.get_memory_fd_properties(handle, fd.as_raw_fd(), &mut props) }.map_err(|e| vk_error(&name, "vkGetMemoryFdPropertiesKHR (dma-buf)", e))?;
        Self::import_fd(ctx, fd, size, what, handle, Origin::DmaBuf, |req| {
            let bits = props.memory_type_bits & req.memory_type_bits;
            let type_index = ctx.memory_type(bits, vk::MemoryPropertyFlags::DEVICE_LOCAL).or_else(|| ctx.memory_type(bits, vk::MemoryPropertyFlags::empty()));
            type_index.filter(|_| req.size <= fd_bytes).ok_or_else(|| {
                format!("{what}: no memory type imports this dma-buf of {fd_bytes} bytes for a buffer needing {} (types {:#x} of the fd, {:#x} of the buffer)", req.size, props.memory_type_bits, req.memory_type_bits)
            })
        })
    }

    /// The import both fd kinds share: a buffer of `size` bytes for `handle`, memory of the type
    /// `memory_type` picks for its requirements (or the reason none will do), the fd handed to
    /// the driver, and the fd closed on every failure that leaves it ours.
    fn import_fd(ctx: &Arc<VulkanContext>, fd: OwnedFd, size: u64, what: &str, handle: vk::ExternalMemoryHandleTypeFlags, origin: Origin, memory_type: impl FnOnce(&vk::MemoryRequirements) -> Result<u32, String>) -> Result<Buffer, DeviceError> {
        let name = ctx.name();
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default().size(size).usage(USAGE).sharing_mode(vk::SharingMode::EXCLUSIVE).push_next(&mut external);
        // SAFETY: a valid create info.
        let buffer = unsafe { ctx.device.create_buffer(&info, None) }.map_err(|e| vk_error(&name, "vkCreateBuffer", e))?;
        // SAFETY: just created.
        let req = unsafe { ctx.device.get_buffer_memory_requirements(buffer) };
        let type_index = match memory_type(&req) {
            Ok(t) => t,
            Err(why) => {
                // SAFETY: unused.
                unsafe { ctx.device.destroy_buffer(buffer, None) };
                return Err(DeviceError::Unsupported { device: name, what: why });
            }
        };
        let raw = fd.into_raw_fd();
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(handle).fd(raw);
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(req.size.max(size)).memory_type_index(type_index).push_next(&mut import).push_next(&mut flags);
        let result = Self::bind(ctx, buffer, &alloc, size, what, false, origin);
        if fd_left_with_caller(&result) {
            // SAFETY: a failed vkAllocateMemory leaves the fd with us; close it.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        result
    }

    /// Exports the buffer's memory as an opaque fd (memory allocated as [`MemoryKind::Exportable`]).
    ///
    /// # Errors
    /// No `VK_KHR_external_memory_fd`, or memory that was not allocated exportable.
    pub fn export_opaque_fd(&self) -> Result<OwnedFd, DeviceError> {
        let name = self.ctx.name();
        let ext = self.ctx.memory_fd.as_ref().ok_or_else(|| DeviceError::Unsupported { device: name.clone(), what: "VK_KHR_external_memory_fd (exporting an opaque fd)".into() })?;
        let info = vk::MemoryGetFdInfoKHR::default().memory(self.memory).handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        // SAFETY: live memory of this device.
        let fd = unsafe { ext.get_memory_fd(&info) }.map_err(|e| vk_error(&name, "vkGetMemoryFdKHR", e))?;
        // SAFETY: vkGetMemoryFdKHR returns a new fd the caller owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The mapped bytes of a host-visible buffer.
    pub fn mapped_mut(&mut self) -> Option<&mut [u8]> {
        // SAFETY: mapped for `size` bytes for the buffer's whole life; `&mut self` excludes other
        // host access, and callers write only while no submission uses the buffer.
        self.mapped.map(|p| unsafe { std::slice::from_raw_parts_mut(p, self.size as usize) })
    }

    /// The mapped bytes of a host-visible buffer, for reading.
    pub fn mapped(&self) -> Option<&[u8]> {
        // SAFETY: as above; read after the submission that wrote it has completed.
        self.mapped.map(|p| unsafe { std::slice::from_raw_parts(p, self.size as usize) })
    }

    /// The device address.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Where the memory came from.
    pub fn origin(&self) -> Origin {
        self.origin
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: owners drop buffers only after the submissions using them completed.
        unsafe {
            if self.mapped.is_some() {
                self.ctx.device.unmap_memory(self.memory);
            }
            self.ctx.device.destroy_buffer(self.buffer, None);
            self.ctx.device.free_memory(self.memory, None);
        }
    }
}

/// A place in a [`DeviceArena`].
#[derive(Clone, Copy, Debug)]
pub struct Slice {
    pub chunk: usize,
    pub offset: u64,
    pub bytes: u64,
    pub address: u64,
}

/// A bump sub-allocator over device-local chunks, for data that lives as long as its owner.
pub struct DeviceArena {
    ctx: Arc<VulkanContext>,
    pub(crate) chunks: Vec<Buffer>,
    used: u64,
    chunk_bytes: u64,
    what: &'static str,
}

impl DeviceArena {
    /// An empty arena; chunks are at most [`MAX_CHUNK_BYTES`] and the driver's limit.
    pub fn new(ctx: &Arc<VulkanContext>, what: &'static str) -> DeviceArena {
        let limit = ctx.info.max_allocation_bytes.min(ctx.info.max_storage_buffer_range).min(MAX_CHUNK_BYTES);
        DeviceArena { ctx: ctx.clone(), chunks: Vec::new(), used: 0, chunk_bytes: limit.max(1 << 20), what }
    }

    /// Bytes allocated from the driver.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.size).sum()
    }

    /// Reserves `bytes` aligned to 256.
    ///
    /// # Errors
    /// A request larger than one chunk, or out of device memory.
    pub fn alloc(&mut self, bytes: u64) -> Result<Slice, DeviceError> {
        let bytes = bytes.max(16);
        if bytes > self.chunk_bytes {
            return Err(DeviceError::Unsupported { device: self.ctx.name(), what: format!("one {} tensor of {bytes} bytes exceeds the {}-byte chunk limit", self.what, self.chunk_bytes) });
        }
        let start = self.used.next_multiple_of(256);
        let fits = self.chunks.last().is_some_and(|c| start + bytes <= c.size);
        if !fits {
            self.chunks.push(Buffer::new(&self.ctx, self.chunk_bytes, MemoryKind::DeviceLocal, self.what)?);
            self.used = 0;
            return self.alloc(bytes);
        }
        self.used = start + bytes;
        let chunk = self.chunks.len() - 1;
        Ok(Slice { chunk, offset: start, bytes, address: self.chunks[chunk].address + start })
    }

    /// Allocates every size in `sizes` up front, sizing the last chunk to fit rather than taking a
    /// whole chunk for a little data.
    ///
    /// # Errors
    /// As [`DeviceArena::alloc`].
    pub fn alloc_all(&mut self, sizes: &[u64]) -> Result<Vec<Slice>, DeviceError> {
        // Pack greedily into chunks of at most chunk_bytes, then allocate each chunk exactly.
        let mut plan: Vec<(usize, u64)> = Vec::with_capacity(sizes.len());
        let mut chunk_sizes: Vec<u64> = Vec::new();
        let mut used = u64::MAX;
        for &s in sizes {
            let s = s.max(16);
            if s > self.chunk_bytes {
                return Err(DeviceError::Unsupported { device: self.ctx.name(), what: format!("one {} tensor of {s} bytes exceeds the {}-byte chunk limit", self.what, self.chunk_bytes) });
            }
            let start = if used == u64::MAX { u64::MAX } else { used.next_multiple_of(256) };
            if start == u64::MAX || start + s > self.chunk_bytes {
                chunk_sizes.push(0);
                used = 0;
            }
            let start = used.next_multiple_of(256);
            plan.push((chunk_sizes.len() - 1, start));
            used = start + s;
            *chunk_sizes.last_mut().expect("a chunk was pushed") = used;
        }
        let first = self.chunks.len();
        for &bytes in &chunk_sizes {
            self.chunks.push(Buffer::new(&self.ctx, bytes, MemoryKind::DeviceLocal, self.what)?);
        }
        self.used = u64::MAX / 2; // the next `alloc` starts a new chunk
        Ok(plan
            .iter()
            .zip(sizes)
            .map(|(&(c, offset), &bytes)| {
                let chunk = first + c;
                Slice { chunk, offset, bytes, address: self.chunks[chunk].address + offset }
            })
            .collect())
    }

    /// The buffer of a slice's chunk.
    pub fn buffer(&self, s: &Slice) -> vk::Buffer {
        self.chunks[s.chunk].buffer
    }
}

/// A command pool, one command buffer and a timeline semaphore: for uploads and one-off work.
pub struct OneShot {
    ctx: Arc<VulkanContext>,
    pool: vk::CommandPool,
    cb: vk::CommandBuffer,
    timeline: Timeline,
}

impl OneShot {
    /// # Errors
    /// A Vulkan failure creating the pool, buffer or semaphore.
    pub fn new(ctx: &Arc<VulkanContext>) -> Result<OneShot, DeviceError> {
        let name = ctx.name();
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(ctx.queue_family).flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid device and info.
        let pool = unsafe { ctx.device.create_command_pool(&info, None) }.map_err(|e| vk_error(&name, "vkCreateCommandPool", e))?;
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(pool).level(vk::CommandBufferLevel::PRIMARY).command_buffer_count(1);
        // SAFETY: the pool was just created.
        let cb = unsafe { ctx.device.allocate_command_buffers(&alloc) }.map_err(|e| vk_error(&name, "vkAllocateCommandBuffers", e))?[0];
        Ok(OneShot { ctx: ctx.clone(), pool, cb, timeline: Timeline::new(ctx)? })
    }

    /// A one-shot whose submissions a workgroup timeline counts as steps, as a plan's
    /// (`STRATA_VULKAN_TIMELINE`; its test records a kernel through one).
    ///
    /// # Errors
    /// As [`OneShot::new`].
    pub fn counted_as_steps(ctx: &Arc<VulkanContext>) -> Result<OneShot, DeviceError> {
        let mut oneshot = OneShot::new(ctx)?;
        oneshot.timeline.timeline_steps = true;
        Ok(oneshot)
    }

    /// Records with `record`, submits, and waits.
    ///
    /// # Errors
    /// A Vulkan failure, a lost device, or a submission that runs past [`FENCE_TIMEOUT`].
    pub fn run(&mut self, record: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<(), DeviceError> {
        let name = self.ctx.name();
        let d = &self.ctx.device;
        // SAFETY: the command buffer is not in use (every run waits for its submission).
        unsafe {
            d.reset_command_buffer(self.cb, vk::CommandBufferResetFlags::empty()).map_err(|e| vk_error(&name, "vkResetCommandBuffer", e))?;
            d.begin_command_buffer(self.cb, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)).map_err(|e| vk_error(&name, "vkBeginCommandBuffer", e))?;
        }
        record(d, self.cb);
        // SAFETY: recording began above.
        unsafe { d.end_command_buffer(self.cb) }.map_err(|e| vk_error(&name, "vkEndCommandBuffer", e))?;
        self.timeline.submit_and_wait(self.cb)
    }
}

/// A timeline semaphore: each submission signals the next value, and the host waits for it.
pub struct Timeline {
    ctx: Arc<VulkanContext>,
    semaphore: vk::Semaphore,
    value: u64,
    /// Poll the semaphore before blocking on it (`STRATA_VULKAN_WAIT=block` turns it off).
    spin: bool,
    /// Whether its submissions are the ones a workgroup timeline counts and records (a plan's
    /// steps, not uploads).
    timeline_steps: bool,
    /// Whether a wait ran out of time: a submission may still be pending that no caller waits
    /// for, so the next submission and the drop wait for it first (its command buffer and the
    /// memory it uses must outlive it).
    timed_out: std::cell::Cell<bool>,
}

impl Timeline {
    /// # Errors
    /// A Vulkan failure creating the semaphore.
    pub fn new(ctx: &Arc<VulkanContext>) -> Result<Timeline, DeviceError> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: valid device (timelineSemaphore enabled) and create info.
        let semaphore = unsafe { ctx.device.create_semaphore(&info, None) }.map_err(|e| vk_error(&ctx.name(), "vkCreateSemaphore", e))?;
        let spin = !ctx.info.is_cpu() && std::env::var("STRATA_VULKAN_WAIT").as_deref() != Ok("block");
        Ok(Timeline { ctx: ctx.clone(), semaphore, value: 0, spin, timeline_steps: false, timed_out: std::cell::Cell::new(false) })
    }

    /// A timeline whose submissions a workgroup timeline (`STRATA_VULKAN_TIMELINE`) counts and
    /// may record: a plan's steps.
    ///
    /// # Errors
    /// As [`Timeline::new`].
    pub fn for_steps(ctx: &Arc<VulkanContext>) -> Result<Timeline, DeviceError> {
        let mut timeline = Timeline::new(ctx)?;
        timeline.timeline_steps = true;
        Ok(timeline)
    }

    fn workgroup_timeline(&self) -> Option<&crate::vulkan::timeline::WorkgroupTimeline> {
        self.ctx.workgroup_timeline.as_ref().filter(|_| self.timeline_steps)
    }

    /// Submits one recorded command buffer that signals the next value, and waits for that value.
    ///
    /// # Errors
    /// A Vulkan failure, a lost device, or a submission that runs past [`fence_timeout`].
    pub fn submit_and_wait(&mut self, cb: vk::CommandBuffer) -> Result<(), DeviceError> {
        let target = self.submit(cb)?;
        self.wait(target)
    }

    /// Submits one recorded command buffer that signals the next value, and returns that value
    /// without waiting: the caller must [`Timeline::wait`] for it (or a later value) before the
    /// command buffer is submitted again, before anything it uses is freed, and before the
    /// timeline is dropped.
    ///
    /// # Errors
    /// A Vulkan failure submitting it (nothing is then pending), or an earlier submission whose
    /// wait ran out of time and that is still running (nothing is submitted).
    pub fn submit(&mut self, cb: vk::CommandBuffer) -> Result<u64, DeviceError> {
        if self.timed_out.get() {
            // The caller's command buffer may be that very submission's: it must finish first.
            self.wait_for(self.value)?;
            self.timed_out.set(false);
        }
        let recorded = match self.workgroup_timeline() {
            Some(t) if t.records_next() => {
                // The recorded submission runs alone: every earlier one has completed.
                self.wait(self.value)?;
                t.arm();
                true
            }
            _ => false,
        };
        let ctx = &self.ctx;
        let target = self.value + 1;
        let cbs = [cb];
        let signals = [self.semaphore];
        let values = [target];
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let submit = vk::SubmitInfo::default().command_buffers(&cbs).signal_semaphores(&signals).push_next(&mut timeline);
        // SAFETY: `cb` is fully recorded and not pending (the caller's contract); the
        // semaphore's value only grows.
        unsafe { ctx.device.queue_submit(ctx.queue, &[submit], vk::Fence::null()) }.map_err(|e| vk_error(&ctx.name(), "vkQueueSubmit", e))?;
        self.value = target;
        if let Some(t) = self.workgroup_timeline() {
            t.submitted(recorded, self.semaphore, target);
        }
        Ok(target)
    }

    /// The value the last submission signals (0 before any).
    pub fn last_submitted(&self) -> u64 {
        self.value
    }

    /// Waits until the semaphore reaches `target` (a value a submission signals).
    ///
    /// # Errors
    /// A Vulkan failure, a lost device, or a wait that runs past [`fence_timeout`] (the
    /// submission then stays pending: the next [`Timeline::submit`] and the drop wait for it).
    pub fn wait(&self, target: u64) -> Result<(), DeviceError> {
        self.wait_for(target)?;
        if let Some(t) = self.workgroup_timeline() {
            t.completed(self.semaphore, target);
        }
        Ok(())
    }

    fn wait_for(&self, target: u64) -> Result<(), DeviceError> {
        let ctx = &self.ctx;
        let name = ctx.name();
        // A GPU's short steps (one decoded token: a few ms) are polled for a while: a blocking
        // wait adds the thread's wake-up latency to every token. Not on a CPU device (lavapipe),
        // whose own threads need the cores.
        if self.spin {
            let start = std::time::Instant::now();
            while start.elapsed() < SPIN_WAIT {
                // SAFETY: the semaphore belongs to this device.
                let reached = unsafe { ctx.device.get_semaphore_counter_value(self.semaphore) }.map_err(|e| vk_error(&name, "vkGetSemaphoreCounterValue", e))?;
                if reached >= target {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        let timeout = fence_timeout(ctx);
        match self.block_until(target, u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)) {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => {
                self.timed_out.set(true);
                Err(DeviceError::Unsupported { device: name, what: format!("a submission ran longer than {:.1} s (hung device? STRATA_VULKAN_WAIT_TIMEOUT_MS sets the limit)", timeout.as_secs_f64()) })
            }
            Err(e) => Err(vk_error(&name, "vkWaitSemaphores", e)),
        }
    }

    /// Blocks, without a time limit, until every submission has finished, if a wait ran out of
    /// time (otherwise each was waited for): what an owner calls before it frees what they use.
    /// A device lost ends the wait (the driver signals nothing more).
    pub fn drain(&self) {
        if !self.timed_out.get() {
            return;
        }
        if let Err(e) = self.block_until(self.value, u64::MAX) {
            tracing::error!(device = %self.ctx.name(), error = ?e, "waiting for a timed-out submission before freeing its memory");
        }
        self.timed_out.set(false);
    }

    /// Blocks until the semaphore reaches `target` or `timeout_ns` pass.
    fn block_until(&self, target: u64, timeout_ns: u64) -> ash::prelude::VkResult<()> {
        let signals = [self.semaphore];
        let values = [target];
        let wait = vk::SemaphoreWaitInfo::default().semaphores(&signals).values(&values);
        // SAFETY: the semaphore belongs to this device.
        unsafe { self.ctx.device.wait_semaphores(&wait, timeout_ns) }
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.drain();
        // SAFETY: every submission that signals it has finished (each was waited for, or
        // drained just above).
        unsafe { self.ctx.device.destroy_semaphore(self.semaphore, None) };
    }
}

impl Drop for OneShot {
    fn drop(&mut self) {
        self.timeline.drain();
        // SAFETY: every submission has finished (waited for, or drained just above).
        unsafe {
            self.ctx.device.destroy_command_pool(self.pool, None);
        }
    }
}

/// Uploads bytes to device memory through one reusable host-visible staging buffer.
pub struct Uploader {
    staging: Buffer,
    used: u64,
    pending: Vec<(u64, vk::Buffer, u64, u64)>,
    oneshot: OneShot,
    pub uploaded_bytes: u64,
}

impl Uploader {
    /// # Errors
    /// Out of memory for the staging buffer.
    pub fn new(ctx: &Arc<VulkanContext>, staging_bytes: u64) -> Result<Uploader, DeviceError> {
        Ok(Uploader { staging: Buffer::new(ctx, staging_bytes, MemoryKind::HostVisible, "upload staging")?, used: 0, pending: Vec::new(), oneshot: OneShot::new(ctx)?, uploaded_bytes: 0 })
    }

    /// Copies `data` to `dst` at `offset` (after [`Uploader::flush`] at the latest). `fill` may
    /// write the bytes straight into staging memory: it is called with a slice of `len` bytes.
    ///
    /// # Errors
    /// A failed flush.
    pub fn upload_with(&mut self, dst: vk::Buffer, offset: u64, len: u64, fill: impl FnOnce(&mut [u8])) -> Result<(), DeviceError> {
        let cap = self.staging.size;
        let mut done = 0u64;
        // Data larger than the staging buffer is produced whole once, then copied in pieces.
        if len > cap {
            let mut tmp = vec![0u8; len as usize];
            fill(&mut tmp);
            while done < len {
                let n = (len - done).min(cap);
                if self.used + n > cap {
                    self.flush()?;
                }
                let at = self.used;
                let staging = self.staging.mapped_mut().expect("staging is mapped");
                staging[at as usize..(at + n) as usize].copy_from_slice(&tmp[done as usize..(done + n) as usize]);
                self.pending.push((at, dst, offset + done, n));
                self.used += n.next_multiple_of(16);
                done += n;
            }
        } else {
            if self.used + len > cap {
                self.flush()?;
            }
            let at = self.used;
            let staging = self.staging.mapped_mut().expect("staging is mapped");
            fill(&mut staging[at as usize..(at + len) as usize]);
            self.pending.push((at, dst, offset, len));
            self.used += len.next_multiple_of(16);
        }
        self.uploaded_bytes += len;
        Ok(())
    }

    /// Copies `data` to `dst` at `offset`.
    ///
    /// # Errors
    /// A failed flush.
    pub fn upload(&mut self, dst: vk::Buffer, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.upload_with(dst, offset, data.len() as u64, |s| s.copy_from_slice(data))
    }

    /// Runs the pending copies and waits for them.
    ///
    /// # Errors
    /// A Vulkan failure.
    pub fn flush(&mut self) -> Result<(), DeviceError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let src = self.staging.buffer;
        let pending = std::mem::take(&mut self.pending);
        self.oneshot.run(|d, cb| {
            for &(src_off, dst, dst_off, len) in &pending {
                let region = vk::BufferCopy { src_offset: src_off, dst_offset: dst_off, size: len };
                // SAFETY: both buffers are live and the regions lie inside them.
                unsafe { d.cmd_copy_buffer(cb, src, dst, &[region]) };
            }
        })?;
        self.used = 0;
        Ok(())
    }
}

/// The KV arena's memory as Vulkan sees it: one buffer per chunk of the layout.
pub struct VulkanKvMemory {
    pub(crate) chunks: Vec<Buffer>,
    pub(crate) layout: strata_kv::KvLayout,
}

impl VulkanKvMemory {
    /// Allocates the arena in device memory (exportable as opaque fds where the driver can).
    ///
    /// # Errors
    /// Out of device memory.
    pub fn allocate(ctx: &Arc<VulkanContext>, layout: &strata_kv::KvLayout) -> Result<VulkanKvMemory, DeviceError> {
        let kind = if ctx.memory_fd.is_some() { MemoryKind::Exportable } else { MemoryKind::DeviceLocal };
        let chunks = layout.chunks.iter().map(|&bytes| Buffer::new(ctx, bytes, kind, "KV arena chunk")).collect::<Result<Vec<_>, _>>()?;
        Ok(VulkanKvMemory { chunks, layout: layout.clone() })
    }

    /// Imports an arena another device exported, after checking its layout against `mine`.
    ///
    /// # Safety
    /// For [`KvExport::Host`], the exporting allocation must outlive the returned value.
    ///
    /// # Errors
    /// A layout mismatch, a kind of export this device cannot import, or a driver refusal.
    pub unsafe fn import(ctx: &Arc<VulkanContext>, mine: &strata_kv::KvLayout, export: KvExport) -> Result<VulkanKvMemory, DeviceError> {
        crate::kv_memory::check_import(mine, &export)?;
        let chunks = match export {
            KvExport::Host { chunks, .. } => chunks
                .iter()
                .map(|&(ptr, len)| {
                    // SAFETY: the caller keeps the exporter alive; the exporter's chunks are
                    // page-aligned whole allocations.
                    unsafe { Buffer::import_host(ctx, ptr as *mut u8, len as u64, "KV arena chunk (host)") }
                })
                .collect::<Result<Vec<_>, _>>()?,
            KvExport::OpaqueFd { fds, .. } => fds.into_iter().zip(&mine.chunks).map(|(fd, &bytes)| Buffer::import_opaque_fd(ctx, fd, bytes, "KV arena chunk (opaque fd)")).collect::<Result<Vec<_>, _>>()?,
            KvExport::DmaBuf { fds, .. } => fds.into_iter().zip(&mine.chunks).map(|(fd, &bytes)| Buffer::import_dma_buf(ctx, fd, bytes, "KV arena chunk (dma-buf)")).collect::<Result<Vec<_>, _>>()?,
        };
        Ok(VulkanKvMemory { chunks, layout: mine.clone() })
    }

    /// Exports the arena (allocated here) as opaque fds for another device to import in place.
    ///
    /// # Errors
    /// Memory that was imported, or a driver without `VK_KHR_external_memory_fd`.
    pub fn export(&self) -> Result<KvExport, DeviceError> {
        let fds = self.chunks.iter().map(|c| c.export_opaque_fd()).collect::<Result<Vec<_>, _>>()?;
        Ok(KvExport::OpaqueFd { fds, layout: self.layout.clone() })
    }

    /// Device address of `layer`'s K (`v == false`) or V tensor, and its row stride in bytes.
    pub fn tensor_address(&self, layer: u32, v: bool) -> Option<(u64, u64)> {
        let kind = if v { strata_kv::KvTensorKind::V } else { strata_kv::KvTensorKind::K };
        let p = self.layout.place(layer, kind)?;
        let chunk = self.chunks.get(p.chunk as usize)?;
        Some((chunk.address + p.offset_bytes, p.row_stride_bytes))
    }

    /// Copies `data` into chunk `chunk` at `offset` (through a staging buffer; for tests and tools).
    ///
    /// # Errors
    /// A chunk or range outside the arena, or a device failure.
    pub fn write_bytes(&self, chunk: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let c = self.chunk_checked(chunk, offset, data.len() as u64)?;
        let mut up = Uploader::new(&c.ctx, (data.len() as u64).max(16))?;
        up.upload(c.buffer, offset, data)?;
        up.flush()
    }

    /// Reads `len` bytes of chunk `chunk` at `offset` back to the host (for tests and tools).
    ///
    /// # Errors
    /// As [`VulkanKvMemory::write_bytes`].
    pub fn read_bytes(&self, chunk: usize, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        let c = self.chunk_checked(chunk, offset, len)?;
        let host = Buffer::new(&c.ctx, len.max(16), MemoryKind::HostVisible, "readback")?;
        let (src, dst) = (c.buffer, host.buffer);
        OneShot::new(&c.ctx)?.run(|d, cb| {
            // SAFETY: both buffers are live and the region lies inside both (checked above).
            unsafe { d.cmd_copy_buffer(cb, src, dst, &[vk::BufferCopy { src_offset: offset, dst_offset: 0, size: len }]) };
        })?;
        Ok(host.mapped().map(|m| m[..len as usize].to_vec()).unwrap_or_default())
    }

    fn chunk_checked(&self, chunk: usize, offset: u64, len: u64) -> Result<&Buffer, DeviceError> {
        let c = self.chunks.get(chunk).ok_or_else(|| DeviceError::BadBatch(format!("KV chunk {chunk} of {}", self.chunks.len())))?;
        if offset.checked_add(len).is_none_or(|end| end > c.size) {
            return Err(DeviceError::BadBatch(format!("{len} bytes at {offset} outside a KV chunk of {}", c.size)));
        }
        Ok(c)
    }

    /// Each chunk's origin (for checking that an import is the exporter's memory itself).
    pub fn origins(&self) -> Vec<Origin> {
        self.chunks.iter().map(|c| c.origin).collect()
    }
}
