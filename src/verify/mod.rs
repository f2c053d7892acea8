//! The verifier: everything about a program that can be proven before it runs.
//!
//! [`verify`] runs on every load. It decodes every instruction, checks every table (tensors,
//! outputs, kernels and their SPIR-V), type-checks every instruction (reachable or not)
//! against the ISA's rules for dtypes and shapes, and runs a dataflow analysis over the
//! control-flow graph that proves ALLOC/FREE discipline (no use before ALLOC or after FREE,
//! no double free, no leak, the same tensors allocated on every path into a join) and that
//! every exit has written every output. The result, a [`VerifiedProgram`], owns the program
//! and carries what executors need so that they re-check nothing: decoded instructions,
//! per-kernel facts, and the interference graph the memory planner ([`VerifiedProgram::plan`])
//! turns into arena offsets once symbolic dimensions are bound.
//!
//! Symbolic dimensions are treated conservatively: two dims agree only when they are the same
//! constant or the same symbol, and numpy broadcasting stretches only a constant 1.
//!
//! Every independent error is reported ([`VerifyErrors`]), up to [`MAX_ERRORS`]: the tables
//! are checked first and their first error stops verification (every later check reads them);
//! then every instruction is checked (one error per instruction), and, when every instruction
//! decodes and every jump lands in the code, the dataflow analysis adds its own errors (one
//! per instruction, one per join point, and what each exit leaks or leaves unwritten). Every
//! message names what it is about: the instruction index, its source line and mnemonic, the
//! tensors by `%name` with their declared types. [`VerifyErrors::render`] shows them like
//! rustc's, each under its source line with a caret.

use std::fmt;

use thiserror::Error;

use crate::format::{digest_hex, ConstData, OutputDecl, Program, TensorDecl, TensorKind};
use crate::isa::{shape_text, Dim, Instruction, KernelId, OutputId, TensorId};

mod flow;
mod insn;
mod plan;
mod shape;
mod spirv;
mod table;

pub use flow::MAX_INTERFERENCE_PAIRS;
pub use plan::{MemoryPlan, PlanError, ARENA_ALIGN};
pub(crate) use spirv::check_layout as check_spirv_layout;

/// Why a program was rejected. Each variant names what the error is about; the message is
/// written for the person who wrote the program.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerifyError {
    /// A problem with one instruction.
    #[error("instruction {index} ({}{}): {message}", insn_place(*.line, *.mnemonic), origin_text(.origin))]
    Instruction {
        /// Index in the code.
        index: usize,
        /// Source line, when the program records one.
        line: Option<u32>,
        /// The mnemonic, when the instruction decodes.
        mnemonic: Option<&'static str>,
        message: String,
        /// Where the instruction came from (its `.origin`: an imported ONNX node), if recorded.
        origin: Option<String>,
    },
    /// A problem with an entry of the tensor table.
    #[error("tensor %{name} (tensor {}): {message}", .id.0)]
    Tensor { id: TensorId, name: String, message: String },
    /// A problem with a declared output.
    #[error("output {name}: {message}")]
    Output { id: OutputId, name: String, message: String },
    /// A problem with a kernel dispatch or its SPIR-V module.
    #[error("kernel {name}: {message}")]
    Kernel { id: KernelId, name: String, message: String },
    /// A problem with the program as a whole (symbol table, empty code with outputs, ...).
    #[error("{message}")]
    Program { message: String },
}

fn origin_text(origin: &Option<String>) -> String {
    origin.as_ref().map_or(String::new(), |o| format!(", from {o:?}"))
}

fn insn_place(line: Option<u32>, mnemonic: Option<&str>) -> String {
    match (line, mnemonic) {
        (Some(l), Some(m)) => format!("line {l}, {m}"),
        (None, Some(m)) => m.to_string(),
        (Some(l), None) => format!("line {l}"),
        (None, None) => "undecodable".to_string(),
    }
}

impl VerifyError {
    /// The instruction index the error is about, if it is about one.
    pub fn instruction(&self) -> Option<usize> {
        match self {
            VerifyError::Instruction { index, .. } => Some(*index),
            _ => None,
        }
    }
}

/// What the verifier learned about one kernel dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// Per binding (descriptor set 0, binding i): whether the shader may write it (its storage
    /// buffer is not decorated NonWritable). Written bindings are allocated temporaries.
    pub written: Vec<bool>,
    /// The entry point's workgroup size (LocalSize, LocalSizeId or the WorkgroupSize built-in).
    pub local_size: [u32; 3],
    /// Size of the push-constant block in bytes (equal to the dispatch's push bytes).
    pub push_bytes: u32,
    /// The SPIR-V capabilities the module declares (OpCapability), in its order: a device
    /// must have enabled the features some of them need (checked when a VM takes the device).
    pub capabilities: Vec<rspirv::spirv::Capability>,
}

/// A program that passed [`verify`]. Executors take this, not raw bytes, and re-check nothing
/// it guarantees: every instruction decodes and is well typed, every id is in range, every jump
/// lands on an instruction, temporaries are allocated whenever they are touched, and every
/// kernel's SPIR-V matches its dispatch.
#[derive(Debug, Clone)]
pub struct VerifiedProgram {
    program: Program,
    instructions: Vec<Instruction>,
    kernels: Vec<KernelInfo>,
    reachable: Vec<bool>,
    /// Per tensor id: the temporaries it interferes with (sorted; empty for non-temps).
    interference: Vec<Vec<TensorId>>,
    /// Temporaries in planning order: by first reachable ALLOC, then by id.
    alloc_order: Vec<TensorId>,
    /// Per tensor id: the index of its first reachable ALLOC.
    first_alloc: Vec<Option<usize>>,
}

/// The most errors one verification reports: past it, what follows is usually the same
/// mistake again, and a hostile program could otherwise make the report as large as itself.
pub const MAX_ERRORS: usize = 20;

/// Every error found in a program (at least one), in the order of the instructions they are
/// about. `Display` writes one per line; [`VerifyErrors::render`] writes them rustc-style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyErrors {
    pub errors: Vec<VerifyError>,
    /// Whether verification stopped at [`MAX_ERRORS`], so more errors may exist.
    pub truncated: bool,
}

impl std::error::Error for VerifyErrors {}

impl From<VerifyError> for VerifyErrors {
    fn from(e: VerifyError) -> VerifyErrors {
        VerifyErrors { errors: vec![e], truncated: false }
    }
}

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, e) in self.errors.iter().enumerate() {
            if k > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        if self.truncated {
            write!(f, "\n(verification stopped after {MAX_ERRORS} errors)")?;
        }
        Ok(())
    }
}

impl VerifyErrors {
    /// The first error (there is always one).
    pub fn first(&self) -> &VerifyError {
        &self.errors[0]
    }

    /// The report as a user reads it, rustc-style: each error about an instruction (with a
    /// recorded source line) gets a `--> path:line:col` line, the source line and a caret under
    /// the instruction, when `source` (the text of the file the program was assembled from) is
    /// given and that line still holds the instruction, else `--> path:line` alone; the others
    /// are plain `error:` lines. `path` names the source file, `program` what was verified (the
    /// same for a `.s`; the `.bib` for one), which the closing summary line names.
    pub fn render(&self, source: Option<&str>, path: &str, program: &str) -> String {
        let lines: Vec<&str> = source.map(|s| s.lines().collect()).unwrap_or_default();
        let mut out = String::new();
        for e in &self.errors {
            out += &render_one(e, &lines, path);
            out += "\n";
        }
        if self.truncated {
            out +=
                &format!("note: verification stopped after {MAX_ERRORS} errors; fix these to see more\n\n");
        }
        let n = self.errors.len();
        out += &format!(
            "error: could not verify {program} due to {n}{} previous error{}\n",
            if self.truncated { " or more" } else { "" },
            if n == 1 { "" } else { "s" }
        );
        out
    }
}

/// One error, rendered (see [`VerifyErrors::render`]).
fn render_one(e: &VerifyError, lines: &[&str], path: &str) -> String {
    let VerifyError::Instruction { index, line: Some(line), mnemonic, message, .. } = e else {
        return format!("error: {e}\n");
    };
    let label = match mnemonic {
        Some(m) => format!("instruction {index} ({m})"),
        None => format!("instruction {index}"),
    };
    let text = lines.get(*line as usize - 1).copied();
    match text.zip(mnemonic.as_ref()).and_then(|(t, m)| instruction_span(t, m).map(|s| (t, s))) {
        Some((text, span)) => crate::asm::AsmError {
            kind: crate::asm::AsmErrorKind::Other { message: message.clone(), label },
            line: *line as usize,
            span,
            text: text.to_string(),
            notes: vec![],
        }
        .render(path),
        None => {
            let g = " ".repeat(line.to_string().len());
            format!("error: {message}\n{g}--> {path}:{line}\n{g} |\n{g} = note: {label}\n")
        }
    }
}

/// The byte range of the instruction on a source line: from its mnemonic to the end of its
/// operands (before any comment). None when the line does not hold that mnemonic (the source
/// changed since the program was assembled), so no wrong line is shown.
fn instruction_span(text: &str, mnemonic: &str) -> Option<std::ops::Range<usize>> {
    let code = &text[..text.find(';').unwrap_or(text.len())];
    let upper = code.to_ascii_uppercase();
    let start = upper.match_indices(mnemonic).map(|(at, _)| at).find(|&at| {
        let before = upper[..at].chars().next_back();
        let after = upper[at + mnemonic.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || "_.%$".contains(c));
        !word(before) && !word(after)
    })?;
    Some(start..code.trim_end().len())
}

/// Collects errors up to [`MAX_ERRORS`].
pub(crate) struct Sink {
    errors: Vec<VerifyError>,
    truncated: bool,
}

impl Sink {
    fn new() -> Sink {
        Sink { errors: Vec::new(), truncated: false }
    }
    /// Records an error (past the cap, only that there were more).
    pub fn push(&mut self, e: VerifyError) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(e);
        } else {
            self.truncated = true;
        }
    }
    /// Whether the cap is reached: checks may stop.
    pub fn is_full(&self) -> bool {
        self.errors.len() >= MAX_ERRORS
    }
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
    /// The errors, ordered by the instruction they are about (stable: an instruction's own
    /// error before the dataflow's), program-wide errors first.
    fn finish(mut self) -> VerifyErrors {
        self.errors.sort_by_key(|e| e.instruction().map_or(0, |i| i + 1));
        VerifyErrors { truncated: self.truncated || self.errors.len() >= MAX_ERRORS, errors: self.errors }
    }
}

/// Verifies a program. See the module documentation for what is checked.
pub fn verify(program: Program) -> Result<VerifiedProgram, VerifyErrors> {
    let cx = Ctx { p: &program };
    table::check_tables(&cx)?;
    let kernels = table::check_kernels(&cx)?;
    let mut sink = Sink::new();
    let decoded = insn::decode_and_check(&cx, &mut sink);
    let all_decoded: Option<Vec<Instruction>> = decoded.into_iter().collect();
    let facts = match all_decoded {
        Some(instructions) if !sink.is_full() => {
            flow::analyze(&cx, &instructions, &kernels, &mut sink).map(|f| (instructions, f))
        }
        _ => None,
    };
    let (instructions, facts) = match facts {
        Some(done) if sink.is_empty() => done,
        _ => return Err(sink.finish()),
    };
    Ok(VerifiedProgram {
        instructions,
        kernels,
        reachable: facts.reachable,
        interference: facts.interference,
        alloc_order: facts.alloc_order,
        first_alloc: facts.first_alloc,
        program,
    })
}

impl VerifiedProgram {
    /// The verified program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Gives the program back.
    pub fn into_program(self) -> Program {
        self.program
    }

    /// The decoded instructions, one per code slot.
    pub fn instructions(&self) -> &[Instruction] {
        &self.instructions
    }

    /// Facts about each kernel dispatch, indexed by [`KernelId`].
    pub fn kernels(&self) -> &[KernelInfo] {
        &self.kernels
    }

    /// Facts about one kernel dispatch. Panics if `k` is out of range (ids taken from verified
    /// instructions never are).
    pub fn kernel(&self, k: KernelId) -> &KernelInfo {
        &self.kernels[k.0 as usize]
    }

    /// Whether instruction `i` can be reached from the start.
    pub fn is_reachable(&self, i: usize) -> bool {
        self.reachable.get(i).copied().unwrap_or(false)
    }

    /// The declaration of tensor `t`. Panics if `t` is out of range (ids taken from verified
    /// instructions and kernel bindings never are).
    pub fn tensor(&self, t: TensorId) -> &TensorDecl {
        &self.program.tensors[t.0 as usize]
    }

    /// Whether `t` is a temporary, an input or a constant.
    pub fn tensor_kind(&self, t: TensorId) -> TensorKind {
        self.tensor(t).kind
    }

    /// The declaration of output `o`. Panics if `o` is out of range (ids taken from verified
    /// instructions never are).
    pub fn output(&self, o: OutputId) -> &OutputDecl {
        &self.program.outputs[o.0 as usize]
    }

    /// The temporaries that are allocated at the same time as temporary `t` somewhere in the
    /// program (so they may not share storage with it).
    pub fn interferes_with(&self, t: TensorId) -> &[TensorId] {
        self.interference.get(t.0 as usize).map_or(&[], |v| v.as_slice())
    }

    /// The index of the first reachable ALLOC of `t` (None for temporaries only allocated in
    /// unreachable code, or never, and for inputs and constants).
    pub fn first_alloc(&self, t: TensorId) -> Option<usize> {
        self.first_alloc.get(t.0 as usize).copied().flatten()
    }

    /// Temporaries in the order the planner places them.
    pub fn alloc_order(&self) -> &[TensorId] {
        &self.alloc_order
    }

    /// A shape with every symbol replaced by its value in `dims` (indexed by symbol id).
    pub fn concrete_shape(&self, shape: &[Dim], dims: &[u64]) -> Result<Vec<u64>, PlanError> {
        plan::concrete_shape(&self.program, shape, dims)
    }
}

/// Shared naming helpers for messages.
pub(crate) struct Ctx<'a> {
    pub p: &'a Program,
}

impl Ctx<'_> {
    pub fn decl(&self, t: TensorId) -> Option<&TensorDecl> {
        self.p.tensors.get(t.0 as usize)
    }
    /// `%name`.
    pub fn name(&self, t: TensorId) -> String {
        match self.decl(t) {
            Some(d) => format!("%{}", d.name),
            None => format!("tensor #{}", t.0),
        }
    }
    /// `f32[B, 784]`.
    pub fn ty(&self, t: TensorId) -> String {
        match self.decl(t) {
            // A block-quantized constant shows its storage type (its values are f32).
            Some(d) => match d.kind {
                TensorKind::Const(ConstData::Blocks { format, .. }) => {
                    format!("{format}{}", self.shape(&d.shape))
                }
                _ => format!("{}{}", d.dtype, self.shape(&d.shape)),
            },
            None => "?".into(),
        }
    }
    pub fn shape(&self, s: &[Dim]) -> String {
        shape_text(s, &self.p.syms)
    }
    pub fn dim(&self, d: Dim) -> String {
        match d {
            Dim::Const(n) => n.to_string(),
            Dim::Sym(s) => self.p.syms.get(s.0 as usize).cloned().unwrap_or_else(|| format!("?{}", s.0)),
        }
    }
    pub fn kind_word(&self, t: TensorId) -> &'static str {
        match self.decl(t).map(|d| d.kind) {
            Some(TensorKind::Temp) => "a temporary",
            Some(TensorKind::Input) => "an input",
            Some(TensorKind::Const(_)) => "a constant",
            None => "out of range",
        }
    }
    /// `instruction 4 (line 12, JNZ)`.
    pub fn insn_ref(&self, i: usize, mnemonic: Option<&str>) -> String {
        let from = self.p.origin_of(i).map_or(String::new(), |o| format!(", from {o:?}"));
        format!("instruction {i} ({}{from})", insn_place(self.p.line_of(i), mnemonic))
    }
    pub fn insn_err(&self, i: usize, mnemonic: Option<&'static str>, message: String) -> VerifyError {
        let origin = self.p.origin_of(i).map(str::to_string);
        VerifyError::Instruction { index: i, line: self.p.line_of(i), mnemonic, message, origin }
    }
}

/// Formats a byte count for people: `1.50 MiB (1572864 bytes)`.
pub fn bytes_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {} ({n} bytes)", UNITS[u])
}

impl VerifiedProgram {
    /// The text `adeadvm verify` prints: digest, tier, counts and the memory plan for the
    /// given symbol values (by name). Symbols not given are bound to 1, and the report says so.
    pub fn report(&self, dims: &[(String, u64)]) -> Result<String, PlanError> {
        use fmt::Write as _;
        let p = &self.program;
        let mut values: Vec<Option<u64>> = vec![None; p.syms.len()];
        for (name, v) in dims {
            let Some(i) = p.syms.iter().position(|s| s == name) else {
                return Err(PlanError::UnknownSymbol {
                    name: name.clone(),
                    known: if p.syms.is_empty() { "none".into() } else { p.syms.join(", ") },
                });
            };
            if let Some(slot) = values.get_mut(i) {
                *slot = Some(*v);
            }
        }
        let defaulted: Vec<&str> =
            p.syms.iter().zip(&values).filter(|(_, v)| v.is_none()).map(|(s, _)| s.as_str()).collect();
        let bound: Vec<u64> = values.iter().map(|v| v.unwrap_or(1)).collect();
        let plan = self.plan(&bound)?;

        let count = |k: fn(&TensorKind) -> bool| p.tensors.iter().filter(|t| k(&t.kind)).count();
        let temps = count(|k| matches!(k, TensorKind::Temp));
        let inputs = count(|k| matches!(k, TensorKind::Input));
        let consts = count(|k| matches!(k, TensorKind::Const(_)));
        let unreachable = self.reachable.iter().filter(|r| !**r).count();

        let mut s = String::new();
        let _ = writeln!(s, "digest        {}", digest_hex(&p.digest));
        let _ = writeln!(s, "tier          {}", p.tier.name());
        let _ = write!(s, "code          {} instructions", p.code.len());
        if unreachable > 0 {
            let _ = write!(s, " ({unreachable} unreachable)");
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "tensors       {}: {inputs} inputs, {consts} constants, {temps} temporaries",
            p.tensors.len()
        );
        let _ = writeln!(s, "outputs       {}", p.outputs.len());
        if !p.kernels.is_empty() {
            let _ = writeln!(s, "kernels       {} ({} SPIR-V modules)", p.kernels.len(), p.spirv.len());
        }
        if !p.syms.is_empty() {
            let parts: Vec<String> = p.syms.iter().zip(&bound).map(|(n, v)| format!("{n} = {v}")).collect();
            let _ = writeln!(s, "dims          {}", parts.join(", "));
            if !defaulted.is_empty() {
                let _ = writeln!(
                    s,
                    "              ({} not given with --dim NAME=N; bound to 1)",
                    defaulted.join(", ")
                );
            }
        }
        let _ = writeln!(s, "memory plan");
        let _ = writeln!(s, "  arena peak  {} for {temps} temporaries", bytes_text(plan.peak_bytes));
        let _ = writeln!(s, "  constants   {}", bytes_text(plan.const_bytes));
        let _ = writeln!(s, "  inputs      {}", bytes_text(plan.input_bytes));
        let _ = writeln!(s, "  outputs     {}", bytes_text(plan.output_bytes));
        Ok(s)
    }
}

impl fmt::Display for VerifiedProgram {
    /// The report with every symbol bound to 1.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.report(&[]) {
            Ok(s) => f.write_str(&s),
            Err(e) => write!(f, "(no memory plan: {e})"),
        }
    }
}
