//! The disassembler: a [`Program`] back to canonical assembly that [`super::assemble`] turns
//! into identical bytes (`to_bytes`).
//!
//! Layout of the output: `.file`, `.tier`, `.vocab` (if the program carries one: `vocab.gguf`
//! in the data folder, or inline as `hex("...")`), `.dim` (every symbol, in order), every tensor-table
//! entry in id order (`.input` / `.const` / `.tensor`), `.output`s, `.spirv` modules (as
//! `words(...)`), `.kernel`s, then the code: labels from the debug info, `.loc N` before each
//! instruction (so source lines survive), the mnemonic with its placement, the required
//! operands, then the optional operands that differ from their defaults.
//!
//! Exactness: f32 values print with Rust's `{:?}` (the shortest decimal that parses back to the
//! same bits); NaNs print as their raw bits (`0x7fc00000`), since NaN payloads matter to bit
//! comparisons. f16/bf16 values print as the f32 `{:?}` of their exact value, which converts
//! back exactly. Constants of at most [`INLINE_MAX`] elements are written inline; larger ones go
//! to `.npy` files in `DisasmOptions::data_dir` (when given), referenced relative to
//! `DisasmOptions::asm_dir`, the folder the `.s` will be written to.
//!
//! Limits, for programs that did not come from this assembler:
//! - a jump target with no label gets a synthesized one, `L<index>`, which the re-assembled
//!   program then carries in its debug info (so the bytes differ from a label-less original);
//! - labels print at their positions in code order, so debug labels stored out of position
//!   order come back sorted;
//! - constants re-assemble packed in id order at 64-byte aligned offsets.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use half::{bf16, f16};
use thiserror::Error;

use crate::format::{is_identifier, ConstData, Program, TensorKind};
use crate::isa::{BlockFormat, DType, DecodeError, Dim, Instruction, Operand};

/// Constants with at most this many elements are written inline.
pub const INLINE_MAX: u64 = 64;

/// How many leading values (or vocabulary bytes) a summarized constant shows.
const SUMMARY_SHOWN: usize = 8;

/// The note after a summarized value: it is not assembly, and how to get the whole of it.
const SUMMARY_NOTE: &str = "elided; `disasm -o FILE` writes it to FILE.data, `--constants full` prints it";

/// How to disassemble.
#[derive(Debug, Clone)]
pub struct DisasmOptions {
    /// Where to write large constants as `.npy` files; `None` writes every constant inline.
    pub data_dir: Option<PathBuf>,
    /// The folder the `.s` file will be written to; `.npy` paths are relative to it.
    pub asm_dir: PathBuf,
    /// For reading, not assembling: constants of more than [`INLINE_MAX`] elements (when no
    /// `data_dir` takes them) and the vocabulary are shown by their first values and size only,
    /// so a model's weights do not flood a terminal. The text then does not assemble.
    pub summarize_large: bool,
}

impl Default for DisasmOptions {
    fn default() -> DisasmOptions {
        DisasmOptions { data_dir: None, asm_dir: PathBuf::from("."), summarize_large: false }
    }
}

/// Why a program cannot be written as assembly.
#[derive(Debug, Error)]
pub enum DisasmError {
    #[error("instruction {index} cannot be decoded: {source}")]
    Decode { index: usize, source: DecodeError },
    #[error("instruction {index} ({mnemonic}) refers to {what} {id}, which does not exist")]
    BadReference { index: usize, mnemonic: &'static str, what: &'static str, id: u64 },
    #[error(
        "instruction {index} ({mnemonic}) jumps to {target}, past the end of the code ({len} instructions)"
    )]
    BadTarget { index: usize, mnemonic: &'static str, target: u32, len: usize },
    #[error("{what} name {name:?} cannot be written in assembly")]
    BadName { what: &'static str, name: String },
    #[error("{what} name {name:?} appears twice")]
    DuplicateName { what: &'static str, name: String },
    #[error("tensor `%{name}`: {what}")]
    BadTensor { name: String, what: String },
    #[error("kernel `{name}`: {what}")]
    BadKernel { name: String, what: String },
    #[error("label {name:?} points at instruction {at}, past the end of the code")]
    BadLabel { name: String, at: u32 },
    #[error("cannot write {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

type Result<T, E = DisasmError> = std::result::Result<T, E>;

/// Formats an f32 exactly: `{:?}`, or the raw bits for NaN.
pub fn f32_text(v: f32) -> String {
    if v.is_nan() {
        format!("0x{:08x}", v.to_bits())
    } else {
        format!("{v:?}")
    }
}

/// Formats one element (its bits, zero-extended) of `dtype` exactly.
pub fn elem_text(bits: u32, dtype: DType) -> String {
    match dtype {
        DType::F32 => f32_text(f32::from_bits(bits)),
        DType::I32 => (bits as i32).to_string(),
        DType::F16 => {
            let h = f16::from_bits(bits as u16);
            if h.is_nan() {
                format!("0x{:04x}", bits)
            } else {
                format!("{:?}", h.to_f32())
            }
        }
        DType::Bf16 => {
            let h = bf16::from_bits(bits as u16);
            if h.is_nan() {
                format!("0x{:04x}", bits)
            } else {
                format!("{:?}", h.to_f32())
            }
        }
    }
}

/// How a default operand value reads in assembly (for usage notes).
pub fn operand_default_text(op: &Operand) -> String {
    match *op {
        Operand::TensorOpt(None) | Operand::RegOpt(None) => "none".into(),
        Operand::TensorOpt(Some(t)) => format!("%{}", t.0),
        Operand::RegOpt(Some(r)) | Operand::Reg(r) => format!("r{}", r.0),
        Operand::F32(v) => f32_text(v),
        Operand::I32(v) => v.to_string(),
        Operand::U32(v) => v.to_string(),
        Operand::U16(v) => v.to_string(),
        Operand::Axis(v) => v.to_string(),
        Operand::Bool(v) => v.to_string(),
        Operand::Act(a) => a.name().into(),
        Operand::Dist(d) => d.name().into(),
        Operand::Perm(p) => perm_text(p.axes()),
        Operand::Tensor(t) => format!("%{}", t.0),
        Operand::Label(t) => t.0.to_string(),
        Operand::Output(o) => o.0.to_string(),
        Operand::Kernel(k) => k.0.to_string(),
    }
}

fn perm_text(axes: &[u8]) -> String {
    let v: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
    format!("[{}]", v.join(", "))
}

fn quote(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o += "\\\"",
            '\\' => o += "\\\\",
            '\n' => o += "\\n",
            '\t' => o += "\\t",
            c => o.push(c),
        }
    }
    o + "\""
}

fn is_tensor_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

fn check_names<'a>(
    what: &'static str,
    names: impl IntoIterator<Item = &'a str>,
    valid: fn(&str) -> bool,
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for n in names {
        if !valid(n) {
            return Err(DisasmError::BadName { what, name: n.into() });
        }
        if !seen.insert(n) {
            return Err(DisasmError::DuplicateName { what, name: n.into() });
        }
    }
    Ok(())
}

/// Lexically normalized absolute form of `p` (no file system access).
fn absolute(p: &Path) -> PathBuf {
    let base = if p.is_absolute() { PathBuf::new() } else { std::env::current_dir().unwrap_or_default() };
    let mut out = PathBuf::new();
    for c in base.join(p).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `target` relative to folder `from`, with `/` separators.
fn relative(target: &Path, from: &Path) -> String {
    let t = absolute(target);
    let f = absolute(from);
    let tc: Vec<_> = t.components().collect();
    let fc: Vec<_> = f.components().collect();
    let common = tc.iter().zip(&fc).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); fc.len() - common];
    parts.extend(tc[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    parts.join("/")
}

struct Dis<'p> {
    p: &'p Program,
    opts: &'p DisasmOptions,
}

impl Dis<'_> {
    fn shape(&self, shape: &[Dim], owner: &str) -> Result<String> {
        let mut parts = Vec::new();
        for d in shape {
            parts.push(match *d {
                Dim::Const(n) => n.to_string(),
                Dim::Sym(s) => {
                    self.p.syms.get(s.0 as usize).cloned().ok_or_else(|| DisasmError::BadTensor {
                        name: owner.into(),
                        what: format!("symbolic dimension {} does not exist", s.0),
                    })?
                }
            });
        }
        Ok(format!("[{}]", parts.join(", ")))
    }

    fn const_value(&self, name: &str, dtype: DType, shape: &[Dim], data: &ConstData) -> Result<String> {
        let bad = |what: String| DisasmError::BadTensor { name: name.into(), what };
        match *data {
            ConstData::Splat(bits) => {
                if dtype.size() == 2 && bits > 0xFFFF {
                    return Err(bad(format!("splat bits {bits:#x} do not fit a {dtype}")));
                }
                let one = match dtype {
                    DType::I32 => 1,
                    DType::F32 => 1f32.to_bits(),
                    DType::F16 => f16::ONE.to_bits() as u32,
                    DType::Bf16 => bf16::ONE.to_bits() as u32,
                };
                Ok(if bits == 0 {
                    "zeros".into()
                } else if bits == one {
                    "ones".into()
                } else {
                    format!("fill({})", elem_text(bits, dtype))
                })
            }
            ConstData::Blocks { format, .. } => {
                let bytes = self
                    .p
                    .const_bytes(data)
                    .ok_or_else(|| bad("data lies outside the data section".into()))?;
                let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
                match &self.opts.data_dir {
                    Some(dir) if bytes.len() > INLINE_MAX as usize => {
                        // A GGUF file of this one tensor, which `gguf(...)` reads back as is.
                        let file = dir.join(format!("{name}.gguf"));
                        write_gguf(&file, name, format, shape, bytes)?;
                        Ok(format!("gguf({}, {})", quote(&relative(&file, &self.opts.asm_dir)), quote(name)))
                    }
                    None if self.opts.summarize_large && bytes.len() > INLINE_MAX as usize => Ok(format!(
                        "blocks(\"{}...\")  ; {} bytes of {format} blocks, {SUMMARY_NOTE}",
                        hex(&bytes[..SUMMARY_SHOWN.min(bytes.len())]),
                        bytes.len()
                    )),
                    _ => Ok(format!("blocks(\"{}\")", hex(bytes))),
                }
            }
            ConstData::Bytes { .. } => {
                let mut n: u64 = 1;
                for d in shape {
                    match *d {
                        Dim::Const(k) => n = n.saturating_mul(k as u64),
                        Dim::Sym(_) => return Err(bad("a constant with a symbolic dimension".into())),
                    }
                }
                let bytes = self
                    .p
                    .const_bytes(data)
                    .ok_or_else(|| bad("data lies outside the data section".into()))?;
                if bytes.len() as u64 != n.saturating_mul(dtype.size() as u64) {
                    return Err(bad(format!("{} data bytes for {n} elements of {dtype}", bytes.len())));
                }
                let elems: Vec<u32> = bytes
                    .chunks_exact(dtype.size())
                    .map(|c| {
                        if c.len() == 4 {
                            u32::from_le_bytes([c[0], c[1], c[2], c[3]])
                        } else {
                            u16::from_le_bytes([c[0], c[1]]) as u32
                        }
                    })
                    .collect();
                match &self.opts.data_dir {
                    Some(dir) if n > INLINE_MAX => {
                        let file = dir.join(format!("{name}.npy"));
                        write_npy(&file, dtype, shape, &elems)?;
                        Ok(format!("npy({})", quote(&relative(&file, &self.opts.asm_dir))))
                    }
                    None if self.opts.summarize_large && n > INLINE_MAX => {
                        let v: Vec<String> =
                            elems.iter().take(SUMMARY_SHOWN).map(|&b| elem_text(b, dtype)).collect();
                        Ok(format!("[{}, ...]  ; {n} values, {SUMMARY_NOTE}", v.join(", ")))
                    }
                    _ => {
                        let v: Vec<String> = elems.iter().map(|&b| elem_text(b, dtype)).collect();
                        Ok(format!("[{}]", v.join(", ")))
                    }
                }
            }
        }
    }

    fn run(&self) -> Result<String> {
        let p = self.p;
        check_names("tensor", p.tensors.iter().map(|t| t.name.as_str()), is_tensor_name)?;
        check_names("output", p.outputs.iter().map(|t| t.name.as_str()), is_identifier)?;
        check_names("symbolic dimension", p.syms.iter().map(|t| t.as_str()), is_identifier)?;
        check_names("SPIR-V module", p.spirv.iter().map(|t| t.name.as_str()), is_identifier)?;
        check_names("kernel", p.kernels.iter().map(|t| t.name.as_str()), is_identifier)?;
        check_names("label", p.debug.labels.iter().map(|t| t.0.as_str()), is_identifier)?;

        let mut out = String::new();
        let _ = writeln!(out, "; disassembled by adeadvm {}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(out, ".file {}", quote(&p.debug.source));
        let _ = writeln!(out, ".tier {}", p.tier.name());
        if !p.vocab.is_empty() {
            // The vocabulary: a GGUF file in the data folder, else its bytes in hex.
            let _ = match &self.opts.data_dir {
                Some(dir) => {
                    let file = dir.join("vocab.gguf");
                    let io =
                        |source: std::io::Error| DisasmError::Io { path: file.display().to_string(), source };
                    std::fs::create_dir_all(dir).map_err(io)?;
                    crate::output::write_atomically(&file, &p.vocab).map_err(io)?;
                    writeln!(out, ".vocab gguf({})", quote(&relative(&file, &self.opts.asm_dir)))
                }
                None if self.opts.summarize_large && p.vocab.len() > SUMMARY_SHOWN => {
                    let hex: String =
                        p.vocab.iter().take(SUMMARY_SHOWN).map(|b| format!("{b:02x}")).collect();
                    writeln!(out, ".vocab hex(\"{hex}...\")  ; {} bytes, {SUMMARY_NOTE}", p.vocab.len())
                }
                None => {
                    let hex: String = p.vocab.iter().map(|b| format!("{b:02x}")).collect();
                    writeln!(out, ".vocab hex(\"{hex}\")")
                }
            };
        }
        if !p.syms.is_empty() {
            let _ = writeln!(out, ".dim {}", p.syms.join(", "));
        }
        for t in &p.tensors {
            let element = match t.kind {
                TensorKind::Const(ConstData::Blocks { format, .. }) => format.name(),
                _ => t.dtype.name(),
            };
            let ty = format!("{element}{}", self.shape(&t.shape, &t.name)?);
            let _ = match t.kind {
                TensorKind::Input => writeln!(out, ".input %{} {ty}", t.name),
                TensorKind::Temp => writeln!(out, ".tensor %{} {ty}", t.name),
                TensorKind::Const(c) => {
                    let v = self.const_value(&t.name, t.dtype, &t.shape, &c)?;
                    writeln!(out, ".const %{} {ty} = {v}", t.name)
                }
            };
        }
        for o in &p.outputs {
            let _ = writeln!(out, ".output {} {}{}", o.name, o.dtype, self.shape(&o.shape, &o.name)?);
        }
        for m in &p.spirv {
            let w: Vec<String> = m.words.iter().map(|w| format!("0x{w:08x}")).collect();
            let _ = writeln!(out, ".spirv {} = words({})", m.name, w.join(", "));
        }
        for k in &p.kernels {
            let bad = |what: String| DisasmError::BadKernel { name: k.name.clone(), what };
            let module = p
                .spirv
                .get(k.module as usize)
                .ok_or_else(|| bad(format!("SPIR-V module {} does not exist", k.module)))?;
            let mut line = format!(".kernel {} = {} {}", k.name, module.name, quote(&k.entry));
            if !k.bindings.is_empty() {
                let mut b = Vec::new();
                for t in &k.bindings {
                    let tensor = p
                        .tensors
                        .get(t.0 as usize)
                        .ok_or_else(|| bad(format!("binds tensor {}, which does not exist", t.0)))?;
                    b.push(format!("%{}", tensor.name));
                }
                let _ = write!(line, " bindings({})", b.join(", "));
            }
            if !k.push.is_empty() {
                let mut items: Vec<String> = k
                    .push
                    .chunks_exact(4)
                    .map(|c| format!("u32 {}", u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect();
                items.extend(k.push.chunks_exact(4).remainder().iter().map(|b| format!("u8 {b}")));
                let _ = write!(line, " push({})", items.join(", "));
            }
            let _ = writeln!(out, "{line} groups({}, {}, {})", k.groups[0], k.groups[1], k.groups[2]);
        }

        // Decode everything first: labels may need to be synthesized for jump targets.
        let mut insns = Vec::with_capacity(p.code.len());
        for (index, b) in p.code.iter().enumerate() {
            insns.push(Instruction::decode(b).map_err(|source| DisasmError::Decode { index, source })?);
        }
        let mut labels_at: HashMap<u32, Vec<String>> = HashMap::new();
        let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
        for (name, at) in &p.debug.labels {
            if *at as usize > p.code.len() {
                return Err(DisasmError::BadLabel { name: name.clone(), at: *at });
            }
            labels_at.entry(*at).or_default().push(name.clone());
            names.insert(name.clone());
        }
        for (index, i) in insns.iter().enumerate() {
            for op in i.insn.operands() {
                if let Operand::Label(t) = op {
                    if t.0 as usize > p.code.len() {
                        return Err(DisasmError::BadTarget {
                            index,
                            mnemonic: i.insn.info().mnemonic,
                            target: t.0,
                            len: p.code.len(),
                        });
                    }
                    if let std::collections::hash_map::Entry::Vacant(e) = labels_at.entry(t.0) {
                        let mut name = format!("L{}", t.0);
                        let mut k = 1;
                        while names.contains(&name) {
                            name = format!("L{}_{k}", t.0);
                            k += 1;
                        }
                        names.insert(name.clone());
                        e.insert(vec![name]);
                    }
                }
            }
        }
        let label_of = |at: u32| labels_at.get(&at).and_then(|v| v.first()).cloned().unwrap_or_default();

        let origins_at: HashMap<u32, &str> =
            p.debug.origins.iter().map(|(at, n)| (*at, n.as_str())).collect();
        let _ = writeln!(out);
        for (index, i) in insns.iter().enumerate() {
            for l in labels_at.get(&(index as u32)).into_iter().flatten() {
                let _ = writeln!(out, "{l}:");
            }
            if let Some(name) = origins_at.get(&(index as u32)) {
                let _ = writeln!(out, ".origin {}", quote(name));
            }
            let _ = writeln!(out, ".loc {}", p.debug.lines.get(index).copied().unwrap_or(0));
            let info = i.insn.info();
            let mut parts = Vec::new();
            for (op, oi) in i.insn.operands().iter().zip(info.operands) {
                let reference = |what: &'static str, id: u64| DisasmError::BadReference {
                    index,
                    mnemonic: info.mnemonic,
                    what,
                    id,
                };
                let tensor = |t: u16| {
                    p.tensors
                        .get(t as usize)
                        .map(|d| format!("%{}", d.name))
                        .ok_or(reference("tensor", t as u64))
                };
                let text = match *op {
                    Operand::Tensor(t) | Operand::TensorOpt(Some(t)) => tensor(t.0)?,
                    Operand::Label(t) => label_of(t.0),
                    Operand::Output(o) => p
                        .outputs
                        .get(o.0 as usize)
                        .map(|d| d.name.clone())
                        .ok_or(reference("output", o.0 as u64))?,
                    Operand::Kernel(k) => p
                        .kernels
                        .get(k.0 as usize)
                        .map(|d| d.name.clone())
                        .ok_or(reference("kernel", k.0 as u64))?,
                    ref other => operand_default_text(other),
                };
                match oi.default {
                    None => parts.push(text),
                    Some(d) if is_default(&d, op) => {}
                    Some(_) if *op == Operand::Bool(true) => parts.push(oi.name.to_string()),
                    Some(_) => parts.push(format!("{}={text}", oi.name)),
                }
            }
            let _ = writeln!(out, "    {}{} {}", info.mnemonic, i.placement.suffix(), parts.join(", "));
        }
        for l in labels_at.get(&(p.code.len() as u32)).into_iter().flatten() {
            let _ = writeln!(out, "{l}:");
        }
        // No trailing spaces on operand-less instructions.
        Ok(out.lines().map(|l| l.trim_end().to_string() + "\n").collect())
    }
}

/// Whether `op` equals the default `d`; f32s compare by bits (so -0.0 and NaN payloads print).
fn is_default(d: &Operand, op: &Operand) -> bool {
    match (d, op) {
        (Operand::F32(x), Operand::F32(y)) => x.to_bits() == y.to_bits(),
        _ => d == op,
    }
}

fn write_npy(path: &Path, dtype: DType, shape: &[Dim], elems: &[u32]) -> Result<()> {
    let io = |source: std::io::Error| DisasmError::Io { path: path.display().to_string(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let dims: Vec<usize> =
        shape.iter().map(|d| if let Dim::Const(n) = d { *n as usize } else { 0 }).collect();
    // The .npy mapping `npy::read` takes back: f32 as `<f4`, i32 `<i4`, f16 `<f2`, and bf16
    // as its raw bits in `<u2` (numpy has no bfloat16), which the assembler accepts.
    let bytes: Vec<u8> = elems.iter().flat_map(|b| b.to_le_bytes()[..dtype.size()].to_vec()).collect();
    let tensor = crate::vm::HostTensor::from_bytes(dtype, dims, &bytes).ok_or_else(|| {
        io(std::io::Error::new(std::io::ErrorKind::OutOfMemory, "cannot hold the constant's values"))
    })?;
    crate::output::write_atomically(path, &crate::npy::to_bytes(&tensor)).map_err(io)
}

/// Writes a GGUF file holding one tensor, `name`, of `format`'s blocks as they are stored.
fn write_gguf(path: &Path, name: &str, format: BlockFormat, shape: &[Dim], blocks: &[u8]) -> Result<()> {
    let io = |source: std::io::Error| DisasmError::Io { path: path.display().to_string(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    // GGUF lists dims fastest first.
    let dims: Vec<u64> =
        shape.iter().rev().map(|d| if let Dim::Const(n) = d { *n as u64 } else { 0 }).collect();
    let ty = match format {
        BlockFormat::Q8_0 => crate::gguf::GgmlType::Q8_0,
        BlockFormat::Q4_1 => crate::gguf::GgmlType::Q4_1,
    };
    let file = crate::gguf::build::file(
        &[],
        &[crate::gguf::build::T { name, dims: &dims, ty: ty.id(), data: blocks }],
    );
    crate::output::write_atomically(path, &file).map_err(io)
}

/// Writes `program` as canonical assembly.
pub fn disassemble(program: &Program, options: &DisasmOptions) -> Result<String, DisasmError> {
    Dis { p: program, opts: options }.run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_float_text() {
        assert_eq!(f32_text(1.0), "1.0");
        assert_eq!(f32_text(1e-5), "1e-5");
        assert_eq!(f32_text(-0.0), "-0.0");
        assert_eq!(f32_text(f32::NAN), "0x7fc00000");
        assert_eq!(f32_text(f32::NEG_INFINITY), "-inf");
        assert_eq!(elem_text(0x3c00, DType::F16), "1.0");
        assert_eq!(elem_text(0x7e00, DType::F16), "0x7e00");
        assert_eq!(elem_text(u32::MAX, DType::I32), "-1");
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative(Path::new("/a/b/data/w.npy"), Path::new("/a/b")), "data/w.npy");
        assert_eq!(relative(Path::new("/a/data/w.npy"), Path::new("/a/b")), "../data/w.npy");
    }
}
