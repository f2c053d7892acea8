//! The embedding API: load a program once, run it from as many sessions as you like.
//!
//! ```
//! use adeadvm::api::{Config, Program, Session};
//! use adeadvm::HostTensor;
//!
//! // A program written inline (a `.bib` file or its bytes load the same way).
//! let program = Program::from_asm(
//!     ".input %x f32[2]\n.output y f32[2]\n    ALLOC %t: f32[2]\n    ADD %t, %x, %x\n    STORE y, %t\n    FREE %t\n    HALT\n",
//!     "double.s",
//! )?;
//! let mut session = Session::new(&program, &Config::default())?;
//! session.set_input("x", HostTensor::from_f32(vec![2], &[1.5, -2.0]).unwrap())?;
//! session.run()?;
//! assert_eq!(session.output("y")?.to_f32().unwrap(), [3.0, -4.0]);
//! # Ok::<(), adeadvm::Error>(())
//! ```
//!
//! # Thread safety
//!
//! A [`Program`] is verified once and is immutable: it is `Send + Sync` and cheap to clone (an
//! `Arc`), so one loaded program can be shared by many sessions on many threads. A [`Session`]
//! holds one run's inputs, outputs and memory; it is `Send` (move it to any thread) but is used
//! by one thread at a time (`&mut self`). Results never depend on which thread, how many worker
//! threads ([`Config::threads`]) or how many concurrent sessions: in the strict tier every
//! session gives the same bits.
//!
//! # Errors
//!
//! Every stage (assembler, format, verifier, VM, .npy) keeps its own error type; the API wraps
//! them in one [`Error`](enum@Error) whose message is the stage's message, unchanged.

use std::path::Path;
use std::sync::Arc;

use thiserror::Error;

use crate::asm::{self, AsmErrors, AsmOptions};
use crate::format::{self, digest_hex, FormatError, TensorKind};
use crate::isa::{DType, Tier};
use crate::npy::NpyError;
use crate::verify::{self, VerifiedProgram, VerifyErrors};
use crate::vm::{HostTensor, Observer, RunStats, Vm, VmConfig, VmError};

/// Any error of the embedding API. The stage errors are shown exactly as the stage words them.
#[derive(Debug, Error)]
pub enum Error {
    /// The assembler rejected the source (the full rustc-style report).
    #[error(transparent)]
    Asm(#[from] AsmErrors),
    /// The `.bib` bytes are not a valid program (or the file cannot be read).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The verifier rejected the program.
    #[error(transparent)]
    Verify(#[from] VerifyErrors),
    /// The run failed (inputs, budgets, run-time checks).
    #[error(transparent)]
    Vm(#[from] VmError),
    /// A `.npy` file could not be read or written.
    #[error(transparent)]
    Npy(#[from] NpyError),
    /// A source file could not be read.
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// A source file is not UTF-8.
    #[error("{path} is not UTF-8 text")]
    NotUtf8 { path: String },
    /// A backend name this build does not know.
    #[error("unknown backend `{0}` (expected cpu, vulkan or auto)")]
    UnknownBackend(String),
    /// A tier name other than `strict` or `fast`.
    #[error("unknown tier `{0}`")]
    UnknownTier(String),
    /// An output name the program does not declare.
    #[error("the program has no output `{name}` (its outputs are: {known})")]
    UnknownOutput { name: String, known: String },
    /// An output asked for before a run wrote it.
    #[error("output `{0}` was not written (run the session first)")]
    NotWritten(String),
    /// An output asked for after a failed run: a run delivers every output or none.
    #[error("output `{name}`: there are no outputs, the last run failed: {why}")]
    LastRunFailed { name: String, why: String },
    /// A `--devices` list (see [`crate::split::Place::parse_list`]) that cannot be used.
    #[error("devices {0}")]
    Devices(String),
    /// A program whose batch cannot be split over devices (see [`crate::split`]).
    #[error("cannot split this program's batch over devices: {0}")]
    NotSplittable(String),
    /// A program that cannot be cut into stages where asked (see [`crate::pipeline`]).
    #[error("cannot cut this program into stages: {0}")]
    Pipeline(String),
    /// What failed on one device of a split session or one stage of a pipeline.
    #[error("on {place}: {source}")]
    OnDevice { place: String, source: Box<Error> },
    /// Tensor data whose byte count does not match its dtype and shape.
    #[error("tensor `{name}`: shape {shape:?} of {dtype} needs {expected} bytes, but {got} were given")]
    TensorSize { name: String, dtype: DType, shape: Vec<usize>, expected: String, got: usize },
}

/// Shorthand for results of the embedding API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which executor runs a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// Large instructions on a Vulkan GPU when the machine has one, the rest on the CPU. A
    /// CPU-emulated Vulkan device (lavapipe) is never chosen: the CPU executor is faster.
    #[default]
    Auto,
    /// The CPU executor (scalar reference and SIMD kernels).
    Cpu,
    /// Every tensor instruction on the Vulkan device (`ADEADVM_VULKAN_DEVICE` picks one).
    Vulkan,
}

impl Backend {
    /// Parses `cpu`, `vulkan` or `auto`.
    pub fn from_name(name: &str) -> Result<Backend> {
        match name {
            "auto" => Ok(Backend::Auto),
            "cpu" => Ok(Backend::Cpu),
            "vulkan" => Ok(Backend::Vulkan),
            _ => Err(Error::UnknownBackend(name.to_string())),
        }
    }
    /// The name `from_name` takes.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
            Backend::Vulkan => "vulkan",
        }
    }
    fn vm(self) -> crate::vm::Backend {
        match self {
            Backend::Auto => crate::vm::Backend::Auto,
            Backend::Cpu => crate::vm::Backend::Cpu,
            Backend::Vulkan => crate::vm::Backend::Vulkan,
        }
    }
}

/// Parses a tier name (`strict` or `fast`) into a [`Tier`].
pub fn parse_tier(name: &str) -> Result<Tier> {
    Tier::from_name(name).ok_or_else(|| Error::UnknownTier(name.to_string()))
}

/// How a session runs. `Config::default()`: auto backend, the program's tier, every core, the
/// memory available now, no step limit.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The executor.
    pub backend: Backend,
    /// Override the program's determinism tier (the program is verified again for it).
    pub tier: Option<Tier>,
    /// Worker threads for large kernels. None: every core. Results never depend on it.
    pub threads: Option<usize>,
    /// Refuse runs that need more bytes than this. None: the memory available.
    pub max_memory: Option<u64>,
    /// Refuse runs that need more device memory than this (Vulkan). None: the device's
    /// largest device-local heap.
    pub max_device_memory: Option<u64>,
    /// End a run after this many executed instructions. None: no limit.
    pub max_steps: Option<u64>,
    /// Which Vulkan device the vulkan and auto backends use (as `adeadvm info` numbers them).
    /// None: `ADEADVM_VULKAN_DEVICE`, else the best device.
    pub vulkan_device: Option<usize>,
}

/// How to read a program from assembly text.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// `-D NAME=VALUE` definitions for the assembler.
    pub defines: Vec<(String, String)>,
    /// Override the program's determinism tier.
    pub tier: Option<Tier>,
}

/// Name, dtype and shape (as text, symbolic dimensions by name) of a declared input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// The declared shape, e.g. `[B, 784]`.
    pub shape: String,
}

/// A verified program, shared cheaply (`Clone` is an `Arc` clone) by any number of sessions.
#[derive(Clone, Debug)]
pub struct Program {
    verified: Arc<VerifiedProgram>,
}

impl Program {
    /// Loads a program: a `.s` file is assembled in memory, anything else is read as `.bib`.
    ///
    /// ```no_run
    /// let program = adeadvm::api::Program::load("model.bib")?;
    /// println!("{}", program.digest_hex());
    /// # Ok::<(), adeadvm::Error>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Program> {
        Program::load_with(path, &LoadOptions::default())
    }

    /// [`Program::load`] with assembler definitions and a tier override.
    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Program> {
        Program::verify_with(Program::read_unverified(path.as_ref(), &options.defines)?, options.tier)
    }

    /// Reads (and for `.s`, assembles) a program without verifying it.
    pub fn read_unverified(path: &Path, defines: &[(String, String)]) -> Result<format::Program> {
        if path.extension().is_some_and(|e| e == "s") {
            let display = path.display().to_string();
            let text = crate::input::read_file(path, crate::input::DEFAULT_READ_LIMIT)
                .map_err(|source| Error::Read { path: display.clone(), source })?;
            let text = String::from_utf8(text).map_err(|_| Error::NotUtf8 { path: display.clone() })?;
            let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let options = AsmOptions { defines: defines.to_vec(), base_dir };
            let program = asm::assemble(&text, &display, &options)?;
            // Loading from bytes sets the digest: the program's identity is its encoded form.
            return Ok(format::Program::from_bytes(program.to_bytes())?);
        }
        Ok(format::Program::load(path)?)
    }

    /// A program from the bytes of a `.bib` file.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Program> {
        Program::verify_with(format::Program::from_bytes(bytes)?, None)
    }

    /// A program from assembly text; `name` names it in error messages. Relative paths in the
    /// source (`npy(...)`) are resolved against the current directory.
    pub fn from_asm(source: &str, name: &str) -> Result<Program> {
        Program::from_asm_with(source, name, &AsmOptions::default())
    }

    /// [`Program::from_asm`] with assembler options.
    pub fn from_asm_with(source: &str, name: &str, options: &AsmOptions) -> Result<Program> {
        let program = asm::assemble(source, name, options)?;
        Program::from_bytes(program.to_bytes())
    }

    /// Verifies a program read by other means, with an optional tier override.
    pub fn verify_with(mut program: format::Program, tier: Option<Tier>) -> Result<Program> {
        if let Some(t) = tier {
            program.tier = t;
        }
        Ok(Program { verified: Arc::new(verify::verify(program)?) })
    }

    /// The same program verified for another tier (itself when the tier is unchanged).
    pub fn with_tier(&self, tier: Tier) -> Result<Program> {
        if tier == self.tier() {
            return Ok(self.clone());
        }
        Program::verify_with(self.verified.program().clone(), Some(tier))
    }

    /// The BLAKE3 digest of the encoded program: its identity.
    pub fn digest(&self) -> [u8; 32] {
        self.verified.program().digest
    }

    /// [`Program::digest`] as 64 lowercase hex digits.
    pub fn digest_hex(&self) -> String {
        digest_hex(&self.digest())
    }

    /// The determinism tier this program was verified for.
    pub fn tier(&self) -> Tier {
        self.verified.program().tier
    }

    /// The declared inputs, in declaration order.
    pub fn inputs(&self) -> Vec<TensorInfo> {
        let p = self.verified.program();
        p.tensors
            .iter()
            .filter(|t| t.kind == TensorKind::Input)
            .map(|t| TensorInfo {
                name: t.name.clone(),
                dtype: t.dtype,
                shape: crate::isa::shape_text(&t.shape, &p.syms),
            })
            .collect()
    }

    /// The declared outputs, in declaration order.
    pub fn outputs(&self) -> Vec<TensorInfo> {
        let p = self.verified.program();
        p.outputs
            .iter()
            .map(|o| TensorInfo {
                name: o.name.clone(),
                dtype: o.dtype,
                shape: crate::isa::shape_text(&o.shape, &p.syms),
            })
            .collect()
    }

    /// The verified program underneath (decoded code, memory plan).
    pub fn verified(&self) -> &Arc<VerifiedProgram> {
        &self.verified
    }
}

impl From<Arc<VerifiedProgram>> for Program {
    fn from(verified: Arc<VerifiedProgram>) -> Program {
        Program { verified }
    }
}

/// Borrowed tensor data: dtype, shape and little-endian bytes (e.g. from C or numpy).
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// What [`Session::set_input`] takes: a [`HostTensor`] (moved or borrowed) or a [`TensorView`].
pub trait IntoHostTensor {
    /// The tensor, or [`Error::TensorSize`] when the bytes do not match the shape (`name` is
    /// the input it is for).
    fn into_host_tensor(self, name: &str) -> Result<HostTensor>;
}

impl IntoHostTensor for HostTensor {
    fn into_host_tensor(self, _: &str) -> Result<HostTensor> {
        Ok(self)
    }
}

impl IntoHostTensor for &HostTensor {
    fn into_host_tensor(self, _: &str) -> Result<HostTensor> {
        Ok(self.clone())
    }
}

impl IntoHostTensor for TensorView<'_> {
    fn into_host_tensor(self, name: &str) -> Result<HostTensor> {
        HostTensor::from_bytes(self.dtype, self.shape.to_vec(), self.bytes).ok_or_else(|| {
            let expected = crate::vm::element_count(self.shape)
                .and_then(|n| n.checked_mul(self.dtype.size()))
                .map_or("more than addressable".to_string(), |n| n.to_string());
            Error::TensorSize {
                name: name.to_string(),
                dtype: self.dtype,
                shape: self.shape.to_vec(),
                expected,
                got: self.bytes.len(),
            }
        })
    }
}

/// One program's inputs, outputs and memory: bind inputs, run, read outputs, repeat.
pub struct Session {
    program: Program,
    vm: Vm,
    backend: Backend,
}

impl Session {
    /// A session for `program` (verified again only when `config.tier` changes its tier).
    pub fn new(program: &Program, config: &Config) -> Result<Session> {
        let program = match config.tier {
            Some(t) => program.with_tier(t)?,
            None => program.clone(),
        };
        let vm_config = VmConfig {
            max_memory: config.max_memory,
            max_steps: config.max_steps,
            threads: config.threads,
            simd: None,
            backend: config.backend.vm(),
            max_device_memory: config.max_device_memory,
            vulkan_device: config.vulkan_device,
        };
        let vm = Vm::new(program.verified.clone(), vm_config)?;
        Ok(Session { program, vm, backend: config.backend })
    }

    /// A session with every VM setting given, the SIMD level included: for tests and
    /// benchmarks that compare executor configurations.
    pub fn from_vm_config(program: &Program, config: VmConfig) -> Result<Session> {
        let backend = match config.backend {
            crate::vm::Backend::Auto => Backend::Auto,
            crate::vm::Backend::Cpu => Backend::Cpu,
            crate::vm::Backend::Vulkan => Backend::Vulkan,
        };
        let vm = Vm::new(program.verified.clone(), config)?;
        Ok(Session { program: program.clone(), vm, backend })
    }

    /// The program this session runs (with any tier override applied).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program's digest (see [`Program::digest`]).
    pub fn digest(&self) -> [u8; 32] {
        self.program.digest()
    }

    /// The backend this session was configured with.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Binds an input by name. The dtype is checked now, the shape when the run starts.
    pub fn set_input(&mut self, name: &str, tensor: impl IntoHostTensor) -> Result<()> {
        let tensor = tensor.into_host_tensor(name)?;
        Ok(self.vm.set_input(name, tensor)?)
    }

    /// Runs the program once on the bound inputs.
    pub fn run(&mut self) -> Result<RunStats> {
        Ok(self.vm.run()?)
    }

    /// Runs the program once, reporting every step to `observer` (tracing, profiling).
    pub fn run_observed(&mut self, observer: &mut dyn Observer) -> Result<RunStats> {
        Ok(self.vm.run_observed(observer)?)
    }

    /// An output of the last run, by name.
    pub fn output(&self, name: &str) -> Result<&HostTensor> {
        let outputs = &self.program.verified.program().outputs;
        if !outputs.iter().any(|o| o.name == name) {
            let known: Vec<&str> = outputs.iter().map(|o| o.name.as_str()).collect();
            return Err(Error::UnknownOutput { name: name.to_string(), known: known.join(", ") });
        }
        if let Some(why) = self.vm.last_failure() {
            return Err(Error::LastRunFailed { name: name.to_string(), why: why.to_string() });
        }
        self.vm.output(name).ok_or_else(|| Error::NotWritten(name.to_string()))
    }

    /// Every output of the last run, in declaration order.
    pub fn outputs(&self) -> Vec<(&str, &HostTensor)> {
        self.vm.outputs()
    }

    /// The VM underneath.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }
}

/// Reads a `.npy` file as an input tensor (`want`: the dtype the input is declared with).
pub fn read_npy(path: impl AsRef<Path>, want: Option<DType>) -> Result<HostTensor> {
    Ok(crate::npy::read(path.as_ref(), want)?)
}

/// Writes a tensor as a `.npy` file.
pub fn write_npy(path: impl AsRef<Path>, tensor: &HostTensor) -> Result<()> {
    Ok(crate::npy::write(path.as_ref(), tensor)?)
}

/// Compile-time proof of the thread-safety contract above.
#[allow(dead_code)]
fn _assert_thread_safety() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Program>();
    send::<Session>();
    send::<crate::split::SplitSession>();
}
