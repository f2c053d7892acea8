//! Recording GPU work: dispatches, uploads and downloads go into one command buffer, with a
//! barrier only where a command touches bytes an earlier command of the batch wrote (or writes
//! bytes one read), and are submitted together by [`Recorder::flush`].
//!
//! Invariants:
//! - Every buffer a recorded command uses is held (an `Arc` in its [`Slice`]) until the batch's
//!   fence has signalled, so nothing is freed under the GPU.
//! - Uploads are staged and copied in stream order, so a host write never races a command
//!   recorded before it.
//! - A [`Download`] is readable after the flush that ran it, until [`Recorder::clear_downloads`].
//! - A batch that fills the descriptor pool is flushed on its own; results do not change.

use std::sync::Arc;
use std::time::Duration;

use ash::vk;

use super::buffer::{HostBuffer, Slice};
use super::device::Device;
use super::error::{check, VulkanError};
use super::pipeline::Kernel;

/// Dispatches per batch before the recorder flushes on its own (the descriptor pool's size).
const BATCH_DISPATCHES: u32 = 2048;
/// Storage-buffer bindings one dispatch may have.
pub const MAX_BINDINGS: u32 = 8;
/// Smallest staging chunk.
const STAGING_CHUNK: u64 = 4 << 20;
/// Timestamps one batch may write (more are skipped: [`Recorder::timestamp`] returns None).
const BATCH_TIMESTAMPS: u32 = 4096;

/// A GPU timestamp recorded by [`Recorder::timestamp`], readable after its batch ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamp {
    batch: u64,
    query: u32,
}

/// One binding of a dispatch: a slice and whether the kernel writes it.
#[derive(Clone, Debug)]
pub struct Binding {
    pub slice: Slice,
    pub write: bool,
}

impl Binding {
    /// A binding the kernel only reads.
    pub fn read(slice: &Slice) -> Binding {
        Binding { slice: slice.clone(), write: false }
    }
    /// A binding the kernel writes (and may read).
    pub fn write(slice: &Slice) -> Binding {
        Binding { slice: slice.clone(), write: true }
    }
}

/// Where a download's bytes will be once its batch has run.
#[derive(Clone, Copy, Debug)]
pub struct Download {
    chunk: usize,
    offset: u64,
    len: u64,
    generation: u64,
}

/// Host-visible chunks handed out front to back; reset as a whole.
struct StagingRing {
    chunks: Vec<HostBuffer>,
    /// Bytes used in each chunk.
    used: Vec<u64>,
}

impl StagingRing {
    fn new() -> StagingRing {
        StagingRing { chunks: Vec::new(), used: Vec::new() }
    }

    /// Room for `len` bytes (256-aligned): (chunk, offset).
    fn alloc(&mut self, dev: &Arc<Device>, len: u64) -> Result<(usize, u64), VulkanError> {
        let len = len.max(1).div_ceil(256) * 256;
        for (i, c) in self.chunks.iter().enumerate() {
            if self.used[i] + len <= c.size {
                let off = self.used[i];
                self.used[i] += len;
                return Ok((i, off));
            }
        }
        let last = self.chunks.last().map_or(0, |c| c.size);
        let size = len.max(STAGING_CHUNK).max(last.saturating_mul(2).min(1 << 30));
        self.chunks.push(HostBuffer::new(dev, size)?);
        self.used.push(len);
        Ok((self.chunks.len() - 1, 0))
    }

    fn reset(&mut self) {
        self.used.iter_mut().for_each(|u| *u = 0);
    }
}

/// A byte range accessed since the last barrier.
#[derive(Clone, Copy)]
struct Access {
    buffer: vk::Buffer,
    start: u64,
    end: u64,
    write: bool,
}

/// Records and submits GPU work on one device. Not shared between threads; create one per VM.
pub struct Recorder {
    dev: Arc<Device>,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    descriptors: vk::DescriptorPool,
    /// Whether `cmd` is in the recording state.
    recording: bool,
    /// Dispatches (and copies) recorded in this batch.
    commands: u32,
    sets: u32,
    pending: Vec<Access>,
    /// Buffers used by recorded commands, held until the fence.
    held: Vec<Slice>,
    /// Pipelines used by recorded dispatches, held until the fence.
    held_kernels: Vec<Arc<Kernel>>,
    uploads: StagingRing,
    downloads: StagingRing,
    /// Bumped by `clear_downloads`; a Download of an older generation is refused.
    generation: u64,
    /// Whether this batch has downloads (they need a transfer -> host barrier at the end).
    has_downloads: bool,
    /// How long `flush` waits for the GPU before calling it hung.
    timeout: Duration,
    /// Barriers recorded (for tests and the profiler).
    barriers: u64,
    /// Host time spent in submissions and fence waits.
    waited: Duration,
    /// Once a submission fails the recorder refuses further work (objects may still be in use).
    poisoned: Option<String>,
    /// Timestamp queries (created on first use), written this batch, and the last batch's
    /// values in nanoseconds.
    queries: vk::QueryPool,
    queries_used: u32,
    query_ns: Vec<u64>,
    /// Batches submitted so far (names the batch a [`Timestamp`] belongs to).
    batch: u64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("commands", &self.commands).finish()
    }
}

impl Recorder {
    /// A recorder with its own command pool, fence and descriptor pool.
    pub fn new(dev: &Arc<Device>) -> Result<Recorder, VulkanError> {
        let d = dev.raw();
        let pinfo = vk::CommandPoolCreateInfo::default().queue_family_index(dev.queue_family);
        // SAFETY: d is live; the pool belongs to this recorder only.
        let pool = unsafe { d.create_command_pool(&pinfo, None) }.map_err(check("vkCreateCommandPool"))?;
        let mut r = Recorder {
            dev: dev.clone(),
            pool,
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            descriptors: vk::DescriptorPool::null(),
            recording: false,
            commands: 0,
            sets: 0,
            pending: Vec::new(),
            held: Vec::new(),
            held_kernels: Vec::new(),
            uploads: StagingRing::new(),
            downloads: StagingRing::new(),
            generation: 0,
            has_downloads: false,
            timeout: gpu_timeout(),
            barriers: 0,
            waited: Duration::ZERO,
            poisoned: None,
            queries: vk::QueryPool::null(),
            queries_used: 0,
            query_ns: Vec::new(),
            batch: 0,
        };
        // Objects created so far are destroyed by Drop if a later step fails.
        let ainfo = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: pool is live and owned here.
        r.cmd = unsafe { d.allocate_command_buffers(&ainfo) }.map_err(check("vkAllocateCommandBuffers"))?[0];
        // SAFETY: plain object creation.
        r.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(check("vkCreateFence"))?;
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: BATCH_DISPATCHES * MAX_BINDINGS,
        }];
        let dinfo = vk::DescriptorPoolCreateInfo::default().max_sets(BATCH_DISPATCHES).pool_sizes(&sizes);
        // SAFETY: plain object creation; dinfo borrows `sizes`.
        r.descriptors =
            unsafe { d.create_descriptor_pool(&dinfo, None) }.map_err(check("vkCreateDescriptorPool"))?;
        Ok(r)
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Barriers recorded since this recorder was made.
    pub fn barriers(&self) -> u64 {
        self.barriers
    }

    /// Host time spent in queue submissions and fence waits since this recorder was made.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Whether work is recorded and not yet submitted.
    pub fn has_work(&self) -> bool {
        self.commands > 0
    }

    fn check_usable(&self) -> Result<(), VulkanError> {
        match &self.poisoned {
            Some(why) => {
                Err(VulkanError::Invalid(format!("the GPU stream failed earlier ({why}); start a new run")))
            }
            None => Ok(()),
        }
    }

    fn begin(&mut self) -> Result<(), VulkanError> {
        self.check_usable()?;
        if !self.recording {
            let info =
                vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: cmd is in the initial state (fresh, or its pool was reset after the fence).
            unsafe { self.dev.raw().begin_command_buffer(self.cmd, &info) }
                .map_err(check("vkBeginCommandBuffer"))?;
            self.recording = true;
        }
        Ok(())
    }

    /// Records a barrier first if any of `accesses` depends on an access since the last one.
    fn order(&mut self, accesses: &[Access]) {
        let conflict = accesses.iter().any(|a| {
            self.pending
                .iter()
                .any(|p| p.buffer == a.buffer && p.start < a.end && a.start < p.end && (p.write || a.write))
        });
        if conflict {
            let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
            let mb = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(
                    vk::AccessFlags::SHADER_READ
                        | vk::AccessFlags::SHADER_WRITE
                        | vk::AccessFlags::TRANSFER_READ
                        | vk::AccessFlags::TRANSFER_WRITE,
                )];
            // SAFETY: cmd is recording (callers call begin first).
            unsafe {
                self.dev.raw().cmd_pipeline_barrier(
                    self.cmd,
                    stages,
                    stages,
                    vk::DependencyFlags::empty(),
                    &mb,
                    &[],
                    &[],
                )
            };
            self.barriers += 1;
            self.pending.clear();
        }
        self.pending.extend_from_slice(accesses);
    }

    /// Records one dispatch of `kernel`: `bindings[i]` at binding i, `push` as its push
    /// constants (exactly the kernel's block), `groups` workgroups.
    pub fn dispatch(
        &mut self,
        kernel: &Arc<Kernel>,
        bindings: &[Binding],
        push: &[u32],
        groups: [u32; 3],
    ) -> Result<(), VulkanError> {
        let iface = kernel.interface();
        let expected: Vec<u32> = (0..bindings.len() as u32).collect();
        if iface.bindings != expected || push.len() as u32 * 4 != iface.push_bytes {
            return Err(VulkanError::Invalid(format!(
                "kernel {} has bindings {:?} and {} push-constant bytes; given {} bindings and {} bytes",
                kernel.name(),
                iface.bindings,
                iface.push_bytes,
                bindings.len(),
                push.len() * 4
            )));
        }
        let limits = self.dev.info.max_compute_workgroup_count;
        if groups.iter().zip(limits).any(|(&g, l)| g == 0 || g > l) {
            return Err(VulkanError::Invalid(format!(
                "kernel {}: {groups:?} workgroups (the device allows 1..={limits:?})",
                kernel.name()
            )));
        }
        if self.sets == BATCH_DISPATCHES {
            self.flush()?;
        }
        self.begin()?;
        let dev = self.dev.clone();
        let d = dev.raw();
        let layouts = [kernel.set_layout];
        let ainfo =
            vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.descriptors).set_layouts(&layouts);
        // SAFETY: the pool has room (at most BATCH_DISPATCHES sets of MAX_BINDINGS each per batch).
        let set =
            unsafe { d.allocate_descriptor_sets(&ainfo) }.map_err(check("vkAllocateDescriptorSets"))?[0];
        self.sets += 1;
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = bindings
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo {
                    buffer: b.slice.buf.handle(),
                    offset: b.slice.offset,
                    range: b.slice.range(),
                }]
            })
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
        // SAFETY: the set is fresh and not in use; `infos` outlives the call.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        let accesses: Vec<Access> = bindings
            .iter()
            .map(|b| {
                let (buffer, start, end) = b.slice.span();
                Access { buffer, start, end, write: b.write }
            })
            .collect();
        self.order(&accesses);
        // SAFETY: cmd is recording; pipeline, layout and set are live until the fence (the
        // kernel is held below).
        unsafe {
            d.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
            d.cmd_bind_descriptor_sets(
                self.cmd,
                vk::PipelineBindPoint::COMPUTE,
                kernel.layout,
                0,
                &[set],
                &[],
            );
            if !push.is_empty() {
                d.cmd_push_constants(
                    self.cmd,
                    kernel.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    bytemuck::cast_slice(push),
                );
            }
            d.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
        }
        self.held.extend(bindings.iter().map(|b| b.slice.clone()));
        if !self.held_kernels.iter().any(|k| Arc::ptr_eq(k, kernel)) {
            self.held_kernels.push(kernel.clone());
        }
        self.commands += 1;
        Ok(())
    }

    /// Records a GPU timestamp taken once every command recorded before it has finished (None
    /// when the device's queue has no timestamps, or the batch has used its share). Read it
    /// with [`Recorder::elapsed`] after the batch has run.
    pub fn timestamp(&mut self) -> Result<Option<Timestamp>, VulkanError> {
        if self.dev.timestamp_bits == 0 || self.dev.info.timestamp_period <= 0.0 {
            return Ok(None);
        }
        if self.queries_used == BATCH_TIMESTAMPS {
            return Ok(None);
        }
        self.begin()?;
        let d = self.dev.raw();
        if self.queries == vk::QueryPool::null() {
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(BATCH_TIMESTAMPS);
            // SAFETY: plain object creation on a live device.
            self.queries = unsafe { d.create_query_pool(&info, None) }.map_err(check("vkCreateQueryPool"))?;
        }
        // SAFETY: cmd is recording, outside any render pass; the pool is live; a batch resets
        // its queries before the first one it writes.
        unsafe {
            if self.queries_used == 0 {
                d.cmd_reset_query_pool(self.cmd, self.queries, 0, BATCH_TIMESTAMPS);
            }
            d.cmd_write_timestamp(
                self.cmd,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.queries,
                self.queries_used,
            );
        }
        self.queries_used += 1;
        Ok(Some(Timestamp { batch: self.batch, query: self.queries_used - 1 }))
    }

    /// GPU time from `from` to `to`, both of the last batch flushed (None otherwise).
    pub fn elapsed(&self, from: Timestamp, to: Timestamp) -> Option<Duration> {
        let last = self.batch.checked_sub(1)?;
        if from.batch != last || to.batch != last {
            return None;
        }
        let (a, b) = (*self.query_ns.get(from.query as usize)?, *self.query_ns.get(to.query as usize)?);
        Some(Duration::from_nanos(b.saturating_sub(a)))
    }

    /// Reads the batch's timestamps (after its fence) into `query_ns`.
    fn read_timestamps(&mut self) -> Result<(), VulkanError> {
        self.query_ns.clear();
        if self.queries_used == 0 {
            return Ok(());
        }
        let mut ticks = vec![0u64; self.queries_used as usize];
        // SAFETY: the batch that wrote these queries has finished (its fence signalled); the
        // slice holds exactly queries_used 64-bit results.
        unsafe {
            self.dev.raw().get_query_pool_results(
                self.queries,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(check("vkGetQueryPoolResults"))?;
        let bits = self.dev.timestamp_bits;
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let period = f64::from(self.dev.info.timestamp_period);
        self.query_ns.extend(ticks.iter().map(|t| ((t & mask) as f64 * period) as u64));
        self.queries_used = 0;
        Ok(())
    }

    /// Records a copy of `bytes` into `dst` (staged; ordered after earlier commands).
    pub fn upload(&mut self, dst: &Slice, bytes: &[u8]) -> Result<(), VulkanError> {
        if bytes.len() as u64 != dst.len {
            return Err(VulkanError::Invalid(format!(
                "{} bytes uploaded into a slice of {}",
                bytes.len(),
                dst.len
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        self.begin()?;
        let (chunk, off) = self.uploads.alloc(&self.dev, dst.len)?;
        self.uploads.chunks[chunk].write(off, bytes)?;
        let (buffer, start, _) = dst.span();
        self.order(&[Access { buffer, start, end: start + dst.len, write: true }]);
        let region = [vk::BufferCopy { src_offset: off, dst_offset: dst.offset, size: dst.len }];
        // SAFETY: cmd is recording; both buffers are live until the fence (dst is held, the
        // staging chunk is reset only after a flush).
        unsafe {
            self.dev.raw().cmd_copy_buffer(self.cmd, self.uploads.chunks[chunk].handle(), buffer, &region)
        };
        self.held.push(dst.clone());
        self.commands += 1;
        Ok(())
    }

    /// Records a device-to-device copy of `src` into `dst` (equal lengths).
    pub fn copy(&mut self, src: &Slice, dst: &Slice) -> Result<(), VulkanError> {
        if src.len != dst.len {
            return Err(VulkanError::Invalid(format!("copy of {} bytes into {}", src.len, dst.len)));
        }
        if src.len == 0 {
            return Ok(());
        }
        self.begin()?;
        let (sb, ss, _) = src.span();
        let (db, ds, _) = dst.span();
        self.order(&[
            Access { buffer: sb, start: ss, end: ss + src.len, write: false },
            Access { buffer: db, start: ds, end: ds + dst.len, write: true },
        ]);
        let region = [vk::BufferCopy { src_offset: src.offset, dst_offset: dst.offset, size: src.len }];
        // SAFETY: cmd is recording; both buffers are held until the fence.
        unsafe { self.dev.raw().cmd_copy_buffer(self.cmd, sb, db, &region) };
        self.held.push(src.clone());
        self.held.push(dst.clone());
        self.commands += 1;
        Ok(())
    }

    /// Records a copy of `src` to host memory, readable with [`Recorder::read`] after the next
    /// [`Recorder::flush`].
    pub fn download(&mut self, src: &Slice) -> Result<Download, VulkanError> {
        let ticket = |chunk, offset| Download { chunk, offset, len: src.len, generation: self.generation };
        if src.len == 0 {
            return Ok(ticket(0, 0));
        }
        self.begin()?;
        let (chunk, off) = self.downloads.alloc(&self.dev, src.len)?;
        let (buffer, start, _) = src.span();
        self.order(&[Access { buffer, start, end: start + src.len, write: false }]);
        let region = [vk::BufferCopy { src_offset: src.offset, dst_offset: off, size: src.len }];
        // SAFETY: cmd is recording; src is held until the fence, the chunk until clear_downloads.
        unsafe {
            self.dev.raw().cmd_copy_buffer(self.cmd, buffer, self.downloads.chunks[chunk].handle(), &region)
        };
        self.held.push(src.clone());
        self.has_downloads = true;
        self.commands += 1;
        Ok(Download { chunk, offset: off, len: src.len, generation: self.generation })
    }

    /// The bytes of a download whose batch has been flushed.
    pub fn read(&self, d: &Download, out: &mut [u8]) -> Result<(), VulkanError> {
        if d.generation != self.generation
            || out.len() as u64 != d.len
            || (self.recording && self.has_downloads)
        {
            return Err(VulkanError::Invalid(
                "a download read before its flush, after clear_downloads, or into a buffer of another size"
                    .into(),
            ));
        }
        if d.len == 0 {
            return Ok(());
        }
        self.downloads.chunks[d.chunk].read(d.offset, out)
    }

    /// Forgets every download (their memory is reused).
    pub fn clear_downloads(&mut self) {
        self.generation += 1;
        self.downloads.reset();
    }

    /// Submits what is recorded and waits for it. Nothing recorded: returns at once.
    pub fn flush(&mut self) -> Result<(), VulkanError> {
        self.check_usable()?;
        if !self.recording {
            return Ok(());
        }
        let dev = self.dev.clone();
        let d = dev.raw();
        if self.has_downloads {
            let mb = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            // SAFETY: cmd is recording.
            unsafe {
                d.cmd_pipeline_barrier(
                    self.cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &mb,
                    &[],
                    &[],
                )
            };
        }
        let t0 = std::time::Instant::now();
        let result = self.submit_and_wait();
        self.waited += t0.elapsed();
        if let Err(e) = &result {
            // The command buffer and held buffers may still be in use by a device that failed:
            // keep them (leak rather than free under the GPU) and refuse further work.
            self.poisoned = Some(e.to_string());
            return result;
        }
        // SAFETY: the fence signalled: nothing recorded in this batch is in use any more.
        unsafe {
            d.reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
                .map_err(check("vkResetCommandPool"))?;
            d.reset_descriptor_pool(self.descriptors, vk::DescriptorPoolResetFlags::empty())
                .map_err(check("vkResetDescriptorPool"))?;
            d.reset_fences(&[self.fence]).map_err(check("vkResetFences"))?;
        }
        if self.read_timestamps().is_err() {
            // Timestamps are diagnostics: a batch that ran is not failed for want of them.
            self.query_ns.clear();
            self.queries_used = 0;
        }
        self.batch += 1;
        self.recording = false;
        self.commands = 0;
        self.sets = 0;
        self.pending.clear();
        self.held.clear();
        self.held_kernels.clear();
        self.uploads.reset();
        Ok(())
    }

    fn submit_and_wait(&mut self) -> Result<(), VulkanError> {
        let d = self.dev.raw();
        // SAFETY: cmd is recording.
        unsafe { d.end_command_buffer(self.cmd) }.map_err(check("vkEndCommandBuffer"))?;
        let cmds = [self.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        if super::fault::fail_submission() {
            return Err(check("vkQueueSubmit")(vk::Result::ERROR_DEVICE_LOST));
        }
        {
            let queue = self.dev.queue.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the queue is externally synchronized by its lock; cmd is executable.
            unsafe { d.queue_submit(*queue, &submit, self.fence) }.map_err(check("vkQueueSubmit"))?;
        }
        let nanos = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
        let waited = if super::fault::fail_wait() {
            Err(vk::Result::TIMEOUT)
        } else {
            // SAFETY: the fence was submitted above.
            unsafe { d.wait_for_fences(&[self.fence], true, nanos) }
        };
        match waited {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(VulkanError::Invalid(format!(
                "the GPU did not finish a batch within {} s (set ADEADVM_GPU_TIMEOUT to wait longer)",
                self.timeout.as_secs()
            ))),
            Err(e) => Err(check("vkWaitForFences")(e)),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let d = self.dev.raw();
        if self.poisoned.is_some() {
            // SAFETY: waiting for the device is always allowed; after it nothing is in flight
            // (or the device is lost, when destroying is allowed too).
            let _ = unsafe { d.device_wait_idle() };
        }
        // SAFETY: every batch was waited for (flush waits on the fence; a poisoned one is idle
        // above), so the pools and the fence are unused; destroyed in reverse order of creation.
        unsafe {
            if self.queries != vk::QueryPool::null() {
                d.destroy_query_pool(self.queries, None);
            }
            d.destroy_descriptor_pool(self.descriptors, None);
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.pool, None);
        }
    }
}

/// `ADEADVM_GPU_TIMEOUT` seconds, default 600.
fn gpu_timeout() -> Duration {
    let secs =
        std::env::var("ADEADVM_GPU_TIMEOUT").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(600);
    Duration::from_secs(secs.max(1))
}
