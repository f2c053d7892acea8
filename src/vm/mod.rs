//! The virtual machine: binds inputs, lays out the arena from the verifier's memory plan, and
//! interprets the code on the CPU reference executor.
//!
//! Invariants: the VM only runs a `VerifiedProgram` and re-checks nothing the verifier proved
//! (shapes, dtypes, liveness). What only a run can know is checked here with a clean error:
//! input shapes, symbol bindings, the memory and step budgets, GATHER and LOAD indices.
//! Live temporaries never overlap in the arena (the plan guarantees it), so an instruction's
//! output can be borrowed mutably beside its inputs; an input that *is* the output is copied.

mod gpu;
mod sched;
mod tensor;

use std::borrow::Cow;
use std::ops::{ControlFlow, Range};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::exec::cpu::fpenv::FtzGuard;
use crate::exec::cpu::reference::{self as r, Binary, Compare, MatmulShape, Reduce, Unary};
use crate::exec::cpu::{self as cpu, simd, worker_pool, Ctx, SimdLevel};
use crate::format::{ConstData, Program, TensorKind};
use crate::isa::{DType, Dim, Insn, Instruction, TensorId, MAX_TENSOR_READS};
use crate::numerics as nx;
use crate::verify::{MemoryPlan, VerifiedProgram};

pub use gpu::{device_at, shared_device, Backend, AUTO_MIN_WORK};
pub use tensor::{element_count, tensor_digest, AlignedBuf, HostTensor};

/// The most worker threads a VM starts per core of the machine (`--threads`,
/// [`VmConfig::threads`]): more cannot run at once, and starting a hundred thousand takes minutes.
pub const MAX_THREADS_PER_CORE: usize = 4;

/// Run-time settings.
#[derive(Clone, Debug, Default)]
pub struct VmConfig {
    /// Refuse to start a run whose arena, inputs and outputs need more bytes than this.
    /// None: the memory available on this machine.
    pub max_memory: Option<u64>,
    /// End a run after this many executed instructions. None: no limit.
    pub max_steps: Option<u64>,
    /// Worker threads for large kernels. None: every core. Results never depend on it.
    pub threads: Option<usize>,
    /// Vector instructions kernels may use. None: the best this CPU has, lowered by
    /// `ADEADVM_SIMD`. Strict-tier results never depend on it.
    pub simd: Option<SimdLevel>,
    /// Which executor runs tensor instructions (default: the CPU).
    pub backend: Backend,
    /// Refuse to start a run whose device arena, constants and inputs need more device memory
    /// than this. None: the device's largest device-local memory heap.
    pub max_device_memory: Option<u64>,
    /// Which Vulkan device (as `adeadvm info` numbers them) the `vulkan` and `auto` backends
    /// use. None: `ADEADVM_VULKAN_DEVICE`, else the best device.
    pub vulkan_device: Option<usize>,
}

/// Why a run failed.
#[derive(Debug, Error)]
pub enum VmError {
    #[error("input {name} is declared {expected} but was given {got} data")]
    InputDtype { name: String, expected: DType, got: DType },
    #[error(transparent)]
    Binding(#[from] crate::verify::PlanError),
    #[error("this run needs {needed} bytes (arena peak {peak}, inputs and outputs {io}, constants and scratch {other}), more than the memory budget of {budget} bytes")]
    MemoryBudget { needed: u64, peak: u64, io: u64, other: u64, budget: u64 },
    #[error(
        "the program's constants need {bytes} bytes in memory, more than the memory budget of {budget} bytes"
    )]
    ConstantBudget { bytes: u64, budget: u64 },
    #[error("this run needs {needed} bytes of device memory on {device} (arena {arena}, constants {constants}, inputs {inputs}), more than the device memory budget of {budget} bytes")]
    DeviceMemoryBudget { needed: u64, arena: u64, constants: u64, inputs: u64, budget: u64, device: String },
    #[error("kernel {kernel} cannot run on the Vulkan device {device}: {what}")]
    KernelLimit { kernel: String, what: String, device: String },
    #[error("out of host memory allocating {0} bytes")]
    OutOfMemory(u64),
    #[error("the step budget of {0} instructions was used up; the program may loop forever (raise --max-steps if not)")]
    StepBudget(u64),
    #[error("cannot start {threads} worker threads: {why}")]
    Threads { threads: usize, why: String },
    #[error("{threads} worker threads is more than the limit of {max} ({MAX_THREADS_PER_CORE} per core on this machine's {cores} cores)")]
    TooManyThreads { threads: usize, max: usize, cores: usize },
    #[error("instruction {index} ({at}): {what}")]
    Runtime { index: usize, at: String, what: String },
    #[error(transparent)]
    Vulkan(#[from] crate::exec::vulkan::VulkanError),
}

/// What an observer sees after each executed instruction.
pub struct StepEvent<'a> {
    /// How many instructions ran before this one.
    pub step: u64,
    /// Index of the instruction in the code.
    pub index: usize,
    pub instruction: &'a Instruction,
    /// The tensor the instruction wrote (dtype, concrete shape, bytes): for STORE the output.
    /// None for instructions that write no tensor data (control, ALLOC, FREE), and unless an
    /// observer wants written data.
    pub written: Option<(DType, &'a [usize], &'a [u8])>,
    /// Wall time of this instruction (zero unless an observer wants timing).
    pub elapsed: Duration,
    /// GPU time of the commands this instruction recorded (Vulkan timestamps), when it ran on a
    /// device that has them and an observer wants timing.
    pub gpu_elapsed: Option<Duration>,
    /// Floating-point operations it performed (matmul: 2·M·N·K), for the profiler.
    pub flops: u64,
    /// Bytes it read and wrote, for the profiler.
    pub bytes: u64,
}

/// What an observer needs in each [`StepEvent`]. What none asks for is left out (`elapsed` is
/// zero, `written` is None), which keeps the interpreter's cost per instruction low.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wants {
    /// Time each instruction (two clock reads per instruction).
    pub timing: bool,
    /// Show the tensor each instruction wrote.
    pub written: bool,
}

/// Receives every step of a run (trace recording, replay, profiling, progress). `Send`: a run
/// with worker threads calls it from one of them.
pub trait Observer: Send {
    /// Called after each instruction; `Break` ends the run early (it still returns Ok).
    fn step(&mut self, event: &StepEvent<'_>) -> ControlFlow<()>;
    /// What this observer needs in each event (default: everything).
    fn wants(&self) -> Wants {
        Wants { timing: true, written: true }
    }
}

impl Observer for () {
    fn step(&mut self, _: &StepEvent<'_>) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    fn wants(&self) -> Wants {
        Wants::default()
    }
}

/// Totals of one run.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Instructions executed.
    pub steps: u64,
    pub elapsed: Duration,
    /// Bytes of the arena this run used.
    pub arena_bytes: u64,
    /// Instructions that ran in batches of independent instructions at the same time.
    pub concurrent: u64,
    /// Of `elapsed`, the time the host spent in queue submissions and waiting for the GPU
    /// (zero without a device): `elapsed - gpu_wait` is the host's own work.
    pub gpu_wait: Duration,
    /// GPU queue submissions this run made (each a sub-batch of recorded commands).
    pub gpu_submissions: u64,
    /// Of those, the ones that ran a command buffer recorded by an earlier run of this VM
    /// (the same commands with the same bindings: see exec::vulkan::stream).
    pub gpu_reused: u64,
}

/// Where a tensor's bytes live during a run.
#[derive(Clone, Debug)]
enum Loc {
    Arena(Range<usize>),
    Input(usize),
    Const(usize),
}

/// Constant storage: a range of the program's data (when aligned for its dtype) or a copy.
enum ConstStore {
    Data(Range<usize>),
    Owned(AlignedBuf),
}

/// A virtual machine for one verified program. Create one per thread; many may share a program.
pub struct Vm {
    program: Arc<VerifiedProgram>,
    config: VmConfig,
    /// Tensor ids of the inputs, in table order, and what is bound to each.
    input_ids: Vec<TensorId>,
    inputs: Vec<Option<HostTensor>>,
    outputs: Vec<Option<HostTensor>>,
    consts: Vec<Option<ConstStore>>,
    arena: AlignedBuf,
    /// The memory plan of the last dimension binding: runs with the same input shapes reuse it.
    plan_cache: Option<(Vec<u64>, Arc<MemoryPlan>)>,
    level: SimdLevel,
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Where an instruction's source is copied when it is also the destination.
    scratch: AlignedBuf,
    /// Bytes of constants the VM holds in memory of its own (splats, unaligned copies),
    /// counted in every run's memory budget.
    owned_const_bytes: u64,
    /// Why the last run failed, if it did: its outputs are gone, and asking for one says why.
    last_failure: Option<String>,
    /// The Vulkan side, when the placement uses a device.
    gpu: Option<gpu::Gpu>,
    /// Constant MATMUL operands packed for the CPU's blocked kernels, by (tensor, `tb`):
    /// packed on first use and kept for the session (see [`Vm::packed_weight`]).
    packed: std::collections::HashMap<(u16, bool), Arc<cpu::gemm::PackedB>>,
    /// Bytes `packed` holds.
    packed_bytes: u64,
    /// Bytes of the memory budget this run leaves for packing more.
    pack_room: u64,
}

/// Most bytes of packed constants a session keeps (twice MiniLM-L6's projection weights
/// take 85 MB; a model whose weights are past this packs the rest on every product, as before).
const PACKED_MAX_BYTES: u64 = 1 << 30;

impl Vm {
    /// A VM ready to take inputs.
    pub fn new(program: Arc<VerifiedProgram>, config: VmConfig) -> Result<Vm, VmError> {
        let p = program.program();
        let input_ids: Vec<TensorId> = p
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind == TensorKind::Input)
            .map(|(i, _)| TensorId(i as u16))
            .collect();
        // Splat constants live in memory the VM owns: counted against the memory budget
        // before any is allocated, so a program that claims a huge one fails here, at once.
        let splat_bytes = p
            .tensors
            .iter()
            .filter(|t| matches!(t.kind, TensorKind::Const(ConstData::Splat(_))))
            .map(|t| (concrete(&t.shape).unwrap_or(0) as u64).saturating_mul(t.dtype.size() as u64))
            .fold(0u64, u64::saturating_add);
        let budget = config.max_memory.unwrap_or_else(available_memory);
        if splat_bytes > budget {
            return Err(VmError::ConstantBudget { bytes: splat_bytes, budget });
        }
        let mut consts = Vec::with_capacity(p.tensors.len());
        for t in &p.tensors {
            consts.push(match t.kind {
                // Blocks are read as bytes, so any address will do.
                TensorKind::Const(ConstData::Blocks { offset, len, .. }) => {
                    Some(ConstStore::Data(offset as usize..(offset + len) as usize))
                }
                TensorKind::Const(ConstData::Bytes { offset, len }) => {
                    let range = offset as usize..(offset + len) as usize;
                    let aligned = (p.data.as_ptr() as usize + range.start).is_multiple_of(t.dtype.size());
                    Some(if aligned {
                        ConstStore::Data(range)
                    } else {
                        let bytes = p.data.get(range).unwrap_or_default();
                        ConstStore::Owned(AlignedBuf::from_bytes(bytes).ok_or(VmError::OutOfMemory(len))?)
                    })
                }
                TensorKind::Const(ConstData::Splat(bits)) => {
                    let n = concrete(&t.shape).unwrap_or(0);
                    let size = t.dtype.size();
                    let bytes = (n * size) as u64;
                    let mut buf = AlignedBuf::zeroed(n * size).ok_or(VmError::OutOfMemory(bytes))?;
                    let pattern = &bits.to_le_bytes()[..size];
                    for chunk in buf.bytes_mut().chunks_exact_mut(size) {
                        chunk.copy_from_slice(pattern);
                    }
                    Some(ConstStore::Owned(buf))
                }
                _ => None,
            });
        }
        let outputs = vec![None; p.outputs.len()];
        let inputs = vec![None; input_ids.len()];
        let level = config.simd.unwrap_or_else(SimdLevel::from_env).min(SimdLevel::detect());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = config.threads.unwrap_or(cores);
        let max = cores.saturating_mul(MAX_THREADS_PER_CORE);
        if threads > max {
            return Err(VmError::TooManyThreads { threads, max, cores });
        }
        let owned_const_bytes = consts
            .iter()
            .map(|c| match c {
                Some(ConstStore::Owned(b)) => b.len() as u64,
                _ => 0,
            })
            .sum();
        let pool = if threads > 1 {
            Some(Arc::new(
                worker_pool(threads).map_err(|e| VmError::Threads { threads, why: e.to_string() })?,
            ))
        } else {
            None
        };
        let gpu = gpu::Gpu::new(p, input_ids.len(), config.backend, config.vulkan_device)?;
        if let Some(g) = &gpu {
            g.check_kernel_limits(&program)?;
        }
        Ok(Vm {
            gpu,
            config,
            input_ids,
            inputs,
            outputs,
            consts,
            arena: AlignedBuf::default(),
            plan_cache: None,
            level,
            pool,
            scratch: AlignedBuf::default(),
            owned_const_bytes,
            last_failure: None,
            program,
            packed: std::collections::HashMap::new(),
            packed_bytes: 0,
            pack_room: 0,
        })
    }

    /// The vector instruction level kernels use.
    pub fn simd_level(&self) -> SimdLevel {
        self.level
    }

    /// The Vulkan device this VM places instructions on, if any.
    pub fn gpu_device(&self) -> Option<&str> {
        self.gpu.as_ref().map(|g| g.device_name())
    }

    /// Worker threads kernels may use.
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }

    /// The program this VM runs.
    pub fn program(&self) -> &Arc<VerifiedProgram> {
        &self.program
    }

    /// Names of the inputs, in declaration order.
    pub fn input_names(&self) -> Vec<&str> {
        self.input_ids.iter().map(|t| self.program.program().tensors[t.0 as usize].name.as_str()).collect()
    }

    /// Binds an input by name. The dtype is checked now, the shape when the run starts.
    pub fn set_input(&mut self, name: &str, tensor: HostTensor) -> Result<(), VmError> {
        let known = self.input_names().join(", ");
        let Some(k) = self.input_names().iter().position(|n| *n == name) else {
            return Err(crate::verify::PlanError::UnknownInput { name: name.to_string(), known }.into());
        };
        let decl = &self.program.program().tensors[self.input_ids[k].0 as usize];
        if tensor.dtype != decl.dtype {
            return Err(VmError::InputDtype { name: name.into(), expected: decl.dtype, got: tensor.dtype });
        }
        self.inputs[k] = Some(tensor);
        if let Some(g) = &mut self.gpu {
            g.input_changed(k);
        }
        Ok(())
    }

    /// An output of the last run, by name.
    pub fn output(&self, name: &str) -> Option<&HostTensor> {
        let i = self.program.program().outputs.iter().position(|o| o.name == name)?;
        self.outputs[i].as_ref()
    }

    /// Why the last run failed, when it did (it left no outputs).
    pub fn last_failure(&self) -> Option<&str> {
        self.last_failure.as_deref()
    }

    /// All outputs of the last run, in declaration order.
    pub fn outputs(&self) -> Vec<(&str, &HostTensor)> {
        self.program
            .program()
            .outputs
            .iter()
            .zip(&self.outputs)
            .filter_map(|(d, t)| Some((d.name.as_str(), t.as_ref()?)))
            .collect()
    }

    /// Resolves every symbolic dimension from the bound inputs (the verifier's rules).
    fn bind_dims(&self) -> Result<Vec<u64>, VmError> {
        let names = self.input_names();
        let shapes: Vec<Vec<u64>> =
            self.inputs.iter().flatten().map(|t| t.shape.iter().map(|&d| d as u64).collect()).collect();
        let given: Vec<(&str, &[u64])> = names
            .iter()
            .zip(&self.inputs)
            .filter(|(_, t)| t.is_some())
            .map(|(n, _)| *n)
            .zip(shapes.iter().map(Vec::as_slice))
            .collect();
        Ok(self.program.dims_from_inputs(&given)?)
    }

    /// Runs the program once.
    pub fn run(&mut self) -> Result<RunStats, VmError> {
        self.run_observed(&mut ())
    }

    /// Runs the program once, reporting every step to `observer`. A run either delivers every
    /// output or none: when it fails, the outputs stored before the failure are dropped, and
    /// [`Vm::last_failure`] says why (outputs of an earlier run are gone too).
    pub fn run_observed(&mut self, observer: &mut dyn Observer) -> Result<RunStats, VmError> {
        self.last_failure = None;
        // With worker threads, the interpreter itself runs on one of them (the caller waits):
        // each parallel kernel then starts from inside the pool, where the interpreter's
        // thread takes part in the work, instead of handing the kernel to the pool and
        // sleeping until a worker wakes it. On the 2-core development machine, MiniLM on 2
        // threads: B=1 fast 17.5-18.6 -> 16.1-16.7 ms, strict 27.5 -> 26.0, B=8 fast 109-112
        // -> 99. (The observer goes along: hence `Observer: Send`.)
        let result = match self.pool.clone() {
            Some(pool) => pool.install(|| self.run_inner(observer)),
            None => self.run_inner(observer),
        };
        if let Err(e) = &result {
            for o in &mut self.outputs {
                *o = None;
            }
            self.last_failure = Some(e.to_string());
        }
        result
    }

    fn run_inner(&mut self, observer: &mut dyn Observer) -> Result<RunStats, VmError> {
        let start = Instant::now();
        let waited0 = self.gpu.as_ref().map_or(Duration::ZERO, |g| g.waited());
        // Strict kernels rely on flush-to-zero mode (see exec::cpu::fpenv); restored on return.
        let _ftz = FtzGuard::new();
        let program = self.program.clone();
        let p = program.program();
        let dims = self.bind_dims()?;
        let plan = match &self.plan_cache {
            Some((d, plan)) if *d == dims => plan.clone(),
            _ => {
                let plan = Arc::new(program.plan(&dims)?);
                self.plan_cache = Some((dims.clone(), plan.clone()));
                plan
            }
        };
        let shapes: Vec<Vec<usize>> =
            p.tensors.iter().map(|t| t.shape.iter().map(|d| resolve(*d, &dims)).collect()).collect();
        let out_shapes: Vec<Vec<usize>> =
            p.outputs.iter().map(|o| o.shape.iter().map(|d| resolve(*d, &dims)).collect()).collect();
        let io: u64 = self.inputs.iter().flatten().map(|t| t.bytes().len() as u64).sum::<u64>()
            + p.outputs
                .iter()
                .zip(&out_shapes)
                .map(|(o, s)| (s.iter().product::<usize>() * o.dtype.size()) as u64)
                .sum::<u64>();
        // The scratch copy for an instruction that reads its own destination (see
        // `with_operands`) is as large as the largest such destination.
        let scratch_bytes = program
            .instructions()
            .iter()
            .filter_map(|ins| {
                let dst = ins.insn.writes()?;
                ins.insn.reads().any(|s| s == dst).then(|| {
                    let t = &p.tensors[dst.0 as usize];
                    (shapes[dst.0 as usize].iter().product::<usize>() * t.dtype.size()) as u64
                })
            })
            .max()
            .unwrap_or(0);
        let other = self.owned_const_bytes.saturating_add(scratch_bytes);
        let budget = self.config.max_memory.unwrap_or_else(available_memory);
        let needed = plan.peak_bytes.saturating_add(io).saturating_add(other);
        if needed > budget {
            return Err(VmError::MemoryBudget { needed, peak: plan.peak_bytes, io, other, budget });
        }
        // Packed weights are a cache: where this run needs their memory, they go.
        if needed.saturating_add(self.packed_bytes) > budget {
            self.packed.clear();
            self.packed_bytes = 0;
        }
        self.pack_room = budget - needed - self.packed_bytes;
        if self.scratch.len() < scratch_bytes as usize {
            // Allocated here, before the first step, so running out is an error, never a
            // panic in the middle of an instruction.
            self.scratch =
                AlignedBuf::zeroed(scratch_bytes as usize).ok_or(VmError::OutOfMemory(scratch_bytes))?;
        }
        if self.arena.len() < plan.peak_bytes as usize {
            self.arena =
                AlignedBuf::zeroed(plan.peak_bytes as usize).ok_or(VmError::OutOfMemory(plan.peak_bytes))?;
        }
        if let Some(g) = &mut self.gpu {
            g.begin_run(&plan, self.config.max_device_memory)?;
        }
        // After begin_run, which may replace the recorder (and its counters).
        let (submitted0, reused0) = self.gpu.as_ref().map_or((0, 0), |g| g.submissions());
        let mut locs = Vec::with_capacity(p.tensors.len());
        let mut next_input = 0;
        for (i, t) in p.tensors.iter().enumerate() {
            locs.push(match t.kind {
                TensorKind::Temp => {
                    let off = plan.offsets[i].unwrap_or(0) as usize;
                    Loc::Arena(off..off + shapes[i].iter().product::<usize>() * t.dtype.size())
                }
                TensorKind::Input => {
                    next_input += 1;
                    Loc::Input(next_input - 1)
                }
                TensorKind::Const(_) => Loc::Const(i),
            });
        }
        for o in &mut self.outputs {
            *o = None;
        }
        let counts = shapes.iter().map(|s| s.iter().product::<usize>() as u64).collect();
        let mut frame = Frame {
            shapes,
            counts,
            out_shapes,
            locs,
            regs: [0; 16],
            level: self.level,
            tier: p.tier,
            pool: self.pool.clone(),
        };
        let code = program.instructions();
        let mut pc = 0usize;
        let mut steps = 0u64;
        let mut concurrent = 0u64;
        let wants = observer.wants();
        // The common case in one flag: no device, nothing timed, nothing copied out per step.
        let plain = self.gpu.is_none() && !wants.timing && !wants.written;
        while pc < code.len() {
            if let Some(max) = self.config.max_steps {
                if steps >= max {
                    return Err(VmError::StepBudget(max));
                }
            }
            // Independent instructions from here may run at the same time (see `sched`).
            if plain {
                if let Some(ran) = self.run_independent(p, &frame, pc, steps, observer) {
                    steps += ran.steps;
                    concurrent += ran.steps;
                    if ran.stop {
                        break;
                    }
                    pc += ran.steps as usize;
                    continue;
                }
            }
            let ins = &code[pc];
            let t0 = wants.timing.then(Instant::now);
            let mut gpu_elapsed = None;
            let (next, cost) = if plain {
                self.exec(p, &mut frame, pc, &ins.insn)?
            } else if self.on_gpu(&frame, ins) {
                // Timing brackets the instruction's commands with GPU timestamps.
                let begin = if wants.timing { self.gpu_timestamp()? } else { None };
                let r = self.exec_gpu(p, &mut frame, pc, &ins.insn)?;
                let end = if begin.is_some() { self.gpu_timestamp()? } else { None };
                // Observers see finished work: timing waits for the GPU, data comes back.
                if matches!(ins.insn, Insn::Store { .. }) && wants.written {
                    self.gpu_finish(p)?;
                } else if let (true, Some(t)) = (wants.written, ins.insn.writes()) {
                    self.download_temp(p, &frame, t)?;
                } else if wants.timing {
                    self.gpu_sync(p)?;
                }
                gpu_elapsed = begin.zip(end).and_then(|(b, e)| self.gpu_time(b, e));
                r
            } else {
                self.cpu_reads(p, &frame, &ins.insn)?;
                let r = self.exec(p, &mut frame, pc, &ins.insn)?;
                self.cpu_wrote(&ins.insn);
                r
            };
            let elapsed = t0.map_or(Duration::ZERO, |t| t.elapsed());
            let written = match ins.insn {
                _ if !wants.written => None,
                Insn::Store { out, .. } => self.outputs[out.0 as usize]
                    .as_ref()
                    .map(|t| (t.dtype, frame.out_shapes[out.0 as usize].as_slice(), t.bytes())),
                Insn::Alloc { .. } => None,
                _ => ins.insn.writes().map(|t| {
                    let i = t.0 as usize;
                    (p.tensors[i].dtype, frame.shapes[i].as_slice(), self.bytes_of(&frame.locs[i]))
                }),
            };
            let flow = observer.step(&StepEvent {
                step: steps,
                index: pc,
                instruction: ins,
                written,
                elapsed,
                gpu_elapsed,
                flops: cost.0,
                bytes: cost.1,
            });
            steps += 1;
            if flow.is_break() {
                break;
            }
            match next {
                Flow::Next => pc += 1,
                Flow::Jump(t) => pc = t,
                Flow::Halt => break,
            }
        }
        self.gpu_finish(p)?;
        let gpu_wait = self.gpu.as_ref().map_or(Duration::ZERO, |g| g.waited().saturating_sub(waited0));
        let (submitted, reused) = self.gpu.as_ref().map_or((0, 0), |g| g.submissions());
        Ok(RunStats {
            steps,
            elapsed: start.elapsed(),
            arena_bytes: plan.peak_bytes,
            concurrent,
            gpu_wait,
            gpu_submissions: submitted - submitted0,
            gpu_reused: reused - reused0,
        })
    }

    fn bytes_of(&self, loc: &Loc) -> &[u8] {
        match loc {
            Loc::Arena(r) => &self.arena.bytes()[r.clone()],
            Loc::Input(k) => self.inputs[*k].as_ref().map_or(&[][..], |t| t.bytes()),
            Loc::Const(i) => match &self.consts[*i] {
                Some(ConstStore::Data(r)) => &self.program.program().data[r.clone()],
                Some(ConstStore::Owned(b)) => b.bytes(),
                None => &[],
            },
        }
    }

    /// MATMUL's `b` packed for the CPU's blocked kernels ([`cpu::gemm::PackedB`]), packed on
    /// its first product and kept for the session: where `b` is a two-axis f32 constant, the
    /// product takes the blocked kernel (more than `GEMV_MAX_M` rows of a a call; fewer take
    /// the matrix-vector kernel, which reads B unpacked), and the packed copy fits both
    /// [`PACKED_MAX_BYTES`] and what the run leaves of the memory budget. None otherwise, or
    /// with `ADEADVM_CPU_PACKED_WEIGHTS=0` (for comparisons): the product then packs B as it
    /// goes, with the same bits.
    fn packed_weight(
        &mut self,
        p: &Program,
        f: &Frame,
        b: TensorId,
        g: &MatmulShape,
    ) -> Option<Arc<cpu::gemm::PackedB>> {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let off = *OFF.get_or_init(|| crate::exec::env_switch("ADEADVM_CPU_PACKED_WEIGHTS") == Some(false));
        let t = &p.tensors[b.0 as usize];
        let m = g.out[g.out.len() - 2];
        if off
            || !matches!(t.kind, TensorKind::Const(_))
            || t.dtype != DType::F32
            || g.b.len() != 2
            || m <= cpu::gemm::GEMV_MAX_M
            || self.level < SimdLevel::Avx2
        {
            return None;
        }
        if let Some(pb) = self.packed.get(&(b.0, g.tb)) {
            return Some(pb.clone());
        }
        let (k, n) = if g.tb { (g.b[1], g.b[0]) } else { (g.b[0], g.b[1]) };
        let (b_rs, b_cs) = if g.tb { (1, k) } else { (n, 1) };
        let bytes = (k as u64).saturating_mul(n as u64).saturating_mul(4);
        if self.packed_bytes.saturating_add(bytes) > PACKED_MAX_BYTES.min(self.pack_room) {
            return None;
        }
        let values: &[f32] = bytemuck::try_cast_slice(self.bytes_of(&f.locs[b.0 as usize])).ok()?;
        let pb = Arc::new(cpu::gemm::PackedB::new(&f.ctx(), k, n, values, b_rs, b_cs)?);
        self.packed_bytes += pb.bytes();
        self.pack_room = self.pack_room.saturating_sub(pb.bytes());
        self.packed.insert((b.0, g.tb), pb.clone());
        Some(pb)
    }

    fn runtime_error(&self, index: usize, what: String) -> VmError {
        let p = self.program.program();
        let mnemonic = self.program.instructions()[index].insn.info().mnemonic;
        let mut at = match p.line_of(index) {
            Some(l) => format!("line {l}, {mnemonic}"),
            None => mnemonic.to_string(),
        };
        if let Some(origin) = p.origin_of(index) {
            at.push_str(&format!(", from {origin:?}"));
        }
        VmError::Runtime { index, at, what }
    }

    /// Executes one instruction; returns where to go next and its (flops, bytes) cost.
    fn exec(
        &mut self,
        p: &Program,
        f: &mut Frame,
        index: usize,
        insn: &Insn,
    ) -> Result<(Flow, (u64, u64)), VmError> {
        let dt = |t: TensorId| p.tensors[t.0 as usize].dtype;
        let n_of = |f: &Frame, t: TensorId| f.counts[t.0 as usize];
        let reg = |f: &Frame, r: crate::isa::Reg| f.regs[r.0 as usize];
        let mut cost = (0u64, 0u64);
        match *insn {
            Insn::Nop | Insn::GpuSync | Insn::Alloc { .. } | Insn::Free { .. } => {}
            Insn::Halt => return Ok((Flow::Halt, cost)),
            Insn::Jmp { target } => return Ok((Flow::Jump(target.0 as usize), cost)),
            Insn::Jz { cond, target } if reg(f, cond) == 0 => {
                return Ok((Flow::Jump(target.0 as usize), cost))
            }
            Insn::Jnz { cond, target } if reg(f, cond) != 0 => {
                return Ok((Flow::Jump(target.0 as usize), cost))
            }
            Insn::Jz { .. } | Insn::Jnz { .. } => {}
            Insn::Iset { rd, value } => f.regs[rd.0 as usize] = value as i64,
            Insn::Iadd { rd, ra, rb } => f.regs[rd.0 as usize] = reg(f, ra).wrapping_add(reg(f, rb)),
            Insn::Iaddi { rd, ra, value } => f.regs[rd.0 as usize] = reg(f, ra).wrapping_add(value as i64),
            Insn::Isub { rd, ra, rb } => f.regs[rd.0 as usize] = reg(f, ra).wrapping_sub(reg(f, rb)),
            Insn::Imul { rd, ra, rb } => f.regs[rd.0 as usize] = reg(f, ra).wrapping_mul(reg(f, rb)),
            Insn::Ilt { rd, ra, rb } => f.regs[rd.0 as usize] = (reg(f, ra) < reg(f, rb)) as i64,
            Insn::Ieq { rd, ra, rb } => f.regs[rd.0 as usize] = (reg(f, ra) == reg(f, rb)) as i64,

            Insn::Load { dst, src, index: ix, count } => {
                let k = match ix {
                    Some(rg) => {
                        let v = reg(f, rg);
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
                let src = TensorId(src.0 + k);
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                self.raw_op(p, f, dst, &[src], |out, ins| out.copy_from_slice(ins[0]));
            }
            Insn::Store { out, src } => {
                let bytes = self.bytes_of(&f.locs[src.0 as usize]);
                let t = HostTensor::from_bytes(dt(src), f.out_shapes[out.0 as usize].clone(), bytes)
                    .ok_or(VmError::OutOfMemory(bytes.len() as u64))?;
                cost.1 = 2 * bytes.len() as u64;
                self.outputs[out.0 as usize] = Some(t);
            }
            Insn::Copy { dst, src } | Insn::Reshape { dst, src } => {
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                let ctx = f.ctx();
                self.raw_op(p, f, dst, &[src], |out, ins| simd::copy_bytes(&ctx, ins[0], out));
            }
            Insn::Slice { dst, src, axis, start } => {
                let shape = f.shapes[src.0 as usize].clone();
                let ax = norm_axis(axis, shape.len());
                let len = f.shapes[dst.0 as usize][ax];
                if start as usize + len > shape[ax] {
                    return Err(self.runtime_error(
                        index,
                        format!(
                            "slice {start}..{} is outside axis {ax} of size {}",
                            start as usize + len,
                            shape[ax]
                        ),
                    ));
                }
                let size = dt(dst).size();
                cost.1 = 2 * n_of(f, dst) * size as u64;
                self.raw_op(p, f, dst, &[src], |out, ins| {
                    let mut byte_shape = shape.clone();
                    byte_shape.push(size);
                    r::slice(ins[0], &byte_shape, ax, start as usize, len, out)
                });
            }
            Insn::Concat { dst, a, b, axis } => {
                let (sa, sb) = (f.shapes[a.0 as usize].clone(), f.shapes[b.0 as usize].clone());
                let ax = norm_axis(axis, sa.len());
                let size = dt(dst).size();
                cost.1 = 2 * n_of(f, dst) * size as u64;
                self.raw_op(p, f, dst, &[a, b], |out, ins| {
                    let (mut ba, mut bb) = (sa.clone(), sb.clone());
                    ba.push(size);
                    bb.push(size);
                    r::concat(ins[0], &ba, ins[1], &bb, ax, out)
                });
            }
            Insn::Transpose { dst, src, perm } => {
                let shape = f.shapes[src.0 as usize].clone();
                let size = dt(dst).size();
                cost.1 = 2 * n_of(f, dst) * size as u64;
                let ctx = f.ctx();
                self.raw_op(p, f, dst, &[src], |out, ins| match size {
                    2 => simd::transpose(
                        &ctx,
                        bytemuck::cast_slice::<u8, u16>(ins[0]),
                        &shape,
                        perm.axes(),
                        bytemuck::cast_slice_mut(out),
                    ),
                    _ => simd::transpose(
                        &ctx,
                        bytemuck::cast_slice::<u8, u32>(ins[0]),
                        &shape,
                        perm.axes(),
                        bytemuck::cast_slice_mut(out),
                    ),
                });
            }
            Insn::Gather { dst, table, indices } => {
                let tshape = f.shapes[table.0 as usize].clone();
                let rows = tshape.first().copied().unwrap_or(0);
                let row = tshape[1..].iter().product::<usize>() * dt(dst).size();
                cost.1 = 2 * n_of(f, dst) * dt(dst).size() as u64;
                let mut bad = None;
                let blocks = block_format(p, table);
                self.raw_op(p, f, dst, &[table, indices], |out, ins| {
                    let idx: Cow<[i32]> = cast_or_copy(ins[1]);
                    bad = match blocks {
                        // The verifier keeps a blocks table [rows, K] and dst f32.
                        Some(format) => {
                            let k = tshape.get(1).copied().unwrap_or(0);
                            r::gather_blocks(format, ins[0], rows, k, &idx, bytemuck::cast_slice_mut(out))
                                .err()
                        }
                        None => r::gather(ins[0], rows, row, &idx, out).err(),
                    };
                });
                if let Some((pos, v)) = bad {
                    return Err(self.runtime_error(
                        index,
                        format!(
                            "index {v} at position {pos} of `{}` is outside the table's {rows} rows",
                            p.tensors[indices.0 as usize].name
                        ),
                    ));
                }
            }
            Insn::SliceR { dst, src, axis, start } => {
                let shape = f.shapes[src.0 as usize].clone();
                let ax = norm_axis(axis, shape.len());
                let len = f.shapes[dst.0 as usize][ax];
                let start = self.window_start(index, reg(f, start), start, len, shape[ax], "slice")?;
                let size = dt(dst).size();
                cost.1 = 2 * n_of(f, dst) * size as u64;
                self.raw_op(p, f, dst, &[src], |out, ins| {
                    let mut byte_shape = shape.clone();
                    byte_shape.push(size);
                    r::slice(ins[0], &byte_shape, ax, start, len, out)
                });
            }
            Insn::Put { dst, src, axis, start } => {
                let shape = f.shapes[dst.0 as usize].clone();
                let ax = norm_axis(axis, shape.len());
                let len = f.shapes[src.0 as usize][ax];
                let start = self.window_start(index, reg(f, start), start, len, shape[ax], "put")?;
                let size = dt(dst).size();
                cost.1 = 2 * n_of(f, src) * size as u64;
                self.raw_op(p, f, dst, &[src], |out, ins| {
                    let mut byte_shape = shape.clone();
                    byte_shape.push(size);
                    r::put(ins[0], &byte_shape, ax, start, len, out)
                });
            }
            Insn::Scatter { dst, src, indices } => {
                let dshape = &f.shapes[dst.0 as usize];
                let n = dshape.last().copied().unwrap_or(1);
                let rows = (n_of(f, dst) as usize).checked_div(n).unwrap_or(0);
                let row = n * dt(dst).size();
                cost.1 = 2 * n_of(f, src) * dt(dst).size() as u64;
                let mut bad = None;
                self.raw_op(p, f, dst, &[src, indices], |out, ins| {
                    let idx: Cow<[i32]> = cast_or_copy(ins[1]);
                    bad = r::scatter(ins[0], row, &idx, rows, out).err();
                });
                if let Some((pos, v)) = bad {
                    return Err(self.runtime_error(
                        index,
                        format!(
                            "index {v} at position {pos} of `{}` is outside the destination's {rows} rows",
                            p.tensors[indices.0 as usize].name
                        ),
                    ));
                }
            }
            Insn::Tget { rd, src, index: ix } => {
                let at = self.element_at(p, f, index, src, ix)?;
                let bytes = self.bytes_of(&f.locs[src.0 as usize]);
                let k = at * 4;
                let word = bytes.get(k..k + 4).map_or(0, |w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]));
                f.regs[rd.0 as usize] = i64::from(word);
            }
            Insn::Tset { dst, index: ix, value } => {
                let at = self.element_at(p, f, index, dst, ix)?;
                // Two's complement wrap to 32 bits, as the ISA says.
                let v = reg(f, value) as i32;
                self.int_op(p, f, dst, &[], |out, _| out[at] = v);
            }
            Insn::Fill { dst, value } => {
                cost.1 = n_of(f, dst) * dt(dst).size() as u64;
                if dt(dst) == DType::I32 {
                    let v = value as i32;
                    self.int_op(p, f, dst, &[], |out, _| out.fill(v));
                } else {
                    let v = nx::canon(value);
                    self.float_op(p, f, dst, &[], |out, _| out.fill(v));
                }
            }
            Insn::Cast { dst, src } => {
                cost.1 = n_of(f, dst) * (dt(dst).size() + dt(src).size()) as u64;
                self.cast(p, f, dst, src);
            }
            Insn::Rand { dst, seed, dist } => {
                cost.1 = n_of(f, dst) * dt(dst).size() as u64;
                self.float_op(p, f, dst, &[], |out, _| crate::rand::fill_strict(seed, dist, out));
            }

            Insn::Neg { dst, a } | Insn::Abs { dst, a } if dt(dst) == DType::I32 => {
                let neg = matches!(insn, Insn::Neg { .. });
                cost.1 = 2 * n_of(f, dst) * 4;
                self.int_op(p, f, dst, &[Some(a)], |out, ins| {
                    for (o, &x) in out.iter_mut().zip(ins[0].unwrap_or_default()) {
                        *o = if neg { x.wrapping_neg() } else { x.wrapping_abs() };
                    }
                });
            }
            Insn::Neg { dst, a } => cost = self.unary(p, f, dst, a, Unary::Neg),
            Insn::Abs { dst, a } => cost = self.unary(p, f, dst, a, Unary::Abs),
            Insn::Sqrt { dst, a } => cost = self.unary(p, f, dst, a, Unary::Sqrt),
            Insn::Rsqrt { dst, a } => cost = self.unary(p, f, dst, a, Unary::Rsqrt),
            Insn::Exp { dst, a } => cost = self.unary(p, f, dst, a, Unary::Exp),
            Insn::Log { dst, a } => cost = self.unary(p, f, dst, a, Unary::Log),
            Insn::Relu { dst, a } => cost = self.unary(p, f, dst, a, Unary::Relu),
            Insn::Sigmoid { dst, a } => cost = self.unary(p, f, dst, a, Unary::Sigmoid),
            Insn::Tanh { dst, a } => cost = self.unary(p, f, dst, a, Unary::Tanh),
            Insn::Gelu { dst, a } => cost = self.unary(p, f, dst, a, Unary::Gelu),
            Insn::Silu { dst, a } => cost = self.unary(p, f, dst, a, Unary::Silu),
            Insn::Erf { dst, a } => cost = self.unary(p, f, dst, a, Unary::Erf),
            Insn::Eq { dst, a, b } => cost = self.compare(p, f, dst, a, b, Compare::Eq),
            Insn::Lt { dst, a, b } => cost = self.compare(p, f, dst, a, b, Compare::Lt),
            Insn::Le { dst, a, b } => cost = self.compare(p, f, dst, a, b, Compare::Le),
            Insn::Select { dst, cond, a, b } => cost = self.select(p, f, dst, cond, a, b),
            Insn::Add { dst, a, b } => cost = self.binary(p, f, dst, a, b, Binary::Add),
            Insn::Sub { dst, a, b } => cost = self.binary(p, f, dst, a, b, Binary::Sub),
            Insn::Mul { dst, a, b } => cost = self.binary(p, f, dst, a, b, Binary::Mul),
            Insn::Div { dst, a, b } => cost = self.binary(p, f, dst, a, b, Binary::Div),
            Insn::Max { dst, a, b } => cost = self.binary(p, f, dst, a, b, Binary::Max),
            Insn::Min { dst, a, b } => cost = self.binary(p, f, dst, a, b, Binary::Min),
            Insn::AddS { dst, a, s } => cost = self.binary_scalar(p, f, dst, a, s, Binary::Add),
            Insn::SubS { dst, a, s } => cost = self.binary_scalar(p, f, dst, a, s, Binary::Sub),
            Insn::MulS { dst, a, s } => cost = self.binary_scalar(p, f, dst, a, s, Binary::Mul),
            Insn::DivS { dst, a, s } => cost = self.binary_scalar(p, f, dst, a, s, Binary::Div),
            Insn::MaxS { dst, a, s } => cost = self.binary_scalar(p, f, dst, a, s, Binary::Max),
            Insn::MinS { dst, a, s } => cost = self.binary_scalar(p, f, dst, a, s, Binary::Min),
            Insn::Argmax { dst, src } => {
                let n = f.shapes[src.0 as usize].last().copied().unwrap_or(1);
                cost = (n_of(f, src), n_of(f, src) * dt(src).size() as u64 + n_of(f, dst) * 4);
                let sd = dt(src);
                self.with_operands(p, f, dst, &[Some(src)], |out, views| {
                    let x = to_f32(views[0].unwrap_or_default(), sd);
                    r::argmax(&x, n, bytemuck::cast_slice_mut(out));
                });
            }
            Insn::Matmul { dst, a, b, bias, ta, tb, act } => {
                let g = MatmulShape {
                    a: f.shapes[a.0 as usize].clone(),
                    b: f.shapes[b.0 as usize].clone(),
                    out: f.shapes[dst.0 as usize].clone(),
                    ta,
                    tb,
                };
                let k = if ta { g.a[g.a.len() - 2] } else { g.a[g.a.len() - 1] } as u64;
                cost =
                    (2 * n_of(f, dst) * k, (n_of(f, a) + n_of(f, b) + n_of(f, dst)) * dt(dst).size() as u64);
                let bias_shape = bias.map(|t| f.shapes[t.0 as usize].clone());
                let ctx = f.ctx();
                if let Some(format) = block_format(p, b) {
                    // b is [N, K] blocks and every operand f32 (the verifier's rule): b is
                    // read as its bytes, the rest as f32.
                    cost.1 =
                        (n_of(f, a) + n_of(f, dst)) * 4 + self.bytes_of(&f.locs[b.0 as usize]).len() as u64;
                    self.with_operands(p, f, dst, &[Some(a), Some(b), bias], |out, views| {
                        let av = to_f32(views[0].unwrap_or_default(), DType::F32);
                        let bias_v = views[2].map(|v| to_f32(v, DType::F32));
                        let bias = bias_v.as_deref().zip(bias_shape.as_deref());
                        let bq = cpu::MatB::Blocks { format, bytes: views[1].unwrap_or_default() };
                        cpu::matmul(&ctx, &g, DType::F32, &av, bq, bias, act, bytemuck::cast_slice_mut(out))
                    });
                } else {
                    let operands = if dt(a) == dt(b) { dt(a) } else { DType::F32 };
                    let packed = self.packed_weight(p, f, b, &g);
                    self.float_op(p, f, dst, &[Some(a), Some(b), bias], |out, ins| {
                        let bias = ins[2].zip(bias_shape.as_deref());
                        let b = match &packed {
                            Some(pb) => cpu::MatB::Packed(pb),
                            None => cpu::MatB::F32(ins[1].unwrap_or_default()),
                        };
                        cpu::matmul(&ctx, &g, operands, ins[0].unwrap_or_default(), b, bias, act, out)
                    });
                }
            }
            Insn::Softmax { dst, x, mask, scale } => {
                let shape = &f.shapes[x.0 as usize];
                let mask_shape = mask.map(|t| f.shapes[t.0 as usize].as_slice());
                cost = (5 * n_of(f, dst), 2 * n_of(f, dst) * dt(dst).size() as u64);
                let ctx = f.ctx();
                self.float_op(p, f, dst, &[Some(x), mask], |out, ins| {
                    simd::softmax(&ctx, ins[0].unwrap_or_default(), shape, ins[1].zip(mask_shape), scale, out)
                });
            }
            Insn::Layernorm { dst, x, gamma, beta, eps } => {
                let n = f.shapes[x.0 as usize].last().copied().unwrap_or(1);
                cost = (8 * n_of(f, dst), 2 * n_of(f, dst) * dt(dst).size() as u64);
                let ctx = f.ctx();
                self.float_op(p, f, dst, &[Some(x), gamma, beta], |out, ins| {
                    simd::layernorm(&ctx, ins[0].unwrap_or_default(), n, ins[1], ins[2], eps, out)
                });
            }
            Insn::Rmsnorm { dst, x, gamma, eps } => {
                let n = f.shapes[x.0 as usize].last().copied().unwrap_or(1);
                cost = (4 * n_of(f, dst), 2 * n_of(f, dst) * dt(dst).size() as u64);
                let ctx = f.ctx();
                self.float_op(p, f, dst, &[Some(x), gamma], |out, ins| {
                    simd::rmsnorm(&ctx, ins[0].unwrap_or_default(), n, ins[1], eps, out)
                });
            }
            Insn::ReduceSum { dst, src, axis } => cost = self.reduce(p, f, dst, src, axis, Reduce::Sum),
            Insn::ReduceMean { dst, src, axis } => cost = self.reduce(p, f, dst, src, axis, Reduce::Mean),
            Insn::ReduceMax { dst, src, axis } => cost = self.reduce(p, f, dst, src, axis, Reduce::Max),
            Insn::Kernel { .. } => {
                return Err(self.runtime_error(
                    index,
                    "KERNEL runs user SPIR-V, which needs the Vulkan executor (run with --backend vulkan)"
                        .into(),
                ))
            }
        }
        Ok((Flow::Next, cost))
    }

    /// The element of `t` that register `r` names for TGET or TSET (row-major), checked.
    fn element_at(
        &self,
        p: &Program,
        f: &Frame,
        index: usize,
        t: TensorId,
        r: crate::isa::Reg,
    ) -> Result<usize, VmError> {
        let (at, n) = (f.regs[r.0 as usize], f.counts[t.0 as usize]);
        if at < 0 || at as u64 >= n {
            let name = &p.tensors[t.0 as usize].name;
            return Err(self
                .runtime_error(index, format!("index r{} = {at} is outside `{name}`'s {n} elements", r.0)));
        }
        Ok(at as usize)
    }

    /// Checks a register start for SLICE or PUT (`len` elements of an axis of `size`).
    fn window_start(
        &self,
        index: usize,
        v: i64,
        r: crate::isa::Reg,
        len: usize,
        size: usize,
        what: &str,
    ) -> Result<usize, VmError> {
        if v < 0 || (v as u64).saturating_add(len as u64) > size as u64 {
            return Err(self.runtime_error(
                index,
                format!("{what} r{} = {v} .. {v} + {len} is outside the axis of size {size}", r.0),
            ));
        }
        Ok(v as usize)
    }

    /// A float unary instruction; returns its (flops, bytes).
    fn unary(&mut self, p: &Program, f: &Frame, dst: TensorId, a: TensorId, op: Unary) -> (u64, u64) {
        let n = f.counts[dst.0 as usize];
        let ctx = f.ctx();
        self.float_op(p, f, dst, &[Some(a)], |out, ins| {
            simd::unary(&ctx, op, ins[0].unwrap_or_default(), out)
        });
        (n, 2 * n * p.tensors[dst.0 as usize].dtype.size() as u64)
    }

    /// A broadcasting binary instruction (float or i32); returns its (flops, bytes).
    fn binary(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        b: TensorId,
        op: Binary,
    ) -> (u64, u64) {
        let dtype = p.tensors[dst.0 as usize].dtype;
        // Borrowed, not cloned: this runs once per instruction (no allocation).
        let (sa, sb, so) = (&f.shapes[a.0 as usize], &f.shapes[b.0 as usize], &f.shapes[dst.0 as usize]);
        let n = |t: TensorId| f.counts[t.0 as usize];
        let cost = (n(dst), (n(a) + n(b) + n(dst)) * dtype.size() as u64);
        if dtype == DType::I32 {
            self.int_op(p, f, dst, &[Some(a), Some(b)], |out, ins| {
                r::binary_i32(op, ins[0].unwrap_or_default(), sa, ins[1].unwrap_or_default(), sb, out, so)
            });
        } else {
            let ctx = f.ctx();
            self.float_op(p, f, dst, &[Some(a), Some(b)], |out, ins| {
                simd::binary(
                    &ctx,
                    op,
                    ins[0].unwrap_or_default(),
                    sa,
                    ins[1].unwrap_or_default(),
                    sb,
                    out,
                    so,
                )
            });
        }
        cost
    }

    /// A comparison (EQ, LT, LE): i32 1 or 0 from a and b of one dtype, broadcasting; f16 and
    /// bf16 widen exactly to f32 first. Returns its (flops, bytes).
    fn compare(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        b: TensorId,
        op: Compare,
    ) -> (u64, u64) {
        let sd = p.tensors[a.0 as usize].dtype;
        let (sa, sb, so) = (&f.shapes[a.0 as usize], &f.shapes[b.0 as usize], &f.shapes[dst.0 as usize]);
        let n = |t: TensorId| f.counts[t.0 as usize];
        let cost = (n(dst), (n(a) + n(b)) * sd.size() as u64 + n(dst) * 4);
        let ctx = f.ctx();
        self.with_operands(p, f, dst, &[Some(a), Some(b)], |out, views| {
            let (va, vb) = (views[0].unwrap_or_default(), views[1].unwrap_or_default());
            let out: &mut [i32] = bytemuck::cast_slice_mut(out);
            if sd == DType::I32 {
                let (x, y): (Cow<[i32]>, Cow<[i32]>) = (cast_or_copy(va), cast_or_copy(vb));
                simd::compare_i32(&ctx, op, &x, sa, &y, sb, out, so);
            } else {
                let (x, y) = (to_f32(va, sd), to_f32(vb, sd));
                simd::compare(&ctx, op, &x, sa, &y, sb, out, so);
            }
        });
        cost
    }

    /// SELECT: the chosen elements' bits, moved as 32- or 16-bit words; returns its (flops, bytes).
    fn select(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        cond: TensorId,
        a: TensorId,
        b: TensorId,
    ) -> (u64, u64) {
        let size = p.tensors[dst.0 as usize].dtype.size();
        let shape = |t: TensorId| f.shapes[t.0 as usize].as_slice();
        let (sc, sa, sb, so) = (shape(cond), shape(a), shape(b), shape(dst));
        let n = |t: TensorId| f.counts[t.0 as usize];
        let cost = (0, n(cond) * 4 + (n(a) + n(b) + n(dst)) * size as u64);
        let ctx = f.ctx();
        self.with_operands(p, f, dst, &[Some(cond), Some(a), Some(b)], |out, views| {
            let c: Cow<[i32]> = cast_or_copy(views[0].unwrap_or_default());
            let (va, vb) = (views[1].unwrap_or_default(), views[2].unwrap_or_default());
            if size == 2 {
                let (x, y): (Cow<[u16]>, Cow<[u16]>) = (cast_or_copy(va), cast_or_copy(vb));
                simd::select(&ctx, &c, sc, &x, sa, &y, sb, bytemuck::cast_slice_mut(out), so);
            } else {
                let (x, y): (Cow<[u32]>, Cow<[u32]>) = (cast_or_copy(va), cast_or_copy(vb));
                simd::select(&ctx, &c, sc, &x, sa, &y, sb, bytemuck::cast_slice_mut(out), so);
            }
        });
        cost
    }

    /// A float binary instruction with a scalar immediate; returns its (flops, bytes).
    fn binary_scalar(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        a: TensorId,
        s: f32,
        op: Binary,
    ) -> (u64, u64) {
        let n = f.counts[dst.0 as usize];
        let ctx = f.ctx();
        self.float_op(p, f, dst, &[Some(a)], |out, ins| {
            simd::binary_scalar(&ctx, op, ins[0].unwrap_or_default(), s, out)
        });
        (n, 2 * n * p.tensors[dst.0 as usize].dtype.size() as u64)
    }

    /// A reduction over one axis; returns its (flops, bytes).
    fn reduce(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        src: TensorId,
        axis: i8,
        op: Reduce,
    ) -> (u64, u64) {
        let shape = &f.shapes[src.0 as usize];
        let ax = norm_axis(axis, shape.len());
        let (ns, nd) = (f.counts[src.0 as usize], f.counts[dst.0 as usize]);
        let ctx = f.ctx();
        self.float_op(p, f, dst, &[Some(src)], |out, ins| {
            simd::reduce(&ctx, op, ins[0].unwrap_or_default(), shape, ax, out)
        });
        (ns, (ns + nd) * p.tensors[dst.0 as usize].dtype.size() as u64)
    }

    /// Splits storage into the destination (a temporary in the arena) and up to
    /// [`MAX_TENSOR_READS`] sources. A source that is the destination itself is first copied into
    /// the VM's reusable scratch buffer. No heap allocation in the steady state: this runs once
    /// per instruction.
    fn with_operands<R>(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        srcs: &[Option<TensorId>],
        body: impl FnOnce(&mut [u8], &[Option<&[u8]>]) -> R,
    ) -> R {
        let Loc::Arena(dst_range) = f.locs[dst.0 as usize].clone() else {
            unreachable!("the verifier allows writes to temporaries only");
        };
        let (inputs, consts, data) = (&self.inputs, &self.consts, &p.data);
        let arena = self.arena.bytes_mut();
        let aliased = srcs.contains(&Some(dst));
        if aliased {
            // `run_inner` sized the scratch buffer for the largest destination an instruction
            // also reads, before the first step.
            debug_assert!(self.scratch.len() >= dst_range.len(), "scratch sized before the run");
            self.scratch.bytes_mut()[..dst_range.len()].copy_from_slice(&arena[dst_range.clone()]);
        }
        let scratch = &self.scratch.bytes()[..if aliased { dst_range.len() } else { 0 }];
        let (before, rest) = arena.split_at_mut(dst_range.start);
        let (out, after) = rest.split_at_mut(dst_range.len());
        let after_start = dst_range.end;
        let view = |s: Option<TensorId>| -> Option<&[u8]> {
            let s = s?;
            if s == dst {
                return Some(scratch);
            }
            Some(match &f.locs[s.0 as usize] {
                // Live temporaries never overlap the destination: each lies wholly before or after it.
                Loc::Arena(rg) if rg.end <= dst_range.start => &before[rg.clone()],
                Loc::Arena(rg) => &after[rg.start - after_start..rg.end - after_start],
                Loc::Input(k) => inputs[*k].as_ref().map_or(&[][..], |t| t.bytes()),
                Loc::Const(i) => match &consts[*i] {
                    Some(ConstStore::Data(rg)) => &data[rg.clone()],
                    Some(ConstStore::Owned(b)) => b.bytes(),
                    None => &[],
                },
            })
        };
        let views: [Option<&[u8]>; MAX_TENSOR_READS] =
            std::array::from_fn(|i| view(srcs.get(i).copied().flatten()));
        body(out, &views[..srcs.len()])
    }

    /// A dtype-agnostic operation on raw bytes (every source present).
    fn raw_op(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        srcs: &[TensorId],
        body: impl FnOnce(&mut [u8], &[&[u8]]),
    ) {
        let opt: [Option<TensorId>; MAX_TENSOR_READS] = std::array::from_fn(|i| srcs.get(i).copied());
        self.with_operands(p, f, dst, &opt[..srcs.len()], |out, views| {
            let views: [&[u8]; MAX_TENSOR_READS] =
                std::array::from_fn(|i| views.get(i).and_then(|v| v.as_deref()).unwrap_or_default());
            body(out, &views[..srcs.len()])
        })
    }

    /// A float operation: sources widened to f32, the result rounded to the destination's dtype.
    fn float_op(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        srcs: &[Option<TensorId>],
        body: impl FnOnce(&mut [f32], &[Option<&[f32]>]),
    ) {
        let dtype = |t: TensorId| p.tensors[t.0 as usize].dtype;
        let dst_dtype = dtype(dst);
        let src_dtypes: [Option<DType>; MAX_TENSOR_READS] =
            std::array::from_fn(|i| srcs.get(i).copied().flatten().map(dtype));
        let all_f32 = dst_dtype == DType::F32 && src_dtypes.iter().all(|d| d.is_none_or(|d| d == DType::F32));
        self.with_operands(p, f, dst, srcs, |out, views| {
            // The common case: everything f32 and aligned (the arena, inputs, constants and the
            // scratch buffer all are), so the bytes are viewed as f32 in place.
            if all_f32 {
                let direct: [Option<Option<&[f32]>>; MAX_TENSOR_READS] = std::array::from_fn(|i| {
                    views.get(i).map(|v| v.and_then(|b| bytemuck::try_cast_slice(b).ok()))
                });
                let aligned = views.iter().zip(&direct).all(|(v, d)| v.is_none() || d.flatten().is_some());
                if let (true, Ok(out)) = (aligned, bytemuck::try_cast_slice_mut(out)) {
                    let ins: [Option<&[f32]>; MAX_TENSOR_READS] =
                        std::array::from_fn(|i| direct[i].flatten());
                    return body(out, &ins[..views.len()]);
                }
            }
            let widened: [Option<Cow<[f32]>>; MAX_TENSOR_READS] =
                std::array::from_fn(|i| Some(to_f32(views.get(i).copied().flatten()?, src_dtypes[i]?)));
            let ins: [Option<&[f32]>; MAX_TENSOR_READS] = std::array::from_fn(|i| widened[i].as_deref());
            let ins = &ins[..views.len()];
            if dst_dtype == DType::F32 {
                body(bytemuck::cast_slice_mut(out), ins);
            } else {
                let mut tmp = vec![0.0f32; out.len() / dst_dtype.size()];
                body(&mut tmp, ins);
                from_f32(&tmp, dst_dtype, out);
            }
        })
    }

    /// An i32 operation.
    fn int_op(
        &mut self,
        p: &Program,
        f: &Frame,
        dst: TensorId,
        srcs: &[Option<TensorId>],
        body: impl FnOnce(&mut [i32], &[Option<&[i32]>]),
    ) {
        self.with_operands(p, f, dst, srcs, |out, views| {
            let ints: [Option<Cow<[i32]>>; MAX_TENSOR_READS] =
                std::array::from_fn(|i| Some(cast_or_copy(views.get(i).copied().flatten()?)));
            let ins: [Option<&[i32]>; MAX_TENSOR_READS] = std::array::from_fn(|i| ints[i].as_deref());
            body(bytemuck::cast_slice_mut(out), &ins[..views.len()])
        })
    }

    fn cast(&mut self, p: &Program, f: &Frame, dst: TensorId, src: TensorId) {
        let (dd, sd) = (p.tensors[dst.0 as usize].dtype, p.tensors[src.0 as usize].dtype);
        match (sd, dd) {
            (DType::I32, DType::I32) => {
                self.raw_op(p, f, dst, &[src], |out, ins| out.copy_from_slice(ins[0]))
            }
            (DType::I32, _) => {
                self.with_operands(p, f, dst, &[Some(src)], |out, views| {
                    let ints: Cow<[i32]> = cast_or_copy(views[0].unwrap_or_default());
                    // One rounding to nearest even, the same on every executor: i32 -> f32 is
                    // Rust's `as`; f16 and bf16 are rounded straight from the integer (through
                    // f32 they would round twice).
                    match dd {
                        DType::F16 | DType::Bf16 => {
                            let conv =
                                if dd == DType::F16 { nx::i32_to_f16_bits } else { nx::i32_to_bf16_bits };
                            for (o, &v) in out.chunks_exact_mut(2).zip(ints.iter()) {
                                o.copy_from_slice(&conv(v).to_le_bytes());
                            }
                        }
                        _ => {
                            let vals: Vec<f32> = ints.iter().map(|&v| v as f32).collect();
                            from_f32(&vals, dd, out);
                        }
                    }
                });
            }
            (_, DType::I32) => {
                self.with_operands(p, f, dst, &[Some(src)], |out, views| {
                    let vals = to_f32(views[0].unwrap_or_default(), sd);
                    let out: &mut [i32] = bytemuck::cast_slice_mut(out);
                    // `as` truncates toward zero, saturates, and maps NaN to 0, as the ISA says.
                    for (o, &v) in out.iter_mut().zip(vals.iter()) {
                        *o = v as i32;
                    }
                });
            }
            _ => self.float_op(p, f, dst, &[Some(src)], |out, ins| {
                for (o, &v) in out.iter_mut().zip(ins[0].unwrap_or_default()) {
                    *o = nx::canon(v);
                }
            }),
        }
    }
}

/// Per-run state.
struct Frame {
    shapes: Vec<Vec<usize>>,
    /// Element count of each tensor (for the profiler's flop and byte counts).
    counts: Vec<u64>,
    out_shapes: Vec<Vec<usize>>,
    locs: Vec<Loc>,
    regs: [i64; 16],
    level: SimdLevel,
    tier: crate::isa::Tier,
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl Frame {
    /// What kernels need besides their data.
    fn ctx(&self) -> Ctx<'_> {
        Ctx { level: self.level, tier: self.tier, pool: self.pool.as_deref() }
    }
}

enum Flow {
    Next,
    Jump(usize),
    Halt,
}

fn resolve(d: Dim, dims: &[u64]) -> usize {
    match d {
        Dim::Const(n) => n as usize,
        Dim::Sym(s) => dims.get(s.0 as usize).copied().unwrap_or(1) as usize,
    }
}

fn concrete(shape: &[Dim]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, d| match d {
        Dim::Const(n) => a.checked_mul(*n as usize),
        Dim::Sym(_) => None,
    })
}

fn norm_axis(axis: i8, rank: usize) -> usize {
    if axis < 0 {
        (rank as i64 + axis as i64) as usize
    } else {
        axis as usize
    }
}

/// Reinterprets bytes as a slice of `T`, copying only when they are not aligned for it.
fn cast_or_copy<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Float data of any float dtype as f32 (f16 and bf16 widen exactly).
fn to_f32(bytes: &[u8], dtype: DType) -> Cow<'_, [f32]> {
    match dtype {
        DType::F32 => cast_or_copy(bytes),
        DType::F16 => {
            Cow::Owned(cast_or_copy::<u16>(bytes).iter().map(|&h| nx::f16_bits_to_f32(h)).collect())
        }
        DType::Bf16 => {
            Cow::Owned(cast_or_copy::<u16>(bytes).iter().map(|&h| nx::bf16_bits_to_f32(h)).collect())
        }
        DType::I32 => Cow::Owned(cast_or_copy::<i32>(bytes).iter().map(|&v| v as f32).collect()),
    }
}

/// The block format of a block-quantized constant, or None for any other tensor.
fn block_format(p: &Program, t: TensorId) -> Option<crate::isa::BlockFormat> {
    match p.tensors[t.0 as usize].kind {
        TensorKind::Const(ConstData::Blocks { format, .. }) => Some(format),
        _ => None,
    }
}

/// Writes f32 values into bytes of `dtype`, rounding to nearest even for f16 and bf16.
fn from_f32(vals: &[f32], dtype: DType, out: &mut [u8]) {
    match dtype {
        DType::F32 => out.copy_from_slice(bytemuck::cast_slice(vals)),
        DType::F16 => {
            for (o, &v) in out.chunks_exact_mut(2).zip(vals) {
                o.copy_from_slice(&nx::f32_to_f16_bits(v).to_le_bytes());
            }
        }
        DType::Bf16 => {
            for (o, &v) in out.chunks_exact_mut(2).zip(vals) {
                o.copy_from_slice(&nx::f32_to_bf16_bits(v).to_le_bytes());
            }
        }
        DType::I32 => {
            for (o, &v) in out.chunks_exact_mut(4).zip(vals) {
                o.copy_from_slice(&(v as i32).to_le_bytes());
            }
        }
    }
}

/// Bytes of memory available to this process (MemAvailable on Linux; unlimited elsewhere).
pub fn available_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(u64::MAX)
}
