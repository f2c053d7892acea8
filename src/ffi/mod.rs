//! The C ABI (`include/adeadvm.h`, generated from this module by cbindgen).
//!
//! Conventions:
//! - Every function returns an [`AdeadvmStatus`]; on anything but `ADEADVM_STATUS_OK` the reason is in
//!   [`adeadvm_last_error`] (thread-local, valid until the next failing call on this thread).
//! - Handles are opaque and come in `_new`/`_free` pairs (`_load`, `_from_bytes`, `_from_asm`
//!   create programs). `_free` takes NULL.
//! - Every pointer is checked for NULL and every size against the data it describes; nothing
//!   panics or unwinds across the boundary (a panic becomes `ADEADVM_STATUS_INTERNAL`).
//! - Thread safety: a program handle may be shared by any number of threads and sessions; a
//!   session handle is used by one thread at a time. A session keeps its program alive, so the
//!   program may be freed before the sessions made from it.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::api::{self, Backend, Config, Program, Session, TensorView};
use crate::isa::{DType, Tier};
use crate::pipeline::PipelineSession;
use crate::split::{Place, SplitSession};
use crate::verify::PlanError;
use crate::vm::VmError;

/// Status of a call. Anything but `ADEADVM_STATUS_OK` sets the thread's last-error message.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdeadvmStatus {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullPointer = 1,
    /// An argument is invalid: not UTF-8, a bad enum value, sizes that do not match.
    InvalidArgument = 2,
    /// A file could not be read.
    Io = 3,
    /// The assembler rejected the source.
    Assembly = 4,
    /// The bytes are not a valid `.bib` program.
    Format = 5,
    /// The verifier rejected the program.
    Verify = 6,
    /// No input or output of that name.
    UnknownName = 7,
    /// Input data of the wrong dtype.
    DtypeMismatch = 8,
    /// Input shapes that do not fit the program.
    Shape = 9,
    /// The memory or step budget was exceeded, or memory ran out.
    Budget = 10,
    /// The run failed at an instruction.
    Runtime = 11,
    /// An output was asked for before a run wrote it.
    NotWritten = 12,
    /// A caller's buffer is too small (the needed size is still written).
    BufferTooSmall = 13,
    /// A bug in adeadvm (a caught panic).
    Internal = 14,
}

/// Element types, as `dtype` arguments take them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdeadvmDtype {
    F32 = 0,
    F16 = 1,
    /// bfloat16, as its 16 raw bits.
    Bf16 = 2,
    I32 = 3,
}

/// Tier override in [`AdeadvmConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdeadvmTier {
    /// The tier in the program's header.
    Program = 0,
    Strict = 1,
    Fast = 2,
}

/// Session settings. Fill with [`adeadvm_config_default`], then change fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AdeadvmConfig {
    /// "cpu", "vulkan" or "auto"; NULL means "auto".
    pub backend: *const c_char,
    /// An `AdeadvmTier` value.
    pub tier: u32,
    /// Worker threads; 0: every core.
    pub threads: u32,
    /// Memory budget in bytes; 0: the memory available.
    pub max_memory: u64,
    /// Step budget; 0: none.
    pub max_steps: u64,
    /// Device memory budget in bytes (Vulkan): a run needing more on the device is refused
    /// before anything is allocated there; 0: the device's largest device-local heap.
    pub max_device_memory: u64,
    /// NULL: one session on `backend`. Else a list such as "gpu0,gpu1,cpu": the batch is split
    /// over those executors along every input's first axis and the outputs joined (strict
    /// tier: the same bits as one device's run); `backend` is then ignored.
    pub devices: *const c_char,
    /// NULL: no pipeline. Else a list such as "gpu0,gpu1" or "gpu0,cpu": the program is cut
    /// into stages run one after the other, one per device, where its constants' bytes balance
    /// (each device holds its stage's constants only; strict tier: one device's bits);
    /// `backend` is then ignored, and `devices` must be NULL.
    pub pipeline: *const c_char,
    /// With `pipeline`: slices each run's batch is cut into, flowing through the stages so that
    /// every stage works at once (the batch is the first axis every input and output shares);
    /// 0 or 1: the whole batch at once.
    pub micro_batches: u32,
}

/// A loaded, verified program (opaque).
pub struct AdeadvmProgram {
    program: Program,
    /// NUL-terminated names handed out by `_input_name`/`_output_name`.
    input_names: Vec<CString>,
    output_names: Vec<CString>,
}

/// A session: one program's inputs, outputs and memory (opaque).
pub struct AdeadvmSession {
    session: Sessions,
}

/// One session, or a batch split over several executors.
enum Sessions {
    One(Box<Session>),
    Split(SplitSession),
    Pipeline(PipelineSession),
}

impl Sessions {
    fn set_input(&mut self, name: &str, tensor: TensorView<'_>) -> api::Result<()> {
        match self {
            Sessions::One(s) => s.set_input(name, tensor),
            Sessions::Split(s) => s.set_input(name, tensor),
            Sessions::Pipeline(s) => s.set_input(name, tensor),
        }
    }
    fn run(&mut self) -> api::Result<()> {
        match self {
            Sessions::One(s) => s.run().map(drop),
            Sessions::Split(s) => s.run().map(drop),
            Sessions::Pipeline(s) => s.run().map(drop),
        }
    }
    fn output(&self, name: &str) -> api::Result<&crate::vm::HostTensor> {
        match self {
            Sessions::One(s) => s.output(name),
            Sessions::Split(s) => s.output(name),
            Sessions::Pipeline(s) => s.output(name),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// What a failed call reports: its status and message.
struct Failure(AdeadvmStatus, String);

impl Failure {
    fn null(what: &str) -> Failure {
        Failure(AdeadvmStatus::NullPointer, format!("{what} is NULL"))
    }
    fn invalid(what: String) -> Failure {
        Failure(AdeadvmStatus::InvalidArgument, what)
    }
}

impl From<api::Error> for Failure {
    fn from(e: api::Error) -> Failure {
        Failure(status_of(&e), e.to_string())
    }
}

/// The status a C caller gets for `e` (a split session's device error: that of its cause).
fn status_of(e: &api::Error) -> AdeadvmStatus {
    use api::Error as E;
    use AdeadvmStatus as S;
    match e {
        E::Asm(_) => S::Assembly,
        E::Format(crate::format::FormatError::Io { .. }) | E::Read { .. } => S::Io,
        E::Format(_) => S::Format,
        E::NotUtf8 { .. } => S::Assembly,
        E::Verify(_) => S::Verify,
        E::Vm(VmError::InputDtype { .. }) => S::DtypeMismatch,
        E::Vm(VmError::Binding(PlanError::UnknownInput { .. })) => S::UnknownName,
        E::Vm(VmError::Binding(_)) => S::Shape,
        E::Vm(
            VmError::MemoryBudget { .. }
            | VmError::ConstantBudget { .. }
            | VmError::DeviceMemoryBudget { .. }
            | VmError::OutOfMemory(_)
            | VmError::StepBudget(_)
            | VmError::TooManyThreads { .. },
        ) => S::Budget,
        E::Vm(_) => S::Runtime,
        E::Npy(_) => S::Io,
        E::UnknownBackend(_) | E::UnknownTier(_) => S::InvalidArgument,
        E::UnknownOutput { .. } => S::UnknownName,
        E::NotWritten(_) | E::LastRunFailed { .. } => S::NotWritten,
        E::TensorSize { .. } => S::InvalidArgument,
        E::Devices(_) | E::NotSplittable(_) | E::Pipeline(_) => S::InvalidArgument,
        E::OnDevice { source, .. } => status_of(source),
    }
}

fn set_last_error(message: &str) {
    // Interior NULs cannot be in a C string; they never appear in our messages, but be safe.
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, turning failures and panics into a status and the last-error message.
fn guard(f: impl FnOnce() -> Result<(), Failure>) -> AdeadvmStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => AdeadvmStatus::Ok,
        Ok(Err(Failure(status, message))) => {
            set_last_error(&message);
            status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!(
                "internal error: {what}. Please report this with the input that caused it."
            ));
            AdeadvmStatus::Internal
        }
    }
}

/// A `&str` from a C string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string alive for the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// A shared reference from a handle argument.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` made by this library.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller promises a live handle when non-null.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// Writes `value` through an out-pointer.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, value: T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller promises it is writable and aligned.
    unsafe { p.write(value) };
    Ok(())
}

fn dtype_from(v: u32) -> Result<DType, Failure> {
    u8::try_from(v).ok().and_then(DType::from_u8).ok_or_else(|| {
        Failure::invalid(format!("dtype {v} is not one of ADEADVM_DTYPE_F32/F16/BF16/I32 (0..3)"))
    })
}

fn new_program(program: Program, out: *mut *mut AdeadvmProgram) -> Result<(), Failure> {
    let names = |v: Vec<api::TensorInfo>| -> Vec<CString> {
        v.into_iter().map(|t| CString::new(t.name).unwrap_or_default()).collect()
    };
    let handle = Box::new(AdeadvmProgram {
        input_names: names(program.inputs()),
        output_names: names(program.outputs()),
        program,
    });
    // SAFETY: `out` was checked non-null by the caller of this helper; writable per the API.
    unsafe { out.write(Box::into_raw(handle)) };
    Ok(())
}

/// The message of the last failed call on this thread ("" if none). Valid until the next
/// failing call on this thread; never NULL.
#[no_mangle]
pub extern "C" fn adeadvm_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// 1 when work on a Vulkan device of this process did not finish within `ADEADVM_GPU_TIMEOUT`
/// (a call failed saying so) and may still be running in the driver, else 0. A program that
/// then exits should call `_exit`: the driver's own teardown at exit can crash under work still
/// running in it (lavapipe did, in most tries).
#[no_mangle]
pub extern "C" fn adeadvm_device_hung() -> u32 {
    u32::from(crate::exec::vulkan::any_device_hung())
}

/// The library version, e.g. "0.1.0" (static, never NULL).
#[no_mangle]
pub extern "C" fn adeadvm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Loads a program from a file: `.s` is assembled in memory, anything else read as `.bib`.
/// On success `*out` is a new handle to free with `adeadvm_program_free`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_load(
    path: *const c_char,
    out: *mut *mut AdeadvmProgram,
) -> AdeadvmStatus {
    guard(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: forwarded caller contract.
        let path = unsafe { str_arg(path, "path") }?;
        new_program(Program::load(path)?, out)
    })
}

/// Loads a program from the bytes of a `.bib` file (copied; `data` may be freed after).
///
/// # Safety
/// `data` points to `len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_from_bytes(
    data: *const u8,
    len: usize,
    out: *mut *mut AdeadvmProgram,
) -> AdeadvmStatus {
    guard(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        if data.is_null() {
            return Err(Failure::null("data"));
        }
        if len > isize::MAX as usize {
            return Err(Failure::invalid(format!("len {len} is larger than any buffer")));
        }
        // SAFETY: non-null, and the caller promises `len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data, len) };
        new_program(Program::from_bytes(bytes.to_vec())?, out)
    })
}

/// Assembles a program from assembly text; `name` (may be NULL) names it in error messages.
///
/// # Safety
/// `source` and a non-NULL `name` are NUL-terminated strings; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_from_asm(
    source: *const c_char,
    name: *const c_char,
    out: *mut *mut AdeadvmProgram,
) -> AdeadvmStatus {
    guard(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: forwarded caller contract.
        let source = unsafe { str_arg(source, "source") }?;
        let name = if name.is_null() {
            "<memory>"
        } else {
            // SAFETY: forwarded caller contract.
            unsafe { str_arg(name, "name") }?
        };
        new_program(Program::from_asm(source, name)?, out)
    })
}

/// Writes the program's 32-byte BLAKE3 digest to `out` (`out_len` must be at least 32).
///
/// # Safety
/// `program` is a live handle; `out` points to `out_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_digest(
    program: *const AdeadvmProgram,
    out: *mut u8,
    out_len: usize,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        if out_len < 32 {
            return Err(Failure(
                AdeadvmStatus::BufferTooSmall,
                format!("the digest is 32 bytes but out_len is {out_len}"),
            ));
        }
        let digest = p.program.digest();
        // SAFETY: `out` is non-null with at least 32 writable bytes (checked above, caller promise).
        unsafe { std::ptr::copy_nonoverlapping(digest.as_ptr(), out, 32) };
        Ok(())
    })
}

/// The number of declared inputs (`which` = 0) or outputs (`which` = 1).
///
/// # Safety
/// `program` is a live handle; `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_tensor_count(
    program: *const AdeadvmProgram,
    which: u32,
    count: *mut usize,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        let n = match which {
            0 => p.input_names.len(),
            1 => p.output_names.len(),
            _ => return Err(Failure::invalid(format!("which is {which}; 0 (inputs) or 1 (outputs)"))),
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(count, n, "count") }
    })
}

/// The name of input (`which` = 0) or output (`which` = 1) number `index`. `*name` points into
/// the program handle and stays valid until it is freed.
///
/// # Safety
/// `program` is a live handle; `name` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_tensor_name(
    program: *const AdeadvmProgram,
    which: u32,
    index: usize,
    name: *mut *const c_char,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        let names = match which {
            0 => &p.input_names,
            1 => &p.output_names,
            _ => return Err(Failure::invalid(format!("which is {which}; 0 (inputs) or 1 (outputs)"))),
        };
        let n = names.get(index).ok_or_else(|| {
            Failure::invalid(format!("index {index} is out of range (there are {})", names.len()))
        })?;
        // SAFETY: forwarded caller contract.
        unsafe { put(name, n.as_ptr(), "name") }
    })
}

/// The tokenizer of the vocabulary a program carries (`.vocab`), or a failure saying it has none.
fn program_tokenizer(p: &AdeadvmProgram) -> Result<crate::tokenizer::Tokenizer, Failure> {
    crate::tokenizer::Tokenizer::from_program(p.program.verified().program())
        .map_err(|e| Failure::invalid(e.to_string()))?
        .ok_or_else(|| {
            Failure::invalid(
                "this program carries no vocabulary (assemble it with `.vocab gguf(...)`)".into(),
            )
        })
}

/// The end-of-text token id of the vocabulary the program carries (where generation stops).
///
/// # Safety
/// `program` is a live handle; `id` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_eos_id(
    program: *const AdeadvmProgram,
    id: *mut u32,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        let eos = program_tokenizer(p)?
            .eos_id()
            .ok_or_else(|| Failure::invalid("the program's vocabulary names no end-of-text token".into()))?;
        // SAFETY: forwarded caller contract.
        unsafe { put(id, eos, "id") }
    })
}

/// Token ids of `text` in the vocabulary the program carries; with `chat` != 0 the text is first
/// wrapped as one user turn of the vocabulary's ChatML template (when it has one). Writes up to
/// `cap` ids to `ids` and the count to `*n` (`ADEADVM_STATUS_BUFFER_TOO_SMALL` with `*n` set
/// when `cap` < count).
///
/// # Safety
/// `program` is a live handle; `text` a NUL-terminated string; `ids` points to `cap` writable
/// values (may be NULL when `cap` is 0); `n` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_tokenize(
    program: *const AdeadvmProgram,
    text: *const c_char,
    chat: u32,
    ids: *mut i32,
    cap: usize,
    n: *mut usize,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        // SAFETY: forwarded caller contract.
        let text = unsafe { str_arg(text, "text") }?;
        let tok = program_tokenizer(p)?;
        let text =
            if chat != 0 && tok.has_chatml_template() { tok.chat_prompt(text) } else { text.to_string() };
        let out = tok.encode(&text);
        // SAFETY: forwarded caller contract.
        unsafe { put(n, out.len(), "n") }?;
        if cap < out.len() {
            return Err(Failure(
                AdeadvmStatus::BufferTooSmall,
                format!("{} ids do not fit in cap {cap}", out.len()),
            ));
        }
        if !out.is_empty() {
            if ids.is_null() {
                return Err(Failure::null("ids"));
            }
            for (i, &id) in out.iter().enumerate() {
                // SAFETY: non-null with cap >= out.len() writable values (caller promise).
                unsafe { ids.add(i).write(id as i32) };
            }
        }
        Ok(())
    })
}

/// The UTF-8 text of `n` token ids in the program's vocabulary (bytes that do not form UTF-8
/// become U+FFFD). Writes up to `cap` bytes to `buf` (no NUL added) and the length to `*len`
/// (`ADEADVM_STATUS_BUFFER_TOO_SMALL` with `*len` set when `cap` < length).
///
/// # Safety
/// `program` is a live handle; `ids` points to `n` values (may be NULL when `n` is 0); `buf` to
/// `cap` writable bytes (may be NULL when `cap` is 0); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_detokenize(
    program: *const AdeadvmProgram,
    ids: *const i32,
    n: usize,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        let tok = program_tokenizer(p)?;
        if n > 0 && ids.is_null() {
            return Err(Failure::null("ids"));
        }
        // SAFETY: non-null when n > 0, with n values (caller promise).
        let ids = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ids, n) } };
        let vocab = tok.vocab_size();
        let ids: Vec<u32> = ids
            .iter()
            .map(|&i| {
                u32::try_from(i).ok().filter(|&u| (u as usize) < vocab).ok_or_else(|| {
                    Failure::invalid(format!("token id {i} is outside the vocabulary of {vocab} tokens"))
                })
            })
            .collect::<Result<_, _>>()?;
        let text = tok.decode(&ids);
        // SAFETY: forwarded caller contract.
        unsafe { put(len, text.len(), "len") }?;
        if cap < text.len() {
            return Err(Failure(
                AdeadvmStatus::BufferTooSmall,
                format!("{} bytes do not fit in cap {cap}", text.len()),
            ));
        }
        if !text.is_empty() {
            if buf.is_null() {
                return Err(Failure::null("buf"));
            }
            // SAFETY: non-null with cap >= text.len() writable bytes (caller promise).
            unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len()) };
        }
        Ok(())
    })
}

/// Frees a program handle (NULL is ignored). Sessions made from it stay usable.
///
/// # Safety
/// `program` is NULL or a live handle not used again.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_program_free(program: *mut AdeadvmProgram) {
    if !program.is_null() {
        // SAFETY: made by Box::into_raw in new_program; the caller gives up the handle.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(program) })));
    }
}

/// Fills `config` with the defaults: backend "auto", the program's tier, every core, the memory
/// available, no step limit.
///
/// # Safety
/// `config` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_config_default(config: *mut AdeadvmConfig) -> AdeadvmStatus {
    guard(|| {
        let c = AdeadvmConfig {
            backend: std::ptr::null(),
            tier: AdeadvmTier::Program as u32,
            threads: 0,
            max_memory: 0,
            max_steps: 0,
            max_device_memory: 0,
            devices: std::ptr::null(),
            pipeline: std::ptr::null(),
            micro_batches: 0,
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(config, c, "config") }
    })
}

/// Creates a session for `program`; `config` may be NULL for the defaults. On success `*out`
/// is a new handle to free with `adeadvm_session_free`.
///
/// # Safety
/// `program` is a live handle; `config` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_session_new(
    program: *const AdeadvmProgram,
    config: *const AdeadvmConfig,
    out: *mut *mut AdeadvmSession,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { handle(program, "program") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let mut cfg = Config::default();
        let (mut devices, mut pipeline, mut micro_batches) = (None, None, 1);
        // SAFETY: forwarded caller contract (NULL allowed).
        if let Some(c) = unsafe { config.as_ref() } {
            if !c.devices.is_null() {
                // SAFETY: non-null, the caller promises a NUL-terminated string.
                devices = Some(Place::parse_list(unsafe { str_arg(c.devices, "config.devices") }?)?);
            }
            if !c.pipeline.is_null() {
                // SAFETY: non-null, the caller promises a NUL-terminated string.
                pipeline = Some(Place::parse_list(unsafe { str_arg(c.pipeline, "config.pipeline") }?)?);
            }
            micro_batches = c.micro_batches.max(1) as usize;
            if !c.backend.is_null() {
                // SAFETY: non-null, the caller promises a NUL-terminated string.
                cfg.backend = Backend::from_name(unsafe { str_arg(c.backend, "config.backend") }?)?;
            }
            cfg.tier = match c.tier {
                0 => None,
                1 => Some(Tier::Strict),
                2 => Some(Tier::Fast),
                t => {
                    return Err(Failure::invalid(format!(
                        "config.tier is {t}; ADEADVM_TIER_PROGRAM/STRICT/FAST (0..2)"
                    )))
                }
            };
            cfg.threads = (c.threads != 0).then_some(c.threads as usize);
            cfg.max_memory = (c.max_memory != 0).then_some(c.max_memory);
            cfg.max_steps = (c.max_steps != 0).then_some(c.max_steps);
            cfg.max_device_memory = (c.max_device_memory != 0).then_some(c.max_device_memory);
        }
        let session = match (devices, pipeline) {
            (None, None) => Sessions::One(Box::new(Session::new(&p.program, &cfg)?)),
            (Some(places), None) => Sessions::Split(SplitSession::new(&p.program, &places, &cfg)?),
            (None, Some(places)) => {
                let mut pipeline = PipelineSession::new(&p.program, &places, &cfg)?;
                pipeline.set_micro_batches(micro_batches)?;
                Sessions::Pipeline(pipeline)
            }
            (Some(_), Some(_)) => {
                return Err(Failure::invalid("config.devices and config.pipeline cannot both be set".into()))
            }
        };
        // SAFETY: non-null (checked above), writable per the contract.
        unsafe { out.write(Box::into_raw(Box::new(AdeadvmSession { session }))) };
        Ok(())
    })
}

/// Binds input `name` to a tensor: `dtype` (an `AdeadvmDtype`), `rank` dimensions at `shape`
/// (NULL allowed when `rank` is 0), and `nbytes` little-endian bytes at `data` (copied), which
/// must equal the element count times the dtype's size.
///
/// # Safety
/// `session` is a live handle not used by another thread; `name` is a NUL-terminated string;
/// `shape` points to `rank` values; `data` points to `nbytes` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_session_set_input(
    session: *mut AdeadvmSession,
    name: *const c_char,
    dtype: u32,
    shape: *const usize,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract: a live handle used by this thread only.
        let s = unsafe { session.as_mut() }.ok_or_else(|| Failure::null("session"))?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { str_arg(name, "name") }?;
        let dtype = dtype_from(dtype)?;
        if rank > 64 {
            return Err(Failure::invalid(format!("rank {rank} is more than 64 dimensions")));
        }
        let shape: &[usize] = if rank == 0 {
            &[]
        } else if shape.is_null() {
            return Err(Failure::null("shape"));
        } else {
            // SAFETY: non-null, the caller promises `rank` readable values.
            unsafe { std::slice::from_raw_parts(shape, rank) }
        };
        let bytes: &[u8] = if nbytes == 0 {
            &[]
        } else if data.is_null() {
            return Err(Failure::null("data"));
        } else if nbytes > isize::MAX as usize {
            return Err(Failure::invalid(format!("nbytes {nbytes} is larger than any buffer")));
        } else {
            // SAFETY: non-null, the caller promises `nbytes` readable bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), nbytes) }
        };
        s.session.set_input(name, TensorView { dtype, shape, bytes })?;
        Ok(())
    })
}

/// Runs the program once on the bound inputs.
///
/// # Safety
/// `session` is a live handle not used by another thread.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_session_run(session: *mut AdeadvmSession) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| Failure::null("session"))?;
        s.session.run()?;
        Ok(())
    })
}

/// Reads output `name` of the last run without copying: `*dtype` (an `AdeadvmDtype`), `*rank`
/// and up to `shape_cap` dimensions into `shape` (`ADEADVM_STATUS_BUFFER_TOO_SMALL` with `*rank` set
/// when `shape_cap` < rank), `*data` and `*nbytes`. The data stays valid until the next
/// `set_input`, `run` or `free` of this session.
///
/// # Safety
/// `session` is a live handle; `name` is a NUL-terminated string; `shape` points to
/// `shape_cap` writable values (may be NULL when `shape_cap` is 0); the rest are writable.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_session_output(
    session: *const AdeadvmSession,
    name: *const c_char,
    dtype: *mut u32,
    shape: *mut usize,
    shape_cap: usize,
    rank: *mut usize,
    data: *mut *const c_void,
    nbytes: *mut usize,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let s = unsafe { handle(session, "session") }?;
        // SAFETY: forwarded caller contract.
        let name = unsafe { str_arg(name, "name") }?;
        for (p, what) in [
            (dtype.is_null(), "dtype"),
            (rank.is_null(), "rank"),
            (data.is_null(), "data"),
            (nbytes.is_null(), "nbytes"),
        ] {
            if p {
                return Err(Failure::null(what));
            }
        }
        let t = s.session.output(name)?;
        // SAFETY: checked non-null above; writable per the contract.
        unsafe { rank.write(t.shape.len()) };
        if shape_cap < t.shape.len() {
            return Err(Failure(
                AdeadvmStatus::BufferTooSmall,
                format!("output `{name}` has rank {} but shape_cap is {shape_cap}", t.shape.len()),
            ));
        }
        if !t.shape.is_empty() {
            if shape.is_null() {
                return Err(Failure::null("shape"));
            }
            // SAFETY: non-null with `shape_cap` >= rank writable values (caller promise).
            unsafe { std::ptr::copy_nonoverlapping(t.shape.as_ptr(), shape, t.shape.len()) };
        }
        // SAFETY: checked non-null above; writable per the contract.
        unsafe {
            dtype.write(t.dtype as u32);
            data.write(t.bytes().as_ptr().cast());
            nbytes.write(t.bytes().len());
        }
        Ok(())
    })
}

impl From<crate::generate::GenerateError> for Failure {
    fn from(e: crate::generate::GenerateError) -> Failure {
        match e {
            crate::generate::GenerateError::Run(e) => e.into(),
            e => Failure::invalid(e.to_string()),
        }
    }
}

/// Greedy generation with a generation program (programs/smollm2.s): `n_prompts` prompts, prompt
/// k being `lens[k]` token ids of `ids` after the previous prompts', run as one batch of up to
/// `max_new` new tokens each, stopping a prompt at token `stop` (none when `stop` < 0). Writes
/// each prompt's generated ids to `out_ids[k * max_new ..]` (the stop token left out, -1 after
/// the last), `out_ids_len` >= `n_prompts * max_new`; and, when `out_stopped` is not NULL,
/// whether prompt k ended on the stop token to `out_stopped[k]` (0 or 1). The logits that chose
/// the first tokens are the session's output `logits` afterwards (`adeadvm_session_output`).
///
/// # Safety
/// `session` is a live handle not used by another thread; `ids` points to `sum(lens)` values,
/// `lens` to `n_prompts` values, `out_ids` to `out_ids_len` writable values and `out_stopped`
/// (if not NULL) to `n_prompts` writable bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn adeadvm_session_generate(
    session: *mut AdeadvmSession,
    ids: *const i64,
    lens: *const usize,
    n_prompts: usize,
    max_new: usize,
    stop: i64,
    out_ids: *mut i32,
    out_ids_len: usize,
    out_stopped: *mut u8,
) -> AdeadvmStatus {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| Failure::null("session"))?;
        if n_prompts > 0 && (lens.is_null() || ids.is_null()) {
            return Err(Failure::null(if lens.is_null() { "lens" } else { "ids" }));
        }
        if out_ids.is_null() {
            return Err(Failure::null("out_ids"));
        }
        let need = n_prompts
            .checked_mul(max_new)
            .ok_or_else(|| Failure::invalid("n_prompts * max_new overflows".into()))?;
        if out_ids_len < need {
            return Err(Failure(
                AdeadvmStatus::BufferTooSmall,
                format!("out_ids holds {out_ids_len} values but {n_prompts} prompts of up to {max_new} tokens need {need}"),
            ));
        }
        // SAFETY: non-null (checked) with n_prompts values (caller promise).
        let lens =
            if n_prompts == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(lens, n_prompts) } };
        let total = lens
            .iter()
            .try_fold(0usize, |a, &l| a.checked_add(l))
            .ok_or_else(|| Failure::invalid("the prompt lengths overflow".into()))?;
        // SAFETY: non-null when there are prompts, with sum(lens) values (caller promise).
        let ids = if total == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ids, total) } };
        let mut prompts = Vec::with_capacity(n_prompts);
        let mut at = 0;
        for &l in lens {
            prompts.push(ids[at..at + l].to_vec());
            at += l;
        }
        let stop = if stop < 0 {
            None
        } else {
            Some(
                u32::try_from(stop)
                    .map_err(|_| Failure::invalid(format!("stop token {stop} is out of range")))?,
            )
        };
        let Sessions::One(session) = &mut s.session else {
            return Err(Failure::invalid(
                "generation runs on one device: this session runs over several".into(),
            ));
        };
        let generator = crate::generate::GenerationProgram::new(session.program().clone())?;
        let request = crate::generate::Request { prompts, max_new, stop };
        let out = generator.generate(session, &request, &mut ())?;
        // SAFETY: non-null with out_ids_len >= need writable values (checked, caller promise).
        let dst = unsafe { std::slice::from_raw_parts_mut(out_ids, need) };
        dst.fill(-1);
        for (k, seq) in out.sequences.iter().enumerate() {
            for (d, &id) in dst[k * max_new..].iter_mut().zip(&seq.ids) {
                *d = id as i32;
            }
            if !out_stopped.is_null() {
                // SAFETY: non-null with n_prompts writable bytes (caller promise).
                unsafe { out_stopped.add(k).write(u8::from(seq.stopped)) };
            }
        }
        Ok(())
    })
}

/// Frees a session handle (NULL is ignored).
///
/// # Safety
/// `session` is NULL or a live handle not used again.
#[no_mangle]
pub unsafe extern "C" fn adeadvm_session_free(session: *mut AdeadvmSession) {
    if !session.is_null() {
        // SAFETY: made by Box::into_raw in adeadvm_session_new; the caller gives up the handle.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(session) })));
    }
}
