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
//! | `shaders/` | the GLSL compute shaders (SPIR-V made by `build.rs` with `glslc`) |

pub mod context;
pub mod conv;
pub mod kernels;
pub mod memory;
pub mod ops;
pub mod plan;

pub use context::{list_devices, DeviceInfo, VulkanContext};
pub use memory::VulkanKvMemory;
pub use plan::{KvSource, VulkanOptions, VulkanPlan};

use crate::DeviceError;

/// A failed Vulkan call as a device error.
pub(crate) fn vk_error(device: &str, call: &'static str, result: ash::vk::Result) -> DeviceError {
    match result {
        ash::vk::Result::ERROR_DEVICE_LOST => DeviceError::Vulkan { device: device.to_string(), call, result: "device lost".into() },
        r => DeviceError::Vulkan { device: device.to_string(), call, result: format!("{r:?}") },
    }
}
