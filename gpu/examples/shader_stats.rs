//! The driver compiler's statistics (registers, shared memory, ...) of SPIR-V compute shaders,
//! compiled with strata-rt's pipeline layout: for checking a kernel's register count before
//! timing it (on NVIDIA a workgroup's registers decide how many stay resident).
//!
//! `STRATA_VULKAN_PROFILE=1 cargo run --release -p strata-gpu --example shader_stats -- DEVICE FILE.spv...`
//! The files must be valid SPIR-V compute shaders (glslc's output): Vulkan does not promise to
//! reject invalid ones.
//! (the statistics need `VK_KHR_pipeline_executable_properties`, which the context enables for
//! profiling).

use strata_gpu::vulkan::kernels::Pipelines;
use strata_gpu::vulkan::VulkanContext;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let device: u32 = args.next().ok_or("usage: shader_stats DEVICE FILE.spv...")?.parse()?;
    let ctx = VulkanContext::new(device)?;
    let pipelines = Pipelines::new(&ctx)?;
    println!("device: {}", ctx.name());
    for path in args {
        let spirv = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: the tool's files are glslc's output (its usage says so); a developer tool.
        match unsafe { pipelines.statistics_of(&spirv, &path) } {
            Ok(Some(line)) => println!("{path}:{line}"),
            Ok(None) => println!("{path}: compiled; no statistics (set STRATA_VULKAN_PROFILE=1; the driver may lack VK_KHR_pipeline_executable_properties)"),
            Err(e) => println!("{path}: {e}"),
        }
    }
    Ok(())
}
