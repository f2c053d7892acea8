//! Storage buffers: device-local where the device has dedicated memory (with a host-visible
//! staging buffer for uploads and downloads), or directly host-visible on UMA / lavapipe.

use std::sync::Arc;

use ash::vk;
use vk_mem::Alloc;

use super::device::Device;
use super::error::{check, VulkanError};

/// One VMA allocation with its buffer.
struct Raw {
    buffer: vk::Buffer,
    alloc: vk_mem::Allocation,
    /// Persistently mapped pointer, null when the memory is not host-visible.
    mapped: *mut u8,
}

impl Raw {
    fn new(
        dev: &Device,
        size: u64,
        usage: vk::BufferUsageFlags,
        mem: vk_mem::MemoryUsage,
        flags: vk_mem::AllocationCreateFlags,
    ) -> Result<Raw, VulkanError> {
        let binfo =
            vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        let ainfo = vk_mem::AllocationCreateInfo { usage: mem, flags, ..Default::default() };
        // SAFETY: the allocator and device are live (dev is borrowed); binfo is a valid, non-zero-sized buffer.
        let (buffer, alloc) =
            unsafe { dev.allocator.create_buffer(&binfo, &ainfo) }.map_err(check("vmaCreateBuffer"))?;
        let mapped = dev.allocator.get_allocation_info(&alloc).mapped_data.cast::<u8>();
        Ok(Raw { buffer, alloc, mapped })
    }

    fn destroy(&mut self, dev: &Device) {
        // SAFETY: the buffer and allocation came from this allocator and no submitted work uses
        // them any more (every submit waits on its fence before returning).
        unsafe { dev.allocator.destroy_buffer(self.buffer, &mut self.alloc) };
    }
}

/// A storage buffer of `size` bytes.
pub struct Buffer {
    dev: Arc<Device>,
    size: u64,
    main: Raw,
    /// Present when `main` is not host-visible.
    staging: Option<Raw>,
}

// SAFETY: the raw mapped pointers are only dereferenced through &mut self or while the caller
// holds the buffer exclusively; VMA allocations may be used from any thread.
unsafe impl Send for Buffer {}
// SAFETY: shared access only reads handles; writes through `mapped` need &mut self.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A storage buffer usable as a transfer source and destination.
    pub fn new(dev: &Arc<Device>, size: u64) -> Result<Buffer, VulkanError> {
        if size == 0 {
            return Err(VulkanError::Invalid("a buffer of zero bytes".into()));
        }
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let flags = vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM
            | vk_mem::AllocationCreateFlags::HOST_ACCESS_ALLOW_TRANSFER_INSTEAD
            | vk_mem::AllocationCreateFlags::MAPPED;
        let mut main = Raw::new(dev, size, usage, vk_mem::MemoryUsage::AutoPreferDevice, flags)?;
        let staging = if main.mapped.is_null() {
            let s = Raw::new(
                dev,
                size,
                vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
                vk_mem::MemoryUsage::AutoPreferHost,
                vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM | vk_mem::AllocationCreateFlags::MAPPED,
            );
            match s {
                Ok(s) => Some(s),
                Err(e) => {
                    main.destroy(dev);
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok(Buffer { dev: dev.clone(), size, main, staging })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether uploads and downloads go through a staging buffer (device-local memory).
    pub fn is_staged(&self) -> bool {
        self.staging.is_some()
    }

    pub(crate) fn handle(&self) -> vk::Buffer {
        self.main.buffer
    }

    fn host(&self) -> &Raw {
        self.staging.as_ref().unwrap_or(&self.main)
    }

    /// Writes `bytes` at the start of the host-visible side. A staged buffer also needs
    /// `record_upload` in the command buffer that uses it.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), VulkanError> {
        if bytes.len() as u64 > self.size {
            return Err(VulkanError::Invalid(format!(
                "{} bytes into a buffer of {}",
                bytes.len(),
                self.size
            )));
        }
        let host = self.host();
        // SAFETY: `mapped` points at a live mapping of at least `size` bytes; no GPU work uses
        // the buffer now (submits wait on their fences) and &mut self excludes other writers.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), host.mapped, bytes.len()) };
        self.dev
            .allocator
            .flush_allocation(&host.alloc, 0, bytes.len() as u64)
            .map_err(check("vmaFlushAllocation"))
    }

    /// Reads `out.len()` bytes from the host-visible side (after `record_download` and the fence).
    pub fn read(&self, out: &mut [u8]) -> Result<(), VulkanError> {
        if out.len() as u64 > self.size {
            return Err(VulkanError::Invalid(format!("{} bytes from a buffer of {}", out.len(), self.size)));
        }
        let host = self.host();
        self.dev
            .allocator
            .invalidate_allocation(&host.alloc, 0, out.len() as u64)
            .map_err(check("vmaInvalidateAllocation"))?;
        // SAFETY: as in write; the GPU work that wrote it has completed (fence waited).
        unsafe { std::ptr::copy_nonoverlapping(host.mapped, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Records staging -> device copy (no-op for host-visible buffers). Follow with a barrier.
    pub(crate) fn record_upload(&self, cmd: vk::CommandBuffer) {
        if let Some(s) = &self.staging {
            let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: self.size }];
            // SAFETY: cmd is recording; both buffers are live and at least `size` bytes.
            unsafe { self.dev.raw().cmd_copy_buffer(cmd, s.buffer, self.main.buffer, &region) };
        }
    }

    /// Records device -> staging copy (no-op for host-visible buffers). Precede with a barrier.
    pub(crate) fn record_download(&self, cmd: vk::CommandBuffer) {
        if let Some(s) = &self.staging {
            let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: self.size }];
            // SAFETY: as in record_upload.
            unsafe { self.dev.raw().cmd_copy_buffer(cmd, self.main.buffer, s.buffer, &region) };
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(mut s) = self.staging.take() {
            s.destroy(&self.dev);
        }
        self.main.destroy(&self.dev);
    }
}
