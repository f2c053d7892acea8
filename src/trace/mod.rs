//! Record and replay: prove that a run is identical bit for bit, or find the first instruction
//! where it is not.
//!
//! A trace holds the program's digest, the inputs themselves (so a replay needs nothing else),
//! and for every executed step the instruction index and the BLAKE3 digest of the tensor it
//! wrote (dtype, shape and bytes). It also keeps the written values themselves while they fit
//! in a byte budget, so that a replay that diverges can say by how much (largest absolute and
//! ulp difference); beyond the budget only digests are kept.
//!
//! File layout (little-endian): magic "ADEADTRC", version u16, program digest [32], tier u8,
//! inputs (u32 count; name, dtype u8, rank u8, dims u64…, u64 byte length, bytes), steps (u64
//! count; index u32, flags u8 (1 = wrote a tensor, 2 = values follow), then digest [32],
//! dtype u8, rank u8, dims u64…, and if flagged u64 length + bytes), outputs (u32 count; name,
//! digest [32]), and a BLAKE3 digest of everything before it.

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::Path;

use thiserror::Error;

use crate::format::digest_hex;
use crate::isa::{DType, Tier};
use crate::vm::{tensor_digest, HostTensor, Observer, StepEvent, Wants};

const MAGIC: &[u8; 8] = b"ADEADTRC";
const VERSION: u16 = 1;
/// Default budget for recorded tensor values.
pub const DEFAULT_VALUE_BUDGET: u64 = 256 << 20;
/// The most memory a recording keeps (`run --record`), values included: 1 GiB. Every step costs
/// its record (about 100 bytes, plus its shape) even when no values fit the value budget, so an
/// endless loop would otherwise grow without bound; a recording that reaches this limit stops
/// the run, which then fails with [`Recorder::limit_error`].
pub const DEFAULT_RECORDING_LIMIT: u64 = 1 << 30;

/// Why a trace could not be read or written.
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("the recording reached its limit of {limit} bytes after {steps} steps, so the run was stopped there and nothing was written; the program may loop forever (bound it with --max-steps)")]
    TooLarge { limit: u64, steps: u64 },
    #[error("{0} is not an adeadvm trace (bad magic)")]
    BadMagic(String),
    #[error("trace {path} has format version {version}; this adeadvm reads version {VERSION}")]
    Version { path: String, version: u16 },
    #[error("trace {path} is corrupt: {what}")]
    Corrupt { path: String, what: String },
    #[error("cannot write trace {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// One recorded step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Instruction index.
    pub index: u32,
    /// Digest and geometry of the tensor written, if any.
    pub written: Option<Written>,
}

/// What one step wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub digest: [u8; 32],
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// The values, when they fit in the recording budget.
    pub values: Option<Vec<u8>>,
}

/// A recorded run.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub program_digest: [u8; 32],
    pub tier: Tier,
    pub inputs: Vec<(String, HostTensor)>,
    pub steps: Vec<Step>,
    pub outputs: Vec<(String, [u8; 32])>,
}

/// Records a run as an observer.
pub struct Recorder {
    steps: Vec<Step>,
    budget: u64,
    /// Bytes the recording may still use, values and step records together.
    room: u64,
    limit: u64,
    /// Set when a step did not fit in `limit`: the recording stopped the run there.
    full: bool,
}

impl Recorder {
    /// A recorder keeping up to `value_budget` bytes of written values, within
    /// [`DEFAULT_RECORDING_LIMIT`] bytes in all.
    pub fn new(value_budget: u64) -> Recorder {
        Recorder::with_limit(value_budget, DEFAULT_RECORDING_LIMIT)
    }
    /// A recorder keeping up to `value_budget` bytes of values and `limit` bytes in all (step
    /// records included): a step past `limit` stops the run and sets [`Recorder::limit_error`].
    pub fn with_limit(value_budget: u64, limit: u64) -> Recorder {
        Recorder { steps: Vec::new(), budget: value_budget, room: limit, limit, full: false }
    }
    /// Why the recording is incomplete, when a run outgrew its limit (the run stopped there).
    pub fn limit_error(&self) -> Option<TraceError> {
        self.full.then_some(TraceError::TooLarge { limit: self.limit, steps: self.steps.len() as u64 })
    }
    /// Finishes the trace with what the run produced.
    pub fn finish(
        self,
        program_digest: [u8; 32],
        tier: Tier,
        inputs: Vec<(String, HostTensor)>,
        outputs: Vec<(String, [u8; 32])>,
    ) -> Trace {
        Trace { program_digest, tier, inputs, steps: self.steps, outputs }
    }
}

impl Observer for Recorder {
    fn wants(&self) -> Wants {
        Wants { timing: false, written: true }
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        let record =
            (std::mem::size_of::<Step>() + e.written.map_or(0, |(_, shape, _)| shape.len() * 8)) as u64;
        if record > self.room {
            self.full = true;
            return ControlFlow::Break(());
        }
        self.room -= record;
        let written = e.written.map(|(dtype, shape, bytes)| {
            let keep = bytes.len() as u64 <= self.budget.min(self.room);
            if keep {
                self.budget -= bytes.len() as u64;
                self.room -= bytes.len() as u64;
            }
            Written {
                digest: tensor_digest(dtype, shape, bytes),
                dtype,
                shape: shape.to_vec(),
                values: keep.then(|| bytes.to_vec()),
            }
        });
        self.steps.push(Step { index: e.index as u32, written });
        ControlFlow::Continue(())
    }
}

/// The first difference a replay found.
#[derive(Clone, Debug, PartialEq)]
pub enum Divergence {
    /// A different instruction ran at this step: control flow changed.
    ControlFlow { step: u64, expected_index: u32, actual_index: u32 },
    /// The same instruction wrote different bits.
    Value { step: u64, index: u32, expected: Written, actual: Written },
    /// The run took more or fewer steps than recorded.
    Length { expected: u64, actual: u64 },
    /// An output differs although every step matched (cannot happen unless STORE was skipped).
    Output { name: String, expected: [u8; 32], actual: Option<[u8; 32]> },
}

/// Compares a run against a trace as an observer; stops the run at the first difference.
pub struct Replayer<'t> {
    trace: &'t Trace,
    step: u64,
    pub divergence: Option<Divergence>,
}

impl<'t> Replayer<'t> {
    /// A replayer for `trace`.
    pub fn new(trace: &'t Trace) -> Replayer<'t> {
        Replayer { trace, step: 0, divergence: None }
    }
    /// Checks the end of the run: the step count and the outputs.
    pub fn finish(&mut self, outputs: &[(String, [u8; 32])]) {
        if self.divergence.is_some() {
            return;
        }
        if self.step != self.trace.steps.len() as u64 {
            self.divergence =
                Some(Divergence::Length { expected: self.trace.steps.len() as u64, actual: self.step });
            return;
        }
        for (name, expected) in &self.trace.outputs {
            let actual = outputs.iter().find(|(n, _)| n == name).map(|(_, d)| *d);
            if actual != Some(*expected) {
                self.divergence =
                    Some(Divergence::Output { name: name.clone(), expected: *expected, actual });
                return;
            }
        }
    }
}

impl Observer for Replayer<'_> {
    fn wants(&self) -> Wants {
        Wants { timing: false, written: true }
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        let step = self.step;
        self.step += 1;
        let Some(rec) = self.trace.steps.get(step as usize) else {
            self.divergence =
                Some(Divergence::Length { expected: self.trace.steps.len() as u64, actual: self.step });
            return ControlFlow::Break(());
        };
        if rec.index != e.index as u32 {
            self.divergence = Some(Divergence::ControlFlow {
                step,
                expected_index: rec.index,
                actual_index: e.index as u32,
            });
            return ControlFlow::Break(());
        }
        let actual = e.written.map(|(dtype, shape, bytes)| Written {
            digest: tensor_digest(dtype, shape, bytes),
            dtype,
            shape: shape.to_vec(),
            values: Some(bytes.to_vec()),
        });
        let same = match (&rec.written, &actual) {
            (Some(a), Some(b)) => a.digest == b.digest,
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let (Some(expected), Some(actual)) = (rec.written.clone(), actual) {
                self.divergence = Some(Divergence::Value { step, index: rec.index, expected, actual });
            } else {
                self.divergence = Some(Divergence::ControlFlow {
                    step,
                    expected_index: rec.index,
                    actual_index: e.index as u32,
                });
            }
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// The largest absolute and ulp differences between two tensors of the same float dtype and
/// size, and where the largest absolute one is: (abs, ulp, position, expected, actual).
pub fn largest_difference(
    dtype: DType,
    expected: &[u8],
    actual: &[u8],
) -> Option<(f64, u64, usize, f64, f64)> {
    if expected.len() != actual.len() {
        return None;
    }
    let values = |b: &[u8]| -> Vec<(f64, i64)> {
        match dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| {
                    let bits = u32::from_le_bytes(c.try_into().expect("4"));
                    (f32::from_bits(bits) as f64, ordered(bits as u64, 32))
                })
                .collect(),
            DType::F16 | DType::Bf16 => b
                .chunks_exact(2)
                .map(|c| {
                    let bits = u16::from_le_bytes(c.try_into().expect("2"));
                    let v = if dtype == DType::F16 {
                        crate::numerics::f16_bits_to_f32(bits)
                    } else {
                        crate::numerics::bf16_bits_to_f32(bits)
                    };
                    (v as f64, ordered(bits as u64, 16))
                })
                .collect(),
            DType::I32 => b
                .chunks_exact(4)
                .map(|c| {
                    let v = i32::from_le_bytes(c.try_into().expect("4")) as i64;
                    (v as f64, v)
                })
                .collect(),
        }
    };
    let (e, a) = (values(expected), values(actual));
    let mut best: Option<(f64, u64, usize, f64, f64)> = None;
    let mut max_ulp = 0u64;
    for (i, (x, y)) in e.iter().zip(&a).enumerate() {
        let abs = if x.0.is_nan() != y.0.is_nan() {
            f64::INFINITY
        } else if x.0.is_nan() {
            0.0
        } else {
            (x.0 - y.0).abs()
        };
        let abs = if abs.is_nan() { f64::INFINITY } else { abs };
        max_ulp = max_ulp.max(x.1.abs_diff(y.1));
        if best.is_none_or(|b| abs > b.0) {
            best = Some((abs, 0, i, x.0, y.0));
        }
    }
    best.map(|(abs, _, i, x, y)| (abs, max_ulp, i, x, y))
}

/// Maps float bits of `width` to integers whose order is the float order (so the distance is ulps).
fn ordered(bits: u64, width: u32) -> i64 {
    let sign = 1u64 << (width - 1);
    if bits & sign != 0 {
        -((bits & (sign - 1)) as i64)
    } else {
        bits as i64
    }
}

impl Trace {
    /// Serializes the trace.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Vec::new();
        w.extend(MAGIC);
        w.extend(VERSION.to_le_bytes());
        w.extend(self.program_digest);
        w.push(self.tier as u8);
        w.extend((self.inputs.len() as u32).to_le_bytes());
        for (name, t) in &self.inputs {
            put_str(&mut w, name);
            put_geometry(&mut w, t.dtype, &t.shape);
            w.extend((t.bytes().len() as u64).to_le_bytes());
            w.extend(t.bytes());
        }
        w.extend((self.steps.len() as u64).to_le_bytes());
        for s in &self.steps {
            w.extend(s.index.to_le_bytes());
            match &s.written {
                None => w.push(0),
                Some(wr) => {
                    w.push(if wr.values.is_some() { 3 } else { 1 });
                    w.extend(wr.digest);
                    put_geometry(&mut w, wr.dtype, &wr.shape);
                    if let Some(v) = &wr.values {
                        w.extend((v.len() as u64).to_le_bytes());
                        w.extend(v);
                    }
                }
            }
        }
        w.extend((self.outputs.len() as u32).to_le_bytes());
        for (name, d) in &self.outputs {
            put_str(&mut w, name);
            w.extend(d);
        }
        let d = blake3::hash(&w);
        w.extend(d.as_bytes());
        w
    }

    /// Writes the trace through a temporary file and a rename.
    pub fn save(&self, path: &Path) -> Result<(), TraceError> {
        crate::output::write_atomically(path, &self.to_bytes())
            .map_err(|source| TraceError::Write { path: path.display().to_string(), source })
    }

    /// Reads a trace file.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let p = path.display().to_string();
        let bytes = crate::input::read_file(path, crate::input::DEFAULT_READ_LIMIT)
            .map_err(|source| TraceError::Io { path: p.clone(), source })?;
        Trace::from_bytes(&bytes, &p)
    }

    /// Parses a trace; `name` is used in messages.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Trace, TraceError> {
        let corrupt = |what: &str| TraceError::Corrupt { path: name.to_string(), what: what.to_string() };
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(TraceError::BadMagic(name.to_string()));
        }
        if bytes.len() < 8 + 2 + 32 + 1 + 32 {
            return Err(corrupt("the file is too short"));
        }
        let body = &bytes[..bytes.len() - 32];
        if blake3::hash(body).as_bytes() != &bytes[bytes.len() - 32..] {
            return Err(corrupt("its checksum does not match (truncated or modified)"));
        }
        let mut r = Cursor { b: body, pos: 8 };
        let version = r.u16().ok_or_else(|| corrupt("no version"))?;
        if version != VERSION {
            return Err(TraceError::Version { path: name.to_string(), version });
        }
        let parse = |r: &mut Cursor| -> Option<Trace> {
            let program_digest: [u8; 32] = r.take(32)?.try_into().ok()?;
            let tier = match r.u8()? {
                0 => Tier::Strict,
                1 => Tier::Fast,
                _ => return None,
            };
            let n = r.count(12)?;
            let mut inputs = Vec::new();
            for _ in 0..n {
                let name = r.string()?;
                let (dtype, shape) = r.geometry()?;
                let len = r.u64()? as usize;
                let data = r.take(len)?;
                inputs.push((name, HostTensor::from_bytes(dtype, shape, data)?));
            }
            let n = r.u64()? as usize;
            if n > r.b.len() {
                return None;
            }
            let mut steps = Vec::new();
            for _ in 0..n {
                let index = r.u32()?;
                let written = match r.u8()? {
                    0 => None,
                    f @ (1 | 3) => {
                        let digest: [u8; 32] = r.take(32)?.try_into().ok()?;
                        let (dtype, shape) = r.geometry()?;
                        let values = if f == 3 {
                            let len = r.u64()? as usize;
                            Some(r.take(len)?.to_vec())
                        } else {
                            None
                        };
                        Some(Written { digest, dtype, shape, values })
                    }
                    _ => return None,
                };
                steps.push(Step { index, written });
            }
            let n = r.count(36)?;
            let mut outputs = Vec::new();
            for _ in 0..n {
                let name = r.string()?;
                outputs.push((name, r.take(32)?.try_into().ok()?));
            }
            (r.pos == r.b.len()).then_some(Trace { program_digest, tier, inputs, steps, outputs })
        };
        parse(&mut r).ok_or_else(|| corrupt("its contents are malformed"))
    }

    /// A human summary of a divergence, naming the instruction and its source line.
    pub fn describe(
        d: &Divergence,
        program: &crate::format::Program,
        code: &[crate::isa::Instruction],
    ) -> String {
        let at = |index: u32| {
            let mnemonic = code.get(index as usize).map_or("?", |i| i.insn.info().mnemonic);
            let from = program.origin_of(index as usize).map_or(String::new(), |o| format!(", from {o:?}"));
            match program.line_of(index as usize) {
                Some(l) => format!("instruction {index} ({mnemonic}, {}:{l}{from})", program.debug.source),
                None => format!("instruction {index} ({mnemonic}{from})"),
            }
        };
        let mut s = String::new();
        match d {
            Divergence::ControlFlow { step, expected_index, actual_index } => {
                let _ = writeln!(
                    s,
                    "step {step}: control flow differs: the recording ran {}, this run {}",
                    at(*expected_index),
                    at(*actual_index)
                );
            }
            Divergence::Length { expected, actual } => {
                let _ = writeln!(s, "the recording has {expected} steps, this run {actual}");
            }
            Divergence::Output { name, expected, actual } => {
                let _ = writeln!(
                    s,
                    "output `{name}` differs: expected {}, got {}",
                    digest_hex(expected),
                    actual.map_or("nothing".to_string(), |a| digest_hex(&a))
                );
            }
            Divergence::Value { step, index, expected, actual } => {
                let _ = writeln!(s, "first difference at step {step}: {}", at(*index));
                let written = code.get(*index as usize).and_then(|i| i.insn.writes()).map(|t| {
                    program.tensors.get(t.0 as usize).map_or(String::new(), |d| format!(" wrote %{}", d.name))
                });
                let _ = writeln!(
                    s,
                    "  tensor{}: {} {:?}",
                    written.unwrap_or_default(),
                    actual.dtype,
                    actual.shape
                );
                let _ = writeln!(s, "  expected digest {}", digest_hex(&expected.digest));
                let _ = writeln!(s, "  actual digest   {}", digest_hex(&actual.digest));
                match (&expected.values, &actual.values) {
                    (Some(e), Some(a)) if expected.dtype == actual.dtype => {
                        if let Some((abs, ulp, pos, x, y)) = largest_difference(expected.dtype, e, a) {
                            let _ = writeln!(
                                s,
                                "  largest difference: {abs:.3e} absolute at element {pos} (expected {:?}, got {:?}); largest {ulp} ulp",
                                x as f32,
                                y as f32
                            );
                        }
                    }
                    _ => {
                        let _ = writeln!(s, "  (values not in the recording: it exceeded the value budget)");
                    }
                }
            }
        }
        s
    }
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    w.extend((s.len() as u32).to_le_bytes());
    w.extend(s.as_bytes());
}

fn put_geometry(w: &mut Vec<u8>, dtype: DType, shape: &[usize]) {
    w.push(dtype as u8);
    w.push(shape.len() as u8);
    for d in shape {
        w.extend((*d as u64).to_le_bytes());
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n.saturating_mul(min) <= self.b.len() - self.pos).then_some(n)
    }
    fn string(&mut self) -> Option<String> {
        let n = self.count(1)?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn geometry(&mut self) -> Option<(DType, Vec<usize>)> {
        let dtype = DType::from_u8(self.u8()?)?;
        let rank = self.u8()? as usize;
        if rank > crate::isa::MAX_RANK {
            return None;
        }
        let mut shape = Vec::with_capacity(rank);
        for _ in 0..rank {
            shape.push(usize::try_from(self.u64()?).ok()?);
        }
        Some((dtype, shape))
    }
}
