//! Instance, physical-device selection (`vulkan:N` by index) and the logical device with its one
//! compute queue.

use std::ffi::CStr;
use std::sync::Arc;

use ash::vk;

use super::vk_error;
use crate::DeviceError;

/// Device extensions strata-rt uses when they are there.
pub const EXT_EXTERNAL_MEMORY_HOST: &CStr = c"VK_EXT_external_memory_host";
pub const EXT_EXTERNAL_MEMORY_FD: &CStr = c"VK_KHR_external_memory_fd";
pub const EXT_EXTERNAL_MEMORY_DMA_BUF: &CStr = c"VK_EXT_external_memory_dma_buf";
pub const EXT_INTEGER_DOT_PRODUCT: &CStr = c"VK_KHR_shader_integer_dot_product";
pub const EXT_COOPERATIVE_MATRIX: &CStr = c"VK_KHR_cooperative_matrix";
/// Compiler statistics of pipelines (register counts), printed under `STRATA_VULKAN_PROFILE=1`.
pub const EXT_PIPELINE_EXECUTABLE_PROPERTIES: &CStr = c"VK_KHR_pipeline_executable_properties";
const OPTIONAL_EXTENSIONS: [&CStr; 5] = [EXT_EXTERNAL_MEMORY_HOST, EXT_EXTERNAL_MEMORY_FD, EXT_EXTERNAL_MEMORY_DMA_BUF, EXT_INTEGER_DOT_PRODUCT, EXT_COOPERATIVE_MATRIX];

/// What `strata-rt devices` prints about one Vulkan device, and what the plan needs to know.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    pub driver: String,
    pub api_version: (u32, u32, u32),
    pub device_type: String,
    /// (bytes, device-local) of each memory heap.
    pub heaps: Vec<(u64, bool)>,
    /// (heap, property flags) of each memory type, in the driver's order (the first type that
    /// has the flags a buffer asks for is the one it gets: the logits readback asks for
    /// host-visible, coherent and cached memory).
    pub memory_types: Vec<(u32, vk::MemoryPropertyFlags)>,
    /// The optional extensions strata-rt uses, and whether the device has each.
    pub extensions: Vec<(String, bool)>,
    pub subgroup_size: u32,
    pub max_allocation_bytes: u64,
    pub max_storage_buffer_range: u64,
    pub min_imported_host_alignment: u64,
    pub max_shared_memory_bytes: u32,
    /// Invocations a compute workgroup may have (at least 128 on every device).
    pub max_workgroup_invocations: u32,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f32,
    /// Whether the features the shaders need are all there (device addresses, 8/16-bit storage,
    /// float16/int8/int16/int64 arithmetic, Vulkan 1.2).
    pub usable: bool,
    /// Whether shaders may use integer dot products (`VK_KHR_shader_integer_dot_product` with its
    /// feature, and subgroup quad operations for their activation quantizers): the decode
    /// products then multiply 8-bit activations as integers.
    pub integer_dot_product: bool,
    /// Whether shaders may use f64 arithmetic (`shaderFloat64`).
    pub shader_float64: bool,
    /// Whether compute shaders may use subgroup quad operations.
    pub subgroup_quads: bool,
    /// The GPU's streaming multiprocessors, where the driver tells them
    /// (`VK_NV_shader_sm_builtins`' `shaderSMCount`: NVIDIA's); the decode plan sizes waves of
    /// workgroups by it.
    pub sm_count: Option<u32>,
}

impl DeviceInfo {
    /// Whether the device is a CPU (lavapipe): its "GPU" work runs on the host's cores.
    pub fn is_cpu(&self) -> bool {
        self.device_type == "cpu"
    }

    /// Whether the device has the named optional extension.
    pub fn has(&self, ext: &CStr) -> bool {
        let name = ext.to_string_lossy();
        self.extensions.iter().any(|(n, on)| *on && *n == name)
    }
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b, c) = self.api_version;
        writeln!(f, "vulkan:{}: {} ({}, driver {}, Vulkan {a}.{b}.{c}){}", self.index, self.name, self.device_type, self.driver, if self.usable { "" } else { " — lacks features strata-rt needs" })?;
        for (i, (bytes, local)) in self.heaps.iter().enumerate() {
            writeln!(f, "  heap {i}: {:.1} GiB{}", *bytes as f64 / (1u64 << 30) as f64, if *local { " device-local" } else { "" })?;
        }
        let types: Vec<String> = self.memory_types.iter().enumerate().map(|(i, (heap, flags))| format!("{i} (heap {heap}: {})", memory_flags(*flags))).collect();
        writeln!(f, "  memory types: {}", types.join(", "))?;
        let sms = self.sm_count.map(|n| format!(", {n} SMs")).unwrap_or_default();
        writeln!(f, "  subgroup size {}, max allocation {} MiB, max storage range {} MiB, shared memory {} KiB{sms}", self.subgroup_size, self.max_allocation_bytes >> 20, self.max_storage_buffer_range >> 20, self.max_shared_memory_bytes >> 10)?;
        let ext: Vec<String> = self.extensions.iter().map(|(n, on)| format!("{n}: {}", if *on { "yes" } else { "no" })).collect();
        writeln!(f, "  {}", ext.join(", "))?;
        // The exact mode (devices.vulkan_exact) needs both.
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(f, "  exact mode: {} (integer dot products {}, shaderFloat64 {})", yes(self.integer_dot_product && self.shader_float64), yes(self.integer_dot_product), yes(self.shader_float64))
    }
}

/// A memory type's property flags in words (`device-local host-visible coherent cached`).
fn memory_flags(flags: vk::MemoryPropertyFlags) -> String {
    let names = [
        (vk::MemoryPropertyFlags::DEVICE_LOCAL, "device-local"),
        (vk::MemoryPropertyFlags::HOST_VISIBLE, "host-visible"),
        (vk::MemoryPropertyFlags::HOST_COHERENT, "coherent"),
        (vk::MemoryPropertyFlags::HOST_CACHED, "cached"),
        (vk::MemoryPropertyFlags::LAZILY_ALLOCATED, "lazily-allocated"),
        (vk::MemoryPropertyFlags::PROTECTED, "protected"),
    ];
    let words: Vec<&str> = names.iter().filter(|(f, _)| flags.contains(*f)).map(|(_, n)| *n).collect();
    if words.is_empty() { "no properties".to_string() } else { words.join(" ") }
}

/// Choices made when a device is opened.
#[derive(Clone, Copy, Debug)]
pub struct ContextOptions {
    /// Use integer dot products where the device has them (the default; `STRATA_VULKAN_INT_DOT=0`
    /// turns them off, for comparisons and for drivers that get them wrong).
    pub integer_dot_product: bool,
    /// Compute the CPU device's bits in decode-sized steps (`STRATA_VULKAN_EXACT=1`): the
    /// integer products in the CPU's lane order, attention in ggml's summation orders, divisions,
    /// square roots and fused multiply-adds rounded as the CPU's (through f64). Needs integer dot
    /// products and shaderFloat64; slower (measured in BENCHMARKS.md).
    pub exact: bool,
}

impl Default for ContextOptions {
    fn default() -> ContextOptions {
        ContextOptions {
            integer_dot_product: std::env::var("STRATA_VULKAN_INT_DOT").map_or(true, |v| v != "0"),
            exact: std::env::var("STRATA_VULKAN_EXACT").is_ok_and(|v| v == "1"),
        }
    }
}

/// A Vulkan instance and logical device with one compute queue.
pub struct VulkanContext {
    /// The instance the device was created from, given back when the device is destroyed.
    pooled: &'static PooledInstance,
    pub(crate) device: ash::Device,
    pub(crate) queue: vk::Queue,
    pub(crate) queue_family: u32,
    pub(crate) info: DeviceInfo,
    pub(crate) memory_properties: vk::PhysicalDeviceMemoryProperties,
    pub(crate) host_import: Option<ash::ext::external_memory_host::Device>,
    pub(crate) memory_fd: Option<ash::khr::external_memory_fd::Device>,
    /// Present when profiling asked for pipeline statistics and the driver has them.
    pub(crate) pipeline_stats: Option<ash::khr::pipeline_executable_properties::Device>,
    /// Whether the shaders use integer dot products on this device (enabled and asked for).
    pub(crate) integer_dot_product: bool,
    /// Which builds of the kernels that have several this device runs.
    pub(crate) variant: super::kernels::ShaderVariant,
    /// Decode-sized steps compute the CPU device's bits ([`ContextOptions::exact`]).
    pub(crate) exact: bool,
    /// The lane order of the exact mode's Q4_K products: the CPU device's on this host.
    pub(crate) exact_k_order: super::kernels::KQuantOrder,
    /// The workgroup timeline's record buffer, when one was asked for (`STRATA_VULKAN_TIMELINE`)
    /// and the device has a device-scope shader clock.
    pub(crate) workgroup_timeline: Option<super::timeline::WorkgroupTimeline>,
}

/// The Vulkan loader and an instance, created once and never destroyed ([`take_instance`]).
struct PooledInstance {
    _entry: ash::Entry,
    instance: ash::Instance,
}

/// Instances no context or listing is using.
static IDLE_INSTANCES: std::sync::Mutex<Vec<&'static PooledInstance>> = std::sync::Mutex::new(Vec::new());

/// An instance of its own for a context or a listing, from the idle ones or a new one; given
/// back with [`give_back_instance`], never destroyed. NVIDIA's driver (580, H200) refuses
/// `vkCreateInstance` with ERROR_INCOMPATIBLE_DRIVER once about 30 instances have been created
/// and destroyed in one process (`gpu/examples/context_churn.rs`: the sixteenth round of a
/// listing and a context; a test binary met it at its sixteenth test), and a public report has
/// it misnumbering subgroup invocations after ~11 such cycles. Yet one instance shared by
/// threads whose devices ran at the same time hung the same driver (the test binary on its
/// threads). So each user has an instance of its own, and a process creates only as many as it
/// ever uses at once.
fn take_instance() -> Result<&'static PooledInstance, DeviceError> {
    if let Some(idle) = IDLE_INSTANCES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop() {
        return Ok(idle);
    }
    let entry = load_entry()?;
    let instance = create_instance(&entry)?;
    INSTANCES_CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Leaked on purpose: it goes back to the idle list, to the process's end.
    Ok(Box::leak(Box::new(PooledInstance { _entry: entry, instance })))
}

static INSTANCES_CREATED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Vulkan instances this process has created: as many as it ever used at once (device listings
/// and contexts), since each is reused and none destroyed.
pub fn instances_created() -> usize {
    INSTANCES_CREATED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Makes `instance` available to the next user (nothing created from it may still live).
fn give_back_instance(instance: &'static PooledInstance) {
    IDLE_INSTANCES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(instance);
}

fn load_entry() -> Result<ash::Entry, DeviceError> {
    // SAFETY: loading the system's Vulkan loader runs its initialisers; it is the documented way
    // to reach Vulkan, and nothing else in the process unloads it.
    unsafe { ash::Entry::load() }.map_err(|e| DeviceError::NotAvailable(format!("vulkan: the Vulkan loader (libvulkan.so.1) cannot be loaded: {e}; install it (Debian: apt-get install libvulkan1) and a driver (mesa-vulkan-drivers, or the GPU vendor's)")))
}

fn create_instance(entry: &ash::Entry) -> Result<ash::Instance, DeviceError> {
    let app = vk::ApplicationInfo::default().application_name(c"strata-rt").api_version(vk::API_VERSION_1_2);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: the create info and what it points to live across the call.
    unsafe { entry.create_instance(&info, None) }.map_err(|e| vk_error("vulkan", "vkCreateInstance", e))
}

fn describe(instance: &ash::Instance, index: u32, pd: vk::PhysicalDevice) -> Result<DeviceInfo, DeviceError> {
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut v11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
    // SAFETY: `pd` came from this instance.
    let exts = unsafe { instance.enumerate_device_extension_properties(pd) }.map_err(|e| vk_error("vulkan", "vkEnumerateDeviceExtensionProperties", e))?;
    let has = |name: &CStr| exts.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name));
    let has_sm_builtins = has(super::timeline::EXT_SM_BUILTINS);
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver).push_next(&mut v11).push_next(&mut host).push_next(&mut maint3);
    if has_sm_builtins {
        // Only chained where the device knows the structure.
        props2 = props2.push_next(&mut sm);
    }
    // SAFETY: `pd` came from this instance; the chained structs outlive the call.
    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
    let props = props2.properties;
    // SAFETY: as above.
    let mem = unsafe { instance.get_physical_device_memory_properties(pd) };
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let has_dot_ext = has(EXT_INTEGER_DOT_PRODUCT);
    let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12);
    if has_dot_ext {
        // Only chained where the device knows the structure.
        features2 = features2.push_next(&mut dot);
    }
    // SAFETY: as above.
    unsafe { instance.get_physical_device_features2(pd, &mut features2) };
    let core = features2.features;
    // The integer kernels' activation quantizers use quad operations (shaders/quantize_lanes.glsl).
    let quads = v11.subgroup_supported_operations.contains(vk::SubgroupFeatureFlags::QUAD) && v11.subgroup_supported_stages.contains(vk::ShaderStageFlags::COMPUTE);
    let integer_dot_product = has_dot_ext && dot.shader_integer_dot_product == vk::TRUE && quads;
    let api = props.api_version;
    let usable = vk::api_version_major(api) >= 1
        && vk::api_version_minor(api) >= 2
        && f12.buffer_device_address == vk::TRUE
        && f12.shader_float16 == vk::TRUE
        && f12.shader_int8 == vk::TRUE
        && f12.storage_buffer8_bit_access == vk::TRUE
        && f12.timeline_semaphore == vk::TRUE
        && f11.storage_buffer16_bit_access == vk::TRUE
        && core.shader_int64 == vk::TRUE
        && core.shader_int16 == vk::TRUE;
    let name = props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    let driver_name = driver.driver_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    let driver_info = driver.driver_info_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(DeviceInfo {
        index,
        name,
        driver: if driver_info.is_empty() { driver_name } else { format!("{driver_name} {driver_info}") },
        api_version: (vk::api_version_major(api), vk::api_version_minor(api), vk::api_version_patch(api)),
        device_type: format!("{:?}", props.device_type).to_lowercase().replace('_', " "),
        heaps: mem.memory_heaps_as_slice().iter().map(|h| (h.size, h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))).collect(),
        memory_types: mem.memory_types_as_slice().iter().map(|t| (t.heap_index, t.property_flags)).collect(),
        extensions: OPTIONAL_EXTENSIONS.iter().map(|e| (e.to_string_lossy().into_owned(), has(e))).collect(),
        subgroup_size: v11.subgroup_size,
        max_allocation_bytes: maint3.max_memory_allocation_size,
        max_storage_buffer_range: props.limits.max_storage_buffer_range as u64,
        min_imported_host_alignment: host.min_imported_host_pointer_alignment,
        max_shared_memory_bytes: props.limits.max_compute_shared_memory_size,
        max_workgroup_invocations: props.limits.max_compute_work_group_invocations.min(props.limits.max_compute_work_group_size[0]),
        timestamp_period_ns: props.limits.timestamp_period,
        usable,
        integer_dot_product,
        shader_float64: core.shader_float64 == vk::TRUE,
        subgroup_quads: quads,
        sm_count: (has_sm_builtins && sm.shader_sm_count > 0).then_some(sm.shader_sm_count),
    })
}

/// Lists the Vulkan devices of this machine, in `vulkan:N` order.
///
/// # Errors
/// [`DeviceError::NotAvailable`] when there is no Vulkan loader; a Vulkan error otherwise.
pub fn list_devices() -> Result<Vec<DeviceInfo>, DeviceError> {
    let pooled = take_instance()?;
    let instance = &pooled.instance;
    // SAFETY: the instance is never destroyed.
    let pds = unsafe { instance.enumerate_physical_devices() };
    let result = pds.map_err(|e| vk_error("vulkan", "vkEnumeratePhysicalDevices", e)).and_then(|pds| pds.iter().enumerate().map(|(i, &pd)| describe(instance, i as u32, pd)).collect());
    give_back_instance(pooled);
    result
}

impl VulkanContext {
    /// Opens `vulkan:index`.
    ///
    /// # Errors
    /// No loader, no such device, a device without the features the shaders need, or a failure
    /// creating the device.
    pub fn new(index: u32) -> Result<Arc<VulkanContext>, DeviceError> {
        Self::with_options(index, ContextOptions::default())
    }

    /// Opens `vulkan:index` with `options`.
    ///
    /// # Errors
    /// As [`VulkanContext::new`].
    pub fn with_options(index: u32, options: ContextOptions) -> Result<Arc<VulkanContext>, DeviceError> {
        let pooled = take_instance()?;
        match Self::open(pooled, index, options) {
            Ok(ctx) => Ok(Arc::new(ctx)),
            Err(e) => {
                // (A failed open destroyed whatever it created from the instance.)
                give_back_instance(pooled);
                Err(e)
            }
        }
    }

    fn open(pooled: &'static PooledInstance, index: u32, options: ContextOptions) -> Result<VulkanContext, DeviceError> {
        let instance = &pooled.instance;
        let name = format!("vulkan:{index}");
        // SAFETY: the instance is valid.
        let pds = unsafe { instance.enumerate_physical_devices() }.map_err(|e| vk_error(&name, "vkEnumeratePhysicalDevices", e))?;
        let &pd = pds.get(index as usize).ok_or_else(|| DeviceError::NotAvailable(format!("{name} (this machine has {} Vulkan devices; `strata-rt devices` lists them)", pds.len())))?;
        let info = describe(instance, index, pd)?;
        if !info.usable {
            return Err(DeviceError::Unsupported { device: name, what: format!("{} lacks Vulkan 1.2 with buffer device addresses, timeline semaphores, 8/16-bit storage and float16/int8/int16/int64 shader arithmetic", info.name) });
        }
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        let queue_family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or_else(|| DeviceError::Unsupported { device: name.clone(), what: "no compute queue".into() })? as u32;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&priorities)];
        let mut extensions: Vec<*const std::ffi::c_char> = Vec::new();
        for ext in [EXT_EXTERNAL_MEMORY_HOST, EXT_EXTERNAL_MEMORY_FD, EXT_EXTERNAL_MEMORY_DMA_BUF] {
            if info.has(ext) {
                extensions.push(ext.as_ptr());
            }
        }
        let profile = std::env::var("STRATA_VULKAN_PROFILE").is_ok_and(|v| v == "1");
        // The device's extensions beyond the optional ones `info` lists, asked for by developers'
        // switches (listed once, and only when one is set; an error lists none).
        let timeline_path = super::timeline::requested_path();
        // SAFETY: as above.
        let listed = if profile || timeline_path.is_some() { unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default() } else { Vec::new() };
        let lists = |ext: &CStr| listed.iter().any(|x| x.extension_name_as_c_str().is_ok_and(|n| n == ext));
        let has_stats = profile && lists(EXT_PIPELINE_EXECUTABLE_PROPERTIES);
        if has_stats {
            extensions.push(EXT_PIPELINE_EXECUTABLE_PROPERTIES.as_ptr());
        }
        let integer_dot_product = options.integer_dot_product && info.integer_dot_product;
        if integer_dot_product {
            extensions.push(EXT_INTEGER_DOT_PRODUCT.as_ptr());
        }
        let has_clock = timeline_path.is_some() && lists(super::timeline::EXT_SHADER_CLOCK) && {
            let mut clock = vk::PhysicalDeviceShaderClockFeaturesKHR::default();
            let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut clock);
            // SAFETY: `pd` belongs to the instance; the chain outlives the call.
            unsafe { instance.get_physical_device_features2(pd, &mut features2) };
            clock.shader_device_clock == vk::TRUE
        };
        if timeline_path.is_some() && !has_clock {
            tracing::warn!(device = %name, "STRATA_VULKAN_TIMELINE needs VK_KHR_shader_clock's device clock; no timeline");
        }
        // NVIDIA's SM index for `STRATA_SHADER_TIMELINE=sm` builds.
        let has_sm_builtins = has_clock && lists(super::timeline::EXT_SM_BUILTINS);
        if has_clock {
            extensions.push(super::timeline::EXT_SHADER_CLOCK.as_ptr());
        }
        if has_sm_builtins {
            extensions.push(super::timeline::EXT_SM_BUILTINS.as_ptr());
        }
        let mut sm_features = vk::PhysicalDeviceShaderSMBuiltinsFeaturesNV::default().shader_sm_builtins(true);
        let mut clock_features = vk::PhysicalDeviceShaderClockFeaturesKHR::default().shader_device_clock(true);
        let mut dot_features = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default().shader_integer_dot_product(true);
        let mut stats_features = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        // The exact mode rounds divisions and square roots through f64, and on llvmpipe
        // (lavapipe), whose NIR lowers `ffma` into a multiply and an add, fused multiply-adds
        // too.
        let exact = options.exact && integer_dot_product && info.shader_float64;
        if options.exact && !exact {
            tracing::warn!(device = %name, "the exact mode needs integer dot products and shaderFloat64; running the fast kernels");
        }
        // The Q4_K products follow the CPU device's kernels on this host (their lane order
        // depends on its SIMD level).
        let exact_k_order = super::kernels::KQuantOrder::of_this_host().unwrap_or_else(|| {
            if exact {
                tracing::warn!(device = %name, "this CPU lacks AVX2: the exact mode's Q4_K products sum in AVX2's order, not the CPU device's portable one (Q4_K logits may differ in the last bits)");
            }
            super::kernels::KQuantOrder::Lanes8
        });
        let variant = match (exact, info.is_cpu()) {
            (false, _) => super::kernels::ShaderVariant::Native,
            (true, false) => super::kernels::ShaderVariant::F64,
            (true, true) => super::kernels::ShaderVariant::F64Fma,
        };
        let features = vk::PhysicalDeviceFeatures::default().shader_int64(true).shader_int16(true).shader_float64(exact);
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().buffer_device_address(true).shader_float16(true).shader_int8(true).storage_buffer8_bit_access(true).timeline_semaphore(true);
        let mut create = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&extensions).enabled_features(&features).push_next(&mut f11).push_next(&mut f12);
        if has_stats {
            create = create.push_next(&mut stats_features);
        }
        if integer_dot_product {
            create = create.push_next(&mut dot_features);
        }
        if has_clock {
            create = create.push_next(&mut clock_features);
        }
        if has_sm_builtins {
            create = create.push_next(&mut sm_features);
        }
        // SAFETY: `pd` belongs to the instance; the create info and its chain outlive the call;
        // every feature and extension enabled was checked present above.
        let device = unsafe { instance.create_device(pd, &create, None) }.map_err(|e| vk_error(&name, "vkCreateDevice", e))?;
        // SAFETY: the queue family and index 0 were requested in the create info.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        // SAFETY: as above.
        let memory_properties = unsafe { instance.get_physical_device_memory_properties(pd) };
        let host_import = info.has(EXT_EXTERNAL_MEMORY_HOST).then(|| ash::ext::external_memory_host::Device::new(instance, &device));
        let memory_fd = info.has(EXT_EXTERNAL_MEMORY_FD).then(|| ash::khr::external_memory_fd::Device::new(instance, &device));
        let pipeline_stats = has_stats.then(|| ash::khr::pipeline_executable_properties::Device::new(instance, &device));
        let workgroup_timeline = match timeline_path.filter(|_| has_clock) {
            Some(path) => match super::timeline::WorkgroupTimeline::new(&device, &memory_properties, &name, path) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(device = %name, error = %e, "no workgroup timeline");
                    None
                }
            },
            None => None,
        };
        tracing::info!(device = %name, gpu = %info.name, driver = %info.driver, subgroup = info.subgroup_size, integer_dot_product, "Vulkan device opened");
        Ok(VulkanContext { pooled, device, queue, queue_family, info, memory_properties, host_import, memory_fd, pipeline_stats, integer_dot_product, variant, exact, exact_k_order, workgroup_timeline })
    }

    /// The device's description.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Whether this context records a workgroup timeline (`STRATA_VULKAN_TIMELINE` was set when
    /// it was opened, and the device has a device-scope shader clock).
    pub fn records_workgroup_timeline(&self) -> bool {
        self.workgroup_timeline.is_some()
    }

    /// Whether the decode products multiply 8-bit activations with integer dot products here.
    pub fn uses_integer_dot_product(&self) -> bool {
        self.integer_dot_product
    }

    /// Whether decode-sized steps compute the CPU device's bits here (asked for, and possible).
    pub fn exact(&self) -> bool {
        self.exact
    }

    /// The lane order of the exact mode's Q4_K products: the CPU device's on this host.
    pub(crate) fn exact_k_order(&self) -> super::kernels::KQuantOrder {
        self.exact_k_order
    }

    /// Which builds of the kernels that have several this device runs.
    pub(crate) fn shader_variant(&self) -> super::kernels::ShaderVariant {
        self.variant
    }

    /// `vulkan:N`.
    pub fn name(&self) -> String {
        format!("vulkan:{}", self.info.index)
    }

    /// A memory type index among `type_bits` with all of `flags`, preferring the first listed.
    pub(crate) fn memory_type(&self, type_bits: u32, flags: vk::MemoryPropertyFlags) -> Option<u32> {
        (0..self.memory_properties.memory_type_count).find(|&i| type_bits & (1 << i) != 0 && self.memory_properties.memory_types[i as usize].property_flags.contains(flags))
    }
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        // SAFETY: every object created from the device is owned by values holding an
        // `Arc<VulkanContext>`, so they are gone by now; wait for the queue before destroying.
        unsafe {
            let _ = self.device.device_wait_idle();
            if let Some(t) = &self.workgroup_timeline {
                t.destroy(&self.device);
            }
            self.device.destroy_device(None);
        }
        give_back_instance(self.pooled);
    }
}
