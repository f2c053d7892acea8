//! Per-instruction checks: decoding, ids, jump targets, tiers, placement, dtypes and shapes.
//! These run on every instruction, reachable or not.

use super::shape::{broadcast, broadcasts_to, count, norm_axis};
use super::{Ctx, Sink};
use crate::format::{ConstData, TensorDecl, TensorKind};
use crate::isa::{DType, Dim, Insn, Instruction, Opcode, Operand, Placement, TensorId, Tier};

type R = Result<(), String>;

/// Decodes and checks every instruction, reporting each failing one to `sink` (one error per
/// instruction: its checks depend on each other, but instructions do not). An instruction
/// that decodes is returned even when a check failed, so the dataflow analysis can still look
/// for errors of its own; one that does not decode is `None`.
pub fn decode_and_check(cx: &Ctx, sink: &mut Sink) -> Vec<Option<Instruction>> {
    let mut out = Vec::with_capacity(cx.p.code.len());
    for (i, bytes) in cx.p.code.iter().enumerate() {
        if sink.is_full() {
            break;
        }
        match Instruction::decode(bytes) {
            Ok(ins) => {
                let c = Check { cx };
                if let Err(msg) = c.check(&ins) {
                    sink.push(cx.insn_err(i, Some(ins.insn.info().mnemonic), msg));
                }
                out.push(Some(ins));
            }
            Err(e) => {
                let m = Opcode::from_u8(bytes[0]).map(|o| o.info().mnemonic);
                sink.push(cx.insn_err(i, m, format!("cannot decode the instruction: {e}")));
                out.push(None);
            }
        }
    }
    out
}

struct Check<'a, 'b> {
    cx: &'a Ctx<'b>,
}

impl Check<'_, '_> {
    fn decl(&self, t: TensorId) -> Result<&TensorDecl, String> {
        self.cx.decl(t).ok_or_else(|| format!("tensor id {} is out of range", t.0))
    }
    fn dtype(&self, t: TensorId) -> Result<DType, String> {
        Ok(self.decl(t)?.dtype)
    }
    fn shape(&self, t: TensorId) -> Result<&[Dim], String> {
        Ok(&self.decl(t)?.shape)
    }
    /// `dst %y (f32[B, 10])`.
    fn role(&self, role: &str, t: TensorId) -> String {
        format!("{role} {} ({})", self.cx.name(t), self.cx.ty(t))
    }
    fn st(&self, s: &[Dim]) -> String {
        self.cx.shape(s)
    }

    fn same_dtype(&self, ts: &[(&str, TensorId)]) -> R {
        let Some(&(r0, t0)) = ts.first() else { return Ok(()) };
        let d0 = self.dtype(t0)?;
        for &(r, t) in &ts[1..] {
            let d = self.dtype(t)?;
            if d != d0 {
                return Err(format!(
                    "dtype mismatch: {} is {d0} but {} is {d}; the operands must share one dtype",
                    self.role(r0, t0),
                    self.role(r, t)
                ));
            }
        }
        Ok(())
    }

    fn same_shape(&self, (r0, t0): (&str, TensorId), (r1, t1): (&str, TensorId)) -> R {
        if self.shape(t0)? != self.shape(t1)? {
            return Err(format!(
                "shape mismatch: {} and {} must have the same shape",
                self.role(r0, t0),
                self.role(r1, t1)
            ));
        }
        Ok(())
    }

    fn expect_shape(&self, (r, t): (&str, TensorId), want: &[Dim], what: &str) -> R {
        if self.shape(t)? != want {
            return Err(format!("{} should be {} ({what})", self.role(r, t), self.st(want)));
        }
        Ok(())
    }

    fn min_rank(&self, (r, t): (&str, TensorId), n: usize) -> R {
        if self.shape(t)?.len() < n {
            return Err(format!("{} must have rank {n} or more", self.role(r, t)));
        }
        Ok(())
    }

    fn axis(&self, (r, t): (&str, TensorId), axis: i8) -> Result<usize, String> {
        let rank = self.shape(t)?.len();
        norm_axis(axis, rank).ok_or_else(|| {
            format!("axis {axis} is out of range for {}, which has rank {rank}", self.role(r, t))
        })
    }

    fn check(&self, ins: &Instruction) -> R {
        let p = self.cx.p;
        let insn = &ins.insn;
        let info = insn.info();
        let m = info.mnemonic;

        // Ids and jump targets.
        for (op, oi) in insn.operands().iter().zip(info.operands) {
            match *op {
                Operand::Tensor(t) | Operand::TensorOpt(Some(t)) if self.cx.decl(t).is_none() => {
                    return Err(format!(
                        "operand `{}` is tensor id {}, but the program has only {} tensors",
                        oi.name,
                        t.0,
                        p.tensors.len()
                    ));
                }
                Operand::Output(o) if o.0 as usize >= p.outputs.len() => {
                    return Err(format!(
                        "output id {} is out of range (the program declares {} outputs)",
                        o.0,
                        p.outputs.len()
                    ));
                }
                Operand::Kernel(k) if k.0 as usize >= p.kernels.len() => {
                    return Err(format!(
                        "kernel id {} is out of range (the program declares {} kernels)",
                        k.0,
                        p.kernels.len()
                    ));
                }
                Operand::Label(target) if target.0 as usize >= p.code.len() => {
                    return Err(format!(
                        "jump target {} is past the end of the code ({} instructions; targets must be 0..{})",
                        target.0,
                        p.code.len(),
                        p.code.len().saturating_sub(1)
                    ));
                }
                _ => {}
            }
        }

        // Block-quantized constants are read by the two instructions that have kernels for them.
        for t in insn.reads() {
            let Some(TensorDecl { kind: TensorKind::Const(ConstData::Blocks { format, .. }), shape, .. }) =
                self.cx.decl(t)
            else {
                continue;
            };
            let allowed = match *insn {
                Insn::Matmul { b, tb, a, bias, .. } => {
                    b == t && tb && a != t && bias != Some(t) && shape.len() == 2
                }
                Insn::Gather { table, indices, .. } => table == t && indices != t && shape.len() == 2,
                _ => false,
            };
            if !allowed {
                return Err(format!(
                    "{} holds {format} blocks, which only MATMUL (as b, [N, K] with `tb`) and GATHER (as the \
                     table, [rows, K]) can read; declare it f32 to use it here",
                    self.role("constant", t)
                ));
            }
        }

        // Tier and placement.
        if info.tier == Tier::Fast && p.tier == Tier::Strict {
            if insn.opcode() == Opcode::Kernel {
                return Err("KERNEL runs user SPIR-V, which is fast tier only (its results are reproducible only on \
                            one device and driver), but this program is strict tier; declare `.tier fast` to use it"
                    .into());
            }
            return Err(format!(
                "{m} is fast tier only, but this program is strict tier; declare `.tier fast` to use it"
            ));
        }
        if insn.opcode() == Opcode::Kernel && ins.placement == Placement::Cpu {
            return Err(
                "KERNEL runs only on the Vulkan executor and cannot be placed `@cpu`; remove `@cpu`".into()
            );
        }

        // Writes go to temporaries only; ALLOC and FREE take temporaries.
        match *insn {
            Insn::Alloc { t } | Insn::Free { t } => {
                if self.decl(t)?.kind != TensorKind::Temp {
                    return Err(format!(
                        "{} is {}; {m} takes only temporaries (declared with .tensor)",
                        self.cx.name(t),
                        self.cx.kind_word(t)
                    ));
                }
            }
            _ => {
                if let Some(w) = insn.writes() {
                    if self.decl(w)?.kind != TensorKind::Temp {
                        return Err(format!(
                            "{m} writes {}, which is {}; only temporaries can be written",
                            self.cx.name(w),
                            self.cx.kind_word(w)
                        ));
                    }
                }
            }
        }

        // Dtype class of every tensor operand, or the one dtype the ISA fixes for it.
        for (op, oi) in insn.operands().iter().zip(info.operands) {
            if let Operand::Tensor(t) | Operand::TensorOpt(Some(t)) = *op {
                let d = self.dtype(t)?;
                if let Some(want) = oi.dtype {
                    if d != want {
                        return Err(format!(
                            "{m}'s {} is always {want}, but {} is {d}",
                            oi.name,
                            self.role(oi.name, t)
                        ));
                    }
                } else if !info.dtypes.admits(d) {
                    let class = match info.dtypes.name() {
                        "float" => "float (f32, f16, bf16)",
                        "numeric" => "numeric (f32, f16, bf16, i32)",
                        other => other,
                    };
                    return Err(format!("{m} takes {class} tensors, but {} is {d}", self.role(oi.name, t)));
                }
            }
        }

        self.rules(insn)
    }

    /// Per-opcode dtype and shape rules, following the docs in opcodes/isa.toml.
    fn rules(&self, insn: &Insn) -> R {
        let p = self.cx.p;
        match *insn {
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
            | Insn::GpuSync
            | Insn::Alloc { .. }
            | Insn::Free { .. }
            | Insn::Kernel { .. } => Ok(()),

            Insn::Load { dst, src, index, count } => {
                if index.is_none() && count != 1 {
                    return Err(format!(
                        "count={count} needs an index register (index=rN) to pick one of the {count} constants"
                    ));
                }
                if count == 0 {
                    return Err("count=0 selects no constant; count must be at least 1".into());
                }
                let last = src.0 as usize + count as usize - 1;
                if last >= p.tensors.len() {
                    return Err(format!(
                        "index=r.., count={count} selects tensors {} to {last} of the table starting at {}, but the \
                         program has only {} tensors",
                        src.0,
                        self.cx.name(src),
                        p.tensors.len()
                    ));
                }
                let d = self.decl(dst)?;
                for k in 0..count as usize {
                    let t = TensorId((src.0 as usize + k) as u16);
                    let c = self.decl(t)?;
                    let which =
                        if count == 1 { String::new() } else { format!(" (constant {k} of {count})") };
                    if !matches!(c.kind, TensorKind::Const(_)) {
                        return Err(format!(
                            "LOAD copies from constants, but {}{which} is {}",
                            self.cx.name(t),
                            self.cx.kind_word(t)
                        ));
                    }
                    if c.dtype != d.dtype || c.shape != d.shape {
                        return Err(format!(
                            "{}{which} is {} but dst {} is {}; every loaded constant must have dst's dtype and shape",
                            self.cx.name(t),
                            self.cx.ty(t),
                            self.cx.name(dst),
                            self.cx.ty(dst)
                        ));
                    }
                }
                Ok(())
            }

            Insn::Store { out, src } => {
                let o = p.outputs.get(out.0 as usize).ok_or("output id out of range")?;
                let s = self.decl(src)?;
                if s.dtype != o.dtype || s.shape != o.shape {
                    return Err(format!(
                        "output {} is declared {}{}, but src {} is {}",
                        o.name,
                        o.dtype,
                        self.st(&o.shape),
                        self.cx.name(src),
                        self.cx.ty(src)
                    ));
                }
                Ok(())
            }

            Insn::Copy { dst, src } => {
                self.same_dtype(&[("dst", dst), ("src", src)])?;
                self.same_shape(("dst", dst), ("src", src))
            }

            Insn::Reshape { dst, src } => {
                self.same_dtype(&[("dst", dst), ("src", src)])?;
                let (a, b) = (count(self.shape(dst)?), count(self.shape(src)?));
                if a != b {
                    return Err(format!(
                        "element counts differ: {} has {} elements but {} has {}",
                        self.role("dst", dst),
                        self.count_text(self.shape(dst)?),
                        self.role("src", src),
                        self.count_text(self.shape(src)?)
                    ));
                }
                Ok(())
            }

            Insn::Slice { dst, src, axis, start } => {
                self.same_dtype(&[("dst", dst), ("src", src)])?;
                let (ds, ss) = (self.shape(dst)?, self.shape(src)?);
                if ds.len() != ss.len() {
                    return Err(format!(
                        "rank mismatch: {} and {} must have the same rank",
                        self.role("dst", dst),
                        self.role("src", src)
                    ));
                }
                let ax = self.axis(("src", src), axis)?;
                for (k, (x, y)) in ds.iter().zip(ss).enumerate() {
                    if k != ax && x != y {
                        return Err(format!(
                            "{} and {} differ on axis {k} ({} vs {}); only the sliced axis {ax} may differ",
                            self.role("dst", dst),
                            self.role("src", src),
                            self.cx.dim(*x),
                            self.cx.dim(*y)
                        ));
                    }
                }
                let (len, size) = (ds.get(ax).copied(), ss.get(ax).copied());
                let ok = match (len, size) {
                    (Some(Dim::Const(l)), Some(Dim::Const(n))) => (start as u64) + (l as u64) <= n as u64,
                    // A symbolic length from a fixed-size axis (the first T rows of a position
                    // table): the start must be inside the axis; start + len <= n depends on the
                    // binding, and the VM checks it before the copy (a clean run-time error).
                    (Some(Dim::Sym(_)), Some(Dim::Const(n))) => start <= n,
                    (Some(l), Some(n)) => start == 0 && l == n,
                    _ => false,
                };
                if !ok {
                    let (l, n) = (len.map(|d| self.cx.dim(d)), size.map(|d| self.cx.dim(d)));
                    let (l, n) = (l.unwrap_or_default(), n.unwrap_or_default());
                    let why = if matches!((len, size), (Some(Dim::Const(_)), Some(Dim::Const(_)))) {
                        "past the end"
                    } else {
                        "not provably inside (symbolic sizes)"
                    };
                    return Err(format!(
                        "slice {start}..{start}+{l} on axis {ax} is {why} of {}, whose size there is {n}",
                        self.role("src", src)
                    ));
                }
                Ok(())
            }

            Insn::SliceR { dst, src, axis, .. } => self.window(("src", src), ("dst", dst), axis),
            Insn::Put { dst, src, axis, .. } => self.window(("dst", dst), ("src", src), axis),

            Insn::Scatter { dst, src, indices } => {
                if self.dtype(indices)? != DType::I32 {
                    return Err(format!(
                        "SCATTER indices must be i32, but {} is not",
                        self.role("indices", indices)
                    ));
                }
                self.same_dtype(&[("dst", dst), ("src", src)])?;
                self.min_rank(("dst", dst), 1)?;
                self.min_rank(("src", src), 1)?;
                let (ds, ss) = (self.shape(dst)?, self.shape(src)?);
                if ds.last() != ss.last() {
                    return Err(format!(
                        "{} and {} must have the same last axis (the rows SCATTER moves)",
                        self.role("dst", dst),
                        self.role("src", src)
                    ));
                }
                let want = ss[..ss.len() - 1].to_vec();
                self.expect_shape(("indices", indices), &want, "src's shape without its last axis")
            }

            Insn::Tget { src: t, .. } | Insn::Tset { dst: t, .. } => {
                if self.dtype(t)? != DType::I32 {
                    let m = insn.info().mnemonic;
                    return Err(format!("{m} moves i32 elements, but {} is not i32", self.role("tensor", t)));
                }
                Ok(())
            }

            Insn::Concat { dst, a, b, axis } => {
                self.same_dtype(&[("dst", dst), ("a", a), ("b", b)])?;
                let (ds, as_, bs) = (self.shape(dst)?, self.shape(a)?, self.shape(b)?);
                if as_.len() != bs.len() || ds.len() != as_.len() {
                    return Err(format!(
                        "rank mismatch: {}, {} and {} must have the same rank",
                        self.role("dst", dst),
                        self.role("a", a),
                        self.role("b", b)
                    ));
                }
                let ax = self.axis(("a", a), axis)?;
                for k in 0..ds.len() {
                    let (x, y, z) = (ds.get(k), as_.get(k), bs.get(k));
                    if k != ax && !(x == y && y == z) {
                        return Err(format!(
                            "{}, {} and {} must match on every axis but {ax} (the concatenation axis); axis {k} differs",
                            self.role("dst", dst),
                            self.role("a", a),
                            self.role("b", b)
                        ));
                    }
                }
                let (x, y, z) = (ds.get(ax).copied(), as_.get(ax).copied(), bs.get(ax).copied());
                let ok = match (x, y, z) {
                    (Some(Dim::Const(x)), Some(Dim::Const(y)), Some(Dim::Const(z))) => {
                        x as u64 == y as u64 + z as u64
                    }
                    (Some(x), Some(Dim::Const(0)), Some(z)) => x == z,
                    (Some(x), Some(y), Some(Dim::Const(0))) => x == y,
                    _ => false,
                };
                if !ok {
                    let want = match (y, z) {
                        (Some(Dim::Const(y)), Some(Dim::Const(z))) => (y as u64 + z as u64).to_string(),
                        (Some(y), Some(z)) => format!("{} + {}", self.cx.dim(y), self.cx.dim(z)),
                        _ => "?".into(),
                    };
                    return Err(format!(
                        "{} should have size {want} on axis {ax} (a's plus b's), but has {}",
                        self.role("dst", dst),
                        x.map(|d| self.cx.dim(d)).unwrap_or_default()
                    ));
                }
                Ok(())
            }

            Insn::Transpose { dst, src, perm } => {
                self.same_dtype(&[("dst", dst), ("src", src)])?;
                let ss = self.shape(src)?;
                let axes = perm.axes();
                if axes.len() != ss.len() {
                    return Err(format!(
                        "permutation {:?} has {} axes but {} has rank {}",
                        axes,
                        axes.len(),
                        self.role("src", src),
                        ss.len()
                    ));
                }
                let want: Vec<Dim> = axes.iter().filter_map(|&k| ss.get(k as usize).copied()).collect();
                self.expect_shape(("dst", dst), &want, &format!("src permuted by {axes:?}"))
            }

            Insn::Fill { .. } | Insn::Rand { .. } => Ok(()),

            Insn::Cast { dst, src } => self.same_shape(("dst", dst), ("src", src)),

            Insn::Gather { dst, table, indices } => {
                if self.dtype(indices)? != DType::I32 {
                    return Err(format!(
                        "GATHER indices must be i32, but {} is not",
                        self.role("indices", indices)
                    ));
                }
                self.same_dtype(&[("dst", dst), ("table", table)])?;
                self.min_rank(("table", table), 1)?;
                let mut want: Vec<Dim> = self.shape(indices)?.to_vec();
                want.extend(self.shape(table)?.iter().skip(1));
                self.expect_shape(
                    ("dst", dst),
                    &want,
                    "indices' shape followed by table's shape without its first axis",
                )
            }

            Insn::Argmax { dst, src } => {
                if !self.dtype(src)?.is_float() {
                    return Err(format!("ARGMAX takes a float src, but {} is not", self.role("src", src)));
                }
                if self.dtype(dst)? != DType::I32 {
                    return Err(format!(
                        "ARGMAX writes i32 indices, but {} is not i32",
                        self.role("dst", dst)
                    ));
                }
                self.min_rank(("src", src), 1)?;
                let ss = self.shape(src)?;
                let dropped = &ss[..ss.len() - 1];
                let mut kept = dropped.to_vec();
                kept.push(Dim::Const(1));
                let ds = self.shape(dst)?;
                if ds != dropped && ds != kept.as_slice() {
                    return Err(format!(
                        "{} should be {} (the last axis dropped) or {} (kept with size 1) for {}",
                        self.role("dst", dst),
                        self.st(dropped),
                        self.st(&kept),
                        self.role("src", src)
                    ));
                }
                Ok(())
            }

            Insn::Neg { dst, a }
            | Insn::Silu { dst, a }
            | Insn::Erf { dst, a }
            | Insn::Abs { dst, a }
            | Insn::Sqrt { dst, a }
            | Insn::Rsqrt { dst, a }
            | Insn::Exp { dst, a }
            | Insn::Log { dst, a }
            | Insn::Relu { dst, a }
            | Insn::Sigmoid { dst, a }
            | Insn::Tanh { dst, a }
            | Insn::Gelu { dst, a }
            | Insn::AddS { dst, a, .. }
            | Insn::SubS { dst, a, .. }
            | Insn::MulS { dst, a, .. }
            | Insn::DivS { dst, a, .. }
            | Insn::MaxS { dst, a, .. }
            | Insn::MinS { dst, a, .. } => {
                self.same_dtype(&[("dst", dst), ("a", a)])?;
                self.same_shape(("dst", dst), ("a", a))
            }

            // dst is i32 (the generic check above); a and b share one dtype.
            Insn::Eq { dst, a, b } | Insn::Lt { dst, a, b } | Insn::Le { dst, a, b } => {
                self.same_dtype(&[("a", a), ("b", b)])?;
                let want = self.broadcast(("a", a), ("b", b))?;
                self.expect_shape(("dst", dst), &want, "the broadcast shape of a and b")
            }

            // cond is i32 (the generic check above); every pair of cond, a and b broadcasts,
            // so the three do together (numpy: on each axis the sizes other than 1 agree).
            Insn::Select { dst, cond, a, b } => {
                self.same_dtype(&[("dst", dst), ("a", a), ("b", b)])?;
                let ab = self.broadcast(("a", a), ("b", b))?;
                self.broadcast(("cond", cond), ("a", a))?;
                self.broadcast(("cond", cond), ("b", b))?;
                let want =
                    broadcast(self.shape(cond)?, &ab).map_err(|_| "internal: pairs checked".to_string())?;
                self.expect_shape(("dst", dst), &want, "the broadcast shape of cond, a and b")
            }

            Insn::Add { dst, a, b }
            | Insn::Sub { dst, a, b }
            | Insn::Mul { dst, a, b }
            | Insn::Div { dst, a, b }
            | Insn::Max { dst, a, b }
            | Insn::Min { dst, a, b } => {
                self.same_dtype(&[("dst", dst), ("a", a), ("b", b)])?;
                let want = self.broadcast(("a", a), ("b", b))?;
                self.expect_shape(("dst", dst), &want, "the broadcast shape of a and b")
            }

            Insn::Matmul { dst, a, b, bias, ta, tb, .. } => {
                let mut ts = vec![("dst", dst), ("a", a), ("b", b)];
                ts.extend(bias.map(|t| ("bias", t)));
                self.same_dtype(&ts)?;
                self.min_rank(("a", a), 2)?;
                self.min_rank(("b", b), 2)?;
                let (sa, sb) = (self.shape(a)?, self.shape(b)?);
                let (na, nb) = (sa.len(), sb.len());
                let two = |s: &[Dim], n: usize, t: bool| {
                    let (x, y) = (s.get(n - 2).copied(), s.get(n - 1).copied());
                    if t {
                        (y, x)
                    } else {
                        (x, y)
                    }
                };
                // a: (M, K); b: (K, N), after the optional transposes.
                let (m, ka) = two(sa, na, ta);
                let (kb, n) = two(sb, nb, tb);
                let (Some(m), Some(ka), Some(kb), Some(n)) = (m, ka, kb, n) else {
                    return Err("internal: rank checked".into());
                };
                if ka != kb {
                    let t = |f: bool, s: &str| if f { format!(", transposed by {s}") } else { String::new() };
                    return Err(format!(
                        "inner dimensions differ: a {} is {} (K = {}{}) but b {} is {} (K = {}{})",
                        self.cx.name(a),
                        self.cx.ty(a),
                        self.cx.dim(ka),
                        t(ta, "ta"),
                        self.cx.name(b),
                        self.cx.ty(b),
                        self.cx.dim(kb),
                        t(tb, "tb"),
                    ));
                }
                let (ba, bb) = (&sa[..na - 2], &sb[..nb - 2]);
                let mut want = broadcast(ba, bb).map_err(|(k, x, y)| {
                    format!(
                        "batch dimensions do not broadcast: a {} has batch {} and b {} has batch {} ({} vs {} at axis -{} of the batch)",
                        self.cx.name(a),
                        self.st(ba),
                        self.cx.name(b),
                        self.st(bb),
                        self.cx.dim(x),
                        self.cx.dim(y),
                        k + 1
                    )
                })?;
                want.push(m);
                want.push(n);
                self.expect_shape(("dst", dst), &want, "op(a) @ op(b): batch, then M, then N")?;
                if let Some(bias) = bias {
                    if !broadcasts_to(self.shape(bias)?, &want) {
                        return Err(format!(
                            "{} does not broadcast to the result shape {}",
                            self.role("bias", bias),
                            self.st(&want)
                        ));
                    }
                }
                Ok(())
            }

            Insn::Softmax { dst, x, mask, .. } => {
                let mut ts = vec![("dst", dst), ("x", x)];
                ts.extend(mask.map(|t| ("mask", t)));
                self.same_dtype(&ts)?;
                self.min_rank(("x", x), 1)?;
                self.same_shape(("dst", dst), ("x", x))?;
                if let Some(mask) = mask {
                    if !broadcasts_to(self.shape(mask)?, self.shape(x)?) {
                        return Err(format!(
                            "{} does not broadcast to {}",
                            self.role("mask", mask),
                            self.role("x", x)
                        ));
                    }
                }
                Ok(())
            }

            Insn::Layernorm { dst, x, gamma, beta, .. } => {
                self.norm(dst, x, &[("gamma", gamma), ("beta", beta)])
            }
            Insn::Rmsnorm { dst, x, gamma, .. } => self.norm(dst, x, &[("gamma", gamma)]),

            Insn::ReduceSum { dst, src, axis }
            | Insn::ReduceMean { dst, src, axis }
            | Insn::ReduceMax { dst, src, axis } => {
                self.same_dtype(&[("dst", dst), ("src", src)])?;
                let ax = self.axis(("src", src), axis)?;
                let ss = self.shape(src)?;
                let dropped: Vec<Dim> =
                    ss.iter().enumerate().filter(|(k, _)| *k != ax).map(|(_, d)| *d).collect();
                let kept: Vec<Dim> =
                    ss.iter().enumerate().map(|(k, d)| if k == ax { Dim::Const(1) } else { *d }).collect();
                let ds = self.shape(dst)?;
                if ds != dropped.as_slice() && ds != kept.as_slice() {
                    return Err(format!(
                        "{} should be {} (axis {ax} dropped) or {} (kept with size 1) when reducing {}",
                        self.role("dst", dst),
                        self.st(&dropped),
                        self.st(&kept),
                        self.role("src", src)
                    ));
                }
                Ok(())
            }
        }
    }

    /// SLICE with a register start (`whole` is src, `part` dst) and PUT (`whole` is dst, `part`
    /// src): the same rank, the same sizes on every axis but `axis`, and a part no longer than
    /// the whole there where both sizes are known. Where the start lands is a run-time check.
    fn window(&self, (rw, whole): (&str, TensorId), (rp, part): (&str, TensorId), axis: i8) -> R {
        self.same_dtype(&[(rw, whole), (rp, part)])?;
        let (ws, ps) = (self.shape(whole)?, self.shape(part)?);
        if ws.len() != ps.len() {
            return Err(format!(
                "rank mismatch: {} and {} must have the same rank",
                self.role(rw, whole),
                self.role(rp, part)
            ));
        }
        let ax = self.axis((rw, whole), axis)?;
        for (k, (x, y)) in ws.iter().zip(ps).enumerate() {
            if k != ax && x != y {
                return Err(format!(
                    "{} and {} differ on axis {k} ({} vs {}); only axis {ax} may differ",
                    self.role(rw, whole),
                    self.role(rp, part),
                    self.cx.dim(*x),
                    self.cx.dim(*y)
                ));
            }
        }
        if let (Dim::Const(n), Dim::Const(l)) = (ws[ax], ps[ax]) {
            if l > n {
                return Err(format!(
                    "{} is longer on axis {ax} ({l}) than {} ({n})",
                    self.role(rp, part),
                    self.role(rw, whole)
                ));
            }
        }
        Ok(())
    }

    fn norm(&self, dst: TensorId, x: TensorId, params: &[(&str, Option<TensorId>)]) -> R {
        let mut ts = vec![("dst", dst), ("x", x)];
        ts.extend(params.iter().filter_map(|(r, t)| t.map(|t| (*r, t))));
        self.same_dtype(&ts)?;
        self.min_rank(("x", x), 1)?;
        self.same_shape(("dst", dst), ("x", x))?;
        let last = self.shape(x)?.last().copied().ok_or("rank checked")?;
        for (r, t) in params {
            if let Some(t) = t {
                self.expect_shape((r, *t), &[last], "[N], N being x's last dimension")?;
            }
        }
        Ok(())
    }

    fn broadcast(&self, (ra, a): (&str, TensorId), (rb, b): (&str, TensorId)) -> Result<Vec<Dim>, String> {
        broadcast(self.shape(a)?, self.shape(b)?).map_err(|(k, x, y)| {
            format!(
                "shapes do not broadcast: {} and {} have sizes {} and {} on axis -{} (sizes must be equal or 1)",
                self.role(ra, a),
                self.role(rb, b),
                self.cx.dim(x),
                self.cx.dim(y),
                k + 1
            )
        })
    }

    fn count_text(&self, s: &[Dim]) -> String {
        let c = count(s);
        let mut parts = vec![c.constant.to_string()];
        if c.constant != 0 {
            parts.extend(c.syms.iter().map(|s| self.cx.dim(Dim::Sym(*s))));
        }
        if parts.len() > 1 && c.constant == 1 {
            parts.remove(0);
        }
        parts.join("×")
    }
}
