//! Dataflow over the control-flow graph: which temporaries are allocated and which outputs are
//! definitely written at each program point.
//!
//! The allocated set at a point must be the same along every path into it (so it is fixed by
//! the first path that reaches the point, and any other is an error); the written outputs join
//! by intersection and are iterated to a fixpoint with a worklist (smallest index first, so the
//! first error reported does not depend on hashing or allocation order).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{Ctx, KernelInfo, VerifyError};
use crate::format::TensorKind;
use crate::isa::{Insn, Instruction, TensorId};

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
    alloc: BTreeMap<u16, usize>,
    /// For messages only: temporaries freed on the path that reached here, and by which FREE.
    freed: BTreeMap<u16, usize>,
    /// Outputs definitely written.
    outs: Vec<bool>,
    /// Allocated temporaries definitely written since their ALLOC. Reading any other would
    /// read whatever bytes the arena held before: not deterministic, so it is refused.
    init: BTreeSet<u16>,
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

pub fn analyze(cx: &Ctx, code: &[Instruction], kernels: &[KernelInfo]) -> Result<FlowFacts, VerifyError> {
    let f = Flow { cx, code, kernels };
    let n = code.len();
    let nout = cx.p.outputs.len();
    let mut states: Vec<Option<State>> = vec![None; n];
    let mut exits: BTreeSet<usize> = BTreeSet::new();

    if n == 0 {
        if let Some(o) = cx.p.outputs.first() {
            return Err(VerifyError::Program {
                message: format!("the program has no instructions, so output {} is never written", o.name),
            });
        }
        return Ok(FlowFacts {
            reachable: vec![],
            interference: vec![Vec::new(); cx.p.tensors.len()],
            alloc_order: f.order(&[]),
            first_alloc: vec![None; cx.p.tensors.len()],
        });
    }

    states[0] = Some(State {
        alloc: BTreeMap::new(),
        freed: BTreeMap::new(),
        outs: vec![false; nout],
        init: BTreeSet::new(),
        from: None,
    });
    let mut work: BTreeSet<usize> = BTreeSet::from([0]);
    while let Some(i) = work.pop_first() {
        let Some(st) = states.get(i).and_then(|s| s.as_ref()) else { continue };
        let ins = &code[i];
        let next = f.transfer(i, ins, st)?;
        for s in f.successors(i) {
            let j = match s {
                Succ::Exit => {
                    exits.insert(i);
                    continue;
                }
                Succ::To(j) => j,
            };
            match &mut states[j] {
                slot @ None => {
                    *slot = Some(State { from: Some(i), ..next.clone() });
                    work.insert(j);
                }
                Some(old) => {
                    if old.alloc.keys().ne(next.alloc.keys()) {
                        return Err(f.join_error(j, old, &next, i));
                    }
                    let mut changed = false;
                    for (a, b) in old.outs.iter_mut().zip(&next.outs) {
                        if *a && !*b {
                            *a = false;
                            changed = true;
                        }
                    }
                    let before = old.init.len();
                    old.init.retain(|t| next.init.contains(t));
                    changed |= old.init.len() != before;
                    if changed {
                        work.insert(j);
                    }
                }
            }
        }
    }

    // Exits: nothing may stay allocated, every output must be written.
    for &i in &exits {
        let Some(st) = states[i].as_ref() else { continue };
        let ins = &code[i];
        let end = if matches!(ins.insn, Insn::Halt) { st.clone() } else { f.transfer(i, ins, st)? };
        let how = if matches!(ins.insn, Insn::Halt) {
            "the program ends here"
        } else {
            "the program ends after this instruction (the end of the code)"
        };
        if let Some((&t, &site)) = end.alloc.iter().next() {
            return Err(f.err(
                i,
                format!(
                    "{how} with {} still allocated (leaked; allocated by {}); FREE it before the program ends",
                    f.cx.name(TensorId(t)),
                    f.at(site)
                ),
            ));
        }
        if let Some(o) = end.outs.iter().position(|w| !w) {
            let name = f.cx.p.outputs.get(o).map_or("?", |o| o.name.as_str());
            return Err(f.err(
                i,
                format!("{how}, but output {name} is not written on every path to this point; STORE {name} before it"),
            ));
        }
    }

    // Interference: temporaries allocated together at some reachable point (an ALLOC counts
    // its own tensor as allocated together with everything already allocated).
    let reachable: Vec<bool> = states.iter().map(|s| s.is_some()).collect();
    let mut sets: HashSet<Vec<u16>> = HashSet::new();
    let mut first_alloc: HashMap<u16, usize> = HashMap::new();
    for (i, st) in states.iter().enumerate() {
        let Some(st) = st else { continue };
        let mut live: Vec<u16> = st.alloc.keys().copied().collect();
        if let Insn::Alloc { t } = code[i].insn {
            first_alloc.entry(t.0).or_insert(i);
            if let Err(at) = live.binary_search(&t.0) {
                live.insert(at, t.0);
            }
        }
        if live.len() > 1 {
            sets.insert(live);
        }
    }
    let mut adj: Vec<BTreeSet<u16>> = vec![BTreeSet::new(); cx.p.tensors.len()];
    for set in &sets {
        for (k, &a) in set.iter().enumerate() {
            for &b in &set[k + 1..] {
                if let Some(s) = adj.get_mut(a as usize) {
                    s.insert(b);
                }
                if let Some(s) = adj.get_mut(b as usize) {
                    s.insert(a);
                }
            }
        }
    }
    let interference = adj.into_iter().map(|s| s.into_iter().map(TensorId).collect()).collect();
    let mut fa: Vec<(u16, usize)> = first_alloc.into_iter().collect();
    fa.sort();
    let mut firsts = vec![None; cx.p.tensors.len()];
    for &(t, i) in &fa {
        if let Some(slot) = firsts.get_mut(t as usize) {
            *slot = Some(i);
        }
    }
    Ok(FlowFacts { reachable, interference, alloc_order: f.order(&fa), first_alloc: firsts })
}

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

    fn transfer(&self, i: usize, ins: &Instruction, st: &State) -> Result<State, VerifyError> {
        let mut s = st.clone();
        s.from = Some(i);
        match ins.insn {
            Insn::Alloc { t } => {
                if let Some(&site) = st.alloc.get(&t.0) {
                    return Err(self.err(
                        i,
                        format!(
                            "{} is already allocated (by {}); FREE it before allocating it again",
                            self.cx.name(t),
                            self.at(site)
                        ),
                    ));
                }
                s.alloc.insert(t.0, i);
                s.freed.remove(&t.0);
                s.init.remove(&t.0);
            }
            Insn::Free { t } => {
                if !st.alloc.contains_key(&t.0) {
                    let name = self.cx.name(t);
                    return Err(self.err(
                        i,
                        match st.freed.get(&t.0) {
                            Some(&f) => format!("double free: {name} was already freed by {}", self.at(f)),
                            None => {
                                format!("FREE of {name}, which is not allocated here (FREE before ALLOC)")
                            }
                        },
                    ));
                }
                s.alloc.remove(&t.0);
                s.freed.insert(t.0, i);
                s.init.remove(&t.0);
            }
            Insn::Kernel { k } => {
                let decl = self.cx.p.kernels.get(k.0 as usize);
                let info = self.kernels.get(k.0 as usize);
                if let (Some(decl), Some(info)) = (decl, info) {
                    for (b, (&t, &w)) in decl.bindings.iter().zip(&info.written).enumerate() {
                        let verb = format!("binding {b} {}", if w { "writes" } else { "reads" });
                        self.need_alloc(i, st, t, &verb)?;
                        if w {
                            s.init.insert(t.0);
                        } else {
                            self.need_init(i, st, t, &verb)?;
                        }
                    }
                }
            }
            ref insn => {
                for t in insn.reads() {
                    self.need_alloc(i, st, t, "reads")?;
                    self.need_init(i, st, t, "reads")?;
                }
                if let Some(t) = insn.updates() {
                    // A partial write keeps the rest of the tensor: it must hold data already.
                    self.need_alloc(i, st, t, "writes into")?;
                    self.need_init(i, st, t, "writes into part of")?;
                }
                if let Some(t) = insn.writes() {
                    self.need_alloc(i, st, t, "writes")?;
                    if self.is_temp(t) {
                        s.init.insert(t.0);
                    }
                }
                if let Insn::Store { out, .. } = *insn {
                    if let Some(w) = s.outs.get_mut(out.0 as usize) {
                        *w = true;
                    }
                }
            }
        }
        Ok(s)
    }

    fn join_error(&self, j: usize, old: &State, new: &State, from: usize) -> VerifyError {
        let diff = old
            .alloc
            .keys()
            .filter(|t| !new.alloc.contains_key(t))
            .map(|t| (*t, true))
            .chain(new.alloc.keys().filter(|t| !old.alloc.contains_key(t)).map(|t| (*t, false)))
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
