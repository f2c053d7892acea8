//! Reading and writing numpy's .npy files as VM tensors.
//!
//! Accepted on input: little-endian, C-ordered arrays of `<f4` (f32), `<f2` (f16), `<i4` (i32),
//! `<i8` (converted to i32 when every value fits: numpy's default integer type), and `<u2` as
//! the raw bits of a bf16 tensor (numpy has no bf16 type). Outputs are written with the same
//! mapping (bf16 as `<u2`). Writes go through a temporary file and a rename, so a failed write
//! never leaves a half-written file.

use std::io::Read;
use std::path::Path;

use thiserror::Error;

use crate::isa::DType;
use crate::vm::{element_count, HostTensor};

/// Why a .npy file could not be read or written.
#[derive(Debug, Error)]
pub enum NpyError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is not a valid .npy file: {why}")]
    Malformed { path: String, why: String },
    #[error("{path}: numpy dtype `{descr}` is not supported (use float32, float16, int32, int64, or uint16 bits for bf16)")]
    Unsupported { path: String, descr: String },
    #[error("{path}: Fortran-ordered arrays are not supported; save np.ascontiguousarray(x) instead")]
    Fortran { path: String },
    #[error("{path}: the data is {got} bytes, but shape {shape:?} of {descr} needs {expected}")]
    Size { path: String, shape: Vec<u64>, descr: String, expected: u64, got: u64 },
    #[error("{path}: int64 value {value} at position {pos} does not fit in int32")]
    IntRange { path: String, value: i64, pos: usize },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// Reads a .npy file. `want` picks how an ambiguous file is taken: `<u2` data is bf16 bits only
/// when a bf16 tensor is wanted.
pub fn read(path: &Path, want: Option<DType>) -> Result<HostTensor, NpyError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io { path: p.clone(), source })?;
    parse(&bytes, &p, want)
}

/// Parses .npy bytes (see [`read`]); `name` is used in messages.
pub fn parse(bytes: &[u8], name: &str, want: Option<DType>) -> Result<HostTensor, NpyError> {
    let malformed = |why: String| NpyError::Malformed { path: name.to_string(), why };
    if let Some(depth) = header_text(bytes).map(|h| nesting_depth(&h)).filter(|&d| d > MAX_HEADER_NESTING) {
        return Err(malformed(format!(
            "the header nests brackets {depth} deep; a .npy header is a flat dictionary"
        )));
    }
    if let Some(why) = unsafe_group(bytes) {
        return Err(malformed(why));
    }
    let mut reader = bytes;
    let header = npyz::NpyHeader::from_reader(&mut reader).map_err(|e| malformed(e.to_string()))?;
    let data_start = bytes.len() - reader.len();
    let npy = npyz::NpyFile::with_header(header, &bytes[data_start..]);
    if npy.order() == npyz::Order::Fortran && npy.shape().len() > 1 {
        return Err(NpyError::Fortran { path: name.to_string() });
    }
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(NpyError::Unsupported { path: name.to_string(), descr: format!("{other:?}") }),
    };
    let shape: Vec<u64> = npy.shape().to_vec();
    let (dtype, elem) = match (descr.as_str(), want) {
        ("<f4", _) => (DType::F32, 4),
        ("<f2", _) => (DType::F16, 2),
        ("<i4", _) => (DType::I32, 4),
        ("<i8", _) => (DType::I32, 8),
        ("<u2", Some(DType::Bf16)) => (DType::Bf16, 2),
        _ => return Err(NpyError::Unsupported { path: name.to_string(), descr }),
    };
    let shape_usize: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let count =
        element_count(&shape_usize).ok_or_else(|| malformed(format!("shape {shape:?} is too large")))?;
    let mut data = Vec::new();
    let mut rest = &bytes[data_start..];
    rest.read_to_end(&mut data).map_err(|e| malformed(e.to_string()))?;
    let expected = (count as u64).saturating_mul(elem);
    if data.len() as u64 != expected {
        return Err(NpyError::Size {
            path: name.to_string(),
            shape,
            descr,
            expected,
            got: data.len() as u64,
        });
    }
    if elem == 8 {
        let mut narrowed = Vec::with_capacity(count * 4);
        for (pos, c) in data.chunks_exact(8).enumerate() {
            let value = i64::from_le_bytes(c.try_into().expect("8 bytes"));
            let v = i32::try_from(value).map_err(|_| NpyError::IntRange {
                path: name.to_string(),
                value,
                pos,
            })?;
            narrowed.extend(v.to_le_bytes());
        }
        data = narrowed;
    }
    HostTensor::from_bytes(dtype, shape_usize, &data)
        .ok_or_else(|| malformed("cannot allocate the array".into()))
}

/// Deepest bracket nesting a header may have: the dictionary, and a tuple or list in it (a
/// structured dtype's list of fields is one more). npyz parses the header with a backtracking
/// grammar that takes time exponential in the nesting (the `npy` fuzz target found a
/// 159-byte file with 28 nested braces that did not finish in 30 s), so deeper headers are
/// refused before npyz sees them.
const MAX_HEADER_NESTING: usize = 4;

/// The header text of .npy bytes (magic, version, length, then the text), when present.
fn header_text(bytes: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    let (start, len) = match *bytes.get(6)? {
        1 => (10usize, u16::from_le_bytes(bytes.get(8..10)?.try_into().ok()?) as usize),
        2 | 3 => (12, u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?) as usize),
        _ => return None,
    };
    Some(String::from_utf8_lossy(bytes.get(start..start.checked_add(len)?)?))
}

/// The deepest nesting of `{`, `[` and `(` in `text` (quotes not considered).
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '{' | '[' | '(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' | ']' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Why the header cannot go to npyz safely, if it cannot: a bracketed group (`(...)` or
/// `[...]`, innermost) that is not plain whole numbers, or whose element count times 16 (the
/// widest item npyz multiplies it by) does not fit 64 bits. npyz multiplies the dimensions of
/// whatever it reads as the shape unchecked (a panic where overflow checks are on, a wrong
/// count where not), and its grammar reads more than plain numbers as integers (the `npy` fuzz
/// target found `0+00100000000` read as one, and a garbled first `shape` key hiding an
/// overflowing second), so every group is checked, not only the one after `shape`. A shape
/// is always a tuple of whole numbers; the groups of a structured dtype's descr hold quotes
/// and are refused here too (adeadvm reads no structured dtypes).
fn unsafe_group(bytes: &[u8]) -> Option<String> {
    let header = header_text(bytes)?;
    let mut rest: &str = &header;
    while let Some(open) = rest.find(['(', '[']) {
        let from_open = &rest[open..];
        // The next bracket after this one: a closing one ends an innermost group.
        let Some(next) = from_open[1..].find(['(', '[', ')', ']']).map(|i| i + 1) else { break };
        let group = &from_open[..=next];
        if group.ends_with([')', ']']) {
            let inner = &group[1..group.len() - 1];
            if !inner
                .chars()
                .all(|c| c.is_ascii_digit() || c == ',' || c == 'L' || c == 'l' || c.is_whitespace())
            {
                return Some(format!("{group} is not a tuple of whole numbers"));
            }
            let mut count: Option<u64> = Some(16);
            for d in inner.split(',').map(|d| d.trim().trim_end_matches(['L', 'l'])).filter(|d| !d.is_empty())
            {
                // A dimension too large for u64 overflows too.
                count = count.and_then(|c| c.checked_mul(d.parse::<u64>().ok()?));
            }
            if count.is_none() {
                return Some(format!("shape {group} has more elements than a .npy file can hold"));
            }
        }
        rest = &from_open[next..];
    }
    None
}

/// The .npy encoding of a tensor.
pub fn to_bytes(t: &HostTensor) -> Vec<u8> {
    let descr = match t.dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::I32 => "<i4",
        DType::Bf16 => "<u2",
    };
    let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    let shape = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Version 1.0: magic, version, u16 header length; the whole preamble padded to 64 bytes
    // with spaces and a final newline, as numpy writes it.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.bytes().len());
    out.extend(b"\x93NUMPY\x01\x00");
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(t.bytes());
    out
}

/// Writes a tensor as .npy through a temporary file and a rename.
pub fn write(path: &Path, t: &HostTensor) -> Result<(), NpyError> {
    write_atomically(path, &to_bytes(t))
        .map_err(|source| NpyError::Write { path: path.display().to_string(), source })
}

/// The one atomic-write helper, also reachable here where it first lived.
pub use crate::output::write_atomically;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        for dtype in DType::ALL {
            let mut t = HostTensor::zeroed(dtype, vec![2, 3]).unwrap();
            for (i, b) in t.bytes_mut().iter_mut().enumerate() {
                *b = (i * 7) as u8;
            }
            let back = parse(&to_bytes(&t), "t.npy", Some(dtype)).unwrap();
            assert_eq!(back, t);
        }
        let scalar = HostTensor::from_f32(vec![], &[1.5]).unwrap();
        assert_eq!(parse(&to_bytes(&scalar), "s.npy", None).unwrap(), scalar);
        let vector = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(parse(&to_bytes(&vector), "v.npy", None).unwrap(), vector);
    }

    #[test]
    fn header_is_padded_like_numpy() {
        let t = HostTensor::from_i32(vec![4], &[1, 2, 3, 4]).unwrap();
        let b = to_bytes(&t);
        let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        assert_eq!(b[10 + header_len - 1], b'\n');
    }
}
