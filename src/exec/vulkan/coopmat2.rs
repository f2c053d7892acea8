//! VK_NV_cooperative_matrix2: workgroup-scope cooperative matrices with tensor addressing, what
//! shaders/include/coopmat2.glsl needs, and VK_KHR_shader_bfloat16 for its bf16 build. ash 0.38
//! (Vulkan headers 1.3.281) predates both extensions, so their structs and the one query are
//! written here from the Vulkan registry; the rest (VK_KHR_cooperative_matrix) is ash's.
//!
//! Invariant: [`probe`] answers `Some` only where every feature and the workgroup-scope shape
//! the shader uses are offered, and [`Enable`] then turns on exactly those at device creation.

use std::ffi::{c_void, CStr};

use ash::vk;

use super::device::DeviceInfo;

/// The extension's name.
pub const NAME: &CStr = c"VK_NV_cooperative_matrix2";
/// bf16 as a shader type and as cooperative-matrix operands.
pub const BF16_NAME: &CStr = c"VK_KHR_shader_bfloat16";

/// Invocations per workgroup of shaders/include/coopmat2.glsl (`local_size_x` there): the probe
/// asks the driver for shapes at exactly this size.
pub const WORKGROUP: u32 = 128;

const FEATURES_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_593_000);
const FLEXIBLE_DIMENSIONS_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_593_001);
const PROPERTIES_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_593_002);
const BF16_FEATURES_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_141_000);
/// VK_COMPONENT_TYPE_BFLOAT16_KHR.
const BF16: vk::ComponentTypeKHR = vk::ComponentTypeKHR::from_raw(1_000_141_000);

/// VkPhysicalDeviceCooperativeMatrix2FeaturesNV.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    workgroup_scope: vk::Bool32,
    flexible_dimensions: vk::Bool32,
    reductions: vk::Bool32,
    conversions: vk::Bool32,
    per_element_operations: vk::Bool32,
    tensor_addressing: vk::Bool32,
    block_loads: vk::Bool32,
}

impl Default for Features {
    fn default() -> Features {
        Features {
            s_type: FEATURES_TYPE,
            p_next: std::ptr::null_mut(),
            workgroup_scope: vk::FALSE,
            flexible_dimensions: vk::FALSE,
            reductions: vk::FALSE,
            conversions: vk::FALSE,
            per_element_operations: vk::FALSE,
            tensor_addressing: vk::FALSE,
            block_loads: vk::FALSE,
        }
    }
}

// SAFETY: Features is the registry's struct with sType and pNext first, #[repr(C)]; Vulkan allows
// it in the pNext chains of VkPhysicalDeviceFeatures2 and VkDeviceCreateInfo.
unsafe impl vk::TaggedStructure for Features {
    const STRUCTURE_TYPE: vk::StructureType = FEATURES_TYPE;
}
// SAFETY: as above.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Features {}

/// VkPhysicalDeviceShaderBfloat16FeaturesKHR.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Bf16Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    shader_type: vk::Bool32,
    dot_product: vk::Bool32,
    cooperative_matrix: vk::Bool32,
}

impl Default for Bf16Features {
    fn default() -> Bf16Features {
        Bf16Features {
            s_type: BF16_FEATURES_TYPE,
            p_next: std::ptr::null_mut(),
            shader_type: vk::FALSE,
            dot_product: vk::FALSE,
            cooperative_matrix: vk::FALSE,
        }
    }
}

// SAFETY: the registry's struct, sType and pNext first, #[repr(C)]; allowed in the pNext chains of
// VkPhysicalDeviceFeatures2 and VkDeviceCreateInfo.
unsafe impl vk::TaggedStructure for Bf16Features {
    const STRUCTURE_TYPE: vk::StructureType = BF16_FEATURES_TYPE;
}
// SAFETY: as above.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Bf16Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Bf16Features {}

/// VkPhysicalDeviceCooperativeMatrix2PropertiesNV.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Properties {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    workgroup_scope_max_workgroup_size: u32,
    flexible_dimensions_max_dimension: u32,
    workgroup_scope_reserved_shared_memory: u32,
}

// SAFETY: the registry's struct, sType and pNext first, #[repr(C)]; allowed in the pNext chain
// of VkPhysicalDeviceProperties2.
unsafe impl vk::TaggedStructure for Properties {
    const STRUCTURE_TYPE: vk::StructureType = PROPERTIES_TYPE;
}
// SAFETY: as above.
unsafe impl vk::ExtendsPhysicalDeviceProperties2 for Properties {}

/// VkCooperativeMatrixFlexibleDimensionsPropertiesNV.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct FlexibleDimensions {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: vk::ComponentTypeKHR,
    b_type: vk::ComponentTypeKHR,
    c_type: vk::ComponentTypeKHR,
    result_type: vk::ComponentTypeKHR,
    saturating_accumulation: vk::Bool32,
    scope: vk::ScopeKHR,
    workgroup_invocations: u32,
}

type ListFlexibleDimensions =
    unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut FlexibleDimensions) -> vk::Result;

/// What the workgroup-scope GEMMs may use on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coopmat2 {
    /// Rows, columns and k of a workgroup-scope matrix must be multiples of these (the coarser
    /// of the f16 and, where it runs, the bf16 shape's).
    pub granularity: [u32; 3],
    /// The largest dimension a workgroup-scope matrix may have.
    pub max_dimension: u32,
    /// Whether the bf16 build runs too (VK_KHR_shader_bfloat16 with bf16 cooperative matrices,
    /// and a workgroup-scope bf16 x bf16 + f32 shape).
    pub bf16: bool,
}

impl Coopmat2 {
    /// The device extensions to enable.
    pub fn extensions(&self) -> &'static [&'static CStr] {
        const WITH_BF16: [&CStr; 3] = [ash::khr::cooperative_matrix::NAME, NAME, BF16_NAME];
        if self.bf16 {
            &WITH_BF16
        } else {
            &WITH_BF16[..2]
        }
    }
}

/// Whether `pd` can run shaders/coopmat2_f16.comp: Vulkan 1.3 (SPIR-V 1.6), the two extensions,
/// workgroup scope, flexible dimensions, tensor addressing, per-element operations, 16-bit
/// storage, float16 arithmetic and the Vulkan memory model, and a workgroup-scope f16 x f16 +
/// f32 shape for workgroups of [`WORKGROUP`] invocations; and whether it can run
/// shaders/coopmat2_bf16.comp too.
pub fn probe(
    entry: &ash::Entry,
    instance: &ash::Instance,
    instance_api: u32,
    pd: vk::PhysicalDevice,
    info: &DeviceInfo,
    has_extension: impl Fn(&CStr) -> bool,
) -> Option<Coopmat2> {
    let dev_api = vk::make_api_version(0, info.api_version.0, info.api_version.1, 0);
    let off = |var: &str| std::env::var_os(var).is_some_and(|v| v == "0");
    if off(super::device::COOPMAT_ENV)
        || instance_api < vk::API_VERSION_1_3
        || dev_api < vk::API_VERSION_1_3
        || !has_extension(ash::khr::cooperative_matrix::NAME)
        || !has_extension(NAME)
    {
        return None;
    }
    let mut khr = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut nv2 = Features::default();
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut bf16 = Bf16Features::default();
    let has_bf16_ext = has_extension(BF16_NAME);
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut khr)
        .push_next(&mut nv2)
        .push_next(&mut v11)
        .push_next(&mut v12);
    if has_bf16_ext {
        f2 = f2.push_next(&mut bf16);
    }
    // SAFETY: a 1.3 device on a 1.3 instance that offers the extensions whose structs are in the
    // chain; every struct in it is alive across the call.
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    let bf16_features = has_bf16_ext && bf16.shader_type == vk::TRUE && bf16.cooperative_matrix == vk::TRUE;
    let wanted = [
        khr.cooperative_matrix,
        nv2.workgroup_scope,
        nv2.flexible_dimensions,
        nv2.per_element_operations,
        nv2.tensor_addressing,
        v11.storage_buffer16_bit_access,
        v12.shader_float16,
        v12.vulkan_memory_model,
    ];
    if wanted.iter().any(|&f| f != vk::TRUE) {
        return None;
    }
    let mut props = Properties {
        s_type: PROPERTIES_TYPE,
        p_next: std::ptr::null_mut(),
        workgroup_scope_max_workgroup_size: 0,
        flexible_dimensions_max_dimension: 0,
        workgroup_scope_reserved_shared_memory: 0,
    };
    let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
    // SAFETY: as above; props is the extension's properties struct, alive across the call.
    unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
    if props.workgroup_scope_max_workgroup_size < WORKGROUP {
        return None;
    }
    // SAFETY: the instance is live; the name is NUL-terminated.
    let f = unsafe {
        entry.get_instance_proc_addr(
            instance.handle(),
            c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV".as_ptr(),
        )
    }?;
    // SAFETY: the loader returned this entry point for this name, whose C signature is
    // ListFlexibleDimensions (the registry's PFN).
    let list: ListFlexibleDimensions = unsafe { std::mem::transmute::<unsafe extern "system" fn(), _>(f) };
    let mut count = 0u32;
    // SAFETY: pd offers the extension; a null array asks for the count only.
    if unsafe { list(pd, &mut count, std::ptr::null_mut()) } != vk::Result::SUCCESS {
        return None;
    }
    let blank = FlexibleDimensions {
        s_type: FLEXIBLE_DIMENSIONS_TYPE,
        p_next: std::ptr::null_mut(),
        m_granularity: 0,
        n_granularity: 0,
        k_granularity: 0,
        a_type: vk::ComponentTypeKHR::default(),
        b_type: vk::ComponentTypeKHR::default(),
        c_type: vk::ComponentTypeKHR::default(),
        result_type: vk::ComponentTypeKHR::default(),
        saturating_accumulation: vk::FALSE,
        scope: vk::ScopeKHR::default(),
        workgroup_invocations: 0,
    };
    let mut shapes = vec![blank; count as usize];
    // SAFETY: `shapes` holds `count` structs with sType set.
    let filled = unsafe { list(pd, &mut count, shapes.as_mut_ptr()) };
    if filled != vk::Result::SUCCESS && filled != vk::Result::INCOMPLETE {
        return None;
    }
    shapes.truncate(count as usize);
    let shape_of = |operand: vk::ComponentTypeKHR| {
        let f32 = vk::ComponentTypeKHR::FLOAT32;
        shapes
            .iter()
            .find(|s| {
                (s.a_type, s.b_type, s.c_type, s.result_type) == (operand, operand, f32, f32)
                    && s.scope == vk::ScopeKHR::WORKGROUP
                    && s.workgroup_invocations == WORKGROUP
                    && s.saturating_accumulation == vk::FALSE
            })
            .map(|s| [s.m_granularity, s.n_granularity, s.k_granularity])
    };
    let f16 = shape_of(vk::ComponentTypeKHR::FLOAT16)?;
    let bf16 = if bf16_features { shape_of(BF16) } else { None };
    // One tile serves both builds: the coarser granularity of each dimension (both are powers of
    // two where drivers list them; a tile that is a multiple of the larger is one of both).
    let granularity = match bf16 {
        Some(b) => [f16[0].max(b[0]), f16[1].max(b[1]), f16[2].max(b[2])],
        None => f16,
    };
    Some(Coopmat2 {
        granularity,
        max_dimension: props.flexible_dimensions_max_dimension,
        bf16: bf16.is_some(),
    })
}

/// The feature structs that enable what [`probe`] found, for VkDeviceCreateInfo's chain (`bf16`
/// only where [`Coopmat2::bf16`]).
pub struct Enable {
    pub khr: vk::PhysicalDeviceCooperativeMatrixFeaturesKHR<'static>,
    pub nv2: Features,
    pub bf16: Bf16Features,
}

impl Default for Enable {
    /// Every feature [`probe`] requires, on.
    fn default() -> Enable {
        let nv2 = Features {
            workgroup_scope: vk::TRUE,
            flexible_dimensions: vk::TRUE,
            per_element_operations: vk::TRUE,
            tensor_addressing: vk::TRUE,
            ..Features::default()
        };
        let bf16 =
            Bf16Features { shader_type: vk::TRUE, cooperative_matrix: vk::TRUE, ..Bf16Features::default() };
        Enable {
            khr: vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true),
            nv2,
            bf16,
        }
    }
}
