//! The assembler proper: expands `.rept` and `${...}`, parses each line (see [`super::syntax`]),
//! and builds the [`Program`].
//!
//! Instructions are assembled from the generated `OP_INFO` table alone: the candidates for a
//! mnemonic are the table rows that share it, one is picked by the kinds of the required
//! operands written, and each operand is read according to its `OperandKind`. Nothing here
//! knows about a particular opcode, except the documented `ALLOC %t: type` shorthand.
//!
//! Errors never stop the assembler: each line is assembled on its own, so after an error it
//! goes on with the next line and every error in the file is reported.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::rc::Rc;

use super::consts::{
    arg_text, gguf_meta_text, gguf_vocab, int_arg, materialize, materialize_blocks, parse_elem, parse_f32,
    ConstTarget, ConstValue, FileCache,
};
use super::error::{suggest, AsmError, AsmErrorKind, AsmErrors};
use super::syntax::{parse_line, split_comment, Arg, ArgNode, Cursor, Diag, DimAst, Sp, Span, Stmt, TypeAst};
use super::AsmOptions;
use crate::format::{
    Blob, ConstData, DebugInfo, KernelDecl, OutputDecl, Program, SpirvModule, TensorDecl, TensorKind,
    DATA_ALIGN,
};
use crate::isa::{
    Act, BlockFormat, DType, Dim, Dist, Insn, Instruction, KernelId, OpInfo, Opcode, Operand, OperandKind,
    OutputId, Perm, Placement, Reg, Shape, SymId, Target, TensorId, Tier, MAX_DIM, MAX_RANK, NUM_REGS,
    OP_INFO,
};

/// Directive names, for suggestions.
const DIRECTIVES: &[&str] = &[
    "tier", "file", "define", "dim", "input", "output", "tensor", "const", "spirv", "kernel", "rept", "endr",
    "loc", "origin",
];

/// Stop assembling past this many lines, `.rept` expansions counted: 1,000,000, hundreds of
/// times the largest shipped program (smollm2.s expands to a few thousand). A line costs about
/// 0.6 µs, but 20 µs under the fuzzer's AddressSanitizer, where 2,000,000 came within reach of
/// CI's 60 s an input.
const MAX_EXPANDED_LINES: usize = 1_000_000;
/// The longest a line may become through `${...}` substitution (1 MiB; lines without `${` are
/// not limited). A chain of ten defines, each repeating the previous one 16 times, is under
/// 1 KB of source and would otherwise expand to 16^10 bytes.
pub const MAX_SUBSTITUTED_LINE_BYTES: usize = 1 << 20;
/// The most bytes all substituted lines of one file may come to together (256 MiB): a long
/// define used on every line of a large `.rept` stays within the line limit but not this one.
pub const MAX_SUBSTITUTED_BYTES: usize = 1 << 28;
/// The deepest `.rept` blocks may nest inside each other. The assembler recurses once per
/// level, so about 10,000 levels overflowed the stack.
pub const MAX_REPT_DEPTH: usize = 64;
/// Stop collecting errors past this many.
const MAX_ERRORS: usize = 200;

/// Where the line being assembled came from.
#[derive(Clone, Debug)]
struct Ctx {
    line: usize,
    text: String,
    /// The `.rept` iterations it is in, innermost last; worded as notes only when an error is
    /// reported (formatting them for every line was a quarter of a large expansion's time).
    frames: Vec<ReptFrame>,
}

#[derive(Clone, Debug)]
struct ReptFrame {
    /// Shared by every iteration's frame (and every line's [`Ctx`]): cloning it is a count.
    var: Rc<str>,
    value: u64,
    line: usize,
}

struct LabelUse {
    insn: usize,
    operand: usize,
    name: String,
    span: Span,
    ctx: Ctx,
}

struct PendingInsn {
    opcode: Opcode,
    placement: Placement,
    operands: Vec<Operand>,
}

pub(crate) struct Assembler<'o> {
    path: String,
    opts: &'o AsmOptions,
    errors: Vec<AsmError>,
    expanded: usize,
    tier: Option<(Tier, usize)>,
    file: Option<String>,
    defines: HashMap<String, (String, usize)>,
    syms: Vec<String>,
    dims_declared: HashMap<String, usize>,
    tensors: Vec<TensorDecl>,
    tensor_ids: HashMap<String, (u16, usize)>,
    data: Vec<u8>,
    outputs: Vec<OutputDecl>,
    output_ids: HashMap<String, (u16, usize)>,
    spirv: Vec<SpirvModule>,
    spirv_ids: HashMap<String, (u16, usize)>,
    kernels: Vec<KernelDecl>,
    kernel_ids: HashMap<String, (u16, usize)>,
    insns: Vec<PendingInsn>,
    lines: Vec<u32>,
    pending_loc: Option<u32>,
    /// `.origin` entries: (instruction index, name); a later one at the same index replaces it.
    origins: Vec<(u32, String)>,
    labels: Vec<(String, u32)>,
    label_ids: HashMap<String, usize>,
    label_uses: Vec<LabelUse>,
    /// Files read for constants (see [`FileCache`]).
    files: FileCache,
    /// Tensors whose declaration line failed: their uses are not reported again (one missing
    /// `-D WEIGHTS=...` would otherwise add an "unknown tensor" error per use of each weight).
    failed_decls: HashSet<String>,
    /// Unknown `${NAME}`s already reported: reported at their first use only.
    unknown_defines: HashSet<String>,
    /// The texts (after `${...}` substitution) that failed, by source line. A `.rept` body line
    /// that comes out the same as one that failed is not assembled again: the program already
    /// cannot assemble, and an error that repeats is reported once anyway. Without this, a
    /// mistyped line inside `.rept`s of 900,000 iterations took 9.5 s to diagnose again and
    /// again (mostly the did-you-mean search; a fuzz input that timed out CI); now 0.05 s.
    failed_lines: HashMap<usize, HashSet<String>>,
    /// Files that could not be read, with the reason, reported at their first reference only:
    /// a model's weights file names hundreds of constants, and a wrong path is one mistake.
    unreadable_files: HashSet<(String, String)>,
    /// `.vocab`: the vocabulary's metadata file and the line that gave it.
    vocab: Option<(Vec<u8>, usize)>,
    /// Bytes of substituted lines so far (see [`MAX_SUBSTITUTED_BYTES`]).
    substituted_bytes: usize,
    /// The total passed [`MAX_SUBSTITUTED_BYTES`]: assembling stops (every later line would
    /// report the same).
    substituted_too_much: bool,
}

/// For each line that starts a `.rept`, the index of its `.endr` (`None` where there is none),
/// found in one pass with a stack so that deep nesting costs linear time.
fn matching_endrs(lines: &[(usize, &str)]) -> Vec<Option<usize>> {
    let mut ends = vec![None; lines.len()];
    let mut open = Vec::new();
    for (i, &(_, raw)) in lines.iter().enumerate() {
        match head_word(raw) {
            ".rept" => open.push(i),
            ".endr" => {
                if let Some(start) = open.pop() {
                    ends[start] = Some(i);
                }
            }
            _ => {}
        }
    }
    ends
}

/// The first word of a line's code, for finding `.rept`/`.endr` before substitution.
fn head_word(raw: &str) -> &str {
    let code = split_comment(raw).0.trim_start();
    code.split(|c: char| c.is_whitespace()).next().unwrap_or("")
}

fn describe_kind(kind: OperandKind) -> String {
    let names = |v: Vec<&str>| v.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    match kind {
        OperandKind::Tensor => "a tensor `%name`".into(),
        OperandKind::TensorOpt => "a tensor `%name` or `none`".into(),
        OperandKind::Reg => "a register `r0`..`r15`".into(),
        OperandKind::RegOpt => "a register `r0`..`r15` or `none`".into(),
        OperandKind::Label => "a label".into(),
        OperandKind::F32 => "an f32 immediate".into(),
        OperandKind::I32 => "an i32 integer".into(),
        OperandKind::U32 => "a u32 integer".into(),
        OperandKind::U16 => "a u16 integer".into(),
        OperandKind::Axis => "an axis (-8..7)".into(),
        OperandKind::Perm => "a permutation like `[1, 0]`".into(),
        OperandKind::Bool => "`true` or `false`".into(),
        OperandKind::Act => format!("an activation ({})", names(Act::ALL.iter().map(|a| a.name()).collect())),
        OperandKind::Dist => {
            format!("a distribution ({})", names(Dist::ALL.iter().map(|a| a.name()).collect()))
        }
        OperandKind::Output => "an output name".into(),
        OperandKind::Kernel => "a kernel name".into(),
    }
}

fn is_reg_name(s: &str) -> bool {
    s.len() > 1 && s.starts_with('r') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

/// Whether `arg` has the right form for `kind` (values are checked later).
fn fits(kind: OperandKind, arg: &Arg) -> bool {
    use OperandKind as K;
    match (&arg.node, kind) {
        (ArgNode::Tensor { .. }, K::Tensor | K::TensorOpt) => true,
        (ArgNode::Ident("none"), K::TensorOpt | K::RegOpt) => true,
        (ArgNode::Ident(s), K::Reg | K::RegOpt) => is_reg_name(s),
        (ArgNode::Ident(_), K::Label | K::Act | K::Dist | K::Output | K::Kernel) => true,
        (ArgNode::Ident("inf" | "nan"), K::F32) => true,
        (ArgNode::Ident("true" | "false"), K::Bool) => true,
        (ArgNode::Number(_), K::F32 | K::I32 | K::U32 | K::U16 | K::Axis | K::Bool) => true,
        (ArgNode::List(_), K::Perm) => true,
        _ => false,
    }
}

/// `MATMUL %dst, %a, %b [bias=%t] [ta] [tb] [act=none]` from the table row.
fn usage(info: &OpInfo) -> String {
    let mut s = info.mnemonic.to_string();
    let mut first = true;
    for o in info.operands {
        let sep = if first { " " } else { ", " };
        first = false;
        let written = match (o.kind, o.default) {
            (OperandKind::Tensor, None) => format!("%{}", o.name),
            (_, None) => o.name.to_string(),
            (OperandKind::Bool, Some(_)) => format!("[{}]", o.name),
            (_, Some(d)) => format!("[{}={}]", o.name, super::disasm::operand_default_text(&d)),
        };
        s += sep;
        s += &written;
    }
    s
}

fn required(info: &OpInfo) -> Vec<usize> {
    info.operands.iter().enumerate().filter(|(_, o)| o.default.is_none()).map(|(i, _)| i).collect()
}

impl<'o> Assembler<'o> {
    pub(crate) fn new(path: &str, opts: &'o AsmOptions) -> Assembler<'o> {
        Assembler {
            path: path.to_string(),
            opts,
            errors: Vec::new(),
            expanded: 0,
            tier: None,
            file: None,
            defines: HashMap::new(),
            syms: Vec::new(),
            dims_declared: HashMap::new(),
            tensors: Vec::new(),
            tensor_ids: HashMap::new(),
            data: Vec::new(),
            outputs: Vec::new(),
            output_ids: HashMap::new(),
            spirv: Vec::new(),
            spirv_ids: HashMap::new(),
            kernels: Vec::new(),
            kernel_ids: HashMap::new(),
            insns: Vec::new(),
            lines: Vec::new(),
            pending_loc: None,
            origins: Vec::new(),
            labels: Vec::new(),
            vocab: None,
            label_ids: HashMap::new(),
            label_uses: Vec::new(),
            files: FileCache::default(),
            failed_decls: HashSet::new(),
            unknown_defines: HashSet::new(),
            failed_lines: HashMap::new(),
            unreadable_files: HashSet::new(),
            substituted_bytes: 0,
            substituted_too_much: false,
        }
    }

    fn report(&mut self, ctx: &Ctx, d: Diag) {
        if self.errors.len() >= MAX_ERRORS {
            return;
        }
        // Follow-on errors of one already reported: the uses of a tensor whose declaration
        // failed, and the later uses of an unknown define.
        match &*d.kind {
            AsmErrorKind::UnknownName { what: "tensor", name, .. }
                if self.failed_decls.contains(name.trim_start_matches('%')) =>
            {
                return;
            }
            AsmErrorKind::UnknownDefine { name, .. } if !self.unknown_defines.insert(name.clone()) => return,
            AsmErrorKind::File { path, error }
                if !self.unreadable_files.insert((path.clone(), error.clone())) =>
            {
                return;
            }
            _ => {}
        }
        // The same error on the same expanded line (a `.rept` body line that does not use the
        // counter) is reported once, for its first iteration.
        let dup = self
            .errors
            .iter()
            .any(|e| e.line == ctx.line && e.span == d.span && e.kind == *d.kind && e.text == ctx.text);
        if dup {
            return;
        }
        let mut notes = d.notes;
        notes.extend(
            ctx.frames
                .iter()
                .rev()
                .map(|f| format!("in iteration {} = {} of the `.rept` on line {}", f.var, f.value, f.line)),
        );
        self.errors.push(AsmError {
            kind: *d.kind,
            line: ctx.line,
            span: d.span,
            text: ctx.text.clone(),
            notes,
        });
    }

    pub(crate) fn run(&mut self, source: &str) {
        let lines: Vec<(usize, &str)> = source.lines().enumerate().map(|(i, l)| (i + 1, l)).collect();
        let ends = matching_endrs(&lines);
        let mut stack = Vec::new();
        self.block(&lines, &ends, 0..lines.len(), &mut stack);
    }

    /// Assembles `lines[range]`. Recurses once per `.rept` level, which [`MAX_REPT_DEPTH`]
    /// bounds; `ends` gives each `.rept` line's `.endr` (see [`matching_endrs`]).
    fn block(
        &mut self,
        lines: &[(usize, &str)],
        ends: &[Option<usize>],
        range: Range<usize>,
        stack: &mut Vec<ReptFrame>,
    ) {
        let mut i = range.start;
        while i < range.end {
            if self.expanded > MAX_EXPANDED_LINES
                || self.errors.len() >= MAX_ERRORS
                || self.substituted_too_much
            {
                return;
            }
            let (no, raw) = lines[i];
            match head_word(raw) {
                ".rept" => {
                    let ctx = self.ctx(no, raw, stack);
                    let at = raw.find(".rept").unwrap_or(0);
                    let Some(end) = ends[i] else {
                        self.report(&ctx, Diag::new(AsmErrorKind::UnterminatedRept, at..at + 5));
                        i += 1;
                        continue;
                    };
                    if stack.len() >= MAX_REPT_DEPTH {
                        let d = Diag::other(
                            "`.rept` nested too deeply",
                            format!("more than {MAX_REPT_DEPTH} `.rept` blocks inside each other"),
                            at..at + 5,
                        );
                        self.report(&ctx, d);
                        i = end + 1;
                        continue;
                    }
                    if let Some((var, count)) = self.rept_header(no, raw, stack) {
                        let var: Rc<str> = var.into();
                        for k in 0..count {
                            stack.push(ReptFrame { var: var.clone(), value: k, line: no });
                            self.block(lines, ends, i + 1..end, stack);
                            stack.pop();
                            self.expanded += 1; // an empty body still costs something
                            if self.expanded > MAX_EXPANDED_LINES {
                                let d = Diag::other(
                                    "`.rept` expansion is too large",
                                    format!("more than {MAX_EXPANDED_LINES} lines"),
                                    at..at + 5,
                                );
                                self.report(&ctx, d);
                                return;
                            }
                            if self.errors.len() >= MAX_ERRORS || self.substituted_too_much {
                                return;
                            }
                        }
                    }
                    i = end + 1;
                }
                ".endr" => {
                    let ctx = self.ctx(no, raw, stack);
                    let at = raw.find(".endr").unwrap_or(0);
                    self.report(&ctx, Diag::new(AsmErrorKind::StrayEndr, at..at + 5));
                    i += 1;
                }
                _ => {
                    self.line(no, raw, stack);
                    i += 1;
                }
            }
        }
    }

    fn ctx(&self, line: usize, text: &str, stack: &[ReptFrame]) -> Ctx {
        Ctx { line, text: text.to_string(), frames: stack.to_vec() }
    }

    fn lookup_define(&self, name: &str, stack: &[ReptFrame]) -> Option<String> {
        if let Some(f) = stack.iter().rev().find(|f| &*f.var == name) {
            return Some(f.value.to_string());
        }
        if let Some((_, v)) = self.opts.defines.iter().rev().find(|(k, _)| k == name) {
            return Some(v.clone());
        }
        self.defines.get(name).map(|(v, _)| v.clone())
    }

    /// Replaces every `${NAME}`. The result may be at most [`MAX_SUBSTITUTED_LINE_BYTES`] long,
    /// and all results together at most [`MAX_SUBSTITUTED_BYTES`]; both are checked before
    /// each value is copied in, so a chain of defines that doubles at every level fails at the
    /// level that passes the limit instead of allocating gigabytes.
    fn substitute(&mut self, code: &str, stack: &[ReptFrame]) -> Result<String, Diag> {
        if !code.contains("${") {
            return Ok(code.to_string());
        }
        let mut out = String::with_capacity(code.len());
        let mut at = 0;
        while let Some(p) = code[at..].find("${") {
            let start = at + p;
            out.push_str(&code[at..start]);
            let Some(close) = code[start + 2..].find('}') else {
                return Err(Diag::other("unterminated `${`", "no closing `}`", start..code.len()));
            };
            let name = &code[start + 2..start + 2 + close];
            let end = start + 2 + close + 1;
            match self.lookup_define(name, stack) {
                Some(v) => {
                    let grown = out.len() + v.len();
                    if grown > MAX_SUBSTITUTED_LINE_BYTES {
                        return Err(Diag::other(
                            "this line is too long after `${...}` substitution",
                            format!(
                                "`{name}` is {} bytes long, and the line would pass {MAX_SUBSTITUTED_LINE_BYTES} bytes",
                                v.len()
                            ),
                            start..end,
                        ));
                    }
                    if self.substituted_bytes + grown > MAX_SUBSTITUTED_BYTES {
                        self.substituted_too_much = true;
                        return Err(Diag::other(
                            "`${...}` substitution is too large in total",
                            format!("the lines that use `${{...}}` pass {MAX_SUBSTITUTED_BYTES} bytes together here"),
                            start..end,
                        ));
                    }
                    out.push_str(&v);
                }
                // Reported already (see `report`): the did-you-mean search is not repeated.
                None if self.unknown_defines.contains(name) => {
                    let kind = AsmErrorKind::UnknownDefine { name: name.into(), suggestion: None };
                    return Err(Diag::new(kind, start..end));
                }
                None => {
                    let mut known: Vec<&str> = stack.iter().map(|f| &*f.var).collect();
                    known.extend(self.opts.defines.iter().map(|(k, _)| k.as_str()));
                    known.extend(self.defines.keys().map(|k| k.as_str()));
                    let suggestion = suggest(name, known);
                    return Err(Diag::new(
                        AsmErrorKind::UnknownDefine { name: name.into(), suggestion },
                        start..end,
                    ));
                }
            }
            at = end;
        }
        out.push_str(&code[at..]);
        self.substituted_bytes += out.len();
        Ok(out)
    }

    /// Parses `.rept NAME COUNT` (after substitution); reports errors itself.
    fn rept_header(&mut self, no: usize, raw: &str, stack: &[ReptFrame]) -> Option<(String, u64)> {
        let (code, comment) = split_comment(raw);
        let raw_ctx = self.ctx(no, raw, stack);
        let expanded = match self.substitute(code, stack) {
            Ok(e) => e,
            Err(d) => {
                self.report(&raw_ctx, d);
                return None;
            }
        };
        let ctx = self.ctx(no, &format!("{expanded}{comment}"), stack);
        let r = (|| {
            let mut c = Cursor::new(&expanded);
            c.ws();
            c.expect('.', "`.rept`")?;
            c.ident("`rept`")?;
            let var = c.ident("the counter's name, as in `.rept i 4`")?;
            c.ws();
            let count = c.value()?;
            let n = int_arg(&count, "repeat count", 0, u32::MAX as i128)? as u64;
            c.end()?;
            Ok((var.node.to_string(), n))
        })();
        match r {
            Ok(v) => Some(v),
            Err(d) => {
                self.report(&ctx, d);
                None
            }
        }
    }

    fn line(&mut self, no: usize, raw: &str, stack: &[ReptFrame]) {
        self.expanded += 1;
        let (code, comment) = split_comment(raw);
        if code.trim().is_empty() {
            return;
        }
        let expanded = match self.substitute(code, stack) {
            Ok(e) => e,
            Err(d) => {
                self.note_failed_decl(code, stack);
                let ctx = self.ctx(no, raw, stack);
                self.report(&ctx, d);
                return;
            }
        };
        if self.failed_lines.get(&no).is_some_and(|texts| texts.contains(&expanded)) {
            return;
        }
        let ctx = self.ctx(no, &format!("{expanded}{comment}"), stack);
        if let Err(d) = self.statement(&ctx, &expanded) {
            self.failed_lines.entry(no).or_default().insert(expanded.clone());
            self.note_failed_decl(&expanded, stack);
            self.report(&ctx, d);
        }
    }

    /// When `code` is a tensor declaration (`.input`, `.const`, `.tensor`) that failed, remembers
    /// the tensor's name (its own `${...}` substituted where they resolve) if it is not declared.
    /// Likewise a `.define` that failed: its later uses count as already reported (a define
    /// chain that passes the substitution limit gives one error, not one per level after it).
    fn note_failed_decl(&mut self, code: &str, stack: &[ReptFrame]) {
        let mut words = code.split_whitespace();
        let directive = words.next();
        if directive == Some(".define") {
            if let Some(name) = words.next() {
                self.unknown_defines.insert(name.to_string());
            }
            return;
        }
        if !matches!(directive, Some(".input" | ".const" | ".tensor")) {
            return;
        }
        let Some(token) = words.next().and_then(|w| w.strip_prefix('%')) else { return };
        let Ok(name) = self.substitute(token, stack) else { return };
        let end =
            name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(name.len());
        let name = &name[..end];
        if !name.is_empty() && !self.tensor_ids.contains_key(name) {
            self.failed_decls.insert(name.to_string());
        }
    }

    fn statement(&mut self, ctx: &Ctx, code: &str) -> Result<(), Diag> {
        let ast = parse_line(code)?;
        if let Some(label) = &ast.label {
            if let Some(&first) = self.label_ids.get(label.node) {
                return Err(Diag::new(
                    AsmErrorKind::DuplicateName { what: "label", name: label.node.into(), first_line: first },
                    label.span.clone(),
                ));
            }
            self.label_ids.insert(label.node.to_string(), ctx.line);
            self.labels.push((label.node.to_string(), self.insns.len() as u32));
        }
        match ast.stmt {
            Stmt::Empty => Ok(()),
            Stmt::Directive { name, args } => self.directive(ctx, name, args),
            Stmt::Insn { mnemonic, placement, args, args_span } => {
                self.instruction(ctx, mnemonic, placement, &args, args_span)
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Instructions

    fn instruction(
        &mut self,
        ctx: &Ctx,
        mnemonic: Sp<&str>,
        placement: Option<Sp<&str>>,
        args: &[Arg],
        args_span: Span,
    ) -> Result<(), Diag> {
        let upper = mnemonic.node.to_ascii_uppercase();
        let cands: Vec<&'static OpInfo> = OP_INFO.iter().filter(|i| i.mnemonic == upper).collect();
        if cands.is_empty() {
            let mut names: Vec<&str> = OP_INFO.iter().map(|i| i.mnemonic).collect();
            names.dedup();
            let mut suggestion = suggest(mnemonic.node, names);
            if suggestion.is_none() && DIRECTIVES.contains(&mnemonic.node) {
                suggestion = Some(format!(".{}", mnemonic.node));
            }
            return Err(Diag::new(
                AsmErrorKind::UnknownMnemonic { name: mnemonic.node.into(), suggestion },
                mnemonic.span,
            ));
        }
        let placement = match placement {
            None => Placement::Auto,
            Some(p) => match p.node {
                "cpu" => Placement::Cpu,
                "gpu" => Placement::Gpu,
                "auto" => Placement::Auto,
                _ => return Err(Diag::new(AsmErrorKind::UnknownPlacement { name: p.node.into() }, p.span)),
            },
        };
        let usage_note = || {
            let u: Vec<String> = cands.iter().map(|c| format!("`{}`", usage(c))).collect();
            format!("usage: {}", u.join(" or "))
        };
        let npos = args.iter().take_while(|a| !matches!(a.node, ArgNode::KeyValue { .. })).count();

        // Pick the table row by the kinds of the required operands written.
        let mut chosen = None;
        let mut failures: Vec<(usize, &OpInfo)> = Vec::new();
        for &c in &cands {
            let req = required(c);
            if npos < req.len() {
                continue;
            }
            match req.iter().zip(args).position(|(&oi, a)| !fits(c.operands[oi].kind, a)) {
                None => {
                    chosen = Some(c);
                    break;
                }
                Some(k) => failures.push((k, c)),
            }
        }
        let Some(info) = chosen else {
            if let Some(&(k, _)) = failures.iter().max_by_key(|(k, _)| *k) {
                let mut expected: Vec<String> = Vec::new();
                for &(_, c) in failures.iter().filter(|(fk, _)| *fk == k) {
                    let d = describe_kind(c.operands[required(c)[k]].kind);
                    if !expected.contains(&d) {
                        expected.push(d);
                    }
                }
                let arg = &args[k];
                return Err(Diag::new(
                    AsmErrorKind::OperandKind { expected: expected.join(" or "), found: arg_text(arg) },
                    arg.span.clone(),
                )
                .note(usage_note()));
            }
            let expected =
                cands.iter().map(|c| required(c).len()).min_by_key(|&n| n.abs_diff(npos)).unwrap_or(0);
            let span = if args.is_empty() { mnemonic.span.end..mnemonic.span.end } else { args_span };
            return Err(Diag::new(
                AsmErrorKind::OperandCount { mnemonic: info_mnemonic(&cands), expected, found: npos },
                span,
            )
            .note(usage_note()));
        };

        let req = required(info);
        let mut values: Vec<Option<Operand>> = vec![None; info.operands.len()];
        let mut uses = Vec::new();
        for (k, &oi) in req.iter().enumerate() {
            values[oi] = Some(self.operand(ctx, info, oi, &args[k], &mut uses)?);
        }
        for arg in &args[req.len()..] {
            let (key, value) = match &arg.node {
                ArgNode::KeyValue { key, value } => (key.clone(), Some(&**value)),
                ArgNode::Ident(name) => (Sp { node: *name, span: arg.span.clone() }, None),
                _ => {
                    return Err(Diag::new(
                        AsmErrorKind::OperandCount {
                            mnemonic: info.mnemonic.into(),
                            expected: req.len(),
                            found: npos,
                        },
                        arg.span.clone(),
                    )
                    .note(usage_note()))
                }
            };
            let Some(oi) = info.operands.iter().position(|o| o.name == key.node && o.default.is_some())
            else {
                if value.is_none() {
                    return Err(Diag::new(
                        AsmErrorKind::OperandCount {
                            mnemonic: info.mnemonic.into(),
                            expected: req.len(),
                            found: npos,
                        },
                        arg.span.clone(),
                    )
                    .note(usage_note()));
                }
                let optional: Vec<&str> =
                    info.operands.iter().filter(|o| o.default.is_some()).map(|o| o.name).collect();
                let hint = if info.operands.iter().any(|o| o.name == key.node) {
                    Some(format!("`{}` is required: write it by position", key.node))
                } else if optional.is_empty() {
                    Some(format!("`{}` has no optional operands", info.mnemonic))
                } else {
                    Some(format!("optional operands: {}", optional.join(", ")))
                };
                let suggestion = suggest(key.node, optional.iter().copied());
                let what = "optional operand";
                return Err(Diag::new(
                    AsmErrorKind::UnknownName { what, name: key.node.into(), suggestion, hint },
                    key.span,
                ));
            };
            if values[oi].is_some() {
                return Err(Diag::other(
                    format!("optional operand `{}` is given twice", key.node),
                    "given again here",
                    arg.span.clone(),
                ));
            }
            let v = match value {
                Some(v) => self.operand(ctx, info, oi, v, &mut uses)?,
                None if info.operands[oi].kind == OperandKind::Bool => Operand::Bool(true),
                None => {
                    return Err(Diag::other(
                        format!("optional operand `{}` needs a value", key.node),
                        format!("write `{}=...`", key.node),
                        arg.span.clone(),
                    ))
                }
            };
            values[oi] = Some(v);
        }
        let operands: Vec<Operand> =
            values.into_iter().zip(info.operands).filter_map(|(v, o)| v.or(o.default)).collect();
        if Insn::from_operands(info.opcode, &operands).is_none() {
            return Err(Diag::other("internal error: operands do not match the opcode", "here", args_span));
        }
        let index = self.insns.len();
        for mut u in uses {
            u.insn = index;
            self.label_uses.push(u);
        }
        self.insns.push(PendingInsn { opcode: info.opcode, placement, operands });
        self.lines.push(self.pending_loc.take().unwrap_or(ctx.line as u32));
        Ok(())
    }

    fn operand(
        &mut self,
        ctx: &Ctx,
        info: &OpInfo,
        oi: usize,
        arg: &Arg,
        uses: &mut Vec<LabelUse>,
    ) -> Result<Operand, Diag> {
        use OperandKind as K;
        let o = &info.operands[oi];
        let kind = o.kind;
        if !fits(kind, arg) {
            return Err(Diag::new(
                AsmErrorKind::OperandKind { expected: describe_kind(kind), found: arg_text(arg) },
                arg.span.clone(),
            ));
        }
        let span = arg.span.clone();
        Ok(match (&arg.node, kind) {
            (ArgNode::Ident("none"), K::TensorOpt) => Operand::TensorOpt(None),
            (ArgNode::Ident("none"), K::RegOpt) => Operand::RegOpt(None),
            (ArgNode::Tensor { name, decl }, _) => {
                let id = match decl {
                    Some(ty) if info.opcode == Opcode::Alloc => {
                        self.declare_temp_inline(ctx, name, ty, &span)?
                    }
                    Some(ty) => {
                        return Err(Diag::other(
                            "a declaration `%name: type` is only allowed in `ALLOC`",
                            "declare it with `.tensor` or `ALLOC` instead",
                            ty.span.clone(),
                        ))
                    }
                    None => self.tensor_id(name, &span)?,
                };
                if kind == K::Tensor {
                    Operand::Tensor(id)
                } else {
                    Operand::TensorOpt(Some(id))
                }
            }
            (ArgNode::Ident(r), K::Reg | K::RegOpt) => {
                let n: u32 = r[1..].parse().unwrap_or(u32::MAX);
                if n >= NUM_REGS as u32 {
                    return Err(Diag::other(
                        format!("register `{r}` does not exist"),
                        format!("registers are `r0`..`r{}`", NUM_REGS - 1),
                        span,
                    ));
                }
                let reg = Reg(n as u8);
                if kind == K::Reg {
                    Operand::Reg(reg)
                } else {
                    Operand::RegOpt(Some(reg))
                }
            }
            (ArgNode::Ident(name), K::Label) => {
                uses.push(LabelUse { insn: 0, operand: oi, name: name.to_string(), span, ctx: ctx.clone() });
                Operand::Label(Target(u32::MAX))
            }
            (ArgNode::Number(t) | ArgNode::Ident(t), K::F32) => {
                Operand::F32(parse_f32(t).map_err(|why| {
                    Diag::new(
                        AsmErrorKind::BadNumber { text: t.to_string(), kind: "f32 immediate".into(), why },
                        span.clone(),
                    )
                })?)
            }
            (ArgNode::Number(t), K::I32) => Operand::I32(parse_elem(t, DType::I32).map_err(|why| {
                Diag::new(
                    AsmErrorKind::BadNumber { text: t.to_string(), kind: "i32 immediate".into(), why },
                    span.clone(),
                )
            })? as i32),
            (_, K::U32) => Operand::U32(int_arg(arg, "u32 immediate", 0, u32::MAX as i128)? as u32),
            (_, K::U16) => Operand::U16(int_arg(arg, "u16 immediate", 0, u16::MAX as i128)? as u16),
            (_, K::Axis) => {
                let m = MAX_RANK as i128;
                Operand::Axis(int_arg(arg, "axis", -m, m - 1)? as i8)
            }
            (ArgNode::List(items), K::Perm) => {
                let mut axes = Vec::new();
                for it in items {
                    axes.push(int_arg(it, "axis", 0, MAX_RANK as i128 - 1)? as u8);
                }
                Operand::Perm(Perm::new(&axes).ok_or_else(|| {
                    Diag::other(
                        format!("`{}` is not a permutation", &ctx.text[span.clone()]),
                        match axes.len() {
                            0 => "expected axes".to_string(),
                            n if n > MAX_RANK => format!("at most {MAX_RANK} axes"),
                            n => format!("expected each axis from 0 to {} exactly once", n - 1),
                        },
                        span.clone(),
                    )
                })?)
            }
            (ArgNode::Ident(b), K::Bool) => Operand::Bool(*b == "true"),
            (_, K::Bool) => Operand::Bool(int_arg(arg, "bool", 0, 1)? == 1),
            (ArgNode::Ident(a), K::Act) => Operand::Act(Act::from_name(a).ok_or_else(|| {
                Diag::new(
                    AsmErrorKind::OperandKind { expected: describe_kind(kind), found: a.to_string() },
                    span.clone(),
                )
            })?),
            (ArgNode::Ident(a), K::Dist) => Operand::Dist(Dist::from_name(a).ok_or_else(|| {
                Diag::new(
                    AsmErrorKind::OperandKind { expected: describe_kind(kind), found: a.to_string() },
                    span.clone(),
                )
            })?),
            (ArgNode::Ident(name), K::Output) => {
                Operand::Output(OutputId(lookup(&self.output_ids, "output", name, &span)?))
            }
            (ArgNode::Ident(name), K::Kernel) => {
                Operand::Kernel(KernelId(lookup(&self.kernel_ids, "kernel", name, &span)?))
            }
            _ => {
                return Err(Diag::new(
                    AsmErrorKind::OperandKind { expected: describe_kind(kind), found: arg_text(arg) },
                    span,
                ))
            }
        })
    }

    fn tensor_id(&self, name: &str, span: &Span) -> Result<TensorId, Diag> {
        match self.tensor_ids.get(name) {
            Some(&(id, _)) => Ok(TensorId(id)),
            None => {
                let suggestion =
                    suggest(name, self.tensor_ids.keys().map(|k| k.as_str())).map(|s| format!("%{s}"));
                Err(Diag::new(
                    AsmErrorKind::UnknownName {
                        what: "tensor",
                        name: format!("%{name}"),
                        suggestion,
                        hint: Some(
                            "declare it with `.input`, `.const`, `.tensor` or `ALLOC %name: type`".into(),
                        ),
                    },
                    span.clone(),
                ))
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Declarations

    fn resolve_shape(&mut self, ty: &TypeAst, concrete: bool) -> Result<(DType, Shape), Diag> {
        let dtype = DType::from_name(ty.dtype.node).ok_or_else(|| {
            let d = Diag::new(AsmErrorKind::BadDtype { name: ty.dtype.node.into() }, ty.dtype.span.clone());
            if BlockFormat::from_name(ty.dtype.node).is_some() {
                d.note(format!(
                    "`{}` is a storage type for constants only: `.const %w {}[N, K] = gguf(...)`",
                    ty.dtype.node, ty.dtype.node
                ))
            } else {
                d
            }
        })?;
        Ok((dtype, self.resolve_dims(ty, concrete)?))
    }

    /// The shape of a declared type (its dimensions, symbols added to the table as met).
    fn resolve_dims(&mut self, ty: &TypeAst, concrete: bool) -> Result<Shape, Diag> {
        if ty.dims.len() > MAX_RANK {
            return Err(Diag::new(
                AsmErrorKind::BadShape(format!("rank {} exceeds the maximum of {MAX_RANK}", ty.dims.len())),
                ty.span.clone(),
            ));
        }
        let mut shape = Vec::new();
        let mut new_syms = Vec::new();
        for d in &ty.dims {
            let dim_num = |text: &str, what: &str| -> Result<u32, Diag> {
                match text.trim().parse::<u64>() {
                    Ok(n) if n <= MAX_DIM as u64 => Ok(n as u32),
                    Ok(_) => Err(Diag::new(
                        AsmErrorKind::BadShape(format!("dimension {what} is larger than {MAX_DIM}")),
                        d.span.clone(),
                    )),
                    Err(_) => Err(Diag::new(
                        AsmErrorKind::BadShape(format!("{what} is not a dimension size")),
                        d.span.clone(),
                    )),
                }
            };
            match d.node {
                DimAst::Num(n) => shape.push(Dim::Const(dim_num(n, n)?)),
                DimAst::Name(n) => {
                    if let Some(v) = self.lookup_define(n, &[]) {
                        shape.push(Dim::Const(dim_num(&v, &format!("`{n}` (defined as `{v}`)"))?));
                    } else if concrete {
                        return Err(Diag::new(
                            AsmErrorKind::BadShape(format!(
                                "constants need concrete shapes, but `{n}` is symbolic"
                            )),
                            d.span.clone(),
                        )
                        .note(format!("give it a size with `.define {n} <size>` or `-D {n}=<size>`")));
                    } else if let Some(i) = self.syms.iter().position(|s| s == n) {
                        shape.push(Dim::Sym(SymId(i as u16)));
                    } else if let Some(i) = new_syms.iter().position(|s| s == n) {
                        shape.push(Dim::Sym(SymId((self.syms.len() + i) as u16)));
                    } else {
                        if self.syms.len() + new_syms.len() >= u16::MAX as usize {
                            return Err(Diag::new(
                                AsmErrorKind::BadShape("too many symbolic dims".into()),
                                d.span.clone(),
                            ));
                        }
                        shape.push(Dim::Sym(SymId((self.syms.len() + new_syms.len()) as u16)));
                        new_syms.push(n.to_string());
                    }
                }
            }
        }
        self.syms.extend(new_syms);
        Ok(shape)
    }

    fn check_new_tensor(&self, name: &str, span: &Span) -> Result<(), Diag> {
        if let Some(&(_, first_line)) = self.tensor_ids.get(name) {
            return Err(Diag::new(
                AsmErrorKind::DuplicateName { what: "tensor", name: format!("%{name}"), first_line },
                span.clone(),
            ));
        }
        if self.tensors.len() >= u16::MAX as usize {
            return Err(Diag::other("too many tensors", format!("at most {}", u16::MAX), span.clone()));
        }
        Ok(())
    }

    fn push_tensor(&mut self, ctx: &Ctx, decl: TensorDecl) -> TensorId {
        let id = self.tensors.len() as u16;
        self.tensor_ids.insert(decl.name.clone(), (id, ctx.line));
        self.tensors.push(decl);
        TensorId(id)
    }

    fn declare_temp_inline(
        &mut self,
        ctx: &Ctx,
        name: &str,
        ty: &TypeAst,
        span: &Span,
    ) -> Result<TensorId, Diag> {
        if let Some(&(id, first_line)) = self.tensor_ids.get(name) {
            // Re-declaring the same temporary identically (a `.rept` body, a loop) is fine.
            let (dtype, shape) = self.resolve_shape(ty, false)?;
            let t = &self.tensors[id as usize];
            if t.kind == TensorKind::Temp && t.dtype == dtype && t.shape == shape {
                return Ok(TensorId(id));
            }
            return Err(Diag::new(
                AsmErrorKind::DuplicateName { what: "tensor", name: format!("%{name}"), first_line },
                span.clone(),
            )
            .note(
                "an `ALLOC %name: type` may repeat an earlier declaration only if it is the same temporary",
            ));
        }
        self.check_new_tensor(name, span)?;
        let (dtype, shape) = self.resolve_shape(ty, false)?;
        Ok(self.push_tensor(ctx, TensorDecl { name: name.into(), dtype, shape, kind: TensorKind::Temp }))
    }

    fn directive(&mut self, ctx: &Ctx, name: Sp<&str>, mut c: Cursor) -> Result<(), Diag> {
        match name.node {
            "tier" => {
                let t = c.ident("`strict` or `fast`")?;
                let tier = Tier::from_name(t.node).ok_or_else(|| {
                    Diag::new(
                        AsmErrorKind::BadValue {
                            expected: "`strict` or `fast`".into(),
                            found: t.node.into(),
                        },
                        t.span.clone(),
                    )
                })?;
                c.end()?;
                if let Some((_, first_line)) = self.tier {
                    return Err(Diag::new(
                        AsmErrorKind::DuplicateName { what: "directive", name: ".tier".into(), first_line },
                        name.span,
                    ));
                }
                self.tier = Some((tier, ctx.line));
            }
            "file" => {
                let s = c.string("a quoted name, as in `.file \"prog.s\"`")?;
                c.end()?;
                self.file = Some(s.node);
            }
            "define" => {
                let n = c.ident("a name, as in `.define NAME VALUE`")?;
                c.ws();
                let mut value = c.rest.trim().to_string();
                if value.is_empty() {
                    return Err(c.expected("a value, as in `.define NAME VALUE`"));
                }
                if self.opts.defines.iter().any(|(k, _)| k == n.node) {
                    return Ok(()); // -D on the command line wins
                }
                if value.starts_with("gguf_meta(") {
                    // `.define NAME gguf_meta("path", "key")`: the metadata value's text.
                    let call = c.value()?;
                    c.end()?;
                    value = gguf_meta_text(&self.files, &self.opts.base_dir, &call)?;
                }
                if let Some((old, first_line)) = self.defines.get(n.node) {
                    if *old != value {
                        return Err(Diag::other(
                            format!("`{}` is already defined with a different value", n.node),
                            format!("defined as `{old}` on line {first_line}"),
                            n.span,
                        ));
                    }
                }
                self.defines.insert(n.node.to_string(), (value, ctx.line));
            }
            "vocab" => {
                // `.vocab gguf("path")`: the model's `tokenizer.*` metadata, for `generate`.
                let call = c.value()?;
                c.end()?;
                if let Some((_, first_line)) = self.vocab {
                    return Err(Diag::new(
                        AsmErrorKind::DuplicateName { what: "directive", name: ".vocab".into(), first_line },
                        name.span,
                    ));
                }
                let bytes = gguf_vocab(&self.files, &self.opts.base_dir, &call)?;
                self.vocab = Some((bytes, ctx.line));
            }
            "dim" => loop {
                let d = c.ident("a symbolic dimension name")?;
                if let Some(&first_line) = self.dims_declared.get(d.node) {
                    return Err(Diag::new(
                        AsmErrorKind::DuplicateName {
                            what: "symbolic dimension",
                            name: d.node.into(),
                            first_line,
                        },
                        d.span,
                    ));
                }
                if self.lookup_define(d.node, &[]).is_some() {
                    return Err(Diag::other(
                        format!("`{}` is a define, not a symbolic dimension", d.node),
                        "defined with `-D` or `.define`",
                        d.span,
                    ));
                }
                self.dims_declared.insert(d.node.to_string(), ctx.line);
                if !self.syms.iter().any(|s| s == d.node) {
                    self.syms.push(d.node.to_string());
                }
                if !c.eat(',') {
                    return c.end();
                }
            },
            "input" | "tensor" => {
                let n = c.tensor_name()?;
                self.check_new_tensor(n.node, &n.span)?;
                let ty = c.type_ast()?;
                c.end()?;
                let (dtype, shape) = self.resolve_shape(&ty, false)?;
                let kind = if name.node == "input" { TensorKind::Input } else { TensorKind::Temp };
                self.push_tensor(ctx, TensorDecl { name: n.node.into(), dtype, shape, kind });
            }
            "const" => {
                let n = c.tensor_name()?;
                self.check_new_tensor(n.node, &n.span)?;
                let ty = c.type_ast()?;
                c.expect('=', "`=` and the constant's value")?;
                let value = c.value()?;
                c.end()?;
                // A block-quantized constant (`q8_0`, `q4_1`) holds f32 values.
                let blocks = BlockFormat::from_name(ty.dtype.node);
                let (dtype, shape) = match blocks {
                    Some(_) => (DType::F32, self.resolve_dims(&ty, true)?),
                    None => self.resolve_shape(&ty, true)?,
                };
                let dims: Vec<u32> =
                    shape.iter().map(|d| if let Dim::Const(n) = d { *n } else { 0 }).collect();
                let offset = self.data.len().next_multiple_of(DATA_ALIGN);
                let target = ConstTarget {
                    name: n.node,
                    dtype,
                    dims: &dims,
                    base_dir: &self.opts.base_dir,
                    files: &self.files,
                    data_used: offset as u64,
                };
                let stored = match blocks {
                    Some(format) => materialize_blocks(&target, format, &value)?,
                    None => materialize(&target, &value)?,
                };
                let data = match stored {
                    ConstValue::Splat(bits) => ConstData::Splat(bits),
                    ConstValue::Bytes(b) => {
                        // `materialize` kept the total within MAX_DATA_BYTES; the memory for it
                        // may still be more than this machine has.
                        if self.data.try_reserve(offset - self.data.len() + b.len()).is_err() {
                            return Err(Diag::other(
                                format!(
                                    "not enough memory for the program's constants ({} bytes with `%{}`)",
                                    offset + b.len(),
                                    n.node
                                ),
                                "while storing this value",
                                value.span.clone(),
                            ));
                        }
                        self.data.resize(offset, 0);
                        self.data.extend_from_slice(&b);
                        let (offset, len) = (offset as u64, b.len() as u64);
                        match blocks {
                            Some(format) => ConstData::Blocks { format, offset, len },
                            None => ConstData::Bytes { offset, len },
                        }
                    }
                };
                self.push_tensor(
                    ctx,
                    TensorDecl { name: n.node.into(), dtype, shape, kind: TensorKind::Const(data) },
                );
            }
            "output" => {
                let n = c.ident("an output name (no `%`)")?;
                if let Some(&(_, first_line)) = self.output_ids.get(n.node) {
                    return Err(Diag::new(
                        AsmErrorKind::DuplicateName { what: "output", name: n.node.into(), first_line },
                        n.span,
                    ));
                }
                let ty = c.type_ast()?;
                c.end()?;
                let (dtype, shape) = self.resolve_shape(&ty, false)?;
                if self.outputs.len() >= u16::MAX as usize {
                    return Err(Diag::other("too many outputs", format!("at most {}", u16::MAX), n.span));
                }
                self.output_ids.insert(n.node.into(), (self.outputs.len() as u16, ctx.line));
                self.outputs.push(OutputDecl { name: n.node.into(), dtype, shape });
            }
            "spirv" => self.spirv_directive(ctx, c)?,
            "kernel" => self.kernel_directive(ctx, c)?,
            "origin" => {
                let s = c.string("a quoted name, as in `.origin \"node_1\"`")?;
                c.end()?;
                let at = self.insns.len() as u32;
                if self.origins.last().is_some_and(|(prev, _)| *prev == at) {
                    self.origins.pop();
                }
                if self.origins.last().is_none_or(|(_, n)| *n != s.node) {
                    self.origins.push((at, s.node));
                }
            }
            "loc" => {
                let v = c.value()?;
                let n = int_arg(&v, "line number", 0, u32::MAX as i128)? as u32;
                c.end()?;
                self.pending_loc = Some(n);
            }
            "rept" | "endr" => {
                return Err(Diag::other(
                    format!("`.{}` must begin its line", name.node),
                    "a label may not come before it",
                    name.span,
                ))
            }
            other => {
                let suggestion = suggest(other, DIRECTIVES.iter().copied()).map(|s| format!(".{s}"));
                return Err(Diag::new(
                    AsmErrorKind::UnknownDirective { name: other.into(), suggestion },
                    name.span,
                ));
            }
        }
        Ok(())
    }

    fn spirv_directive(&mut self, ctx: &Ctx, mut c: Cursor) -> Result<(), Diag> {
        let n = c.ident("a module name, as in `.spirv mod = file(\"k.spv\")`")?;
        if let Some(&(_, first_line)) = self.spirv_ids.get(n.node) {
            return Err(Diag::new(
                AsmErrorKind::DuplicateName { what: "SPIR-V module", name: n.node.into(), first_line },
                n.span,
            ));
        }
        c.expect('=', "`=`")?;
        let v = c.value()?;
        c.end()?;
        let words = match &v.node {
            ArgNode::Call { name, args } if name.node == "file" && args.len() == 1 => {
                let ArgNode::Str(path) = &args[0].node else {
                    return Err(wrong(&args[0], "a path string `\"...\"`"));
                };
                let span = args[0].span.clone();
                let bytes = super::consts::read_file(&self.opts.base_dir, path, span.clone())?;
                let words: Vec<u32> =
                    bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
                if bytes.len() % 4 != 0 || words.first() != Some(&0x0723_0203) {
                    return Err(Diag::new(
                        AsmErrorKind::FileMismatch(format!(
                            "`{path}` is not a SPIR-V module (it must be little-endian words starting with 0x07230203)"
                        )),
                        span,
                    ));
                }
                words
            }
            ArgNode::Call { name, args } if name.node == "words" => {
                let mut words = Vec::with_capacity(args.len());
                for a in args {
                    words.push(int_arg(a, "SPIR-V word", 0, u32::MAX as i128)? as u32);
                }
                words
            }
            _ => return Err(wrong(&v, "`file(\"path.spv\")` or `words(...)`")),
        };
        if self.spirv.len() >= u16::MAX as usize {
            return Err(Diag::other("too many SPIR-V modules", format!("at most {}", u16::MAX), n.span));
        }
        self.spirv_ids.insert(n.node.into(), (self.spirv.len() as u16, ctx.line));
        self.spirv.push(SpirvModule { name: n.node.into(), words });
        Ok(())
    }

    fn kernel_directive(&mut self, ctx: &Ctx, mut c: Cursor) -> Result<(), Diag> {
        let n = c.ident("a kernel name, as in `.kernel k = mod \"main\" ...`")?;
        if let Some(&(_, first_line)) = self.kernel_ids.get(n.node) {
            return Err(Diag::new(
                AsmErrorKind::DuplicateName { what: "kernel", name: n.node.into(), first_line },
                n.span,
            ));
        }
        c.expect('=', "`=`")?;
        let m = c.ident("a SPIR-V module name declared with `.spirv`")?;
        let module = lookup(&self.spirv_ids, "SPIR-V module", m.node, &m.span)?;
        let entry = c.string("the entry point's name as a string, like `\"main\"`")?;
        let mut bindings = None;
        let mut push: Option<Vec<u8>> = None;
        let mut groups = None;
        loop {
            c.ws();
            if c.at_end() {
                break;
            }
            let v = c.value()?;
            let ArgNode::Call { name, args } = &v.node else {
                return Err(wrong(&v, "`bindings(...)`, `push(...)` or `groups(x, y, z)`"));
            };
            let seen = match name.node {
                "bindings" => bindings.is_some(),
                "push" => push.is_some(),
                "groups" => groups.is_some(),
                _ => return Err(wrong(&v, "`bindings(...)`, `push(...)` or `groups(x, y, z)`")),
            };
            if seen {
                return Err(Diag::other(
                    format!("`{}(...)` is given twice", name.node),
                    "given again here",
                    v.span.clone(),
                ));
            }
            match name.node {
                "bindings" => {
                    let mut b = Vec::new();
                    for a in args {
                        match &a.node {
                            ArgNode::Tensor { name, decl: None } => b.push(self.tensor_id(name, &a.span)?),
                            _ => return Err(wrong(a, "a tensor `%name`")),
                        }
                    }
                    bindings = Some(b);
                }
                "push" => {
                    let mut bytes = Vec::new();
                    for a in args {
                        let ArgNode::Typed { ty, value } = &a.node else {
                            return Err(wrong(a, "a typed value like `f32 2.0` or `u32 4`"));
                        };
                        let text = match value.node {
                            ArgNode::Number(t) => t,
                            _ => return Err(wrong(value, "a number")),
                        };
                        let bad = |why: String| {
                            Diag::new(
                                AsmErrorKind::BadNumber {
                                    text: text.into(),
                                    kind: "push constant".into(),
                                    why,
                                },
                                value.span.clone(),
                            )
                        };
                        match ty.node {
                            "f32" => bytes.extend(parse_f32(text).map_err(bad)?.to_bits().to_le_bytes()),
                            "i32" => bytes.extend(parse_elem(text, DType::I32).map_err(bad)?.to_le_bytes()),
                            "u32" => bytes
                                .extend((int_arg(value, "u32", 0, u32::MAX as i128)? as u32).to_le_bytes()),
                            "u16" => bytes
                                .extend((int_arg(value, "u16", 0, u16::MAX as i128)? as u16).to_le_bytes()),
                            "u8" => bytes.push(int_arg(value, "u8", 0, u8::MAX as i128)? as u8),
                            _ => {
                                return Err(Diag::new(
                                    AsmErrorKind::BadValue {
                                        expected: "a push constant type (`f32`, `i32`, `u32`, `u16`, `u8`)"
                                            .into(),
                                        found: ty.node.into(),
                                    },
                                    ty.span.clone(),
                                ))
                            }
                        }
                    }
                    push = Some(bytes);
                }
                _ => {
                    if args.len() != 3 {
                        return Err(Diag::other(
                            "`groups` takes three workgroup counts",
                            "expected `groups(x, y, z)`",
                            v.span.clone(),
                        ));
                    }
                    let mut g = [0u32; 3];
                    for (slot, a) in g.iter_mut().zip(args) {
                        *slot = int_arg(a, "workgroup count", 0, u32::MAX as i128)? as u32;
                    }
                    groups = Some(g);
                }
            }
        }
        if self.kernels.len() >= u16::MAX as usize {
            return Err(Diag::other("too many kernels", format!("at most {}", u16::MAX), n.span));
        }
        self.kernel_ids.insert(n.node.into(), (self.kernels.len() as u16, ctx.line));
        self.kernels.push(KernelDecl {
            name: n.node.into(),
            module,
            entry: entry.node,
            bindings: bindings.unwrap_or_default(),
            push: push.unwrap_or_default(),
            groups: groups.unwrap_or([1, 1, 1]),
        });
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<Program, AsmErrors> {
        let labels: HashMap<&str, u32> = self.labels.iter().map(|(n, i)| (n.as_str(), *i)).collect();
        let mut unresolved = Vec::new();
        for u in &self.label_uses {
            match labels.get(u.name.as_str()) {
                Some(&at) => self.insns[u.insn].operands[u.operand] = Operand::Label(Target(at)),
                None => {
                    let suggestion = suggest(&u.name, labels.keys().copied());
                    let hint = Some("no label by this name is defined in this file".to_string());
                    unresolved.push((
                        u.ctx.clone(),
                        Diag::new(
                            AsmErrorKind::UnknownName {
                                what: "label",
                                name: u.name.clone(),
                                suggestion,
                                hint,
                            },
                            u.span.clone(),
                        ),
                    ));
                }
            }
        }
        for (ctx, d) in unresolved {
            self.report(&ctx, d);
        }
        self.errors.sort_by_key(|e| e.line);
        if !self.errors.is_empty() {
            return Err(AsmErrors { path: self.path, errors: self.errors });
        }
        // Every operand list was checked with `Insn::from_operands` when it was assembled, and
        // label fix-ups keep the kind, so this never drops an instruction.
        let code: Vec<_> = self
            .insns
            .iter()
            .filter_map(|p| Insn::from_operands(p.opcode, &p.operands))
            .zip(&self.insns)
            .map(|(insn, p)| Instruction { insn, placement: p.placement }.encode())
            .collect();
        let code_len = code.len();
        Ok(Program {
            tier: self.tier.map_or(Tier::Strict, |(t, _)| t),
            code,
            syms: self.syms,
            tensors: self.tensors,
            outputs: self.outputs,
            spirv: self.spirv,
            kernels: self.kernels,
            debug: DebugInfo {
                source: self.file.unwrap_or_else(|| source_name(&self.path)),
                lines: self.lines,
                labels: self.labels,
                // An origin after the last instruction names nothing.
                origins: self.origins.into_iter().filter(|(at, _)| (*at as usize) < code_len).collect(),
            },
            data: Blob::from_vec(self.data),
            vocab: self.vocab.map(|(v, _)| v).unwrap_or_default(),
            ..Program::default()
        })
    }
}

fn info_mnemonic(cands: &[&OpInfo]) -> String {
    cands.first().map_or_else(String::new, |c| c.mnemonic.to_string())
}

fn wrong(arg: &Arg, expected: &str) -> Diag {
    Diag::new(AsmErrorKind::BadValue { expected: expected.into(), found: arg_text(arg) }, arg.span.clone())
}

fn lookup(
    map: &HashMap<String, (u16, usize)>,
    what: &'static str,
    name: &str,
    span: &Span,
) -> Result<u16, Diag> {
    match map.get(name) {
        Some(&(id, _)) => Ok(id),
        None => {
            let suggestion = suggest(name, map.keys().map(|k| k.as_str()));
            let hint = Some(match what {
                "output" => "declare it with `.output NAME type`".to_string(),
                "kernel" => "declare it with `.kernel NAME = module \"entry\" ...`".to_string(),
                "SPIR-V module" => "declare it with `.spirv NAME = file(\"...\")`".to_string(),
                _ => format!("no {what} by this name is declared"),
            });
            Err(Diag::new(
                AsmErrorKind::UnknownName { what, name: name.into(), suggestion, hint },
                span.clone(),
            ))
        }
    }
}

/// The name the program records as its source when no `.file` gives one: the file name alone,
/// without the folders of the path it was assembled from. The debug section is covered by the
/// digest, the program's identity, so a path as typed (`programs/mlp.s`, `/home/u/programs/mlp.s`
/// or `mlp.s` from inside `programs/`) would give the same program three identities.
fn source_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |name| name.to_string_lossy().into_owned())
}
