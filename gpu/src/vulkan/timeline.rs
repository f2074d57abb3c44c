//! Workgroup timelines: where a submission's time goes between and inside its dispatches.
//!
//! A developer's tool, off unless both halves are there: shaders built with
//! `STRATA_SHADER_TIMELINE=1` (build.rs adds common.glsl's `TIMELINE`: each workgroup stores its
//! kernel, its index and the device clock when it started and when its last invocation ended;
//! `sm`, NVIDIA only, also its SM),
//! and `STRATA_VULKAN_TIMELINE=PATH` at run time (the device enables `VK_KHR_shader_clock`'s
//! device clock and gives the shaders a record buffer). Submission number
//! `STRATA_VULKAN_TIMELINE_AT` (0-based, default 60, counted per device among the plans' step
//! submissions, not uploads) is recorded: its
//! records go to `PATH` (a little-endian u64 count, then 32 bytes a workgroup: kernel id,
//! workgroup, start ns as two words, end ns as two words, the SM index in `sm` builds (else 0),
//! a zero word) and the kernel names
//! by id to `PATH.names`. `bench/timeline_report.py` turns them into a table.
//!
//! The pipeline barrier, the stage probe's figure (`gpu/examples/stage_chain.rs`), is a
//! boundary's whole cost; a timeline splits it into the gap between one stage's last workgroup
//! and the next one's first, the next stage's ramp, and its drain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ash::vk;

use super::vk_error;
use crate::DeviceError;

/// The device extension whose device-scope clock the recording shaders read.
pub const EXT_SHADER_CLOCK: &std::ffi::CStr = c"VK_KHR_shader_clock";
/// NVIDIA's SM index, recorded by `STRATA_SHADER_TIMELINE=sm` builds where the device has it.
pub const EXT_SM_BUILTINS: &std::ffi::CStr = c"VK_NV_shader_sm_builtins";

/// Records the buffer holds: a one-token step of a 7B is ~0.3 million workgroups.
const CAPACITY_RECORDS: u32 = 2 << 20;
const RECORD_BYTES: u64 = 32;
const HEADER_BYTES: u64 = 16;

/// The record buffer, its mapping and the capture's state.
pub struct WorkgroupTimeline {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    mapped: *mut u8,
    address: u64,
    path: std::path::PathBuf,
    capture_at: u64,
    submissions: AtomicU64,
    /// Kernel names by id (a pipeline's id is its place here).
    names: Mutex<Vec<String>>,
    /// The semaphore and value the recorded submission signals, while it has not been written
    /// out (each plan has a semaphore of its own).
    pending: Mutex<Option<(vk::Semaphore, u64)>>,
}

// SAFETY: the handles are plain values; the mapping is written only by the one thread that
// submits (the plan's), between submissions, and read after the recorded one completed.
unsafe impl Send for WorkgroupTimeline {}
// SAFETY: as above; the mutable state is behind atomics and mutexes.
unsafe impl Sync for WorkgroupTimeline {}

/// The path asked for, when a timeline is.
pub(crate) fn requested_path() -> Option<std::path::PathBuf> {
    std::env::var_os("STRATA_VULKAN_TIMELINE").filter(|p| !p.is_empty()).map(Into::into)
}

impl WorkgroupTimeline {
    /// A record buffer in host-visible memory (device-local where the device maps such), with
    /// nothing recorded until the chosen submission.
    ///
    /// # Errors
    /// Out of memory, or no host-visible memory type.
    pub(crate) fn new(device: &ash::Device, memory_properties: &vk::PhysicalDeviceMemoryProperties, name: &str, path: std::path::PathBuf) -> Result<WorkgroupTimeline, DeviceError> {
        let capture_at = std::env::var("STRATA_VULKAN_TIMELINE_AT").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
        let size = HEADER_BYTES + u64::from(CAPACITY_RECORDS) * RECORD_BYTES;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
        let info = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid device and create info.
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(|e| vk_error(name, "vkCreateBuffer", e))?;
        // SAFETY: the buffer was just created on this device.
        let req = unsafe { device.get_buffer_memory_requirements(buffer) };
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let find = |flags: vk::MemoryPropertyFlags| (0..memory_properties.memory_type_count).find(|&i| req.memory_type_bits & (1 << i) != 0 && memory_properties.memory_types[i as usize].property_flags.contains(flags));
        // Device-local first: the workgroups' atomic and stores then stay off the bus.
        let Some(type_index) = find(host | vk::MemoryPropertyFlags::DEVICE_LOCAL).or_else(|| find(host)) else {
            // SAFETY: the buffer is unused.
            unsafe { device.destroy_buffer(buffer, None) };
            return Err(DeviceError::Unsupported { device: name.to_string(), what: "no host-visible memory for the workgroup timeline".into() });
        };
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(type_index).push_next(&mut flags);
        // SAFETY: a valid allocate info whose chain outlives the call.
        let memory = match unsafe { device.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: the buffer is unused.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(vk_error(name, "vkAllocateMemory", e));
            }
        };
        let release = |e| {
            // SAFETY: neither is in use.
            unsafe {
                device.destroy_buffer(buffer, None);
                device.free_memory(memory, None);
            }
            e
        };
        // SAFETY: the memory fits the buffer's requirements and is bound once.
        unsafe { device.bind_buffer_memory(buffer, memory, 0) }.map_err(|e| release(vk_error(name, "vkBindBufferMemory", e)))?;
        // SAFETY: host-visible memory, mapped whole once.
        let mapped = unsafe { device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }.map_err(|e| release(vk_error(name, "vkMapMemory", e)))?.cast::<u8>();
        // SAFETY: the buffer was created with SHADER_DEVICE_ADDRESS on a device with the feature.
        let address = unsafe { device.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer)) };
        let timeline = WorkgroupTimeline { buffer, memory, mapped, address, path, capture_at, submissions: AtomicU64::new(0), names: Mutex::new(Vec::new()), pending: Mutex::new(None) };
        timeline.set_taken(CAPACITY_RECORDS);
        Ok(timeline)
    }

    /// The specialization constants 240-243 of common.glsl's `TIMELINE` builds for the kernel
    /// named `what`: the buffer's address, the kernel's id and the capacity.
    pub(crate) fn constants(&self, what: &str) -> [u32; 4] {
        let mut names = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = names.iter().position(|n| n == what).unwrap_or_else(|| {
            names.push(what.to_string());
            names.len() - 1
        });
        [self.address as u32, (self.address >> 32) as u32, id as u32, CAPACITY_RECORDS]
    }

    /// The slot counter: workgroups record while it is below the capacity.
    fn set_taken(&self, taken: u32) {
        // SAFETY: the mapping holds the header; no submission that records is running (the
        // caller waited for every earlier one), and a volatile store reaches coherent memory.
        unsafe { std::ptr::write_volatile(self.mapped.cast::<u32>(), taken) };
    }

    /// Called before each submission: whether this one is to be recorded (the caller must then
    /// have waited for every earlier submission, and report its value to [`Self::submitted`]).
    pub(crate) fn records_next(&self) -> bool {
        self.submissions.load(Ordering::Relaxed) == self.capture_at
    }

    /// Called after each submission, with the semaphore and value it signals.
    pub(crate) fn submitted(&self, recorded: bool, semaphore: vk::Semaphore, value: u64) {
        self.submissions.fetch_add(1, Ordering::Relaxed);
        if recorded {
            *self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((semaphore, value));
        }
    }

    /// Arms the counter for the recorded submission.
    pub(crate) fn arm(&self) {
        self.set_taken(0);
    }

    /// Called after `semaphore` reached `reached`: writes the recorded submission's records out
    /// once it has completed, and stops recording.
    pub(crate) fn completed(&self, semaphore: vk::Semaphore, reached: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !pending.is_some_and(|(s, v)| s == semaphore && v <= reached) {
            return;
        }
        *pending = None;
        // SAFETY: the recorded submission completed; nothing writes the buffer until the counter
        // is armed again (never: one capture a device).
        let taken = unsafe { std::ptr::read_volatile(self.mapped.cast::<u32>()) };
        self.set_taken(CAPACITY_RECORDS);
        let n = taken.min(CAPACITY_RECORDS) as usize;
        let mut out = Vec::with_capacity(8 + n * RECORD_BYTES as usize);
        out.extend_from_slice(&(n as u64).to_le_bytes());
        // SAFETY: `n` records lie after the header in the mapping, written by the completed
        // submission.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.mapped.add(HEADER_BYTES as usize), n * RECORD_BYTES as usize) });
        let names = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner).join("\n");
        let mut names_path = self.path.clone().into_os_string();
        names_path.push(".names");
        let written = std::fs::write(&self.path, &out).and_then(|()| std::fs::write(&names_path, names + "\n"));
        match written {
            Ok(()) => eprintln!("workgroup timeline: submission {}, {n} workgroups ({taken} took a slot) -> {}", self.capture_at, self.path.display()),
            Err(e) => eprintln!("workgroup timeline: cannot write {}: {e}", self.path.display()),
        }
    }

    /// Frees the buffer.
    ///
    /// # Safety
    /// `device` must be the one it was created on, idle.
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: as the caller promised.
        unsafe {
            device.unmap_memory(self.memory);
            device.destroy_buffer(self.buffer, None);
            device.free_memory(self.memory, None);
        }
    }
}
