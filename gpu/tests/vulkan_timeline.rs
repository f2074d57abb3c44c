//! The workgroup timeline (vulkan::timeline): the step submission it is asked for, and only that
//! one, leaves one record per workgroup in its file. One test in its own binary, since it sets the
//! process's `STRATA_VULKAN_TIMELINE` before opening its device.

use std::sync::Arc;

use strata_gpu::vulkan::kernels::{Kernel, Pipelines, Push, Recorder};
use strata_gpu::vulkan::memory::{Buffer, MemoryKind, OneShot};
use strata_gpu::vulkan::{list_devices, VulkanContext};

#[test]
fn the_chosen_step_submission_leaves_one_record_per_workgroup() {
    let Some(index) = list_devices().ok().and_then(|d| d.into_iter().find(|d| d.usable)).map(|d| d.index) else {
        assert!(std::env::var("REQUIRE_VULKAN_DEVICE").as_deref() != Ok("1"), "no usable Vulkan device");
        return;
    };
    let dir = std::env::temp_dir().join(format!("strata-timeline-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let path = dir.join("timeline.bin");
    std::env::set_var("STRATA_VULKAN_TIMELINE", &path);
    std::env::set_var("STRATA_VULKAN_TIMELINE_AT", "1");
    let ctx = Arc::new(VulkanContext::new(index).expect("the device opens"));
    if !ctx.records_workgroup_timeline() {
        // (Lavapipe, which CI runs, has the device clock.)
        assert!(std::env::var("REQUIRE_VULKAN_DEVICE").as_deref() != Ok("1") || !ctx.info().is_cpu(), "lavapipe has VK_KHR_shader_clock's device clock");
        return;
    }
    let src = Buffer::new(&ctx, 1 << 16, MemoryKind::DeviceLocal, "timeline test input").expect("a buffer");
    let dst = Buffer::new(&ctx, 16 * 256 * 4, MemoryKind::DeviceLocal, "timeline test output").expect("a buffer");
    let mut pipelines = Pipelines::new(&ctx).expect("pipelines");
    // An upload-like submission first, not counted as a step.
    OneShot::new(&ctx).expect("a one-shot").run(|_, _| {}).expect("an empty submission");
    let mut steps = OneShot::counted_as_steps(&ctx).expect("a one-shot counted as steps");
    let push = Push::new().addr(src.address()).addr(dst.address()).u32(1 << 12);
    // Step submissions 0, 1 and 2 dispatch 5, 7 and 9 workgroups: submission 1 is recorded.
    for groups in [5u32, 7, 9] {
        let mut dispatched = Ok(());
        steps.run(|device, cb| dispatched = Recorder::new(device, cb, &mut pipelines).dispatch(Kernel::ReadBandwidthTimeline, &push, [groups, 1, 1])).expect("a step submission");
        dispatched.expect("the timeline kernel dispatches");
    }
    let data = std::fs::read(&path).expect("the timeline file is written once its submission completed");
    let names = std::fs::read_to_string(format!("{}.names", path.display())).expect("the kernel names");
    let count = u64::from_le_bytes(data[..8].try_into().expect("a count")) as usize;
    assert_eq!(count, 7, "submission 1's workgroups, not another's");
    assert_eq!(data.len(), 8 + 32 * count);
    let mut groups_seen = Vec::new();
    for record in data[8..].chunks_exact(32) {
        let word = |i: usize| u32::from_le_bytes(record[4 * i..4 * i + 4].try_into().expect("a word"));
        let kernel = names.lines().nth(word(0) as usize).expect("the kernel's id names a kernel");
        assert_eq!(kernel, "ReadBandwidthTimeline");
        groups_seen.push(word(1));
        let start = u64::from(word(2)) | u64::from(word(3)) << 32;
        let end = u64::from(word(4)) | u64::from(word(5)) << 32;
        assert!(start > 0 && start <= end, "a workgroup's start {start} and end {end} on the device clock");
    }
    groups_seen.sort_unstable();
    assert_eq!(groups_seen, (0..7).collect::<Vec<u32>>(), "one record for each workgroup");
    let _ = std::fs::remove_dir_all(&dir);
}
