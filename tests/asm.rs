//! The assembler as a user meets it: programs that assemble to what they say, and golden
//! tests of error messages exactly as `adeadvm asm` prints them.
//!
//! Golden files: each `tests/golden/asm/NAME.s` is assembled (as file `NAME.s`, with its
//! folder as the base for relative paths) and the rendered errors must equal
//! `tests/golden/asm/NAME.txt`. `ADEADVM_BLESS=1 cargo test --test asm` rewrites the .txt
//! files; read every change before committing it.

use std::path::{Path, PathBuf};

use adeadvm::asm::{assemble, AsmErrorKind, AsmOptions};
use adeadvm::format::{ConstData, TensorKind, DATA_ALIGN};
use adeadvm::isa::{DType, Dim, Insn, Instruction, Operand, Placement, SymId, TensorId};

mod common;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/asm")
}

fn asm(src: &str) -> adeadvm::format::Program {
    assemble(src, "t.s", &AsmOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn asm_err(src: &str) -> String {
    match assemble(src, "t.s", &AsmOptions::default()) {
        Ok(_) => panic!("expected errors for:\n{src}"),
        Err(e) => e.to_string(),
    }
}

fn insn(p: &adeadvm::format::Program, i: usize) -> Instruction {
    Instruction::decode(&p.code[i]).unwrap()
}

#[test]
fn golden_error_messages() {
    let bless = std::env::var_os("ADEADVM_BLESS").is_some_and(|v| v == "1");
    let mut failures = Vec::new();
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(golden_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.extension().is_none_or(|e| e != "s") {
            continue;
        }
        n += 1;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).unwrap();
        let opts = AsmOptions { defines: vec![], base_dir: golden_dir() };
        let got = match assemble(&src, &name, &opts) {
            Ok(_) => "(assembled without errors)\n".to_string(),
            Err(e) => e.to_string(),
        };
        let expected_path = path.with_extension("txt");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failures.push(format!("--- {name}: expected\n{expected}--- got\n{got}"));
        }
    }
    assert!(n >= 10, "golden inputs missing");
    assert!(failures.is_empty(), "{}\n(ADEADVM_BLESS=1 rewrites the goldens)", failures.join("\n"));
}

#[test]
fn ids_and_order_follow_the_spec() {
    let p = asm(".dim T\n.input %x f32[B, T]\n.const %c f32[2] = [1.0, 2.0]\n.output o f32[B]\n\
                 .const %d i32[3] = [1, 2, 3]\n    ALLOC %h: f32[S]\n    FREE %h\n.tensor %t f32[T]\n");
    let names: Vec<&str> = p.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["x", "c", "d", "h", "t"]);
    assert_eq!(p.syms, ["T", "B", "S"]);
    assert_eq!(p.tensors[0].shape, vec![Dim::Sym(SymId(1)), Dim::Sym(SymId(0))]);
    assert_eq!(p.tensors[3].kind, TensorKind::Temp);
    // Data: each Bytes constant at a 64-byte aligned offset, in tensor-id order.
    assert_eq!(p.tensors[1].kind, TensorKind::Const(ConstData::Bytes { offset: 0, len: 8 }));
    assert_eq!(p.tensors[2].kind, TensorKind::Const(ConstData::Bytes { offset: DATA_ALIGN as u64, len: 12 }));
    assert_eq!(p.data.len(), DATA_ALIGN + 12);
    assert_eq!(p.debug.source, "t.s");
    assert_eq!(p.debug.lines, vec![6, 7]);
}

#[test]
fn overloads_are_picked_by_operand_kind() {
    let p = asm(".input %a f32[4]\n.tensor %y f32[4]\n    ADD %y, %a, %a\n    ADD %y, %a, 1.5\n    ADD %y, %a, -inf\n");
    assert!(matches!(insn(&p, 0).insn, Insn::Add { .. }));
    assert!(matches!(insn(&p, 1).insn, Insn::AddS { s, .. } if s == 1.5));
    assert!(matches!(insn(&p, 2).insn, Insn::AddS { s, .. } if s == f32::NEG_INFINITY));
}

#[test]
fn optional_operands_any_order_and_flags() {
    let p = asm(".input %a f32[4, 4]\n.const %b f32[4] = zeros\n.tensor %y f32[4, 4]\n\
                 MATMUL@gpu %y, %a, %a, act=gelu, tb, bias=%b\n    matmul@cpu %y, %a, %a, ta=true, tb=0\n");
    let i = insn(&p, 0);
    assert_eq!(i.placement, Placement::Gpu);
    let Insn::Matmul { bias, ta, tb, act, .. } = i.insn else { panic!() };
    assert_eq!((bias, ta, tb, act.name()), (Some(TensorId(1)), false, true, "gelu"));
    let i = insn(&p, 1);
    assert_eq!(i.placement, Placement::Cpu);
    assert!(matches!(i.insn, Insn::Matmul { ta: true, tb: false, bias: None, .. }));
}

#[test]
fn labels_resolve_forward_and_backward() {
    let p = asm("top:\n    ISET r1, 3\nloop: IADDI r1, r1, -1\n    JNZ r1, loop\n    JMP end\nend:\n");
    assert_eq!(p.debug.labels, vec![("top".into(), 0), ("loop".into(), 1), ("end".into(), 4)]);
    assert!(matches!(insn(&p, 2).insn, Insn::Jnz { target, .. } if target.0 == 1));
    assert!(matches!(insn(&p, 3).insn, Insn::Jmp { target } if target.0 == 4));
}

#[test]
fn loc_overrides_the_next_line_only() {
    let p = asm(".loc 100\n    NOP\n    NOP\n.loc 7\n\n    HALT\n");
    assert_eq!(p.debug.lines, vec![100, 3, 7]);
}

#[test]
fn file_directive_sets_the_source() {
    assert_eq!(asm(".file \"a \\\"b\\\".s\"\n").debug.source, "a \"b\".s");
}

#[test]
fn constants_splats_and_half_precision() {
    let p = asm(".const %z f16[3] = zeros\n.const %o bf16[2] = ones\n.const %f f32[9] = fill(-1.5)\n\
                 .const %i i32[2] = fill(0xffffffff)\n.const %h f16[2] = [0.1, 0x7c01]\n.const %n f16[1] = fill(nan)\n");
    let splat = |i: usize| match p.tensors[i].kind {
        TensorKind::Const(ConstData::Splat(b)) => b,
        _ => panic!(),
    };
    assert_eq!(splat(0), 0);
    assert_eq!(splat(1), 0x3f80);
    assert_eq!(splat(2), (-1.5f32).to_bits());
    assert_eq!(splat(3), u32::MAX);
    assert_eq!(splat(5), 0x7e00);
    let TensorKind::Const(c) = p.tensors[4].kind else { panic!() };
    assert_eq!(p.const_bytes(&c).unwrap(), [0x66, 0x2e, 0x01, 0x7c]); // 0.1 rounds to 0x2e66
    assert_eq!(p.tensors[4].dtype, DType::F16);
}

/// `npy(...)` constants are read with adeadvm's own header parser (src/npy.rs): any format
/// version, big-endian items swapped, and a header numpy would not write refused at once with
/// the reason, on the constant's line.
#[test]
fn npy_constants_read_every_version_and_refuse_bad_headers() {
    let dir = tempfile::tempdir().unwrap();
    let npy = |version: u8, dict: &str, data: &[u8]| {
        let len_bytes = if version == 1 { 2 } else { 4 };
        let mut b = b"\x93NUMPY".to_vec();
        b.extend([version, 0]);
        b.extend(&((dict.len() + 1) as u32).to_le_bytes()[..len_bytes]);
        b.extend(dict.as_bytes());
        b.push(b'\n');
        b.extend(data);
        b
    };
    let be: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    std::fs::write(
        dir.path().join("be.npy"),
        npy(2, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", &be),
    )
    .unwrap();
    let le: Vec<u8> = [7i32, -8].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(
        dir.path().join("v3.npy"),
        npy(3, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", &le),
    )
    .unwrap();
    let deep = format!(
        "{{'descr': {}'<f4'{}, 'fortran_order': False, 'shape': (2,), }}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    std::fs::write(dir.path().join("deep.npy"), npy(1, &deep, &[0; 8])).unwrap();
    std::fs::write(
        dir.path().join("short.npy"),
        npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", &[0; 7]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("key.npy"),
        npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", &[0; 8]),
    )
    .unwrap();
    let opts = AsmOptions { defines: vec![], base_dir: dir.path().to_path_buf() };
    let src = ".const %a f32[2] = npy(\"be.npy\")\n.const %b i32[2] = npy(\"v3.npy\")\n.output y f32[2]\n    STORE y, %a\n";
    let p = assemble(src, "t.s", &opts).unwrap_or_else(|e| panic!("{e}"));
    let bytes = |i: usize| match p.tensors[i].kind {
        TensorKind::Const(c) => p.const_bytes(&c).unwrap().to_vec(),
        _ => panic!("not a constant"),
    };
    assert_eq!(bytes(0), [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    assert_eq!(bytes(1), le);

    let src = ".const %c f32[2] = npy(\"deep.npy\")\n.const %d f32[2] = npy(\"short.npy\")\n.const %e f32[2] = npy(\"key.npy\")\n";
    let err = assemble(src, "t.s", &opts).unwrap_err().to_string();
    assert!(err.starts_with("error: `deep.npy` holds `[[[[[",), "{err}");
    assert!(err.contains("]]]]]` data, but `%c` is f32\n"), "{err}");
    assert!(
        err.contains("error: cannot read `short.npy`: the data is 7 bytes, but shape [2] of <f4 needs 8\n --> t.s:2:24\n"),
        "{err}"
    );
    assert!(
        err.contains(
            "error: cannot read `key.npy`: not a valid .npy file (unknown key 'x'; the header has exactly 'descr', 'fortran_order' and 'shape')\n --> t.s:3:24\n"
        ),
        "{err}"
    );
}

#[test]
fn rand_constants_use_philox() {
    let p = asm(".const %r f32[3] = rand(5)\n.const %n f32[2] = rand(5, normal)\n");
    let TensorKind::Const(c) = p.tensors[0].kind else { panic!() };
    let b = p.const_bytes(&c).unwrap();
    for i in 0..3 {
        let v = f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(v.to_bits(), adeadvm::rand::philox_uniform(5, i as u64).to_bits());
    }
}

#[test]
fn rept_nests_and_substitutes() {
    let p = asm(".rept i 2\n.rept j 3\n.const %c${i}_${j} f32[1] = fill(${i}${j})\n.endr\n.endr\n");
    let names: Vec<&str> = p.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["c0_0", "c0_1", "c0_2", "c1_0", "c1_1", "c1_2"]);
    assert_eq!(p.tensors[5].kind, TensorKind::Const(ConstData::Splat(12f32.to_bits())));
    // A zero count skips the body.
    assert!(asm(".rept i 0\n    BOGUS\n.endr\n").code.is_empty());
}

#[test]
fn command_line_defines_win_and_work_as_dims() {
    let opts = AsmOptions { defines: vec![("H".into(), "16".into())], base_dir: ".".into() };
    let p = assemble(".define H 8\n.define N 2\n.input %x f32[N, H]\n.input %y f32[${H}]\n", "t.s", &opts)
        .unwrap();
    assert_eq!(p.tensors[0].shape, vec![Dim::Const(2), Dim::Const(16)]);
    assert_eq!(p.tensors[1].shape, vec![Dim::Const(16)]);
    assert!(p.syms.is_empty());
}

#[test]
fn kernels_and_spirv() {
    let p = asm(".input %x f32[4]\n.spirv m = words(0x07230203, 1)\n\
                 .kernel k = m \"main\" groups(2, 1, 1) push(f32 1.0, u8 7) bindings(%x)\n    KERNEL k\n");
    assert_eq!(p.spirv[0].words, vec![0x07230203, 1]);
    let k = &p.kernels[0];
    assert_eq!((k.entry.as_str(), k.groups, k.bindings.clone()), ("main", [2, 1, 1], vec![TensorId(0)]));
    assert_eq!(k.push, vec![0, 0, 0x80, 0x3f, 7]);
    assert!(matches!(insn(&p, 0).insn, Insn::Kernel { .. }));
}

#[test]
fn every_error_in_a_file_is_reported() {
    let e = asm_err("    FOO\n    BAR\n.input %x f32[4]\n    RELU %x\n");
    assert!(e.ends_with("error: could not assemble t.s due to 3 previous errors\n"), "{e}");
    match assemble("    FOO\n", "t.s", &AsmOptions::default()) {
        Err(e) => assert!(matches!(e.errors[0].kind, AsmErrorKind::UnknownMnemonic { .. })),
        Ok(_) => panic!(),
    }
}

/// A wrong weights path is one mistake: reported at the first constant that reads the file,
/// not once per constant (a model names hundreds), nor again at each use of those constants.
#[test]
fn an_unreadable_weights_file_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = AsmOptions {
        defines: vec![("WEIGHTS".into(), "no/such/model.safetensors".into())],
        base_dir: dir.path().to_path_buf(),
    };
    let src = "\
.input %x f32[4]
.const %a f32[4] = safetensors(\"${WEIGHTS}\", \"a\")
.const %b f32[4] = safetensors(\"${WEIGHTS}\", \"b\")
.const %c f32[4] = npy(\"missing.npy\")
.const %d f32[4] = safetensors(\"${WEIGHTS}\", \"d\")
.output y f32[4]
    ALLOC %t: f32[4]
    ADD %t, %x, %a
    ADD %t, %t, %b
    ADD %t, %t, %d
    STORE y, %t
    FREE %t
";
    let err = assemble(src, "t.s", &opts).unwrap_err().to_string();
    assert_eq!(
        err,
        "\
error: cannot read `no/such/model.safetensors`: no such file
 --> t.s:2:32
  |
2 | .const %a f32[4] = safetensors(\"no/such/model.safetensors\", \"a\")
  |                                ^^^^^^^^^^^^^^^^^^^^^^^^^^^ referenced here

error: cannot read `missing.npy`: no such file
 --> t.s:4:24
  |
4 | .const %c f32[4] = npy(\"missing.npy\")
  |                        ^^^^^^^^^^^^^ referenced here

error: could not assemble t.s due to 2 previous errors
"
    );
}

#[test]
fn alloc_shorthand_may_repeat_an_identical_declaration() {
    let p = asm(".rept i 2\n    ALLOC %t: f32[4]\n    FREE %t\n.endr\n");
    assert_eq!(p.tensors.len(), 1);
    let e = asm_err("    ALLOC %t: f32[4]\n    ALLOC %t: f32[8]\n");
    assert!(e.contains("tensor `%t` is already defined"), "{e}");
}

#[test]
fn hostile_input_never_panics() {
    let inputs = [
        "",
        "\n\n",
        ";",
        "%",
        ".",
        "@",
        "ADD@",
        "x:",
        ":",
        "\"",
        ".file \"\\",
        ".const %a f32[] = [",
        ".rept",
        ".rept i",
        ".rept i -1\n.endr",
        ".rept i 99999999999\n.endr",
        "${",
        "${}",
        "${x",
        "MATMUL ,,,",
        ".input %x f32[,]",
        ".input %x f32[B,]",
        "ADD %y, %a, 0x",
        "ADD %y, %a, --1",
        ".kernel",
        ".kernel k = ",
        ".spirv s = words(",
        ".spirv s = file()",
        "é",
        "ADD é, ü",
        ".input %é f32[4]",
        "\t\tNOP\t; tab",
        ".const %x f32[4294967295, 4294967295] = rand(1)",
        ".const %x f32[65536, 65536] = [1.0]",
        ".loc 99999999999",
        "JMP 5",
        "TRANSPOSE %a, %b, [[1]]",
        "ISET r1, 0x",
        ".dim",
        ".dim A,",
    ];
    for src in inputs {
        let _ = assemble(src, "t.s", &AsmOptions::default()).map_err(|e| e.to_string());
    }
}

#[test]
fn bless_env_var_is_documented() {
    // The golden test's doc names the variable; keep them in sync.
    let me = std::fs::read_to_string(file!()).unwrap();
    assert!(me.contains("ADEADVM_BLESS=1"));
}

#[test]
fn example_programs_assemble() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    for name in ["mlp.s", "attention.s", "ffn.s", "loop.s", "kernel.s"] {
        let src = std::fs::read_to_string(dir.join(name)).unwrap();
        let opts = AsmOptions { defines: vec![], base_dir: dir.clone() };
        let p = assemble(&src, name, &opts).unwrap_or_else(|e| panic!("{e}"));
        assert!(!p.code.is_empty());
        assert!(src.starts_with(&format!("; {name} — ")), "{name} must open with a comment block");
        // Every output is stored and the program ends with HALT.
        let last = Instruction::decode(p.code.last().unwrap()).unwrap();
        assert!(matches!(last.insn, Insn::Halt), "{name}");
        let stores = p
            .code
            .iter()
            .filter(|b| matches!(Instruction::decode(b).unwrap().insn, Insn::Store { .. }))
            .count();
        assert_eq!(stores, p.outputs.len(), "{name}");
        let _ = Operand::Bool(true);
    }
}

/// The example programs are semantically valid: the verifier accepts each of them.
#[test]
fn example_programs_verify() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "s") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).unwrap();
        let tiny = tempfile::tempdir().unwrap();
        let defines = common::example_defines(&path, tiny.path());
        let defines = defines.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let opts = AsmOptions { defines, base_dir: dir.clone() };
        let p = assemble(&src, &name, &opts).unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = adeadvm::verify::verify(p) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    /// Any text made of assembly-like pieces assembles or fails cleanly; never panics.
    #[test]
    fn random_text_never_panics(pieces in proptest::collection::vec(proptest::sample::select(vec![
        "ADD", "MATMUL", "ALLOC", "JNZ", ".const", ".rept", ".endr", ".input", ".kernel", ".spirv", ".dim",
        "%x", "%y", "r1", "r99", "f32[", "f16", "]", "[", "(", ")", ",", "=", ":", "\"", "${", "}", "i", "0x",
        "1.5", "-", "nan", "inf", "zeros", "rand(", "npy(", "words(", "@gpu", ";", "\n", " ", "\t", "é", "4",
    ]), 0..40)) {
        let src: String = pieces.concat();
        let _ = assemble(&src, "fuzz.s", &AsmOptions::default()).map_err(|e| e.to_string());
    }
}

#[test]
fn runaway_rept_is_an_error() {
    let e = asm_err(".rept i 100000\n.rept j 100000\n    NOP\n.endr\n.endr\n");
    assert!(e.contains("`.rept` expansion is too large"), "{e}");
}

/// A mistyped line inside large `.rept`s is reported once, for its first iteration (a fuzz input
/// of this shape, 900,000 iterations, spent 9.5 s re-diagnosing it); the errors of other lines
/// and of lines that use the counter are still reported.
#[test]
fn a_failing_line_in_a_large_rept_is_reported_once() {
    let e = asm_err("    NOPE\n.rept j 3000\n.rept i 300\n    FRendr\n    FREE %t${i}\n.endr\n.endr\n");
    let mnemonic_errors = e.matches("error: unknown mnemonic `FRendr`").count();
    assert_eq!(mnemonic_errors, 1, "{e}");
    assert!(e.contains("in iteration i = 0 of the `.rept` on line 3"), "{e}");
    assert!(e.contains("in iteration j = 0 of the `.rept` on line 2"), "{e}");
    assert!(e.contains("error: unknown mnemonic `NOPE`"), "{e}");
    // `FREE %t${i}` names a different unknown tensor in each iteration: one error each, up to
    // the assembler's limit on errors.
    assert!(e.contains("`%t0`") && e.contains("`%t1`"), "{e}");
}

/// programs/kernel/scale.spv is what glslc makes of scale.comp (skipped where glslc is absent).
#[test]
fn kernel_spirv_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/kernel");
    let out = tempfile::tempdir().unwrap();
    let spv = out.path().join("scale.spv");
    let status = std::process::Command::new("glslc")
        .args(["--target-env=vulkan1.1", "-O"])
        .arg(dir.join("scale.comp"))
        .arg("-o")
        .arg(&spv)
        .status();
    match status {
        Ok(s) if s.success() => {
            let fresh = std::fs::read(&spv).unwrap();
            let committed = std::fs::read(dir.join("scale.spv")).unwrap();
            assert!(fresh == committed, "programs/kernel/scale.spv is stale: rebuild it (see scale.comp)");
        }
        _ => common::skip::skipped("programs/kernel/scale.spv is current", "glslc is not installed"),
    }
}
