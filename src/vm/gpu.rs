//! The VM's Vulkan path: a device arena laid out by the same memory plan as the host arena,
//! constants uploaded once per VM, inputs once per binding (into the same device buffer while
//! an input keeps its byte length, so that a run's commands can equal the previous run's and
//! reuse its command buffers), and every tensor instruction
//! recorded into a [`Recorder`], which submits full sub-batches on its own while recording goes
//! on; the VM waits for the GPU at GPU_SYNC and when the host needs a result (STORE, an
//! observer, a CPU instruction in `auto` placement).
//!
//! Invariants:
//! - Each temporary has one [`Valid`] state: which copy (host arena, device arena or both) holds
//!   its current bytes. An instruction that reads a temporary first makes its own side valid
//!   (a download or an upload), and leaves its destination valid on its side only. A partial
//!   write (PUT, SCATTER, TSET: `Insn::updates`) reads its destination too: that is made valid
//!   on the writing side first, and its kernels write only their elements in place.
//! - Kernels work on 32-bit words. 16-bit float operands are widened to f32 in scratch memory
//!   and results rounded back with CAST's kernel, which is what the CPU's `float_op` does, so
//!   the bits agree; 16-bit moves go through `unpack16`/`pack16`, except SLICE and PUT, which
//!   copy packed halves with `window16` (each word written whole by one invocation).
//! - The decoder's instructions run on the device too: SLICE at a register offset, PUT,
//!   SCATTER, TSET (the register values read when recorded) and ARGMAX; TGET writes a register,
//!   so the host runs it on the tensor's downloaded bytes.
//! - A source that is also the destination is copied to scratch first, unless the kernel reads
//!   each element only at the index it writes (elementwise kernels).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::exec::cpu::reference::{strides, Binary, Compare, MatmulShape, Reduce, Unary};
use crate::exec::vulkan::ops::rows::Tuning;
use crate::exec::vulkan::ops::{data, rows};
use crate::exec::vulkan::{
    Binding, Buffer, Download, Kernel, Recorder, Slice, Timestamp, VulkanError, VulkanExec,
};
use crate::format::{Program, TensorKind};
use crate::isa::{Act, DType, Insn, Instruction, Placement as Hint, TensorId, Tier};
use crate::numerics as nx;
use crate::verify::{MemoryPlan, VerifiedProgram};

use super::{norm_axis, ConstStore, Flow, Frame, Loc, Vm, VmError};

/// Which executor runs tensor instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The CPU only.
    #[default]
    Cpu,
    /// Every tensor instruction on the Vulkan device.
    Vulkan,
    /// Large instructions on a Vulkan GPU when there is one (a CPU device such as lavapipe is
    /// never chosen), everything else on the CPU; see [`AUTO_MIN_WORK`].
    Auto,
}

impl Backend {
    /// `cpu`, `vulkan` or `auto`.
    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "cpu" => Some(Backend::Cpu),
            "vulkan" => Some(Backend::Vulkan),
            "auto" => Some(Backend::Auto),
            _ => None,
        }
    }
    /// The name `from_name` takes.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Vulkan => "vulkan",
            Backend::Auto => "auto",
        }
    }
}

/// In `auto` placement an instruction goes to the GPU when it touches at least this many
/// elements (or performs this many flops), or when a source it reads is already there only.
/// Below it, the launch and transfer latency (~10 µs) outweighs the GPU's throughput.
pub const AUTO_MIN_WORK: u64 = 1 << 16;

/// The process's Vulkan device and kernels, opened on first use and shared by every VM
/// (opening a device and building pipelines is slow; both are thread-safe to share).
pub fn shared_device() -> Result<Arc<VulkanExec>, VulkanError> {
    device_at(None)
}

/// As [`shared_device`], for device `index` (as `adeadvm info` numbers them); None is the
/// default device. Each index is opened once per process, on first use.
pub fn device_at(index: Option<usize>) -> Result<Arc<VulkanExec>, VulkanError> {
    type Slot = Arc<OnceLock<Result<Arc<VulkanExec>, String>>>;
    static OPENED: Mutex<Vec<(Option<usize>, Slot)>> = Mutex::new(Vec::new());
    // The list's lock is held only to find the slot: opening one device does not wait for
    // another's (two sessions on two GPUs start at once).
    let slot = {
        let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        match opened.iter().find(|(i, _)| *i == index) {
            Some((_, slot)) => slot.clone(),
            None => {
                let slot = Arc::new(OnceLock::new());
                opened.push((index, slot.clone()));
                slot
            }
        }
    };
    slot.get_or_init(|| VulkanExec::open_index(index).map(Arc::new).map_err(|e| e.to_string()))
        .clone()
        .map_err(VulkanError::Earlier)
}

/// Whether the machine has a Vulkan device that is not a CPU emulation (checked once, without
/// opening a device).
fn has_gpu() -> bool {
    static GPU: OnceLock<bool> = OnceLock::new();
    *GPU.get_or_init(|| {
        crate::exec::vulkan::devices()
            .is_ok_and(|ds| ds.iter().any(|d| d.device_type != "CPU" && d.has_compute_queue))
    })
}

/// Where a temporary's current bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Valid {
    /// Not written yet in this run.
    Nowhere,
    Host,
    Device,
    Both,
}

/// Status words for the bounds checks of GATHER and SCATTER in one batch. The status buffer
/// holds twice as many: word `STATUS_SLOTS + slot` is where SCATTER puts the bad index's value.
const STATUS_SLOTS: u32 = 1024;

/// A GATHER or SCATTER whose bounds check is pending until its batch runs.
struct PendingCheck {
    slot: u32,
    index: usize,
    indices: TensorId,
    rows: usize,
    /// What the rows belong to in the error: GATHER's "table", SCATTER's "destination".
    of: &'static str,
    /// Whether the kernel wrote the bad index's value into word `STATUS_SLOTS + slot` (SCATTER);
    /// else it is read on the host when the indices came from there.
    value_on_device: bool,
}

/// The VM's device-side state.
pub(super) struct Gpu {
    exec: Arc<VulkanExec>,
    rec: Recorder,
    /// Per tensor id: constants, uploaded on first use and kept for the VM's life.
    consts: Vec<Option<Slice>>,
    /// Per input: its device copy, and whether it holds the bytes bound now (an input bound
    /// again is uploaded again, into the same slice when the length is the same).
    inputs: Vec<Option<(Slice, bool)>>,
    arena: Option<Arc<Buffer>>,
    scratch: Option<Arc<Buffer>>,
    scratch_used: u64,
    status: Arc<Buffer>,
    checks: Vec<PendingCheck>,
    /// User kernels by KernelId, built on first use.
    user: Vec<Option<Arc<Kernel>>>,
    /// Per tensor id (temporaries): where the current bytes are.
    pub(super) valid: Vec<Valid>,
    /// Outputs stored from the device: (output index, download).
    pending_outputs: Vec<(usize, Download)>,
    pub(super) backend: Backend,
}

impl Gpu {
    pub(super) fn new(
        p: &Program,
        inputs: usize,
        backend: Backend,
        device: Option<usize>,
    ) -> Result<Option<Gpu>, VmError> {
        let exec = match backend {
            Backend::Cpu => return Ok(None),
            Backend::Vulkan => device_at(device)?,
            Backend::Auto if !has_gpu() => return Ok(None),
            Backend::Auto => match device_at(device) {
                Ok(dev) if dev.device().info().device_type != "CPU" => dev,
                _ => return Ok(None),
            },
        };
        let rec = Recorder::new(exec.device())?;
        let status = Arc::new(Buffer::new(exec.device(), u64::from(STATUS_SLOTS) * 8)?);
        Ok(Some(Gpu {
            rec,
            consts: vec![None; p.tensors.len()],
            inputs: vec![None; inputs],
            arena: None,
            scratch: None,
            scratch_used: 0,
            status,
            checks: Vec::new(),
            user: vec![None; p.kernels.len()],
            valid: vec![Valid::Nowhere; p.tensors.len()],
            pending_outputs: Vec::new(),
            backend,
            exec,
        }))
    }

    /// The device's name.
    pub(super) fn device_name(&self) -> &str {
        &self.exec.device().info().name
    }

    /// Marks the upload of input `k` stale (it was bound again).
    pub(super) fn input_changed(&mut self, k: usize) {
        if let Some(Some((_, current))) = self.inputs.get_mut(k) {
            *current = false;
        }
    }

    /// Refuses, when the VM is made, a user kernel that asks for more than the device allows
    /// (workgroup size and invocations, workgroup counts, push-constant bytes, bindings, SPIR-V
    /// capabilities whose features are off): building its pipeline or dispatching it would
    /// fail, or worse, mid-run.
    pub(super) fn check_kernel_limits(&self, v: &VerifiedProgram) -> Result<(), VmError> {
        let d = self.exec.device().info();
        for (decl, k) in v.program().kernels.iter().zip(v.kernels()) {
            let [x, y, z] = k.local_size;
            let [mx, my, mz] = d.max_compute_workgroup_size;
            let invocations = u64::from(x) * u64::from(y) * u64::from(z);
            let [gx, gy, gz] = decl.groups;
            let [cx, cy, cz] = d.max_compute_workgroup_count;
            let what = if x > mx || y > my || z > mz {
                Some(format!("its workgroup size is {x}x{y}x{z}; the device allows at most {mx}x{my}x{mz}"))
            } else if invocations > u64::from(d.max_compute_workgroup_invocations) {
                Some(format!(
                    "its workgroup size {x}x{y}x{z} is {invocations} invocations; the device allows {}",
                    d.max_compute_workgroup_invocations
                ))
            } else if gx > cx || gy > cy || gz > cz {
                Some(format!(
                    "it dispatches {gx}x{gy}x{gz} workgroups; the device allows at most {cx}x{cy}x{cz}"
                ))
            } else if k.push_bytes > d.max_push_constants_size {
                Some(format!(
                    "it takes {} push-constant bytes; the device allows {}",
                    k.push_bytes, d.max_push_constants_size
                ))
            } else if decl.bindings.len() as u64 > u64::from(d.max_storage_buffers) {
                Some(format!(
                    "it binds {} storage buffers; the device allows {}",
                    decl.bindings.len(),
                    d.max_storage_buffers
                ))
            } else {
                let missing =
                    k.capabilities.iter().find(|&&c| self.exec.device().capability_enabled(c) == Some(false));
                missing.map(|c| {
                    format!(
                        "its SPIR-V declares capability {c:?}, whose device feature adeadvm does not enable on this device \
                         (16-bit floats and storage, the Vulkan memory model and cooperative matrices are enabled only \
                         where adeadvm uses the device's tensor cores, as `adeadvm info` says; 64-bit and 8-bit types never)"
                    )
                })
            };
            if let Some(what) = what {
                return Err(VmError::KernelLimit { kernel: decl.name.clone(), what, device: d.name.clone() });
            }
        }
        Ok(())
    }

    /// Prepares a run: checks the device memory budget (`budget`, or the device's largest
    /// device-local heap) against what the run can hold on the device at once (the arena,
    /// every constant and every input), then a device arena of at least the plan's peak bytes,
    /// nothing valid yet.
    pub(super) fn begin_run(&mut self, plan: &MemoryPlan, budget: Option<u64>) -> Result<(), VmError> {
        let peak = plan.peak_bytes;
        let info = self.exec.device().info();
        // A device that reports no device-local heap has no default budget.
        let budget =
            budget.unwrap_or(if info.device_local_bytes > 0 { info.device_local_bytes } else { u64::MAX });
        let needed = (peak + 256).saturating_add(plan.const_bytes).saturating_add(plan.input_bytes);
        if needed > budget {
            return Err(VmError::DeviceMemoryBudget {
                needed,
                arena: peak,
                constants: plan.const_bytes,
                inputs: plan.input_bytes,
                budget,
                device: info.name.clone(),
            });
        }
        if self.rec.has_work() {
            // A previous run failed mid-batch: drop its work unsubmitted.
            self.rec = Recorder::new(self.exec.device())?;
        }
        self.rec.clear_downloads();
        self.rec.begin_run();
        self.checks.clear();
        self.pending_outputs.clear();
        self.valid.iter_mut().for_each(|v| *v = Valid::Nowhere);
        // Room for the last tensor's binding rounded up to whole words.
        let need = peak + 256;
        if self.arena.as_ref().is_none_or(|a| a.size() < need) {
            self.arena = Some(Arc::new(Buffer::new(self.exec.device(), need)?));
        }
        Ok(())
    }

    /// A GPU timestamp after everything recorded so far (None where the device has none).
    pub(super) fn timestamp(&mut self) -> Result<Option<Timestamp>, VmError> {
        Ok(self.rec.timestamp()?)
    }

    /// Host time spent in submissions and waits for the GPU since the recorder was made.
    pub(super) fn waited(&self) -> Duration {
        self.rec.waited()
    }

    /// Queue submissions since the recorder was made, and how many of them reused a command
    /// buffer recorded by an earlier run.
    pub(super) fn submissions(&self) -> (u64, u64) {
        (self.rec.submissions(), self.rec.reused())
    }

    /// GPU time between two timestamps of the batch flushed last.
    pub(super) fn gpu_time(&self, from: Timestamp, to: Timestamp) -> Option<Duration> {
        self.rec.elapsed(from, to)
    }

    /// `len` bytes of scratch memory for the current instruction.
    fn scratch(&mut self, len: u64) -> Result<Slice, VmError> {
        let need = self.scratch_used + len.div_ceil(256).max(1) * 256;
        if self.scratch.as_ref().is_none_or(|s| s.size() < need) {
            // The old buffer stays alive while recorded work holds slices of it.
            let size = need.max(self.scratch.as_ref().map_or(0, |s| s.size() * 2)).max(1 << 20);
            self.scratch = Some(Arc::new(Buffer::new(self.exec.device(), size)?));
            self.scratch_used = 0;
        }
        let s = self.scratch.as_ref().map(|b| b.slice(self.scratch_used, len));
        self.scratch_used += len.div_ceil(256).max(1) * 256;
        Ok(s.ok_or_else(|| VulkanError::Invalid("no scratch buffer".into()))??)
    }

    /// Submits the batch and waits; then checks the batch's GATHER and SCATTER bounds:
    /// Some((instruction, message)) for the first out of range.
    fn flush(
        &mut self,
        vm_inputs: &[Option<super::HostTensor>],
        p: &Program,
    ) -> Result<Option<(usize, String)>, VulkanError> {
        let n = self.checks.len() as u64;
        let status = match n {
            0 => None,
            n => {
                let values = self.status.slice(u64::from(STATUS_SLOTS) * 4, n * 4)?;
                Some((self.rec.download(&self.status.slice(0, n * 4)?)?, self.rec.download(&values)?))
            }
        };
        self.rec.flush()?;
        if let Some((d, dv)) = status {
            let mut words = vec![0u8; n as usize * 4];
            self.rec.read(&d, &mut words)?;
            let words: Vec<u32> = bytemuck::pod_collect_to_vec(&words);
            let mut values = vec![0u8; n as usize * 4];
            self.rec.read(&dv, &mut values)?;
            let values: Vec<i32> = bytemuck::pod_collect_to_vec(&values);
            let checks = std::mem::take(&mut self.checks);
            for g in &checks {
                let pos = words[g.slot as usize];
                if pos != u32::MAX {
                    let name = &p.tensors[g.indices.0 as usize].name;
                    // SCATTER's kernel wrote the value; GATHER's is known when the indices came
                    // from the host (inputs, constants).
                    let value = match g.value_on_device {
                        true => Some(values[g.slot as usize]),
                        false => host_i32(p, vm_inputs, g.indices, pos as usize),
                    };
                    let what = match value {
                        Some(v) => format!(
                            "index {v} at position {pos} of `{name}` is outside the {}'s {} rows",
                            g.of, g.rows
                        ),
                        None => format!(
                            "the index at position {pos} of `{name}` is outside the {}'s {} rows",
                            g.of, g.rows
                        ),
                    };
                    return Ok(Some((g.index, what)));
                }
            }
        }
        Ok(None)
    }
}

/// Element `pos` of an i32 input or constant, read on the host.
fn host_i32(p: &Program, inputs: &[Option<super::HostTensor>], t: TensorId, pos: usize) -> Option<i32> {
    let bytes = match p.tensors[t.0 as usize].kind {
        TensorKind::Input => {
            let k = p.tensors[..t.0 as usize].iter().filter(|d| d.kind == TensorKind::Input).count();
            inputs.get(k)?.as_ref()?.bytes()
        }
        TensorKind::Const(crate::format::ConstData::Bytes { offset, len }) => {
            p.data.get(offset as usize..(offset + len) as usize)?
        }
        _ => return None,
    };
    let b = bytes.get(pos * 4..pos * 4 + 4)?;
    Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl Vm {
    /// Whether instruction `ins` runs on the GPU in this VM. Without a device: never. With
    /// one: KERNEL and GPU_SYNC always; STORE where its data is; otherwise the instruction's
    /// `@cpu`/`@gpu` hint, else the backend (`vulkan`: all; `auto`: by size and where the
    /// sources are, see [`AUTO_MIN_WORK`]).
    pub(super) fn on_gpu(&self, f: &Frame, ins: &Instruction) -> bool {
        let Some(g) = &self.gpu else { return false };
        let insn = &ins.insn;
        let writes = insn.writes();
        match insn {
            Insn::Kernel { .. } | Insn::GpuSync => return true,
            Insn::Store { src, .. } => return g.valid[src.0 as usize] == Valid::Device,
            Insn::Alloc { .. } => return false,
            // TGET writes a register, not a tensor: the host reads it (`cpu_reads` downloads).
            _ if writes.is_none() => return false,
            _ => {}
        }
        match (ins.placement, g.backend) {
            (Hint::Cpu, _) => false,
            (Hint::Gpu, _) | (Hint::Auto, Backend::Vulkan) => true,
            _ => {
                let dst = writes.map_or(0, |t| f.counts[t.0 as usize]);
                let work = match insn {
                    Insn::Matmul { a, ta, .. } => {
                        let s = &f.shapes[a.0 as usize];
                        let k = if *ta { s[s.len() - 2] } else { s[s.len() - 1] };
                        2 * dst * k as u64
                    }
                    _ => dst,
                };
                // A partial write's destination counts as a source: it is read too.
                work >= AUTO_MIN_WORK
                    || insn.reads().chain(insn.updates()).any(|t| g.valid[t.0 as usize] == Valid::Device)
            }
        }
    }

    /// Before a CPU instruction in mixed placement: every temporary it reads made valid on the
    /// host. After it: its destination valid on the host only.
    pub(super) fn cpu_reads(&mut self, p: &Program, f: &Frame, insn: &Insn) -> Result<(), VmError> {
        let Some(g) = &mut self.gpu else { return Ok(()) };
        if let Insn::Free { t } = insn {
            // FREE names its tensor only to end it: the bytes are dead (the verifier refuses any
            // later read before a write), so nothing comes back from the device. Downloading
            // them cost a flush and a copy of the whole tensor (12 ms for a 64 MiB tensor on
            // an H200, three times the 4096^2 SGEMM that wrote it).
            g.valid[t.0 as usize] = Valid::Nowhere;
            return Ok(());
        }
        // `download_temp` skips a tensor that is not only on the device. A partial write
        // keeps the rest of its destination, so the destination's bytes come back too.
        for t in insn.reads().chain(insn.updates()) {
            self.download_temp(p, f, t)?;
        }
        Ok(())
    }

    pub(super) fn cpu_wrote(&mut self, insn: &Insn) {
        let Some(g) = &mut self.gpu else { return };
        match (insn, insn.writes()) {
            // A later STORE from the host replaces an earlier one from the device.
            (Insn::Store { out, .. }, _) => g.pending_outputs.retain(|(o, _)| *o != out.0 as usize),
            (Insn::Alloc { .. }, _) | (_, None) => {}
            (_, Some(t)) => g.valid[t.0 as usize] = Valid::Host,
        }
    }

    /// Downloads temporary `t` into the host arena (flushing the batch).
    pub(super) fn download_temp(&mut self, p: &Program, f: &Frame, t: TensorId) -> Result<(), VmError> {
        let Loc::Arena(range) = f.locs[t.0 as usize].clone() else { return Ok(()) };
        let Some(g) = &mut self.gpu else { return Ok(()) };
        if g.valid[t.0 as usize] != Valid::Device {
            return Ok(());
        }
        let s = arena_slice(g, range.start as u64, range.len() as u64)?;
        let d = g.rec.download(&s)?;
        if let Some((index, what)) = g.flush(&self.inputs, p)? {
            return Err(self.gpu_error(index, what));
        }
        let g = self.gpu.as_mut().expect("device");
        g.rec.read(&d, &mut self.arena.bytes_mut()[range])?;
        g.valid[t.0 as usize] = Valid::Both;
        Ok(())
    }

    /// Submits recorded GPU work and waits (GPU_SYNC, observers, the end of a run).
    pub(super) fn gpu_sync(&mut self, p: &Program) -> Result<(), VmError> {
        let Some(g) = &mut self.gpu else { return Ok(()) };
        match g.flush(&self.inputs, p)? {
            Some((index, what)) => Err(self.gpu_error(index, what)),
            None => Ok(()),
        }
    }

    /// A GPU timestamp after the work recorded so far (None without a device or timestamps).
    pub(super) fn gpu_timestamp(&mut self) -> Result<Option<Timestamp>, VmError> {
        match &mut self.gpu {
            Some(g) => g.timestamp(),
            None => Ok(None),
        }
    }

    /// GPU time between two timestamps once their batch has run.
    pub(super) fn gpu_time(&self, from: Timestamp, to: Timestamp) -> Option<Duration> {
        self.gpu.as_ref().and_then(|g| g.gpu_time(from, to))
    }

    /// The end of a run: waits for the GPU and collects outputs stored from the device.
    pub(super) fn gpu_finish(&mut self, p: &Program) -> Result<(), VmError> {
        self.gpu_sync(p)?;
        let Some(g) = &mut self.gpu else { return Ok(()) };
        for (o, d) in std::mem::take(&mut g.pending_outputs) {
            if let Some(t) = &mut self.outputs[o] {
                let mut bytes = t.bytes().to_vec();
                g.rec.read(&d, &mut bytes)?;
                t.bytes_mut().copy_from_slice(&bytes);
            }
        }
        g.rec.clear_downloads();
        Ok(())
    }

    /// A device slice holding tensor `t`'s current bytes, for reading.
    fn src(&mut self, p: &Program, f: &Frame, t: TensorId) -> Result<Slice, VmError> {
        let loc = f.locs[t.0 as usize].clone();
        let host_bytes: &[u8] = match &loc {
            Loc::Arena(r) => &self.arena.bytes()[r.clone()],
            Loc::Input(k) => self.inputs[*k].as_ref().map_or(&[][..], |x| x.bytes()),
            Loc::Const(i) => match &self.consts[*i] {
                Some(ConstStore::Data(r)) => &self.program.program().data[r.clone()],
                Some(ConstStore::Owned(b)) => b.bytes(),
                None => &[],
            },
        };
        let Some(g) = &mut self.gpu else { unreachable!("GPU instructions run only with a device") };
        match loc {
            Loc::Arena(r) => {
                let s = arena_slice(g, r.start as u64, r.len() as u64)?;
                if g.valid[t.0 as usize] == Valid::Host {
                    g.rec.upload(&s, host_bytes)?;
                    g.valid[t.0 as usize] = Valid::Both;
                }
                Ok(s)
            }
            Loc::Input(k) => {
                match &mut g.inputs[k] {
                    Some((_, true)) => {}
                    // The previous run's reads of it have finished: every run ends with a flush,
                    // and a run that failed mid-batch gets a new recorder (which waits first).
                    Some((s, current)) if s.len == host_bytes.len() as u64 => {
                        g.rec.upload(s, host_bytes)?;
                        *current = true;
                    }
                    stale => *stale = Some((g.exec.upload(&mut g.rec, host_bytes)?, true)),
                }
                Ok(g.inputs[k].as_ref().expect("just uploaded").0.clone())
            }
            Loc::Const(i) => {
                if g.consts[i].is_none() {
                    let s = g.exec.upload(&mut g.rec, host_bytes)?;
                    g.consts[i] = Some(s);
                }
                let _ = p;
                Ok(g.consts[i].clone().expect("just uploaded"))
            }
        }
    }

    /// The device slice of temporary `t`, for writing; it becomes valid on the device only.
    fn dst(&mut self, f: &Frame, t: TensorId) -> Result<Slice, VmError> {
        let Loc::Arena(r) = f.locs[t.0 as usize].clone() else {
            unreachable!("the verifier allows writes to temporaries only");
        };
        let g = self.gpu.as_mut().expect("GPU instructions run only with a device");
        g.valid[t.0 as usize] = Valid::Device;
        Ok(arena_slice(g, r.start as u64, r.len() as u64)?)
    }

    /// A MATMUL's operands as stored (the kernels that read them so never share the
    /// destination), its bias as f32 words with its shape, and its destination.
    #[allow(clippy::type_complexity)]
    fn matmul_stored_operands(
        &mut self,
        p: &Program,
        f: &Frame,
        a: TensorId,
        b: TensorId,
        bias: Option<TensorId>,
        dst: TensorId,
    ) -> Result<(Slice, Slice, Option<(Slice, Vec<usize>)>, Slice), VmError> {
        let (va, vb) = (self.src(p, f, a)?, self.src(p, f, b)?);
        let vbias = match bias {
            Some(t) => Some((self.src_f32(p, f, t, dst, false)?, f.shapes[t.0 as usize].clone())),
            None => None,
        };
        Ok((va, vb, vbias, self.dst(f, dst)?))
    }

    /// Source `t` as f32 words: widened into scratch unless it is f32; copied into scratch
    /// when it is the destination of a kernel that is not elementwise.
    fn src_f32(
        &mut self,
        p: &Program,
        f: &Frame,
        t: TensorId,
        dst: TensorId,
        elementwise: bool,
    ) -> Result<Slice, VmError> {
        let s = self.src(p, f, t)?;
        let dt = p.tensors[t.0 as usize].dtype;
        let n = f.counts[t.0 as usize] as usize;
        let g = self.gpu.as_mut().expect("device");
        if dt != DType::F32 {
            let w = g.scratch(n as u64 * 4)?;
            data::cast(g.exec.kernels(), &mut g.rec, &w, DType::F32, &s, dt, n)?;
            return Ok(w);
        }
        if t == dst && !elementwise {
            let c = g.scratch(s.len)?;
            data::copy(g.exec.kernels(), &mut g.rec, &c, &s)?;
            return Ok(c);
        }
        Ok(s)
    }

    /// Source `t` as 32-bit words for a move (16-bit data zero-extended into scratch).
    fn src_words(&mut self, p: &Program, f: &Frame, t: TensorId, dst: TensorId) -> Result<Slice, VmError> {
        let s = self.src(p, f, t)?;
        let n = f.counts[t.0 as usize] as usize;
        let g = self.gpu.as_mut().expect("device");
        if p.tensors[t.0 as usize].dtype.size() == 2 {
            let w = g.scratch(n as u64 * 4)?;
            data::unpack16(g.exec.kernels(), &mut g.rec, &w, &s, n)?;
            return Ok(w);
        }
        if t == dst {
            let c = g.scratch(s.len)?;
            data::copy(g.exec.kernels(), &mut g.rec, &c, &s)?;
            return Ok(c);
        }
        Ok(s)
    }

    /// Source `t` as stored, copied into scratch when it is `dst` (for the kernels that read
    /// one place while writing another).
    fn src_apart(&mut self, p: &Program, f: &Frame, t: TensorId, dst: TensorId) -> Result<Slice, VmError> {
        let s = self.src(p, f, t)?;
        if t != dst {
            return Ok(s);
        }
        let g = self.gpu.as_mut().expect("device");
        let c = g.scratch(s.len)?;
        data::copy(g.exec.kernels(), &mut g.rec, &c, &s)?;
        Ok(c)
    }

    /// Runs `body` with an f32 destination for `dst` (scratch when `dst` is not f32, rounded
    /// into it afterwards with CAST's kernel).
    fn with_dst_f32(
        &mut self,
        f: &Frame,
        p: &Program,
        dst: TensorId,
        body: impl FnOnce(&mut Gpu, &Slice) -> Result<(), VulkanError>,
    ) -> Result<(), VmError> {
        let d = self.dst(f, dst)?;
        let dt = p.tensors[dst.0 as usize].dtype;
        let n = f.counts[dst.0 as usize] as usize;
        let g = self.gpu.as_mut().expect("device");
        if dt == DType::F32 {
            return Ok(body(g, &d)?);
        }
        let w = g.scratch(n as u64 * 4)?;
        body(g, &w)?;
        data::cast(g.exec.kernels(), &mut g.rec, &d, dt, &w, DType::F32, n)?;
        Ok(())
    }

    /// Runs `body` with a 32-bit destination for a move into `dst` (packed afterwards when
    /// `dst` holds 16-bit data). For whole writes only: `dst` is marked valid on the device
    /// alone and, for 16-bit data, every word of it is rewritten from the scratch, so a
    /// partial write (PUT, SCATTER, TSET) never comes through here.
    fn with_dst_words(
        &mut self,
        f: &Frame,
        p: &Program,
        dst: TensorId,
        body: impl FnOnce(&mut Gpu, &Slice) -> Result<(), VulkanError>,
    ) -> Result<(), VmError> {
        let d = self.dst(f, dst)?;
        let n = f.counts[dst.0 as usize] as usize;
        let g = self.gpu.as_mut().expect("device");
        if p.tensors[dst.0 as usize].dtype.size() != 2 {
            return Ok(body(g, &d)?);
        }
        let w = g.scratch(n as u64 * 4)?;
        body(g, &w)?;
        data::pack16(g.exec.kernels(), &mut g.rec, &d, &w, n)?;
        Ok(())
    }

    /// Records instruction `insn` on the GPU; returns where to go next and its cost.
    pub(super) fn exec_gpu(
        &mut self,
        p: &Program,
        f: &mut Frame,
        index: usize,
        insn: &Insn,
    ) -> Result<(Flow, (u64, u64)), VmError> {
        if let Some(g) = &mut self.gpu {
            g.scratch_used = 0;
        }
        let result = self.record(p, f, index, insn);
        result.map_err(|e| match e {
            VmError::Vulkan(v) => self.gpu_error(index, v.to_string()),
            e => e,
        })
    }

    fn gpu_error(&self, index: usize, what: String) -> VmError {
        match self.runtime_error(index, what) {
            VmError::Runtime { index, at, what } => {
                VmError::Runtime { index, at, what: format!("on the GPU: {what}") }
            }
            e => e,
        }
    }

    fn record(
        &mut self,
        p: &Program,
        f: &mut Frame,
        index: usize,
        insn: &Insn,
    ) -> Result<(Flow, (u64, u64)), VmError> {
        let dt = |t: TensorId| p.tensors[t.0 as usize].dtype;
        let n_of = |f: &Frame, t: TensorId| f.counts[t.0 as usize];
        let shape = |f: &Frame, t: TensorId| f.shapes[t.0 as usize].clone();
        let mut cost = (0u64, 0u64);
        match *insn {
            Insn::Load { dst, src, index: ix, count } => {
                let k = match ix {
                    Some(rg) => {
                        let v = f.regs[rg.0 as usize];
                        if v < 0 || v >= count as i64 {
                            return Err(self.runtime_error(
                                index,
                                format!("LOAD index r{} = {v} is outside 0..{count}", rg.0),
                            ));
                        }
                        v as u16
                    }
                    None => 0,
                };
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                let s = self.src(p, f, TensorId(src.0 + k))?;
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                data::copy(g.exec.kernels(), &mut g.rec, &d, &s)?;
            }
            Insn::Store { out, src } => {
                let s = self.src(p, f, src)?;
                let g = self.gpu.as_mut().expect("device");
                let dl = g.rec.download(&s)?;
                g.pending_outputs.push((out.0 as usize, dl));
                let t = super::HostTensor::from_bytes(
                    dt(src),
                    f.out_shapes[out.0 as usize].clone(),
                    &vec![0u8; s.len as usize],
                )
                .ok_or(VmError::OutOfMemory(s.len))?;
                cost.1 = 2 * s.len;
                self.outputs[out.0 as usize] = Some(t);
            }
            Insn::Copy { dst, src } | Insn::Reshape { dst, src } => {
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                if src != dst {
                    let s = self.src(p, f, src)?;
                    let d = self.dst(f, dst)?;
                    let g = self.gpu_mut();
                    data::copy(g.exec.kernels(), &mut g.rec, &d, &s)?;
                }
            }
            Insn::Slice { dst, src, axis, start } => {
                let sh = shape(f, src);
                let ax = norm_axis(axis, sh.len());
                let len = f.shapes[dst.0 as usize][ax];
                if start as usize + len > sh[ax] {
                    return Err(self.runtime_error(
                        index,
                        format!(
                            "slice {start}..{} is outside axis {ax} of size {}",
                            start as usize + len,
                            sh[ax]
                        ),
                    ));
                }
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                self.gpu_slice(p, f, dst, src, ax, start as usize)?;
            }
            Insn::Concat { dst, a, b, axis } => {
                let (sa, sb, so) = (shape(f, a), shape(f, b), shape(f, dst));
                let ax = norm_axis(axis, sa.len());
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                let ost = strides(&so);
                let va = self.src_words(p, f, a, dst)?;
                let vb = self.src_words(p, f, b, dst)?;
                self.with_dst_words(f, p, dst, |g, d| {
                    let k = g.exec.kernels();
                    data::strided_copy(k, &mut g.rec, d, 0, &ost, &va, 0, &strides(&sa), &sa)?;
                    data::strided_copy(k, &mut g.rec, d, sa[ax] * ost[ax], &ost, &vb, 0, &strides(&sb), &sb)
                })?;
            }
            Insn::Transpose { dst, src, perm } => {
                let sh = shape(f, src);
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                let sst = strides(&sh);
                let dshape = shape(f, dst);
                // Output axis i walks input axis perm[i].
                let pst: Vec<usize> = perm.axes().iter().map(|&ax| sst[ax as usize]).collect();
                let s = self.src_words(p, f, src, dst)?;
                self.with_dst_words(f, p, dst, |g, d| {
                    data::strided_copy(
                        g.exec.kernels(),
                        &mut g.rec,
                        d,
                        0,
                        &strides(&dshape),
                        &s,
                        0,
                        &pst,
                        &dshape,
                    )
                })?;
            }
            Insn::Gather { dst, table, indices } => {
                let tshape = shape(f, table);
                let rows = tshape.first().copied().unwrap_or(0);
                let row: usize = tshape[1..].iter().product();
                let count = n_of(f, indices) as usize;
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                if let Some(format) = super::block_format(p, table) {
                    // The table's blocks as stored, dequantized by the kernel.
                    let t = self.src(p, f, table)?;
                    let ix = self.src(p, f, indices)?;
                    let slot = self.index_check(p, index, indices, rows, "table", false)?;
                    self.with_dst_f32(f, p, dst, |g, d| {
                        data::gather_blocks(
                            g.exec.kernels(),
                            &mut g.rec,
                            d,
                            format,
                            &t,
                            rows,
                            row,
                            &ix,
                            count,
                            &g.status.whole(),
                            slot,
                        )
                    })?;
                    return Ok((Flow::Next, cost));
                }
                let t = self.src_words(p, f, table, dst)?;
                let ix = self.src(p, f, indices)?;
                let slot = self.index_check(p, index, indices, rows, "table", false)?;
                self.with_dst_words(f, p, dst, |g, d| {
                    data::gather(
                        g.exec.kernels(),
                        &mut g.rec,
                        d,
                        &t,
                        rows,
                        row,
                        &ix,
                        count,
                        &g.status.whole(),
                        slot,
                    )
                })?;
            }
            Insn::SliceR { dst, src, axis, start } => {
                let sh = shape(f, src);
                let ax = norm_axis(axis, sh.len());
                let len = f.shapes[dst.0 as usize][ax];
                let at = self.window_start(index, f.regs[start.0 as usize], start, len, sh[ax], "slice")?;
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                self.gpu_slice(p, f, dst, src, ax, at)?;
            }
            Insn::Put { dst, src, axis, start } => {
                let dsh = shape(f, dst);
                let ssh = shape(f, src);
                let ax = norm_axis(axis, dsh.len());
                let len = ssh[ax];
                let at = self.window_start(index, f.regs[start.0 as usize], start, len, dsh[ax], "put")?;
                cost.1 = 2 * n_of(f, src) * dt(dst).size() as u64;
                let s = self.src_apart(p, f, src, dst)?;
                // A partial write: the destination's current bytes on the device first, and no
                // scratch in between, so the elements outside the window keep them.
                self.src(p, f, dst)?;
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                let k = g.exec.kernels();
                if dt(dst).size() == 2 {
                    let inner: usize = dsh[ax + 1..].iter().product();
                    let runs = data::Runs {
                        outer: dsh[..ax].iter().product(),
                        len: len * inner,
                        db: dsh[ax] * inner,
                        dofs: at * inner,
                        sb: len * inner,
                        sofs: 0,
                    };
                    data::window16(k, &mut g.rec, &d, &s, runs)?;
                } else {
                    let dst_strides = strides(&dsh);
                    let offset = at * dst_strides[ax];
                    data::strided_copy(k, &mut g.rec, &d, offset, &dst_strides, &s, 0, &strides(&ssh), &ssh)?;
                }
            }
            Insn::Scatter { dst, src, indices } => {
                let dsh = shape(f, dst);
                let n = dsh.last().copied().unwrap_or(1);
                let total = n_of(f, dst) as usize;
                let rows = total.checked_div(n).unwrap_or(0);
                let count = n_of(f, indices) as usize;
                let size = dt(dst).size();
                cost.1 = 2 * n_of(f, src) * size as u64;
                if count == 0 {
                    return Ok((Flow::Next, cost));
                }
                let ix = self.src_apart(p, f, indices, dst)?;
                // A partial write: the destination's current bytes on the device first.
                let old = self.src(p, f, dst)?;
                let slot = self.index_check(p, index, indices, rows, "destination", true)?;
                let value_slot = STATUS_SLOTS + slot;
                if size == 4 || n % 2 == 0 {
                    // Whole rows of 32-bit words (16-bit rows of even length: n / 2 words),
                    // written in place.
                    let s = self.src_apart(p, f, src, dst)?;
                    let d = self.dst(f, dst)?;
                    let g = self.gpu_mut();
                    let status = g.status.whole();
                    let row = n * size / 4;
                    data::scatter(
                        g.exec.kernels(),
                        &mut g.rec,
                        &d,
                        rows,
                        row,
                        &s,
                        &ix,
                        count,
                        &status,
                        slot,
                        value_slot,
                    )?;
                } else {
                    // 16-bit rows of odd length share words between rows: the destination is
                    // unpacked to one element a word, scattered there and packed back whole
                    // (its every element rewritten with the bits it had or was given).
                    let s = self.src_words(p, f, src, dst)?;
                    let d = self.dst(f, dst)?;
                    let g = self.gpu_mut();
                    let w = g.scratch(total as u64 * 4)?;
                    let status = g.status.whole();
                    let k = g.exec.kernels();
                    data::unpack16(k, &mut g.rec, &w, &old, total)?;
                    data::scatter(k, &mut g.rec, &w, rows, n, &s, &ix, count, &status, slot, value_slot)?;
                    data::pack16(k, &mut g.rec, &d, &w, total)?;
                }
            }
            Insn::Tset { dst, index: ix, value } => {
                // The CPU's check and message.
                let at = self.element_at(p, f, index, dst, ix)?;
                // Two's complement wrap to 32 bits, as the ISA says.
                let bits = f.regs[value.0 as usize] as i32 as u32;
                // A partial write: the other elements' current bytes on the device first.
                self.src(p, f, dst)?;
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                data::set_word(g.exec.kernels(), &mut g.rec, &d, at, bits)?;
            }
            Insn::Argmax { dst, src } => {
                let n = f.shapes[src.0 as usize].last().copied().unwrap_or(1);
                cost = (n_of(f, src), n_of(f, src) * dt(src).size() as u64 + n_of(f, dst) * 4);
                let rows = n_of(f, dst) as usize;
                // Widened exactly (16-bit sources); the kernel orders the bits, so the widening's
                // flushing of bf16 denormals changes nothing (they count as zeros anyway).
                let x = self.src_f32(p, f, src, dst, false)?;
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                data::argmax(g.exec.kernels(), &mut g.rec, &d, &x, rows, n)?;
            }
            Insn::Fill { dst, value } => {
                cost.1 = n_of(f, dst) * dt(dst).size() as u64;
                let n = n_of(f, dst) as usize;
                let (words, bits) = match dt(dst) {
                    DType::I32 => (n, value as i32 as u32),
                    DType::F32 => (n, nx::canon(value).to_bits()),
                    DType::F16 => {
                        (n.div_ceil(2), u32::from(nx::f32_to_f16_bits(nx::canon(value))) * 0x1_0001)
                    }
                    DType::Bf16 => {
                        (n.div_ceil(2), u32::from(nx::f32_to_bf16_bits(nx::canon(value))) * 0x1_0001)
                    }
                };
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                data::fill(g.exec.kernels(), &mut g.rec, &d, words, bits)?;
            }
            Insn::Cast { dst, src } => {
                cost.1 = n_of(f, dst) * (dt(dst).size() + dt(src).size()) as u64;
                let n = n_of(f, dst) as usize;
                let s = self.src(p, f, src)?;
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                data::cast(g.exec.kernels(), &mut g.rec, &d, dt(dst), &s, dt(src), n)?;
            }
            Insn::Rand { dst, seed, dist } => {
                cost.1 = n_of(f, dst) * dt(dst).size() as u64;
                let n = n_of(f, dst) as usize;
                self.with_dst_f32(f, p, dst, |g, d| {
                    data::rand(g.exec.kernels(), &mut g.rec, d, n, seed, dist)
                })?;
            }
            Insn::Neg { dst, a } | Insn::Abs { dst, a } if dt(dst) == DType::I32 => {
                let neg = matches!(insn, Insn::Neg { .. });
                cost.1 = 2 * n_of(f, dst) * 4;
                let n = n_of(f, dst) as usize;
                let s = self.src(p, f, a)?;
                let d = self.dst(f, dst)?;
                let g = self.gpu_mut();
                data::unary_i32(g.exec.kernels(), &mut g.rec, neg, &d, &s, n)?;
            }
            Insn::Neg { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Neg)?,
            Insn::Abs { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Abs)?,
            Insn::Sqrt { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Sqrt)?,
            Insn::Rsqrt { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Rsqrt)?,
            Insn::Exp { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Exp)?,
            Insn::Log { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Log)?,
            Insn::Relu { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Relu)?,
            Insn::Sigmoid { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Sigmoid)?,
            Insn::Tanh { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Tanh)?,
            Insn::Gelu { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Gelu)?,
            Insn::Silu { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Silu)?,
            Insn::Erf { dst, a } => cost = self.gpu_unary(p, f, dst, a, Unary::Erf)?,
            Insn::Eq { dst, a, b } => cost = self.gpu_compare(p, f, dst, a, b, Compare::Eq)?,
            Insn::Lt { dst, a, b } => cost = self.gpu_compare(p, f, dst, a, b, Compare::Lt)?,
            Insn::Le { dst, a, b } => cost = self.gpu_compare(p, f, dst, a, b, Compare::Le)?,
            Insn::Select { dst, cond, a, b } => {
                let size = dt(dst).size() as u64;
                let (sc, sa, sb, so) = (shape(f, cond), shape(f, a), shape(f, b), shape(f, dst));
                cost = (0, n_of(f, cond) * 4 + (n_of(f, a) + n_of(f, b) + n_of(f, dst)) * size);
                // Each element is read only at the index it is written (an operand that is the
                // destination has its shape): no copy aside. 16-bit a and b are unpacked to a
                // word an element and the result packed back.
                let c = self.src(p, f, cond)?;
                let (va, vb) = if size == 2 {
                    (self.src_words(p, f, a, dst)?, self.src_words(p, f, b, dst)?)
                } else {
                    (self.src(p, f, a)?, self.src(p, f, b)?)
                };
                self.with_dst_words(f, p, dst, |g, d| {
                    data::select(g.exec.kernels(), &mut g.rec, d, &c, &sc, &va, &sa, &vb, &sb, &so)
                })?;
            }
            Insn::Add { dst, a, b } => cost = self.gpu_binary(p, f, dst, a, b, Binary::Add)?,
            Insn::Sub { dst, a, b } => cost = self.gpu_binary(p, f, dst, a, b, Binary::Sub)?,
            Insn::Mul { dst, a, b } => cost = self.gpu_binary(p, f, dst, a, b, Binary::Mul)?,
            Insn::Div { dst, a, b } => cost = self.gpu_binary(p, f, dst, a, b, Binary::Div)?,
            Insn::Max { dst, a, b } => cost = self.gpu_binary(p, f, dst, a, b, Binary::Max)?,
            Insn::Min { dst, a, b } => cost = self.gpu_binary(p, f, dst, a, b, Binary::Min)?,
            Insn::AddS { dst, a, s } => cost = self.gpu_binary_scalar(p, f, dst, a, s, Binary::Add)?,
            Insn::SubS { dst, a, s } => cost = self.gpu_binary_scalar(p, f, dst, a, s, Binary::Sub)?,
            Insn::MulS { dst, a, s } => cost = self.gpu_binary_scalar(p, f, dst, a, s, Binary::Mul)?,
            Insn::DivS { dst, a, s } => cost = self.gpu_binary_scalar(p, f, dst, a, s, Binary::Div)?,
            Insn::MaxS { dst, a, s } => cost = self.gpu_binary_scalar(p, f, dst, a, s, Binary::Max)?,
            Insn::MinS { dst, a, s } => cost = self.gpu_binary_scalar(p, f, dst, a, s, Binary::Min)?,
            Insn::Matmul { dst, a, b, bias, ta, tb, act } => {
                let gs = MatmulShape { a: shape(f, a), b: shape(f, b), out: shape(f, dst), ta, tb };
                let k = if ta { gs.a[gs.a.len() - 2] } else { gs.a[gs.a.len() - 1] } as u64;
                cost =
                    (2 * n_of(f, dst) * k, (n_of(f, a) + n_of(f, b) + n_of(f, dst)) * dt(dst).size() as u64);
                // b block-quantized: its blocks as stored, dequantized by the kernels (both
                // tiers: the strict bits).
                if let Some(format) = super::block_format(p, b) {
                    let va = self.src_f32(p, f, a, dst, false)?;
                    let vb = self.src(p, f, b)?;
                    let vbias = match bias {
                        Some(t) => Some((self.src_f32(p, f, t, dst, false)?, shape(f, t))),
                        None => None,
                    };
                    self.with_dst_f32(f, p, dst, |g, d| {
                        let bias = vbias.as_ref().map(|(s, sh)| (s, sh.as_slice()));
                        rows::matmul_blocks(g.exec.kernels(), &mut g.rec, &gs, act, format, d, &va, &vb, bias)
                    })?;
                    return Ok((Flow::Next, cost));
                }
                // Fast tier, f16 or bf16 operands and output: straight from their 16-bit bytes on
                // cooperative matrices where the device has them (f32 sums, the output rounded
                // once).
                let operands = dt(a);
                let coopmat = p.tier == Tier::Fast
                    && matches!(operands, DType::F16 | DType::Bf16)
                    && dt(b) == operands
                    && dt(dst) == operands
                    && a != dst
                    && b != dst
                    && self.gpu.as_ref().is_some_and(|g| rows::coopmat_runs(g.exec.kernels(), operands));
                if coopmat {
                    let (va, vb, vbias, d) = self.matmul_stored_operands(p, f, a, b, bias, dst)?;
                    let g = self.gpu.as_mut().expect("device");
                    let bias = vbias.as_ref().map(|(s, sh)| (s, sh.as_slice()));
                    let mut restaged = [None, None];
                    for (slot, bytes) in restaged.iter_mut().zip(rows::coopmat_restaging(&gs)) {
                        if let Some(bytes) = bytes {
                            *slot = Some(g.scratch(bytes)?);
                        }
                    }
                    // GELU comes after the sums, before their one rounding to 16 bits: the sums
                    // into f32 scratch, then GELU and the rounding in one pass.
                    let wide = match act {
                        Act::Gelu => Some(g.scratch(n_of(f, dst) * 4)?),
                        _ => None,
                    };
                    rows::matmul_coopmat(
                        g.exec.kernels(),
                        &mut g.rec,
                        &gs,
                        if wide.is_some() { Act::None } else { act },
                        operands,
                        wide.as_ref().unwrap_or(&d),
                        wide.is_none(),
                        &va,
                        &vb,
                        bias,
                        [restaged[0].as_ref(), restaged[1].as_ref()],
                    )?;
                    if let Some(w) = &wide {
                        let n = n_of(f, dst) as usize;
                        data::gelu_cast(g.exec.kernels(), &mut g.rec, &d, operands, w, n)?;
                    }
                    return Ok((Flow::Next, cost));
                }
                // Fast tier, large f32 matmuls: on bf16 cooperative matrices, each operand cut
                // into three pieces (rows::matmul_split_bf16 says how, and how accurate).
                let split = p.tier == Tier::Fast
                    && [dt(a), dt(b), dt(dst)].iter().all(|&d| d == DType::F32)
                    && a != dst
                    && b != dst;
                let pieces = self
                    .gpu
                    .as_ref()
                    .filter(|_| split)
                    .and_then(|g| rows::split_sgemm_chosen(g.exec.kernels(), &gs));
                if let Some(bytes) = pieces {
                    let (va, vb, vbias, d) = self.matmul_stored_operands(p, f, a, b, bias, dst)?;
                    let g = self.gpu.as_mut().expect("device");
                    let bias = vbias.as_ref().map(|(s, sh)| (s, sh.as_slice()));
                    // Where the device cannot hold the pieces, the FMA kernel below runs instead.
                    let s: Result<Vec<Slice>, VmError> = bytes.iter().map(|&n| g.scratch(n)).collect();
                    if let Ok(s) = s {
                        rows::matmul_split_bf16(
                            g.exec.kernels(),
                            &mut g.rec,
                            &gs,
                            act,
                            &d,
                            &va,
                            &vb,
                            bias,
                            [&s[0], &s[1], &s[2], &s[3]],
                        )?;
                        return Ok((Flow::Next, cost));
                    }
                }
                let va = self.src_f32(p, f, a, dst, false)?;
                let vb = self.src_f32(p, f, b, dst, false)?;
                let vbias = match bias {
                    Some(t) => Some((self.src_f32(p, f, t, dst, false)?, shape(f, t))),
                    None => None,
                };
                // f16 operands: the fast kernel is the strict one's bits (rows::gemm_tier says why).
                let tier = if dt(b) == operands { rows::gemm_tier(p.tier, operands) } else { p.tier };
                // Fast tier, too few output tiles to fill the device: k cut into spans that run
                // at once (rows::matmul_split_k). Its destination must not be an operand.
                let overlaps = [Some(a), Some(b), bias].contains(&Some(dst));
                let split_k =
                    self.gpu.as_mut().filter(|_| !overlaps && dt(dst) == DType::F32).and_then(|g| {
                        let split = rows::split_k_chosen(g.exec.kernels(), &gs, tier)?;
                        Some((split, g.scratch(split.scratch_bytes).ok()?))
                    });
                self.with_dst_f32(f, p, dst, |g, d| {
                    let bias = vbias.as_ref().map(|(s, sh)| (s, sh.as_slice()));
                    let k = g.exec.kernels();
                    match &split_k {
                        Some((split, scratch)) => {
                            rows::matmul_split_k(k, &mut g.rec, &gs, act, d, &va, &vb, bias, *split, scratch)
                        }
                        None => rows::matmul(k, &mut g.rec, &gs, act, tier, d, &va, &vb, bias),
                    }
                })?;
            }
            Insn::Softmax { dst, x, mask, scale } => {
                let sh = shape(f, x);
                cost = (5 * n_of(f, dst), 2 * n_of(f, dst) * dt(dst).size() as u64);
                let vx = self.src_f32(p, f, x, dst, false)?;
                let vm = match mask {
                    Some(t) => Some((self.src_f32(p, f, t, dst, false)?, shape(f, t))),
                    None => None,
                };
                self.with_dst_f32(f, p, dst, |g, d| {
                    let mask = vm.as_ref().map(|(s, sh)| (s, sh.as_slice()));
                    rows::softmax_in(
                        g.exec.kernels(),
                        &mut g.rec,
                        p.tier,
                        d,
                        &vx,
                        &sh,
                        mask,
                        scale,
                        &Tuning::default(),
                    )
                })?;
            }
            Insn::Layernorm { dst, x, gamma, beta, eps } => {
                let n = f.shapes[x.0 as usize].last().copied().unwrap_or(1);
                let rows_n = (n_of(f, x) as usize).checked_div(n).unwrap_or(0);
                cost = (8 * n_of(f, dst), 2 * n_of(f, dst) * dt(dst).size() as u64);
                let vx = self.src_f32(p, f, x, dst, false)?;
                let vg = gamma.map(|t| self.src_f32(p, f, t, dst, false)).transpose()?;
                let vb = beta.map(|t| self.src_f32(p, f, t, dst, false)).transpose()?;
                self.with_dst_f32(f, p, dst, |g, d| {
                    rows::layernorm_in(
                        g.exec.kernels(),
                        &mut g.rec,
                        p.tier,
                        d,
                        &vx,
                        rows_n,
                        n,
                        vg.as_ref(),
                        vb.as_ref(),
                        eps,
                        &Tuning::default(),
                    )
                })?;
            }
            Insn::Rmsnorm { dst, x, gamma, eps } => {
                let n = f.shapes[x.0 as usize].last().copied().unwrap_or(1);
                let rows_n = (n_of(f, x) as usize).checked_div(n).unwrap_or(0);
                cost = (4 * n_of(f, dst), 2 * n_of(f, dst) * dt(dst).size() as u64);
                let vx = self.src_f32(p, f, x, dst, false)?;
                let vg = gamma.map(|t| self.src_f32(p, f, t, dst, false)).transpose()?;
                self.with_dst_f32(f, p, dst, |g, d| {
                    let (k, t) = (g.exec.kernels(), Tuning::default());
                    rows::rmsnorm_in(k, &mut g.rec, p.tier, d, &vx, rows_n, n, vg.as_ref(), eps, &t)
                })?;
            }
            Insn::ReduceSum { dst, src, axis } => {
                cost = self.gpu_reduce(p, f, dst, src, axis, Reduce::Sum)?
            }
            Insn::ReduceMean { dst, src, axis } => {
                cost = self.gpu_reduce(p, f, dst, src, axis, Reduce::Mean)?
            }
            Insn::ReduceMax { dst, src, axis } => {
                cost = self.gpu_reduce(p, f, dst, src, axis, Reduce::Max)?
            }
            Insn::Kernel { k } => {
                let decl = &p.kernels[k.0 as usize];
                let program = self.program.clone();
                let info = program.kernel(k);
                let mut bindings = Vec::with_capacity(decl.bindings.len());
                for (&t, &w) in decl.bindings.iter().zip(&info.written) {
                    bindings.push(if w {
                        Binding::write(&self.dst(f, t)?)
                    } else {
                        Binding::read(&self.src(p, f, t)?)
                    });
                }
                let kernel = self.user_kernel(p, k.0 as usize)?;
                // The push-constant words: on the stack up to 256 bytes (the most devices allow).
                let words = decl.push.len().div_ceil(4);
                let (mut inline, mut heap) = ([0u32; 64], Vec::new());
                let push: &mut [u32] = if words <= inline.len() {
                    &mut inline[..words]
                } else {
                    heap.resize(words, 0);
                    &mut heap
                };
                for (w, c) in push.iter_mut().zip(decl.push.chunks(4)) {
                    let mut b = [0u8; 4];
                    b[..c.len()].copy_from_slice(c);
                    *w = u32::from_le_bytes(b);
                }
                self.gpu_mut().rec.dispatch(&kernel, &bindings, push, decl.groups)?;
            }
            Insn::GpuSync => self.gpu_sync(p)?,
            // Run by the host (`on_gpu` never places them on the device): control flow and
            // registers, ALLOC and FREE, and TGET (it writes a register).
            Insn::Nop
            | Insn::Halt
            | Insn::Jmp { .. }
            | Insn::Jz { .. }
            | Insn::Jnz { .. }
            | Insn::Iset { .. }
            | Insn::Iadd { .. }
            | Insn::Iaddi { .. }
            | Insn::Isub { .. }
            | Insn::Imul { .. }
            | Insn::Ilt { .. }
            | Insn::Ieq { .. }
            | Insn::Alloc { .. }
            | Insn::Free { .. }
            | Insn::Tget { .. } => {
                return Err(self.runtime_error(
                    index,
                    "internal: an instruction the host runs was placed on the GPU".into(),
                ))
            }
        }
        Ok((Flow::Next, cost))
    }

    /// Records a float unary instruction; returns its (flops, bytes).
    fn gpu_unary(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        op: Unary,
    ) -> Result<(u64, u64), VmError> {
        let n = f.counts[dst.0 as usize];
        let s = self.src_f32(p, f, a, dst, true)?;
        self.with_dst_f32(f, p, dst, |g, d| {
            data::unary(g.exec.kernels(), &mut g.rec, op, p.tier, d, &s, n as usize)
        })?;
        Ok((n, 2 * n * p.tensors[dst.0 as usize].dtype.size() as u64))
    }

    /// Records a broadcasting binary instruction (float or i32); returns its (flops, bytes).
    fn gpu_binary(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        b: TensorId,
        op: Binary,
    ) -> Result<(u64, u64), VmError> {
        let dtype = p.tensors[dst.0 as usize].dtype;
        // Borrowed, not cloned: the commonest instructions record without allocating.
        let (sa, sb, so) = (&f.shapes[a.0 as usize], &f.shapes[b.0 as usize], &f.shapes[dst.0 as usize]);
        let n = |t: TensorId| f.counts[t.0 as usize];
        if dtype == DType::I32 {
            let va = self.src(p, f, a)?;
            let vb = self.src(p, f, b)?;
            let d = self.dst(f, dst)?;
            let g = self.gpu_mut();
            data::binary_i32(g.exec.kernels(), &mut g.rec, op, &d, &va, sa, &vb, sb, so)?;
        } else {
            let va = self.src_f32(p, f, a, dst, true)?;
            let vb = self.src_f32(p, f, b, dst, true)?;
            self.with_dst_f32(f, p, dst, |g, d| {
                data::binary(g.exec.kernels(), &mut g.rec, op, d, &va, sa, &vb, sb, so)
            })?;
        }
        Ok((n(dst), (n(a) + n(b) + n(dst)) * dtype.size() as u64))
    }

    /// Records a comparison (EQ, LT, LE): i32 1 or 0 into dst from a and b of one dtype, f32
    /// or i32 as stored, f16 and bf16 widened exactly to f32 first; returns its (flops, bytes).
    fn gpu_compare(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        b: TensorId,
        op: Compare,
    ) -> Result<(u64, u64), VmError> {
        let sd = p.tensors[a.0 as usize].dtype;
        let (sa, sb, so) = (&f.shapes[a.0 as usize], &f.shapes[b.0 as usize], &f.shapes[dst.0 as usize]);
        let n = |t: TensorId| f.counts[t.0 as usize];
        // Elementwise: an operand that is dst (all i32) is read only where it is written.
        let (va, vb) = if sd == DType::I32 {
            (self.src(p, f, a)?, self.src(p, f, b)?)
        } else {
            (self.src_f32(p, f, a, dst, true)?, self.src_f32(p, f, b, dst, true)?)
        };
        let d = self.dst(f, dst)?;
        let g = self.gpu_mut();
        data::compare(g.exec.kernels(), &mut g.rec, op, sd == DType::I32, &d, &va, sa, &vb, sb, so)?;
        Ok((n(dst), (n(a) + n(b)) * sd.size() as u64 + n(dst) * 4))
    }

    /// Records a float binary instruction with a scalar immediate; returns its (flops, bytes).
    fn gpu_binary_scalar(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        s: f32,
        op: Binary,
    ) -> Result<(u64, u64), VmError> {
        let n = f.counts[dst.0 as usize];
        let va = self.src_f32(p, f, a, dst, true)?;
        self.with_dst_f32(f, p, dst, |g, d| {
            data::binary_scalar(g.exec.kernels(), &mut g.rec, op, d, &va, s, n as usize)
        })?;
        Ok((n, 2 * n * p.tensors[dst.0 as usize].dtype.size() as u64))
    }

    /// Records a reduction over one axis; returns its (flops, bytes).
    fn gpu_reduce(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        src: TensorId,
        axis: i8,
        op: Reduce,
    ) -> Result<(u64, u64), VmError> {
        let n_of = |f: &Frame, t: TensorId| f.counts[t.0 as usize];
        let shape = |f: &Frame, t: TensorId| f.shapes[t.0 as usize].clone();
        let dt = |t: TensorId| p.tensors[t.0 as usize].dtype;
        let sh = shape(f, src);
        let ax = norm_axis(axis, sh.len());
        let cost = (n_of(f, src), (n_of(f, src) + n_of(f, dst)) * dt(dst).size() as u64);
        let vx = self.src_f32(p, f, src, dst, false)?;
        // Where the reduced axis is cut (few outputs), the partial results.
        let bytes = rows::reduce_partials(p.tier, op, &sh, ax);
        let partials =
            if bytes > 0 { Some(self.gpu.as_mut().expect("device").scratch(bytes)?) } else { None };
        self.with_dst_f32(f, p, dst, |g, d| {
            let (k, t) = (g.exec.kernels(), Tuning::default());
            rows::reduce_in(k, &mut g.rec, p.tier, op, d, &vx, &sh, ax, partials.as_ref(), &t)
        })?;
        Ok(cost)
    }

    /// Records SLICE (and SLICE at a register offset): `dst = src[..., start : start + len, ...]`
    /// along axis `ax`, where len is dst's size there (bounds already checked). 32-bit data is
    /// one strided copy; 16-bit data is copied as packed halves by `window16`, with no
    /// widening of the source.
    fn gpu_slice(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        src: TensorId,
        ax: usize,
        start: usize,
    ) -> Result<(), VmError> {
        let sh = f.shapes[src.0 as usize].clone();
        let dshape = f.shapes[dst.0 as usize].clone();
        let s = self.src_apart(p, f, src, dst)?;
        let d = self.dst(f, dst)?;
        let g = self.gpu_mut();
        let k = g.exec.kernels();
        if p.tensors[dst.0 as usize].dtype.size() == 2 {
            let inner: usize = sh[ax + 1..].iter().product();
            let len = dshape[ax] * inner;
            let runs = data::Runs {
                outer: sh[..ax].iter().product(),
                len,
                db: len,
                dofs: 0,
                sb: sh[ax] * inner,
                sofs: start * inner,
            };
            data::window16(k, &mut g.rec, &d, &s, runs)?;
        } else {
            let sst = strides(&sh);
            data::strided_copy(k, &mut g.rec, &d, 0, &strides(&dshape), &s, start * sst[ax], &sst, &dshape)?;
        }
        Ok(())
    }

    /// A status slot for the bounds check of a GATHER or SCATTER (instruction `index`, indices
    /// `indices`, `rows` rows of its `of`; `value_on_device` where the kernel also writes the
    /// bad index's value), reported by `flush` after the batch. A full set of
    /// slots is flushed first; the batch's first check resets every slot at once (a binding
    /// at another slot's offset would break the device's storage-buffer offset alignment,
    /// 256 bytes on most devices, so slots are never bound one by one).
    fn index_check(
        &mut self,
        p: &Program,
        index: usize,
        indices: TensorId,
        rows: usize,
        of: &'static str,
        value_on_device: bool,
    ) -> Result<u32, VmError> {
        if self.gpu_mut().checks.len() as u32 == STATUS_SLOTS {
            self.gpu_sync(p)?;
        }
        let g = self.gpu_mut();
        let slot = g.checks.len() as u32;
        g.checks.push(PendingCheck { slot, index, indices, rows, of, value_on_device });
        if slot == 0 {
            data::fill(g.exec.kernels(), &mut g.rec, &g.status.whole(), STATUS_SLOTS as usize, u32::MAX)?;
        }
        Ok(slot)
    }

    fn gpu_mut(&mut self) -> &mut Gpu {
        self.gpu.as_mut().expect("GPU instructions run only with a device")
    }

    /// The pipeline of user kernel `k`, built on first use.
    fn user_kernel(&mut self, p: &Program, k: usize) -> Result<Arc<Kernel>, VmError> {
        let g = self.gpu.as_mut().expect("device");
        if let Some(kern) = &g.user[k] {
            return Ok(kern.clone());
        }
        let decl = &p.kernels[k];
        let words = &p.spirv[decl.module as usize].words;
        let kern = Arc::new(Kernel::with_entry(g.exec.device(), &decl.name, words, &decl.entry)?);
        g.user[k] = Some(kern.clone());
        Ok(kern)
    }
}

/// The slice of the device arena at `offset`.
fn arena_slice(g: &Gpu, offset: u64, len: u64) -> Result<Slice, VulkanError> {
    g.arena.as_ref().ok_or_else(|| VulkanError::Invalid("no device arena".into()))?.slice(offset, len)
}
