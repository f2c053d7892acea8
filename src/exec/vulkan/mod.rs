//! The Vulkan compute executor (first slice of issue 5): device, buffers, pipelines reflected from
//! SPIR-V, and the strict-tier elementwise kernels, which give the CPU reference's bits.
//!
//! ash is loaded at run time, so a machine without Vulkan still runs everything on the CPU;
//! [`devices`] says why Vulkan is unavailable there.

mod buffer;
mod device;
mod error;
mod kernels;
mod pipeline;
mod reflect;

use std::sync::Arc;

use ash::vk;

pub use buffer::Buffer;
pub use device::{devices, Device, DeviceInfo, LIBRARY_ENV};
pub use error::VulkanError;
pub use kernels::{binary_op_code, unary_op_code, SHADERS};
pub use pipeline::{spirv_words, Kernel};
pub use reflect::{reflect, Interface};

use crate::exec::cpu::reference::{Binary, Unary};
use error::check;

/// Threads per workgroup of the elementwise kernels (`local_size_x` in shaders/*.comp).
const LOCAL_SIZE: u32 = 256;

/// Runs single kernels: one command buffer, one submit, one fence wait per call.
pub struct VulkanExec {
    unary: Kernel,
    binary: Kernel,
    binary_scalar: Kernel,
    dev: Arc<Device>,
}

impl std::fmt::Debug for VulkanExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanExec").field("device", &self.dev.info.name).finish()
    }
}

impl VulkanExec {
    /// Opens the default device (see [`Device::open`]) and builds the kernels.
    pub fn new() -> Result<VulkanExec, VulkanError> {
        VulkanExec::with_device(Arc::new(Device::open()?))
    }

    /// Builds the kernels on an open device.
    pub fn with_device(dev: Arc<Device>) -> Result<VulkanExec, VulkanError> {
        let k = |name: &str| -> Result<Kernel, VulkanError> {
            let bytes = kernels::spirv(name).ok_or_else(|| VulkanError::PipelineCreation {
                kernel: name.into(),
                reason: "no such embedded shader".into(),
            })?;
            let words = spirv_words(bytes)
                .map_err(|reason| VulkanError::PipelineCreation { kernel: name.into(), reason })?;
            Kernel::new(&dev, name, &words)
        };
        Ok(VulkanExec { unary: k("unary")?, binary: k("binary")?, binary_scalar: k("binary_scalar")?, dev })
    }

    /// The device the kernels run on.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// out = op(x) elementwise, strict tier.
    pub fn unary(&self, op: Unary, x: &[f32]) -> Result<Vec<f32>, VulkanError> {
        self.run(&self.unary, &[x], x.len(), [unary_op_code(op), 0])
    }

    /// out = op(a, b) elementwise over equal shapes, strict tier.
    pub fn binary(&self, op: Binary, a: &[f32], b: &[f32]) -> Result<Vec<f32>, VulkanError> {
        if a.len() != b.len() {
            return Err(VulkanError::Invalid(format!(
                "binary operands of {} and {} elements",
                a.len(),
                b.len()
            )));
        }
        self.run(&self.binary, &[a, b], a.len(), [binary_op_code(op), 0])
    }

    /// out = op(a, s) for a scalar immediate, strict tier.
    pub fn binary_scalar(&self, op: Binary, a: &[f32], s: f32) -> Result<Vec<f32>, VulkanError> {
        self.run(&self.binary_scalar, &[a], a.len(), [binary_op_code(op), s.to_bits()])
    }

    /// One dispatch of `kernel` over `n` elements: inputs at bindings 0.., the output at the last
    /// binding; push constants {n, op, scalar bits}.
    fn run(
        &self,
        kernel: &Kernel,
        inputs: &[&[f32]],
        n: usize,
        push: [u32; 2],
    ) -> Result<Vec<f32>, VulkanError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let nbind = inputs.len() + 1;
        if kernel.interface().bindings != (0..nbind as u32).collect::<Vec<_>>()
            || kernel.interface().push_bytes != 12
        {
            return Err(VulkanError::Invalid(format!(
                "kernel {} has bindings {:?} and {} push-constant bytes; expected 0..{nbind} and 12",
                kernel.name(),
                kernel.interface().bindings,
                kernel.interface().push_bytes
            )));
        }
        let bytes = n as u64 * 4;
        let info = &self.dev.info;
        let n32 =
            u32::try_from(n).map_err(|_| VulkanError::Invalid(format!("{n} elements exceed a u32 count")))?;
        if bytes > u64::from(info.max_storage_buffer_range) {
            return Err(VulkanError::Invalid(format!(
                "{bytes} bytes exceed the device's maxStorageBufferRange ({})",
                info.max_storage_buffer_range
            )));
        }
        let mut bufs = Vec::with_capacity(nbind);
        for x in inputs {
            let mut b = Buffer::new(&self.dev, bytes)?;
            b.write(bytemuck::cast_slice(x))?;
            bufs.push(b);
        }
        let out = Buffer::new(&self.dev, bytes)?;

        let d = self.dev.raw();
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: nbind as u32,
        }];
        let pinfo = vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&sizes);
        // SAFETY: d is live; pinfo borrows `sizes`.
        let pool =
            unsafe { d.create_descriptor_pool(&pinfo, None) }.map_err(check("vkCreateDescriptorPool"))?;
        let result = (|| {
            let layouts = [kernel.set_layout];
            let ainfo = vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
            // SAFETY: pool has room for one set of this layout.
            let set =
                unsafe { d.allocate_descriptor_sets(&ainfo) }.map_err(check("vkAllocateDescriptorSets"))?[0];
            let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bufs
                .iter()
                .chain(std::iter::once(&out))
                .map(|b| [vk::DescriptorBufferInfo { buffer: b.handle(), offset: 0, range: vk::WHOLE_SIZE }])
                .collect();
            let writes: Vec<vk::WriteDescriptorSet> = infos
                .iter()
                .enumerate()
                .map(|(i, bi)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(bi)
                })
                .collect();
            // SAFETY: set and buffers are live; `infos` outlives the call.
            unsafe { d.update_descriptor_sets(&writes, &[]) };
            let mut pc = [0u8; 12];
            pc[0..4].copy_from_slice(&n32.to_le_bytes());
            pc[4..8].copy_from_slice(&push[0].to_le_bytes());
            pc[8..12].copy_from_slice(&push[1].to_le_bytes());
            let groups = n32.div_ceil(LOCAL_SIZE).min(info.max_compute_workgroup_count[0]).clamp(1, 65535);
            self.submit(|cmd| {
                for b in &bufs {
                    b.record_upload(cmd);
                }
                // SAFETY: cmd is recording; every handle used is live until the fence signals.
                unsafe {
                    barrier(
                        d,
                        cmd,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_WRITE,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::AccessFlags::SHADER_READ,
                    );
                    d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
                    d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        kernel.layout,
                        0,
                        &[set],
                        &[],
                    );
                    d.cmd_push_constants(cmd, kernel.layout, vk::ShaderStageFlags::COMPUTE, 0, &pc);
                    d.cmd_dispatch(cmd, groups, 1, 1);
                    barrier(
                        d,
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::AccessFlags::SHADER_WRITE,
                        vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::HOST,
                        vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::HOST_READ,
                    );
                }
                out.record_download(cmd);
                // SAFETY: as above.
                unsafe {
                    barrier(
                        d,
                        cmd,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_WRITE,
                        vk::PipelineStageFlags::HOST,
                        vk::AccessFlags::HOST_READ,
                    );
                }
            })
        })();
        // SAFETY: the submit waited on its fence (or never happened), so the set is unused.
        unsafe { d.destroy_descriptor_pool(pool, None) };
        result?;
        let mut v = vec![0f32; n];
        out.read(bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }

    /// Records one command buffer with `record`, submits it and waits for its fence.
    fn submit(&self, record: impl FnOnce(vk::CommandBuffer)) -> Result<(), VulkanError> {
        let d = self.dev.raw();
        let pool = self.dev.command_pool.lock().unwrap_or_else(|p| p.into_inner());
        let ainfo = vk::CommandBufferAllocateInfo::default()
            .command_pool(*pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is locked for the whole recording and submission.
        let cmd =
            unsafe { d.allocate_command_buffers(&ainfo) }.map_err(check("vkAllocateCommandBuffers"))?[0];
        // SAFETY: fence creation takes only the info struct.
        let fence = match unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) } {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: cmd is not in use.
                unsafe { d.free_command_buffers(*pool, &[cmd]) };
                return Err(check("vkCreateFence")(e));
            }
        };
        let res = (|| {
            let begin =
                vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: cmd was just allocated from the locked pool.
            unsafe { d.begin_command_buffer(cmd, &begin) }.map_err(check("vkBeginCommandBuffer"))?;
            record(cmd);
            // SAFETY: cmd is recording.
            unsafe { d.end_command_buffer(cmd) }.map_err(check("vkEndCommandBuffer"))?;
            let cmds = [cmd];
            let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
            {
                let queue = self.dev.queue.lock().unwrap_or_else(|p| p.into_inner());
                // SAFETY: the queue is externally synchronized by its lock; cmd is executable.
                unsafe { d.queue_submit(*queue, &submit, fence) }.map_err(check("vkQueueSubmit"))?;
            }
            // SAFETY: fence was submitted above.
            unsafe { d.wait_for_fences(&[fence], true, u64::MAX) }.map_err(check("vkWaitForFences"))
        })();
        // SAFETY: the fence has signalled or the submission failed: neither object is in use.
        // After a device loss the objects may still be destroyed.
        unsafe {
            d.destroy_fence(fence, None);
            d.free_command_buffers(*pool, &[cmd]);
        }
        res
    }
}

/// A global memory barrier between two stages.
///
/// # Safety
/// `cmd` must be a command buffer of `d` in the recording state.
unsafe fn barrier(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src_stage: vk::PipelineStageFlags,
    src: vk::AccessFlags,
    dst_stage: vk::PipelineStageFlags,
    dst: vk::AccessFlags,
) {
    let mb = [vk::MemoryBarrier::default().src_access_mask(src).dst_access_mask(dst)];
    // SAFETY: the caller guarantees cmd is recording on d.
    unsafe { d.cmd_pipeline_barrier(cmd, src_stage, dst_stage, vk::DependencyFlags::empty(), &mb, &[], &[]) };
}
