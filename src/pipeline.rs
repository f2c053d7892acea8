//! Layers across devices: a [`PipelineSession`] cuts a program at instruction boundaries into
//! stages, runs each stage on its own executor one after the other, and hands the temporaries
//! live at each cut to the next stage through host memory. Each device holds only the
//! constants its stage's instructions use, so a model too large for one device runs over
//! several.
//!
//! ```
//! use adeadvm::api::{Config, Program};
//! use adeadvm::pipeline::PipelineSession;
//! use adeadvm::split::Place;
//! use adeadvm::HostTensor;
//!
//! let program = Program::from_asm(
//!     ".input %x f32[2]\n.output y f32[2]\n    ALLOC %t: f32[2]\n    ADD %t, %x, %x\n    MUL %t, %t, %t\n    STORE y, %t\n    FREE %t\n    HALT\n",
//!     "square.s",
//! )?;
//! // Instructions 0..2 on one CPU session, 2.. on another: %t travels between them.
//! let mut pipeline = PipelineSession::with_cuts(&program, &[Place::Cpu, Place::Cpu], &[2], &Config::default())?;
//! pipeline.set_input("x", HostTensor::from_f32(vec![2], &[1., 3.]).unwrap())?;
//! pipeline.run()?;
//! assert_eq!(pipeline.output("y")?.to_f32().unwrap(), [4., 36.]);
//! # Ok::<(), adeadvm::Error>(())
//! ```
//!
//! How a stage is made from the instructions `a..b` of the program (see [`cut_program`]):
//! - its tensor table holds every input of the program (so every symbolic dimension is bound as
//!   in a whole run), one input `pipe_NAME` for each temporary allocated at `a`, and the
//!   constants and temporaries its instructions (and its KERNELs' bindings) use, in the order of
//!   the program's table (so LOAD's `count` constants stay consecutive);
//! - its code is an ALLOC and a COPY from `pipe_NAME` for each temporary carried in, the
//!   instructions `a..b` (jump targets moved with them), then, unless it is the last stage, a
//!   STORE into the output `pipe_NAME` and a FREE for each temporary allocated at `b`;
//! - its outputs are the program's outputs its instructions STORE, then the carried ones.
//!
//! Invariants:
//! - A cut is refused where a jump crosses it, a register is used on both sides, an output is
//!   stored on both sides, or a HALT lies before it: the instructions of each stage then run
//!   exactly as in a whole run, and every tensor a stage reads was written by it or carried in.
//!   Each stage program is verified as any program is, and copies keep bits, so in the strict
//!   tier the outputs are the bits of a whole run on one device, for every cut and every
//!   device (in the fast tier each device gives its own fast bits).
//! - Cuts chosen by [`plan_cuts`] balance the bytes of constants over the stages (a constant
//!   counts in each stage that uses it): among the cuts within a quarter of a stage's share of the
//!   best balance, the one carrying the fewest temporaries (a layer boundary in a transformer).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::api::{Config, Error, IntoHostTensor, Program, Result, Session};
use crate::format::{self, DebugInfo, OutputDecl, TensorDecl, TensorKind};
use crate::isa::{Dim, Insn, Instruction, KernelId, Operand, OutputId, Target, TensorId};
use crate::split::{
    batch_rows, check_batch_axis, join_rows, output_named, place_config, rows_of, unbound_input, Place,
};
use crate::verify::VerifiedProgram;
use crate::vm::HostTensor;

/// One stage of a cut program.
#[derive(Clone)]
pub struct Stage {
    /// The instructions of the whole program it runs.
    pub range: Range<usize>,
    /// The stage as a program of its own (verified; same tier as the whole).
    pub program: Program,
    /// Names of the inputs it receives from the stage before (none for the first).
    pub carried_in: Vec<String>,
    /// Names of the outputs it hands to the stage after (none for the last).
    pub carried_out: Vec<String>,
    /// Bytes of the constants its instructions use: what its device holds besides the arena.
    pub const_bytes: u64,
}

/// Where each instruction boundary of a program may be cut, and what a cut there carries.
struct CutMap<'a> {
    vp: &'a VerifiedProgram,
    /// Per boundary k (0..=n, before instruction k): the index in `reasons` of why it cannot be
    /// a cut (the first found), None when it can.
    blocked: Vec<Option<u32>>,
    reasons: Vec<Blocker>,
}

/// Why a range of boundaries cannot be cuts.
enum Blocker {
    /// A HALT at this instruction.
    Halt(usize),
    /// A jump from this instruction to that one.
    Jump(usize, usize),
    /// A register used first and last at these instructions.
    Register(u8, usize, usize),
    /// An output stored first and last at these instructions.
    Output(u16, usize, usize),
}

impl<'a> CutMap<'a> {
    fn new(vp: &'a VerifiedProgram) -> CutMap<'a> {
        let insns = vp.instructions();
        let n = insns.len();
        let mut reasons = Vec::new();
        let mut regs: HashMap<u8, (usize, usize)> = HashMap::new();
        let mut stores: HashMap<u16, (usize, usize)> = HashMap::new();
        for (i, ins) in insns.iter().enumerate() {
            if matches!(ins.insn, Insn::Halt) && i + 1 < n {
                reasons.push(Blocker::Halt(i));
            }
            for op in ins.insn.operands() {
                match op {
                    Operand::Label(Target(t)) => reasons.push(Blocker::Jump(i, t as usize)),
                    Operand::Reg(r) | Operand::RegOpt(Some(r)) => regs.entry(r.0).or_insert((i, i)).1 = i,
                    Operand::Output(OutputId(o)) => stores.entry(o).or_insert((i, i)).1 = i,
                    _ => {}
                }
            }
        }
        let mut regs: Vec<_> = regs.into_iter().collect();
        regs.sort_unstable();
        reasons.extend(regs.into_iter().map(|(r, (first, last))| Blocker::Register(r, first, last)));
        let mut stores: Vec<_> = stores.into_iter().collect();
        stores.sort_unstable();
        reasons.extend(stores.into_iter().map(|(o, (first, last))| Blocker::Output(o, first, last)));
        // Each boundary takes the first reason covering it. `next[k]`: the first boundary from k
        // on not yet blocked (path-halved), so every boundary is visited once whatever the
        // number and length of the ranges: O(n + reasons) in all.
        let mut blocked = vec![None; n + 1];
        let mut next: Vec<u32> = (0..=n as u32 + 1).collect();
        fn find(next: &mut [u32], mut k: usize) -> usize {
            while next[k] as usize != k {
                next[k] = next[next[k] as usize];
                k = next[k] as usize;
            }
            k
        }
        for (r, reason) in reasons.iter().enumerate() {
            // Inside one stage a jump goes from before k to at most k, or from k on to k or later.
            let range = match *reason {
                Blocker::Halt(i) => i + 1..n,
                Blocker::Jump(i, t) if t <= i => t + 1..i + 1,
                Blocker::Jump(i, t) => i + 1..t,
                Blocker::Register(_, first, last) | Blocker::Output(_, first, last) => first + 1..last + 1,
            };
            let end = range.end.min(n);
            let mut k = find(&mut next, range.start.max(1));
            while k < end {
                blocked[k] = Some(r as u32);
                next[k] = k as u32 + 1;
                k = find(&mut next, k + 1);
            }
        }
        CutMap { vp, blocked, reasons }
    }

    fn len(&self) -> usize {
        self.blocked.len() - 1
    }

    fn is_legal(&self, k: usize) -> bool {
        k > 0 && k < self.len() && self.blocked[k].is_none()
    }

    /// Why boundary `k` cannot be a cut (None when it can).
    fn refusal(&self, k: usize) -> Option<String> {
        Some(match k {
            0 => "a stage must run at least one instruction".into(),
            k if k >= self.len() => format!("the program has {} instructions", self.len()),
            k => match self.reasons[self.blocked[k]? as usize] {
                Blocker::Halt(i) => format!("instruction {i} (HALT) ends the program before it"),
                Blocker::Jump(i, t) => format!("the jump at instruction {i} to {t} crosses it"),
                Blocker::Register(r, first, last) => {
                    format!("register r{r} is used on both sides (instructions {first} and {last})")
                }
                Blocker::Output(o, first, last) => format!(
                    "output `{}` is stored on both sides (instructions {first} and {last})",
                    self.vp.output(OutputId(o)).name
                ),
            },
        })
    }

    /// How many temporaries are allocated at each boundary 0..=n (as [`CutMap::allocated_at`]
    /// counts them), in one pass.
    fn allocated_counts(&self) -> Vec<usize> {
        let mut live = HashSet::new();
        let mut counts = Vec::with_capacity(self.len() + 1);
        counts.push(0);
        for ins in self.vp.instructions() {
            match ins.insn {
                Insn::Alloc { t } => {
                    live.insert(t.0);
                }
                Insn::Free { t } => {
                    live.remove(&t.0);
                }
                _ => {}
            }
            counts.push(live.len());
        }
        counts
    }

    /// The temporaries allocated at each boundary in `ks` (increasing), in tensor-table order,
    /// each with whether it was written yet: the ALLOCs before the boundary less the FREEs (the
    /// verifier makes the set the same along every path, and no jump crosses a cut, so counting
    /// in code order gives it). A stage whose code writes a temporary on some paths only is
    /// refused when it is verified.
    fn allocated_at(&self, ks: &[usize]) -> Vec<Vec<Live>> {
        let mut live: BTreeMap<u16, bool> = BTreeMap::new();
        let mut at = 0;
        ks.iter()
            .map(|&k| {
                for ins in &self.vp.instructions()[at..k] {
                    match ins.insn {
                        Insn::Alloc { t } => {
                            live.insert(t.0, false);
                        }
                        Insn::Free { t } => {
                            live.remove(&t.0);
                        }
                        Insn::Kernel { k } => {
                            let bindings = &self.vp.program().kernels[k.0 as usize].bindings;
                            for (t, &w) in bindings.iter().zip(&self.vp.kernel(k).written) {
                                if let Some(written) = live.get_mut(&t.0).filter(|_| w) {
                                    *written = true;
                                }
                            }
                        }
                        insn => {
                            if let Some(w) = insn.writes().and_then(|t| live.get_mut(&t.0)) {
                                *w = true;
                            }
                        }
                    }
                }
                at = k;
                live.iter().map(|(&t, &written)| Live { t: TensorId(t), written }).collect()
            })
            .collect()
    }
}

/// A temporary allocated at a cut.
#[derive(Clone, Copy)]
struct Live {
    t: TensorId,
    /// Whether it holds data: then its bytes travel to the next stage; else the next stage only
    /// allocates it.
    written: bool,
}

/// The bytes of a constant as a tensor (0 for one of symbolic shape, which a constant cannot
/// have in a verified program).
fn const_bytes(decl: &TensorDecl) -> u64 {
    let elements = decl.shape.iter().try_fold(1u64, |n, d| match *d {
        Dim::Const(c) => n.checked_mul(c as u64),
        Dim::Sym(_) => None,
    });
    elements.and_then(|e| e.checked_mul(decl.dtype.size() as u64)).unwrap_or(0)
}

/// The tensors instruction `ins` names, with the constants a LOAD over `count` of them reaches.
fn tensors_of(vp: &VerifiedProgram, ins: &Instruction, out: &mut Vec<TensorId>) {
    for op in ins.insn.operands() {
        match op {
            Operand::Tensor(t) | Operand::TensorOpt(Some(t)) => out.push(t),
            Operand::Kernel(k) => out.extend(vp.program().kernels[k.0 as usize].bindings.iter().copied()),
            _ => {}
        }
    }
    if let Insn::Load { src, count, .. } = ins.insn {
        // The verifier keeps these within the table; checked again rather than trusted here.
        let table = vp.program().tensors.len();
        out.extend(
            (1..count).filter_map(|c| src.0.checked_add(c)).filter(|&t| (t as usize) < table).map(TensorId),
        );
    }
}

/// Instruction boundaries that cut `program` into `stages` stages of about equal constant bytes
/// (see the module docs). Fewer stages come back when the program has too few places to cut.
pub fn plan_cuts(program: &Program, stages: usize) -> Result<Vec<usize>> {
    let vp = program.verified();
    let map = CutMap::new(vp);
    let n = map.len();
    let legal: Vec<usize> = (1..n).filter(|&k| map.is_legal(k)).collect();
    if stages <= 1 {
        return Ok(Vec::new());
    }
    if legal.is_empty() {
        return Err(Error::Pipeline(format!(
            "the program has no instruction boundary it can be cut at{}",
            map.refusal(n / 2)
                .map_or(String::new(), |why| format!(" (e.g. before instruction {}: {why})", n / 2))
        )));
    }
    // Constant bytes up to each boundary, each constant counted at its first use.
    let mut seen = HashSet::new();
    let mut upto = vec![0u64; n + 1];
    let mut names = Vec::new();
    for (i, ins) in vp.instructions().iter().enumerate() {
        names.clear();
        tensors_of(vp, ins, &mut names);
        let mut add = 0;
        for &t in &names {
            let decl = vp.tensor(t);
            if matches!(decl.kind, TensorKind::Const(_)) && seen.insert(t) {
                add += const_bytes(decl);
            }
        }
        upto[i + 1] = upto[i] + add;
    }
    let carried = map.allocated_counts();
    let carried: Vec<usize> = legal.iter().map(|&k| carried[k]).collect();
    let total = upto[n];
    // Within a quarter of a stage's share of the best balance, the fewest temporaries carried
    // win: with six layers or more over two or three stages, that reaches a layer boundary.
    let slack = total as f64 / stages as f64 / 4.0;
    let mut cuts: Vec<usize> = Vec::new();
    for s in 1..stages {
        let target = total as f64 * s as f64 / stages as f64;
        let after = cuts.last().copied().unwrap_or(0);
        let dev = |k: usize| (upto[k] as f64 - target).abs();
        // A stage with no constants of its own is not worth a device, unless none has any.
        let useful = |k: usize| upto[k] > upto[after] && upto[n] > upto[k];
        let any_useful = legal.iter().any(|&k| k > after && useful(k));
        let open =
            || legal.iter().zip(&carried).filter(move |(&k, _)| k > after && (useful(k) || !any_useful));
        let Some(best) = open().map(|(&k, _)| dev(k)).min_by(f64::total_cmp) else { break };
        let chosen = open()
            .filter(|(&k, _)| dev(k) <= best + slack)
            .min_by(|(&a, &ca), (&b, &cb)| ca.cmp(&cb).then(dev(a).total_cmp(&dev(b))).then(a.cmp(&b)));
        cuts.extend(chosen.map(|(&k, _)| k));
    }
    Ok(cuts)
}

/// Cuts `program` before each instruction in `cuts` (increasing) into `cuts.len() + 1` stages.
pub fn cut_program(program: &Program, cuts: &[usize]) -> Result<Vec<Stage>> {
    let vp = program.verified();
    let map = CutMap::new(vp);
    for (i, &k) in cuts.iter().enumerate() {
        if i > 0 && k <= cuts[i - 1] {
            return Err(Error::Pipeline(format!("cuts must increase: {} then {k}", cuts[i - 1])));
        }
        if let Some(why) = map.refusal(k) {
            return Err(Error::Pipeline(format!("cannot cut before instruction {k}: {why}")));
        }
    }
    let n = map.len();
    let bounds: Vec<usize> = std::iter::once(0).chain(cuts.iter().copied()).chain([n]).collect();
    let live = map.allocated_at(cuts);
    let names = carry_names(vp.program(), live.iter().flatten().filter(|l| l.written).map(|l| l.t));
    let none = Vec::new();
    (0..bounds.len() - 1)
        .map(|s| {
            let carry_in = if s == 0 { &none } else { &live[s - 1] };
            let carry_out = live.get(s).unwrap_or(&none);
            let range = bounds[s]..bounds[s + 1];
            let stage = StageBuilder { vp, names: &names }
                .build(range.clone(), carry_in, carry_out)
                .ok_or_else(|| {
                    Error::Pipeline(format!(
                    "stage {} (instructions {}..{}) would have more tensors or outputs than a program may",
                    s + 1,
                    range.start,
                    range.end
                ))
                })?;
            let program = Program::verify_with(stage, None).map_err(|e| {
                Error::Pipeline(format!(
                    "stage {} (instructions {}..{}) does not verify: {e}",
                    s + 1,
                    range.start,
                    range.end
                ))
            })?;
            let p = program.verified().program();
            let const_bytes =
                p.tensors.iter().filter(|t| matches!(t.kind, TensorKind::Const(_))).map(const_bytes).sum();
            let named = |ls: &[Live]| ls.iter().filter(|l| l.written).map(|l| names[&l.t].clone()).collect();
            Ok(Stage {
                range,
                program,
                carried_in: named(carry_in),
                carried_out: named(carry_out),
                const_bytes,
            })
        })
        .collect()
}

/// `pipe_NAME` for each carried temporary, made unique among the program's tensor and output
/// names.
fn carry_names(p: &format::Program, carried: impl Iterator<Item = TensorId>) -> HashMap<TensorId, String> {
    let mut taken: HashSet<String> =
        p.tensors.iter().map(|t| t.name.clone()).chain(p.outputs.iter().map(|o| o.name.clone())).collect();
    let mut names = HashMap::new();
    for t in carried {
        if names.contains_key(&t) {
            continue;
        }
        let base = format!("pipe_{}", p.tensors[t.0 as usize].name.trim_start_matches('%'));
        let mut name = base.clone();
        let mut n = 2;
        while !taken.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        names.insert(t, name);
    }
    names
}

struct StageBuilder<'a> {
    vp: &'a VerifiedProgram,
    names: &'a HashMap<TensorId, String>,
}

impl StageBuilder<'_> {
    /// The program of instructions `range`, receiving `carry_in` and handing on `carry_out`;
    /// None when its tables would outgrow the 16-bit ids.
    fn build(&self, range: Range<usize>, carry_in: &[Live], carry_out: &[Live]) -> Option<format::Program> {
        let p = self.vp.program();
        let insns = &self.vp.instructions()[range.clone()];
        // The tensors it keeps: every input, those its instructions name, those it carries.
        let mut used = vec![false; p.tensors.len()];
        let mut names = Vec::new();
        let mut kernels = BTreeSet::new();
        for ins in insns {
            tensors_of(self.vp, ins, &mut names);
            if let Insn::Kernel { k } = ins.insn {
                kernels.insert(k.0);
            }
        }
        for t in names.iter().chain(carry_in.iter().chain(carry_out).map(|l| &l.t)) {
            used[t.0 as usize] = true;
        }
        let mut tensors: Vec<TensorDecl> =
            p.tensors.iter().filter(|t| t.kind == TensorKind::Input).cloned().collect();
        let mut pipe_in = Vec::new();
        for l in carry_in {
            pipe_in.push(l.written.then(|| {
                let decl = &p.tensors[l.t.0 as usize];
                tensors.push(TensorDecl {
                    name: self.names[&l.t].clone(),
                    kind: TensorKind::Input,
                    ..decl.clone()
                });
                TensorId(tensors.len() as u16 - 1)
            }));
        }
        let mut id = HashMap::new();
        for (i, decl) in p.tensors.iter().enumerate() {
            if decl.kind == TensorKind::Input {
                let at = p.tensors[..i].iter().filter(|t| t.kind == TensorKind::Input).count();
                id.insert(i as u16, TensorId(at as u16));
            } else if used[i] {
                id.insert(i as u16, TensorId(tensors.len() as u16));
                tensors.push(decl.clone());
            }
        }
        let carried_outputs = carry_out.iter().filter(|l| l.written).count();
        if tensors.len() > u16::MAX as usize || p.outputs.len() + carried_outputs > u16::MAX as usize + 1 {
            return None;
        }
        let kernel_id: HashMap<u16, KernelId> =
            kernels.iter().enumerate().map(|(new, &old)| (old, KernelId(new as u16))).collect();
        let kernel_decls = kernels
            .iter()
            .map(|&k| {
                let mut d = p.kernels[k as usize].clone();
                d.bindings = d.bindings.iter().map(|t| id[&t.0]).collect();
                d
            })
            .collect();
        // Outputs: the program's that these instructions store, then the carried ones.
        let stored: BTreeSet<u16> = insns
            .iter()
            .filter_map(|ins| match ins.insn {
                Insn::Store { out, .. } => Some(out.0),
                _ => None,
            })
            .collect();
        let mut outputs: Vec<OutputDecl> = stored.iter().map(|&o| p.outputs[o as usize].clone()).collect();
        let output_id: HashMap<u16, OutputId> =
            stored.iter().enumerate().map(|(new, &old)| (old, OutputId(new as u16))).collect();
        let mut code = Vec::new();
        let mut lines = Vec::new();
        let mut emit = |insn: Insn, line: u32| {
            code.push(Instruction { insn, placement: Default::default() }.encode());
            lines.push(line);
        };
        for (l, from) in carry_in.iter().zip(pipe_in) {
            emit(Insn::Alloc { t: id[&l.t.0] }, 0);
            if let Some(src) = from {
                emit(Insn::Copy { dst: id[&l.t.0], src }, 0);
            }
        }
        let shift = code.len() as i64 - range.start as i64;
        for (i, ins) in insns.iter().enumerate() {
            let ops: Vec<Operand> = ins
                .insn
                .operands()
                .into_iter()
                .map(|op| match op {
                    Operand::Tensor(t) => Operand::Tensor(id[&t.0]),
                    Operand::TensorOpt(t) => Operand::TensorOpt(t.map(|t| id[&t.0])),
                    Operand::Label(Target(t)) => Operand::Label(Target((t as i64 + shift) as u32)),
                    Operand::Output(o) => Operand::Output(output_id[&o.0]),
                    Operand::Kernel(k) => Operand::Kernel(kernel_id[&k.0]),
                    other => other,
                })
                .collect();
            let insn = Insn::from_operands(ins.insn.opcode(), &ops).expect("operands of the same kinds");
            code.push(Instruction { insn, placement: ins.placement }.encode());
            lines.push(p.debug.lines.get(range.start + i).copied().unwrap_or(0));
        }
        let mut emit = |insn: Insn| {
            code.push(Instruction { insn, placement: Default::default() }.encode());
            lines.push(0);
        };
        for l in carry_out.iter().filter(|l| l.written) {
            let out = OutputId(outputs.len() as u16);
            let decl = &p.tensors[l.t.0 as usize];
            outputs.push(OutputDecl {
                name: self.names[&l.t].clone(),
                dtype: decl.dtype,
                shape: decl.shape.clone(),
            });
            emit(Insn::Store { out, src: id[&l.t.0] });
        }
        for l in carry_out {
            emit(Insn::Free { t: id[&l.t.0] });
        }
        let in_range = |at: u32| range.contains(&(at as usize));
        let debug = DebugInfo {
            source: p.debug.source.clone(),
            lines: if p.debug.lines.is_empty() { Vec::new() } else { lines },
            labels: p
                .debug
                .labels
                .iter()
                .filter(|(_, at)| in_range(*at))
                .map(|(name, at)| (name.clone(), (*at as i64 + shift) as u32))
                .collect(),
            origins: origins_in(&p.debug.origins, &range, shift),
        };
        Some(format::Program {
            version: p.version,
            tier: p.tier,
            code,
            syms: p.syms.clone(),
            tensors,
            outputs,
            spirv: p.spirv.clone(),
            kernels: kernel_decls,
            debug,
            vocab: Vec::new(),
            data: p.data.clone(),
            digest: [0; 32],
        })
    }
}

/// The `.origin` entries that name instructions in `range`, moved by `shift`: the entry in force
/// at the range's start begins there.
fn origins_in(origins: &[(u32, String)], range: &Range<usize>, shift: i64) -> Vec<(u32, String)> {
    let start = range.start as u32;
    let mut out: Vec<(u32, String)> = Vec::new();
    if let Some((_, name)) = origins.iter().rev().find(|(at, _)| *at <= start) {
        out.push(((start as i64 + shift) as u32, name.clone()));
    }
    for (at, name) in origins.iter().filter(|(at, _)| *at > start && (*at as usize) < range.end) {
        out.push(((*at as i64 + shift) as u32, name.clone()));
    }
    out
}

/// One stage's part of the last run.
#[derive(Clone, Debug, PartialEq)]
pub struct StageStats {
    pub place: Place,
    /// The instructions of the whole program it ran.
    pub range: Range<usize>,
    /// Bytes it handed to the next stage (0 for the last).
    pub carried_bytes: u64,
    /// Its run's time, binding its inputs included (with micro-batches: the sum over the
    /// slices, its waits for the stage before left out).
    pub elapsed: Duration,
}

/// A program cut into stages over several executors (see the module docs).
pub struct PipelineSession {
    program: Program,
    stages: Vec<(Place, Stage, Session)>,
    /// The bound inputs, by declaration order.
    inputs: Vec<(String, Option<HostTensor>)>,
    outputs: Vec<(String, HostTensor)>,
    last: Vec<StageStats>,
    /// Slices of the batch each run is cut into (1: the whole batch at once).
    micro_batches: usize,
}

/// Why a stage of a micro-batched run stopped: its own error, or the stage before it stopped.
enum Stopped {
    Failed(Error),
    Upstream,
}

impl PipelineSession {
    /// One stage per place, cut where [`plan_cuts`] says (fewer places are used when the
    /// program has fewer places to cut).
    pub fn new(program: &Program, places: &[Place], config: &Config) -> Result<PipelineSession> {
        let program = Self::tiered(program, config)?;
        let cuts = plan_cuts(&program, places.len())?;
        Self::with_cuts(&program, &places[..places.len().min(cuts.len() + 1)], &cuts, config)
    }

    /// Stage `i` on `places[i]`, cut before each instruction in `cuts` (one fewer than places).
    pub fn with_cuts(
        program: &Program,
        places: &[Place],
        cuts: &[usize],
        config: &Config,
    ) -> Result<PipelineSession> {
        if places.len() != cuts.len() + 1 {
            return Err(Error::Pipeline(format!(
                "{} devices need {} cuts, {} were given",
                places.len(),
                places.len().saturating_sub(1),
                cuts.len()
            )));
        }
        let program = Self::tiered(program, config)?;
        let stages = cut_program(&program, cuts)?;
        let mut sessions = Vec::with_capacity(stages.len());
        for (stage, &place) in stages.into_iter().zip(places) {
            // The stages run one after the other: a CPU stage may use every core.
            let session = Session::new(&stage.program, &place_config(place, config, config.threads))
                .map_err(|e| Error::OnDevice { place: place.name(), source: Box::new(e) })?;
            sessions.push((place, stage, session));
        }
        let p = program.verified().program();
        let inputs = p
            .tensors
            .iter()
            .filter(|t| t.kind == TensorKind::Input)
            .map(|t| (t.name.clone(), None))
            .collect();
        Ok(PipelineSession {
            program,
            stages: sessions,
            inputs,
            outputs: Vec::new(),
            last: Vec::new(),
            micro_batches: 1,
        })
    }

    fn tiered(program: &Program, config: &Config) -> Result<Program> {
        match config.tier {
            Some(t) => program.with_tier(t),
            None => Ok(program.clone()),
        }
    }

    /// The program (with any tier override applied).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The stages, in the order they run, with the place of each.
    pub fn stages(&self) -> impl Iterator<Item = (Place, &Stage)> {
        self.stages.iter().map(|(place, stage, _)| (*place, stage))
    }

    /// Binds an input by name.
    pub fn set_input(&mut self, name: &str, tensor: impl IntoHostTensor) -> Result<()> {
        let tensor = tensor.into_host_tensor(name)?;
        let Some(slot) = self.inputs.iter_mut().find(|(n, _)| n == name) else {
            // The first stage words the unknown name as a single run would.
            return self.stages[0].2.set_input(name, tensor);
        };
        // Checked now (dtype, rank) as a single session would, by the first stage.
        self.stages[0].2.set_input(name, &tensor)?;
        slot.1 = Some(tensor);
        Ok(())
    }

    /// Cuts each run's batch into `n` slices (at most one a row) that flow through the stages
    /// one after another, so that every stage works at once on a different slice (1: the whole
    /// batch at once, the default). Needs a program whose inputs and outputs share a symbolic
    /// first axis, as [`crate::split`] does; in the strict tier the joined outputs are the bits
    /// of one run over the whole batch.
    pub fn set_micro_batches(&mut self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::Pipeline("micro-batches must be at least 1".into()));
        }
        if n > 1 {
            check_batch_axis(self.program.verified().program())?;
        }
        self.micro_batches = n;
        Ok(())
    }

    /// Runs the stages over the bound inputs: one after the other, or with micro-batches
    /// ([`PipelineSession::set_micro_batches`]) all at once on different slices of the batch.
    pub fn run(&mut self) -> Result<Vec<StageStats>> {
        self.outputs.clear();
        let p = self.program.verified().program();
        if let Some((name, _)) = self.inputs.iter().find(|(_, t)| t.is_none()) {
            return Err(unbound_input(&self.program, name));
        }
        if self.micro_batches > 1 {
            return self.run_micro_batches();
        }
        let mut stats = Vec::with_capacity(self.stages.len());
        let mut carried: Vec<(String, HostTensor)> = Vec::new();
        for (place, stage, session) in &mut self.stages {
            let began = Instant::now();
            let on_device = |e: Error| Error::OnDevice { place: place.name(), source: Box::new(e) };
            for (name, t) in self.inputs.iter().filter_map(|(n, t)| Some((n, t.as_ref()?))) {
                session.set_input(name, t).map_err(on_device)?;
            }
            for (name, t) in carried.drain(..) {
                session.set_input(&name, t).map_err(on_device)?;
            }
            session.run().map_err(on_device)?;
            for name in &stage.carried_out {
                carried.push((name.clone(), session.output(name).map_err(on_device)?.clone()));
            }
            let carried_bytes = carried.iter().map(|(_, t)| t.bytes().len() as u64).sum();
            stats.push(StageStats {
                place: *place,
                range: stage.range.clone(),
                carried_bytes,
                elapsed: began.elapsed(),
            });
        }
        // Each output from the stage that stores it (a cut never falls between two STOREs of one).
        for decl in &p.outputs {
            let from = self.stages.iter().rev().find_map(|(_, _, s)| s.output(&decl.name).ok());
            if let Some(t) = from {
                self.outputs.push((decl.name.clone(), t.clone()));
            }
        }
        self.last = stats.clone();
        Ok(stats)
    }

    /// [`PipelineSession::run`] with micro-batches: one thread a stage, each running the slices
    /// in order and handing each slice's carried tensors to the next stage's thread.
    fn run_micro_batches(&mut self) -> Result<Vec<StageStats>> {
        let bound: Vec<(&str, &HostTensor)> =
            self.inputs.iter().filter_map(|(n, t)| Some((n.as_str(), t.as_ref()?))).collect();
        let rows = batch_rows(&bound)?;
        let slices = self.micro_batches.min(rows).max(1);
        let sizes: Vec<usize> = (0..slices).map(|i| rows / slices + usize::from(i < rows % slices)).collect();
        let starts: Vec<usize> =
            sizes.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        type Carried = Vec<(String, HostTensor)>;
        type StageResult = std::result::Result<(Vec<Carried>, Duration, u64), Stopped>;
        let results: Vec<StageResult> = std::thread::scope(|scope| {
            let mut upstream: Option<std::sync::mpsc::Receiver<Carried>> = None;
            let mut handles = Vec::with_capacity(self.stages.len());
            let last = self.stages.len() - 1;
            for (s, (place, stage, session)) in self.stages.iter_mut().enumerate() {
                let (tx, rx) = std::sync::mpsc::channel::<Carried>();
                let from = std::mem::replace(&mut upstream, (s < last).then_some(rx));
                let to = (s < last).then_some(tx);
                let (bound, sizes, starts) = (&bound, &sizes, &starts);
                handles.push(scope.spawn(move || -> StageResult {
                    let failed = |e: Error| {
                        Stopped::Failed(Error::OnDevice { place: place.name(), source: Box::new(e) })
                    };
                    let (mut outs, mut busy, mut handed_bytes) = (Vec::new(), Duration::ZERO, 0u64);
                    for m in 0..sizes.len() {
                        let carried = match &from {
                            Some(rx) => rx.recv().map_err(|_| Stopped::Upstream)?,
                            None => Vec::new(),
                        };
                        let began = Instant::now();
                        for (name, t) in bound {
                            session.set_input(name, rows_of(t, starts[m], sizes[m])).map_err(failed)?;
                        }
                        for (name, t) in carried {
                            session.set_input(&name, t).map_err(failed)?;
                        }
                        session.run().map_err(failed)?;
                        let mut handed = Vec::with_capacity(stage.carried_out.len());
                        for name in &stage.carried_out {
                            handed.push((name.clone(), session.output(name).map_err(failed)?.clone()));
                        }
                        handed_bytes += handed.iter().map(|(_, t)| t.bytes().len() as u64).sum::<u64>();
                        outs.push(
                            session
                                .outputs()
                                .into_iter()
                                .filter(|(n, _)| !stage.carried_out.iter().any(|c| c == n))
                                .map(|(n, t)| (n.to_string(), t.clone()))
                                .collect(),
                        );
                        busy += began.elapsed();
                        if let Some(tx) = &to {
                            // The next stage stopped: its own error is the one to report.
                            if tx.send(handed).is_err() {
                                break;
                            }
                        }
                    }
                    Ok((outs, busy, handed_bytes))
                }));
            }
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        });
        let mut done = Vec::with_capacity(results.len());
        for r in results {
            match r {
                Ok(d) => done.push(d),
                Err(Stopped::Failed(e)) => return Err(e),
                Err(Stopped::Upstream) => {}
            }
        }
        // Every stage ran every slice (a stage stops only after one before it or after it failed).
        let decls = &self.program.verified().program().outputs;
        for decl in decls {
            let from = done.iter().rev().find(|(outs, _, _)| outs[0].iter().any(|(n, _)| n == &decl.name));
            if let Some((outs, _, _)) = from {
                let pieces: Vec<&HostTensor> = outs
                    .iter()
                    .map(|o| &o.iter().find(|(n, _)| n == &decl.name).expect("every slice has it").1)
                    .collect();
                self.outputs.push((decl.name.clone(), join_rows(&pieces)));
            }
        }
        let stats: Vec<StageStats> = self
            .stages
            .iter()
            .zip(&done)
            .map(|((place, stage, _), (_, busy, bytes))| StageStats {
                place: *place,
                range: stage.range.clone(),
                carried_bytes: *bytes,
                elapsed: *busy,
            })
            .collect();
        self.last = stats.clone();
        Ok(stats)
    }

    /// An output of the last run, by name.
    pub fn output(&self, name: &str) -> Result<&HostTensor> {
        output_named(&self.outputs, &self.program, name)
    }

    /// Every output of the last run, in declaration order.
    pub fn outputs(&self) -> Vec<(&str, &HostTensor)> {
        self.outputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
    }

    /// Each stage's place, instructions, carried bytes and time in the last run.
    pub fn last_run(&self) -> &[StageStats] {
        &self.last
    }
}
