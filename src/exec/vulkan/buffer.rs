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
        if dev.is_hung() {
            // Work that did not finish in time may still use it: leaked (see Device::mark_hung).
            return;
        }
        // SAFETY: the buffer and allocation came from this allocator and no submitted work uses
        // them any more (every submit waits on its fence before returning).
        unsafe { dev.allocator.destroy_buffer(self.buffer, &mut self.alloc) };
    }
}

/// A storage buffer of `size` bytes in device memory (device-local where the device has it).
/// Data moves in and out through a [`super::Recorder`]'s staging memory.
pub struct Buffer {
    dev: Arc<Device>,
    size: u64,
    main: Raw,
}

// SAFETY: a Buffer holds only handles (its memory is never mapped); VMA allocations may be
// used from any thread.
unsafe impl Send for Buffer {}
// SAFETY: shared access only reads handles.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A storage buffer usable as a transfer source and destination.
    pub fn new(dev: &Arc<Device>, size: u64) -> Result<Buffer, VulkanError> {
        if size == 0 {
            return Err(VulkanError::Invalid("a buffer of zero bytes".into()));
        }
        if super::fault::fail_allocation() {
            return Err(super::error::map_result("vmaCreateBuffer", vk::Result::ERROR_OUT_OF_DEVICE_MEMORY));
        }
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let main = Raw::new(
            dev,
            size,
            usage,
            vk_mem::MemoryUsage::AutoPreferDevice,
            vk_mem::AllocationCreateFlags::empty(),
        )?;
        Ok(Buffer { dev: dev.clone(), size, main })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn handle(&self) -> vk::Buffer {
        self.main.buffer
    }

    /// `len` bytes at byte `offset`, for a binding or a copy. `offset` must be a multiple of 256
    /// (the largest minStorageBufferOffsetAlignment Vulkan allows); a binding covers `len`
    /// rounded up to whole 4-byte words (at least one), which must lie inside the buffer.
    pub fn slice(self: &Arc<Self>, offset: u64, len: u64) -> Result<Slice, VulkanError> {
        let words = len.div_ceil(4).max(1) * 4;
        if !offset.is_multiple_of(256) || offset.checked_add(words).is_none_or(|end| end > self.size) {
            return Err(VulkanError::Invalid(format!(
                "bytes {offset}..{} of a buffer of {} (offsets must be multiples of 256)",
                offset.saturating_add(words),
                self.size
            )));
        }
        Ok(Slice { buf: self.clone(), offset, len })
    }

    /// The whole buffer.
    pub fn whole(self: &Arc<Self>) -> Slice {
        Slice { buf: self.clone(), offset: 0, len: self.size }
    }
}

/// A byte range of a [`Buffer`]; holds the buffer alive until the work using it has finished.
#[derive(Clone)]
pub struct Slice {
    pub(crate) buf: Arc<Buffer>,
    /// Byte offset (a multiple of 256).
    pub offset: u64,
    /// Bytes of tensor data.
    pub len: u64,
}

impl std::fmt::Debug for Slice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slice({:?} {}+{})", self.buf.main.buffer, self.offset, self.len)
    }
}

impl Slice {
    /// Bytes a descriptor binding covers: whole words, at least one.
    pub(crate) fn range(&self) -> u64 {
        self.len.div_ceil(4).max(1) * 4
    }
    /// The byte range it covers in its buffer, for dependency tracking.
    pub(crate) fn span(&self) -> (vk::Buffer, u64, u64) {
        (self.buf.handle(), self.offset, self.offset + self.range())
    }
    /// The buffer it lies in.
    pub fn buffer(&self) -> &Arc<Buffer> {
        &self.buf
    }
}

/// Host-visible, persistently mapped memory for staging uploads and downloads.
pub(crate) struct HostBuffer {
    dev: Arc<Device>,
    raw: Raw,
    pub(crate) size: u64,
}

// SAFETY: as for Buffer: the mapping is only written through &mut self and read after the
// fence of the work that wrote it.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    pub(crate) fn new(dev: &Arc<Device>, size: u64) -> Result<HostBuffer, VulkanError> {
        let raw = Raw::new(
            dev,
            size.max(4),
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            vk_mem::MemoryUsage::AutoPreferHost,
            vk_mem::AllocationCreateFlags::HOST_ACCESS_RANDOM | vk_mem::AllocationCreateFlags::MAPPED,
        )?;
        if raw.mapped.is_null() {
            let mut raw = raw;
            raw.destroy(dev);
            return Err(VulkanError::Invalid("the staging memory is not host-visible".into()));
        }
        Ok(HostBuffer { dev: dev.clone(), raw, size })
    }

    pub(crate) fn handle(&self) -> vk::Buffer {
        self.raw.buffer
    }

    /// Copies `bytes` to byte `offset` and flushes them for the device.
    pub(crate) fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), VulkanError> {
        debug_assert!(offset + bytes.len() as u64 <= self.size);
        // SAFETY: the mapping holds `size` bytes and the range lies inside it (the staging ring
        // hands out ranges within its chunks); no GPU work reads this range before the submit.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.raw.mapped.add(offset as usize), bytes.len())
        };
        self.dev
            .allocator
            .flush_allocation(&self.raw.alloc, offset, bytes.len() as u64)
            .map_err(check("vmaFlushAllocation"))
    }

    /// Copies `out.len()` bytes from byte `offset`, after the work that wrote them finished.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), VulkanError> {
        debug_assert!(offset + out.len() as u64 <= self.size);
        self.dev
            .allocator
            .invalidate_allocation(&self.raw.alloc, offset, out.len() as u64)
            .map_err(check("vmaInvalidateAllocation"))?;
        // SAFETY: as in write; the fence of the copy into this range has signalled.
        unsafe {
            std::ptr::copy_nonoverlapping(self.raw.mapped.add(offset as usize), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        self.raw.destroy(&self.dev);
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.main.destroy(&self.dev);
    }
}
