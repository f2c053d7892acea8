//! Reading and writing numpy's .npy files as VM tensors.
//!
//! Accepted on input: C-ordered arrays of `f4` (f32), `f2` (f16), `i4` (i32), `i8` (converted
//! to i32 when every value fits: numpy's default integer type; else an error naming the first
//! value that does not), and `u2` as the raw bits of a bf16 tensor (numpy has no bf16 type),
//! little-endian (`<f4`) or big-endian (`>f4`, converted), as `npy(...)` constants are. Outputs
//! are written little-endian with the same mapping (bf16 as `<u2`). Writes go through a temporary file and a rename, so a failed write
//! never leaves a half-written file.
//!
//! The header is read by [`parse_header`], our own strict parser of the format's header
//! dictionary (format versions 1.0, 2.0 and 3.0): one linear pass over the text, no
//! backtracking and no recursion, so hostile headers cannot make it slow, deep or large.

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
    #[error("{path} holds int64 data where {want} data is wanted (int64 is narrowed to int32 for i32 tensors only)")]
    Int64Mismatch { path: String, want: DType },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// Reads a .npy file. `want` picks how an ambiguous file is taken: `<u2` data is bf16 bits only
/// when a bf16 tensor is wanted.
pub fn read(path: &Path, want: Option<DType>) -> Result<HostTensor, NpyError> {
    read_limited(path, want, crate::input::DEFAULT_READ_LIMIT)
}

/// [`read`], refusing a file of more than `limit` bytes before reading it (`run --input` passes
/// the memory budget). Only a regular file is read (see [`crate::input::read_file`]).
pub fn read_limited(path: &Path, want: Option<DType>, limit: u64) -> Result<HostTensor, NpyError> {
    let p = path.display().to_string();
    let bytes =
        crate::input::read_file(path, limit).map_err(|source| NpyError::Io { path: p.clone(), source })?;
    parse(&bytes, &p, want)
}

/// Parses .npy bytes (see [`read`]); `name` is used in messages.
pub fn parse(bytes: &[u8], name: &str, want: Option<DType>) -> Result<HostTensor, NpyError> {
    let malformed = |why: String| NpyError::Malformed { path: name.to_string(), why };
    let h = parse_header(bytes).map_err(malformed)?;
    let descr = h.descr.clone();
    if !h.plain {
        return Err(NpyError::Unsupported { path: name.to_string(), descr });
    }
    // Fortran order is the same bytes as C order for a scalar or a vector.
    if h.fortran_order && h.shape.len() > 1 {
        return Err(NpyError::Fortran { path: name.to_string() });
    }
    // Byte order: `<` little-endian, `>` big-endian (each item's bytes reversed below).
    let (big, code) = match descr.split_at_checked(1) {
        Some(("<", code)) => (false, code),
        Some((">", code)) => (true, code),
        _ => return Err(NpyError::Unsupported { path: name.to_string(), descr }),
    };
    let (dtype, elem) = match (code, want) {
        ("f4", _) => (DType::F32, 4),
        ("f2", _) => (DType::F16, 2),
        ("i4", _) => (DType::I32, 4),
        // Said here, with the file's own dtype: narrowed first, the data would be refused
        // later as "i32 data", a type the file does not hold.
        ("i8", Some(want)) if want != DType::I32 => {
            return Err(NpyError::Int64Mismatch { path: name.to_string(), want })
        }
        ("i8", _) => (DType::I32, 8),
        ("u2", Some(DType::Bf16)) => (DType::Bf16, 2),
        _ => return Err(NpyError::Unsupported { path: name.to_string(), descr }),
    };
    let data = &bytes[h.data_start..];
    let Some(expected) = h.count.checked_mul(elem) else {
        return Err(malformed(format!(
            "shape {} of {descr} takes more than 2^64 bytes",
            tuple_text(&h.shape)
        )));
    };
    if data.len() as u64 != expected {
        return Err(NpyError::Size {
            path: name.to_string(),
            shape: h.shape,
            descr,
            expected,
            got: data.len() as u64,
        });
    }
    // The data is all there, so every count below fits memory already.
    let shape: Vec<usize> = h.shape.iter().map(|&d| d as usize).collect();
    let count =
        element_count(&shape).ok_or_else(|| malformed(format!("shape {:?} is too large", h.shape)))?;
    let swapped;
    let data = if big {
        let mut v = Vec::new();
        v.try_reserve_exact(data.len()).map_err(|_| malformed("cannot allocate the array".into()))?;
        for c in data.chunks_exact(elem as usize) {
            v.extend(c.iter().rev());
        }
        swapped = v;
        &swapped[..]
    } else {
        data
    };
    if elem == 8 {
        let mut narrowed = Vec::new();
        narrowed.try_reserve_exact(count * 4).map_err(|_| malformed("cannot allocate the array".into()))?;
        for (pos, c) in data.chunks_exact(8).enumerate() {
            let value = i64::from_le_bytes(c.try_into().expect("8 bytes"));
            let v = i32::try_from(value).map_err(|_| NpyError::IntRange {
                path: name.to_string(),
                value,
                pos,
            })?;
            narrowed.extend(v.to_le_bytes());
        }
        return HostTensor::from_bytes(dtype, shape, &narrowed)
            .ok_or_else(|| malformed("cannot allocate the array".into()));
    }
    HostTensor::from_bytes(dtype, shape, data).ok_or_else(|| malformed("cannot allocate the array".into()))
}

/// What a .npy header says: the parts of its dictionary, and where the data begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The format version, (1, 0), (2, 0) or (3, 0).
    pub version: (u8, u8),
    /// The dtype as numpy writes it, like `<f4`; for a structured dtype, the text of its list
    /// of fields.
    pub descr: String,
    /// Whether `descr` is one type string (`<f4`), not a structured dtype's list of fields.
    pub plain: bool,
    /// The `fortran_order` flag.
    pub fortran_order: bool,
    /// The dimensions, outermost first (empty for a scalar).
    pub shape: Vec<u64>,
    /// The product of `shape`; it fits 64 bits (a header whose product does not is refused).
    pub count: u64,
    /// Offset of the first byte after the header: the array data.
    pub data_start: usize,
}

/// Most dimensions a header may give: numpy's own limit (`NPY_MAXDIMS` in numpy 2).
const MAX_NPY_DIMS: usize = 64;

/// Parses the header of .npy bytes, per the NumPy format specification
/// (numpy.lib.format): the magic string `\x93NUMPY`, a version byte pair (1.0, 2.0 or 3.0),
/// the header length (u16 little-endian for 1.0, u32 for 2.0 and 3.0), then the header: the
/// Python literal of a dictionary with exactly the keys `'descr'` (a dtype string, or a
/// structured dtype's list of fields), `'fortran_order'` (`True` or `False`) and `'shape'` (a
/// tuple of whole numbers), padded with spaces and ended by a newline. ASCII for 1.0 and 2.0,
/// UTF-8 for 3.0. Anything else is refused with the reason: other versions, a truncated
/// header, unknown, missing or repeated keys, a value of the wrong form, a shape whose element
/// count does not fit 64 bits. Python 2's long suffix (`3L`), which old numpy wrote in shapes,
/// is accepted in 1.0 and 2.0 headers, as numpy itself does.
///
/// One pass, left to right, without backtracking or recursion: linear time in the header,
/// however it is built, and no allocation beyond a small multiple of its length.
pub fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(if MAGIC.starts_with(bytes) {
            format!("truncated: {} bytes, shorter than the .npy magic string", bytes.len())
        } else {
            "it does not begin with the .npy magic string \\x93NUMPY".into()
        });
    }
    let (Some(&major), Some(&minor)) = (bytes.get(6), bytes.get(7)) else {
        return Err(format!("truncated: {} bytes, with no format version", bytes.len()));
    };
    let len_bytes = match (major, minor) {
        (1, 0) => 2,
        (2 | 3, 0) => 4,
        _ => return Err(format!("format version {major}.{minor} is not one of 1.0, 2.0 and 3.0")),
    };
    let start = 8 + len_bytes;
    let Some(len) = bytes.get(8..start) else {
        return Err(format!("truncated: {} bytes, with no header length", bytes.len()));
    };
    let len = len.iter().rev().fold(0usize, |a, &b| a << 8 | b as usize);
    let Some(text) = bytes.get(start..).and_then(|rest| rest.get(..len)) else {
        return Err(format!(
            "truncated header: it says it is {len} bytes, but {} follow",
            bytes.len() - start
        ));
    };
    let text = match major {
        3 => std::str::from_utf8(text).map_err(|_| "the header is not UTF-8 text".to_string())?,
        _ => match std::str::from_utf8(text) {
            Ok(t) if t.is_ascii() => t,
            _ => return Err(format!("the header of a version {major}.0 file is not ASCII text")),
        },
    };
    let mut c = Cursor { s: text, at: 0 };
    let (descr, plain, fortran_order, shape) = c.dictionary(major < 3)?;
    let count = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {} has more elements than a .npy file can hold", tuple_text(&shape)))?;
    Ok(Header { version: (major, minor), descr, plain, fortran_order, shape, count, data_start: start + len })
}

/// A shape as Python writes a tuple: `()`, `(3,)`, `(2, 3)`.
fn tuple_text(shape: &[u64]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// Whether `descr` is written the way numpy writes a dtype string: an optional byte order
/// (`<`, `>`, `|`, `=`), a kind letter (or `?`), an optional size, and for dates and times a
/// unit in brackets (`<M8[ns]`).
fn is_dtype_string(descr: &str) -> bool {
    let s = descr.strip_prefix(['<', '>', '|', '=']).unwrap_or(descr);
    let mut chars = s.chars();
    if !chars.next().is_some_and(|k| k.is_ascii_alphabetic() || k == '?') {
        return false;
    }
    let rest = chars.as_str();
    let (size, unit) = match rest.find('[') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    size.bytes().all(|b| b.is_ascii_digit())
        && unit.is_none_or(|u| {
            u.len() > 2 && u.ends_with(']') && u[1..u.len() - 1].bytes().all(|b| b.is_ascii_alphanumeric())
        })
}

/// `s` with control characters escaped (`\n`, `\u{0}`), for messages.
fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() }).collect()
}

/// A position in the header text.
struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    /// Skips the whitespace Python allows between the tokens of a dictionary literal.
    fn skip_space(&mut self) {
        let rest = &self.s[self.at..];
        self.at += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r', '\x0c']).len();
    }

    /// Takes `c` (after whitespace) if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.s[self.at..].starts_with(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// What comes next, for messages: up to the next delimiter, at most 24 characters.
    fn found(&mut self) -> String {
        self.skip_space();
        let rest = &self.s[self.at..];
        if rest.is_empty() {
            return "the end of the header".into();
        }
        let mut end = rest
            .char_indices()
            .find(|&(i, ch)| i > 0 && matches!(ch, ',' | ':' | '}' | ')' | ']' | ' ' | '\n'))
            .map_or(rest.len(), |(i, _)| i);
        if let Some((i, _)) = rest[..end].char_indices().nth(24) {
            end = i;
        }
        format!("`{}`", printable(&rest[..end]))
    }

    fn expect(&mut self, c: char, what: &str) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected {what} in the header, found {}", self.found()))
        }
    }

    /// A quoted string: `'...'` or `"..."`, without escapes (numpy writes none).
    fn string(&mut self, what: &str) -> Result<&'a str, String> {
        self.skip_space();
        let rest: &'a str = &self.s[self.at..];
        let Some(q) = rest.chars().next().filter(|&q| q == '\'' || q == '"') else {
            return Err(format!("expected {what} in the header, found {}", self.found()));
        };
        let body = &rest[1..];
        match body.find([q, '\\', '\n']) {
            Some(end) if body[end..].starts_with(q) => {
                self.at += end + 2;
                Ok(&body[..end])
            }
            _ => Err(format!("the string {} in the header is not closed on its line", self.found())),
        }
    }

    /// The run of letters, digits and `_` next (a Python name or number), possibly empty.
    fn word(&mut self) -> &'a str {
        self.skip_space();
        let rest: &'a str = &self.s[self.at..];
        let len = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_').len();
        self.at += len;
        &rest[..len]
    }

    /// The text of a structured dtype's list of fields, from its `[` to the matching `]`
    /// (brackets inside quoted names do not count).
    fn field_list(&mut self) -> Result<String, String> {
        let from = self.at;
        let mut depth = 0usize;
        let mut quote = None;
        for (i, ch) in self.s[from..].char_indices() {
            match (quote, ch) {
                (Some(q), _) if ch == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(ch),
                (None, '[' | '(') => depth += 1,
                (None, ']' | ')') => {
                    depth -= 1;
                    if depth == 0 {
                        self.at = from + i + 1;
                        return Ok(self.s[from..self.at].to_string());
                    }
                }
                _ => {}
            }
        }
        Err("the structured dtype's list of fields is not closed".into())
    }

    /// The shape tuple: `()`, `(3,)`, `(2, 3)` or `(2, 3,)`.
    fn shape(&mut self, long_suffix: bool) -> Result<Vec<u64>, String> {
        self.expect('(', "the shape's tuple `(`")?;
        let mut dims = Vec::new();
        if self.eat(')') {
            return Ok(dims);
        }
        loop {
            let word = self.word();
            let digits = match word.strip_suffix(['L', 'l']) {
                Some(d) if long_suffix => d,
                _ => word,
            };
            let valid = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            if !valid {
                let found = if word.is_empty() { self.found() } else { format!("`{word}`") };
                return Err(format!("expected a whole number in the shape, found {found}"));
            }
            if dims.len() == MAX_NPY_DIMS {
                return Err(format!("the shape has more than {MAX_NPY_DIMS} dimensions"));
            }
            dims.push(
                digits
                    .parse::<u64>()
                    .map_err(|_| format!("dimension {digits} of the shape does not fit 64 bits"))?,
            );
            if self.eat(')') {
                if dims.len() == 1 {
                    // `(3)` is the number 3 in Python, not a tuple.
                    return Err(format!(
                        "the shape ({}) is not a tuple; numpy writes ({},)",
                        dims[0], dims[0]
                    ));
                }
                return Ok(dims);
            }
            self.expect(',', "`,` or `)` in the shape")?;
            if self.eat(')') {
                return Ok(dims);
            }
        }
    }

    /// The whole dictionary and what may follow it (spaces, then the final newline).
    fn dictionary(&mut self, long_suffix: bool) -> Result<(String, bool, bool, Vec<u64>), String> {
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        self.expect('{', "a dictionary `{`")?;
        loop {
            if self.eat('}') {
                break;
            }
            let key = self.string("a quoted key ('descr', 'fortran_order' or 'shape')")?;
            let key = key.to_string();
            self.expect(':', "`:` after a key")?;
            let repeated = match key.as_str() {
                "descr" => {
                    self.skip_space();
                    let value = if self.s[self.at..].starts_with('[') {
                        (self.field_list()?, false)
                    } else {
                        let d = self.string("the dtype as a string such as '<f4'")?;
                        if !is_dtype_string(d) {
                            return Err(format!("'descr' is '{}', which is not a numpy dtype", printable(d)));
                        }
                        (d.to_string(), true)
                    };
                    descr.replace(value).is_some()
                }
                "fortran_order" => {
                    let value = match self.word() {
                        "True" => true,
                        "False" => false,
                        "" => {
                            return Err(format!(
                                "expected True or False for 'fortran_order', found {}",
                                self.found()
                            ))
                        }
                        w => return Err(format!("expected True or False for 'fortran_order', found `{w}`")),
                    };
                    fortran.replace(value).is_some()
                }
                "shape" => shape.replace(self.shape(long_suffix)?).is_some(),
                other => {
                    return Err(format!(
                        "unknown key '{}'; the header has exactly 'descr', 'fortran_order' and 'shape'",
                        printable(other)
                    ))
                }
            };
            if repeated {
                return Err(format!("the key '{key}' appears twice"));
            }
            if !self.eat(',') {
                self.expect('}', "`,` or `}` after a value")?;
                break;
            }
        }
        let rest = &self.s[self.at..];
        if !rest.trim_end_matches([' ', '\n']).is_empty() {
            return Err(format!(
                "expected only spaces after the header's dictionary, found {}",
                self.found()
            ));
        }
        if !rest.ends_with('\n') {
            return Err("the header does not end with a newline".into());
        }
        let missing = |k: &str| format!("the header has no '{k}' key");
        let (descr, plain) = descr.ok_or_else(|| missing("descr"))?;
        Ok((
            descr,
            plain,
            fortran.ok_or_else(|| missing("fortran_order"))?,
            shape.ok_or_else(|| missing("shape"))?,
        ))
    }
}

/// The .npy encoding of a tensor.
pub fn to_bytes(t: &HostTensor) -> Vec<u8> {
    let preamble = preamble(t);
    let mut out = Vec::with_capacity(preamble.len() + t.bytes().len());
    out.extend(preamble);
    out.extend(t.bytes());
    out
}

/// What a .npy file holds before the tensor's bytes (magic, version, header), so a writer can
/// send the data straight from the tensor without copying it.
pub fn preamble(t: &HostTensor) -> Vec<u8> {
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
    let mut out = Vec::with_capacity(10 + header.len());
    out.extend(b"\x93NUMPY\x01\x00");
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out
}

/// Writes a tensor as .npy through a temporary file and a rename.
pub fn write(path: &Path, t: &HostTensor) -> Result<(), NpyError> {
    let mut batch = crate::output::OutputBatch::new();
    stage(&mut batch, path, t)?;
    batch.commit().map_err(|source| NpyError::Write { path: path.display().to_string(), source })
}

/// Writes a tensor as .npy to a temporary for `path` in `batch` (see
/// [`crate::output::OutputBatch`]); the data goes from the tensor to the file without a copy.
pub fn stage(batch: &mut crate::output::OutputBatch, path: &Path, t: &HostTensor) -> Result<(), NpyError> {
    batch
        .stage_parts(path, &[&preamble(t), t.bytes()])
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

    /// .npy bytes of format `version` with header text `dict` (padded and ended with a
    /// newline as numpy does) and `data`.
    fn npy_bytes(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let len_bytes = if version == 1 { 2 } else { 4 };
        let mut header = dict.to_string();
        let unpadded = 8 + len_bytes + header.len() + 1;
        header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
        header.push('\n');
        let mut out = b"\x93NUMPY".to_vec();
        out.extend([version, 0]);
        out.extend(&(header.len() as u32).to_le_bytes()[..len_bytes]);
        out.extend(header.as_bytes());
        out.extend(data);
        out
    }

    fn err(bytes: &[u8]) -> String {
        parse(bytes, "a.npy", None).unwrap_err().to_string()
    }

    #[test]
    fn every_version_and_spelling_numpy_writes_is_read() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let want = HostTensor::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        for version in [1, 2, 3] {
            for dict in [
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                "{\"shape\": (2,3,), \"descr\": \"<f4\", \"fortran_order\": False}",
                "{ 'fortran_order' : False , 'shape' : ( 2 , 3 ) , 'descr' : '<f4' }",
            ] {
                assert_eq!(parse(&npy_bytes(version, dict, &data), "a.npy", None).unwrap(), want, "{dict}");
            }
        }
        // Python 2's long suffix, as old numpy wrote shapes.
        let old = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", &data);
        assert_eq!(parse(&old, "a.npy", None).unwrap(), want);
        let h = parse_header(&npy_bytes(
            3,
            "{'descr': [('é', '<f4')], 'fortran_order': False, 'shape': (), }",
            &[],
        ))
        .unwrap();
        assert_eq!((h.descr.as_str(), h.plain, h.version), ("[('é', '<f4')]", false, (3, 0)));
    }

    #[test]
    fn headers_numpy_would_not_write_are_refused_with_the_reason() {
        let v1 = |dict: &str| err(&npy_bytes(1, dict, &[0; 4]));
        let cases: &[(&str, &str)] = &[
            ("{'descr': '<f4', 'fortran_order': False}", "the header has no 'shape' key"),
            ("{'descr': '<f4', 'shape': (1,)}", "the header has no 'fortran_order' key"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
                "unknown key 'extra'; the header has exactly 'descr', 'fortran_order' and 'shape'",
            ),
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
                "the key 'descr' appears twice",
            ),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
                "expected True or False for 'fortran_order', found `0`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': 1}",
                "expected the shape's tuple `(` in the header, found `1`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1)}",
                "the shape (1) is not a tuple; numpy writes (1,)",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
                "expected a whole number in the shape, found `-1`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (01,)}",
                "expected a whole number in the shape, found `01`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1_0,)}",
                "expected a whole number in the shape, found `1_0`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1.0,)}",
                "expected `,` or `)` in the shape in the header, found `.0`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)}",
                "dimension 18446744073709551616 of the shape does not fit 64 bits",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
                "shape (4294967296, 4294967296) has more elements than a .npy file can hold",
            ),
            (
                "{'descr': 'float32', 'fortran_order': False, 'shape': (1,)}",
                "'descr' is 'float32', which is not a numpy dtype",
            ),
            (
                "{'descr': {'<f4'}, 'fortran_order': False, 'shape': (1,)}",
                "expected the dtype as a string such as '<f4' in the header, found `{'<f4'`",
            ),
            (
                "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}",
                "'descr' is '<f4, ', which is not a numpy dtype",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
                "expected only spaces after the header's dictionary, found `x`",
            ),
            ("['descr', '<f4']", "expected a dictionary `{` in the header, found `['descr'`"),
        ];
        for (dict, why) in cases {
            assert_eq!(v1(dict), format!("a.npy is not a valid .npy file: {why}"), "{dict}");
        }
        let mut long_in_v3 =
            npy_bytes(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (1L,)}", &[0; 4]);
        assert_eq!(
            err(&long_in_v3),
            "a.npy is not a valid .npy file: expected a whole number in the shape, found `1L`"
        );
        long_in_v3[6] = 4;
        assert_eq!(
            err(&long_in_v3),
            "a.npy is not a valid .npy file: format version 4.0 is not one of 1.0, 2.0 and 3.0"
        );
    }

    #[test]
    fn truncated_or_foreign_bytes_are_malformed() {
        let good = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", &[0; 4]);
        let why = |b: &[u8]| err(b).trim_start_matches("a.npy is not a valid .npy file: ").to_string();
        assert_eq!(why(b"PK\x03\x04"), "it does not begin with the .npy magic string \\x93NUMPY");
        assert_eq!(why(&good[..4]), "truncated: 4 bytes, shorter than the .npy magic string");
        assert_eq!(why(&good[..7]), "truncated: 7 bytes, with no format version");
        assert_eq!(why(&good[..9]), "truncated: 9 bytes, with no header length");
        assert_eq!(why(&good[..40]), "truncated header: it says it is 118 bytes, but 30 follow");
        let mut no_newline = good.clone();
        no_newline[127] = b' ';
        assert_eq!(why(&no_newline), "the header does not end with a newline");
        let mut latin1 = good.clone();
        latin1[100] = 0xe9;
        assert_eq!(why(&latin1), "the header of a version 1.0 file is not ASCII text");
    }

    #[test]
    fn dtype_order_and_length_errors_name_the_file() {
        let f8 = npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", &[0; 8]);
        assert_eq!(
            err(&f8),
            "a.npy: numpy dtype `<f8` is not supported (use float32, float16, int32, int64, or uint16 bits for bf16)"
        );
        let fields = npy_bytes(
            1,
            "{'descr': [('a', '<f4'), ('b', '<i4', (2,))], 'fortran_order': False, 'shape': (1,), }",
            &[0; 12],
        );
        assert_eq!(
            err(&fields),
            "a.npy: numpy dtype `[('a', '<f4'), ('b', '<i4', (2,))]` is not supported (use float32, float16, int32, int64, or uint16 bits for bf16)"
        );
        let fortran = npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", &[0; 16]);
        assert_eq!(
            err(&fortran),
            "a.npy: Fortran-ordered arrays are not supported; save np.ascontiguousarray(x) instead"
        );
        // A vector's bytes are the same in either order.
        let vector = npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }", &[0; 16]);
        assert_eq!(parse(&vector, "a.npy", None).unwrap().shape, [4]);
        let short = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", &[0; 20]);
        assert_eq!(err(&short), "a.npy: the data is 20 bytes, but shape [2, 3] of <f4 needs 24");
        let huge =
            npy_bytes(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904,), }", &[]);
        assert_eq!(
            err(&huge),
            "a.npy is not a valid .npy file: shape (4611686018427387904,) of <i8 takes more than 2^64 bytes"
        );
    }
}
