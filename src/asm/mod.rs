//! The assembler (`.s` text to [`Program`]) and the disassembler (back to canonical text).
//!
//! The syntax is specified in `src/asm/SYNTAX.md`. The assembler is driven by the generated
//! ISA tables (`OP_INFO`): adding an opcode to `opcodes/isa.toml` makes it assemble and
//! disassemble with no change here.
//!
//! ```
//! use adeadvm::asm::{assemble, disassemble, AsmOptions, DisasmOptions};
//! let src = ".input %x f32[4]\n.output y f32[4]\n    STORE y, %x\n    HALT\n";
//! let p = assemble(src, "doc.s", &AsmOptions::default()).unwrap();
//! let text = disassemble(&p, &DisasmOptions::default()).unwrap();
//! let again = assemble(&text, "doc.s", &AsmOptions::default()).unwrap();
//! assert_eq!(p.to_bytes(), again.to_bytes());
//! ```

use std::path::PathBuf;

mod assembler;
mod consts;
mod disasm;
mod error;
mod syntax;

pub use assembler::{MAX_REPT_DEPTH, MAX_SUBSTITUTED_BYTES, MAX_SUBSTITUTED_LINE_BYTES};
pub use consts::{io_reason, MAX_DATA_BYTES};
pub use disasm::{disassemble, DisasmError, DisasmOptions};
pub use error::{AsmError, AsmErrorKind, AsmErrors};
pub use syntax::MAX_NESTING;

use crate::format::Program;

/// Assembler settings.
#[derive(Debug, Clone)]
pub struct AsmOptions {
    /// `-D NAME=VALUE` definitions; they win over `.define` in the source (the last of two
    /// with the same name wins).
    pub defines: Vec<(String, String)>,
    /// Folder that relative `npy(...)`, `safetensors(...)` and `.spirv file(...)` paths are
    /// resolved against: normally the `.s` file's folder.
    pub base_dir: PathBuf,
}

impl Default for AsmOptions {
    fn default() -> AsmOptions {
        AsmOptions { defines: Vec::new(), base_dir: PathBuf::from(".") }
    }
}

/// Assembles `source`. `path` names the file in error messages; its file name (without its
/// folders, so the program's digest does not depend on where it was assembled from) is the
/// program's debug source unless the source has a `.file` directive. On failure, every error found in the
/// file is returned (their `Display` is the full rustc-style report).
pub fn assemble(source: &str, path: &str, options: &AsmOptions) -> Result<Program, AsmErrors> {
    let mut a = assembler::Assembler::new(path, options);
    a.run(source);
    a.finish()
}
