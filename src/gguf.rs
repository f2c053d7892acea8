//! A reader for GGUF files (versions 2 and 3), the model format of ggml and llama.cpp, and the
//! dequantization of the tensor types adeadvm loads (F32, F16, BF16, Q8_0, Q4_1).
//!
//! ```no_run
//! let file = adeadvm::gguf::GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let layers = file.get_u64("llama.block_count");
//! let emb = file.tensor("token_embd.weight").expect("present");
//! let shape = emb.shape();          // row-major: [49152, 576]
//! let values: Vec<f32> = emb.dequantize()?;
//! # Ok::<(), adeadvm::gguf::GgufError>(())
//! ```
//!
//! Layout of a file (all integers little-endian): the magic `GGUF`, a u32 version, u64 tensor and
//! metadata counts, the metadata (key string, u32 value type, value), the tensor infos (name, u32
//! dim count, u64 dims, u32 ggml type, u64 offset into the data section), padding to the
//! alignment (`general.alignment`, default 32), then the data section. A string is a u64 byte
//! length and that many UTF-8 bytes; an array is a u32 element type, a u64 count and the elements.
//!
//! Invariants of a [`GgufFile`] (checked once by [`GgufFile::from_bytes`], relied on after):
//! - every metadata key and every tensor name is unique and valid UTF-8;
//! - every tensor has 1 to 4 dims whose product fits in u64 (and i64, as ggml requires), a known
//!   ggml type, a row length (`dims[0]`) that is a whole number of that type's blocks, an offset
//!   that is a multiple of the alignment, and its bytes lie inside the file after the data start;
//!   no two tensors' bytes overlap;
//! - the alignment is a nonzero power of two.
//!
//! Malformed input never panics: each defect is a [`GgufError`] naming it. Allocations while
//! parsing are bounded by the file's size (every count is checked against the bytes left before
//! anything is reserved). The file is read into memory, not mapped: a file changed or truncated
//! by another process while in use cannot fault the reader.
//!
//! Dims: GGUF lists them fastest-varying first (`ne[0]` is the row length), so a tensor with
//! `dims = [576, 49152]` is the row-major array `[49152, 576]` ([`TensorInfo::shape`]).
//!
//! Dequantization follows ggml's definitions (ggml-quants.c); the block formats are written once
//! in [`crate::numerics::quant`], used by [`dequantize`]:
//! - Q8_0: blocks of 32 elements, 34 bytes: f16 scale `d`, then 32 i8 `q`; value `d * q`. The
//!   product of an 11-bit and an 8-bit significand is exact in f32.
//! - Q4_1: blocks of 32 elements, 20 bytes: f16 `d`, f16 `m`, 16 bytes; byte `j` holds element `j`
//!   in its low nibble and element `j + 16` in its high nibble; value `d * q + m` in f32. `d * q`
//!   (11 by 4 bits) is exact in f32, so the result is the exact value rounded once (with or
//!   without a fused multiply-add: the same bits).
//! - F16, BF16: widened to f32 (exact); F32 as stored.
//!
//! Into f16 or bf16 the f32 values are rounded to nearest even ([`crate::numerics`]). For F32,
//! F16, BF16 and Q8_0 sources the f32 value is exact, so that is the only rounding; for Q4_1 it
//! is a second rounding after the f32 one, which can differ from rounding the exact value only
//! when the exact value needs more than f32's 24 significant bits (`d * q` and `m` far apart in
//! magnitude) and its f32 rounding lands exactly on a midpoint of the narrower type.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use half::{bf16, f16};

use crate::isa::BlockFormat;

/// Errors reading a GGUF file or dequantizing one of its tensors.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file (magic {found:02x?}, expected \"GGUF\")")]
    BadMagic { found: Vec<u8> },
    #[error("unsupported GGUF version {0} (2 and 3 are supported)")]
    BadVersion(u32),
    #[error("the file ends early: {what} at byte {at} needs {need} bytes, {left} are left")]
    Truncated { what: String, at: u64, need: u64, left: u64 },
    #[error("{what}: count {count} is impossible, the file has only {left} bytes left")]
    TooMany { what: String, count: u64, left: u64 },
    #[error("{what} is not valid UTF-8")]
    BadUtf8 { what: String },
    #[error("metadata `{key}`: unknown value type {ty}")]
    BadValueType { key: String, ty: u32 },
    #[error("metadata `{key}`: a bool must be 0 or 1, found {value}")]
    BadBool { key: String, value: u8 },
    #[error("metadata `{key}`: arrays nested deeper than {max}")]
    TooDeep { key: String, max: usize },
    #[error("metadata key `{0}` appears twice")]
    DuplicateKey(String),
    #[error("metadata `general.alignment` must be a nonzero power of two u32, found {0}")]
    BadAlignment(String),
    #[error("tensor `{0}` appears twice")]
    DuplicateTensor(String),
    #[error("tensor `{name}`: {n} dims (1 to 4 are allowed)")]
    BadDimCount { name: String, n: u32 },
    #[error("tensor `{name}`: dims {dims:?} overflow the element count")]
    DimsOverflow { name: String, dims: Vec<u64> },
    #[error("tensor `{name}`: unknown ggml type {ty}")]
    UnknownType { name: String, ty: u32 },
    #[error("tensor `{name}`: row length {row} is not a multiple of {ty}'s block of {block}")]
    PartialBlock { name: String, ty: GgmlType, row: u64, block: u64 },
    #[error("tensor `{name}`: offset {offset} is not a multiple of the alignment {align}")]
    Misaligned { name: String, offset: u64, align: u64 },
    #[error("tensor `{name}`: its {size} bytes at data offset {offset} end past the file (the data section has {avail} bytes)")]
    OutOfFile { name: String, offset: u64, size: u64, avail: u64 },
    #[error("tensors `{a}` and `{b}` overlap in the data section")]
    Overlap { a: String, b: String },
    #[error("tensor `{name}`: dequantizing {ty} is not supported (F32, F16, BF16, Q8_0 and Q4_1 are)")]
    Unsupported { name: String, ty: GgmlType },
    #[error("not enough memory for {0}")]
    OutOfMemory(String),
}

/// A metadata value. Integers keep their GGUF width.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

/// A metadata array: all elements have one type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as i64 when they are integers that fit (u64 above i64::MAX do not).
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        fn all<T: Copy>(v: &[T], f: impl Fn(T) -> Option<i64>) -> Option<Vec<i64>> {
            v.iter().map(|&x| f(x)).collect()
        }
        match self {
            Array::U8(v) => all(v, |x| Some(x as i64)),
            Array::I8(v) => all(v, |x| Some(x as i64)),
            Array::U16(v) => all(v, |x| Some(x as i64)),
            Array::I16(v) => all(v, |x| Some(x as i64)),
            Array::U32(v) => all(v, |x| Some(x as i64)),
            Array::I32(v) => all(v, |x| Some(x as i64)),
            Array::U64(v) => all(v, |x| i64::try_from(x).ok()),
            Array::I64(v) => Some(v.clone()),
            _ => None,
        }
    }
}

impl Value {
    /// The value as u64 if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as f64 if it is a number (integers above 2^53 are rounded).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v as f64),
            Value::I16(v) => Some(v as f64),
            Value::I32(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The GGUF name of the value's type (`u32`, `string`, `array`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    /// A scalar's text: integers in decimal, floats as the shortest decimal that reads back to
    /// the same value (`1e-5`), bools `true`/`false`, strings as they are. `None` for arrays.
    pub fn scalar_text(&self) -> Option<String> {
        Some(match self {
            Value::U8(v) => v.to_string(),
            Value::I8(v) => v.to_string(),
            Value::U16(v) => v.to_string(),
            Value::I16(v) => v.to_string(),
            Value::U32(v) => v.to_string(),
            Value::I32(v) => v.to_string(),
            Value::U64(v) => v.to_string(),
            Value::I64(v) => v.to_string(),
            Value::F32(v) => format!("{v:?}"),
            Value::F64(v) => format!("{v:?}"),
            Value::Bool(v) => v.to_string(),
            Value::String(s) => s.clone(),
            Value::Array(_) => return None,
        })
    }
}

macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:literal, $bytes:literal;)*) => {
        /// A ggml tensor type (the ones GGUF files use; ids as in ggml.h).
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum GgmlType { $($variant),* }

        impl GgmlType {
            /// The type with ggml id `id`.
            pub fn from_id(id: u32) -> Option<GgmlType> {
                match id { $($id => Some(GgmlType::$variant),)* _ => None }
            }
            /// ggml's id of the type.
            pub fn id(self) -> u32 {
                match self { $(GgmlType::$variant => $id),* }
            }
            /// ggml's name (`Q4_1`, `F32`, ...).
            pub fn name(self) -> &'static str {
                match self { $(GgmlType::$variant => $name),* }
            }
            /// Elements per block (1 for plain types).
            pub fn block_size(self) -> u64 {
                match self { $(GgmlType::$variant => $block),* }
            }
            /// Bytes per block.
            pub fn block_bytes(self) -> u64 {
                match self { $(GgmlType::$variant => $bytes),* }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2_K = 10, "Q2_K", 256, 84;
    Q3_K = 11, "Q3_K", 256, 110;
    Q4_K = 12, "Q4_K", 256, 144;
    Q5_K = 13, "Q5_K", 256, 176;
    Q6_K = 14, "Q6_K", 256, 210;
    Q8_K = 15, "Q8_K", 256, 292;
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    IQ1_S = 19, "IQ1_S", 256, 50;
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    IQ3_S = 21, "IQ3_S", 256, 110;
    IQ2_S = 22, "IQ2_S", 256, 82;
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", 256, 54;
    TQ2_0 = 35, "TQ2_0", 256, 66;
    MXFP4 = 39, "MXFP4", 32, 17;
}

impl GgmlType {
    /// The VM's block format of the same layout, for the types a constant may keep as stored.
    pub fn block_format(self) -> Option<BlockFormat> {
        match self {
            GgmlType::Q8_0 => Some(BlockFormat::Q8_0),
            GgmlType::Q4_1 => Some(BlockFormat::Q4_1),
            _ => None,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF order: fastest-varying first (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the tensor's bytes from the start of the data section.
    pub offset: u64,
    /// Size of the tensor's bytes.
    pub size: u64,
}

impl TensorInfo {
    /// The row-major shape (GGUF's dims reversed): `[576, 49152]` -> `[49152, 576]`.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        // The product was checked when the file was parsed.
        self.dims.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A parsed GGUF file, its bytes held in memory.
#[derive(Debug)]
pub struct GgufFile {
    bytes: Vec<u8>,
    version: u32,
    metadata: Vec<(String, Value)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
}

/// A tensor of a [`GgufFile`]: its description and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Tensor<'a> {
    pub info: &'a TensorInfo,
    pub data: &'a [u8],
}

/// Largest array nesting accepted in metadata (GGUF files use 1).
const MAX_DEPTH: usize = 8;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;

/// A bounds-checked little-endian reader over the file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.left() {
            return Err(GgufError::Truncated {
                what: what(),
                at: self.pos as u64,
                need: n,
                left: self.left(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit in what is left.
    fn check_count(&self, count: u64, min_size: u64, what: &dyn Fn() -> String) -> Result<usize, GgufError> {
        if count.checked_mul(min_size).is_none_or(|b| b > self.left()) {
            return Err(GgufError::TooMany { what: what(), count, left: self.left() });
        }
        // count <= left <= usize::MAX here.
        Ok(count as usize)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::BadUtf8 { what: what() })
    }
}

fn vec_with<T>(n: usize, what: &dyn Fn() -> String) -> Result<Vec<T>, GgufError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| GgufError::OutOfMemory(what()))?;
    Ok(v)
}

/// Minimum bytes one element of value type `ty` takes in the file.
fn min_size(ty: u32) -> u64 {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,  // u64 length
        9 => 12, // u32 type + u64 count
        _ => 8,  // 10..=12
    }
}

fn read_value(r: &mut Reader, ty: u32, key: &str, depth: usize) -> Result<Value, GgufError> {
    let what = || format!("the value of `{key}`");
    Ok(match ty {
        0 => Value::U8(r.array::<1>(&what)?[0]),
        1 => Value::I8(r.array::<1>(&what)?[0] as i8),
        2 => Value::U16(u16::from_le_bytes(r.array(&what)?)),
        3 => Value::I16(i16::from_le_bytes(r.array(&what)?)),
        4 => Value::U32(u32::from_le_bytes(r.array(&what)?)),
        5 => Value::I32(i32::from_le_bytes(r.array(&what)?)),
        6 => Value::F32(f32::from_le_bytes(r.array(&what)?)),
        7 => Value::Bool(read_bool(r, key)?),
        8 => Value::String(r.string(&what)?),
        9 => Value::Array(read_array(r, key, depth)?),
        10 => Value::U64(u64::from_le_bytes(r.array(&what)?)),
        11 => Value::I64(i64::from_le_bytes(r.array(&what)?)),
        12 => Value::F64(f64::from_le_bytes(r.array(&what)?)),
        _ => return Err(GgufError::BadValueType { key: key.into(), ty }),
    })
}

fn read_bool(r: &mut Reader, key: &str) -> Result<bool, GgufError> {
    match r.array::<1>(&|| format!("the value of `{key}`"))?[0] {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::BadBool { key: key.into(), value }),
    }
}

fn read_array(r: &mut Reader, key: &str, depth: usize) -> Result<Array, GgufError> {
    if depth >= MAX_DEPTH {
        return Err(GgufError::TooDeep { key: key.into(), max: MAX_DEPTH });
    }
    let what = || format!("the array `{key}`");
    let ty = r.u32(&what)?;
    if ty > 12 {
        return Err(GgufError::BadValueType { key: key.into(), ty });
    }
    let count = r.u64(&what)?;
    let n = r.check_count(count, min_size(ty), &what)?;
    macro_rules! fixed {
        ($variant:ident, $t:ty) => {{
            let mut v = vec_with::<$t>(n, &what)?;
            for _ in 0..n {
                v.push(<$t>::from_le_bytes(r.array(&what)?));
            }
            Array::$variant(v)
        }};
    }
    Ok(match ty {
        0 => fixed!(U8, u8),
        1 => fixed!(I8, i8),
        2 => fixed!(U16, u16),
        3 => fixed!(I16, i16),
        4 => fixed!(U32, u32),
        5 => fixed!(I32, i32),
        6 => fixed!(F32, f32),
        7 => {
            let mut v = vec_with(n, &what)?;
            for _ in 0..n {
                v.push(read_bool(r, key)?);
            }
            Array::Bool(v)
        }
        8 => {
            let mut v = vec_with(n, &what)?;
            for i in 0..n {
                v.push(r.string(&|| format!("element {i} of `{key}`"))?);
            }
            Array::String(v)
        }
        9 => {
            let mut v = vec_with(n, &what)?;
            for _ in 0..n {
                v.push(read_array(r, key, depth + 1)?);
            }
            Array::Array(v)
        }
        10 => fixed!(U64, u64),
        11 => fixed!(I64, i64),
        _ => fixed!(F64, f64),
    })
}

impl GgufFile {
    /// Reads and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let bytes = crate::input::read_file(path, crate::input::DEFAULT_READ_LIMIT)
            .map_err(|source| GgufError::Io { path: path.display().to_string(), source })?;
        GgufFile::from_bytes(bytes)
    }

    /// Parses a whole GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let mut r = Reader { bytes: &bytes, pos: 0 };
        let magic = r.take(4.min(bytes.len() as u64), &|| "the magic".into())?;
        if magic != b"GGUF" {
            return Err(GgufError::BadMagic { found: magic.to_vec() });
        }
        let version = r.u32(&|| "the version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::BadVersion(version));
        }
        let n_tensors = r.u64(&|| "the tensor count".into())?;
        let n_kv = r.u64(&|| "the metadata count".into())?;
        // A key-value takes at least 8 (key length) + 4 (type) + 1 bytes.
        let n_kv = r.check_count(n_kv, 13, &|| "the metadata count".into())?;
        let mut metadata = vec_with(n_kv, &|| "the metadata".into())?;
        let mut meta_index = HashMap::new();
        for i in 0..n_kv {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let ty = r.u32(&|| format!("the type of `{key}`"))?;
            let value = read_value(&mut r, ty, &key, 0)?;
            if meta_index.insert(key.clone(), i).is_some() {
                return Err(GgufError::DuplicateKey(key));
            }
            metadata.push((key, value));
        }
        let alignment = match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => 32,
            Some(Value::U32(a)) if a.is_power_of_two() => *a as u64,
            Some(v) => {
                return Err(GgufError::BadAlignment(format!(
                    "{} {}",
                    v.type_name(),
                    v.scalar_text().unwrap_or_else(|| "array".into())
                )))
            }
        };
        // A tensor info takes at least 8 (name length) + 4 (dim count) + 8 (a dim) + 4 + 8 bytes.
        let n_tensors = r.check_count(n_tensors, 32, &|| "the tensor count".into())?;
        let mut tensors = vec_with::<TensorInfo>(n_tensors, &|| "the tensor infos".into())?;
        let mut tensor_index = HashMap::new();
        for i in 0..n_tensors {
            let name = r.string(&|| format!("tensor name {i}"))?;
            let what = || format!("the info of tensor `{name}`");
            let n = r.u32(&what)?;
            if n == 0 || n > MAX_DIMS {
                return Err(GgufError::BadDimCount { name, n });
            }
            let mut dims = Vec::with_capacity(n as usize);
            for _ in 0..n {
                dims.push(r.u64(&what)?);
            }
            let ty = r.u32(&what)?;
            let offset = r.u64(&what)?;
            let count =
                dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).filter(|&c| c <= i64::MAX as u64);
            let Some(count) = count else {
                return Err(GgufError::DimsOverflow { name, dims });
            };
            let Some(ggml_type) = GgmlType::from_id(ty) else {
                return Err(GgufError::UnknownType { name, ty });
            };
            let block = ggml_type.block_size();
            if dims[0] % block != 0 {
                return Err(GgufError::PartialBlock { name, ty: ggml_type, row: dims[0], block });
            }
            // count / block * bytes <= count * 4.5 at most (F64: 8 per element, checked).
            let Some(size) = (count / block).checked_mul(ggml_type.block_bytes()) else {
                return Err(GgufError::DimsOverflow { name, dims });
            };
            if offset % alignment != 0 {
                return Err(GgufError::Misaligned { name, offset, align: alignment });
            }
            if tensor_index.insert(name.clone(), i).is_some() {
                return Err(GgufError::DuplicateTensor(name));
            }
            tensors.push(TensorInfo { name, dims, ggml_type, offset, size });
        }
        let data_start = (r.pos as u64).next_multiple_of(alignment);
        let avail = (bytes.len() as u64).saturating_sub(data_start);
        for t in &tensors {
            if t.offset.checked_add(t.size).is_none_or(|end| end > avail) {
                return Err(GgufError::OutOfFile {
                    name: t.name.clone(),
                    offset: t.offset,
                    size: t.size,
                    avail,
                });
            }
        }
        let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
        order.sort_by_key(|t| t.offset);
        for w in order.windows(2) {
            if w[0].offset + w[0].size > w[1].offset {
                return Err(GgufError::Overlap { a: w[0].name.clone(), b: w[1].name.clone() });
            }
        }
        Ok(GgufFile { bytes, version, metadata, meta_index, tensors, tensor_index, alignment, data_start })
    }

    /// The file's GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Byte offset of the data section in the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// A non-negative integer value (any integer type).
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// A numeric value (any integer or float type).
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<Tensor<'_>> {
        let info = &self.tensors[*self.tensor_index.get(name)?];
        // In bounds: checked when the file was parsed.
        let start = (self.data_start + info.offset) as usize;
        Some(Tensor { info, data: &self.bytes[start..start + info.size as usize] })
    }
}

impl Tensor<'_> {
    /// The row-major shape.
    pub fn shape(&self) -> Vec<u64> {
        self.info.shape()
    }

    /// The values as f32 (see the module docs for each type's definition).
    pub fn dequantize(&self) -> Result<Vec<f32>, GgufError> {
        let mut out = vec_with(self.info.len() as usize, &|| format!("tensor `{}`", self.info.name))?;
        dequantize(self.info.ggml_type, self.data, &mut |v| out.push(v))
            .map_err(|ty| GgufError::Unsupported { name: self.info.name.clone(), ty })?;
        Ok(out)
    }
}

/// Whether [`dequantize`] handles `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0 | GgmlType::Q4_1)
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Decodes `data`, whole blocks of `ty`, calling `emit` with each value in order. A trailing
/// partial block is ignored (a [`GgufFile`]'s tensors have none). `Err(ty)` for a type that is
/// not supported (see [`can_dequantize`]), before any value is emitted.
pub fn dequantize(ty: GgmlType, data: &[u8], emit: &mut dyn FnMut(f32)) -> Result<(), GgmlType> {
    match ty {
        GgmlType::F32 => {
            data.chunks_exact(4).for_each(|b| emit(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        }
        GgmlType::F16 => data.chunks_exact(2).for_each(|b| emit(f16_at(b, 0))),
        GgmlType::BF16 => data
            .chunks_exact(2)
            .for_each(|b| emit(bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())),
        other => {
            let Some(format) = other.block_format() else { return Err(other) };
            let mut values = [0.0f32; BlockFormat::BLOCK_ELEMS];
            for b in data.chunks_exact(format.block_bytes()) {
                crate::numerics::quant::dequantize_block(format, b, &mut values);
                values.iter().for_each(|&v| emit(v));
            }
        }
    }
    Ok(())
}

/// Builders of GGUF bytes, for tests (here and in tests/).
#[doc(hidden)]
pub mod build {
    /// Appends a GGUF string.
    pub fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    /// A tensor to write: name, GGUF dims (fastest first), ggml type id, raw bytes.
    pub struct T<'a> {
        pub name: &'a str,
        pub dims: &'a [u64],
        pub ty: u32,
        pub data: &'a [u8],
    }

    /// A version-3 file with the given metadata (key, type id, encoded value) and tensors laid
    /// out contiguously at 32-byte alignment.
    pub fn file(meta: &[(&str, u32, Vec<u8>)], tensors: &[T]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        for (k, ty, v) in meta {
            string(&mut out, k);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(v);
        }
        let mut offset = 0u64;
        for t in tensors {
            string(&mut out, t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.data.len() as u64).next_multiple_of(32);
        }
        for t in tensors {
            out.resize(out.len().next_multiple_of(32), 0);
            out.extend_from_slice(t.data);
        }
        out
    }
}

/// A GGUF v3 file that holds only the metadata of `file` whose keys `keep` accepts (in the
/// file's order) and no tensors: how a program carries its model's vocabulary (`.vocab` in the
/// assembler). Deterministic: the same input gives the same bytes, and a file made this way
/// gives itself back.
pub fn metadata_file(file: &GgufFile, keep: impl Fn(&str) -> bool) -> Vec<u8> {
    let kept: Vec<&(String, Value)> = file.metadata().iter().filter(|(k, _)| keep(k)).collect();
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kept.len() as u64).to_le_bytes());
    for (key, value) in kept {
        put_string(&mut out, key);
        out.extend(value_type(value).to_le_bytes());
        put_value(&mut out, value);
    }
    out
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// The GGUF type code of a value (the inverse of `read_value`'s).
fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn array_type(a: &Array) -> u32 {
    match a {
        Array::U8(_) => 0,
        Array::I8(_) => 1,
        Array::U16(_) => 2,
        Array::I16(_) => 3,
        Array::U32(_) => 4,
        Array::I32(_) => 5,
        Array::F32(_) => 6,
        Array::Bool(_) => 7,
        Array::String(_) => 8,
        Array::Array(_) => 9,
        Array::U64(_) => 10,
        Array::I64(_) => 11,
        Array::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.extend(x.to_le_bytes()),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend(array_type(a).to_le_bytes());
    out.extend((a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend(x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|x| put_array(out, x)),
    }
}
