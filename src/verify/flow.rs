//! Dataflow over the control-flow graph: which temporaries are allocated and which outputs are
//! definitely written at each program point.
//!
//! The allocated set at a point must be the same along every path into it (so it is fixed by
//! the first path that reaches the point, and any other is an error); the written outputs join
//! by intersection and are iterated to a fixpoint with a worklist (smallest index first, so the
//! errors reported do not depend on hashing or allocation order).
//!
//! Cost: states are kept only at the entries of basic blocks, and they are persistent maps
//! (`imbl`), so a state is copied in O(1) and an ALLOC or FREE changes O(log L) of it (L: the
//! temporaries allocated). Inside a block one state is updated in place. A program of N
//! instructions is analysed in O(N log L) time and memory for straight-line code, whatever
//! number of temporaries stay allocated across it (the earlier per-instruction copies of the
//! whole state took O(N * L)); each join compares the allocated sets, which is O(1) when they
//! share their storage and O(L) otherwise. The interference graph is built from the ALLOCs
//! alone (a temporary interferes with what is allocated when it is allocated), so its cost is
//! its size, capped by [`MAX_INTERFERENCE_PAIRS`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use imbl::{OrdMap, OrdSet};

use super::{Ctx, KernelInfo, Sink, VerifyError};
use crate::format::TensorKind;
use crate::isa::{Insn, Instruction, TensorId};

/// The most (temporary, temporary) pairs the ALLOCs of a program may put in the interference
/// graph (each ALLOC adds one pair per temporary already allocated). It bounds the planner's
/// memory (8 bytes a pair) and time; a program that keeps 5,000 temporaries allocated at once
/// stays under it, and real tensor programs keep a few dozen.
pub const MAX_INTERFERENCE_PAIRS: usize = 1 << 24;

pub struct FlowFacts {
    pub reachable: Vec<bool>,
    pub interference: Vec<Vec<TensorId>>,
    pub alloc_order: Vec<TensorId>,
    /// Per tensor id: the first reachable ALLOC of it, if any.
    pub first_alloc: Vec<Option<usize>>,
}

#[derive(Clone, Debug)]
struct State {
    /// Allocated temporaries and the ALLOC that allocated each.
    alloc: OrdMap<u16, usize>,
    /// For messages only: temporaries freed on the path that reached here, and by which FREE.
    freed: OrdMap<u16, usize>,
    /// Outputs definitely written (by id).
    outs: OrdSet<u16>,
    /// Allocated temporaries definitely written since their ALLOC. Reading any other would
    /// read whatever bytes the arena held before: not deterministic, so it is refused.
    init: OrdSet<u16>,
    /// The instruction this state first arrived from (None: the program start).
    from: Option<usize>,
}

#[derive(Clone, Copy)]
enum Succ {
    To(usize),
    /// The program ends after this instruction (HALT, or the end of the code).
    Exit,
}

struct Flow<'a, 'b> {
    cx: &'a Ctx<'b>,
    code: &'a [Instruction],
    kernels: &'a [KernelInfo],
}

/// Whether two states allocate the same temporaries (the ALLOC sites may differ).
fn same_alloc(a: &State, b: &State) -> bool {
    a.alloc.ptr_eq(&b.alloc) || (a.alloc.len() == b.alloc.len() && a.alloc.keys().eq(b.alloc.keys()))
}

/// Narrows `old` to what `new` also holds; whether it changed.
fn intersect(old: &mut OrdSet<u16>, new: &OrdSet<u16>) -> bool {
    if old.ptr_eq(new) || old.is_subset(new) {
        return false;
    }
    *old = old.clone().intersection(new.clone());
    true
}

/// Runs the dataflow analysis. Errors go to `sink` (at most one per instruction from its own
/// checks, one per join point, and the leak and unwritten-output errors of each exit); the
/// facts come back only when no error was found.
pub fn analyze(cx: &Ctx, code: &[Instruction], kernels: &[KernelInfo], sink: &mut Sink) -> Option<FlowFacts> {
    let f = Flow { cx, code, kernels };
    let n = code.len();

    if n == 0 {
        if let Some(o) = cx.p.outputs.first() {
            sink.push(VerifyError::Program {
                message: format!("the program has no instructions, so output {} is never written", o.name),
            });
            return None;
        }
        return Some(FlowFacts {
            reachable: vec![],
            interference: vec![Vec::new(); cx.p.tensors.len()],
            alloc_order: f.order(&[]),
            first_alloc: vec![None; cx.p.tensors.len()],
        });
    }
    // A jump past the end was reported by the instruction checks; without a valid graph there
    // is nothing more to analyse.
    if (0..n).any(|i| f.successors(i).iter().any(|s| matches!(s, Succ::To(j) if *j >= n))) {
        return None;
    }

    // Basic blocks: a block starts at 0, at every jump target and after every jump or HALT.
    let mut leader = vec![false; n];
    leader[0] = true;
    for (i, ins) in code.iter().enumerate() {
        if let Insn::Jmp { target } | Insn::Jz { target, .. } | Insn::Jnz { target, .. } = ins.insn {
            leader[target.0 as usize] = true;
        }
        if matches!(ins.insn, Insn::Jmp { .. } | Insn::Jz { .. } | Insn::Jnz { .. } | Insn::Halt) && i + 1 < n
        {
            leader[i + 1] = true;
        }
    }
    // Per leader: the index one past the block's last instruction.
    let mut block_end = vec![0usize; n];
    let mut end = n;
    for i in (0..n).rev() {
        if leader[i] {
            block_end[i] = end;
            end = i;
        }
    }

    let mut entry: Vec<Option<Box<State>>> = (0..n).map(|_| None).collect();
    entry[0] = Some(Box::new(State {
        alloc: OrdMap::new(),
        freed: OrdMap::new(),
        outs: OrdSet::new(),
        init: OrdSet::new(),
        from: None,
    }));
    // Per exit instruction: the state the program ends in there (re-set on every visit, so the
    // fixpoint's).
    let mut exits: BTreeMap<usize, State> = BTreeMap::new();
    // Instructions and join points already reported (a block is revisited until the fixpoint).
    let mut reported: HashSet<usize> = HashSet::new();
    let mut join_reported: HashSet<usize> = HashSet::new();

    let mut work: BTreeSet<usize> = BTreeSet::from([0]);
    while let Some(b) = work.pop_first() {
        if sink.is_full() {
            return None;
        }
        let Some(start) = entry[b].as_deref() else { continue };
        let mut st = start.clone();
        let last = block_end[b] - 1;
        for (i, ins) in code.iter().enumerate().take(last + 1).skip(b) {
            if matches!(ins.insn, Insn::Halt) {
                exits.insert(i, st.clone());
            }
            if let Some(e) = f.step(i, ins, &mut st) {
                if reported.insert(i) {
                    sink.push(e);
                }
            }
            st.from = Some(i);
        }
        for s in f.successors(last) {
            let j = match s {
                Succ::Exit => {
                    if !matches!(code[last].insn, Insn::Halt) {
                        exits.insert(last, st.clone());
                    }
                    continue;
                }
                Succ::To(j) => j,
            };
            match &mut entry[j] {
                slot @ None => {
                    *slot = Some(Box::new(State { from: Some(last), ..st.clone() }));
                    work.insert(j);
                }
                Some(old) => {
                    let mut changed = false;
                    if !same_alloc(old, &st) {
                        if join_reported.insert(j) {
                            sink.push(f.join_error(j, old, &st, last));
                        }
                        // Go on as if both paths' temporaries were allocated here, so what
                        // follows is not also reported as a use of a temporary not allocated.
                        let before = old.alloc.len();
                        old.alloc = old.alloc.clone().union(st.alloc.clone());
                        changed = old.alloc.len() != before;
                    }
                    changed |= intersect(&mut old.outs, &st.outs) | intersect(&mut old.init, &st.init);
                    if changed {
                        work.insert(j);
                    }
                }
            }
        }
    }

    // Exits: nothing may stay allocated, every output must be written.
    let nout = cx.p.outputs.len();
    for (&i, end) in &exits {
        if sink.is_full() {
            return None;
        }
        let how = if matches!(code[i].insn, Insn::Halt) {
            "the program ends here"
        } else {
            "the program ends after this instruction (the end of the code)"
        };
        if let Some((&t, &site)) = end.alloc.iter().next() {
            let (more, them) = match end.alloc.len() - 1 {
                0 => (String::new(), "it"),
                1 => (" and 1 more temporary".to_string(), "them"),
                k => (format!(" and {k} more temporaries"), "them"),
            };
            sink.push(f.err(
                i,
                format!(
                    "{how} with {} still allocated (leaked; allocated by {}){more}; FREE {them} before the program ends",
                    f.cx.name(TensorId(t)),
                    f.at(site)
                ),
            ));
        }
        if end.outs.len() < nout {
            // The first output id the set lacks: its ids are sorted and distinct.
            let o = end
                .outs
                .iter()
                .enumerate()
                .find(|&(k, &id)| k != id as usize)
                .map_or(end.outs.len(), |(k, _)| k);
            let name = f.cx.p.outputs.get(o).map_or("?", |o| o.name.as_str());
            sink.push(f.err(
                i,
                format!("{how}, but output {name} is not written on every path to this point; STORE {name} before it"),
            ));
        }
    }
    if !sink.is_empty() {
        return None;
    }

    let reachable: Vec<bool> = {
        let mut r = vec![false; n];
        for b in (0..n).filter(|&b| entry[b].is_some()) {
            r[b..block_end[b]].iter_mut().for_each(|x| *x = true);
        }
        r
    };

    // Interference: a temporary interferes with everything allocated when it is allocated.
    // (Two temporaries allocated together at a point were, on the path there, allocated one
    // after the other, and the later ALLOC saw the earlier one.)
    // The temporaries allocated at each ALLOC, walked once per pass: first to count the pairs, so
    // a program over the limit is refused before anything is built, then to build them.
    let walk_allocs = |on_alloc: &mut OnAlloc<'_>| {
        for b in 0..n {
            let Some(start) = entry[b].as_deref() else { continue };
            let mut live = start.alloc.clone();
            for (i, ins) in code.iter().enumerate().take(block_end[b]).skip(b) {
                match ins.insn {
                    Insn::Alloc { t } => {
                        if !on_alloc(i, t, &live) {
                            return false;
                        }
                        live.insert(t.0, i);
                    }
                    Insn::Free { t } => {
                        live.remove(&t.0);
                    }
                    _ => {}
                }
            }
        }
        true
    };
    let mut pair_count = 0usize;
    let within_limit = walk_allocs(&mut |i, t, live| {
        pair_count += live.len();
        if pair_count <= MAX_INTERFERENCE_PAIRS {
            return true;
        }
        sink.push(f.err(
            i,
            format!(
                "allocating {} here, with {} temporaries already allocated, makes more than \
                 {MAX_INTERFERENCE_PAIRS} pairs of temporaries allocated at the same time in the \
                 program (the memory planner's limit); free temporaries sooner",
                f.cx.name(t),
                live.len()
            ),
        ));
        false
    });
    if !within_limit {
        return None;
    }
    // Adjacency lists are filled directly and put in order one list at a time: one sort of all
    // 2 * pairs entries took most of the time of verifying a program near the limit (and far
    // longer under a sanitizer). With ids given in allocation order, as the assembler gives
    // them, every list comes out ascending and without repeats, and is only checked.
    let mut interference: Vec<Vec<TensorId>> = vec![Vec::new(); cx.p.tensors.len()];
    let mut first_alloc: HashMap<u16, usize> = HashMap::new();
    walk_allocs(&mut |i, t, live| {
        first_alloc.entry(t.0).and_modify(|at| *at = (*at).min(i)).or_insert(i);
        for &u in live.keys() {
            if let Some(v) = interference.get_mut(t.0 as usize) {
                v.push(TensorId(u));
            }
            if let Some(v) = interference.get_mut(u as usize) {
                v.push(t);
            }
        }
        true
    });
    for list in &mut interference {
        if !list.windows(2).all(|w| w[0].0 < w[1].0) {
            list.sort_unstable_by_key(|t| t.0);
            list.dedup();
        }
    }
    let mut fa: Vec<(u16, usize)> = first_alloc.into_iter().collect();
    fa.sort();
    let mut firsts = vec![None; cx.p.tensors.len()];
    for &(t, i) in &fa {
        if let Some(slot) = firsts.get_mut(t as usize) {
            *slot = Some(i);
        }
    }
    Some(FlowFacts { reachable, interference, alloc_order: f.order(&fa), first_alloc: firsts })
}

/// Called at each ALLOC with its index, its temporary and the temporaries allocated there (by
/// first ALLOC index); false stops the walk.
type OnAlloc<'a> = dyn FnMut(usize, TensorId, &OrdMap<u16, usize>) -> bool + 'a;

impl Flow<'_, '_> {
    fn mnemonic(&self, i: usize) -> Option<&'static str> {
        self.code.get(i).map(|c| c.insn.info().mnemonic)
    }
    fn at(&self, i: usize) -> String {
        self.cx.insn_ref(i, self.mnemonic(i))
    }
    fn err(&self, i: usize, message: String) -> VerifyError {
        self.cx.insn_err(i, self.mnemonic(i), message)
    }

    /// Temporaries in planning order: by first reachable ALLOC, ties (never allocated) by id.
    fn order(&self, first_alloc: &[(u16, usize)]) -> Vec<TensorId> {
        let firsts: HashMap<u16, usize> = first_alloc.iter().copied().collect();
        let mut temps: Vec<(usize, u16)> = self
            .cx
            .p
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind == TensorKind::Temp)
            .map(|(i, _)| (firsts.get(&(i as u16)).copied().unwrap_or(usize::MAX), i as u16))
            .collect();
        temps.sort();
        temps.into_iter().map(|(_, t)| TensorId(t)).collect()
    }

    fn successors(&self, i: usize) -> Vec<Succ> {
        let next = if i + 1 < self.code.len() { Succ::To(i + 1) } else { Succ::Exit };
        match self.code[i].insn {
            Insn::Halt => vec![Succ::Exit],
            Insn::Jmp { target } => vec![Succ::To(target.0 as usize)],
            Insn::Jz { target, .. } | Insn::Jnz { target, .. } => vec![Succ::To(target.0 as usize), next],
            _ => vec![next],
        }
    }

    fn is_temp(&self, t: TensorId) -> bool {
        self.cx.decl(t).is_some_and(|d| d.kind == TensorKind::Temp)
    }

    fn need_alloc(&self, i: usize, st: &State, t: TensorId, verb: &str) -> Result<(), VerifyError> {
        if !self.is_temp(t) || st.alloc.contains_key(&t.0) {
            return Ok(());
        }
        let name = self.cx.name(t);
        Err(self.err(
            i,
            match st.freed.get(&t.0) {
                Some(&f) => format!("{verb} {name} after it was freed (use after FREE, by {})", self.at(f)),
                None => format!("{verb} {name} before it is allocated (use before ALLOC {name})"),
            },
        ))
    }

    fn need_init(&self, i: usize, st: &State, t: TensorId, verb: &str) -> Result<(), VerifyError> {
        if !self.is_temp(t) || st.init.contains(&t.0) {
            return Ok(());
        }
        let name = self.cx.name(t);
        let site = st.alloc.get(&t.0).map_or(String::new(), |&a| format!(" (allocated by {})", self.at(a)));
        Err(self.err(
            i,
            format!(
                "{verb} {name} before anything wrote it{site} on some path here; \
                 its bytes would be whatever the arena held, so write it first (FILL, COPY, LOAD, ...)"
            ),
        ))
    }

    /// Applies instruction `i` to `st` in place; returns its first error, if any. Every check
    /// sees the state before the instruction (its writes land after its reads are checked).
    /// After an error the state is what the instruction would leave if it were valid, so the
    /// analysis goes on to find independent errors; a read of an unwritten temporary marks it
    /// written, so that one mistake is reported once and not at every later read.
    fn step(&self, i: usize, ins: &Instruction, st: &mut State) -> Option<VerifyError> {
        let mut first: Option<VerifyError> = None;
        let mut fail = |r: Result<(), VerifyError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        match ins.insn {
            // ALLOC and FREE of anything but a temporary were refused by the instruction
            // checks; tracking them here would only report the same mistake again.
            Insn::Alloc { t } | Insn::Free { t } if !self.is_temp(t) => {}
            Insn::Alloc { t } => {
                if let Some(&site) = st.alloc.get(&t.0) {
                    fail(Err(self.err(
                        i,
                        format!(
                            "{} is already allocated (by {}); FREE it before allocating it again",
                            self.cx.name(t),
                            self.at(site)
                        ),
                    )));
                } else {
                    st.alloc.insert(t.0, i);
                    st.freed.remove(&t.0);
                    st.init.remove(&t.0);
                }
            }
            Insn::Free { t } => {
                if !st.alloc.contains_key(&t.0) {
                    let name = self.cx.name(t);
                    fail(Err(self.err(
                        i,
                        match st.freed.get(&t.0) {
                            Some(&f) => format!("double free: {name} was already freed by {}", self.at(f)),
                            None => {
                                format!("FREE of {name}, which is not allocated here (FREE before ALLOC)")
                            }
                        },
                    )));
                } else {
                    st.alloc.remove(&t.0);
                    st.freed.insert(t.0, i);
                    st.init.remove(&t.0);
                }
            }
            Insn::Kernel { k } => {
                let decl = self.cx.p.kernels.get(k.0 as usize);
                let info = self.kernels.get(k.0 as usize);
                if let (Some(decl), Some(info)) = (decl, info) {
                    let mut written = Vec::new();
                    let mut unwritten_reads = Vec::new();
                    for (b, (&t, &w)) in decl.bindings.iter().zip(&info.written).enumerate() {
                        let verb = format!("binding {b} {}", if w { "writes" } else { "reads" });
                        fail(self.need_alloc(i, st, t, &verb));
                        if w {
                            written.push(t.0);
                        } else if let Err(e) = self.need_init(i, st, t, &verb) {
                            fail(Err(e));
                            unwritten_reads.push(t.0);
                        }
                    }
                    for t in written.into_iter().chain(unwritten_reads) {
                        st.init.insert(t);
                    }
                }
            }
            ref insn => {
                let mut unwritten_reads = Vec::new();
                for t in insn.reads() {
                    fail(self.need_alloc(i, st, t, "reads"));
                    if let Err(e) = self.need_init(i, st, t, "reads") {
                        fail(Err(e));
                        unwritten_reads.push(t.0);
                    }
                }
                if let Some(t) = insn.updates() {
                    // A partial write keeps the rest of the tensor: it must hold data already.
                    fail(self.need_alloc(i, st, t, "writes into"));
                    fail(self.need_init(i, st, t, "writes into part of"));
                }
                if let Some(t) = insn.writes() {
                    fail(self.need_alloc(i, st, t, "writes"));
                    if self.is_temp(t) {
                        st.init.insert(t.0);
                    }
                }
                for t in unwritten_reads {
                    if st.alloc.contains_key(&t) {
                        st.init.insert(t);
                    }
                }
                if let Insn::Store { out, .. } = *insn {
                    if (out.0 as usize) < self.cx.p.outputs.len() {
                        st.outs.insert(out.0);
                    }
                }
            }
        }
        first
    }

    fn join_error(&self, j: usize, old: &State, new: &State, from: usize) -> VerifyError {
        let diff = old
            .alloc
            .keys()
            .filter(|t| !new.alloc.contains_key(*t))
            .map(|t| (*t, true))
            .chain(new.alloc.keys().filter(|t| !old.alloc.contains_key(*t)).map(|t| (*t, false)))
            .min();
        let old_from = match old.from {
            Some(p) => format!("coming from {}", self.at(p)),
            None => "at the program start".to_string(),
        };
        let new_from = format!("coming from {}", self.at(from));
        let message = match diff {
            Some((t, in_old)) => {
                let (yes, no) = if in_old { (old_from, new_from) } else { (new_from, old_from) };
                format!(
                    "control flow joins here with different tensors allocated: {} is allocated {yes} but not {no}; \
                     every path into a point must allocate the same temporaries",
                    self.cx.name(TensorId(t))
                )
            }
            None => "control flow joins here with different tensors allocated".to_string(),
        };
        self.err(j, message)
    }
}
