//! Recording GPU work: dispatches, uploads and downloads go into command buffers, with a
//! barrier only where a command touches bytes an earlier command wrote (or writes bytes one
//! read) since the last barrier; [`Recorder::flush`] submits what is left and waits for all of
//! it.
//!
//! Pipelined submission: the work between two flushes is split into sub-batches. Once the
//! command buffer being recorded holds `submit_at` commands ([`SUBMIT_FIRST`] for a flush's
//! first sub-batch, doubling with each submission up to [`SUBMIT_MAX`]) it is submitted without
//! waiting, and recording goes on in the next slot of a small ring (each with its own
//! command pool, fence, descriptor pool and held resources), so the GPU runs one sub-batch
//! while the host records the next. Submissions to one queue start in submission order and a
//! pipeline barrier covers every command submitted before it, so the accesses since the last
//! barrier carry across sub-batch boundaries unchanged; a flush is still one ordered stream.
//!
//! Invariants:
//! - Every buffer and pipeline a recorded command uses is held (an `Arc`) by its slot until the
//!   slot's fence has signalled, so nothing is freed under the GPU; a slot is reset and reused
//!   only after its fence.
//! - Uploads are staged and copied in stream order, so a host write never races a command
//!   recorded before it; staging memory is reused only after a flush.
//! - A [`Download`] is readable after the flush that ran it, until [`Recorder::clear_downloads`]
//!   (a sub-batch with downloads ends with a transfer-to-host barrier).
//! - The timestamps of one flush share one query pool, reset by the flush's first timestamp,
//!   so [`Recorder::elapsed`] measures across sub-batches.
//! - Once a submission or a wait fails the recorder refuses further work, and when dropped it
//!   waits for the device to go idle before freeing anything (objects may still be in use).
//! - With VK_KHR_push_descriptor a dispatch pushes its bindings; otherwise it allocates a set
//!   from its slot's descriptor pool, and a slot whose pool is full is submitted early. Results
//!   do not depend on where sub-batches begin and end.
//!
//! Command buffers are reused across runs of a program. A sub-batch's commands are kept as a
//! [`CommandLog`] (every parameter of every Vulkan command, by value) and encoded into a command
//! buffer only when the sub-batch is submitted. After [`Recorder::begin_run`] sub-batches are
//! numbered from 0; when sub-batch `n`'s log equals, command for command, the log of sub-batch
//! `n` of the previous run, the command buffer encoded then is submitted again instead. That is
//! exactly the same work: the log names every buffer, offset, pipeline, push constant and
//! workgroup count, and the cache holds every buffer and kernel its command buffers name, so no
//! handle in a cached log can be freed and reused for another object. A cached command buffer
//! is submitted again only once its previous submission has finished. Sub-batches that use
//! descriptor sets (devices without push descriptors) are never cached: their sets live in the
//! slot's pool, reset after each fence.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use super::buffer::{Buffer, HostBuffer, Slice};
use super::device::Device;
use super::error::{check, VulkanError};
use super::pipeline::Kernel;

/// Commands in a flush's first sub-batch: few, so the GPU starts early.
pub const SUBMIT_FIRST: u32 = 8;
/// Commands in a sub-batch at most (each submission doubles the next one's, up to this).
/// Measured on an H100 (driver 580), 1000 dependent 1-element ADDs cost 2.66-2.71 us an
/// instruction with 8..64, 2.75-3.33 with 16..128, 3.44-3.48 with 16..256, 3.8-4.2 with
/// 64..1024 and 5.3-5.6 with one submission: smaller sub-batches leave the GPU less to run
/// after the last one is recorded.
pub const SUBMIT_MAX: u32 = 64;
/// Environment variable that overrides the sub-batch sizes (a tuning aid): `FIRST,MAX`
/// commands (e.g. `8,64`, the default), or `off` for one submission per flush (as long as
/// a slot's descriptor pool lasts).
pub const SUBMIT_ENV: &str = "ADEADVM_VULKAN_SUBMIT";
/// Environment variable that turns the reuse of command buffers across runs off (`0`; a
/// tuning aid, to measure what it saves): see [`Recorder::begin_run`].
pub const REUSE_ENV: &str = "ADEADVM_VULKAN_REUSE";
/// Sub-batches recorded or in flight at once: with all of them in flight, recording waits for
/// the oldest.
const MAX_SLOTS: usize = 4;
/// Storage-buffer bindings a dispatch records without a heap allocation (more are allowed).
pub const MAX_BINDINGS: u32 = 8;
const INLINE: usize = MAX_BINDINGS as usize;
/// Descriptor sets, and descriptors, in a slot's pool (the path without push descriptors).
const SLOT_SETS: u32 = 256;
const SLOT_DESCRIPTORS: u32 = SLOT_SETS * MAX_BINDINGS;
/// Smallest staging chunk.
const STAGING_CHUNK: u64 = 4 << 20;
/// Timestamps one flush may write (more are skipped: [`Recorder::timestamp`] returns None).
const BATCH_TIMESTAMPS: u32 = 4096;
/// Sub-batches of one run whose command buffers are kept for the next run (later ones are
/// encoded every time): bounds what the cache holds alive.
const CACHED_SUB_BATCHES: usize = 4096;

/// A GPU timestamp recorded by [`Recorder::timestamp`], readable after its flush.
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

/// Where a download's bytes will be once its flush has run.
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

/// A byte range accessed since the last barrier, and by which stage.
#[derive(Clone, Copy)]
struct Access {
    buffer: vk::Buffer,
    start: u64,
    end: u64,
    write: bool,
    /// A copy (transfer stage) rather than a compute shader.
    transfer: bool,
}

impl Access {
    const NONE: Access =
        Access { buffer: vk::Buffer::null(), start: 0, end: 0, write: false, transfer: false };
}

/// A byte range of a buffer bound to a dispatch (a `vk::DescriptorBufferInfo` that compares).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BufferRange {
    buffer: vk::Buffer,
    offset: u64,
    range: u64,
}

/// One Vulkan command of a sub-batch, with every parameter by value (see [`CommandLog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    /// A barrier from the stages and writes it retires to every later compute or transfer access.
    Barrier {
        src_stages: vk::PipelineStageFlags,
        src_access: vk::AccessFlags,
    },
    Bind(vk::Pipeline),
    /// Push descriptors: `ranges[first..first + count]` at bindings 0...
    PushDescriptors {
        layout: vk::PipelineLayout,
        first: u32,
        count: u32,
    },
    /// A descriptor set from the slot's pool (the path without push descriptors).
    BindSet {
        layout: vk::PipelineLayout,
        set: vk::DescriptorSet,
    },
    /// Push constants: `words[first..first + count]`.
    PushConstants {
        layout: vk::PipelineLayout,
        first: u32,
        count: u32,
    },
    Dispatch([u32; 3]),
    Copy {
        src: vk::Buffer,
        dst: vk::Buffer,
        src_offset: u64,
        dst_offset: u64,
        size: u64,
    },
    ResetQueries(vk::QueryPool),
    Timestamp(vk::QueryPool, u32),
    /// The end of a sub-batch with downloads: transfer writes made visible to the host.
    ToHost,
}

/// A sub-batch's commands, kept until it is submitted: two logs that compare equal encode the
/// same command buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CommandLog {
    cmds: Vec<Cmd>,
    ranges: Vec<BufferRange>,
    words: Vec<u32>,
    /// False once a command names an object that does not outlive the sub-batch (a descriptor
    /// set of the slot's pool).
    cacheable: bool,
}

impl CommandLog {
    fn clear(&mut self) {
        self.cmds.clear();
        self.ranges.clear();
        self.words.clear();
        self.cacheable = true;
    }

    /// Records the log into `cmd`, which is recording.
    ///
    /// # Safety
    /// `cmd` is in the recording state; every object the log names is live, and stays so
    /// until `cmd` has finished executing (or is reset); descriptor sets it binds are updated.
    unsafe fn encode(&self, dev: &Device, cmd: vk::CommandBuffer) {
        let d = dev.raw();
        for c in &self.cmds {
            // SAFETY (every arm): by the contract above; the parameters were checked when the
            // command was logged (bindings against the kernel's layout, workgroup counts
            // against the device's limits, copies within their buffers).
            unsafe {
                match *c {
                    Cmd::Barrier { src_stages, src_access } => {
                        let mb = [vk::MemoryBarrier::default().src_access_mask(src_access).dst_access_mask(
                            vk::AccessFlags::SHADER_READ
                                | vk::AccessFlags::SHADER_WRITE
                                | vk::AccessFlags::TRANSFER_READ
                                | vk::AccessFlags::TRANSFER_WRITE,
                        )];
                        d.cmd_pipeline_barrier(
                            cmd,
                            src_stages,
                            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                            vk::DependencyFlags::empty(),
                            &mb,
                            &[],
                            &[],
                        );
                    }
                    Cmd::Bind(pipeline) => d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline),
                    Cmd::PushDescriptors { layout, first, count } => {
                        let ranges = &self.ranges[first as usize..(first + count) as usize];
                        let pd = dev.push_descriptor.as_ref().expect("logged only where the device pushes");
                        with_writes(ranges, |writes| {
                            pd.cmd_push_descriptor_set(cmd, vk::PipelineBindPoint::COMPUTE, layout, 0, writes)
                        });
                    }
                    Cmd::BindSet { layout, set } => d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        layout,
                        0,
                        &[set],
                        &[],
                    ),
                    Cmd::PushConstants { layout, first, count } => d.cmd_push_constants(
                        cmd,
                        layout,
                        vk::ShaderStageFlags::COMPUTE,
                        0,
                        bytemuck::cast_slice(&self.words[first as usize..(first + count) as usize]),
                    ),
                    Cmd::Dispatch([x, y, z]) => d.cmd_dispatch(cmd, x, y, z),
                    Cmd::Copy { src, dst, src_offset, dst_offset, size } => {
                        d.cmd_copy_buffer(cmd, src, dst, &[vk::BufferCopy { src_offset, dst_offset, size }])
                    }
                    Cmd::ResetQueries(pool) => d.cmd_reset_query_pool(cmd, pool, 0, BATCH_TIMESTAMPS),
                    Cmd::Timestamp(pool, query) => {
                        d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, query)
                    }
                    Cmd::ToHost => {
                        let mb = [vk::MemoryBarrier::default()
                            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                            .dst_access_mask(vk::AccessFlags::HOST_READ)];
                        d.cmd_pipeline_barrier(
                            cmd,
                            vk::PipelineStageFlags::TRANSFER,
                            vk::PipelineStageFlags::HOST,
                            vk::DependencyFlags::empty(),
                            &mb,
                            &[],
                            &[],
                        );
                    }
                }
            }
        }
    }
}

/// `n` values of `fill`: the first `n` of `inline` (on the caller's stack) when they fit, else a
/// new vector in `heap`. Dispatches bind at most [`MAX_BINDINGS`] buffers but for rare kernels,
/// so recording one allocates nothing.
fn stack_or_heap<'a, T: Copy>(
    n: usize,
    inline: &'a mut [T; INLINE],
    heap: &'a mut Vec<T>,
    fill: T,
) -> &'a mut [T] {
    if n <= INLINE {
        inline[..n].fill(fill);
        &mut inline[..n]
    } else {
        *heap = vec![fill; n];
        heap
    }
}

/// Calls `f` with storage-buffer descriptor writes of `ranges` at bindings 0.. (on the stack up
/// to [`MAX_BINDINGS`]); their `dst_set` is null.
fn with_writes<R>(ranges: &[BufferRange], f: impl FnOnce(&mut [vk::WriteDescriptorSet]) -> R) -> R {
    let n = ranges.len();
    let empty = vk::DescriptorBufferInfo::default();
    let (mut info_inline, mut info_heap) = ([empty; INLINE], Vec::new());
    let infos = stack_or_heap(n, &mut info_inline, &mut info_heap, empty);
    for (info, r) in infos.iter_mut().zip(ranges) {
        *info = vk::DescriptorBufferInfo { buffer: r.buffer, offset: r.offset, range: r.range };
    }
    let infos: &[vk::DescriptorBufferInfo] = infos;
    let blank = vk::WriteDescriptorSet::default();
    let (mut write_inline, mut write_heap) = ([blank; INLINE], Vec::new());
    let writes = stack_or_heap(n, &mut write_inline, &mut write_heap, blank);
    for (i, (w, info)) in writes.iter_mut().zip(infos).enumerate() {
        *w = vk::WriteDescriptorSet::default()
            .dst_binding(i as u32)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(std::slice::from_ref(info));
    }
    f(writes)
}

/// A command buffer encoded for sub-batch `n` of a run, kept for sub-batch `n` of later runs.
struct CachedBatch {
    cmd: vk::CommandBuffer,
    log: CommandLog,
    /// Everything the log names, kept (never read) so that no handle in it is freed, and
    /// reused for another object, while the log is cached.
    _held: Vec<Arc<Buffer>>,
    _held_kernels: Vec<Arc<Kernel>>,
    /// The submission that last ran it (see `Recorder::completed`).
    submission: u64,
}

/// One sub-batch's objects: a command buffer with its pool and fence, a descriptor pool, and
/// what its commands use, held until the fence.
struct Slot {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    /// Created on first use (never, with push descriptors).
    descriptors: vk::DescriptorPool,
    /// Sets and descriptors taken from `descriptors`.
    sets: u32,
    descriptors_used: u32,
    held: Vec<Arc<Buffer>>,
    held_kernels: Vec<Arc<Kernel>>,
    /// Whether it copies into download staging (it then ends with a transfer-to-host barrier).
    has_downloads: bool,
    /// The number of its last submission.
    submission: u64,
}

impl Slot {
    fn new(dev: &Device) -> Result<Slot, VulkanError> {
        let d = dev.raw();
        let pinfo = vk::CommandPoolCreateInfo::default().queue_family_index(dev.queue_family);
        // SAFETY: d is live; the pool belongs to this slot only.
        let pool = unsafe { d.create_command_pool(&pinfo, None) }.map_err(check("vkCreateCommandPool"))?;
        let mut slot = Slot {
            pool,
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            descriptors: vk::DescriptorPool::null(),
            sets: 0,
            descriptors_used: 0,
            held: Vec::new(),
            held_kernels: Vec::new(),
            has_downloads: false,
            submission: 0,
        };
        let ainfo = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: pool is live and owned here.
        let made = unsafe { d.allocate_command_buffers(&ainfo) }.map_err(check("vkAllocateCommandBuffers"));
        let made = made.and_then(|cmds| {
            slot.cmd = cmds[0];
            // SAFETY: plain object creation.
            unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.map_err(check("vkCreateFence"))
        });
        match made {
            Ok(fence) => {
                slot.fence = fence;
                Ok(slot)
            }
            Err(e) => {
                // SAFETY: nothing of the slot was submitted.
                unsafe { slot.destroy(d) };
                Err(e)
            }
        }
    }

    /// Holds `buf` until the fence (once: a run's dispatches mostly use one arena buffer).
    fn hold(&mut self, buf: &Arc<Buffer>) {
        if !self.held.iter().rev().take(4).any(|b| Arc::ptr_eq(b, buf)) {
            self.held.push(buf.clone());
        }
    }

    /// The descriptor pool, created on first use.
    fn descriptor_pool(&mut self, d: &ash::Device) -> Result<vk::DescriptorPool, VulkanError> {
        if self.descriptors == vk::DescriptorPool::null() {
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: SLOT_DESCRIPTORS,
            }];
            let info = vk::DescriptorPoolCreateInfo::default().max_sets(SLOT_SETS).pool_sizes(&sizes);
            // SAFETY: plain object creation; info borrows `sizes`.
            self.descriptors =
                unsafe { d.create_descriptor_pool(&info, None) }.map_err(check("vkCreateDescriptorPool"))?;
        }
        Ok(self.descriptors)
    }

    /// Makes the slot ready for recording again.
    ///
    /// # Safety
    /// The slot's fence has signalled (or it was never submitted): nothing it recorded is in use.
    unsafe fn reset(&mut self, d: &ash::Device) -> Result<(), VulkanError> {
        // SAFETY: by the contract above the pools are unused and the fence is not pending.
        unsafe {
            d.reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
                .map_err(check("vkResetCommandPool"))?;
            if self.sets > 0 {
                d.reset_descriptor_pool(self.descriptors, vk::DescriptorPoolResetFlags::empty())
                    .map_err(check("vkResetDescriptorPool"))?;
            }
            d.reset_fences(&[self.fence]).map_err(check("vkResetFences"))?;
        }
        self.sets = 0;
        self.descriptors_used = 0;
        self.held.clear();
        self.held_kernels.clear();
        self.has_downloads = false;
        Ok(())
    }

    /// Destroys the slot's objects (null handles are skipped by Vulkan).
    ///
    /// # Safety
    /// Nothing the slot recorded is in use by the device.
    unsafe fn destroy(&mut self, d: &ash::Device) {
        // SAFETY: by the contract above; destroying a null handle is a no-op.
        unsafe {
            d.destroy_descriptor_pool(self.descriptors, None);
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.pool, None);
        }
    }
}

/// Records and submits GPU work on one device. Not shared between threads; create one per VM.
pub struct Recorder {
    dev: Arc<Device>,
    slots: Vec<Slot>,
    /// The slot being recorded.
    current: Option<usize>,
    /// Submitted slots not yet waited for, oldest first.
    in_flight: VecDeque<usize>,
    /// Slots ready for recording.
    idle: Vec<usize>,
    /// Commands recorded in the current slot.
    commands: u32,
    /// Commands at which the current slot is submitted.
    submit_at: u32,
    /// The first and largest `submit_at` (SUBMIT_FIRST and SUBMIT_MAX unless SUBMIT_ENV says).
    submit_sizes: (u32, u32),
    /// The current sub-batch's commands, encoded when it is submitted.
    log: CommandLog,
    /// The pipeline bound by the current sub-batch's commands so far.
    bound: vk::Pipeline,
    /// Accesses since the last barrier (across sub-batches of a flush).
    pending: Vec<Access>,
    uploads: StagingRing,
    downloads: StagingRing,
    /// Bumped by `clear_downloads`; a Download of an older generation is refused.
    generation: u64,
    /// Whether downloads were recorded since the last flush (not readable until it).
    has_downloads: bool,
    /// How long a wait for the GPU may take before it is called hung.
    timeout: Duration,
    /// Barriers recorded (for tests and the profiler).
    barriers: u64,
    /// Queue submissions made.
    submissions: u64,
    /// Host time spent in submissions and fence waits.
    waited: Duration,
    /// Once a submission fails the recorder refuses further work (objects may still be in use).
    poisoned: Option<String>,
    /// Timestamp queries (created on first use), written this flush, and the last flush's
    /// values in nanoseconds.
    queries: vk::QueryPool,
    queries_used: u32,
    query_ns: Vec<u64>,
    /// Flushes so far (names the flush a [`Timestamp`] belongs to).
    batch: u64,
    /// Whether sub-batches are numbered and cached (from the first `begin_run`, unless
    /// REUSE_ENV is 0).
    caching: bool,
    reuse: bool,
    /// The number of the next sub-batch submitted in this run.
    sub_batch: usize,
    /// By sub-batch number: the command buffer encoded for it in an earlier run.
    cache: Vec<Option<CachedBatch>>,
    /// The pool of the cached command buffers (created on first use; resettable one by one).
    cache_pool: vk::CommandPool,
    /// Sub-batches submitted from the cache.
    reused: u64,
    /// Every submission up to this number has finished (fences are waited in submission order).
    completed: u64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("commands", &self.commands)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl Recorder {
    /// A recorder with its first slot (command pool, command buffer, fence).
    pub fn new(dev: &Arc<Device>) -> Result<Recorder, VulkanError> {
        if dev.is_hung() {
            return Err(VulkanError::Invalid(format!(
                "the Vulkan device {} did not finish earlier work in time (ADEADVM_GPU_TIMEOUT) and may still be running it; it cannot be used again in this process",
                dev.info.name
            )));
        }
        let first = Slot::new(dev)?;
        let submit_sizes = submit_sizes();
        Ok(Recorder {
            dev: dev.clone(),
            slots: vec![first],
            current: None,
            in_flight: VecDeque::new(),
            idle: vec![0],
            commands: 0,
            submit_at: submit_sizes.0,
            submit_sizes,
            log: CommandLog::default(),
            bound: vk::Pipeline::null(),
            pending: Vec::new(),
            uploads: StagingRing::new(),
            downloads: StagingRing::new(),
            generation: 0,
            has_downloads: false,
            timeout: gpu_timeout(),
            barriers: 0,
            submissions: 0,
            waited: Duration::ZERO,
            poisoned: None,
            queries: vk::QueryPool::null(),
            queries_used: 0,
            query_ns: Vec::new(),
            batch: 0,
            caching: false,
            reuse: std::env::var(REUSE_ENV).map_or(true, |v| v.trim() != "0"),
            sub_batch: 0,
            cache: Vec::new(),
            cache_pool: vk::CommandPool::null(),
            reused: 0,
            completed: 0,
        })
    }

    /// Starts a run of a program: sub-batches are numbered from 0 again, and from now on each
    /// whose commands equal those of the sub-batch with the same number in the previous run is
    /// submitted from the command buffer encoded then (see the module docs). Call it with
    /// nothing recorded (after a flush).
    pub fn begin_run(&mut self) {
        self.caching = self.reuse;
        self.drop_cached_from(self.sub_batch);
        self.sub_batch = 0;
    }

    /// Drops the cached sub-batches numbered `n` and up (the previous run, shorter or failed,
    /// did not reach them) with their command buffers and what they hold, such as an arena
    /// since replaced. Only with nothing recorded or in flight (so that every cached command
    /// buffer has finished); otherwise they stay until a later run.
    fn drop_cached_from(&mut self, n: usize) {
        if n >= self.cache.len() || self.has_work() || self.poisoned.is_some() {
            return;
        }
        let cmds: Vec<vk::CommandBuffer> = self.cache.drain(n..).flatten().map(|c| c.cmd).collect();
        if !cmds.is_empty() {
            // SAFETY: nothing is in flight, so none of these is pending; they came from this pool.
            unsafe { self.dev.raw().free_command_buffers(self.cache_pool, &cmds) };
        }
    }

    /// Sub-batches submitted from a command buffer encoded for an earlier run.
    pub fn reused(&self) -> u64 {
        self.reused
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Barriers recorded since this recorder was made.
    pub fn barriers(&self) -> u64 {
        self.barriers
    }

    /// Queue submissions since this recorder was made (a flush of many commands makes several).
    pub fn submissions(&self) -> u64 {
        self.submissions
    }

    /// Host time spent in queue submissions and fence waits since this recorder was made.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Whether work is recorded or in flight and not yet flushed.
    pub fn has_work(&self) -> bool {
        self.current.is_some() || !self.in_flight.is_empty()
    }

    fn check_usable(&self) -> Result<(), VulkanError> {
        match &self.poisoned {
            Some(why) => {
                Err(VulkanError::Invalid(format!("the GPU stream failed earlier ({why}); start a new run")))
            }
            None => Ok(()),
        }
    }

    /// Marks the recorder failed when `r` is an error (submissions and waits).
    fn poison<T>(&mut self, r: Result<T, VulkanError>) -> Result<T, VulkanError> {
        if let Err(e) = &r {
            // The command buffers and held buffers may still be in use by a device that
            // failed: keep them (leak rather than free under the GPU) and refuse further work.
            self.poisoned = Some(e.to_string());
        }
        r
    }

    /// The slot being recorded, taking a free one (and starting an empty log) when none is.
    fn begin(&mut self) -> Result<usize, VulkanError> {
        self.check_usable()?;
        if let Some(i) = self.current {
            return Ok(i);
        }
        let i = self.free_slot()?;
        self.current = Some(i);
        self.commands = 0;
        self.bound = vk::Pipeline::null();
        self.log.clear();
        Ok(i)
    }

    /// An idle slot: a free one, a new one, or the oldest in flight once it has finished.
    fn free_slot(&mut self) -> Result<usize, VulkanError> {
        if let Some(i) = self.idle.pop() {
            return Ok(i);
        }
        if self.slots.len() < MAX_SLOTS {
            self.slots.push(Slot::new(&self.dev)?);
            return Ok(self.slots.len() - 1);
        }
        let i = self.in_flight.pop_front().expect("with no slot idle or recording, one is in flight");
        let r = self.wait_slot(i);
        self.poison(r)?;
        Ok(i)
    }

    /// Waits for slot `i`'s fence, then resets it.
    fn wait_slot(&mut self, i: usize) -> Result<(), VulkanError> {
        let d = self.dev.raw();
        let fence = self.slots[i].fence;
        let nanos = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
        let t0 = Instant::now();
        let waited = if super::fault::fail_wait() {
            Err(vk::Result::TIMEOUT)
        } else {
            // SAFETY: the slot was submitted with this fence.
            unsafe { d.wait_for_fences(&[fence], true, nanos) }
        };
        self.waited += t0.elapsed();
        match waited {
            Ok(()) => self.completed = self.completed.max(self.slots[i].submission),
            Err(vk::Result::TIMEOUT) => {
                // The work cannot be stopped: from here on nothing it may use is freed or
                // waited for, so the error reaches the caller and the process can exit.
                self.dev.mark_hung();
                return Err(VulkanError::Invalid(format!(
                    "the GPU did not finish a batch within {} s (set ADEADVM_GPU_TIMEOUT to wait longer)",
                    self.timeout.as_secs()
                )));
            }
            Err(e) => return Err(check("vkWaitForFences")(e)),
        }
        // SAFETY: the fence signalled: nothing recorded in the slot is in use any more.
        unsafe { self.slots[i].reset(d) }
    }

    /// Submits the slot being recorded, without waiting (nothing recorded: nothing happens).
    fn submit_current(&mut self) -> Result<(), VulkanError> {
        let Some(i) = self.current.take() else { return Ok(()) };
        let r = self.submit_slot(i);
        self.poison(r)?;
        self.in_flight.push_back(i);
        Ok(())
    }

    fn submit_slot(&mut self, i: usize) -> Result<(), VulkanError> {
        if self.slots[i].has_downloads {
            self.log.cmds.push(Cmd::ToHost);
        }
        let (cmd, cached) = self.executable(i)?;
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        if super::fault::fail_submission() {
            return Err(check("vkQueueSubmit")(vk::Result::ERROR_DEVICE_LOST));
        }
        let t0 = Instant::now();
        {
            let queue = self.dev.queue.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the queue is externally synchronized by its lock; the command buffer is
            // executable and not pending (a cached one's last submission has finished), and
            // the fence is unsignalled (reset with its slot).
            unsafe { self.dev.raw().queue_submit(*queue, &submit, self.slots[i].fence) }
                .map_err(check("vkQueueSubmit"))?;
        }
        self.waited += t0.elapsed();
        self.submissions += 1;
        self.slots[i].submission = self.submissions;
        if let Some(n) = cached {
            self.cache[n].as_mut().expect("cached").submission = self.submissions;
        }
        Ok(())
    }

    /// The command buffer that runs the current log in slot `i`: sub-batch n's cached one when
    /// the previous run's sub-batch n logged the same commands, else the log encoded afresh
    /// (into the cache where it may be kept, else into the slot's own buffer); with the cache
    /// index it came from or went to.
    fn executable(&mut self, i: usize) -> Result<(vk::CommandBuffer, Option<usize>), VulkanError> {
        let n = self.sub_batch;
        self.sub_batch += 1;
        if self.caching && self.log.cacheable && n < CACHED_SUB_BATCHES {
            if self.cache.len() <= n {
                self.cache.resize_with(n + 1, || None);
            }
            match &self.cache[n] {
                Some(c) if c.submission > self.completed => {} // still running: encode afresh
                Some(c) if c.log == self.log => {
                    self.reused += 1;
                    return Ok((c.cmd, Some(n)));
                }
                _ => {
                    let cmd = match self.cache[n].take() {
                        Some(c) => {
                            // SAFETY: its last submission has finished (checked above), and
                            // the pool allows resetting buffers one by one.
                            unsafe {
                                self.dev
                                    .raw()
                                    .reset_command_buffer(c.cmd, vk::CommandBufferResetFlags::empty())
                            }
                            .map_err(check("vkResetCommandBuffer"))?;
                            c.cmd
                        }
                        None => self.cached_command_buffer()?,
                    };
                    // Kept in the cache before encoding, so that it is freed with the pool
                    // whatever happens.
                    let slot = &self.slots[i];
                    self.cache[n] = Some(CachedBatch {
                        cmd,
                        log: self.log.clone(),
                        _held: slot.held.clone(),
                        _held_kernels: slot.held_kernels.clone(),
                        submission: 0,
                    });
                    if let Err(e) = self.encode(cmd, vk::CommandBufferUsageFlags::empty()) {
                        self.cache[n] = None; // the command buffer stays with the pool
                        return Err(e);
                    }
                    return Ok((cmd, Some(n)));
                }
            }
        }
        let cmd = self.slots[i].cmd;
        self.encode(cmd, vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)?;
        Ok((cmd, None))
    }

    /// Begins `cmd` (in the initial state) with `flags`, records the log into it and ends it.
    fn encode(&self, cmd: vk::CommandBuffer, flags: vk::CommandBufferUsageFlags) -> Result<(), VulkanError> {
        let d = self.dev.raw();
        let info = vk::CommandBufferBeginInfo::default().flags(flags);
        // SAFETY: cmd is in the initial state (fresh, reset, or its pool reset after its
        // fence); the objects the log names are held by the slot until its fence (and by the
        // cache entry while it is kept); descriptor sets were updated when logged.
        unsafe {
            d.begin_command_buffer(cmd, &info).map_err(check("vkBeginCommandBuffer"))?;
            self.log.encode(&self.dev, cmd);
            d.end_command_buffer(cmd).map_err(check("vkEndCommandBuffer"))
        }
    }

    /// A new command buffer from the cache's pool (created on first use).
    fn cached_command_buffer(&mut self) -> Result<vk::CommandBuffer, VulkanError> {
        let d = self.dev.raw();
        if self.cache_pool == vk::CommandPool::null() {
            let info = vk::CommandPoolCreateInfo::default()
                .queue_family_index(self.dev.queue_family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
            // SAFETY: plain object creation on a live device.
            self.cache_pool =
                unsafe { d.create_command_pool(&info, None) }.map_err(check("vkCreateCommandPool"))?;
        }
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.cache_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and used by this recorder only.
        Ok(unsafe { d.allocate_command_buffers(&info) }.map_err(check("vkAllocateCommandBuffers"))?[0])
    }

    /// Counts a command recorded in the current slot; submits the slot once it holds
    /// `submit_at` commands.
    fn recorded(&mut self) -> Result<(), VulkanError> {
        self.commands += 1;
        if self.commands >= self.submit_at {
            self.submit_at = self.submit_at.saturating_mul(2).min(self.submit_sizes.1);
            self.submit_current()?;
        }
        Ok(())
    }

    /// Logs a barrier first if any of `accesses` depends on an access since the last one.
    fn order(&mut self, accesses: &[Access]) {
        let conflict = accesses.iter().any(|a| {
            self.pending
                .iter()
                .any(|p| p.buffer == a.buffer && p.start < a.end && a.start < p.end && (p.write || a.write))
        });
        if conflict {
            // The barrier waits for the stages of the accesses it retires (all of them: the
            // list is cleared) and makes their writes visible to every later command.
            let (mut src_stages, mut src_access) =
                (vk::PipelineStageFlags::empty(), vk::AccessFlags::empty());
            for p in &self.pending {
                if p.transfer {
                    src_stages |= vk::PipelineStageFlags::TRANSFER;
                    if p.write {
                        src_access |= vk::AccessFlags::TRANSFER_WRITE;
                    }
                } else {
                    src_stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
                    if p.write {
                        src_access |= vk::AccessFlags::SHADER_WRITE;
                    }
                }
            }
            // src_stages is not empty: a conflict needs a pending access.
            self.log.cmds.push(Cmd::Barrier { src_stages, src_access });
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
        let n = bindings.len();
        let contiguous =
            iface.bindings.len() == n && iface.bindings.iter().enumerate().all(|(i, &b)| b as usize == i);
        if !contiguous || push.len() as u32 * 4 != iface.push_bytes {
            return Err(VulkanError::Invalid(format!(
                "kernel {} has bindings {:?} and {} push-constant bytes; given {} bindings and {} bytes",
                kernel.name(),
                iface.bindings,
                iface.push_bytes,
                n,
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
        let pushed = kernel.push_descriptors && self.dev.push_descriptor.is_some();
        if !pushed && n as u64 > u64::from(SLOT_DESCRIPTORS) {
            return Err(VulkanError::Invalid(format!(
                "kernel {} binds {n} storage buffers; a dispatch may bind at most {SLOT_DESCRIPTORS}",
                kernel.name()
            )));
        }
        let mut i = self.begin()?;
        if !pushed {
            let slot = &self.slots[i];
            if slot.sets == SLOT_SETS || slot.descriptors_used + n as u32 > SLOT_DESCRIPTORS {
                self.submit_current()?;
                i = self.begin()?;
            }
        }
        let (mut access_inline, mut access_heap) = ([Access::NONE; INLINE], Vec::new());
        let accesses = stack_or_heap(n, &mut access_inline, &mut access_heap, Access::NONE);
        let first = self.log.ranges.len();
        for (b, access) in bindings.iter().zip(accesses.iter_mut()) {
            let (buffer, start, end) = b.slice.span();
            self.log.ranges.push(BufferRange { buffer, offset: start, range: end - start });
            *access = Access { buffer, start, end, write: b.write, transfer: false };
        }
        self.order(accesses);
        let slot = &mut self.slots[i];
        if kernel.pipeline != self.bound {
            self.log.cmds.push(Cmd::Bind(kernel.pipeline));
            self.bound = kernel.pipeline;
            if !slot.held_kernels.iter().any(|k| Arc::ptr_eq(k, kernel)) {
                slot.held_kernels.push(kernel.clone());
            }
        }
        if pushed {
            // The kernel's set layout was made for push descriptors (kernel.push_descriptors)
            // and holds at most maxPushDescriptors bindings.
            self.log.cmds.push(Cmd::PushDescriptors {
                layout: kernel.layout,
                first: first as u32,
                count: n as u32,
            });
        } else {
            let d = self.dev.raw();
            let pool = slot.descriptor_pool(d)?;
            let layouts = [kernel.set_layout];
            let ainfo = vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
            // SAFETY: the pool has room (checked against SLOT_SETS and SLOT_DESCRIPTORS above);
            // the layout is live (the kernel is held).
            let set =
                unsafe { d.allocate_descriptor_sets(&ainfo) }.map_err(check("vkAllocateDescriptorSets"))?[0];
            slot.sets += 1;
            slot.descriptors_used += n as u32;
            with_writes(&self.log.ranges[first..], |writes| {
                for w in writes.iter_mut() {
                    w.dst_set = set;
                }
                // SAFETY: the set is fresh and not in use; every write names a live buffer
                // (held below); the set stays valid until the slot's pool is reset after its
                // fence, which is why the log is not cached.
                unsafe { d.update_descriptor_sets(writes, &[]) };
            });
            self.log.cmds.push(Cmd::BindSet { layout: kernel.layout, set });
            self.log.cacheable = false;
        }
        if !push.is_empty() {
            let first = self.log.words.len() as u32;
            self.log.words.extend_from_slice(push);
            self.log.cmds.push(Cmd::PushConstants { layout: kernel.layout, first, count: push.len() as u32 });
        }
        self.log.cmds.push(Cmd::Dispatch(groups));
        for b in bindings {
            slot.hold(&b.slice.buf);
        }
        self.recorded()
    }

    /// Records a GPU timestamp taken once every command recorded before it has finished (None
    /// when the device's queue has no timestamps, or the flush has used its share). Read it
    /// with [`Recorder::elapsed`] after the flush.
    pub fn timestamp(&mut self) -> Result<Option<Timestamp>, VulkanError> {
        if self.dev.timestamp_bits == 0 || self.dev.info.timestamp_period <= 0.0 {
            return Ok(None);
        }
        if self.queries_used == BATCH_TIMESTAMPS {
            return Ok(None);
        }
        self.begin()?;
        if self.queries == vk::QueryPool::null() {
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(BATCH_TIMESTAMPS);
            // SAFETY: plain object creation on a live device.
            self.queries = unsafe { self.dev.raw().create_query_pool(&info, None) }
                .map_err(check("vkCreateQueryPool"))?;
        }
        // A flush resets its queries before the first one it writes; later sub-batches of the
        // flush are submitted after that reset, and query commands execute in submission order.
        if self.queries_used == 0 {
            self.log.cmds.push(Cmd::ResetQueries(self.queries));
        }
        self.log.cmds.push(Cmd::Timestamp(self.queries, self.queries_used));
        self.queries_used += 1;
        Ok(Some(Timestamp { batch: self.batch, query: self.queries_used - 1 }))
    }

    /// GPU time from `from` to `to`, both of the last flush (None otherwise).
    pub fn elapsed(&self, from: Timestamp, to: Timestamp) -> Option<Duration> {
        let last = self.batch.checked_sub(1)?;
        if from.batch != last || to.batch != last {
            return None;
        }
        let (a, b) = (*self.query_ns.get(from.query as usize)?, *self.query_ns.get(to.query as usize)?);
        Some(Duration::from_nanos(b.saturating_sub(a)))
    }

    /// Reads the flush's timestamps (after every fence) into `query_ns`.
    fn read_timestamps(&mut self) -> Result<(), VulkanError> {
        self.query_ns.clear();
        if self.queries_used == 0 {
            return Ok(());
        }
        let mut ticks = vec![0u64; self.queries_used as usize];
        // SAFETY: every sub-batch that wrote these queries has finished (their fences
        // signalled); the slice holds exactly queries_used 64-bit results.
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
        let i = self.begin()?;
        let (chunk, off) = self.uploads.alloc(&self.dev, dst.len)?;
        self.uploads.chunks[chunk].write(off, bytes)?;
        let (buffer, start, _) = dst.span();
        self.order(&[Access { buffer, start, end: start + dst.len, write: true, transfer: true }]);
        // dst is held until the fence; staging chunks live as long as the recorder (their
        // bytes are reused only after a flush).
        self.log.cmds.push(Cmd::Copy {
            src: self.uploads.chunks[chunk].handle(),
            dst: buffer,
            src_offset: off,
            dst_offset: dst.offset,
            size: dst.len,
        });
        self.slots[i].hold(&dst.buf);
        self.recorded()
    }

    /// Records a device-to-device copy of `src` into `dst` (equal lengths).
    pub fn copy(&mut self, src: &Slice, dst: &Slice) -> Result<(), VulkanError> {
        if src.len != dst.len {
            return Err(VulkanError::Invalid(format!("copy of {} bytes into {}", src.len, dst.len)));
        }
        if src.len == 0 {
            return Ok(());
        }
        let i = self.begin()?;
        let (sb, ss, _) = src.span();
        let (db, ds, _) = dst.span();
        self.order(&[
            Access { buffer: sb, start: ss, end: ss + src.len, write: false, transfer: true },
            Access { buffer: db, start: ds, end: ds + dst.len, write: true, transfer: true },
        ]);
        // Both buffers are held until the fence.
        self.log.cmds.push(Cmd::Copy {
            src: sb,
            dst: db,
            src_offset: src.offset,
            dst_offset: dst.offset,
            size: src.len,
        });
        let slot = &mut self.slots[i];
        slot.hold(&src.buf);
        slot.hold(&dst.buf);
        self.recorded()
    }

    /// Records a copy of `src` to host memory, readable with [`Recorder::read`] after the next
    /// [`Recorder::flush`].
    pub fn download(&mut self, src: &Slice) -> Result<Download, VulkanError> {
        let ticket = |chunk, offset| Download { chunk, offset, len: src.len, generation: self.generation };
        if src.len == 0 {
            return Ok(ticket(0, 0));
        }
        let i = self.begin()?;
        let (chunk, off) = self.downloads.alloc(&self.dev, src.len)?;
        let (buffer, start, _) = src.span();
        self.order(&[Access { buffer, start, end: start + src.len, write: false, transfer: true }]);
        // src is held until the fence; staging chunks live as long as the recorder.
        self.log.cmds.push(Cmd::Copy {
            src: buffer,
            dst: self.downloads.chunks[chunk].handle(),
            src_offset: src.offset,
            dst_offset: off,
            size: src.len,
        });
        let slot = &mut self.slots[i];
        slot.hold(&src.buf);
        slot.has_downloads = true;
        self.has_downloads = true;
        self.recorded()?;
        Ok(Download { chunk, offset: off, len: src.len, generation: self.generation })
    }

    /// The bytes of a download whose flush has run.
    pub fn read(&self, d: &Download, out: &mut [u8]) -> Result<(), VulkanError> {
        if d.generation != self.generation || out.len() as u64 != d.len || self.has_downloads {
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

    /// Submits what is recorded and waits for it and every sub-batch in flight. Nothing
    /// recorded or in flight: returns at once.
    pub fn flush(&mut self) -> Result<(), VulkanError> {
        self.check_usable()?;
        if !self.has_work() {
            return Ok(());
        }
        self.submit_current()?;
        while let Some(i) = self.in_flight.pop_front() {
            let r = self.wait_slot(i);
            self.poison(r)?;
            self.idle.push(i);
        }
        if self.read_timestamps().is_err() {
            // Timestamps are diagnostics: a flush that ran is not failed for want of them.
            self.query_ns.clear();
            self.queries_used = 0;
        }
        self.batch += 1;
        self.submit_at = self.submit_sizes.0;
        self.has_downloads = false;
        self.pending.clear();
        self.uploads.reset();
        Ok(())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let d = self.dev.raw();
        let mut idle = self.poisoned.is_none();
        if idle && !self.in_flight.is_empty() && !self.dev.is_hung() {
            let fences: Vec<vk::Fence> = self.in_flight.iter().map(|&i| self.slots[i].fence).collect();
            let nanos = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
            // SAFETY: every fence in the list was submitted with its slot.
            match unsafe { d.wait_for_fences(&fences, true, nanos) } {
                Ok(()) => {}
                Err(vk::Result::TIMEOUT) => self.dev.mark_hung(),
                Err(_) => idle = false,
            }
        }
        if self.dev.is_hung() {
            // Work that did not finish in time may still run: waiting for the device could
            // block forever, so everything the slots hold is leaked (see Device::mark_hung).
            return;
        }
        if !idle {
            // SAFETY: waiting for the device is always allowed; after it nothing is in flight
            // (or the device is lost, when destroying is allowed too).
            let _ = unsafe { d.device_wait_idle() };
        }
        // SAFETY: nothing any slot recorded is in use (waited for above; a slot being recorded
        // was never submitted); destroyed in reverse order of creation.
        unsafe {
            if self.queries != vk::QueryPool::null() {
                d.destroy_query_pool(self.queries, None);
            }
            // Frees the cached command buffers (the held buffers and kernels drop after).
            d.destroy_command_pool(self.cache_pool, None);
            for slot in self.slots.iter_mut().rev() {
                slot.destroy(d);
            }
        }
    }
}

/// The first and largest sub-batch sizes: [`SUBMIT_ENV`] as `FIRST,MAX` or `off`, else
/// ([`SUBMIT_FIRST`], [`SUBMIT_MAX`]).
fn submit_sizes() -> (u32, u32) {
    let Ok(v) = std::env::var(SUBMIT_ENV) else { return (SUBMIT_FIRST, SUBMIT_MAX) };
    if v.trim() == "off" {
        return (u32::MAX, u32::MAX);
    }
    match v.split_once(',').map(|(a, b)| (a.trim().parse::<u32>(), b.trim().parse::<u32>())) {
        Some((Ok(first), Ok(max))) if first >= 1 && max >= first => (first, max),
        _ => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "adeadvm: ignoring {SUBMIT_ENV}={v:?}: not FIRST,MAX with 1 <= FIRST <= MAX, or off; using {SUBMIT_FIRST},{SUBMIT_MAX}"
                )
            });
            (SUBMIT_FIRST, SUBMIT_MAX)
        }
    }
}

/// `ADEADVM_GPU_TIMEOUT` seconds, default 600.
fn gpu_timeout() -> Duration {
    let secs =
        std::env::var("ADEADVM_GPU_TIMEOUT").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(600);
    Duration::from_secs(secs.max(1))
}
