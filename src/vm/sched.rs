//! Independent instructions at the same time (the scheduler's second half; the first is the
//! deterministic split of one instruction's work in `exec::cpu`).
//!
//! In the plain interpreter loop (CPU executor, worker pool, no observer that wants timing or
//! written data), the interpreter asks [`Vm::run_independent`] at each instruction. When that
//! instruction and the ones right after it are large float kernels that do not depend on each
//! other, they form a *batch* and run as concurrent tasks on the worker pool; ALLOC, FREE and
//! NOP between them (no-ops at run time) join the batch.
//!
//! Invariants:
//! - **Dependencies come from memory, not names.** Only temporaries in the arena are ever
//!   written. A batch member's destination bytes overlap no other member's destination or
//!   source bytes, and its source bytes overlap no earlier member's destination: the
//!   verifier's arena plan may reuse a freed temporary's bytes for a later one, and comparing
//!   byte ranges covers that too. So every member reads exactly what it would read in program
//!   order, and writes bytes no other member touches.
//! - **Results never depend on the schedule.** Each member runs the same kernel with the same
//!   [`Ctx`] (level, tier, pool size) as the one-at-a-time path, and kernels split their work by
//!   the pool size only, never by who runs a chunk or when. So the bits are those of program
//!   order, for any thread count.
//! - **Observers see program order.** After a batch, every instruction in it is reported in
//!   order with its own step number; trace digests and step counts are unchanged. (A batch only
//!   forms when no observer wants data or timing; the step budget is never overrun. An observer
//!   that stops the run inside a batch finds the batch's later instructions already run: they
//!   wrote temporaries only, which nothing outside the run sees.)
//! - Members are kernels with every operand 32-bit and aligned (the common case), the
//!   destination not among the sources, and none can fail at run time: the float kernels with
//!   every operand f32; the comparisons on f32 or i32 sources, writing i32; SELECT with an i32
//!   condition, moving 32-bit words. The task sees every operand as a slice of 32-bit words
//!   (typed f32; the comparisons and SELECT reinterpret them, which changes no bit).

use std::ops::{ControlFlow, Range};

use super::{norm_axis, ConstStore, Frame, Loc, Observer, StepEvent, Vm};
use crate::exec::cpu::reference::{Binary, Compare, MatmulShape, Reduce, Unary};
use crate::exec::cpu::{self as cpu, simd, Ctx};
use crate::format::{ConstData, Program, TensorKind};
use crate::isa::{DType, Group, Insn, Opcode, TensorId, TensorOperands, MAX_TENSOR_READS};

/// Least work (elements of the output or first source, or multiply-adds for MATMUL) for an instruction to join a
/// batch: below it a task costs more than running in line.
const MIN_WORK: u64 = 1 << 14;
/// Least output values for an instruction to start a batch (it may still join one with
/// fewer, e.g. a reduction to a short row).
const START_MIN: u64 = 64;
/// Most tensor instructions in one batch.
const MAX_BATCH: usize = 8;

/// How a batch ended.
pub(super) struct Ran {
    /// Instructions executed (and reported).
    pub steps: u64,
    /// An observer asked to stop.
    pub stop: bool,
}

/// One batch member: its instruction index and the byte ranges it writes and reads.
struct Member {
    index: usize,
    dst: Range<usize>,
    srcs: [Option<TensorId>; MAX_TENSOR_READS],
}

/// The destination and sources of an instruction that may join a batch: one of the
/// elementwise and tensor groups, whose instructions opcodes/isa.toml defines as kernels (pure
/// functions of their tensor operands that cannot fail at run time), and all of which
/// [`run_kernel`] runs.
fn operands(insn: &Insn) -> Option<(TensorId, [Option<TensorId>; MAX_TENSOR_READS])> {
    if !batchable(insn) {
        return None;
    }
    let TensorOperands { dst, srcs } = insn.tensor_operands();
    Some((dst?, srcs))
}

/// The reduction dimension of a MATMUL (1 for other instructions).
fn depth(f: &Frame, insn: &Insn) -> u64 {
    match *insn {
        Insn::Matmul { a, ta, .. } => {
            let s = &f.shapes[a.0 as usize];
            (if ta { s[s.len() - 2] } else { s[s.len() - 1] }) as u64
        }
        _ => 1,
    }
}

/// The (flops, bytes) an instruction reports, as the one-at-a-time path counts them.
fn cost(f: &Frame, insn: &Insn, dst: TensorId, srcs: &[Option<TensorId>]) -> (u64, u64) {
    let n = |t: TensorId| f.counts[t.0 as usize];
    let (nd, ns0) = (n(dst), srcs[0].map_or(0, n));
    match insn.opcode() {
        Opcode::Matmul => (2 * nd * depth(f, insn), (ns0 + srcs[1].map_or(0, n) + nd) * 4),
        Opcode::Add
        | Opcode::Sub
        | Opcode::Mul
        | Opcode::Div
        | Opcode::Max
        | Opcode::Min
        | Opcode::Eq
        | Opcode::Lt
        | Opcode::Le => (nd, (ns0 + srcs[1].map_or(0, n) + nd) * 4),
        // Data movement: no flops; the condition, a, b and dst words.
        Opcode::Select => (0, (ns0 + srcs[1].map_or(0, n) + srcs[2].map_or(0, n) + nd) * 4),
        Opcode::Softmax => (5 * nd, 2 * nd * 4),
        Opcode::Layernorm => (8 * nd, 2 * nd * 4),
        Opcode::Rmsnorm => (4 * nd, 2 * nd * 4),
        Opcode::ReduceSum | Opcode::ReduceMean | Opcode::ReduceMax => (ns0, (ns0 + nd) * 4),
        // Unary and scalar elementwise (the other members): one flop and two words an element.
        _ => (nd, 2 * nd * 4),
    }
}

/// The arena bytes a member reads (inputs and constants are never written).
fn reads<'a>(f: &'a Frame, m: &'a Member) -> impl Iterator<Item = Range<usize>> + 'a {
    m.srcs.iter().flatten().filter_map(|s| match &f.locs[s.0 as usize] {
        Loc::Arena(r) => Some(r.clone()),
        _ => None,
    })
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Runs one batch member on its sources (`ins` holds them in the slots of
/// [`TensorOperands::srcs`]): the same calls as `Vm::exec`. Every instruction is listed: a new
/// opcode must say here whether and how it runs in a batch.
fn run_kernel(
    ctx: &Ctx,
    p: &Program,
    f: &Frame,
    insn: &Insn,
    out: &mut [f32],
    ins: &[Option<&[f32]>; MAX_TENSOR_READS],
) {
    let shape = |t: TensorId| f.shapes[t.0 as usize].as_slice();
    // EQ, LT and LE: f32 or i32 sources (`member`), an i32 destination.
    let compare = |op: Compare, a: TensorId, b: TensorId, dst: TensorId, out: &mut [f32]| {
        let out: &mut [i32] = bytemuck::cast_slice_mut(out);
        let (x, y) = (ins[0].unwrap_or_default(), ins[1].unwrap_or_default());
        if p.tensors[a.0 as usize].dtype == DType::I32 {
            let (x, y) = (bytemuck::cast_slice(x), bytemuck::cast_slice(y));
            simd::compare_i32(ctx, op, x, shape(a), y, shape(b), out, shape(dst))
        } else {
            simd::compare(ctx, op, x, shape(a), y, shape(b), out, shape(dst))
        }
    };
    let x = ins[0].unwrap_or_default();
    let unary = |op: Unary, out: &mut [f32]| simd::unary(ctx, op, x, out);
    let binary = |op: Binary, a: TensorId, b: TensorId, dst: TensorId, out: &mut [f32]| {
        simd::binary(ctx, op, x, shape(a), ins[1].unwrap_or_default(), shape(b), out, shape(dst))
    };
    let scalar = |op: Binary, s: f32, out: &mut [f32]| simd::binary_scalar(ctx, op, x, s, out);
    let reduce = |op: Reduce, src: TensorId, axis: i8, out: &mut [f32]| {
        let s = shape(src);
        simd::reduce(ctx, op, x, s, norm_axis(axis, s.len()), out)
    };
    match *insn {
        Insn::Matmul { dst, a, b, bias, ta, tb, act } => {
            let g =
                MatmulShape { a: shape(a).to_vec(), b: shape(b).to_vec(), out: shape(dst).to_vec(), ta, tb };
            let bias = ins[2].zip(bias.map(shape));
            // Batches take f32 tensors only (`member`).
            cpu::matmul(ctx, &g, DType::F32, x, cpu::MatB::F32(ins[1].unwrap_or_default()), bias, act, out);
        }
        Insn::Add { dst, a, b } => binary(Binary::Add, a, b, dst, out),
        Insn::Sub { dst, a, b } => binary(Binary::Sub, a, b, dst, out),
        Insn::Mul { dst, a, b } => binary(Binary::Mul, a, b, dst, out),
        Insn::Div { dst, a, b } => binary(Binary::Div, a, b, dst, out),
        Insn::Max { dst, a, b } => binary(Binary::Max, a, b, dst, out),
        Insn::Min { dst, a, b } => binary(Binary::Min, a, b, dst, out),
        Insn::AddS { s, .. } => scalar(Binary::Add, s, out),
        Insn::SubS { s, .. } => scalar(Binary::Sub, s, out),
        Insn::MulS { s, .. } => scalar(Binary::Mul, s, out),
        Insn::DivS { s, .. } => scalar(Binary::Div, s, out),
        Insn::MaxS { s, .. } => scalar(Binary::Max, s, out),
        Insn::MinS { s, .. } => scalar(Binary::Min, s, out),
        Insn::Neg { .. } => unary(Unary::Neg, out),
        Insn::Abs { .. } => unary(Unary::Abs, out),
        Insn::Sqrt { .. } => unary(Unary::Sqrt, out),
        Insn::Rsqrt { .. } => unary(Unary::Rsqrt, out),
        Insn::Exp { .. } => unary(Unary::Exp, out),
        Insn::Log { .. } => unary(Unary::Log, out),
        Insn::Relu { .. } => unary(Unary::Relu, out),
        Insn::Sigmoid { .. } => unary(Unary::Sigmoid, out),
        Insn::Tanh { .. } => unary(Unary::Tanh, out),
        Insn::Gelu { .. } => unary(Unary::Gelu, out),
        Insn::Silu { .. } => unary(Unary::Silu, out),
        Insn::Erf { .. } => unary(Unary::Erf, out),
        Insn::Eq { dst, a, b } => compare(Compare::Eq, a, b, dst, out),
        Insn::Lt { dst, a, b } => compare(Compare::Lt, a, b, dst, out),
        Insn::Le { dst, a, b } => compare(Compare::Le, a, b, dst, out),
        Insn::Select { dst, cond, a, b } => {
            let c: &[i32] = bytemuck::cast_slice(ins[0].unwrap_or_default());
            let (x, y) = (as_words(ins[1]), as_words(ins[2]));
            let out: &mut [u32] = bytemuck::cast_slice_mut(out);
            simd::select(ctx, c, shape(cond), x, shape(a), y, shape(b), out, shape(dst))
        }
        Insn::Softmax { x: xt, mask, scale, .. } => {
            simd::softmax(ctx, x, shape(xt), ins[1].zip(mask.map(shape)), scale, out)
        }
        Insn::Layernorm { x: xt, eps, .. } => {
            let n = shape(xt).last().copied().unwrap_or(1);
            simd::layernorm(ctx, x, n, ins[1], ins[2], eps, out)
        }
        Insn::Rmsnorm { x: xt, eps, .. } => {
            let n = shape(xt).last().copied().unwrap_or(1);
            simd::rmsnorm(ctx, x, n, ins[1], eps, out)
        }
        Insn::ReduceSum { src, axis, .. } => reduce(Reduce::Sum, src, axis, out),
        Insn::ReduceMean { src, axis, .. } => reduce(Reduce::Mean, src, axis, out),
        Insn::ReduceMax { src, axis, .. } => reduce(Reduce::Max, src, axis, out),
        // Never batch members: `batchable` refuses them.
        Insn::Argmax { .. }
        | Insn::Nop
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
        | Insn::Tget { .. }
        | Insn::Tset { .. }
        | Insn::Alloc { .. }
        | Insn::Free { .. }
        | Insn::Load { .. }
        | Insn::Store { .. }
        | Insn::Copy { .. }
        | Insn::Reshape { .. }
        | Insn::Slice { .. }
        | Insn::SliceR { .. }
        | Insn::Put { .. }
        | Insn::Scatter { .. }
        | Insn::Concat { .. }
        | Insn::Transpose { .. }
        | Insn::Fill { .. }
        | Insn::Cast { .. }
        | Insn::Gather { .. }
        | Insn::Rand { .. }
        | Insn::GpuSync
        | Insn::Kernel { .. } => {}
    }
}

/// A batch member's 32-bit words as they are (SELECT moves them without a look).
fn as_words(s: Option<&[f32]>) -> &[u32] {
    bytemuck::cast_slice(s.unwrap_or_default())
}

/// Whether an instruction may run as a batch member (see [`run_kernel`]): the kernels of the
/// elementwise and tensor groups (`member` says which operand types). ARGMAX writes i32 and
/// runs one at a time.
fn batchable(insn: &Insn) -> bool {
    matches!(insn.info().group, Group::Elementwise | Group::Tensor) && !matches!(insn, Insn::Argmax { .. })
}

/// A raw view of the arena shared by a batch's tasks (see the module invariants).
#[derive(Clone, Copy)]
struct ArenaPtr(*mut u8);
impl ArenaPtr {
    /// The address `off` bytes in (the caller keeps it within the arena).
    fn at(self, off: usize) -> *mut u8 {
        self.0.wrapping_add(off)
    }
}
// SAFETY: tasks get byte ranges of one live arena that the batch proved disjoint from every
// range another task writes; the arena outlives the scope they run in.
unsafe impl Send for ArenaPtr {}
// SAFETY: as above.
unsafe impl Sync for ArenaPtr {}

impl Vm {
    /// The member an instruction would be, if it may join a batch (large enough, 32-bit operands
    /// of the types its kernel takes in a batch, destination in the arena and not read by itself).
    fn member(&self, p: &Program, f: &Frame, index: usize, insn: &Insn) -> Option<Member> {
        let (dst, srcs) = operands(insn)?;
        let elements = f.counts[dst.0 as usize].max(srcs[0].map_or(0, |s| f.counts[s.0 as usize]));
        if elements.saturating_mul(depth(f, insn)) < MIN_WORK {
            return None;
        }
        // Block-quantized constants are f32 values stored as blocks: they run alone, through
        // `Vm::exec`, which reads them as blocks (a batch would read their bytes as f32).
        let blocks =
            |t: TensorId| matches!(p.tensors[t.0 as usize].kind, TensorKind::Const(ConstData::Blocks { .. }));
        let dt = |t: TensorId| p.tensors[t.0 as usize].dtype;
        let types_ok = match *insn {
            // i32 dst and one source dtype (the verifier's rules): f32 or i32 sources.
            Insn::Eq { a, .. } | Insn::Lt { a, .. } | Insn::Le { a, .. } => {
                matches!(dt(a), DType::F32 | DType::I32)
            }
            // i32 cond; a, b and dst of one dtype: 32-bit words.
            Insn::Select { dst, .. } => dt(dst).size() == 4,
            _ => dt(dst) == DType::F32 && srcs.iter().flatten().all(|&s| dt(s) == DType::F32),
        };
        if !types_ok || blocks(dst) || srcs.iter().flatten().any(|&s| s == dst || blocks(s)) {
            return None;
        }
        let Loc::Arena(r) = &f.locs[dst.0 as usize] else { return None };
        Some(Member { index, dst: r.clone(), srcs })
    }

    /// A source's f32 data, or None when it is not aligned for f32 (then no batch).
    fn source<'a>(&'a self, p: &'a Program, f: &Frame, arena: ArenaPtr, t: TensorId) -> Option<&'a [f32]> {
        let bytes: &[u8] = match &f.locs[t.0 as usize] {
            // SAFETY: the range lies in the live arena (the plan sized it) and, for the whole
            // batch, no task writes it (module invariants).
            Loc::Arena(r) => unsafe { std::slice::from_raw_parts(arena.at(r.start), r.len()) },
            Loc::Input(k) => self.inputs[*k].as_ref().map_or(&[][..], |t| t.bytes()),
            Loc::Const(i) => match &self.consts[*i] {
                Some(ConstStore::Data(r)) => &p.data[r.clone()],
                Some(ConstStore::Owned(b)) => b.bytes(),
                None => &[],
            },
        };
        bytemuck::try_cast_slice(bytes).ok()
    }

    /// Runs the instructions from `pc` on as a batch of concurrent tasks if at least two large
    /// independent float kernels start there (see the module docs), reporting each to
    /// `observer` in program order. None: no batch; the caller runs `pc` as usual.
    #[inline]
    pub(super) fn run_independent(
        &mut self,
        p: &Program,
        f: &Frame,
        pc: usize,
        steps: u64,
        observer: &mut dyn Observer,
    ) -> Option<Ran> {
        // This runs before every instruction of a plain run: the cheap tests here, the rest in
        // `run_batch`, out of line.
        self.pool.as_ref()?;
        let dst = self.program.instructions()[pc].insn.writes()?;
        if f.counts[dst.0 as usize] < START_MIN {
            return None;
        }
        self.run_batch(p, f, pc, steps, observer)
    }

    /// [`Vm::run_independent`] past its first tests.
    #[inline(never)]
    fn run_batch(
        &mut self,
        p: &Program,
        f: &Frame,
        pc: usize,
        steps: u64,
        observer: &mut dyn Observer,
    ) -> Option<Ran> {
        let first = self.member(p, f, pc, &self.program.instructions()[pc].insn)?;
        let program = self.program.clone();
        let code = program.instructions();
        let budget = self.config.max_steps.map_or(usize::MAX, |m| m.saturating_sub(steps) as usize);
        let mut members = vec![first];
        let mut end = pc + 1;
        while end < code.len() && end - pc < budget && members.len() < MAX_BATCH {
            let insn = &code[end].insn;
            if matches!(insn, Insn::Alloc { .. } | Insn::Free { .. } | Insn::Nop) {
                end += 1;
                continue;
            }
            let Some(m) = self.member(p, f, end, insn) else { break };
            let independent = members.iter().all(|o| {
                !overlaps(&o.dst, &m.dst)
                    && reads(f, o).all(|r| !overlaps(&r, &m.dst))
                    && reads(f, &m).all(|r| !overlaps(&r, &o.dst))
            });
            if !independent {
                break;
            }
            members.push(m);
            end += 1;
        }
        // Trailing no-ops are left to the plain loop.
        while members.last().is_some_and(|m| m.index + 1 < end) {
            end -= 1;
        }
        if members.len() < 2 {
            return None;
        }
        let arena = ArenaPtr(self.arena.bytes_mut().as_mut_ptr());
        let mut tasks = Vec::with_capacity(members.len());
        for m in &members {
            let mut ins: [Option<&[f32]>; MAX_TENSOR_READS] = [None; MAX_TENSOR_READS];
            for (slot, s) in ins.iter_mut().zip(m.srcs) {
                if let Some(t) = s {
                    *slot = Some(self.source(p, f, arena, t)?);
                }
            }
            if m.dst.start % 4 != 0 {
                return None;
            }
            tasks.push((m, ins));
        }
        let ctx = f.ctx();
        let pool = ctx.pool?;
        pool.install(|| {
            rayon::scope(|s| {
                for (m, ins) in &tasks {
                    let insn = &code[m.index].insn;
                    s.spawn(move |_| {
                        // SAFETY: the destination range lies in the live arena, is f32-aligned
                        // (checked above; the arena itself is 64-byte aligned) and no other
                        // task reads or writes it (module invariants).
                        let out = unsafe {
                            std::slice::from_raw_parts_mut(arena.at(m.dst.start) as *mut f32, m.dst.len() / 4)
                        };
                        run_kernel(&ctx, p, f, insn, out, ins);
                    });
                }
            })
        });
        let mut ran = Ran { steps: 0, stop: false };
        for (index, instruction) in code.iter().enumerate().take(end).skip(pc) {
            let cost = match operands(&instruction.insn) {
                Some((dst, srcs)) => cost(f, &instruction.insn, dst, &srcs),
                None => (0, 0),
            };
            let flow = observer.step(&StepEvent {
                step: steps + ran.steps,
                index,
                instruction,
                written: None,
                elapsed: std::time::Duration::ZERO,
                gpu_elapsed: None,
                flops: cost.0,
                bytes: cost.1,
            });
            ran.steps += 1;
            if flow == ControlFlow::Break(()) {
                ran.stop = true;
                break;
            }
        }
        Some(ran)
    }
}
