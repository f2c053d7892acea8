//! adeadvm: a deterministic bytecode virtual machine for tensor programs.
//!
//! Data flows through these stages, each with its own error type:
//!
//! ```text
//! prog.s --asm--> Program --to_bytes--> .bib --format::Program::load--> Program
//!        --verify--> VerifiedProgram (decoded code, shapes, memory plan)
//!        --vm--> exec::cpu --> outputs, trace, profile
//! ```
//!
//! The instruction set is generated from `opcodes/isa.toml`; see docs/ISA.md.
//!
//! To embed the VM, use [`api`] ([`Program`], [`Session`], [`Config`], one [`Error`]); the C ABI
//! over it is [`ffi`] (`include/adeadvm.h`), and `python/adeadvm` binds that from Python.

pub mod asm;
pub mod exec;
pub mod format;
pub mod generate;
pub mod gguf;
pub mod input;
pub mod isa;
pub mod npy;
pub mod numerics;
pub mod onnx;
pub mod output;
pub mod pipeline;
pub mod profile;
pub mod rand;
pub mod split;
pub mod tokenizer;
pub mod trace;
pub mod verify;
pub mod vm;

pub mod api;
pub mod ffi;

pub use api::{Config, Error, Program, Session};
pub use vm::HostTensor;
