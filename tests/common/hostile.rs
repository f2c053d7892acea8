//! Hostile input through every entry point, shared by the cargo-fuzz targets (fuzz/, which
//! include this file) and by `tests/hostile.rs`, which replays the checked-in corpus and every
//! crash the fuzzers found. Each function takes arbitrary bytes and must return normally: a
//! clean error is fine, a panic, abort, hang or huge allocation is a bug.
#![allow(dead_code)]

use std::ffi::{c_char, CString};
use std::path::PathBuf;
use std::ptr::{null, null_mut};
use std::sync::Arc;

use adeadvm::asm::{assemble, disassemble, AsmOptions, DisasmOptions};
use adeadvm::ffi::*;
use adeadvm::format::{Program, TensorKind};
use adeadvm::isa::{DType, Dim};
use adeadvm::verify::{verify, VerifiedProgram};
use adeadvm::vm::{Backend, HostTensor, Vm, VmConfig};

/// Budgets every hostile run gets, so that a valid but expensive program stays quick.
pub const MAX_MEMORY: u64 = 1 << 20;
pub const MAX_STEPS: u64 = 64;

/// Bytes made into a well-formed container: the last 32 bytes (the digest, in a real file) are
/// dropped, the header's length field set and a fresh digest appended, so the section parser,
/// verifier and VM behind the digest check see the mutation. None for inputs too short to
/// hold a header.
pub fn seal(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 96 {
        return None;
    }
    let mut b = data[..data.len() - 32].to_vec();
    let total = (b.len() + 32) as u64;
    b[24..32].copy_from_slice(&total.to_le_bytes());
    let digest = blake3::hash(&b);
    b.extend(digest.as_bytes());
    Some(b)
}

/// The .bib decoder, verifier, planner and CPU VM on arbitrary bytes (as given, and sealed).
pub fn bib(data: &[u8]) {
    let _ = Program::from_bytes(data.to_vec());
    if let Some(sealed) = seal(data) {
        pipeline(sealed);
    }
}

/// Loads, re-serializes, disassembles, verifies, plans and runs what loads.
pub fn pipeline(bytes: Vec<u8>) {
    let Ok(p) = Program::from_bytes(bytes) else { return };
    let again = Program::from_bytes(p.to_bytes()).expect("a program that loaded re-serializes");
    assert_eq!(again.code, p.code, "re-serialized code differs");
    let _ = disassemble(&p, &DisasmOptions::default());
    let Ok(v) = verify(p) else { return };
    let _ = v.report(&[]);
    let v = Arc::new(v);
    cut_small(&v);
    run_small(v);
}

/// Cuts a verified program into stages where `plan_cuts` puts them for two and three stages and
/// before its middle instruction: each cut gives stages or a clean error.
pub fn cut_small(v: &Arc<VerifiedProgram>) {
    let program = adeadvm::api::Program::from(v.clone());
    for stages in [2, 3] {
        if let Ok(cuts) = adeadvm::pipeline::plan_cuts(&program, stages) {
            let _ = adeadvm::pipeline::cut_program(&program, &cuts);
        }
    }
    let _ = adeadvm::pipeline::cut_program(&program, &[v.instructions().len() / 2]);
}

/// Runs a verified program on zero inputs (every symbol 2) under small budgets.
pub fn run_small(v: Arc<VerifiedProgram>) {
    let config = VmConfig {
        max_memory: Some(MAX_MEMORY),
        max_steps: Some(MAX_STEPS),
        threads: Some(1),
        backend: Backend::Cpu,
        ..VmConfig::default()
    };
    let Ok(mut vm) = Vm::new(v.clone(), config) else { return };
    let p = v.program();
    for t in p.tensors.iter().filter(|t| t.kind == TensorKind::Input) {
        let shape: Vec<usize> = t
            .shape
            .iter()
            .map(|d| match *d {
                Dim::Const(n) => n as usize,
                Dim::Sym(_) => 2,
            })
            .collect();
        let fits = shape
            .iter()
            .try_fold(t.dtype.size() as u64, |a, &d| a.checked_mul(d as u64))
            .is_some_and(|b| b <= MAX_MEMORY);
        if !fits {
            return;
        }
        let Some(x) = HostTensor::zeroed(t.dtype, shape) else { return };
        if vm.set_input(&t.name, x).is_err() {
            return;
        }
    }
    let _ = vm.run();
}

fn asm_options() -> AsmOptions {
    // Relative npy(...)/safetensors(...) paths resolve against a folder that does not exist.
    AsmOptions { defines: Vec::new(), base_dir: PathBuf::from("/nonexistent/adeadvm-fuzz") }
}

/// The assembler on arbitrary text; what assembles must load, disassemble to text that
/// assembles to the same bytes, verify or fail cleanly, and run.
pub fn asm(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let options = asm_options();
    let program = match assemble(text, "fuzz.s", &options) {
        Ok(p) => p,
        Err(e) => {
            // The rustc-style report is rendered for every error.
            let _ = e.to_string();
            return;
        }
    };
    let bytes = program.to_bytes();
    let loaded = Program::from_bytes(bytes.clone()).expect("what the assembler writes loads");
    // Constants are disassembled inline, one number each: the round trip is checked for
    // programs whose data is small enough to keep the fuzzer fast (tests/disasm_roundtrip.rs
    // covers large constants).
    let disassembled = if loaded.data.len() <= 1 << 16 {
        disassemble(&loaded, &DisasmOptions::default()).ok()
    } else {
        None
    };
    if let Some(text) = disassembled {
        let again =
            assemble(&text, "fuzz.s", &options).unwrap_or_else(|e| panic!("disassembly:\n{text}\n{e}"));
        assert!(again.to_bytes() == bytes, "asm -> disasm -> asm changed the bytes:\n{text}");
    }
    pipeline(bytes);
}

/// .npy parsing on arbitrary bytes; what parses writes back and parses to the same tensor.
pub fn npy(data: &[u8]) {
    for want in [None, Some(DType::Bf16), Some(DType::F32)] {
        if let Ok(t) = adeadvm::npy::parse(data, "fuzz.npy", want) {
            let back = adeadvm::npy::parse(&adeadvm::npy::to_bytes(&t), "again.npy", Some(t.dtype))
                .expect("a written .npy reads back");
            assert_eq!(back, t);
        }
    }
}

/// The program every C ABI session in [`capi`] runs: two inputs with symbolic dimensions, a
/// constant table, GATHER (run-time index checks) and two outputs.
pub const CAPI_PROGRAM: &str = ".input %x f32[B, 4]\n.input %i i32[N]\n.const %t f32[5, 4] = rand(1)\n\
.output y f32[B, 4]\n.output g f32[N, 4]\n\
ALLOC %a: f32[B, 4]\nADD %a, %x, %x\nSTORE y, %a\nFREE %a\n\
ALLOC %b: f32[N, 4]\nGATHER %b, %t, %i\nSTORE g, %b\nFREE %b\n";

/// A little-endian cursor over the fuzz input; reads past the end give zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let v = self.0.first().copied().unwrap_or(0);
        self.0 = self.0.get(1..).unwrap_or_default();
        v
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
}

/// The C ABI on arbitrary bytes: program creation from the bytes (as given, sealed, and as
/// assembly), then a session of [`CAPI_PROGRAM`] driven by the bytes: hostile dtypes, ranks,
/// shapes, byte counts, names, configs and output buffers. Pointers always point to memory
/// that really holds what the call is told (the one contract a C caller must keep).
pub fn capi(data: &[u8]) {
    // SAFETY: every pointer passed below is NULL (allowed) or points to live memory of the
    // size given; handles are freed once.
    unsafe {
        let mut p: *mut AdeadvmProgram = null_mut();
        if adeadvm_program_from_bytes(data.as_ptr(), data.len(), &mut p) == AdeadvmStatus::Ok {
            adeadvm_program_free(p);
        }
        if let Some(sealed) = seal(data) {
            let mut p = null_mut();
            if adeadvm_program_from_bytes(sealed.as_ptr(), sealed.len(), &mut p) == AdeadvmStatus::Ok {
                adeadvm_program_free(p);
            }
        }
        if let Ok(src) = CString::new(data.iter().copied().filter(|&b| b != 0).collect::<Vec<u8>>()) {
            let mut p = null_mut();
            if adeadvm_program_from_asm(src.as_ptr(), null(), &mut p) == AdeadvmStatus::Ok {
                adeadvm_program_free(p);
            }
        }

        let src = CString::new(CAPI_PROGRAM).expect("no NUL");
        let mut program = null_mut();
        let status = adeadvm_program_from_asm(src.as_ptr(), c"capi.s".as_ptr(), &mut program);
        assert_eq!(status, AdeadvmStatus::Ok);
        let mut input = Bytes(data);
        let mut config = std::mem::zeroed::<AdeadvmConfig>();
        assert_eq!(adeadvm_config_default(&mut config), AdeadvmStatus::Ok);
        let backends: [*const c_char; 4] = [null(), c"cpu".as_ptr(), c"auto".as_ptr(), c"gpu?".as_ptr()];
        config.backend = backends[input.u8() as usize % 4];
        config.tier = u32::from(input.u8() % 4);
        config.threads = u32::from(input.u8() % 3);
        config.max_memory = MAX_MEMORY;
        config.max_steps = if input.u8() % 2 == 0 { 0 } else { 1 + u64::from(input.u8() % 16) };
        let mut session = null_mut();
        if adeadvm_session_new(program, &config, &mut session) != AdeadvmStatus::Ok {
            adeadvm_program_free(program);
            return;
        }
        let names: [&std::ffi::CStr; 5] = [c"x", c"i", c"y", c"nope", c"\xff"];
        for _ in 0..8 {
            match input.u8() % 4 {
                0 | 1 => {
                    let name = names[input.u8() as usize % names.len()];
                    let dtype = match input.u8() % 8 {
                        7 => input.u32(),
                        d => u32::from(d % 4),
                    };
                    let rank = input.u8() as usize % 70;
                    let shape: Vec<usize> = (0..rank)
                        .map(|_| match input.u8() % 4 {
                            0 => input.u64() as usize,
                            k => (k as usize - 1) * 2,
                        })
                        .collect();
                    let shape_ptr =
                        if shape.is_empty() && input.u8() % 2 == 0 { null() } else { shape.as_ptr() };
                    // The data is the rest of the input: nbytes never exceeds what is there.
                    let claimed = input.u32() as usize;
                    let nbytes = claimed.min(input.0.len());
                    let data_ptr = if nbytes == 0 { null() } else { input.0.as_ptr().cast() };
                    let _ = adeadvm_session_set_input(
                        session,
                        name.as_ptr(),
                        dtype,
                        shape_ptr,
                        rank,
                        data_ptr,
                        nbytes,
                    );
                }
                2 => {
                    let _ = adeadvm_session_run(session);
                }
                _ => {
                    let name = names[input.u8() as usize % names.len()];
                    let cap = input.u8() as usize % 4;
                    let mut dims = [0usize; 4];
                    let (mut dtype, mut rank, mut data, mut nbytes) = (0u32, 0usize, null(), 0usize);
                    let status = adeadvm_session_output(
                        session,
                        name.as_ptr(),
                        &mut dtype,
                        dims.as_mut_ptr(),
                        cap,
                        &mut rank,
                        &mut data,
                        &mut nbytes,
                    );
                    if status == AdeadvmStatus::Ok && nbytes > 0 {
                        // The data is readable for nbytes.
                        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), nbytes);
                        std::hint::black_box(bytes.iter().fold(0u8, |a, b| a ^ b));
                    }
                }
            }
            let _ = std::ffi::CStr::from_ptr(adeadvm_last_error()).to_bytes().len();
        }
        adeadvm_session_free(session);
        adeadvm_program_free(program);
    }
}

/// GGUF parsing on arbitrary bytes: what parses lists tensors that all dequantize to their
/// element count (or refuse an unsupported type cleanly), and a tokenizer built from it, when
/// one builds, encodes and decodes.
pub fn gguf(data: &[u8]) {
    let Ok(file) = adeadvm::gguf::GgufFile::from_bytes(data.to_vec()) else { return };
    for info in file.tensors() {
        let t = file.tensor(&info.name).expect("a listed tensor is found");
        if let Ok(v) = t.dequantize() {
            assert_eq!(v.len() as u64, info.len(), "tensor {}", info.name);
        }
    }
    if let Ok(tok) = adeadvm::tokenizer::Tokenizer::from_gguf(&file) {
        let text = "hello 12 héllo\n\n<s> x";
        let ids = tok.encode(text);
        let _ = tok.decode(&ids);
        let _ = tok.chat_prompt(text);
    }
}

/// ONNX import on arbitrary bytes: what decodes as a model is lowered and assembled (its
/// `onnx(...)` constants read back from the bytes, written to a scratch file as `adeadvm
/// import` reads a model file), and what imports verifies. An error is fine, but never one
/// about the importer's own assembly: a model the importer cannot express is refused with a
/// message about the model.
pub fn onnx(data: &[u8]) {
    use adeadvm::onnx::{import_model, ImportError, ImportOptions, Model};
    thread_local! {
        static DIR: PathBuf = {
            let d = std::env::temp_dir().join(format!("adeadvm-onnx-fuzz-{}", std::process::id()));
            std::fs::create_dir_all(&d).expect("a scratch folder");
            d
        };
    }
    let dir = DIR.with(Clone::clone);
    let Ok(model) = Model::from_bytes(data, &dir, "fuzz.onnx") else { return };
    let path = dir.join("fuzz.onnx");
    std::fs::write(&path, data).expect("the scratch model");
    let options = ImportOptions { dims: vec![("batch".into(), 2)], ..ImportOptions::default() };
    match import_model(&model, &path, &options) {
        Ok(imported) => {
            let program =
                Program::from_bytes(imported.program.to_bytes()).expect("an imported program loads");
            if let Err(e) = verify(program) {
                panic!("the imported program does not verify: {e}\n{}", imported.asm);
            }
        }
        Err(e @ ImportError::Asm(_)) => panic!("{e}"),
        Err(e) => drop(e.to_string()),
    }
}
