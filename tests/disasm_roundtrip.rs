//! asm -> disasm -> asm gives identical bytes: for every program in programs/, for a program
//! using every constant source and directive, and for random instructions.

use std::path::{Path, PathBuf};

use adeadvm::asm::{assemble, disassemble, AsmOptions, DisasmOptions};
use adeadvm::format::Program;
use adeadvm::isa::{Instruction, INSN_BYTES};
use proptest::prelude::*;

mod common;

fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

fn asm_file(path: &Path, defines: &[(&str, &str)]) -> Program {
    let src = std::fs::read_to_string(path).unwrap();
    let opts = AsmOptions {
        defines: defines.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        base_dir: path.parent().unwrap().to_path_buf(),
    };
    match assemble(&src, &path.display().to_string(), &opts) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Disassembles `p` (large constants to .npy files under a temp dir), re-assembles, and
/// checks the bytes; also checks the all-inline form.
/// The text without long constant lines, for failure messages.
fn short(text: &str) -> String {
    text.lines().map(|l| if l.len() > 200 { &l[..200] } else { l }).collect::<Vec<_>>().join("\n")
}

/// Field by field, for readable failures.
fn same_program(a: &Program, b: &Program) {
    assert_eq!(a.tier, b.tier);
    assert_eq!(a.syms, b.syms);
    assert_eq!(a.tensors, b.tensors);
    assert_eq!(a.outputs, b.outputs);
    assert_eq!(a.spirv, b.spirv);
    assert_eq!(a.kernels, b.kernels);
    assert_eq!(a.debug, b.debug);
    for (i, (x, y)) in a.code.iter().zip(&b.code).enumerate() {
        assert_eq!(x, y, "instruction {i}: {:?} vs {:?}", Instruction::decode(x), Instruction::decode(y));
    }
    assert_eq!(a.code.len(), b.code.len());
    assert!(*a.data == *b.data, "data differs");
}

fn round_trip(p: &Program) {
    let bytes = p.to_bytes();
    // All inline.
    let text = disassemble(p, &DisasmOptions::default()).unwrap();
    let again = assemble(&text, "disasm.s", &AsmOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", short(&text)));
    same_program(&again, p);
    assert_eq!(again.to_bytes(), bytes, "inline round trip differs:\n{}", short(&text));
    // Large constants as .npy files, next to the .s in data/.
    let dir = tempfile::tempdir().unwrap();
    let opts = DisasmOptions {
        data_dir: Some(dir.path().join("data")),
        asm_dir: dir.path().to_path_buf(),
        summarize_large: false,
    };
    let text = disassemble(p, &opts).unwrap();
    let aopts = AsmOptions { defines: vec![], base_dir: dir.path().to_path_buf() };
    let again = assemble(&text, "disasm.s", &aopts).unwrap_or_else(|e| panic!("{e}\n{}", short(&text)));
    assert_eq!(again.to_bytes(), bytes, "npy round trip differs:\n{}", short(&text));
    // Disassembling the re-assembled program gives the same text (a fixed point).
    assert_eq!(disassemble(&again, &opts).unwrap(), text);
    // And the bytes load back to the same program.
    let loaded = Program::from_bytes(bytes).unwrap();
    assert_eq!(disassemble(&loaded, &opts).unwrap(), text);
}

#[test]
fn every_program_round_trips() {
    let mut n = 0;
    for entry in std::fs::read_dir(programs_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "s") {
            // minilm_l6.s needs -D WEIGHTS=model.safetensors: a tiny model of the same structure
            // keeps the all-inline round trip small (the real one has 23 M weights).
            let tiny = tempfile::tempdir().unwrap();
            let defines = common::example_defines(&path, tiny.path());
            let defines: Vec<(&str, &str)> = defines.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let p = asm_file(&path, &defines);
            round_trip(&p);
            n += 1;
        }
    }
    assert!(n >= 5, "expected the example programs, found {n}");
}

#[test]
fn defines_change_programs() {
    let p = asm_file(&programs_dir().join("loop.s"), &[("L", "6")]);
    assert_eq!(p.tensors.iter().filter(|t| t.name.len() == 2 && t.name.starts_with('w')).count(), 6);
    round_trip(&p);
}

fn write_npy_f32(path: &Path, shape: &[u64], data: &[f32]) {
    let shape = shape.iter().map(|&d| d as usize).collect();
    let tensor = adeadvm::HostTensor::from_f32(shape, data).unwrap();
    std::fs::write(path, adeadvm::npy::to_bytes(&tensor)).unwrap();
}

fn write_safetensors(path: &Path) {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let a: Vec<u8> = (0..12).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    let b: Vec<u8> = (0..4i32).flat_map(|i| (i - 2).to_le_bytes()).collect();
    let views = vec![
        ("encoder.layer.0.weight", TensorView::new(Dtype::F32, vec![3, 4], &a).unwrap()),
        ("encoder.layer.0.index", TensorView::new(Dtype::I32, vec![4], &b).unwrap()),
    ];
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Everything at once: npy, safetensors, rand, splats, inline values of each dtype, .rept,
/// defines in paths and shapes, spirv + kernel, labels, placement, optional operands.
pub const EVERYTHING: &str = r#"; a test program that uses every feature of the assembler
.file "everything.s"
.tier fast
.define W ${DATA}/w.npy
.dim B, T
.input %x f32[B, HIDDEN]
.input %ids i32[T]
.const %w f32[HIDDEN, 80] = npy("${W}")
.const %w16 f16[HIDDEN, 80] = npy("${DATA}/w.npy")
.const %st f32[3, 4] = safetensors("${DATA}/m.safetensors", "encoder.layer.0.weight")
.const %sth bf16[3, 4] = safetensors("${DATA}/m.safetensors", "encoder.layer.0.weight")
.const %sti i32[4] = safetensors("${DATA}/m.safetensors", "encoder.layer.0.index")
.const %r f32[16, 16] = rand(42)
.const %rn bf16[8] = rand(7, normal)
.const %z f32[80] = zeros
.const %o f16[80] = ones
.const %f bf16[2, 2] = fill(-2.5)
.const %fi i32[3] = fill(-7)
.const %fn f32[1] = fill(nan)
.const %inl f32[2, 3] = [[1.0, -0.0, 1e-5], [inf, -inf, 0x7fc00001]]
.const %inh f16[4] = [1.0, 0.1, 65504, 0x7e01]
.const %ini i32[2] = [-2147483648, 0xffffffff]
.const %scalar f32[] = [3.5]
.rept i 3
.const %layer${i} f32[4, 4] = fill(${i})
.rept j 2
.const %cell${i}_${j} f32[1] = fill(${i}${j})
.endr
.endr
.tensor %y f32[B, 80]
.output y f32[B, 80]
.output tok f32[T, 80]
.spirv mod = file("${DATA}/k.spv")
.spirv raw = words(0x07230203, 0x00010000, 7)
.kernel k = mod "main" bindings(%x, %y) push(f32 2.0, u32 4, i32 -1, u8 9) groups(4, 2, 1)
.kernel k2 = raw "other" groups(1, 1, 1)

start:
    ALLOC %y
    MATMUL@gpu %y, %x, %w, bias=%z, act=gelu
    ADD %y, %y, 1.5
    ADD %y, %y, %z
    SOFTMAX@cpu %y, %y, scale=-0.0
    LAYERNORM %y, %y, eps=1e-6, gamma=%z
    ALLOC %w2: f32[HIDDEN, 80]
    LOAD %w2, %layer0, index=r3, count=3
    ISET r3, -5
    IADDI r3, r3, 0x7fffffff
loop:
    JZ r3, done
    IADDI r3, r3, -1
    JMP loop
done:
.loc 1000
    TRANSPOSE %w2, %w2, [1, 0]
    RAND %w2, 99, dist=normal
    FILL %w2, nan
    SLICE %y, %y, -1, 3
    KERNEL k
    GPU_SYNC
    STORE y, %y
    FREE %w2
    FREE %y
    HALT
end:
"#;

fn everything_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let w: Vec<f32> = (0..64 * 80).map(|i| (i as f32 * 0.37).sin()).collect();
    write_npy_f32(&data.join("w.npy"), &[64, 80], &w);
    write_safetensors(&data.join("m.safetensors"));
    std::fs::copy(programs_dir().join("kernel/scale.spv"), data.join("k.spv")).unwrap();
    dir
}

fn asm_everything(dir: &Path) -> Program {
    let opts = AsmOptions {
        defines: vec![("DATA".into(), "data".into()), ("HIDDEN".into(), "64".into())],
        base_dir: dir.to_path_buf(),
    };
    assemble(EVERYTHING, "everything.s", &opts).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn everything_round_trips() {
    let dir = everything_dir();
    let p = asm_everything(dir.path());
    assert_eq!(p.syms, ["B", "T"]);
    assert_eq!(p.debug.source, "everything.s");
    assert_eq!(
        p.debug.labels.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["start", "loop", "done", "end"]
    );
    assert_eq!(p.debug.labels.last().unwrap().1 as usize, p.code.len());
    round_trip(&p);
}

#[test]
fn disassembly_reads_well() {
    let dir = everything_dir();
    let p = asm_everything(dir.path());
    let text = disassemble(&p, &DisasmOptions::default()).unwrap();
    let text = short(&text);
    for want in [
        ".tier fast",
        ".dim B, T",
        ".input %x f32[B, 64]",
        ".const %z f32[80] = zeros",
        ".const %o f16[80] = ones",
        ".const %f bf16[2, 2] = fill(-2.5)",
        ".const %fn f32[1] = fill(0x7fc00000)",
        ".const %inl f32[2, 3] = [1.0, -0.0, 1e-5, inf, -inf, 0x7fc00001]",
        ".const %inh f16[4] = [1.0, 0.099975586, 65504.0, 0x7e01]",
        ".const %ini i32[2] = [-2147483648, -1]",
        ".kernel k = mod \"main\" bindings(%x, %y) push(u32 1073741824, u32 4, u32 4294967295, u8 9) groups(4, 2, 1)",
        "    MATMUL@gpu %y, %x, %w, bias=%z, act=gelu",
        "    ADD %y, %y, 1.5",
        "    SOFTMAX@cpu %y, %y, scale=-0.0",
        "    LOAD %w2, %layer0, index=r3, count=3",
        "    RAND %w2, 99, dist=normal",
        "    FILL %w2, 0x7fc00000",
        "    SLICE %y, %y, -1, 3",
        "loop:\n.loc 50\n    JZ r3, done",
        ".loc 1000\n    TRANSPOSE %w2, %w2, [1, 0]",
        "    HALT\nend:",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{}", short(&text));
    }
}

#[test]
fn jump_targets_without_labels_get_synthesized_ones() {
    let src = ".input %x f32[1]\n    ISET r0, 1\n    JNZ r0, there\n    NOP\nthere:\n    HALT\n";
    let mut p = assemble(src, "t.s", &AsmOptions::default()).unwrap();
    p.debug.labels.clear();
    let text = disassemble(&p, &DisasmOptions::default()).unwrap();
    assert!(text.contains("L3:\n.loc 6\n    HALT"), "{text}");
    assert!(text.contains("JNZ r0, L3"), "{text}");
    let again = assemble(&text, "t.s", &AsmOptions::default()).unwrap();
    assert_eq!(again.code, p.code);
    assert_eq!(again.debug.labels, vec![("L3".to_string(), 3)]);
}

#[test]
fn undecodable_instruction_is_a_clean_error() {
    let mut p = assemble("    NOP\n    HALT\n", "t.s", &AsmOptions::default()).unwrap();
    p.code[1] = [0xEE; INSN_BYTES];
    let e = disassemble(&p, &DisasmOptions::default()).unwrap_err();
    assert_eq!(e.to_string(), "instruction 1 cannot be decoded: unknown opcode 0xee");
}

/// A strategy for any valid instruction: random bytes that decode.
fn valid_instruction() -> impl Strategy<Value = Instruction> {
    use adeadvm::isa::{Operand, Placement, OP_INFO};
    let op = 0..OP_INFO.len();
    (op, 0u8..3, proptest::collection::vec(any::<u32>(), 8), proptest::collection::vec(0u8..8, 8)).prop_map(
        |(i, place, raw, perm_seed)| {
            let info = &OP_INFO[i];
            let ops: Vec<Operand> = info
                .operands
                .iter()
                .zip(&raw)
                .map(|(o, &r)| {
                    use adeadvm::isa::*;
                    match o.kind {
                        OperandKind::Tensor => Operand::Tensor(TensorId((r % 0xFFFF) as u16)),
                        OperandKind::TensorOpt => {
                            Operand::TensorOpt((r % 3 != 0).then_some(TensorId((r % 0xFFFF) as u16)))
                        }
                        OperandKind::Reg => Operand::Reg(Reg((r % 16) as u8)),
                        OperandKind::RegOpt => Operand::RegOpt((r % 3 != 0).then_some(Reg((r % 16) as u8))),
                        OperandKind::Label => Operand::Label(Target(r)),
                        OperandKind::F32 => Operand::F32(f32::from_bits(r)),
                        OperandKind::I32 => Operand::I32(r as i32),
                        OperandKind::U32 => Operand::U32(r),
                        OperandKind::U16 => Operand::U16(r as u16),
                        OperandKind::Axis => Operand::Axis((r % 16) as i8 - 8),
                        OperandKind::Perm => {
                            let n = (r % 9) as usize;
                            let mut axes: Vec<u8> = (0..n as u8).collect();
                            for (k, s) in perm_seed.iter().enumerate().take(n) {
                                axes.swap(k, *s as usize % n);
                            }
                            Operand::Perm(Perm::new(&axes).unwrap())
                        }
                        OperandKind::Bool => Operand::Bool(r % 2 == 1),
                        OperandKind::Act => Operand::Act(Act::ALL[r as usize % Act::ALL.len()]),
                        OperandKind::Dist => Operand::Dist(Dist::ALL[r as usize % Dist::ALL.len()]),
                        OperandKind::Output => Operand::Output(OutputId(r as u16)),
                        OperandKind::Kernel => Operand::Kernel(KernelId(r as u16)),
                    }
                })
                .collect();
            let insn = adeadvm::isa::Insn::from_operands(info.opcode, &ops).unwrap();
            let placement = [Placement::Auto, Placement::Cpu, Placement::Gpu][place as usize];
            Instruction { insn, placement }
        },
    )
}

proptest! {
    #[test]
    fn encode_decode_round_trips(i in valid_instruction()) {
        let b = i.encode();
        let d = Instruction::decode(&b).unwrap();
        // Compare by encoding: NaN immediates are not == to themselves.
        prop_assert_eq!(d.encode(), b);
        prop_assert_eq!(format!("{:?}", d.insn.opcode()), format!("{:?}", i.insn.opcode()));
    }

    #[test]
    fn decoding_any_bytes_never_panics(b in proptest::array::uniform16(any::<u8>())) {
        if let Ok(i) = Instruction::decode(&b) {
            // Decoding is canonical: what decodes re-encodes to the same bytes.
            prop_assert_eq!(i.encode(), b);
        }
    }

    /// Random single-instruction programs (with enough tensors, outputs, kernels and a label
    /// for the operands to name) survive asm -> disasm -> asm.
    #[test]
    fn random_instructions_round_trip_through_text(i in valid_instruction()) {
        use adeadvm::isa::*;
        let fix = |op: Operand| match op {
            Operand::Tensor(t) => Operand::Tensor(TensorId(t.0 % 4)),
            Operand::TensorOpt(t) => Operand::TensorOpt(t.map(|t| TensorId(t.0 % 4))),
            Operand::Label(t) => Operand::Label(Target(t.0 % 3)),
            Operand::Output(o) => Operand::Output(OutputId(o.0 % 2)),
            Operand::Kernel(k) => Operand::Kernel(KernelId(k.0 % 2)),
            o => o,
        };
        let ops: Vec<Operand> = i.insn.operands().into_iter().map(fix).collect();
        let insn = Insn::from_operands(i.insn.opcode(), &ops).unwrap();
        let src = ".tensor %a f32[2]\n.tensor %b.c f32[2]\n.input %d i32[2]\n.const %e f16[2] = zeros\n\
                   .output o1 f32[2]\n.output o2 f32[2]\n.spirv m = words(1, 2)\n\
                   .kernel k1 = m \"main\"\n.kernel k2 = m \"other\"\nstart:\n    HALT\nmid:\n    HALT\nend:\n";
        let mut p = assemble(src, "r.s", &AsmOptions::default()).unwrap();
        p.code[0] = Instruction { insn, placement: i.placement }.encode();
        let text = disassemble(&p, &DisasmOptions::default()).unwrap();
        let again = assemble(&text, "r.s", &AsmOptions::default()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(again.to_bytes(), p.to_bytes());
    }
}
