//! The `.bib` container: how a program is laid out in bytes.
//!
//! ```text
//! offset 0   magic "ADEADVM\x1a"                     8 bytes
//!        8   format version major, minor             u16, u16
//!        12  tier (0 strict, 1 fast), 3 zero bytes
//!        16  section count                           u32
//!        20  zero                                    u32
//!        24  total file length, digest included      u64
//!        32  zero                                    32 bytes
//!        64  section table: per section kind u32, zero u32, offset u64, length u64
//!        ... sections, each at an 8-byte aligned offset (DATA at a 64-byte aligned one),
//!            zero bytes between them
//!  len-32    BLAKE3 digest of every byte before it: the program's identity
//! ```
//! All integers are little-endian. Strings are a u32 byte length then UTF-8. Section kinds
//! with bit 31 set are optional: a reader that does not know one skips it. Any other unknown
//! kind is an error, so a newer writer can add data an older reader may safely ignore.
//!
//! Invariants: `Program::from_bytes(p.to_bytes())` gives back `p`; loading never panics and
//! never allocates more than a small multiple of the input's size, whatever the bytes claim;
//! every byte is covered by the digest, so any change to a file is caught; a loaded program
//! owns its bytes (see [`Program::load`]), so changing the file afterwards cannot change it.
//!
//! This layer checks structure only (counts, ranges, names, enum values). Whether the program
//! makes sense (shapes, dtypes, jumps, memory) is the verifier's job.

use std::fmt;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

use thiserror::Error;

use crate::isa::{
    BlockFormat, DType, Dim, InsnBytes, Shape, SymId, TensorId, Tier, INSN_BYTES, MAX_DIM, MAX_RANK,
};

/// First 8 bytes of every .bib file.
pub const MAGIC: [u8; 8] = *b"ADEADVM\x1a";
/// Format major version this build writes and reads.
pub const VERSION_MAJOR: u16 = 1;
/// Format minor version this build writes for programs without block-quantized constants;
/// files with a larger minor still load.
pub const VERSION_MINOR: u16 = 0;
/// The minor version of a program that has block-quantized constants (tensor kind 4), which
/// readers before it do not know. Other programs keep minor 0, so their bytes (and digests)
/// are what they were.
pub const VERSION_MINOR_BLOCKS: u16 = 1;
/// Alignment of the data section and of every constant in it.
pub const DATA_ALIGN: usize = 64;
const HEADER_BYTES: usize = 64;
const SECTION_ENTRY_BYTES: usize = 24;
const DIGEST_BYTES: usize = 32;
const OPTIONAL_SECTION_BIT: u32 = 1 << 31;

/// Section kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Section {
    Code = 1,
    Syms = 2,
    Tensors = 3,
    Outputs = 4,
    Data = 5,
    Spirv = 6,
    Kernels = 7,
    Debug = 8,
    /// Optional: a tokenizer's vocabulary (see [`Program::vocab`]).
    Vocab = OPTIONAL_SECTION_BIT | 9,
    /// Optional: where instructions came from (see [`DebugInfo::origins`]).
    Origins = OPTIONAL_SECTION_BIT | 10,
}

impl Section {
    const ALL: [Section; 10] = [
        Section::Code,
        Section::Syms,
        Section::Tensors,
        Section::Outputs,
        Section::Data,
        Section::Spirv,
        Section::Kernels,
        Section::Debug,
        Section::Vocab,
        Section::Origins,
    ];
    fn name(self) -> &'static str {
        match self {
            Section::Code => "code",
            Section::Syms => "symbols",
            Section::Tensors => "tensors",
            Section::Outputs => "outputs",
            Section::Data => "data",
            Section::Spirv => "spirv",
            Section::Kernels => "kernels",
            Section::Debug => "debug",
            Section::Vocab => "vocab",
            Section::Origins => "origins",
        }
    }
}

/// Why bytes are not a loadable program.
#[derive(Debug, Error)]
pub enum FormatError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("not an adeadvm program: the file is {0} bytes, shorter than the {1}-byte header and digest")]
    TooShort(usize, usize),
    #[error("not an adeadvm program: bad magic bytes (expected \"ADEADVM\\x1a\", found {0:?})")]
    BadMagic([u8; 8]),
    #[error(
        "this program uses .bib format {major}.{minor}, but this adeadvm reads format {}.x; upgrade adeadvm",
        VERSION_MAJOR
    )]
    NewerMajor { major: u16, minor: u16 },
    #[error(
        "this program uses .bib format {major}.{minor}, older than any this adeadvm reads (format {}.x)",
        VERSION_MAJOR
    )]
    OlderMajor { major: u16, minor: u16 },
    #[error("the header says the file is {claimed} bytes, but it is {actual}: truncated or padded")]
    LengthMismatch { claimed: u64, actual: usize },
    #[error("digest mismatch: the file is corrupt or was modified (stored {stored}, computed {computed})")]
    DigestMismatch { stored: String, computed: String },
    #[error("malformed header: {0}")]
    Header(String),
    #[error("malformed {section} section at file offset {offset}: {what}")]
    Section { section: &'static str, offset: usize, what: String },
}

/// Shorthand for results of this module.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

enum Backing {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Owned(v) => v,
            Backing::Mapped(m) => m,
        }
    }
}

/// Constant data: a shared, read-only byte range of an owned buffer or a mapped file.
#[derive(Clone)]
pub struct Blob {
    backing: Arc<Backing>,
    range: Range<usize>,
}

impl Blob {
    /// Wraps an owned buffer.
    pub fn from_vec(v: Vec<u8>) -> Blob {
        let range = 0..v.len();
        Blob { backing: Arc::new(Backing::Owned(v)), range }
    }
    fn sub(&self, r: Range<usize>) -> Blob {
        Blob { backing: self.backing.clone(), range: self.range.start + r.start..self.range.start + r.end }
    }
    /// Whether the bytes come from a memory-mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(*self.backing, Backing::Mapped(_))
    }
}

impl Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.backing[self.range.clone()]
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes{})", self.range.len(), if self.is_mapped() { ", mapped" } else { "" })
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Blob) -> bool {
        **self == **other
    }
}

/// Where a constant's values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstData {
    /// `len` bytes at `offset` in the data section (offset a multiple of [`DATA_ALIGN`]).
    Bytes { offset: u64, len: u64 },
    /// Every element has these bits (the low `dtype.size()` bytes, little-endian).
    Splat(u32),
    /// `len` bytes at `offset` in the data section holding the f32 values block-quantized in
    /// `format` (see [`BlockFormat`]); the tensor's dtype is f32.
    Blocks { format: BlockFormat, offset: u64, len: u64 },
}

/// What a tensor-table entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// Storage from ALLOC to FREE, placed in the arena.
    Temp,
    /// A named input the caller binds; read-only.
    Input,
    /// A constant stored in the program; read-only.
    Const(ConstData),
}

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDecl {
    pub name: String,
    pub dtype: DType,
    pub shape: Shape,
    pub kind: TensorKind,
}

/// One declared program output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputDecl {
    pub name: String,
    pub dtype: DType,
    pub shape: Shape,
}

/// A SPIR-V module embedded in the program.
#[derive(Clone, Debug, PartialEq)]
pub struct SpirvModule {
    pub name: String,
    pub words: Vec<u32>,
}

/// A user kernel dispatch, referenced by KERNEL.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelDecl {
    pub name: String,
    /// Index into the SPIR-V modules.
    pub module: u16,
    pub entry: String,
    /// Tensor bound at descriptor set 0, binding i.
    pub bindings: Vec<TensorId>,
    /// Push-constant bytes.
    pub push: Vec<u8>,
    /// Workgroup counts x, y, z.
    pub groups: [u32; 3],
}

/// Source information: not needed to run, but part of the program's identity.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DebugInfo {
    /// The assembly file the program came from: its file name without folders (or what a
    /// `.file` directive says), so that the identity does not depend on the folder or the path
    /// it was assembled from. The CLI looks for it beside a `.bib` to show verifier errors.
    pub source: String,
    /// The source line of each instruction (1-based; 0 when unknown), or empty when none are known.
    pub lines: Vec<u32>,
    /// Label names and the instruction index each marks, in source order.
    pub labels: Vec<(String, u32)>,
    /// Where instructions came from, as `.origin "name"` sets it (the ONNX node an imported
    /// instruction lowers): each entry names the instructions from its index up to the next
    /// entry's, in increasing index order. Empty for most programs (stored in an optional
    /// section only when present, so other programs' bytes are unchanged).
    pub origins: Vec<(u32, String)>,
}

/// A loaded (or assembled) program: the container's contents, not yet verified.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Format version the file was written with.
    pub version: (u16, u16),
    pub tier: Tier,
    pub code: Vec<InsnBytes>,
    /// Names of the symbolic dimensions; `Dim::Sym(i)` refers to `syms[i]`.
    pub syms: Vec<String>,
    pub tensors: Vec<TensorDecl>,
    pub outputs: Vec<OutputDecl>,
    pub spirv: Vec<SpirvModule>,
    pub kernels: Vec<KernelDecl>,
    pub debug: DebugInfo,
    /// The vocabulary a generation program's tokens come from, for `adeadvm generate`: a GGUF
    /// file holding only the tokenizer's metadata (`tokenizer.*` keys, no tensors), as the
    /// assembler's `.vocab gguf(...)` copies it. Empty when the program has none. Opaque here;
    /// `tokenizer::Tokenizer::from_program` reads it.
    pub vocab: Vec<u8>,
    /// The data section (constant values).
    pub data: Blob,
    /// BLAKE3 of the file; set by `from_bytes`/`load`, all zero for an unsaved program.
    pub digest: [u8; 32],
}

impl Default for Program {
    fn default() -> Program {
        Program {
            version: (VERSION_MAJOR, VERSION_MINOR),
            tier: Tier::Strict,
            code: Vec::new(),
            syms: Vec::new(),
            tensors: Vec::new(),
            outputs: Vec::new(),
            spirv: Vec::new(),
            kernels: Vec::new(),
            debug: DebugInfo::default(),
            vocab: Vec::new(),
            data: Blob::from_vec(Vec::new()),
            digest: [0; 32],
        }
    }
}

/// Hex form of a digest, as printed by the CLI.
pub fn digest_hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

impl Program {
    /// Reads and loads a .bib file into memory owned by the program.
    ///
    /// Why a private copy and not a mapping: a program runs for as long as its caller likes,
    /// while the file it came from may be truncated or rewritten by anyone with write access.
    /// Truncating a mapped file makes the next access to a lost page a SIGBUS, which kills the
    /// process, and rewriting it in place changes the constants of a program whose digest was
    /// already checked, so a run would give bits no recording can explain. Reading costs one
    /// pass over the file, which loading makes anyway (the digest covers every byte), and the
    /// memory of the file's size; in exchange a loaded program is immutable whatever happens
    /// to the file. [`Program::load_mapped`] keeps the zero-copy mapping for callers who can
    /// promise the file stays unchanged.
    pub fn load(path: &Path) -> Result<Program> {
        use std::io::Read;
        let io = |source| FormatError::Io { path: path.display().to_string(), source };
        // A FIFO is refused before it is opened: opening one with no writer blocks forever.
        // (A device such as /dev/zero is read no further than its header's length, below.)
        crate::input::refuse_fifo(path).map_err(io)?;
        let mut file = std::fs::File::open(path).map_err(io)?;
        let regular_len = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        let mut bytes = Vec::new();
        (&mut file).take(32).read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() < 32 || bytes[..8] != MAGIC {
            // Too short or not a program: the parser words the error, and a device or pipe
            // such as /dev/zero is not read further.
            return Program::parse(Arc::new(Backing::Owned(bytes)));
        }
        // A regular file is read whole (its length is known). Anything else is read up to one
        // byte past what the header claims, so a stream that claims a huge size is refused by
        // the length check after reading only what it really sent.
        let claimed = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
        let limit = match regular_len {
            Some(len) => {
                bytes.try_reserve_exact(len.saturating_sub(32) as usize).map_err(|_| {
                    io(std::io::Error::new(
                        std::io::ErrorKind::OutOfMemory,
                        "the file does not fit in memory",
                    ))
                })?;
                u64::MAX
            }
            None => claimed.saturating_sub(32).saturating_add(1),
        };
        file.take(limit).read_to_end(&mut bytes).map_err(io)?;
        Program::parse(Arc::new(Backing::Owned(bytes)))
    }

    /// Memory-maps and loads a .bib file: constants stay in the mapping, never copied.
    ///
    /// # Safety
    /// The file must not be truncated or modified while the program (or any clone of its
    /// data) is alive: a truncated mapping faults (SIGBUS) on access, and a modified one
    /// changes a verified program's constants. [`Program::load`] has no such condition.
    pub unsafe fn load_mapped(path: &Path) -> Result<Program> {
        let io = |source| FormatError::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            return Err(FormatError::TooShort(0, HEADER_BYTES + DIGEST_BYTES));
        }
        // SAFETY: the mapping is read-only and private to this process; adeadvm never writes
        // through it, and the caller promises the file stays unchanged while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Program::parse(Arc::new(Backing::Mapped(map)))
    }

    /// Loads a program from bytes in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Program> {
        Program::parse(Arc::new(Backing::Owned(bytes)))
    }

    /// The stored bytes of a constant (its values, or its blocks), or None for a splat.
    pub fn const_bytes(&self, c: &ConstData) -> Option<&[u8]> {
        match *c {
            ConstData::Bytes { offset, len } | ConstData::Blocks { offset, len, .. } => {
                self.data.get(offset as usize..(offset + len) as usize)
            }
            ConstData::Splat(_) => None,
        }
    }

    /// What instruction `index` came from (its `.origin`, e.g. an ONNX node), if recorded.
    pub fn origin_of(&self, index: usize) -> Option<&str> {
        let k = self.debug.origins.partition_point(|&(at, _)| at as usize <= index);
        k.checked_sub(1).map(|k| self.debug.origins[k].1.as_str())
    }

    /// Source line of instruction `index`, if recorded.
    pub fn line_of(&self, index: usize) -> Option<u32> {
        self.debug.lines.get(index).copied().filter(|&l| l != 0)
    }

    fn parse(backing: Arc<Backing>) -> Result<Program> {
        let bytes: &[u8] = &backing;
        let min = HEADER_BYTES + DIGEST_BYTES;
        if bytes.len() < 8 || bytes[..8] != MAGIC {
            if bytes.len() >= 8 {
                return Err(FormatError::BadMagic(bytes[..8].try_into().expect("8 bytes")));
            }
            return Err(FormatError::TooShort(bytes.len(), min));
        }
        if bytes.len() < min {
            return Err(FormatError::TooShort(bytes.len(), min));
        }
        let mut h = Reader::new(bytes, 8..HEADER_BYTES, "header");
        let major = h.u16()?;
        let minor = h.u16()?;
        if major > VERSION_MAJOR {
            return Err(FormatError::NewerMajor { major, minor });
        }
        if major < VERSION_MAJOR {
            return Err(FormatError::OlderMajor { major, minor });
        }
        let claimed = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
        if claimed != bytes.len() as u64 {
            return Err(FormatError::LengthMismatch { claimed, actual: bytes.len() });
        }
        let body_end = bytes.len() - DIGEST_BYTES;
        let stored: [u8; 32] = bytes[body_end..].try_into().expect("32 bytes");
        let computed = *blake3::hash(&bytes[..body_end]).as_bytes();
        if stored != computed {
            return Err(FormatError::DigestMismatch {
                stored: digest_hex(&stored),
                computed: digest_hex(&computed),
            });
        }
        // From here on the bytes are exactly what a writer produced (or a forgery with a valid
        // digest): every check below still runs, since the digest is not a signature.
        let tier = match h.u8()? {
            0 => Tier::Strict,
            1 => Tier::Fast,
            t => {
                return Err(FormatError::Header(format!(
                    "unknown tier byte {t} (expected 0 strict or 1 fast)"
                )))
            }
        };
        if h.take(3)? != [0; 3] {
            return Err(FormatError::Header("reserved bytes 13..16 are not zero".into()));
        }
        let count = h.u32()? as usize;
        if h.u32()? != 0 || bytes[32..64].iter().any(|&b| b != 0) {
            return Err(FormatError::Header("reserved header bytes are not zero".into()));
        }
        let table_end = count
            .checked_mul(SECTION_ENTRY_BYTES)
            .and_then(|n| n.checked_add(HEADER_BYTES))
            .filter(|&e| e <= body_end)
            .ok_or_else(|| FormatError::Header(format!("{count} sections do not fit in the file")))?;
        let mut t = Reader::new(bytes, HEADER_BYTES..table_end, "section table");
        let mut found: Vec<(Section, Range<usize>)> = Vec::new();
        let mut prev_end = table_end;
        for _ in 0..count {
            let kind = t.u32()?;
            if t.u32()? != 0 {
                return Err(t.err("reserved field is not zero"));
            }
            let offset = t.u64()?;
            let len = t.u64()?;
            let end = offset.checked_add(len).filter(|&e| e <= body_end as u64);
            let Some(end) = end else {
                return Err(t.err(format!("section {kind} ({offset}+{len}) runs past the end of the file")));
            };
            let (offset, end) = (offset as usize, end as usize);
            if offset < prev_end {
                return Err(t.err(format!("section {kind} at {offset} overlaps what comes before it")));
            }
            if bytes[prev_end..offset].iter().any(|&b| b != 0) {
                return Err(
                    t.err(format!("padding before section {kind} (bytes {prev_end}..{offset}) is not zero"))
                );
            }
            prev_end = end;
            match Section::ALL.iter().find(|s| **s as u32 == kind) {
                Some(&s) => {
                    if found.iter().any(|(f, _)| *f == s) {
                        return Err(t.err(format!("the {} section appears twice", s.name())));
                    }
                    let align = if s == Section::Data { DATA_ALIGN } else { 8 };
                    if offset % align != 0 {
                        return Err(t.err(format!("the {} section is not {align}-byte aligned", s.name())));
                    }
                    found.push((s, offset..end));
                }
                None if kind & OPTIONAL_SECTION_BIT != 0 => {}
                None => {
                    return Err(t.err(format!(
                        "unknown section kind {kind} (not marked optional; written by a newer adeadvm?)"
                    )))
                }
            }
        }
        if bytes[prev_end..body_end].iter().any(|&b| b != 0) {
            return Err(FormatError::Header(format!(
                "padding after the last section (bytes {prev_end}..{body_end}) is not zero"
            )));
        }
        let range_of = |s: Section| found.iter().find(|(f, _)| *f == s).map(|(_, r)| r.clone());
        let need = |s: Section| {
            range_of(s).ok_or_else(|| FormatError::Header(format!("the {} section is missing", s.name())))
        };

        let mut p = Program { version: (major, minor), tier, digest: stored, ..Program::default() };

        let code = need(Section::Code)?;
        if code.len() % INSN_BYTES != 0 {
            return Err(FormatError::Section {
                section: "code",
                offset: code.start,
                what: format!("length {} is not a multiple of {INSN_BYTES}", code.len()),
            });
        }
        p.code = bytes[code].chunks_exact(INSN_BYTES).map(|c| c.try_into().expect("chunk size")).collect();

        if let Some(r) = range_of(Section::Syms) {
            let mut s = Reader::new(bytes, r, Section::Syms.name());
            let n = s.count(4)?;
            for _ in 0..n {
                let name = s.string()?;
                if !is_identifier(&name) {
                    return Err(s.err(format!("symbol name {name:?} is not an identifier")));
                }
                p.syms.push(name);
            }
            s.finish()?;
        }

        let data = range_of(Section::Data).unwrap_or(0..0);
        let blob = Blob { backing: backing.clone(), range: 0..bytes.len() }.sub(data);

        let mut s = Reader::new(bytes, need(Section::Tensors)?, Section::Tensors.name());
        let n = s.count(8)?;
        if n > u16::MAX as usize {
            return Err(s.err(format!("{n} tensors; at most {} are addressable", u16::MAX)));
        }
        for _ in 0..n {
            let kind_byte = s.u8()?;
            let (dtype, shape) = s.dtype_shape(p.syms.len())?;
            let name = s.string()?;
            let kind = match kind_byte {
                0 => TensorKind::Temp,
                1 => TensorKind::Input,
                2 | 4 => {
                    let format = if kind_byte == 4 {
                        let f = s.u8()?;
                        Some(BlockFormat::from_u8(f).ok_or_else(|| {
                            s.err(format!("constant {name:?} has unknown block format byte {f}"))
                        })?)
                    } else {
                        None
                    };
                    let offset = s.u64()?;
                    let len = s.u64()?;
                    let ok = offset % DATA_ALIGN as u64 == 0
                        && offset.checked_add(len).is_some_and(|e| e <= blob.len() as u64);
                    if !ok {
                        return Err(s.err(format!(
                            "constant {name:?} data {offset}+{len} is unaligned or outside the {}-byte data section",
                            blob.len()
                        )));
                    }
                    TensorKind::Const(match format {
                        Some(format) => ConstData::Blocks { format, offset, len },
                        None => ConstData::Bytes { offset, len },
                    })
                }
                3 => TensorKind::Const(ConstData::Splat(s.u32()?)),
                k => return Err(s.err(format!("tensor {name:?} has unknown kind byte {k}"))),
            };
            p.tensors.push(TensorDecl { name, dtype, shape, kind });
        }
        s.finish()?;

        if let Some(r) = range_of(Section::Outputs) {
            let mut s = Reader::new(bytes, r, Section::Outputs.name());
            let n = s.count(7)?;
            for _ in 0..n {
                let (dtype, shape) = s.dtype_shape(p.syms.len())?;
                let name = s.string()?;
                p.outputs.push(OutputDecl { name, dtype, shape });
            }
            s.finish()?;
        }

        if let Some(r) = range_of(Section::Spirv) {
            let mut s = Reader::new(bytes, r, Section::Spirv.name());
            let n = s.count(8)?;
            for _ in 0..n {
                let name = s.string()?;
                let words = s.count(4)?;
                let raw = s.take(words * 4)?;
                let words =
                    raw.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().expect("4"))).collect();
                p.spirv.push(SpirvModule { name, words });
            }
            s.finish()?;
        }

        if let Some(r) = range_of(Section::Kernels) {
            let mut s = Reader::new(bytes, r, Section::Kernels.name());
            let n = s.count(26)?;
            for _ in 0..n {
                let name = s.string()?;
                let module = s.u16()?;
                if module as usize >= p.spirv.len() {
                    return Err(
                        s.err(format!("kernel {name:?} names SPIR-V module {module}, which does not exist"))
                    );
                }
                let entry = s.string()?;
                let nb = s.count(2)?;
                let mut bindings = Vec::with_capacity(nb);
                for _ in 0..nb {
                    bindings.push(TensorId(s.u16()?));
                }
                let np = s.count(1)?;
                let push = s.take(np)?.to_vec();
                let groups = [s.u32()?, s.u32()?, s.u32()?];
                p.kernels.push(KernelDecl { name, module, entry, bindings, push, groups });
            }
            s.finish()?;
        }

        if let Some(r) = range_of(Section::Debug) {
            let mut s = Reader::new(bytes, r, Section::Debug.name());
            p.debug.source = s.string()?;
            let n = s.count(4)?;
            if n != p.code.len() && n != 0 {
                return Err(s.err(format!("{n} line entries for {} instructions", p.code.len())));
            }
            for _ in 0..n {
                p.debug.lines.push(s.u32()?);
            }
            let n = s.count(8)?;
            for _ in 0..n {
                let name = s.string()?;
                let at = s.u32()?;
                if at as usize > p.code.len() {
                    return Err(s.err(format!("label {name:?} points at instruction {at}, past the end")));
                }
                p.debug.labels.push((name, at));
            }
            s.finish()?;
        }
        if let Some(r) = range_of(Section::Vocab) {
            p.vocab = bytes[r].to_vec();
        }
        if let Some(r) = range_of(Section::Origins) {
            let mut s = Reader::new(bytes, r, Section::Origins.name());
            let n = s.count(8)?;
            for _ in 0..n {
                let at = s.u32()?;
                let name = s.string()?;
                if at as usize >= p.code.len() || p.debug.origins.last().is_some_and(|&(prev, _)| prev >= at)
                {
                    return Err(s.err(format!(
                        "origin {name:?} at instruction {at}: past the end or not after the one before"
                    )));
                }
                p.debug.origins.push((at, name));
            }
            s.finish()?;
        }
        p.data = blob;
        Ok(p)
    }

    /// Serializes to the .bib byte layout, digest included.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut sections: Vec<(Section, Vec<u8>)> = Vec::new();
        sections.push((Section::Code, self.code.iter().flatten().copied().collect()));
        let mut w = Vec::new();
        put_u32(&mut w, self.syms.len() as u32);
        for s in &self.syms {
            put_str(&mut w, s);
        }
        sections.push((Section::Syms, w));
        let mut w = Vec::new();
        put_u32(&mut w, self.tensors.len() as u32);
        for t in &self.tensors {
            let kind = match t.kind {
                TensorKind::Temp => 0,
                TensorKind::Input => 1,
                TensorKind::Const(ConstData::Bytes { .. }) => 2,
                TensorKind::Const(ConstData::Splat(_)) => 3,
                TensorKind::Const(ConstData::Blocks { .. }) => 4,
            };
            w.push(kind);
            put_dtype_shape(&mut w, t.dtype, &t.shape);
            put_str(&mut w, &t.name);
            match t.kind {
                TensorKind::Const(ConstData::Bytes { offset, len }) => {
                    w.extend(offset.to_le_bytes());
                    w.extend(len.to_le_bytes());
                }
                TensorKind::Const(ConstData::Splat(bits)) => put_u32(&mut w, bits),
                TensorKind::Const(ConstData::Blocks { format, offset, len }) => {
                    w.push(format as u8);
                    w.extend(offset.to_le_bytes());
                    w.extend(len.to_le_bytes());
                }
                _ => {}
            }
        }
        sections.push((Section::Tensors, w));
        let mut w = Vec::new();
        put_u32(&mut w, self.outputs.len() as u32);
        for o in &self.outputs {
            put_dtype_shape(&mut w, o.dtype, &o.shape);
            put_str(&mut w, &o.name);
        }
        sections.push((Section::Outputs, w));
        sections.push((Section::Data, self.data.to_vec()));
        if !self.spirv.is_empty() {
            let mut w = Vec::new();
            put_u32(&mut w, self.spirv.len() as u32);
            for m in &self.spirv {
                put_str(&mut w, &m.name);
                put_u32(&mut w, m.words.len() as u32);
                for word in &m.words {
                    put_u32(&mut w, *word);
                }
            }
            sections.push((Section::Spirv, w));
        }
        if !self.kernels.is_empty() {
            let mut w = Vec::new();
            put_u32(&mut w, self.kernels.len() as u32);
            for k in &self.kernels {
                put_str(&mut w, &k.name);
                w.extend(k.module.to_le_bytes());
                put_str(&mut w, &k.entry);
                put_u32(&mut w, k.bindings.len() as u32);
                for b in &k.bindings {
                    w.extend(b.0.to_le_bytes());
                }
                put_u32(&mut w, k.push.len() as u32);
                w.extend(&k.push);
                for g in k.groups {
                    put_u32(&mut w, g);
                }
            }
            sections.push((Section::Kernels, w));
        }
        let mut w = Vec::new();
        put_str(&mut w, &self.debug.source);
        put_u32(&mut w, self.debug.lines.len() as u32);
        for l in &self.debug.lines {
            put_u32(&mut w, *l);
        }
        put_u32(&mut w, self.debug.labels.len() as u32);
        for (name, at) in &self.debug.labels {
            put_str(&mut w, name);
            put_u32(&mut w, *at);
        }
        sections.push((Section::Debug, w));
        if !self.vocab.is_empty() {
            sections.push((Section::Vocab, self.vocab.clone()));
        }
        if !self.debug.origins.is_empty() {
            let mut w = Vec::new();
            put_u32(&mut w, self.debug.origins.len() as u32);
            for (at, name) in &self.debug.origins {
                put_u32(&mut w, *at);
                put_str(&mut w, name);
            }
            sections.push((Section::Origins, w));
        }

        let mut out = vec![0u8; HEADER_BYTES + SECTION_ENTRY_BYTES * sections.len()];
        let mut table = Vec::new();
        for (kind, body) in &sections {
            let align = if *kind == Section::Data { DATA_ALIGN } else { 8 };
            out.resize(out.len().next_multiple_of(align), 0);
            table.push((*kind as u32, out.len() as u64, body.len() as u64));
            out.extend(body);
        }
        out.resize(out.len().next_multiple_of(8), 0);
        let total = (out.len() + DIGEST_BYTES) as u64;
        out[..8].copy_from_slice(&MAGIC);
        out[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        let has_blocks =
            self.tensors.iter().any(|t| matches!(t.kind, TensorKind::Const(ConstData::Blocks { .. })));
        let minor = if has_blocks { VERSION_MINOR_BLOCKS } else { VERSION_MINOR };
        out[10..12].copy_from_slice(&minor.to_le_bytes());
        out[12] = match self.tier {
            Tier::Strict => 0,
            Tier::Fast => 1,
        };
        out[16..20].copy_from_slice(&(sections.len() as u32).to_le_bytes());
        out[24..32].copy_from_slice(&total.to_le_bytes());
        for (i, (kind, offset, len)) in table.into_iter().enumerate() {
            let at = HEADER_BYTES + i * SECTION_ENTRY_BYTES;
            out[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&offset.to_le_bytes());
            out[at + 16..at + 24].copy_from_slice(&len.to_le_bytes());
        }
        let digest = blake3::hash(&out);
        out.extend(digest.as_bytes());
        out
    }
}

/// Whether `s` is a valid name for a symbol: a letter or `_`, then letters, digits or `_`.
pub fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn put_u32(w: &mut Vec<u8>, v: u32) {
    w.extend(v.to_le_bytes());
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    put_u32(w, s.len() as u32);
    w.extend(s.as_bytes());
}

/// Dims are u32: bit 31 set means symbol number (low 31 bits), else the size itself.
const SYM_DIM_BIT: u32 = 1 << 31;

fn put_dtype_shape(w: &mut Vec<u8>, dtype: DType, shape: &[Dim]) {
    w.push(dtype as u8);
    w.push(shape.len() as u8);
    for d in shape {
        put_u32(
            w,
            match *d {
                Dim::Const(n) => n,
                Dim::Sym(s) => SYM_DIM_BIT | s.0 as u32,
            },
        );
    }
}

/// A bounds-checked little-endian cursor over one section. Every read fails cleanly.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
    section: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], r: Range<usize>, section: &'static str) -> Reader<'a> {
        Reader { bytes, pos: r.start, end: r.end, section }
    }
    fn err(&self, what: impl Into<String>) -> FormatError {
        FormatError::Section { section: self.section, offset: self.pos, what: what.into() }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.end - self.pos {
            return Err(self.err(format!("needs {n} more bytes, only {} left", self.end - self.pos)));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A u32 count of items each at least `min_item` bytes: refused when they could not fit,
    /// so a forged count never causes a large allocation.
    fn count(&mut self, min_item: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.end - self.pos {
            return Err(self.err(format!("count {n} cannot fit in the {} bytes left", self.end - self.pos)));
        }
        Ok(n)
    }
    fn string(&mut self) -> Result<String> {
        let n = self.count(1)?;
        let at = self.pos;
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec()).map_err(|_| FormatError::Section {
            section: self.section,
            offset: at,
            what: "a name is not valid UTF-8".into(),
        })
    }
    fn dtype_shape(&mut self, nsyms: usize) -> Result<(DType, Shape)> {
        let d = self.u8()?;
        let dtype = DType::from_u8(d).ok_or_else(|| self.err(format!("unknown dtype byte {d}")))?;
        let rank = self.u8()? as usize;
        if rank > MAX_RANK {
            return Err(self.err(format!("rank {rank} exceeds the maximum {MAX_RANK}")));
        }
        let mut shape = Vec::with_capacity(rank);
        for _ in 0..rank {
            let v = self.u32()?;
            shape.push(if v & SYM_DIM_BIT != 0 {
                let s = v & !SYM_DIM_BIT;
                if s as usize >= nsyms {
                    return Err(self.err(format!("dimension refers to symbol {s}, but there are {nsyms}")));
                }
                Dim::Sym(SymId(s as u16))
            } else {
                debug_assert!(v <= MAX_DIM);
                Dim::Const(v)
            });
        }
        Ok((dtype, shape))
    }
    fn finish(&self) -> Result<()> {
        if self.pos != self.end {
            return Err(self.err(format!("{} unexpected bytes at the end", self.end - self.pos)));
        }
        Ok(())
    }
}
