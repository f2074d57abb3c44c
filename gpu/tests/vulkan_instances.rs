//! Vulkan instances are reused, never destroyed: NVIDIA's driver stops creating them after about
//! 30 were created and destroyed in one process, and hangs when one is shared by devices working
//! at the same time on several threads (context.rs, `take_instance`). So a process creates as
//! many as it uses at once. One test in its own binary: the count is the process's.

use strata_gpu::vulkan::{instances_created, list_devices, VulkanContext};

#[test]
fn contexts_reuse_instances_and_concurrent_ones_get_their_own() {
    let Some(index) = list_devices().ok().and_then(|d| d.into_iter().find(|d| d.usable)).map(|d| d.index) else {
        assert!(std::env::var("REQUIRE_VULKAN_DEVICE").as_deref() != Ok("1"), "no usable Vulkan device");
        return;
    };
    assert_eq!(instances_created(), 1, "the listing's instance");
    for round in 0..40 {
        let devices = list_devices().unwrap_or_else(|e| panic!("round {round}: listing: {e}"));
        assert!(devices.iter().any(|d| d.usable), "round {round}: the device is still listed");
        drop(VulkanContext::new(index).unwrap_or_else(|e| panic!("round {round}: opening: {e}")));
    }
    assert_eq!(instances_created(), 1, "forty rounds of a listing and a context, one after the other, reuse one instance");
    let a = VulkanContext::new(index).expect("open");
    let b = VulkanContext::new(index).expect("open a second, while the first is open");
    assert_eq!(instances_created(), 2, "two contexts at once have an instance each");
    drop((a, b));
    let c = VulkanContext::new(index).expect("open");
    let d = VulkanContext::new(index).expect("open");
    drop((c, d));
    assert_eq!(instances_created(), 2, "the two are reused");
}
