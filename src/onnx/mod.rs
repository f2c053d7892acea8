//! ONNX import: a `model.onnx` to an adeadvm program.
//!
//! ```text
//! model.onnx --load--> Model (protobuf decoded, external data resolved lazily)
//!            --lower--> assembly text (.s), one `.origin "node"` per ONNX node
//!            --asm--> Program
//! ```
//!
//! The importer writes assembly rather than bytecode so that one place (the assembler) builds
//! programs, and `adeadvm import --emit-asm` shows exactly what was made. Weights are not copied
//! into the text: `.const %w f32[...] = onnx("${MODEL}", "name")` reads an initializer (or a
//! Constant node's value) from the model file when the text is assembled.
//!
//! Shape computations (Shape, Gather on shapes, Concat, Unsqueeze, Reshape's 0 and -1,
//! ConstantOfShape, Range, ...) are folded at import ([`lower`]); ONNX's symbolic input
//! dimensions become the program's symbolic dims unless `--dim NAME=N` fixes them. ONNX int64
//! and bool tensors are held as i32 (bool as 0 or 1): an int64 constant must fit i32, and an
//! int64 input is bound from .npy as `run --input` binds int64 (values that fit i32).

use std::path::{Path, PathBuf};

use prost::Message;
use thiserror::Error;

use crate::asm::{AsmErrors, AsmOptions};
use crate::format::Program;
use crate::isa::{DType, Tier};

mod lower;
pub mod proto;

pub use lower::SUPPORTED_OPS;

/// Why a model could not be imported. Node errors name the node, its operator and the opset
/// they were read under.
#[derive(Debug, Error)]
pub enum ImportError {
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path} is not an ONNX model: {reason}")]
    Parse { path: String, reason: String },
    #[error("{0}")]
    Model(String),
    #[error("node {node:?} ({op}, opset {opset}): {message}")]
    Node { node: String, op: String, opset: i64, message: String },
    #[error("node {node:?}: operator {domain}{op} (opset {opset}) is not supported by adeadvm's importer")]
    UnsupportedOp { node: String, op: String, domain: String, opset: i64 },
    #[error("the assembly the importer wrote does not assemble (a bug in the importer):\n{0}")]
    Asm(Box<AsmErrors>),
}

impl ImportError {
    /// What a failure is, without the node: `unsupported operator Conv`, `unsupported type:
    /// double tensors`, ... for an input outside the importer's scope, or `error`.
    pub fn category(&self) -> String {
        match self {
            ImportError::UnsupportedOp { op, domain, .. } => format!("unsupported operator {domain}{op}"),
            ImportError::Node { message, op, .. } if message.starts_with("unsupported") => {
                format!("{op}: {message}")
            }
            ImportError::Model(m) if m.starts_with("unsupported") => m.clone(),
            _ => "error".into(),
        }
    }

    /// Whether the import would go further with the graph's integer inputs known
    /// ([`ImportOptions::known_inputs`]).
    pub fn needs_known_inputs(&self) -> bool {
        matches!(self, ImportError::Node { message, .. } if message.contains("must be known at import"))
    }

    /// Whether the model uses something outside the importer's scope (as opposed to a
    /// malformed model or an importer bug).
    pub fn is_unsupported(&self) -> bool {
        self.category() != "error"
    }
}

type Result<T, E = ImportError> = std::result::Result<T, E>;

/// Import settings.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The tier of the program written.
    pub tier: Tier,
    /// `--dim NAME=N`: symbolic input dimensions fixed to a size.
    pub dims: Vec<(String, u64)>,
    /// Graph inputs whose values are fixed at import (`--known-input`): they become constants,
    /// so shape computations that read them fold (a Reshape's shape, a Slice's starts fed as
    /// inputs). The program then has no such input.
    pub known_inputs: Vec<(String, TensorData)>,
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions { tier: Tier::Strict, dims: Vec::new(), known_inputs: Vec::new() }
    }
}

/// The most bytes a model file (or one external data file) may have: the assembler's limit on
/// a program's data.
const MAX_MODEL_BYTES: u64 = crate::asm::MAX_DATA_BYTES;

/// A decoded model file.
pub struct Model {
    pub proto: proto::ModelProto,
    /// The folder external data paths are relative to.
    pub dir: PathBuf,
    /// The file's path as given, for messages.
    pub path: String,
}

impl Model {
    /// Reads and decodes `path`.
    pub fn load(path: &Path) -> Result<Model> {
        let shown = path.display().to_string();
        let bytes = crate::input::read_file(path, MAX_MODEL_BYTES)
            .map_err(|e| ImportError::Io { path: shown.clone(), reason: crate::asm::io_reason(&e) })?;
        Model::from_bytes(&bytes, path.parent().unwrap_or(Path::new(".")), &shown)
    }

    /// Decodes a model's bytes; `dir` is where its external data files are.
    pub fn from_bytes(bytes: &[u8], dir: &Path, shown: &str) -> Result<Model> {
        let proto = proto::ModelProto::decode(bytes)
            .map_err(|e| ImportError::Parse { path: shown.into(), reason: e.to_string() })?;
        if proto.graph.is_none() {
            return Err(ImportError::Parse { path: shown.into(), reason: "it has no graph".into() });
        }
        Ok(Model { proto, dir: dir.to_path_buf(), path: shown.into() })
    }

    pub fn graph(&self) -> &proto::GraphProto {
        self.proto.graph.as_ref().expect("checked at load")
    }

    /// The default domain's opset version (ONNX's `ai.onnx`).
    pub fn opset(&self) -> i64 {
        self.proto
            .opset_import
            .iter()
            .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
            .map_or(1, |o| o.version)
    }

    /// The initializer or Constant node output named `name`.
    pub fn named_tensor(&self, name: &str) -> Option<&proto::TensorProto> {
        let g = self.graph();
        g.initializer.iter().find(|t| t.name == name).or_else(|| {
            g.node
                .iter()
                .filter(|n| n.op_type == "Constant" && n.output.first().is_some_and(|o| o == name))
                .flat_map(|n| n.attribute.iter())
                .find(|a| a.name == "value")
                .and_then(|a| a.t.as_ref())
        })
    }
}

/// A tensor's values as the importer holds them: the ONNX element type, the dims, and the
/// values (floats exactly, as f64; integers and bools as i64).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    pub elem: i32,
    pub dims: Vec<u64>,
    pub values: Values,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// float, float16, bfloat16: each value exactly (every one of these is an f64).
    Float(Vec<f64>),
    /// int8..int64, uint8..uint32, bool.
    Int(Vec<i64>),
}

impl TensorData {
    /// A host tensor's values (i32 as int32, floats as their type).
    pub fn from_host(t: &crate::HostTensor) -> TensorData {
        use proto::data_type as ty;
        let b = t.bytes();
        let (elem, values) = match t.dtype {
            DType::F32 => (
                ty::FLOAT,
                Values::Float(
                    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
                ),
            ),
            DType::F16 => (
                ty::FLOAT16,
                Values::Float(
                    b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
                ),
            ),
            DType::Bf16 => (
                ty::BFLOAT16,
                Values::Float(
                    b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
                ),
            ),
            DType::I32 => (
                ty::INT32,
                Values::Int(
                    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect(),
                ),
            ),
        };
        TensorData { elem, dims: t.shape.iter().map(|&d| d as u64).collect(), values }
    }

    pub fn len(&self) -> usize {
        match &self.values {
            Values::Float(v) => v.len(),
            Values::Int(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The adeadvm dtype these values are held as.
    pub fn dtype(&self) -> Option<DType> {
        vm_dtype(self.elem)
    }

    /// Little-endian bytes of the values as `dtype` (which [`vm_dtype`] gave for the element
    /// type): floats round to it (exact for the type they came from), integers must fit i32.
    pub fn to_bytes(&self, dtype: DType) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(self.len() * dtype.size());
        match (&self.values, dtype) {
            (Values::Float(v), DType::F32) => v.iter().for_each(|&x| out.extend((x as f32).to_le_bytes())),
            (Values::Float(v), DType::F16) => {
                v.iter().for_each(|&x| out.extend(half::f16::from_f64(x).to_bits().to_le_bytes()))
            }
            (Values::Float(v), DType::Bf16) => {
                v.iter().for_each(|&x| out.extend(half::bf16::from_f64(x).to_bits().to_le_bytes()))
            }
            (Values::Int(v), DType::I32) => {
                for (i, &x) in v.iter().enumerate() {
                    let x = i32::try_from(x)
                        .map_err(|_| format!("int64 value {x} at position {i} does not fit in int32"))?;
                    out.extend(x.to_le_bytes());
                }
            }
            (_, d) => {
                return Err(format!("{} values cannot be held as {d}", proto::data_type::name(self.elem)))
            }
        }
        Ok(out)
    }
}

/// The dtype adeadvm holds an ONNX element type as, or None where it has none.
pub fn vm_dtype(elem: i32) -> Option<DType> {
    use proto::data_type as t;
    match elem {
        t::FLOAT => Some(DType::F32),
        t::FLOAT16 => Some(DType::F16),
        t::BFLOAT16 => Some(DType::Bf16),
        t::INT32 | t::INT64 | t::BOOL | t::INT8 | t::UINT8 | t::INT16 | t::UINT16 => Some(DType::I32),
        _ => None,
    }
}

/// Decodes a TensorProto's values (`dir` is where its external data is). Segmented, string,
/// double and complex tensors are refused.
pub fn tensor_data(t: &proto::TensorProto, dir: &Path) -> Result<TensorData, String> {
    use proto::data_type as ty;
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    let mut dims = Vec::with_capacity(t.dims.len());
    let mut count: u64 = 1;
    for &d in &t.dims {
        let d = u64::try_from(d).map_err(|_| format!("negative dimension {d}"))?;
        count = count.checked_mul(d).filter(|&c| c <= crate::isa::MAX_ELEMENTS).ok_or("too many elements")?;
        dims.push(d);
    }
    let n = count as usize;
    let external;
    let raw: Option<&[u8]> = if t.data_location == 1 {
        external = external_bytes(t, dir)?;
        Some(&external)
    } else if !t.raw_data.is_empty() || n == 0 {
        Some(&t.raw_data)
    } else {
        None
    };
    let width = match t.data_type {
        ty::FLOAT | ty::INT32 | ty::UINT32 => 4,
        ty::FLOAT16 | ty::BFLOAT16 | ty::INT16 | ty::UINT16 => 2,
        ty::INT64 | ty::UINT64 | ty::DOUBLE => 8,
        ty::INT8 | ty::UINT8 | ty::BOOL => 1,
        other => return Err(format!("unsupported type: {} tensors", ty::name(other))),
    };
    if let Some(raw) = raw {
        if raw.len() as u64 != count * width as u64 {
            return Err(format!(
                "raw data holds {} bytes; {n} {} values need {}",
                raw.len(),
                ty::name(t.data_type),
                n * width
            ));
        }
    }
    let le = |raw: &[u8], i: usize| -> u64 {
        let mut b = [0u8; 8];
        b[..width].copy_from_slice(&raw[i * width..(i + 1) * width]);
        u64::from_le_bytes(b)
    };
    let values = match t.data_type {
        ty::FLOAT => Values::Float(match raw {
            Some(r) => (0..n).map(|i| f32::from_bits(le(r, i) as u32) as f64).collect(),
            None => t.float_data.iter().map(|&x| x as f64).collect(),
        }),
        ty::DOUBLE => return Err("unsupported type: double tensors".into()),
        ty::FLOAT16 | ty::BFLOAT16 => {
            let bits: Vec<u16> = match raw {
                Some(r) => (0..n).map(|i| le(r, i) as u16).collect(),
                None => t.int32_data.iter().map(|&x| x as u16).collect(),
            };
            Values::Float(
                bits.iter()
                    .map(|&b| match t.data_type {
                        ty::FLOAT16 => half::f16::from_bits(b).to_f64(),
                        _ => half::bf16::from_bits(b).to_f64(),
                    })
                    .collect(),
            )
        }
        ty::INT64 => Values::Int(match raw {
            Some(r) => (0..n).map(|i| le(r, i) as i64).collect(),
            None => t.int64_data.clone(),
        }),
        ty::UINT64 => return Err("unsupported type: uint64 tensors".into()),
        ty::UINT32 => Values::Int(match raw {
            Some(r) => (0..n).map(|i| le(r, i) as u32 as i64).collect(),
            None => t.uint64_data.iter().map(|&x| x as i64).collect(),
        }),
        ty::INT32 | ty::INT16 | ty::INT8 | ty::UINT16 | ty::UINT8 | ty::BOOL => Values::Int(match raw {
            Some(r) => (0..n)
                .map(|i| {
                    let v = le(r, i);
                    match t.data_type {
                        ty::INT32 => v as u32 as i32 as i64,
                        ty::INT16 => v as u16 as i16 as i64,
                        ty::INT8 => v as u8 as i8 as i64,
                        ty::BOOL => (v != 0) as i64,
                        _ => v as i64,
                    }
                })
                .collect(),
            None => t.int32_data.iter().map(|&x| x as i64).collect(),
        }),
        other => return Err(format!("unsupported type: {} tensors", ty::name(other))),
    };
    let data = TensorData { elem: t.data_type, dims, values };
    if data.len() != n {
        return Err(format!("holds {} values for {n} elements", data.len()));
    }
    Ok(data)
}

/// An external tensor's bytes: `location` relative to the model's folder (never above it),
/// `offset` and `length` as ONNX's external data keys give them.
fn external_bytes(t: &proto::TensorProto, dir: &Path) -> Result<Vec<u8>, String> {
    let key = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
    let location = key("location").ok_or("external data without a location")?;
    let rel = Path::new(location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("external data location {location:?} is outside the model's folder"));
    }
    let num = |k: &str| -> Result<Option<u64>, String> {
        key(k)
            .map(|v| v.parse::<u64>().map_err(|_| format!("external data {k} {v:?} is not a number")))
            .transpose()
    };
    let offset = num("offset")?.unwrap_or(0);
    let length = num("length")?;
    let path = dir.join(rel);
    let bytes = crate::input::read_file(&path, MAX_MODEL_BYTES)
        .map_err(|e| format!("cannot read external data {location:?}: {}", crate::asm::io_reason(&e)))?;
    let end = match length {
        Some(l) => offset.checked_add(l),
        None => Some(bytes.len() as u64),
    };
    match end {
        Some(end) if end <= bytes.len() as u64 && offset <= end => {
            Ok(bytes[offset as usize..end as usize].to_vec())
        }
        _ => {
            Err(format!("external data {location:?} is {} bytes; the tensor asks past its end", bytes.len()))
        }
    }
}

/// Reads a serialized TensorProto (a conformance test's `input_0.pb`).
pub fn read_tensor_pb(path: &Path) -> Result<(String, TensorData)> {
    let shown = path.display().to_string();
    let bytes = crate::input::read_file(path, MAX_MODEL_BYTES)
        .map_err(|e| ImportError::Io { path: shown.clone(), reason: crate::asm::io_reason(&e) })?;
    let t = proto::TensorProto::decode(bytes.as_slice())
        .map_err(|e| ImportError::Parse { path: shown.clone(), reason: e.to_string() })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let data = tensor_data(&t, dir).map_err(|reason| ImportError::Parse { path: shown, reason })?;
    Ok((t.name, data))
}

/// What an import made.
pub struct Imported {
    pub program: Program,
    /// The assembly it was assembled from (`${MODEL}` is the model file).
    pub asm: String,
    /// The program's inputs and outputs with the ONNX names and element types they stand for.
    pub inputs: Vec<Binding>,
    pub outputs: Vec<Binding>,
}

/// A program input or output and the ONNX graph value it stands for.
#[derive(Debug, Clone)]
pub struct Binding {
    /// The name in the program (the ONNX name, made an identifier).
    pub name: String,
    /// The name in the ONNX graph.
    pub onnx_name: String,
    /// ONNX's element type (int64 and bool are held as i32).
    pub elem: i32,
}

/// Imports the model at `path`.
pub fn import(path: &Path, options: &ImportOptions) -> Result<Imported> {
    let model = Model::load(path)?;
    import_model(&model, path, options)
}

/// Imports a loaded model; `path` is its file (constants are read from it when the assembly is
/// assembled).
pub fn import_model(model: &Model, path: &Path, options: &ImportOptions) -> Result<Imported> {
    let lowered = lower::lower(model, options)?;
    let file =
        path.file_name().map_or_else(|| "model.onnx".to_string(), |f| f.to_string_lossy().into_owned());
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let asm_options =
        AsmOptions { defines: vec![("MODEL".into(), file.clone())], base_dir: dir.to_path_buf() };
    let program = crate::asm::assemble(&lowered.asm, &format!("{file}.s"), &asm_options)
        .map_err(|e| ImportError::Asm(Box::new(e)))?;
    Ok(Imported { program, asm: lowered.asm, inputs: lowered.inputs, outputs: lowered.outputs })
}
