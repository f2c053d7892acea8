//! Loading Vulkan, describing devices, and the shared logical device.

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::sync::Mutex;

use ash::vk;

use super::coopmat2::{self, Coopmat2};
use super::error::{check, VulkanError};
use crate::isa::DType;

/// Environment variable naming the Vulkan loader library to open instead of the default.
pub const LIBRARY_ENV: &str = "ADEADVM_VULKAN_LIBRARY";

/// Environment variable that makes every pipeline print its compiler statistics (a tuning aid).
pub const PIPELINE_STATS_ENV: &str = "ADEADVM_VULKAN_PIPELINE_STATS";

/// Environment variable that, set to `0`, keeps the device from using VK_KHR_push_descriptor:
/// every dispatch then allocates and writes a descriptor set from a pool (the fallback path
/// of devices without the extension).
pub const PUSH_DESCRIPTORS_ENV: &str = "ADEADVM_VULKAN_PUSH_DESCRIPTORS";

/// Descriptors one push may set: VK_KHR_push_descriptor guarantees maxPushDescriptors >= 32;
/// a kernel with more bindings uses a descriptor set from a pool.
pub(crate) const MIN_MAX_PUSH_DESCRIPTORS: usize = 32;

/// The device extensions `pd` offers (none where the query fails).
fn device_extensions(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Vec<vk::ExtensionProperties> {
    // SAFETY: pd is a physical device of this live instance.
    unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default()
}

/// Whether `exts` (from [`device_extensions`]) has extension `name`.
fn offers(exts: &[vk::ExtensionProperties], name: &CStr) -> bool {
    exts.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

/// Whether `pd` offers device extension `name`.
fn has_extension(instance: &ash::Instance, pd: vk::PhysicalDevice, name: &CStr) -> bool {
    offers(&device_extensions(instance, pd), name)
}

/// Environment variable that turns the cooperative-matrix GEMM (f16 and bf16) off (`0`), to
/// compare.
pub const COOPMAT_ENV: &str = "ADEADVM_VULKAN_COOPMAT";

/// What `adeadvm info` shows about one physical device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub index: usize,
    pub name: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_type: String,
    /// The driver's name and info string (VkPhysicalDeviceDriverProperties), when the device has them.
    pub driver_name: String,
    pub driver_info: String,
    /// Raw driverVersion (vendor-specific encoding).
    pub driver_version: u32,
    pub api_version: (u32, u32, u32),
    pub max_compute_workgroup_invocations: u32,
    pub max_compute_workgroup_size: [u32; 3],
    pub max_compute_workgroup_count: [u32; 3],
    pub max_storage_buffer_range: u32,
    /// Bytes of shared memory one workgroup may use.
    pub max_compute_shared_memory: u32,
    /// Nanoseconds per timestamp tick (VkPhysicalDeviceLimits::timestampPeriod).
    pub timestamp_period: f32,
    /// maxPushConstantsSize: bytes of push constants a pipeline may take.
    pub max_push_constants_size: u32,
    /// maxPerStageDescriptorStorageBuffers: storage buffers one compute shader may bind.
    pub max_storage_buffers: u32,
    /// Size of the largest device-local memory heap: the default device memory budget.
    pub device_local_bytes: u64,
    /// shaderDenormPreserveFloat32 / shaderDenormFlushToZeroFloat32; None when the device cannot report them.
    pub denorm_preserve_f32: Option<bool>,
    pub denorm_ftz_f32: Option<bool>,
    /// Subgroup size; None when the device cannot report it (Vulkan 1.0).
    pub subgroup_size: Option<u32>,
    /// Whether compute shaders have subgroup shuffles (the fast tier's one-pass row kernels
    /// reduce with them); false where the device cannot report it.
    pub subgroup_shuffle: bool,
    /// Whether a queue family supports compute.
    pub has_compute_queue: bool,
    /// Workgroup-scope cooperative matrices for the fast tier's f16 and bf16 MATMUL, where the
    /// device has them (and `ADEADVM_VULKAN_COOPMAT` is not `0`).
    pub coopmat: Option<Coopmat2>,
    /// Streaming multiprocessors (VK_NV_shader_sm_builtins' shaderSMCount), where the device
    /// reports them: how many workgroups run at once, for choices that count waves of them.
    pub multiprocessors: Option<u32>,
}

impl DeviceInfo {
    /// The vendor's name from its PCI id, where known.
    pub fn vendor(&self) -> &'static str {
        match self.vendor_id {
            0x10de => "NVIDIA",
            0x1002 => "AMD",
            0x8086 => "Intel",
            0x13b5 => "ARM",
            0x5143 => "Qualcomm",
            0x106b => "Apple",
            0x10005 => "Mesa",
            _ => "unknown vendor",
        }
    }
}

/// Opens the loader: `ADEADVM_VULKAN_LIBRARY` when set, otherwise the platform default
/// (libvulkan.so.1 on Linux).
pub(crate) fn load_entry() -> Result<ash::Entry, VulkanError> {
    match std::env::var_os(LIBRARY_ENV) {
        Some(path) => {
            // SAFETY: loading a shared library runs its initializers; the path is the user's
            // explicit choice of a Vulkan loader, and ash only resolves Vulkan entry points from it.
            unsafe { ash::Entry::load_from(&path) }.map_err(|e| VulkanError::NoLoader {
                library: path.to_string_lossy().into_owned(),
                reason: e.to_string(),
            })
        }
        None => {
            // SAFETY: as above, for the system's Vulkan loader.
            unsafe { ash::Entry::load() }.map_err(|e| VulkanError::NoLoader {
                library: "libvulkan.so.1 (the Vulkan loader; install libvulkan1)".into(),
                reason: e.to_string(),
            })
        }
    }
}

/// Creates an instance at the highest API version up to 1.3 the loader offers.
pub(crate) fn create_instance(entry: &ash::Entry) -> Result<(ash::Instance, u32), VulkanError> {
    // SAFETY: entry holds a loaded loader; the call takes no pointers from us.
    let loader_version = unsafe { entry.try_enumerate_instance_version() }
        .map_err(check("vkEnumerateInstanceVersion"))?
        .unwrap_or(vk::API_VERSION_1_0);
    let api = loader_version.min(vk::API_VERSION_1_3);
    let app =
        vk::ApplicationInfo::default().application_name(c"adeadvm").engine_name(c"adeadvm").api_version(api);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: info and app live across the call; no layers or extensions are requested.
    let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| match e {
        vk::Result::ERROR_INCOMPATIBLE_DRIVER => {
            VulkanError::NoDevice("the Vulkan loader found no compatible driver (no ICD installed)".into())
        }
        e => check("vkCreateInstance")(e),
    })?;
    Ok((instance, api))
}

fn cstr_field(raw: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan fills these fixed arrays with NUL-terminated strings; from_bytes_until_nul
    // stops at the first NUL and fails (handled) when there is none.
    let bytes = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len()) };
    CStr::from_bytes_until_nul(bytes).map_or_else(|_| String::new(), |c| c.to_string_lossy().into_owned())
}

/// Describes one physical device.
pub(crate) fn describe(
    entry: &ash::Entry,
    instance: &ash::Instance,
    instance_api: u32,
    index: usize,
    pd: vk::PhysicalDevice,
) -> DeviceInfo {
    // SAFETY: pd came from vkEnumeratePhysicalDevices on this instance.
    let props = unsafe { instance.get_physical_device_properties(pd) };
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let has_compute_queue = families.iter().any(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE));
    let dev_api = props.api_version;
    // SAFETY: as above.
    let memory = unsafe { instance.get_physical_device_memory_properties(pd) };
    let device_local_bytes = memory
        .memory_heaps_as_slice()
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
        .unwrap_or(0);
    let mut info = DeviceInfo {
        index,
        name: cstr_field(&props.device_name),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        device_type: match props.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
            vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
            vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
            vk::PhysicalDeviceType::CPU => "CPU",
            _ => "other",
        }
        .into(),
        driver_name: String::new(),
        driver_info: String::new(),
        driver_version: props.driver_version,
        api_version: (
            vk::api_version_major(dev_api),
            vk::api_version_minor(dev_api),
            vk::api_version_patch(dev_api),
        ),
        max_compute_workgroup_invocations: props.limits.max_compute_work_group_invocations,
        max_compute_workgroup_size: props.limits.max_compute_work_group_size,
        max_compute_workgroup_count: props.limits.max_compute_work_group_count,
        max_storage_buffer_range: props.limits.max_storage_buffer_range,
        max_compute_shared_memory: props.limits.max_compute_shared_memory_size,
        timestamp_period: props.limits.timestamp_period,
        max_push_constants_size: props.limits.max_push_constants_size,
        max_storage_buffers: props.limits.max_per_stage_descriptor_storage_buffers,
        device_local_bytes,
        denorm_preserve_f32: None,
        denorm_ftz_f32: None,
        subgroup_size: None,
        subgroup_shuffle: false,
        has_compute_queue,
        coopmat: None,
        multiprocessors: None,
    };
    // The 1.1/1.2 property structs need both the instance and the device at 1.2.
    if instance_api >= vk::API_VERSION_1_2 && dev_api >= vk::API_VERSION_1_2 {
        let mut fc = vk::PhysicalDeviceFloatControlsProperties::default();
        let mut sg = vk::PhysicalDeviceSubgroupProperties::default();
        let mut drv = vk::PhysicalDeviceDriverProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut fc)
            .push_next(&mut sg)
            .push_next(&mut drv);
        // SAFETY: every struct in the chain is a Vulkan 1.2 core struct, valid for a 1.2 device
        // on a 1.2 instance, and lives across the call.
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        info.denorm_preserve_f32 = Some(fc.shader_denorm_preserve_float32 == vk::TRUE);
        info.denorm_ftz_f32 = Some(fc.shader_denorm_flush_to_zero_float32 == vk::TRUE);
        info.subgroup_size = Some(sg.subgroup_size);
        info.subgroup_shuffle = sg.supported_stages.contains(vk::ShaderStageFlags::COMPUTE)
            && sg
                .supported_operations
                .contains(vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::SHUFFLE);
        info.driver_name = cstr_field(&drv.driver_name);
        info.driver_info = cstr_field(&drv.driver_info);
    }
    let exts = device_extensions(instance, pd);
    if instance_api >= vk::API_VERSION_1_1
        && dev_api >= vk::API_VERSION_1_1
        && offers(&exts, ash::nv::shader_sm_builtins::NAME)
    {
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sm);
        // SAFETY: the device offers VK_NV_shader_sm_builtins, whose property struct is the only
        // one in the chain; both live across the call, on a 1.1 instance and device.
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        info.multiprocessors = Some(sm.shader_sm_count).filter(|&n| n > 0);
    }
    info.coopmat = coopmat2::probe(entry, instance, instance_api, pd, &info, |name| offers(&exts, name));
    info
}

/// Lists the Vulkan devices, or says why there are none.
pub fn devices() -> Result<Vec<DeviceInfo>, VulkanError> {
    let entry = load_entry()?;
    let (instance, api) = create_instance(&entry)?;
    // SAFETY: instance is live until destroy_instance below.
    let pds = unsafe { instance.enumerate_physical_devices() }.map_err(check("vkEnumeratePhysicalDevices"));
    let out = pds
        .map(|pds| pds.iter().enumerate().map(|(i, &pd)| describe(&entry, &instance, api, i, pd)).collect());
    // SAFETY: nothing created from the instance outlives this point.
    unsafe { instance.destroy_instance(None) };
    let out: Vec<DeviceInfo> = out?;
    if out.is_empty() {
        return Err(VulkanError::NoDevice("the Vulkan loader reports no devices".into()));
    }
    Ok(out)
}

/// The shared logical device: instance, physical device, compute queue, command pool, pipeline
/// cache and memory allocator. Share it as `Arc<Device>`; drop destroys in reverse order of creation.
pub struct Device {
    pub(crate) instance: ash::Instance,
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) info: DeviceInfo,
    pub(crate) queue_family: u32,
    /// Valid bits of the queue's timestamps (0: the queue cannot write timestamps).
    pub(crate) timestamp_bits: u32,
    /// Set by `ADEADVM_VULKAN_PIPELINE_STATS` on a device with VK_KHR_pipeline_executable_properties:
    /// every pipeline's compiler statistics (registers, spills, ...) go to stderr when it is built.
    pub(crate) pipeline_stats: Option<ash::khr::pipeline_executable_properties::Device>,
    /// VK_KHR_push_descriptor where the device has it (and `PUSH_DESCRIPTORS_ENV` is not `0`):
    /// dispatches push their bindings instead of allocating descriptor sets.
    pub(crate) push_descriptor: Option<ash::khr::push_descriptor::Device>,
    pub(crate) device: ash::Device,
    /// The compute queue; vkQueueSubmit needs external synchronization.
    pub(crate) queue: Mutex<vk::Queue>,
    /// Command buffers are allocated from and freed to this pool under the lock.
    pub(crate) command_pool: Mutex<vk::CommandPool>,
    pub(crate) pipeline_cache: vk::PipelineCache,
    pub(crate) allocator: ManuallyDrop<vk_mem::Allocator>,
    /// Set when a batch did not finish within the GPU timeout: work that cannot be stopped may
    /// still be running, so nothing it might use is freed any more (see [`Device::mark_hung`]).
    hung: std::sync::atomic::AtomicBool,
    /// Kept last: unloading the library must follow every Vulkan call.
    _entry: ash::Entry,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("info", &self.info).field("queue_family", &self.queue_family).finish()
    }
}

impl Device {
    /// Opens the best device: `ADEADVM_VULKAN_DEVICE=<index>` when set, otherwise the first
    /// discrete GPU, then integrated, virtual, CPU, among devices with a compute queue.
    pub fn open() -> Result<Device, VulkanError> {
        Self::open_index(None)
    }

    /// Opens device `index` (as `adeadvm info` numbers them), or as [`Device::open`] when None.
    /// Opening the same index twice gives two independent logical devices.
    pub fn open_index(index: Option<usize>) -> Result<Device, VulkanError> {
        let push = std::env::var_os(PUSH_DESCRIPTORS_ENV).is_none_or(|v| v != "0");
        Self::open_with(index, push)
    }

    /// As [`Device::open`], never using VK_KHR_push_descriptor (tests of the fallback path).
    pub fn open_without_push_descriptors() -> Result<Device, VulkanError> {
        Self::open_with(None, false)
    }

    fn open_with(index: Option<usize>, push_descriptors: bool) -> Result<Device, VulkanError> {
        let entry = load_entry()?;
        let (instance, api) = create_instance(&entry)?;
        // open_on takes a clone: on failure the library must stay loaded until the instance is
        // destroyed below (the clone shares the loaded library).
        match Self::open_on(entry.clone(), &instance, api, index, push_descriptors) {
            Ok(d) => Ok(d),
            Err(e) => {
                // SAFETY: open_on destroyed everything it created from the instance before failing;
                // `entry` still holds the loader library.
                unsafe { instance.destroy_instance(None) };
                drop(entry);
                Err(e)
            }
        }
    }

    fn open_on(
        entry: ash::Entry,
        instance: &ash::Instance,
        api: u32,
        index: Option<usize>,
        push_descriptors: bool,
    ) -> Result<Device, VulkanError> {
        // SAFETY: instance is live.
        let pds =
            unsafe { instance.enumerate_physical_devices() }.map_err(check("vkEnumeratePhysicalDevices"))?;
        let infos: Vec<DeviceInfo> =
            pds.iter().enumerate().map(|(i, &pd)| describe(&entry, instance, api, i, pd)).collect();
        if infos.is_empty() {
            return Err(VulkanError::NoDevice("the Vulkan loader reports no devices".into()));
        }
        let rank =
            |t: &str| ["discrete GPU", "integrated GPU", "virtual GPU", "CPU"].iter().position(|&x| x == t);
        let by_index = |i: usize, named: String| {
            infos.get(i).filter(|d| d.has_compute_queue).ok_or_else(|| {
                VulkanError::NoDevice(format!(
                    "{named}: no such device with a compute queue ({} devices; `adeadvm info` lists them)",
                    infos.len()
                ))
            })
        };
        let chosen = match (index, std::env::var("ADEADVM_VULKAN_DEVICE")) {
            (Some(i), _) => by_index(i, format!("Vulkan device {i}"))?,
            (None, Ok(s)) => {
                let i: usize = s.trim().parse().map_err(|_| {
                    VulkanError::NoDevice(format!("ADEADVM_VULKAN_DEVICE={s:?} is not a device index"))
                })?;
                by_index(i, format!("ADEADVM_VULKAN_DEVICE={i}"))?
            }
            (None, Err(_)) => infos
                .iter()
                .filter(|d| d.has_compute_queue)
                .min_by_key(|d| rank(&d.device_type).unwrap_or(9))
                .ok_or_else(|| VulkanError::NoDevice("no Vulkan device has a compute queue".into()))?,
        };
        let physical = pds[chosen.index];
        // SAFETY: physical is a device of this instance.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        // Prefer a compute-only family (async compute), else any with compute.
        let queue_family = families
            .iter()
            .position(|f| {
                f.queue_flags.contains(vk::QueueFlags::COMPUTE)
                    && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS)
            })
            .or_else(|| families.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)))
            .ok_or_else(|| VulkanError::NoDevice("the chosen device has no compute queue".into()))?
            as u32;
        let prio = [1.0f32];
        let qinfo =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&prio)];
        let pipeline_stats = std::env::var_os(PIPELINE_STATS_ENV).is_some_and(|v| v != "0")
            && has_extension(instance, physical, ash::khr::pipeline_executable_properties::NAME);
        if std::env::var_os(PIPELINE_STATS_ENV).is_some_and(|v| v != "0") && !pipeline_stats {
            eprintln!(
                "adeadvm: {PIPELINE_STATS_ENV} is set but {} has no VK_KHR_pipeline_executable_properties",
                chosen.name
            );
        }
        let tensor_cores = chosen.coopmat;
        let push_descriptors =
            push_descriptors && has_extension(instance, physical, ash::khr::push_descriptor::NAME);
        let mut extensions = Vec::new();
        if pipeline_stats {
            extensions.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        if push_descriptors {
            extensions.push(ash::khr::push_descriptor::NAME.as_ptr());
        }
        if let Some(c) = tensor_cores {
            extensions.extend(c.extensions().iter().map(|e| e.as_ptr()));
        }
        let mut exec_props = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        let mut v12 =
            vk::PhysicalDeviceVulkan12Features::default().shader_float16(true).vulkan_memory_model(true);
        let mut dinfo = vk::DeviceCreateInfo::default().queue_create_infos(&qinfo);
        if !extensions.is_empty() {
            dinfo = dinfo.enabled_extension_names(&extensions);
        }
        if pipeline_stats {
            dinfo = dinfo.push_next(&mut exec_props);
        }
        let mut enable2 = coopmat2::Enable::default();
        if let Some(c) = tensor_cores {
            dinfo = dinfo
                .push_next(&mut enable2.khr)
                .push_next(&mut enable2.nv2)
                .push_next(&mut v11)
                .push_next(&mut v12);
            if c.bf16 {
                dinfo = dinfo.push_next(&mut enable2.bf16);
            }
        }
        // SAFETY: physical belongs to instance; dinfo and its arrays outlive the call.
        let device =
            unsafe { instance.create_device(physical, &dinfo, None) }.map_err(check("vkCreateDevice"))?;
        // From here on, failures must destroy `device` too.
        let rest = (|| {
            // SAFETY: queue_family was requested with one queue in dinfo.
            let queue = unsafe { device.get_device_queue(queue_family, 0) };
            let pinfo = vk::CommandPoolCreateInfo::default()
                .queue_family_index(queue_family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
            // SAFETY: device is live; pinfo is valid.
            let command_pool =
                unsafe { device.create_command_pool(&pinfo, None) }.map_err(check("vkCreateCommandPool"))?;
            // SAFETY: device is live; an empty cache is valid.
            let cache =
                unsafe { device.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None) };
            let pipeline_cache = match cache {
                Ok(c) => c,
                Err(e) => {
                    // SAFETY: the pool was just created and holds no buffers.
                    unsafe { device.destroy_command_pool(command_pool, None) };
                    return Err(check("vkCreatePipelineCache")(e));
                }
            };
            // vulkan_api_version stays 0 (1.0): VMA then needs only the 1.0 entry points that
            // vk-mem routes from our ash tables.
            let ainfo = vk_mem::AllocatorCreateInfo::new(instance, &device, physical);
            // SAFETY: instance, device and physical outlive the allocator (it is destroyed first in Drop).
            match unsafe { vk_mem::Allocator::new(ainfo) } {
                Ok(a) => Ok((queue, command_pool, pipeline_cache, a)),
                Err(e) => {
                    // SAFETY: both were just created and are unused.
                    unsafe {
                        device.destroy_pipeline_cache(pipeline_cache, None);
                        device.destroy_command_pool(command_pool, None);
                    }
                    Err(check("vmaCreateAllocator")(e))
                }
            }
        })();
        match rest {
            Ok((queue, command_pool, pipeline_cache, allocator)) => Ok(Device {
                instance: instance.clone(),
                physical,
                info: chosen.clone(),
                queue_family,
                timestamp_bits: families[queue_family as usize].timestamp_valid_bits,
                pipeline_stats: pipeline_stats
                    .then(|| ash::khr::pipeline_executable_properties::Device::new(instance, &device)),
                push_descriptor: push_descriptors
                    .then(|| ash::khr::push_descriptor::Device::new(instance, &device)),
                device,
                queue: Mutex::new(queue),
                command_pool: Mutex::new(command_pool),
                pipeline_cache,
                allocator: ManuallyDrop::new(allocator),
                hung: std::sync::atomic::AtomicBool::new(false),
                _entry: entry,
            }),
            Err(e) => {
                // SAFETY: nothing created from the device survives.
                unsafe { device.destroy_device(None) };
                Err(e)
            }
        }
    }

    /// The description of the open device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The Vulkan physical device handle (for future capability queries).
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical
    }

    /// Whether the fast tier's GEMM of `dtype` operands (f16 or bf16) runs on cooperative
    /// matrices here.
    pub fn has_coopmat(&self, dtype: DType) -> bool {
        self.info.coopmat.is_some_and(|c| match dtype {
            DType::F16 => true,
            DType::Bf16 => c.bf16,
            _ => false,
        })
    }

    /// The limits of workgroup-scope cooperative matrices, where the device has them (enabled
    /// at creation with the features shaders/include/coopmat2.glsl needs).
    pub fn coopmat2(&self) -> Option<Coopmat2> {
        self.info.coopmat
    }

    /// Whether a shader may declare SPIR-V capability `c` on this device, as adeadvm opened it:
    /// `Some(false)` for a capability whose device feature (or extension) was not enabled, so
    /// that a pipeline using it is invalid (drivers fail such a pipeline with an unhelpful
    /// error, or worse); `Some(true)` for one enabled; `None` for one no feature gates here
    /// (core compute capabilities such as Shader or GroupNonUniform*: the driver decides).
    /// Float16, 16-bit storage, the Vulkan memory model and the cooperative matrices come on
    /// with the tensor-core path (`info().coopmat`), bf16 with its bf16 build; the 64-bit,
    /// 8-bit and small-integer features never.
    pub fn capability_enabled(&self, c: rspirv::spirv::Capability) -> Option<bool> {
        use rspirv::spirv::Capability as C;
        let coopmat = self.info.coopmat;
        match c {
            C::Float16
            | C::StorageBuffer16BitAccess
            | C::VulkanMemoryModel
            | C::CooperativeMatrixKHR
            | C::CooperativeMatrixPerElementOperationsNV
            | C::CooperativeMatrixTensorAddressingNV
            | C::TensorAddressingNV => Some(coopmat.is_some()),
            C::BFloat16TypeKHR | C::BFloat16CooperativeMatrixKHR => Some(coopmat.is_some_and(|c| c.bf16)),
            C::Float64
            | C::Int64
            | C::Int64Atomics
            | C::Int16
            | C::Int8
            | C::StorageBuffer8BitAccess
            | C::UniformAndStorageBuffer8BitAccess
            | C::StoragePushConstant8
            | C::UniformAndStorageBuffer16BitAccess
            | C::StoragePushConstant16
            | C::VulkanMemoryModelDeviceScope
            | C::CooperativeMatrixNV
            | C::CooperativeMatrixReductionsNV
            | C::CooperativeMatrixBlockLoadsNV
            | C::VariablePointers
            | C::VariablePointersStorageBuffer
            | C::AtomicFloat32AddEXT
            | C::AtomicFloat16AddEXT
            | C::AtomicFloat64AddEXT
            | C::ShaderClockKHR => Some(false),
            _ => None,
        }
    }

    /// Whether dispatches push their bindings (VK_KHR_push_descriptor) rather than allocate
    /// descriptor sets.
    pub fn uses_push_descriptors(&self) -> bool {
        self.push_descriptor.is_some()
    }

    /// Records that submitted work did not finish in time. Vulkan has no way to stop a
    /// dispatch, and waiting for it may take forever (a KERNEL that loops), so from here on
    /// buffers, pipelines and command buffers of this device are leaked rather than freed or
    /// waited for (the process's exit reclaims them), and no new work is accepted.
    pub(crate) fn mark_hung(&self) {
        self.hung.store(true, std::sync::atomic::Ordering::Relaxed);
        ANY_DEVICE_HUNG.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`Device::mark_hung`] was called.
    ///
    /// (See also [`any_device_hung`], for the whole process.)
    pub(crate) fn is_hung(&self) -> bool {
        self.hung.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The raw ash device, for code in this module.
    pub(crate) fn raw(&self) -> &ash::Device {
        &self.device
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: Device is dropped only when every Arc holder (buffers, pipelines, executors) is
        // gone, so no object created from it is alive; we wait for the queue, then destroy in
        // reverse order of creation: cache, pool, allocator, device, instance. The entry (library)
        // is dropped after this body as the last field.
        if self.is_hung() {
            // Work that never finished may still run: waiting would block forever, and
            // destroying the device under it is not allowed. The process's exit reclaims it.
            return;
        }
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_pipeline_cache(self.pipeline_cache, None);
            let pool = *self.command_pool.get_mut().unwrap_or_else(|p| p.into_inner());
            self.device.destroy_command_pool(pool, None);
            ManuallyDrop::drop(&mut self.allocator);
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// Set by [`Device::mark_hung`] on any device of this process.
static ANY_DEVICE_HUNG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether work on some device of this process did not finish in time and may still be
/// running. A program that then exits should leave without running exit handlers
/// (`libc::_exit`): the driver's own teardown at exit can crash under work still running in
/// it (lavapipe, whose threads run the dispatch, died by SIGSEGV or SIGABRT in most of six
/// tries after reporting the timeout).
pub fn any_device_hung() -> bool {
    ANY_DEVICE_HUNG.load(std::sync::atomic::Ordering::Relaxed)
}
