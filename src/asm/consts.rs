//! Numbers and constant values: parsing immediates, and turning a `.const` value (inline list,
//! splat, `rand`, `arange`, `rope_cos`/`rope_sin`, `npy`, `safetensors`, `gguf`) into bytes or a
//! splat; and the metadata values of `.define NAME gguf_meta(...)`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use half::{bf16, f16};

use super::error::{closest, AsmErrorKind};
use super::syntax::{Arg, ArgNode, Diag, Span};
use crate::gguf::GgufFile;
use crate::isa::BlockFormat;
use crate::isa::DType;
use crate::numerics::{f32_to_bf16_bits, f32_to_f16_bits};
use crate::rand::{philox_normal, philox_uniform};

/// Largest `rand(...)` constant the assembler generates.
const MAX_CONST_BYTES: u64 = 1 << 31;

/// Most bytes of constant data (the `.bib` data section) one program may hold: 2^42, 4 TiB.
///
/// Why this number: the format is not the limit (each constant's offset and length are u64),
/// the loader is. `Program::load` holds the whole `.bib` in one buffer in memory (a private
/// copy, so constants cannot change under a verified program; `load_mapped` maps it as one
/// slice) and every constant is a slice of that buffer. The verifier bounds one constant at
/// `isa::MAX_ELEMENTS` (2^40) elements, at most 2^42 bytes, a size chosen as beyond any
/// machine's memory; all the constants live in that one buffer the way one large constant
/// would, so together they get the same bound. It also keeps every offset and length the
/// assembler computes far from overflow. The check runs on each constant's declared size
/// before any of its bytes are built or its file is read, so a program past the limit is
/// refused at once, without the memory; within it, the memory for each constant is reserved
/// fallibly, so a machine that cannot hold the data gets an assembler error too, not an abort.
pub const MAX_DATA_BYTES: u64 = 4 * crate::isa::MAX_ELEMENTS;

fn bad(text: &str, kind: &str, why: impl Into<String>, span: Span) -> Diag {
    Diag::new(AsmErrorKind::BadNumber { text: text.into(), kind: kind.into(), why: why.into() }, span)
}

fn parse_hex(text: &str) -> Option<u64> {
    let t = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))?;
    if t.is_empty() || t.len() > 16 {
        return None;
    }
    u64::from_str_radix(t, 16).ok()
}

/// An integer literal (decimal with optional sign, or `0x` hex) as i128 for range checks.
pub fn parse_int(text: &str) -> Option<i128> {
    if let Some(h) = parse_hex(text) {
        return Some(h as i128);
    }
    if text.starts_with("-0x") || text.starts_with("+0x") {
        return None;
    }
    text.parse::<i128>().ok()
}

/// Reads an integer of range `lo..=hi` from a Number argument.
pub fn int_arg(arg: &Arg, kind: &str, lo: i128, hi: i128) -> Result<i128, Diag> {
    let ArgNode::Number(text) = arg.node else {
        return Err(Diag::new(
            AsmErrorKind::OperandKind {
                expected: format!("{} integer", article(kind)),
                found: arg_text(arg),
            },
            arg.span.clone(),
        ));
    };
    let v = parse_int(text).ok_or_else(|| bad(text, kind, "not an integer", arg.span.clone()))?;
    if v < lo || v > hi {
        return Err(bad(text, kind, format!("out of range {lo}..={hi}"), arg.span.clone()));
    }
    Ok(v)
}

pub fn article(kind: &str) -> &'static str {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u', 'f']) {
        "an"
    } else {
        "a"
    }
}

/// A short rendering of an argument for "found `...`" messages.
pub fn arg_text(arg: &Arg) -> String {
    match &arg.node {
        ArgNode::Tensor { name, .. } => format!("%{name}"),
        ArgNode::Number(n) | ArgNode::Ident(n) => n.to_string(),
        ArgNode::Str(s) => format!("{s:?}"),
        ArgNode::List(_) => "[...]".into(),
        ArgNode::Call { name, .. } => format!("{}(...)", name.node),
        ArgNode::KeyValue { key, .. } => format!("{}=...", key.node),
        ArgNode::Typed { ty, value } => format!("{} {}", ty.node, arg_text(value)),
    }
}

/// Parses an f32 immediate: decimal, `inf`, `-inf`, `nan`, or `0x` + up to 8 hex digits (bits).
pub fn parse_f32(text: &str) -> Result<f32, String> {
    match text {
        "inf" | "+inf" => return Ok(f32::INFINITY),
        "-inf" => return Ok(f32::NEG_INFINITY),
        "nan" | "+nan" => return Ok(f32::NAN),
        "-nan" => return Ok(-f32::NAN),
        _ => {}
    }
    if text.starts_with("0x") || text.starts_with("0X") {
        return match parse_hex(text) {
            Some(b) if b <= u32::MAX as u64 => Ok(f32::from_bits(b as u32)),
            _ => Err("raw f32 bits take at most 8 hex digits".into()),
        };
    }
    let v: f32 = text.parse().map_err(|_| "not a number".to_string())?;
    if v.is_infinite() {
        return Err("out of range for f32 (write `inf` for infinity)".into());
    }
    Ok(v)
}

/// Parses one element value of `dtype` from its text; returns the bits (zero-extended).
/// Hex in a float context is the raw bits of that dtype.
pub fn parse_elem(text: &str, dtype: DType) -> Result<u32, String> {
    match dtype {
        DType::F32 => parse_f32(text).map(f32::to_bits),
        DType::I32 => match parse_int(text) {
            Some(v) if text.starts_with("0x") && (0..=u32::MAX as i128).contains(&v) => Ok(v as u32),
            Some(v) if (i32::MIN as i128..=i32::MAX as i128).contains(&v) => Ok(v as i32 as u32),
            Some(_) => Err("out of range for i32".into()),
            None => Err("not an integer".into()),
        },
        DType::F16 | DType::Bf16 => {
            if text.starts_with("0x") || text.starts_with("0X") {
                return match parse_hex(text) {
                    Some(b) if b <= 0xFFFF => Ok(b as u32),
                    _ => Err(format!("raw {dtype} bits take at most 4 hex digits")),
                };
            }
            let v: f64 = match text {
                "inf" | "+inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                "nan" | "+nan" => f64::NAN,
                "-nan" => -f64::NAN,
                t => t.parse().map_err(|_| "not a number".to_string())?,
            };
            let bits =
                if dtype == DType::F16 { f16::from_f64(v).to_bits() } else { bf16::from_f64(v).to_bits() };
            let back = if dtype == DType::F16 {
                f16::from_bits(bits).is_infinite()
            } else {
                bf16::from_bits(bits).is_infinite()
            };
            if back && v.is_finite() {
                return Err(format!("out of range for {dtype} (write `inf` for infinity)"));
            }
            Ok(bits as u32)
        }
    }
}

/// The bits of `v` in a float dtype.
pub fn f32_to_dtype_bits(v: f32, dtype: DType) -> u32 {
    match dtype {
        DType::F32 => v.to_bits(),
        DType::F16 => f16::from_f32(v).to_bits() as u32,
        DType::Bf16 => bf16::from_f32(v).to_bits() as u32,
        DType::I32 => v as i32 as u32,
    }
}

/// The bits of `v` in a float dtype, rounded once (to nearest even) from the f64.
fn f64_to_dtype_bits(v: f64, dtype: DType) -> u32 {
    match dtype {
        DType::F16 => f16::from_f64(v).to_bits() as u32,
        DType::Bf16 => bf16::from_f64(v).to_bits() as u32,
        _ => (v as f32).to_bits(),
    }
}

fn put(out: &mut Vec<u8>, bits: u32, dtype: DType) {
    out.extend_from_slice(&bits.to_le_bytes()[..dtype.size()]);
}

/// An empty buffer with room for `bytes`, reserved fallibly: a machine that cannot hold the
/// constant gets an assembler error, not an out-of-memory abort.
fn alloc_bytes(t: &ConstTarget, bytes: u64, span: Span) -> Result<Vec<u8>, Diag> {
    let mut out = Vec::new();
    match usize::try_from(bytes).ok().map(|n| out.try_reserve_exact(n)) {
        Some(Ok(())) => Ok(out),
        _ => Err(Diag::other(
            format!("not enough memory to build constant `%{}` ({bytes} bytes)", t.name),
            "while building this value",
            span,
        )),
    }
}

/// A constant's value as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstValue {
    Splat(u32),
    Bytes(Vec<u8>),
}

/// Files already read during one assembly, by resolved path. A safetensors or GGUF file holds
/// every weight of a model (all-MiniLM-L6-v2: 101 constants from one 91 MB file), so reading it
/// once rather than once per constant keeps assembly I/O at the file's size.
#[derive(Default)]
pub struct FileCache {
    bytes: RefCell<HashMap<PathBuf, Rc<Vec<u8>>>>,
    /// GGUF files, parsed (for `gguf(...)` constants and `gguf_meta(...)` defines).
    gguf: RefCell<HashMap<PathBuf, Rc<GgufFile>>>,
    /// ONNX models, decoded (for `onnx(...)` constants).
    onnx: RefCell<HashMap<PathBuf, Rc<crate::onnx::Model>>>,
}

/// Everything `materialize` needs to know about the constant.
pub struct ConstTarget<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub dims: &'a [u32],
    pub base_dir: &'a Path,
    pub files: &'a FileCache,
    /// Bytes of the data section before this constant (its aligned offset, if stored).
    pub data_used: u64,
}

impl ConstTarget<'_> {
    /// Element count, saturating: eight dimensions of up to 2^31 - 1 overflow 64 bits, and
    /// such a constant is refused as too large either way.
    fn count(&self) -> u64 {
        self.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64)).unwrap_or(u64::MAX)
    }
    fn shape_text(&self) -> String {
        format!("{}{:?}", self.dtype, self.dims)
    }
}

fn flatten<'b, 'a>(items: &'b [Arg<'a>], out: &mut Vec<&'b Arg<'a>>) {
    for it in items {
        match &it.node {
            ArgNode::List(inner) => flatten(inner, out),
            _ => out.push(it),
        }
    }
}

/// Turns the value written after `=` into the constant's data.
pub fn materialize(t: &ConstTarget, value: &Arg) -> Result<ConstValue, Diag> {
    let n = t.count();
    let bytes = n.saturating_mul(t.dtype.size() as u64);
    let too_big = |span: Span| {
        Diag::other(
            format!("constant `%{}` is too large to build at assembly time ({bytes} bytes)", t.name),
            format!("at most {MAX_CONST_BYTES} bytes"),
            span,
        )
    };
    // Whether the constant's bytes fit in the data section after those already there.
    let fits = |span: Span| {
        if bytes <= MAX_DATA_BYTES.saturating_sub(t.data_used) {
            return Ok(());
        }
        Err(Diag::other(
            format!(
                "constant `%{}` does not fit in the program's data section ({bytes} bytes)",
                t.name
            ),
            format!(
                "{bytes} bytes after the {} bytes of the constants before it; at most {MAX_DATA_BYTES} in all",
                t.data_used
            ),
            span,
        )
        .note(format!(
            "a program's constants together may take at most {MAX_DATA_BYTES} bytes (2^42): a .bib is loaded as one block of memory"
        )))
    };
    let float_only = |what: &str, span: Span| {
        Diag::other(
            format!("`{what}` needs a float constant, but `%{}` is {}", t.name, t.dtype),
            "only for f32, f16 and bf16",
            span,
        )
    };
    match &value.node {
        ArgNode::List(items) => {
            let mut flat = Vec::new();
            flatten(items, &mut flat);
            if flat.len() as u64 != n {
                return Err(Diag::new(
                    AsmErrorKind::ValueCount {
                        name: format!("%{}", t.name),
                        expected: n,
                        found: flat.len() as u64,
                    },
                    value.span.clone(),
                )
                .note(format!("`%{}` is {}", t.name, t.shape_text())));
            }
            fits(value.span.clone())?;
            let mut out = alloc_bytes(t, bytes, value.span.clone())?;
            for it in flat {
                let text = match it.node {
                    ArgNode::Number(s) | ArgNode::Ident(s @ ("inf" | "nan")) => s,
                    _ => {
                        return Err(Diag::new(
                            AsmErrorKind::OperandKind {
                                expected: format!("{} {} value", article(t.dtype.name()), t.dtype),
                                found: arg_text(it),
                            },
                            it.span.clone(),
                        ))
                    }
                };
                let bits = parse_elem(text, t.dtype)
                    .map_err(|why| bad(text, &format!("{} value", t.dtype), why, it.span.clone()))?;
                put(&mut out, bits, t.dtype);
            }
            Ok(ConstValue::Bytes(out))
        }
        ArgNode::Ident("zeros") => Ok(ConstValue::Splat(0)),
        ArgNode::Ident("arange") => {
            if t.dtype == DType::I32 && n > i32::MAX as u64 + 1 {
                return Err(Diag::other(
                    format!("`arange` over {n} elements overflows i32 (`%{}` is {})", t.name, t.shape_text()),
                    "element i holds i",
                    value.span.clone(),
                ));
            }
            if bytes > MAX_CONST_BYTES {
                return Err(too_big(value.span.clone()));
            }
            fits(value.span.clone())?;
            let mut out = alloc_bytes(t, bytes, value.span.clone())?;
            for i in 0..n {
                let bits =
                    if t.dtype == DType::I32 { i as u32 } else { f64_to_dtype_bits(i as f64, t.dtype) };
                put(&mut out, bits, t.dtype);
            }
            Ok(ConstValue::Bytes(out))
        }
        ArgNode::Ident("ones") => {
            Ok(ConstValue::Splat(if t.dtype == DType::I32 { 1 } else { f32_to_dtype_bits(1.0, t.dtype) }))
        }
        ArgNode::Call { name, args } => match (name.node, args.as_slice()) {
            ("fill", [v]) => {
                let text = match v.node {
                    ArgNode::Number(s) | ArgNode::Ident(s @ ("inf" | "nan")) => s,
                    _ => {
                        return Err(wrong_value(v, &format!("{} {} value", article(t.dtype.name()), t.dtype)))
                    }
                };
                let bits = parse_elem(text, t.dtype)
                    .map_err(|why| bad(text, &format!("{} value", t.dtype), why, v.span.clone()))?;
                Ok(ConstValue::Splat(bits))
            }
            ("rand", [seed, rest @ ..]) if rest.len() <= 1 => {
                if !t.dtype.is_float() {
                    return Err(float_only("rand", name.span.clone()));
                }
                let seed = int_arg(seed, "seed", 0, u32::MAX as i128)? as u32;
                let normal = match rest.first().map(|a| &a.node) {
                    None | Some(ArgNode::Ident("uniform")) => false,
                    Some(ArgNode::Ident("normal")) => true,
                    Some(_) => return Err(wrong_value(&rest[0], "`uniform` or `normal`")),
                };
                if bytes > MAX_CONST_BYTES {
                    return Err(too_big(value.span.clone()));
                }
                fits(value.span.clone())?;
                let mut out = alloc_bytes(t, bytes, value.span.clone())?;
                for i in 0..n {
                    let v = if normal { philox_normal(seed, i) } else { philox_uniform(seed, i) };
                    put(&mut out, f32_to_dtype_bits(v, t.dtype), t.dtype);
                }
                Ok(ConstValue::Bytes(out))
            }
            ("npy", [p]) => {
                let (path, span) = path_arg(p)?;
                fits(value.span.clone())?;
                load_npy(t, &path, span)
            }
            // A file and a tensor in it: the same arguments for every format.
            (source @ ("safetensors" | "gguf" | "onnx"), [p, tname]) => {
                let (path, span) = path_arg(p)?;
                let ArgNode::Str(tensor) = &tname.node else {
                    return Err(wrong_value(tname, "the tensor's name as a string"));
                };
                fits(value.span.clone())?;
                let load = match source {
                    "safetensors" => load_safetensors,
                    "gguf" => load_gguf,
                    _ => load_onnx,
                };
                load(t, &path, span, tensor, tname.span.clone())
            }
            ("rope_cos" | "rope_sin", [theta]) => {
                if !t.dtype.is_float() {
                    return Err(float_only(name.node, name.span.clone()));
                }
                let theta_v = match theta.node {
                    ArgNode::Number(text) => match text.parse::<f64>() {
                        Ok(v) if v.is_finite() && v > 0.0 => v,
                        _ => {
                            return Err(bad(
                                text,
                                "rope base",
                                "must be a finite number above 0",
                                theta.span.clone(),
                            ))
                        }
                    },
                    _ => return Err(wrong_value(theta, "the rope base θ, a number such as `10000`")),
                };
                let &[positions, d] = t.dims else {
                    return Err(Diag::other(
                        format!(
                            "`{}` needs a 2-D constant [positions, dim], but `%{}` is {}",
                            name.node,
                            t.name,
                            t.shape_text()
                        ),
                        "only for shape [P, D]",
                        name.span.clone(),
                    ));
                };
                if d % 2 != 0 {
                    return Err(Diag::other(
                        format!(
                            "`{}` needs an even last dim, but `%{}` is {}",
                            name.node,
                            t.name,
                            t.shape_text()
                        ),
                        "columns 2i and 2i+1 share frequency i",
                        name.span.clone(),
                    ));
                }
                if bytes > MAX_CONST_BYTES {
                    return Err(too_big(value.span.clone()));
                }
                fits(value.span.clone())?;
                let mut out = alloc_bytes(t, bytes, value.span.clone())?;
                let sin = name.node == "rope_sin";
                for p in 0..positions as u64 {
                    for j in 0..d as u64 {
                        let angle = p as f64 * theta_v.powf(-((2 * (j / 2)) as f64) / d as f64);
                        put(
                            &mut out,
                            f64_to_dtype_bits(if sin { angle.sin() } else { angle.cos() }, t.dtype),
                            t.dtype,
                        );
                    }
                }
                Ok(ConstValue::Bytes(out))
            }
            ("fill" | "rand" | "npy" | "safetensors" | "gguf" | "onnx" | "rope_cos" | "rope_sin", _) => {
                Err(Diag::other(
                    format!("wrong arguments to `{}(...)`", name.node),
                    match name.node {
                        "fill" => "expected `fill(value)`",
                        "rand" => "expected `rand(seed)` or `rand(seed, normal)`",
                        "npy" => "expected `npy(\"path\")`",
                        "gguf" => "expected `gguf(\"path\", \"tensor name\")`",
                        "onnx" => "expected `onnx(\"path\", \"initializer name\")`",
                        "rope_cos" => "expected `rope_cos(theta)`",
                        "rope_sin" => "expected `rope_sin(theta)`",
                        _ => "expected `safetensors(\"path\", \"tensor name\")`",
                    },
                    value.span.clone(),
                ))
            }
            _ => Err(value_kind_error(value)),
        },
        _ => Err(value_kind_error(value)),
    }
}

fn value_kind_error(value: &Arg) -> Diag {
    wrong_value(
        value,
        "a constant value: `[...]`, `zeros`, `ones`, `fill(v)`, `rand(seed)`, `arange`, `rope_cos(theta)`, `rope_sin(theta)`, `npy(\"...\")`, `safetensors(\"...\", \"...\")` or `gguf(\"...\", \"...\")`",
    )
}

fn wrong_value(arg: &Arg, expected: &str) -> Diag {
    Diag::new(AsmErrorKind::BadValue { expected: expected.into(), found: arg_text(arg) }, arg.span.clone())
}

fn path_arg(p: &Arg) -> Result<(String, Span), Diag> {
    match &p.node {
        ArgNode::Str(s) => Ok((s.clone(), p.span.clone())),
        _ => Err(wrong_value(p, "a path string `\"...\"`")),
    }
}

/// Reads a constant source's file: regular files only, at most [`crate::asm::MAX_DATA_BYTES`]
/// (no constant can use more), so `/dev/zero` or a FIFO is an error on the line, not a hang.
pub(crate) fn read_file(base: &Path, path: &str, span: Span) -> Result<Vec<u8>, Diag> {
    crate::input::read_file(&base.join(path), crate::asm::MAX_DATA_BYTES)
        .map_err(|e| Diag::new(AsmErrorKind::File { path: path.into(), error: io_reason(&e) }, span))
}

/// [`read_file`] through the assembly's [`FileCache`] (failures are not cached).
fn read_file_cached(t: &ConstTarget, path: &str, span: Span) -> Result<Rc<Vec<u8>>, Diag> {
    let full = t.base_dir.join(path);
    if let Some(bytes) = t.files.bytes.borrow().get(&full) {
        return Ok(bytes.clone());
    }
    let bytes = Rc::new(read_file(t.base_dir, path, span)?);
    t.files.bytes.borrow_mut().insert(full, bytes.clone());
    Ok(bytes)
}

/// An io error's reason without the "(os error N)" suffix, for stable messages.
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

fn shape_mismatch(t: &ConstTarget, path: &str, found: &[u64], span: Span) -> Diag {
    Diag::new(
        AsmErrorKind::FileMismatch(format!(
            "`{path}` has shape {found:?}, but `%{}` is declared {}",
            t.name,
            t.shape_text()
        )),
        span,
    )
}

/// numpy's name for a dtype string, like float64 (`<f8`).
fn numpy_name(descr: &str) -> String {
    let (kind, size) = descr_kind(descr);
    let base = match kind {
        'f' => "float",
        'i' => "int",
        'u' => "uint",
        'b' => return format!("bool (`{descr}`)"),
        _ => return format!("`{descr}`"),
    };
    format!("{base}{} (`{descr}`)", size * 8)
}

/// The kind letter and item size of a numpy dtype string (`<f4`: `f`, 4); `?` and 0 for
/// anything without both.
fn descr_kind(descr: &str) -> (char, usize) {
    let s = descr.trim_start_matches(['<', '>', '|', '=']);
    let mut chars = s.chars();
    match (chars.next(), chars.as_str().parse::<usize>()) {
        (Some(k), Ok(size)) if k.is_ascii_alphabetic() => (k, size),
        _ => ('?', 0),
    }
}

fn load_npy(t: &ConstTarget, path: &str, span: Span) -> Result<ConstValue, Diag> {
    let bytes = read_file(t.base_dir, path, span.clone())?;
    let bad_file = |e: String| Diag::new(AsmErrorKind::File { path: path.into(), error: e }, span.clone());
    let h = crate::npy::parse_header(&bytes).map_err(|e| bad_file(format!("not a valid .npy file ({e})")))?;
    if h.fortran_order {
        return Err(bad_file("Fortran-order arrays are not supported; save it with C order".into()));
    }
    let descr = if h.plain { numpy_name(&h.descr) } else { format!("`{}`", h.descr) };
    let (kind, size) = if h.plain { descr_kind(&h.descr) } else { ('?', 0) };
    if h.shape.len() != t.dims.len() || h.shape.iter().zip(t.dims).any(|(&a, &b)| a != b as u64) {
        return Err(shape_mismatch(t, path, &h.shape, span));
    }
    let convert: Option<fn(&[u8], DType) -> u32> = match (t.dtype, kind, size) {
        // The same type: the item's bits as they are.
        (DType::F32, 'f', 4) | (DType::I32, 'i', 4) | (DType::F16, 'f', 2) => {
            Some(|v, _| v.iter().rev().fold(0, |a, &b| a << 8 | b as u32))
        }
        (DType::F16 | DType::Bf16, 'f', 4) => {
            Some(|v, d| f32_to_dtype_bits(f32::from_le_bytes([v[0], v[1], v[2], v[3]]), d))
        }
        (DType::F16 | DType::Bf16, 'u', 2) => Some(|v, _| u16::from_le_bytes([v[0], v[1]]) as u32),
        _ => None,
    };
    let Some(convert) = convert else {
        let accepted = match t.dtype {
            DType::F32 => "float32",
            DType::I32 => "int32",
            DType::F16 => "float16, float32 (converted) or uint16 (raw bits)",
            DType::Bf16 => "float32 (converted) or uint16 (raw bits)",
        };
        return Err(Diag::new(
            AsmErrorKind::FileMismatch(format!(
                "`{path}` holds {descr} data, but `%{}` is {}",
                t.name, t.dtype
            )),
            span,
        )
        .note(format!(
            "{} {} constant can be loaded from {accepted} arrays",
            article(t.dtype.name()),
            t.dtype
        )));
    };
    let data = &bytes[h.data_start..];
    // The shape matches the declaration, whose byte count was checked against the data
    // section's room before the file was read: no product here overflows.
    let expected = h.count * size as u64;
    if data.len() as u64 != expected {
        return Err(bad_file(format!(
            "the data is {} bytes, but shape {:?} of {} needs {expected}",
            data.len(),
            h.shape,
            h.descr
        )));
    }
    // Big-endian files (`>f4`) are read too: each item's bytes reversed first.
    let swap = h.descr.starts_with('>') && size > 1;
    let mut out = alloc_bytes(t, h.count.saturating_mul(t.dtype.size() as u64), span.clone())?;
    let mut item = [0u8; 4];
    for v in data.chunks_exact(size) {
        item[..size].copy_from_slice(v);
        if swap {
            item[..size].reverse();
        }
        put(&mut out, convert(&item[..size], t.dtype), t.dtype);
    }
    Ok(ConstValue::Bytes(out))
}

fn load_safetensors(
    t: &ConstTarget,
    path: &str,
    span: Span,
    name: &str,
    name_span: Span,
) -> Result<ConstValue, Diag> {
    use safetensors::Dtype as S;
    let bytes = read_file_cached(t, path, span.clone())?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
        Diag::new(
            AsmErrorKind::File { path: path.into(), error: format!("not a valid safetensors file ({e})") },
            span.clone(),
        )
    })?;
    let view = match st.tensor(name) {
        Ok(v) => v,
        Err(_) => {
            let names = st.names();
            let near = closest(name, names.iter().copied(), 3);
            let mut d =
                Diag::other(format!("`{path}` has no tensor named `{name}`"), "not in the file", name_span);
            if !near.is_empty() {
                let list: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
                d = d.note(format!("closest names in the file: {}", list.join(", ")));
            }
            return Err(d);
        }
    };
    let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
    if shape.len() != t.dims.len() || shape.iter().zip(t.dims).any(|(&a, &b)| a != b as u64) {
        return Err(shape_mismatch(t, &format!("{path}: {name}"), &shape, name_span));
    }
    let data = view.data();
    let same = matches!(
        (t.dtype, view.dtype()),
        (DType::F32, S::F32) | (DType::F16, S::F16) | (DType::Bf16, S::BF16) | (DType::I32, S::I32)
    );
    if same {
        let mut out = alloc_bytes(t, data.len() as u64, name_span)?;
        out.extend_from_slice(data);
        return Ok(ConstValue::Bytes(out));
    }
    if matches!(t.dtype, DType::F16 | DType::Bf16) && view.dtype() == S::F32 {
        let mut out = alloc_bytes(t, data.len() as u64 / 2, name_span)?;
        for w in data.chunks_exact(4) {
            let v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            put(&mut out, f32_to_dtype_bits(v, t.dtype), t.dtype);
        }
        return Ok(ConstValue::Bytes(out));
    }
    Err(Diag::new(
        AsmErrorKind::FileMismatch(format!(
            "`{path}`: tensor `{name}` is {:?}, but `%{}` is {}",
            view.dtype(),
            t.name,
            t.dtype
        )),
        name_span,
    )
    .note("F32, F16, BF16 and I32 load into the same dtype; F32 also loads into f16 and bf16 (rounded)"))
}

/// `onnx("model.onnx", "name")`: an initializer (or a Constant node's value) of an ONNX model,
/// into the dtype the importer holds its type as (float, float16 and bfloat16 as themselves;
/// int64, int32 and bool as i32, an int64 that does not fit being an error).
fn load_onnx(
    t: &ConstTarget,
    path: &str,
    span: Span,
    name: &str,
    name_span: Span,
) -> Result<ConstValue, Diag> {
    let full = t.base_dir.join(path);
    let cached = t.files.onnx.borrow().get(&full).cloned();
    let model = match cached {
        Some(m) => m,
        None => {
            let m = crate::onnx::Model::load(&full).map_err(|e| {
                Diag::new(AsmErrorKind::File { path: path.into(), error: e.to_string() }, span.clone())
            })?;
            let m = Rc::new(m);
            t.files.onnx.borrow_mut().insert(full, m.clone());
            m
        }
    };
    let Some(tensor) = model.named_tensor(name) else {
        let g = model.graph();
        let names = g.initializer.iter().map(|t| t.name.as_str());
        let near = closest(name, names, 3);
        let mut d =
            Diag::other(format!("`{path}` has no initializer named `{name}`"), "not in the model", name_span);
        if !near.is_empty() {
            let list: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
            d = d.note(format!("closest names in the model: {}", list.join(", ")));
        }
        return Err(d);
    };
    let mismatch = |why: String| {
        Diag::new(AsmErrorKind::FileMismatch(format!("`{path}`: `{name}` {why}")), name_span.clone())
    };
    let data = crate::onnx::tensor_data(tensor, &model.dir).map_err(mismatch)?;
    if data.dims.len() != t.dims.len() || data.dims.iter().zip(t.dims).any(|(&a, &b)| a != b as u64) {
        return Err(shape_mismatch(t, &format!("{path}: {name}"), &data.dims, name_span));
    }
    if data.dtype() != Some(t.dtype) {
        return Err(mismatch(format!(
            "is {}, which is not held as {} (float, float16 and bfloat16 load as f32, f16, bf16; integers and bool as i32)",
            crate::onnx::proto::data_type::name(data.elem),
            t.dtype
        )));
    }
    let bytes = data.to_bytes(t.dtype).map_err(mismatch)?;
    let mut out = alloc_bytes(t, bytes.len() as u64, name_span)?;
    out.extend_from_slice(&bytes);
    Ok(ConstValue::Bytes(out))
}

/// The GGUF file at `path` (relative to `base`), parsed once per assembly.
fn open_gguf(files: &FileCache, base: &Path, path: &str, span: Span) -> Result<Rc<GgufFile>, Diag> {
    let full = base.join(path);
    if let Some(f) = files.gguf.borrow().get(&full) {
        return Ok(f.clone());
    }
    let bytes = read_file(base, path, span.clone())?;
    let file = GgufFile::from_bytes(bytes).map_err(|e| {
        Diag::new(
            AsmErrorKind::File { path: path.into(), error: format!("not a valid GGUF file: {e}") },
            span,
        )
    })?;
    let file = Rc::new(file);
    files.gguf.borrow_mut().insert(full, file.clone());
    Ok(file)
}

/// The tensor `name` of a GGUF file, or an error naming the closest names it has.
fn gguf_tensor<'f>(
    file: &'f GgufFile,
    path: &str,
    name: &str,
    name_span: Span,
) -> Result<crate::gguf::Tensor<'f>, Diag> {
    file.tensor(name).ok_or_else(|| {
        let near = closest(name, file.tensors().iter().map(|t| t.name.as_str()), 3);
        let mut d =
            Diag::other(format!("`{path}` has no tensor named `{name}`"), "not in the file", name_span);
        if !near.is_empty() {
            let list: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
            d = d.note(format!("closest names in the file: {}", list.join(", ")));
        }
        d
    })
}

/// The GGUF tensor has the declared shape.
fn check_gguf_shape(
    t: &ConstTarget,
    path: &str,
    name: &str,
    tensor: &crate::gguf::Tensor,
    name_span: Span,
) -> Result<(), Diag> {
    let shape = tensor.shape();
    if shape.len() != t.dims.len() || shape.iter().zip(t.dims).any(|(&a, &b)| a != b as u64) {
        return Err(shape_mismatch(t, &format!("{path}: {name}"), &shape, name_span).note(format!(
            "GGUF lists dims fastest first ({:?}); the row-major shape is that list reversed",
            tensor.info.dims
        )));
    }
    Ok(())
}

fn load_gguf(
    t: &ConstTarget,
    path: &str,
    span: Span,
    name: &str,
    name_span: Span,
) -> Result<ConstValue, Diag> {
    let file = open_gguf(t.files, t.base_dir, path, span)?;
    let tensor = gguf_tensor(&file, path, name, name_span.clone())?;
    check_gguf_shape(t, path, name, &tensor, name_span.clone())?;
    let ty = tensor.info.ggml_type;
    if !t.dtype.is_float() || !crate::gguf::can_dequantize(ty) {
        return Err(Diag::new(
            AsmErrorKind::FileMismatch(format!(
                "`{path}`: tensor `{name}` is {ty}, which cannot be loaded into `%{}` ({})",
                t.name, t.dtype
            )),
            name_span,
        )
        .note(
            "GGUF tensors of type F32, F16, BF16, Q8_0 and Q4_1 load into f32, f16 or bf16 (dequantized)",
        ));
    }
    let mut out = alloc_bytes(t, tensor.info.len().saturating_mul(t.dtype.size() as u64), name_span)?;
    let dtype = t.dtype;
    // Each value is dequantized to f32 once (see crate::gguf), then rounded to f16/bf16.
    let mut emit = |v: f32| {
        let bits = match dtype {
            DType::F16 => f32_to_f16_bits(v) as u32,
            DType::Bf16 => f32_to_bf16_bits(v) as u32,
            _ => v.to_bits(),
        };
        put(&mut out, bits, dtype)
    };
    // The type was checked above: this cannot fail.
    let _ = crate::gguf::dequantize(ty, tensor.data, &mut emit);
    Ok(ConstValue::Bytes(out))
}

/// The blocks as they are, unless one has a scale or min that is not finite.
fn finite_blocks(t: &ConstTarget, format: BlockFormat, out: Vec<u8>, span: Span) -> Result<ConstValue, Diag> {
    match crate::numerics::quant::first_nonfinite(format, &out) {
        None => Ok(ConstValue::Bytes(out)),
        Some((block, bits)) => Err(Diag::other(
            format!(
                "block {block} of `%{}` has a scale or min that is not finite (f16 bits {bits:#06x})",
                t.name
            ),
            "in these blocks",
            span,
        )
        .note(format!(
            "{format} values must be finite numbers: a NaN's bits would differ between executors"
        ))),
    }
}

/// The value of a block-quantized constant (`.const %w q4_1[N, K] = ...`): its blocks as
/// stored, from `gguf("path", "tensor")` (a tensor of exactly that ggml type and shape: never
/// re-encoded) or `blocks("hex")` (the raw block bytes). The last dimension must be whole
/// blocks of 32.
pub fn materialize_blocks(t: &ConstTarget, format: BlockFormat, value: &Arg) -> Result<ConstValue, Diag> {
    let declared = format!("{format}{:?}", t.dims);
    let row = t.dims.last().copied().unwrap_or(1);
    if t.dims.is_empty() || !(row as usize).is_multiple_of(BlockFormat::BLOCK_ELEMS) {
        return Err(Diag::other(
            format!(
                "`%{}` is {declared}, but a {format} constant's rows must be whole blocks of 32 values",
                t.name
            ),
            "in the value for this declaration",
            value.span.clone(),
        )
        .note("declare it with a last dimension that is a multiple of 32, or as f32 to store the values"));
    }
    let bytes = format.byte_len(t.count()).unwrap_or(u64::MAX);
    if bytes > MAX_DATA_BYTES.saturating_sub(t.data_used) {
        return Err(Diag::other(
            format!("constant `%{}` does not fit in the program's data section ({bytes} bytes)", t.name),
            format!("at most {MAX_DATA_BYTES} bytes in all"),
            value.span.clone(),
        ));
    }
    let expected = format!("`gguf(\"path\", \"tensor\")` or `blocks(\"hex\")` ({format} blocks as stored)");
    let ArgNode::Call { name, args } = &value.node else {
        return Err(wrong_value(value, &expected));
    };
    match (name.node, args.as_slice()) {
        ("gguf", [p, tname]) => {
            let (path, span) = path_arg(p)?;
            let ArgNode::Str(tname_text) = &tname.node else {
                return Err(wrong_value(tname, "the tensor's name as a string"));
            };
            let file = open_gguf(t.files, t.base_dir, &path, span)?;
            let tensor = gguf_tensor(&file, &path, tname_text, tname.span.clone())?;
            check_gguf_shape(t, &path, tname_text, &tensor, tname.span.clone())?;
            let ty = tensor.info.ggml_type;
            if ty.block_format() != Some(format) {
                return Err(Diag::new(
                    AsmErrorKind::FileMismatch(format!(
                        "`{path}`: tensor `{tname_text}` is {ty}, but `%{}` is declared {declared}",
                        t.name
                    )),
                    tname.span.clone(),
                )
                .note(format!(
                    "a {format} constant keeps the file's blocks as they are (never re-encoded); declare it as {} or as f32 (dequantized)",
                    ty.block_format().map_or("f32".to_string(), |f| f.name().to_string())
                )));
            }
            let mut out = alloc_bytes(t, bytes, tname.span.clone())?;
            out.extend_from_slice(tensor.data);
            finite_blocks(t, format, out, tname.span.clone())
        }
        ("blocks", [hex]) => {
            let ArgNode::Str(text) = &hex.node else {
                return Err(wrong_value(hex, "the blocks' bytes as a hex string"));
            };
            let out = hex_bytes(text, hex.span.clone())?;
            if out.len() as u64 != bytes {
                return Err(Diag::other(
                    format!(
                        "`%{}` is {declared}, which takes {bytes} bytes of {format} blocks, but `blocks(...)` gives {}",
                        t.name,
                        out.len()
                    ),
                    "wrong length",
                    hex.span.clone(),
                )
                .note(format!("a {format} block is {} bytes for 32 values", format.block_bytes())));
            }
            finite_blocks(t, format, out, hex.span.clone())
        }
        _ => Err(wrong_value(value, &expected)),
    }
}

/// The text of `gguf_meta("path", "key")` (the value of a `.define`): integers in decimal,
/// floats as the shortest decimal that reads back to the same value, bools `true`/`false`,
/// strings as they are. Arrays, and strings holding line breaks, are errors.
/// `.vocab gguf("path")`: a GGUF file holding only `path`'s `tokenizer.*` metadata (see
/// `gguf::metadata_file`), checked to build a tokenizer.
pub fn gguf_vocab(files: &FileCache, base: &Path, value: &Arg) -> Result<Vec<u8>, Diag> {
    let args = match &value.node {
        ArgNode::Call { name, args } if name.node == "gguf" => args,
        ArgNode::Call { name, args } if name.node == "hex" => return vocab_hex(value, args),
        _ => {
            return Err(wrong_value(
                value,
                "`gguf(\"path\")`, the model whose vocabulary to carry, or `hex(\"...\")`",
            ))
        }
    };
    let [p] = args.as_slice() else {
        return Err(Diag::other(
            "wrong arguments to `gguf(...)`",
            "expected `gguf(\"path\")`",
            value.span.clone(),
        ));
    };
    let (path, span) = path_arg(p)?;
    let file = open_gguf(files, base, &path, span.clone())?;
    let bytes = crate::gguf::metadata_file(&file, |k| k.starts_with("tokenizer."));
    let small = crate::gguf::GgufFile::from_bytes(bytes.clone()).map_err(|e| {
        Diag::other(format!("`{path}`: {e}"), "its vocabulary cannot be copied", span.clone())
    })?;
    crate::tokenizer::Tokenizer::from_gguf(&small)
        .map_err(|e| Diag::other(format!("`{path}` has no usable vocabulary: {e}"), "read here", span))?;
    Ok(bytes)
}

/// `.vocab hex("...")`: the vocabulary file's bytes as hex digits (the disassembler's inline form).
/// The bytes written as hex digits (two a byte) in `hex(...)` or `blocks(...)`.
fn hex_bytes(text: &str, span: Span) -> Result<Vec<u8>, Diag> {
    let digits = text.as_bytes();
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    if !digits.len().is_multiple_of(2) || digits.iter().any(|&c| nibble(c).is_none()) {
        return Err(Diag::other("hex bytes take an even number of hex digits", "not hex bytes", span));
    }
    Ok(digits.chunks_exact(2).filter_map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?)).collect())
}

fn vocab_hex(value: &Arg, args: &[Arg]) -> Result<Vec<u8>, Diag> {
    let [Arg { node: ArgNode::Str(text), span }] = args else {
        return Err(Diag::other(
            "wrong arguments to `hex(...)`",
            "expected `hex(\"0123...\")`",
            value.span.clone(),
        ));
    };
    let bytes = hex_bytes(text, span.clone())?;
    let small = crate::gguf::GgufFile::from_bytes(bytes.clone()).map_err(|e| {
        Diag::other(format!("the vocabulary is not a GGUF file: {e}"), "in these bytes", span.clone())
    })?;
    crate::tokenizer::Tokenizer::from_gguf(&small).map_err(|e| {
        Diag::other(format!("the vocabulary is not usable: {e}"), "in these bytes", span.clone())
    })?;
    Ok(bytes)
}

pub fn gguf_meta_text(files: &FileCache, base: &Path, value: &Arg) -> Result<String, Diag> {
    let args = match &value.node {
        ArgNode::Call { name, args } if name.node == "gguf_meta" => args,
        _ => return Err(wrong_value(value, "`gguf_meta(\"path\", \"key\")`")),
    };
    let [p, key] = args.as_slice() else {
        return Err(Diag::other(
            "wrong arguments to `gguf_meta(...)`",
            "expected `gguf_meta(\"path\", \"key\")`",
            value.span.clone(),
        ));
    };
    let (path, span) = path_arg(p)?;
    let ArgNode::Str(key_text) = &key.node else {
        return Err(wrong_value(key, "the metadata key as a string"));
    };
    let file = open_gguf(files, base, &path, span)?;
    let Some(v) = file.get(key_text) else {
        let near = closest(key_text, file.metadata().iter().map(|(k, _)| k.as_str()), 3);
        let mut d = Diag::other(
            format!("`{path}` has no metadata key `{key_text}`"),
            "not in the file",
            key.span.clone(),
        );
        if !near.is_empty() {
            let list: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
            d = d.note(format!("closest keys in the file: {}", list.join(", ")));
        }
        return Err(d);
    };
    match v.scalar_text() {
        Some(text) if !text.contains(['\n', '\r']) => Ok(text),
        Some(_) => Err(Diag::other(
            format!("metadata `{key_text}` is a string of several lines, which cannot be a define"),
            "a define's value is one line of text",
            key.span.clone(),
        )),
        None => Err(Diag::other(
            format!(
                "metadata `{key_text}` is an array of {} elements; a define takes a number, string or bool",
                v.as_array().map_or(0, |a| a.len())
            ),
            "an array",
            key.span.clone(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements() {
        assert_eq!(parse_elem("1.0", DType::F32), Ok(0x3f80_0000));
        assert_eq!(parse_elem("0x7fc00001", DType::F32), Ok(0x7fc0_0001));
        assert_eq!(parse_elem("1.0", DType::F16), Ok(0x3c00));
        assert_eq!(parse_elem("1.0", DType::Bf16), Ok(0x3f80));
        assert_eq!(parse_elem("0x7e01", DType::F16), Ok(0x7e01));
        assert_eq!(parse_elem("-1", DType::I32), Ok(u32::MAX));
        assert!(parse_elem("1e39", DType::F32).is_err());
        assert!(parse_elem("70000", DType::F16).is_err());
        assert!(parse_elem("1.5", DType::I32).is_err());
        assert!(parse_elem("0x10000", DType::F16).is_err());
    }
}
