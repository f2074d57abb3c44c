//! The Vulkan device (`ash`): strata-rt's decode device on every vendor.
//!
//! | file | what |
//! |---|---|
//! | [`context`] | instance, `vulkan:N` selection, the logical device and its compute queue |
//! | [`memory`] | buffers by device address, the chunked sub-allocator, staging uploads, KV arena import/export |
//! | [`kernels`] | the typed kernel index, pipelines, dispatch recording |
//! | [`conv`] | GGUF weight formats to the shaders' layouts |
//! | [`plan`] | the forward graph compiled into recorded command buffers |
//! | [`ops`] | single ops on the device, for checking each against the CPU |
//! | [`probe`] | measurements of the device alone (what a stage boundary costs) |
//! | [`timeline`] | workgroup timelines of a submission (a developer's tool) |
//! | `shaders/` | the GLSL compute shaders (SPIR-V made by `build.rs` with `glslc`) |

pub mod context;
pub mod conv;
pub mod kernels;
pub mod memory;
pub mod ops;
pub mod plan;
pub mod probe;
pub mod timeline;

pub use context::{instances_created, list_devices, ContextOptions, DeviceInfo, VulkanContext};
pub use memory::VulkanKvMemory;
pub use plan::{chained_stages_recorded, fed_steps_submitted, norm_epilogues_recorded, tagged_attentions_recorded, tagged_merges_recorded, tagged_norm_scales_recorded, tagged_norms_recorded, tagged_quants_recorded, GREEDY_MAX_STEPS_PER_SUBMISSION, persistent_ffn_recorded, swiglu_splits_recorded, KvSource, VulkanOptions, VulkanPlan};

use crate::DeviceError;

/// A failed Vulkan call as a device error.
pub(crate) fn vk_error(device: &str, call: &'static str, result: ash::vk::Result) -> DeviceError {
    match result {
        ash::vk::Result::ERROR_DEVICE_LOST => DeviceError::Vulkan { device: device.to_string(), call, result: "device lost".into() },
        r => DeviceError::Vulkan { device: device.to_string(), call, result: format!("{r:?}") },
    }
}

/// The device's memory read bandwidth in bytes/s: a kernel reads a buffer of up to 1 GiB of
/// device memory ten times in one submission (16-byte loads); the best of three submissions.
///
/// # Errors
/// Out of device memory, or a Vulkan failure.
pub fn measure_read_bandwidth(ctx: &std::sync::Arc<VulkanContext>) -> Result<f64, DeviceError> {
    use kernels::{Kernel, Pipelines, Push, Recorder};
    use memory::{Buffer, MemoryKind, OneShot};
    let bytes = ctx.info.max_allocation_bytes.min(memory::MAX_CHUNK_BYTES) & !0xFFFF;
    let src = Buffer::new(ctx, bytes, MemoryKind::DeviceLocal, "bandwidth probe")?;
    const GROUPS: u32 = 8192;
    let dst = Buffer::new(ctx, (GROUPS * 256 * 4) as u64, MemoryKind::DeviceLocal, "bandwidth probe sink")?;
    let mut pipelines = Pipelines::new(ctx)?;
    let mut oneshot = OneShot::new(ctx)?;
    let push = Push::new().addr(src.address()).addr(dst.address()).u32((bytes / 16) as u32);
    const PASSES: usize = 10;
    let mut best = 0.0f64;
    for _ in 0..3 {
        let device = ctx.device.clone();
        let mut result = Ok(());
        let t = std::time::Instant::now();
        oneshot.run(|_, cb| {
            let mut rec = Recorder::new(&device, cb, &mut pipelines);
            for _ in 0..PASSES {
                if let Err(e) = rec.dispatch(Kernel::ReadBandwidth, &push, [GROUPS, 1, 1]) {
                    result = Err(e);
                    return;
                }
                rec.barrier();
            }
        })?;
        result?;
        best = best.max((bytes as f64 * PASSES as f64) / t.elapsed().as_secs_f64());
    }
    Ok(best)
}
