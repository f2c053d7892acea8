//! Hostile input: every file of the fuzz corpus (fuzz/corpus/<target>) and every crash the
//! fuzzers found (fuzz/regressions/<target>) goes through the same entry points the cargo-fuzz
//! targets drive (tests/common/hostile.rs), so a fixed crash stays fixed without a fuzzer. The
//! named tests below pin what each found crash now gives instead: a clear error.

mod common;

use std::cell::Cell;
use std::path::{Path, PathBuf};

use common::hostile;

fn files(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            out.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    out.sort();
    out
}

thread_local! {
    static PANICKED: Cell<bool> = const { Cell::new(false) };
}

/// Runs every corpus and regression file of `target` through `f`. A panic fails the test even
/// when something catches it (as the verifier does around the SPIR-V parser): under the fuzzer
/// every panic aborts, and in the CLI a caught panic still prints an internal-error line.
fn replay(target: &str, f: fn(&[u8])) {
    let files = files(target);
    assert!(!files.is_empty(), "no corpus for fuzz target {target}");
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.with(|p| p.set(true));
        default(info);
    }));
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        PANICKED.with(|p| p.set(false));
        f(&bytes);
        // Reproduce with `RUSTC_BOOTSTRAP=1 cargo fuzz run -O -a {target} <file>`.
        assert!(!PANICKED.with(Cell::get), "{} panicked (and the panic was caught)", path.display());
    }
}

#[test]
fn bib_corpus_and_regressions_run_cleanly() {
    replay("bib", hostile::bib);
}

#[test]
fn asm_corpus_and_regressions_run_cleanly() {
    replay("asm", hostile::asm);
}

#[test]
fn npy_corpus_and_regressions_run_cleanly() {
    replay("npy", hostile::npy);
}

#[test]
fn capi_corpus_and_regressions_run_cleanly() {
    replay("capi", hostile::capi);
}

/// Found by the `npy` seeds before fuzzing started: npyz (the crate that read headers then)
/// multiplied the header's dimensions unchecked (an overflow panic in debug builds, a wrong
/// element count in release builds). Our own header parser checks the product.
#[test]
fn an_npy_shape_whose_element_count_overflows_is_malformed() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/npy/shape_product_overflows.npy"),
    )
    .unwrap();
    let err = adeadvm::npy::parse(&bytes, "big.npy", None).unwrap_err().to_string();
    assert_eq!(
        err,
        "big.npy is not a valid .npy file: shape (1099511627776, 1099511627776) has more elements than a .npy file can hold"
    );
}

/// Found by the `npy` fuzz target in CI (fuzz/regressions/npy/shape_key_repeated.npy): a header
/// whose first `shape` key is garbled (`'shape&: ()`) and whose second holds a tuple whose
/// element count overflows got past a check that read only the first, and npyz overflowed.
/// The next input the fuzzer found (fuzz/regressions/npy/shape_entry_not_a_number.npy) wrote a
/// dimension as `0+00100000000`, which npyz's grammar read as a number. The strict parser that
/// replaced npyz takes exactly the three keys numpy writes, so the garbled key is refused
/// first; both shapes alone are refused too (the product, and a dimension that is not a
/// whole number).
#[test]
fn an_npy_header_with_a_second_overflowing_shape_is_malformed() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/npy/shape_key_repeated.npy"),
    )
    .unwrap();
    let err = adeadvm::npy::parse(&bytes, "twice.npy", None).unwrap_err().to_string();
    assert_eq!(
        err,
        "twice.npy is not a valid .npy file: unknown key 'shape&: (), } '; the header has exactly 'descr', 'fortran_order' and 'shape'"
    );
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/npy/shape_entry_not_a_number.npy"),
    )
    .unwrap();
    let err = adeadvm::npy::parse(&bytes, "plus.npy", None).unwrap_err().to_string();
    assert_eq!(
        err,
        "plus.npy is not a valid .npy file: unknown key 'shape&: (), }0'; the header has exactly 'descr', 'fortran_order' and 'shape'"
    );
    // The same shapes in headers that are otherwise what numpy writes.
    let header = |shape: &str| {
        let dict = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': {shape}, }}\n");
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((dict.len() as u16).to_le_bytes());
        b.extend(dict.as_bytes());
        b
    };
    let err = adeadvm::npy::parse(&header("(1099511627776, 1099511627776)"), "twice.npy", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "twice.npy is not a valid .npy file: shape (1099511627776, 1099511627776) has more elements than a .npy file can hold"
    );
    let err = adeadvm::npy::parse(&header("(0+00100000000, 1099511627776)"), "plus.npy", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plus.npy is not a valid .npy file: expected `,` or `)` in the shape in the header, found `+00100000000`"
    );
}

/// Found by the `bib` fuzz target (fuzz/regressions/bib/spirv_count_past_end): an embedded
/// SPIR-V instruction whose word count runs past the module made rspirv slice past the end
/// and panic inside the verifier. The layout is now checked first.
#[test]
fn spirv_whose_instruction_runs_past_the_module_is_a_verify_error() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/bib/spirv_count_past_end"),
    )
    .unwrap();
    let program = adeadvm::format::Program::from_bytes(hostile::seal(&bytes).unwrap()).unwrap();
    let err = adeadvm::verify::verify(program).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "kernel scale_by_2: SPIR-V module scale: the module does not parse: the instruction at word "
        ),
        "{err}"
    );
    assert!(err.contains(" words, but "), "{err}");
    assert!(err.ends_with(" are left"), "{err}");
}

/// Found by the `npy` fuzz target (fuzz/regressions/npy/deeply_nested_header.npy): a header
/// nesting 28 braces sent npyz's backtracking header grammar into exponential time (no answer
/// in 30 s; `adeadvm run --input` would hang). Our own parser reads the header in one pass
/// without backtracking or recursion: the braces are not a dtype string, refused at once.
#[test]
fn an_npy_header_nested_deeply_is_malformed_at_once() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/npy/deeply_nested_header.npy"),
    )
    .unwrap();
    let err = adeadvm::npy::parse(&bytes, "deep.npy", None).unwrap_err().to_string();
    assert_eq!(
        err,
        "deep.npy is not a valid .npy file: expected the dtype as a string such as '<f4' in the header, found `{{{{{{{{{{{{{{{{{{{{{{{{`"
    );
}

/// Found while reviewing what the `asm` target reaches: a constant of three dimensions of
/// 2^31 - 1 overflowed the assembler's element count (a panic where overflow checks are on,
/// as in `cargo test` and debug builds of the CLI). Kept as a seed in fuzz/regressions/asm.
#[test]
fn a_constant_whose_element_count_overflows_is_an_assembler_error() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/asm/const_count_overflows.s"),
    )
    .unwrap();
    let err = common::try_build(&src).unwrap_err();
    assert!(
        err.starts_with(
            "error: constant `%w` is too large to build at assembly time (18446744073709551615 bytes)"
        ),
        "{err}"
    );
}

#[test]
fn gguf_corpus_and_regressions_run_cleanly() {
    replay("gguf", hostile::gguf);
}

#[test]
fn onnx_corpus_and_regressions_run_cleanly() {
    replay("onnx", hostile::onnx);
}

/// The GGUF seeds are what they claim: one with every supported tensor type, one with a
/// tokenizer that builds and round-trips.
#[test]
fn gguf_seeds_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf");
    let f = adeadvm::gguf::GgufFile::open(root.join("tensors.gguf")).unwrap();
    assert_eq!(f.tensors().len(), 6);
    assert_eq!(f.tensor("q4").unwrap().dequantize().unwrap()[..2], [-1.5, -1.25]);
    let f = adeadvm::gguf::GgufFile::open(root.join("tokenizer.gguf")).unwrap();
    let tok = adeadvm::tokenizer::Tokenizer::from_gguf(&f).unwrap();
    let ids = tok.encode("hello 12<s>");
    assert_eq!(ids.len(), 5, "{ids:?}"); // hello, space, 1, 2 (digits alone), <s>
    assert_eq!(tok.decode(&ids), "hello 12<s>");
}

/// The inputs of issue 34 (item 1) that took the assembler down, built as the issue describes
/// them. Each is also a seed in fuzz/corpus/asm (smaller, past the same limits).
mod assembler_limits {
    /// Ten defines, each the previous one 16 times: 815 bytes of source that expanded to 16^10
    /// bytes and aborted on allocation failure. The fifth level passes the 1 MiB line limit;
    /// the levels after it are not reported again.
    pub fn define_chain() -> String {
        let mut src = String::from(".define A xxxxxxxxxxxxxxxx\n");
        for level in 1..=10u8 {
            let name = char::from(b'A' + level);
            let previous = format!("${{{}}}", char::from(b'A' + level - 1));
            src += &format!(".define {name} {}\n", previous.repeat(16));
        }
        src + ".input %x f32[4]\n.output y f32[4]\n    STORE y, %x\n    HALT\n"
    }

    /// A constant nested `levels` brackets deep.
    pub fn nested_brackets(levels: usize) -> String {
        format!(".const %c f32[1] = {}1{}\n    HALT\n", "[".repeat(levels), "]".repeat(levels))
    }

    /// `fill(fill(...(1)...))`, `levels` calls deep.
    pub fn nested_fill(levels: usize) -> String {
        format!(".const %c f32[4] = {}1{}\n    HALT\n", "fill(".repeat(levels), ")".repeat(levels))
    }

    /// `levels` `.rept` blocks inside each other, each repeating once.
    pub fn nested_rept(levels: usize) -> String {
        let mut src = String::new();
        for level in 0..levels {
            src += &format!(".rept i{level} 1\n");
        }
        src += "    NOP\n";
        src += &".endr\n".repeat(levels);
        src + "    HALT\n"
    }
}

/// How many errors an assembler report holds (its last line only counts them).
fn errors(report: &str) -> usize {
    report.lines().filter(|l| l.starts_with("error: ") && !l.starts_with("error: could not assemble")).count()
}

#[test]
fn a_define_chain_that_expands_to_gigabytes_is_an_assembler_error() {
    let src = assembler_limits::define_chain();
    assert!(src.len() < 1024, "{} bytes", src.len());
    let err = common::try_build(&src).unwrap_err();
    assert!(err.starts_with("error: this line is too long after `${...}` substitution\n"), "{err}");
    // Line 5 defines E as 16 copies of D (65,536 bytes each); the 16th copy passes 1 MiB.
    assert!(err.contains("test.s:5:"), "{err}");
    assert!(err.contains("`D` is 65536 bytes long, and the line would pass 1048576 bytes"), "{err}");
    assert_eq!(errors(&err), 1, "one error, not one per level after it:\n{err}");
}

#[test]
fn substitution_past_the_total_budget_is_an_assembler_error() {
    // D is 65,536 bytes, within the line limit; 5,000 lines that use it pass 256 MiB.
    let mut src = String::from(".define A xxxxxxxxxxxxxxxx\n");
    for (name, previous) in [("B", "A"), ("C", "B"), ("D", "C")] {
        src += &format!(".define {name} {}\n", format!("${{{previous}}}").repeat(16));
    }
    src += ".rept i 5000\n.define E ${D}\n.endr\n    HALT\n";
    let err = common::try_build(&src).unwrap_err();
    assert!(err.starts_with("error: `${...}` substitution is too large in total\n"), "{err}");
    assert!(err.contains("the lines that use `${...}` pass 268435456 bytes together here"), "{err}");
    assert_eq!(errors(&err), 1, "{err}");
}

#[test]
fn ten_thousand_nested_brackets_are_an_assembler_error() {
    let err = common::try_build(&assembler_limits::nested_brackets(10_000)).unwrap_err();
    assert!(err.starts_with("error: value nested too deeply\n"), "{err}");
    // The 65th `[` (column 20 + 64) is where it stops.
    assert!(err.contains("test.s:1:84"), "{err}");
    assert!(err.contains("more than 64 levels of `[...]`, `name(...)` and `name=value`"), "{err}");
    // A constant of rank 8 (9 levels with the value) is well inside the limit.
    let rank8 = ".const %c f32[1,1,1,1,1,1,1,1] = [[[[[[[[1]]]]]]]]\n    HALT\n";
    common::try_build(rank8).unwrap();
}

#[test]
fn ten_thousand_nested_fills_are_an_assembler_error() {
    let err = common::try_build(&assembler_limits::nested_fill(10_000)).unwrap_err();
    assert!(err.starts_with("error: value nested too deeply\n"), "{err}");
    assert!(err.contains("test.s:1:"), "{err}");
    assert!(err.contains("more than 64 levels of `[...]`, `name(...)` and `name=value`"), "{err}");
}

#[test]
fn ten_thousand_nested_repts_are_an_assembler_error() {
    let err = common::try_build(&assembler_limits::nested_rept(10_000)).unwrap_err();
    assert!(err.starts_with("error: `.rept` nested too deeply\n"), "{err}");
    // The 65th `.rept` is refused; the 64 around it ran.
    assert!(err.contains("test.s:65:1"), "{err}");
    assert!(err.contains("more than 64 `.rept` blocks inside each other"), "{err}");
    assert_eq!(errors(&err), 1, "{err}");
    // 64 levels assemble.
    common::try_build(&assembler_limits::nested_rept(64)).unwrap();
}

/// The same inputs through the C ABI, where a stack overflow took the host process down: each
/// is now `ADEADVM_STATUS_ASSEMBLY` with the message, and the host goes on.
#[test]
fn the_c_abi_survives_the_assemblers_hostile_inputs() {
    use adeadvm::ffi::{adeadvm_last_error, adeadvm_program_from_asm, AdeadvmStatus};
    let cases = [
        (assembler_limits::define_chain(), "this line is too long after `${...}` substitution"),
        (assembler_limits::nested_brackets(10_000), "value nested too deeply"),
        (assembler_limits::nested_fill(10_000), "value nested too deeply"),
        (assembler_limits::nested_rept(10_000), "`.rept` nested too deeply"),
    ];
    for (src, message) in cases {
        let src = std::ffi::CString::new(src).unwrap();
        let mut program = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings and a valid out-pointer.
        let status = unsafe {
            adeadvm_program_from_asm(src.as_ptr().cast(), c"hostile.s".as_ptr().cast(), &mut program)
        };
        assert_eq!(status, AdeadvmStatus::Assembly, "{message}");
        assert!(program.is_null());
        // SAFETY: adeadvm_last_error never returns NULL; the string lives until the next failure.
        let err = unsafe { std::ffi::CStr::from_ptr(adeadvm_last_error()) }.to_string_lossy().into_owned();
        assert!(err.starts_with(&format!("error: {message}\n")), "{err}");
        assert!(err.contains("hostile.s:"), "{err}");
    }
}

/// The seed fuzz/corpus/asm/matmul_no_columns.s reaches the case it is for: MATMUL with no
/// output columns and a bias and GELU (issue 34: a division by zero in the CPU epilogue) runs
/// and gives an empty [3, 0] output.
#[test]
fn the_matmul_without_columns_seed_runs_to_an_empty_output() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/asm/matmul_no_columns.s"),
    )
    .unwrap();
    let outputs = common::run(&common::build(&src), &[]).unwrap();
    assert_eq!(outputs["y"].shape, vec![3, 0]);
    assert!(outputs["y"].bytes().is_empty());
}
