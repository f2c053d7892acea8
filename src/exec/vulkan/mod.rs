//! The Vulkan compute executor (first slice of issue 5): device, buffers, pipelines reflected from
//! SPIR-V, and the strict-tier elementwise kernels, which give the CPU reference's bits.
//!
//! ash is loaded at run time, so a machine without Vulkan still runs everything on the CPU;
//! [`devices`] says why Vulkan is unavailable there.

mod buffer;
pub mod coopmat2;
mod device;
mod error;
mod fault;
mod kernels;
pub mod ops;
mod pipeline;
mod reflect;
mod stream;

use std::sync::Arc;

pub use buffer::{Buffer, Slice};
pub use device::{any_device_hung, devices, Device, DeviceInfo, LIBRARY_ENV, PUSH_DESCRIPTORS_ENV};
pub use error::VulkanError;
pub use fault::FAULT_ENV;
pub use kernels::{binary_op_code, compare_op_code, fast_only, unary_op_code, Kernels, SHADERS};
pub use pipeline::{spirv_words, Kernel};
pub use reflect::{reflect, Interface};
pub use stream::{Binding, Download, Recorder, Timestamp, MAX_BINDINGS, SUBMIT_ENV};

use crate::exec::cpu::reference::{Binary, Unary};

/// Threads per workgroup of the elementwise kernels (`local_size_x` in shaders/*.comp).
pub const LOCAL_SIZE: u32 = 256;

/// Workgroups for a grid-stride loop over `n` items with `local` threads per group: enough to
/// cover `n`, at most what the device allows in x (the loop covers the rest), at least one.
pub fn groups_for(dev: &Device, n: u64, local: u32) -> [u32; 3] {
    let max = u64::from(dev.info.max_compute_workgroup_count[0].min(65535));
    [n.div_ceil(u64::from(local)).clamp(1, max) as u32, 1, 1]
}

/// A device with its kernels, and one-shot helpers that move host data through them (tests,
/// `adeadvm bench`). The VM records into its own [`Recorder`] instead.
pub struct VulkanExec {
    kernels: Kernels,
    dev: Arc<Device>,
}

impl std::fmt::Debug for VulkanExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanExec").field("device", &self.dev.info.name).finish()
    }
}

impl VulkanExec {
    /// Opens the default device (see [`Device::open`]).
    pub fn new() -> Result<VulkanExec, VulkanError> {
        VulkanExec::with_device(Arc::new(Device::open()?))
    }

    /// Opens device `index`, or the default device when None (see [`Device::open_index`]).
    pub fn open_index(index: Option<usize>) -> Result<VulkanExec, VulkanError> {
        VulkanExec::with_device(Arc::new(Device::open_index(index)?))
    }

    /// Kernels on an open device (pipelines are built on first use).
    pub fn with_device(dev: Arc<Device>) -> Result<VulkanExec, VulkanError> {
        Ok(VulkanExec { kernels: Kernels::new(&dev), dev })
    }

    /// The device the kernels run on.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// The kernel registry.
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// A new device buffer holding `bytes` (the upload is recorded in `rec`).
    pub fn upload(&self, rec: &mut Recorder, bytes: &[u8]) -> Result<Slice, VulkanError> {
        let s = self.alloc(bytes.len() as u64)?;
        rec.upload(&s, bytes)?;
        Ok(s)
    }

    /// A new device buffer of `len` bytes (contents unspecified).
    pub fn alloc(&self, len: u64) -> Result<Slice, VulkanError> {
        Arc::new(Buffer::new(&self.dev, len.div_ceil(4).max(1) * 4)?).slice(0, len)
    }

    /// Downloads `s` now (flushing `rec`) as bytes.
    pub fn fetch(&self, rec: &mut Recorder, s: &Slice) -> Result<Vec<u8>, VulkanError> {
        let d = rec.download(s)?;
        rec.flush()?;
        let mut out = vec![0u8; s.len as usize];
        rec.read(&d, &mut out)?;
        rec.clear_downloads();
        Ok(out)
    }

    /// out = op(x) elementwise, strict tier.
    pub fn unary(&self, op: Unary, x: &[f32]) -> Result<Vec<f32>, VulkanError> {
        self.elementwise("unary", &[x], x.len(), [unary_op_code(op), 0])
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
        self.binary_broadcast(op, a, &[a.len()], b, &[b.len()], &[a.len()])
    }

    /// out = op(a, b) with numpy broadcasting (shapes as in [`ops::data::binary`]), strict tier.
    pub fn binary_broadcast(
        &self,
        op: Binary,
        a: &[f32],
        a_shape: &[usize],
        b: &[f32],
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Vec<f32>, VulkanError> {
        let n: usize = out_shape.iter().product();
        if n == 0 {
            return Ok(Vec::new());
        }
        for (what, x, shape) in [("a", a, a_shape), ("b", b, b_shape)] {
            if x.len() != shape.iter().product::<usize>() {
                return Err(VulkanError::Invalid(format!(
                    "binary operand {what} has {} elements, not the {} of shape {shape:?}",
                    x.len(),
                    shape.iter().product::<usize>()
                )));
            }
        }
        let mut rec = Recorder::new(&self.dev)?;
        let out = self.alloc(n as u64 * 4)?;
        let sa = self.upload(&mut rec, bytemuck::cast_slice(a))?;
        let sb = self.upload(&mut rec, bytemuck::cast_slice(b))?;
        ops::data::binary(&self.kernels, &mut rec, op, &out, &sa, a_shape, &sb, b_shape, out_shape)?;
        let bytes = self.fetch(&mut rec, &out)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// out = op(a, s) for a scalar immediate, strict tier.
    pub fn binary_scalar(&self, op: Binary, a: &[f32], s: f32) -> Result<Vec<f32>, VulkanError> {
        self.elementwise("binary_scalar", &[a], a.len(), [binary_op_code(op), s.to_bits()])
    }

    /// One dispatch of an elementwise kernel: output at binding 0, inputs at 1..; push
    /// constants {n, op, scalar bits}.
    fn elementwise(
        &self,
        name: &'static str,
        inputs: &[&[f32]],
        n: usize,
        push: [u32; 2],
    ) -> Result<Vec<f32>, VulkanError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let n32 =
            u32::try_from(n).map_err(|_| VulkanError::Invalid(format!("{n} elements exceed a u32 count")))?;
        let kernel = self.kernels.get(name)?;
        let mut rec = Recorder::new(&self.dev)?;
        let out = self.alloc(n as u64 * 4)?;
        let mut bindings = vec![Binding::write(&out)];
        for x in inputs {
            bindings.push(Binding::read(&self.upload(&mut rec, bytemuck::cast_slice(x))?));
        }
        rec.dispatch(
            &kernel,
            &bindings,
            &[n32, push[0], push[1]],
            groups_for(&self.dev, n as u64, LOCAL_SIZE),
        )?;
        let bytes = self.fetch(&mut rec, &out)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}
