//! Compute pipelines built from SPIR-V, their layouts reflected from the module.

use std::sync::Arc;

use ash::vk;

use super::device::Device;
use super::error::VulkanError;
use super::reflect::{reflect, Interface};

/// A compute pipeline with its descriptor-set layout (set 0, storage buffers) and push-constant range.
pub struct Kernel {
    dev: Arc<Device>,
    name: String,
    interface: Interface,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    /// Whether the set layout is for VK_KHR_push_descriptor (see `push_descriptor_layout`).
    pub(crate) push_descriptors: bool,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) pipeline: vk::Pipeline,
}

/// SPIR-V bytes (little-endian) as words.
pub fn spirv_words(bytes: &[u8]) -> Result<Vec<u32>, String> {
    if !bytes.len().is_multiple_of(4) || bytes.len() < 20 {
        return Err(format!("{} bytes is not a SPIR-V module", bytes.len()));
    }
    let words: Vec<u32> =
        bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if words[0] != 0x0723_0203 {
        return Err(format!("bad SPIR-V magic number {:#010x}", words[0]));
    }
    Ok(words)
}

impl Kernel {
    /// Builds the pipeline for entry point `main` of `words`.
    pub fn new(dev: &Arc<Device>, name: &str, words: &[u32]) -> Result<Kernel, VulkanError> {
        Kernel::with_entry(dev, name, words, "main")
    }

    /// Builds the pipeline for entry point `entry` of `words`.
    pub fn with_entry(
        dev: &Arc<Device>,
        name: &str,
        words: &[u32],
        entry: &str,
    ) -> Result<Kernel, VulkanError> {
        Kernel::build(dev, name, words, entry, &[], false)
    }

    /// Builds the pipeline of built-in kernel `name` (shaders/`name`.comp, entry point `main`)
    /// from `words` with specialization constant `i` (a 32-bit value: uint, int, float bits or
    /// a bool as 0/1) set to `spec[i]`.
    pub fn specialized(
        dev: &Arc<Device>,
        name: &str,
        words: &[u32],
        spec: &[u32],
    ) -> Result<Kernel, VulkanError> {
        Kernel::build(dev, name, words, "main", spec, true)
    }

    fn build(
        dev: &Arc<Device>,
        name: &str,
        words: &[u32],
        entry: &str,
        spec: &[u32],
        built_in: bool,
    ) -> Result<Kernel, VulkanError> {
        let fail = |reason: String| VulkanError::PipelineCreation { kernel: name.to_string(), reason };
        let entry = std::ffi::CString::new(entry)
            .map_err(|_| fail("the entry point name contains a NUL byte".into()))?;
        let interface = reflect(words).map_err(fail)?;
        let d = dev.raw();
        let bindings: Vec<vk::DescriptorSetLayoutBinding> = interface
            .bindings
            .iter()
            .map(|&b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let push_descriptors = push_descriptor_layout(dev, bindings.len());
        let mut sinfo = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        if push_descriptors {
            sinfo = sinfo.flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR);
        }
        // SAFETY: d is live; sinfo borrows `bindings`, alive across the call.
        let set_layout = unsafe { d.create_descriptor_set_layout(&sinfo, None) }
            .map_err(|e| fail(format!("vkCreateDescriptorSetLayout: {e}")))?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(interface.push_bytes)];
        let set_layouts = [set_layout];
        let mut linfo = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        if interface.push_bytes > 0 {
            linfo = linfo.push_constant_ranges(&ranges);
        }
        // SAFETY: as above.
        let layout = match unsafe { d.create_pipeline_layout(&linfo, None) } {
            Ok(l) => l,
            Err(e) => {
                // SAFETY: just created, unused.
                unsafe { d.destroy_descriptor_set_layout(set_layout, None) };
                return Err(fail(format!("vkCreatePipelineLayout: {e}")));
            }
        };
        let minfo = vk::ShaderModuleCreateInfo::default().code(words);
        // SAFETY: words is a SPIR-V module (magic checked by the reflection parse).
        let module = match unsafe { d.create_shader_module(&minfo, None) } {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: just created, unused.
                unsafe {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                }
                return Err(fail(format!("vkCreateShaderModule: {e}")));
            }
        };
        let entries: Vec<vk::SpecializationMapEntry> = (0..spec.len() as u32)
            .map(|i| vk::SpecializationMapEntry { constant_id: i, offset: 4 * i, size: 4 })
            .collect();
        let spec_info =
            vk::SpecializationInfo::default().map_entries(&entries).data(bytemuck::cast_slice(spec));
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(&entry);
        if !spec.is_empty() {
            stage = stage.specialization_info(&spec_info);
        }
        let mut cinfo = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout)];
        if dev.pipeline_stats.is_some() {
            cinfo[0] = cinfo[0].flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR);
        }
        // SAFETY: module and layout are live; the pipeline cache is the device's.
        let made = unsafe { d.create_compute_pipelines(dev.pipeline_cache, &cinfo, None) };
        // SAFETY: the module is no longer needed once the pipeline exists (or failed).
        unsafe { d.destroy_shader_module(module, None) };
        let pipeline = match made {
            Ok(p) => p[0],
            Err((_, e)) => {
                // SAFETY: just created, unused.
                unsafe {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                }
                return Err(match e {
                    vk::Result::ERROR_DEVICE_LOST => VulkanError::DeviceLost("vkCreateComputePipelines"),
                    vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => {
                        VulkanError::OutOfDeviceMemory("vkCreateComputePipelines")
                    }
                    e => fail(format!("vkCreateComputePipelines: {e}")),
                });
            }
        };
        if let Some(ext) = &dev.pipeline_stats {
            // The tier says what the machine code may hold: scripts/nvidia-sass.py --stats
            // checks that no strict pipeline has a fused multiply-add.
            let tier = match built_in {
                false => "user",
                true if super::kernels::fast_only(name) => "fast",
                true => "strict",
            };
            eprintln!("adeadvm: pipeline {name} {spec:?} ({tier}): {}", statistics(ext, pipeline));
        }
        Ok(Kernel {
            dev: dev.clone(),
            name: name.to_string(),
            interface,
            set_layout,
            push_descriptors,
            layout,
            pipeline,
        })
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The reflected interface.
    pub fn interface(&self) -> &Interface {
        &self.interface
    }
}

/// Whether a kernel with `bindings` storage buffers gets a push-descriptor set layout: where
/// the device uses VK_KHR_push_descriptor and one push can set them all (the recorder then
/// pushes its bindings; otherwise it allocates a descriptor set).
fn push_descriptor_layout(dev: &Device, bindings: usize) -> bool {
    dev.push_descriptor.is_some() && bindings <= super::device::MIN_MAX_PUSH_DESCRIPTORS
}

/// The driver's statistics of every executable of `pipeline` (built with CAPTURE_STATISTICS),
/// as `name=value` pairs.
fn statistics(ext: &ash::khr::pipeline_executable_properties::Device, pipeline: vk::Pipeline) -> String {
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: pipeline is live and was created with CAPTURE_STATISTICS on a device with the
    // extension and its pipelineExecutableInfo feature enabled.
    let executables = match unsafe { ext.get_pipeline_executable_properties(&info) } {
        Ok(e) => e.len() as u32,
        Err(e) => return format!("no statistics ({e})"),
    };
    let mut out = Vec::new();
    for i in 0..executables {
        let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i);
        // SAFETY: as above; i is below the executable count the driver reported.
        let stats = unsafe { ext.get_pipeline_executable_statistics(&info) }.unwrap_or_default();
        for s in stats {
            let name = s.name_as_c_str().map_or_else(|_| "?".into(), |n| n.to_string_lossy().into_owned());
            // SAFETY: `format` says which member of the union the driver wrote.
            let value = unsafe {
                match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (s.value.b32 != 0).to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                    _ => s.value.f64.to_string(),
                }
            };
            out.push(format!("{name}={value}"));
        }
    }
    out.join(", ")
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if self.dev.is_hung() {
            // Work that did not finish in time may still use it: leaked (see Device::mark_hung).
            return;
        }
        let d = self.dev.raw();
        // SAFETY: every submit using the pipeline waited on its fence, so nothing in flight uses
        // these objects; destroyed in reverse order of creation.
        unsafe {
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
