//! One problem, two executors: every opcode and every program in programs/ runs on the CPU
//! reference and on the Vulkan executor, and the strict-tier outputs must be identical bit for
//! bit. On a machine without Vulkan these tests skip, unless ADEADVM_REQUIRE_VULKAN=1 (CI),
//! where a missing device fails them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Arc;

use adeadvm::exec::cpu::SimdLevel;
use adeadvm::isa::{DType, Opcode, OP_INFO};
use adeadvm::verify::VerifiedProgram;
use adeadvm::vm::{Backend, HostTensor, VmConfig};
use common::vk::required;
use common::*;
use proptest::prelude::*;

/// Whether Vulkan tests can run here; fails when they must.
fn vulkan() -> bool {
    match adeadvm::vm::shared_device() {
        Ok(_) => true,
        Err(e) => {
            assert!(!required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            common::skip::skipped("a VM test on Vulkan", &format!("no Vulkan device ({e})"));
            false
        }
    }
}

fn cpu() -> VmConfig {
    VmConfig { simd: Some(SimdLevel::Scalar), threads: Some(1), backend: Backend::Cpu, ..VmConfig::default() }
}

fn gpu() -> VmConfig {
    VmConfig { backend: Backend::Vulkan, threads: Some(1), ..VmConfig::default() }
}

/// Runs on the scalar CPU reference and on Vulkan; panics naming the first differing element.
fn same_bits(
    what: &str,
    program: &Arc<VerifiedProgram>,
    inputs: &[(&str, HostTensor)],
) -> BTreeMap<String, HostTensor> {
    let want = run_with(program, inputs, cpu()).unwrap_or_else(|e| panic!("{what} on the CPU: {e}"));
    let got = run_with(program, inputs, gpu()).unwrap_or_else(|e| panic!("{what} on Vulkan: {e}"));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "{what}: outputs");
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!((w.dtype, &w.shape), (g.dtype, &g.shape), "{what}: output {name}");
        if w.bytes() != g.bytes() {
            let size = w.dtype.size();
            let pos = w.bytes().iter().zip(g.bytes()).position(|(a, b)| a != b).unwrap_or(0) / size;
            let word = |t: &HostTensor| t.bytes()[pos * size..(pos + 1) * size].to_vec();
            panic!(
                "{what}: output {name} ({}) differs at element {pos}: cpu {:02x?}, vulkan {:02x?}",
                w.dtype.name(),
                word(w),
                word(g)
            );
        }
    }
    want
}

/// x with special values planted: ±0, ±inf, NaN, denormals, huge and tiny.
fn awkward(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut v = Rng(seed).vec(n, lo, hi);
    for (i, s) in SPECIALS.iter().enumerate() {
        v[(i * 97 + 5) % n] = *s;
    }
    v
}

/// Every tensor opcode in f32 on awkward shapes (tails, rows longer than 256, broadcasting).
const F32_OPS: &str = "
.input %x f32[5, 300]
.input %w f32[300, 13]
.input %ids i32[7]
.const %g f32[300] = rand(1)
.const %be f32[300] = rand(2)
.const %bias f32[13] = rand(3)
.const %col f32[5, 1] = rand(4)
.const %table f32[9, 300] = rand(5)
.const %mask f32[1, 300] = rand(6)
.output un f32[5, 300]
.output bi f32[5, 300]
.output sc f32[5, 300]
.output mm f32[5, 13]
.output mt f32[13, 5]
.output bmm f32[3, 5, 7]
.output sm f32[5, 300]
.output ln f32[5, 300]
.output rn f32[5, 300]
.output rs f32[300]
.output rm f32[5]
.output rx f32[5, 1]
.output tr f32[300, 5]
.output sl f32[5, 37]
.output cc f32[5, 337]
.output ga f32[7, 300]
.output fi f32[3, 3]
.output ru f32[1000]
.output rnrm f32[999]
.output ld f32[5, 1]
.output rsh f32[1500]
    ALLOC %t: f32[5, 300]
    ALLOC %u: f32[5, 300]
    EXP %t, %x
    TANH %u, %t
    GELU %t, %u
    SIGMOID %u, %t
    LOG %t, %u
    RSQRT %u, %t
    SQRT %t, %u
    NEG %u, %t
    ABS %t, %u
    RELU %u, %t
    STORE un, %u
    ADD %t, %x, %g
    SUB %u, %t, %col
    MUL %t, %u, %x
    DIV %u, %t, %be
    MAX %t, %u, %x
    MIN %u, %t, %col
    STORE bi, %u
    ADD %t, %x, 1.5
    SUB %u, %t, -0.25
    MUL %t, %u, 0.3
    DIV %u, %t, 7.0
    MAX %t, %u, -1.0
    MIN %u, %t, 2.0
    STORE sc, %u
    ALLOC %m: f32[5, 13]
    MATMUL %m, %x, %w, bias=%bias, act=gelu
    STORE mm, %m
    FREE %m
    ALLOC %wt: f32[13, 300]
    TRANSPOSE %wt, %w, [1, 0]
    ALLOC %mt: f32[13, 5]
    MATMUL %mt, %wt, %x, tb=1, act=relu
    STORE mt, %mt
    FREE %mt
    FREE %wt
    ALLOC %ba: f32[3, 5, 11]
    RAND %ba, 11, dist=normal
    ALLOC %bb: f32[11, 7]
    RAND %bb, 12
    ALLOC %bm: f32[3, 5, 7]
    MATMUL %bm, %ba, %bb
    STORE bmm, %bm
    FREE %bm
    FREE %bb
    FREE %ba
    SOFTMAX %t, %x, mask=%mask, scale=0.7
    STORE sm, %t
    SOFTMAX %t, %t, scale=1.0
    LAYERNORM %t, %x, gamma=%g, beta=%be, eps=1e-6
    STORE ln, %t
    RMSNORM %u, %x, gamma=%g
    STORE rn, %u
    ALLOC %rs: f32[300]
    REDUCE_SUM %rs, %x, 0
    STORE rs, %rs
    FREE %rs
    ALLOC %rm: f32[5]
    REDUCE_MEAN %rm, %x, -1
    STORE rm, %rm
    FREE %rm
    ALLOC %rx: f32[5, 1]
    REDUCE_MAX %rx, %x, 1
    STORE rx, %rx
    FREE %rx
    ALLOC %tr: f32[300, 5]
    TRANSPOSE %tr, %x, [1, 0]
    STORE tr, %tr
    FREE %tr
    ALLOC %sl: f32[5, 37]
    SLICE %sl, %x, 1, 250
    STORE sl, %sl
    ALLOC %cc: f32[5, 337]
    CONCAT %cc, %x, %sl, -1
    STORE cc, %cc
    FREE %cc
    FREE %sl
    ALLOC %ga: f32[7, 300]
    GATHER %ga, %table, %ids
    STORE ga, %ga
    FREE %ga
    ALLOC %fi: f32[3, 3]
    FILL %fi, -2.75
    STORE fi, %fi
    FREE %fi
    ALLOC %ru: f32[1000]
    RAND %ru, 99
    STORE ru, %ru
    FREE %ru
    ALLOC %rnrm: f32[999]
    RAND %rnrm, 7, dist=normal
    STORE rnrm, %rnrm
    FREE %rnrm
    ALLOC %ld: f32[5, 1]
    LOAD %ld, %col
    STORE ld, %ld
    FREE %ld
    ALLOC %rsh: f32[1500]
    COPY %u, %x
    RESHAPE %rsh, %u
    STORE rsh, %rsh
    FREE %rsh
    FREE %t
    FREE %u
    GPU_SYNC
    NOP
    HALT
";

/// The 16-bit float and i32 paths: widening, rounding back, packed 16-bit moves, casts in
/// every direction, integer arithmetic, and a register loop.
const MIXED_OPS: &str = "
.input %x f32[3, 37]
.input %i i32[3, 37]
.input %ids i32[5]
.const %k0 f16[37] = rand(1)
.const %k1 f16[37] = rand(2)
.const %tb bf16[6, 37] = rand(3)
.output h f16[3, 37]
.output hb bf16[3, 37]
.output hx f32[3, 37]
.output hm f16[3, 5]
.output ht f16[37, 3]
.output hs f16[3, 7]
.output hc bf16[6, 37]
.output hg bf16[5, 37]
.output hf f16[3, 3]
.output bf bf16[5]
.output ic i32[3, 37]
.output ia i32[3, 37]
.output io i32[3, 37]
.output ifl i32[4]
.output hl f16[37]
.output hr f16[999]
.output hred f16[3]
.output hsm bf16[3, 37]
    ALLOC %h: f16[3, 37]
    CAST %h, %x
    ALLOC %h2: f16[3, 37]
    ADD %h2, %h, %k0
    EXP %h, %h2
    MUL %h2, %h, 0.5
    STORE h, %h2
    ALLOC %hb: bf16[3, 37]
    CAST %hb, %h2
    SIGMOID %hb, %hb
    STORE hb, %hb
    ALLOC %hx: f32[3, 37]
    CAST %hx, %hb
    STORE hx, %hx
    ALLOC %hw: f16[37, 5]
    RAND %hw, 5
    ALLOC %hm: f16[3, 5]
    MATMUL %hm, %h2, %hw
    STORE hm, %hm
    FREE %hm
    FREE %hw
    ALLOC %ht: f16[37, 3]
    TRANSPOSE %ht, %h2, [1, 0]
    STORE ht, %ht
    FREE %ht
    ALLOC %hs: f16[3, 7]
    SLICE %hs, %h2, 1, 29
    STORE hs, %hs
    FREE %hs
    ALLOC %hc: bf16[6, 37]
    CONCAT %hc, %hb, %hb, 0
    STORE hc, %hc
    FREE %hc
    ALLOC %hg: bf16[5, 37]
    GATHER %hg, %tb, %ids
    STORE hg, %hg
    FREE %hg
    ALLOC %hf: f16[3, 3]
    FILL %hf, 0.1
    STORE hf, %hf
    FREE %hf
    ALLOC %bf: bf16[5]
    FILL %bf, -3.3
    STORE bf, %bf
    FREE %bf
    ALLOC %ic: i32[3, 37]
    CAST %ic, %hx
    STORE ic, %ic
    ALLOC %ia: i32[3, 37]
    ADD %ia, %ic, %i
    MUL %ic, %ia, %i
    SUB %ia, %ic, %i
    MAX %ic, %ia, %i
    MIN %ia, %ic, %i
    NEG %ic, %ia
    ABS %ia, %ic
    STORE ia, %ia
    ALLOC %io: i32[3, 37]
    COPY %io, %ia
    STORE io, %io
    FREE %io
    ALLOC %ifl: i32[4]
    FILL %ifl, -7.9
    STORE ifl, %ifl
    FREE %ifl
    FREE %ia
    FREE %ic
    ALLOC %hl: f16[37]
    ALLOC %acc: f16[37]
    FILL %acc, 0.0
    ISET r0, 0
    ISET r1, 2
loop:
    LOAD %hl, %k0, index=r0, count=2
    ADD %acc, %acc, %hl
    IADDI r0, r0, 1
    ILT r2, r0, r1
    JNZ r2, loop
    IADD r3, r0, r1
    ISUB r4, r3, r1
    IMUL r5, r4, r4
    IEQ r6, r5, r3
    JZ r6, done
    JMP done
done:
    STORE hl, %acc
    FREE %acc
    FREE %hl
    ALLOC %hr: f16[999]
    RAND %hr, 3, dist=normal
    STORE hr, %hr
    FREE %hr
    ALLOC %hred: f16[3]
    REDUCE_SUM %hred, %h2, 1
    STORE hred, %hred
    FREE %hred
    ALLOC %hsm: bf16[3, 37]
    SOFTMAX %hsm, %hb
    LAYERNORM %hsm, %hsm
    RMSNORM %hsm, %hsm
    STORE hsm, %hsm
    FREE %hsm
    FREE %hx
    FREE %hb
    FREE %h2
    FREE %h
";

/// The decoder's instructions: SILU, ARGMAX (f32 and bf16), SLICE at a register offset and PUT
/// (f32 and 16-bit, odd offsets and lengths), SCATTER (repeated indices; f32 and f16 rows of
/// odd length), TGET and TSET.
const DECODER_OPS: &str = "
.input %x f32[4, 37]
.input %ix i32[3]
.input %p i32[2]
.const %hsrc f16[3, 5] = rand(4)
.output si f32[4, 37]
.output am i32[4]
.output amh i32[4, 1]
.output sl f32[4, 5]
.output slh bf16[4, 5]
.output pu f32[6, 37]
.output puh f16[4, 37]
.output sc f32[5, 37]
.output sch f16[6, 5]
.output ts i32[2]
    ALLOC %si: f32[4, 37]
    SILU %si, %x
    STORE si, %si
    FREE %si
    ALLOC %am: i32[4]
    ARGMAX %am, %x
    STORE am, %am
    FREE %am
    ALLOC %h: bf16[4, 37]
    CAST %h, %x
    ALLOC %amh: i32[4, 1]
    ARGMAX %amh, %h
    STORE amh, %amh
    FREE %amh
    ISET r0, 1
    TGET r1, %p, r0
    ALLOC %sl: f32[4, 5]
    SLICE %sl, %x, 1, r1
    STORE sl, %sl
    ALLOC %slh: bf16[4, 5]
    SLICE %slh, %h, -1, r1
    STORE slh, %slh
    FREE %slh
    FREE %h
    ALLOC %pu: f32[6, 37]
    FILL %pu, 1.0
    PUT %pu, %x, 0, r0
    STORE pu, %pu
    FREE %pu
    ALLOC %puh: f16[4, 37]
    FILL %puh, -2.0
    ALLOC %hs: f16[4, 5]
    CAST %hs, %sl
    ISET r2, 3
    PUT %puh, %hs, 1, r2
    STORE puh, %puh
    FREE %hs
    FREE %puh
    FREE %sl
    ALLOC %sc: f32[5, 37]
    FILL %sc, 0.5
    ALLOC %three: f32[3, 37]
    SLICE %three, %x, 0, r0
    SCATTER %sc, %three, %ix
    STORE sc, %sc
    FREE %three
    FREE %sc
    ALLOC %sch: f16[6, 5]
    FILL %sch, 3.0
    SCATTER %sch, %hsrc, %ix
    STORE sch, %sch
    FREE %sch
    ALLOC %ts: i32[2]
    COPY %ts, %p
    ISET r3, -5
    TSET %ts, r0, r3
    STORE ts, %ts
    FREE %ts
";

fn opcodes(p: &VerifiedProgram) -> BTreeSet<Opcode> {
    p.instructions().iter().map(|i| i.insn.opcode()).collect()
}

fn mixed_inputs() -> Vec<(&'static str, HostTensor)> {
    let x = awkward(3 * 37, 21, -6.0, 6.0);
    let ints: Vec<i32> = (0..3 * 37i32).map(|k| (k - 50).wrapping_mul(40_000_001)).collect();
    vec![("x", f32s(&[3, 37], &x)), ("i", i32s(&[3, 37], &ints)), ("ids", i32s(&[5], &[5, 0, 3, 3, 1]))]
}

#[test]
fn every_opcode_gives_the_cpu_bits_on_vulkan() {
    if !vulkan() {
        return;
    }
    let f32_ops = build(F32_OPS);
    let x = awkward(5 * 300, 7, -20.0, 20.0);
    let w = Rng(8).vec(300 * 13, -1.0, 1.0);
    let ids = [8, 0, 3, 3, 7, 1, 2];
    same_bits(
        "f32 opcodes",
        &f32_ops,
        &[("x", f32s(&[5, 300], &x)), ("w", f32s(&[300, 13], &w)), ("ids", i32s(&[7], &ids))],
    );
    let mixed = build(MIXED_OPS);
    same_bits("16-bit and i32 opcodes", &mixed, &mixed_inputs());
    let decoder = build(DECODER_OPS);
    let xd = awkward(4 * 37, 22, -5.0, 5.0);
    let decoder_inputs =
        [("x", f32s(&[4, 37], &xd)), ("ix", i32s(&[3], &[4, 0, 4])), ("p", i32s(&[2], &[7, 31]))];
    let out = same_bits("decoder opcodes", &decoder, &decoder_inputs);
    // The repeated index 4 takes the last of its rows (row 3 of x), row 0 the second (row 2).
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let sc = bits(&out["sc"].to_f32().unwrap());
    let xb = bits(&xd);
    assert_eq!(sc[4 * 37..5 * 37], xb[3 * 37..4 * 37], "SCATTER: the highest position wins");
    assert_eq!(sc[..37], xb[2 * 37..3 * 37]);
    assert!(sc[37..4 * 37].iter().all(|&v| v == 0.5f32.to_bits()), "SCATTER keeps the rows it does not name");

    // The comparisons, SELECT and ERF on every dtype, broadcasting and expanding, with the
    // model's bits (tests/common/cmpsel.rs).
    let (r, c) = (7, 300);
    let cs = build(&cmpsel::program(r, c, &[""]));
    let cs_inputs = cmpsel::inputs(41, r, c);
    let ins: Vec<(&str, HostTensor)> = cs_inputs.tensors.iter().map(|(n, t)| (*n, t.clone())).collect();
    let outs = same_bits("comparisons and SELECT", &cs, &ins);
    cmpsel::check_model(&cs_inputs, &outs, "comparisons and SELECT");

    // Coverage: every opcode of the ISA appears in these programs or in kernel.s (KERNEL).
    let mut seen = opcodes(&f32_ops);
    seen.extend(opcodes(&cs));
    seen.extend(opcodes(&mixed));
    seen.extend(opcodes(&decoder));
    seen.extend(opcodes(&program_file("kernel.s")));
    let missing: Vec<&str> = OP_INFO.iter().filter(|i| !seen.contains(&i.opcode)).map(|i| i.name).collect();
    assert!(missing.is_empty(), "opcodes not covered by the Vulkan suite: {missing:?}");
}

/// The comparisons, SELECT and ERF at a size past a GPU grid's first pass, all on the device,
/// then placed `@cpu` and `@gpu` in turn (so results cross between host and device both
/// ways): the CPU's bits and the model's.
#[test]
fn comparisons_and_select_on_the_device_give_the_cpu_and_model_bits() {
    if !vulkan() {
        return;
    }
    let (r, c) = (61, 1031);
    let inputs = cmpsel::inputs(7, r, c);
    let ins: Vec<(&str, HostTensor)> = inputs.tensors.iter().map(|(n, t)| (*n, t.clone())).collect();
    let outs = same_bits("comparisons and SELECT", &build(&cmpsel::program(r, c, &[""])), &ins);
    cmpsel::check_model(&inputs, &outs, "Vulkan");
    for placements in [["@cpu", "@gpu"], ["@gpu", "@cpu"]] {
        let placed = build(&cmpsel::program(r, c, &placements));
        let mixed = run_with(&placed, &ins, gpu()).unwrap_or_else(|e| panic!("{placements:?}: {e}"));
        for (name, t) in &outs {
            assert!(mixed[name] == *t, "output {name} with placements {placements:?} differs");
        }
    }
}

#[test]
fn example_programs_give_the_cpu_bits_on_vulkan() {
    if !vulkan() {
        return;
    }
    same_bits("mlp.s", &program_file("mlp.s"), &[("x", data("mlp_x.npy"))]);
    same_bits(
        "attention.s",
        &program_file("attention.s"),
        &[("x", data("attention_x.npy")), ("mask", data("attention_mask.npy"))],
    );
    same_bits("ffn.s", &program_file("ffn.s"), &[("x", data("ffn_x.npy"))]);
    same_bits("loop.s", &program_file("loop.s"), &[("x", data("loop_x.npy"))]);
}

#[test]
fn kernel_program_runs_user_spirv() {
    if !vulkan() {
        return;
    }
    let p = program_file("kernel.s");
    let x = Rng(3).vec(1024, -100.0, 100.0);
    let outs = run_with(&p, &[("x", f32s(&[1024], &x))], gpu()).unwrap();
    let y = outs["y"].to_f32().unwrap();
    // y = 2x is exact in binary floating point.
    for (i, (&a, &b)) in x.iter().zip(&y).enumerate() {
        assert_eq!((a * 2.0).to_bits(), b.to_bits(), "y[{i}]");
    }
    // Without a device, the CPU says what KERNEL needs.
    let err = run_with(&p, &[("x", f32s(&[1024], &x))], cpu()).unwrap_err();
    assert!(
        err.contains("KERNEL runs user SPIR-V, which needs the Vulkan executor (run with --backend vulkan)"),
        "{err}"
    );
}

#[test]
fn placement_hints_move_data_between_cpu_and_gpu() {
    if !vulkan() {
        return;
    }
    // Alternating hints force a download or an upload between most instructions; STORE reads
    // whichever side holds the data.
    let src = "
.input %x f32[4, 300]
.const %g f32[300] = rand(1)
.output a f32[4, 300]
.output b f32[4, 300]
    ALLOC %t: f32[4, 300]
    ALLOC %u: f32[4, 300]
    EXP@gpu %t, %x
    ADD@cpu %u, %t, %g
    STORE a, %u
    SOFTMAX@gpu %t, %u
    MUL@cpu %u, %t, %t
    LAYERNORM@gpu %t, %u, gamma=%g
    TANH@cpu %u, %t
    GELU@gpu %t, %u
    STORE b, %t
    FREE %t
    FREE %u
";
    let p = build(src);
    let x = awkward(1200, 5, -5.0, 5.0);
    same_bits("hinted", &p, &[("x", f32s(&[4, 300], &x))]);
    // And a second run of the same VM (inputs and weights already on the device).
    let mut vm = adeadvm::vm::Vm::new(p.clone(), gpu()).unwrap();
    vm.set_input("x", f32s(&[4, 300], &x)).unwrap();
    vm.run().unwrap();
    let first = vm.output("b").unwrap().clone();
    vm.run().unwrap();
    assert_eq!(vm.output("b").unwrap(), &first);
    let x2 = awkward(1200, 6, -5.0, 5.0);
    vm.set_input("x", f32s(&[4, 300], &x2)).unwrap();
    vm.run().unwrap();
    let want = run_with(&p, &[("x", f32s(&[4, 300], &x2))], cpu()).unwrap();
    assert_eq!(vm.output("b").unwrap(), &want["b"], "a rebound input is uploaded again");
}

/// Several GATHERs in one batch (a token and a position embedding, a tied output table): each
/// has its own status slot, and the second once failed to record (its slot was bound at an offset
/// that broke the storage-buffer alignment). The third GATHER's bad index must be the one reported.
#[test]
fn several_gathers_in_one_program_run_and_check_their_own_indices() {
    if !vulkan() {
        return;
    }
    let src = ".input %ids i32[2, 3]\n.input %pos i32[3]\n.const %word f32[10, 4] = rand(1)\n\
               .const %posemb f32[6, 4] = rand(2)\n.output y f32[2, 3, 4]\n.output z f32[3, 4]\n\
               ALLOC %w: f32[2, 3, 4]\nGATHER %w, %word, %ids\nALLOC %p: f32[3, 4]\nGATHER %p, %posemb, %pos\n\
               ALLOC %y: f32[2, 3, 4]\nADD %y, %w, %p\nSTORE y, %y\nALLOC %q: f32[3, 4]\nGATHER %q, %word, %pos\n\
               ADD %q, %q, %p\nSTORE z, %q\nFREE %q\nFREE %y\nFREE %p\nFREE %w\n";
    let p = build(src);
    let good = [("ids", i32s(&[2, 3], &[0, 9, 3, 4, 4, 1])), ("pos", i32s(&[3], &[5, 0, 2]))];
    same_bits("three GATHERs", &p, &good);
    // Positions 0..6 are valid for the position table, and 5 is valid for the word table too;
    // 7 is outside the position table (6 rows) but inside the word table (10 rows).
    let bad = [("ids", i32s(&[2, 3], &[0, 1, 2, 3, 4, 5])), ("pos", i32s(&[3], &[1, 7, 0]))];
    let err = run_with(&p, &bad, gpu()).unwrap_err();
    assert_eq!(
        err,
        "instruction 3 (line 10, GATHER): on the GPU: index 7 at position 1 of `pos` is outside the table's 6 rows"
    );
    assert_eq!(run_with(&p, &bad, cpu()).unwrap_err(), err.replace("on the GPU: ", ""));
}

#[test]
fn gather_out_of_range_is_the_same_error_on_vulkan() {
    if !vulkan() {
        return;
    }
    let src = ".input %ids i32[3]\n.const %table f32[4, 2] = zeros\n.output e f32[3, 2]\nALLOC %e: f32[3, 2]\nGATHER %e, %table, %ids\nSTORE e, %e\nFREE %e\n";
    let p = build(src);
    let err = run_with(&p, &[("ids", i32s(&[3], &[1, 4, -1]))], gpu()).unwrap_err();
    assert_eq!(
        err,
        "instruction 1 (line 5, GATHER): on the GPU: index 4 at position 1 of `ids` is outside the table's 4 rows"
    );
}

#[test]
fn record_on_cpu_replay_on_vulkan_is_identical() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.trace");
    let root = env!("CARGO_MANIFEST_DIR");
    let exe = env!("CARGO_BIN_EXE_adeadvm");
    let rec = Command::new(exe)
        .current_dir(root)
        .args(["run", "programs/attention.s", "--backend", "cpu", "--record"])
        .arg(&trace)
        .args([
            "--input",
            "x=programs/data/attention_x.npy",
            "--input",
            "mask=programs/data/attention_mask.npy",
        ])
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    let rep = Command::new(exe)
        .current_dir(root)
        .args(["replay", "programs/attention.s"])
        .arg(&trace)
        .args(["--backend", "vulkan"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&rep.stdout);
    assert!(rep.status.success(), "{out}{}", String::from_utf8_lossy(&rep.stderr));
    assert!(out.starts_with("identical: all ") && out.contains("(replayed on vulkan with "), "{out}");
}

/// How the differential generator writes an opcode, read from its operands in the ISA table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `OP dst, a` (elementwise).
    Unary,
    /// `OP dst, a, b` (elementwise, broadcasting).
    Binary,
    /// `OP dst, a, 0.75` (elementwise with a float immediate).
    Scalar,
    /// `OP dst, x` over rows, optional operands drawn at random (SOFTMAX, LAYERNORM, RMSNORM).
    Rows,
    /// `OP dst, a, b` with b a [C, C] matrix (MATMUL), optional operands at random.
    Matmul,
    /// `OP %r, a, -1` into the [R, 1] tensor %r (reductions, keepdims).
    Reduce,
    /// `OP %k, a` into the i32 [R, 1] tensor %k, then %k cast into %r (ARGMAX).
    Argmax,
    /// `OP %kc, a, b` into the i32 [R, C] tensor %kc (broadcasting), then %kc cast into dst
    /// (EQ, LT, LE: an i32 `dst` in the ISA table).
    Compare,
    /// `OP dst, %kc, a, b`: the comparisons' last result picks (SELECT: an i32 `cond`).
    Select,
    /// `OP %s, a, 1, r7` from a tensor at a register offset (SLICE_R) into the [R, W] tensor %s.
    SliceR,
    /// `OP dst, %s, 1, r7` or `OP dst, %q, 0, r7`: a window of dst at a register offset (PUT).
    Put,
    /// `OP dst, a, %ix`: rows of a into the rows of dst that the i32 [R] tensor %ix names,
    /// repeated indices included (SCATTER).
    Scatter,
    /// `OP %ix, r7, r8`: one index of %ix from registers (TSET).
    Tset,
    /// `OP r9, %k, r7`: an ARGMAX result into a register, which then places a one-column
    /// SLICE and PUT (TGET).
    Tget,
}

/// Every strict-tier opcode whose operands the generator knows how to fill, found in the
/// generated ISA table (`OP_INFO`) by its group, dtype class, required operand kinds and
/// whether it writes in part: an opcode added to opcodes/isa.toml with one of these forms joins
/// the differential test unchanged. The float forms take float or numeric opcodes with no
/// operand of fixed dtype; the decoder's (ARGMAX, SLICE_R, PUT, SCATTER, TSET, TGET) are
/// any-dtype ones; the comparisons write an i32 `dst` and SELECT reads an i32 `cond`.
fn isa_ops() -> Vec<(&'static adeadvm::isa::OpInfo, Form)> {
    use adeadvm::isa::{DtypeClass, Group, OperandKind as K, Tier};
    OP_INFO
        .iter()
        .filter(|i| i.tier == Tier::Strict)
        .filter_map(|i| {
            let required: Vec<K> =
                i.operands.iter().filter(|o| o.default.is_none()).map(|o| o.kind).collect();
            let partial = i.operands.iter().any(|o| o.partial);
            // An operand of fixed dtype: the float forms do not fit.
            let fixed = |name: &str| i.operands.iter().find(|o| o.name == name).and_then(|o| o.dtype);
            let float = matches!(i.dtypes, DtypeClass::Float | DtypeClass::Numeric)
                && i.operands.iter().all(|o| o.dtype.is_none());
            let form = match (i.group, required.as_slice(), partial) {
                (Group::Elementwise, [K::Tensor, K::Tensor, K::Tensor], false)
                    if fixed("dst") == Some(DType::I32) =>
                {
                    Form::Compare
                }
                (Group::Elementwise, [K::Tensor, K::Tensor, K::Tensor, K::Tensor], false)
                    if fixed("cond") == Some(DType::I32) =>
                {
                    Form::Select
                }
                (Group::Elementwise, [K::Tensor, K::Tensor], false) if float => Form::Unary,
                (Group::Elementwise, [K::Tensor, K::Tensor, K::Tensor], false) if float => Form::Binary,
                (Group::Elementwise, [K::Tensor, K::Tensor, K::F32], false) if float => Form::Scalar,
                (Group::Tensor, [K::Tensor, K::Tensor], false) if float => Form::Rows,
                (Group::Tensor, [K::Tensor, K::Tensor, K::Tensor], false) if float => Form::Matmul,
                (Group::Tensor, [K::Tensor, K::Tensor, K::Axis], false) if float => Form::Reduce,
                (Group::Tensor, [K::Tensor, K::Tensor], false) => Form::Argmax,
                (Group::Memory, [K::Tensor, K::Tensor, K::Axis, K::Reg], false) => Form::SliceR,
                (Group::Memory, [K::Tensor, K::Tensor, K::Axis, K::Reg], true) => Form::Put,
                (Group::Memory, [K::Tensor, K::Tensor, K::Tensor], true) => Form::Scatter,
                (Group::Memory, [K::Tensor, K::Reg, K::Reg], true) => Form::Tset,
                (Group::Memory, [K::Reg, K::Tensor, K::Reg], false) => Form::Tget,
                _ => return None,
            };
            Some((i, form))
        })
        .collect()
}

/// A random valid program over [R, C] tensors: a chain of `ops` (indices into [`isa_ops`] and
/// operand choices), each writing %a or %b from %a, %b, the input %x, the [C] constant %g or
/// the [R, 1] reduction result %r. Optional operands (bias, mask, gamma, beta, act, scale,
/// eps) are written or left out at random. The decoder's forms work through %k (i32 [R, 1],
/// ARGMAX results), %s (f32 [R, W] windows, W = ceil(C / 2)), %q (f32 [1, C]), %s1 (f32
/// [R, 1]) and %ix (i32 [R] row indices, all 0 at first, so SCATTER meets repeats), at
/// register offsets in range drawn from the op's choices. The comparisons write %kc (i32
/// [R, C], all 1 at first), which SELECT takes as its condition.
fn random_program(ops: &[(u8, u8, u8, u8)], r: usize, c: usize) -> String {
    let table = isa_ops();
    let w = c.div_ceil(2);
    let mut s = format!(
        ".input %x f32[{r}, {c}]\n.const %g f32[{c}] = rand(9)\n.const %w f32[{c}, {c}] = rand(11, normal)\n\
         .output y f32[{r}, {c}]\n.output z f32[{r}, 1]\n.output s f32[{r}, {w}]\n.output k i32[{r}, 1]\n\
         ALLOC %a: f32[{r}, {c}]\nALLOC %b: f32[{r}, {c}]\n\
         ALLOC %r: f32[{r}, 1]\nCOPY %a, %x\nCOPY %b, %x\nFILL %r, 0.5\n\
         ALLOC %k: i32[{r}, 1]\nFILL %k, 0\nALLOC %s: f32[{r}, {w}]\nFILL %s, -0.5\nALLOC %q: f32[1, {c}]\n\
         FILL %q, 0.25\nALLOC %s1: f32[{r}, 1]\nALLOC %ix: i32[{r}]\nFILL %ix, 0\n\
         ALLOC %kc: i32[{r}, {c}]\nFILL %kc, 1\n"
    );
    for &(op, d, a, b) in ops {
        let (info, form) = &table[op as usize % table.len()];
        let m = info.mnemonic;
        let dst = ["%a", "%b"][d as usize % 2];
        let a_t = ["%a", "%b", "%x"][a as usize % 3];
        let b_t = ["%a", "%b", "%x", "%g", "%r"][b as usize % 5];
        // Optional operands from the table, each present when its bit of `b` is set.
        let optional = |bits: u8| -> String {
            let mut out = String::new();
            for (k, o) in info.operands.iter().filter(|o| o.default.is_some()).enumerate() {
                if bits >> (k % 8) & 1 == 0 {
                    continue;
                }
                use adeadvm::isa::OperandKind as K;
                let v = match o.kind {
                    K::TensorOpt => "%g".to_string(),
                    K::F32 => ["0.5", "1e-3", "2.0"][(bits as usize + k) % 3].to_string(),
                    K::Act => ["relu", "gelu", "none"][(bits as usize + k) % 3].to_string(),
                    // ta/tb would transpose [R, C] operands into other shapes: left out.
                    _ => continue,
                };
                out += &format!(", {}={v}", o.name);
            }
            out
        };
        s += &match form {
            Form::Unary => format!("{m} {dst}, {a_t}\n"),
            Form::Binary => format!("{m} {dst}, {a_t}, {b_t}\n"),
            Form::Scalar => format!("{m} {dst}, {a_t}, {}\n", ["0.75", "-1.5", "3.0"][b as usize % 3]),
            Form::Rows => format!("{m} {dst}, {a_t}{}\n", optional(b)),
            Form::Matmul => format!("{m} {dst}, {a_t}, %w{}\n", optional(b)),
            Form::Reduce => format!("{m} %r, {a_t}, -1\n"),
            Form::Argmax => format!("{m} %k, {a_t}\nCAST %r, %k\n"),
            Form::Compare => format!("{m} %kc, {a_t}, {b_t}\nCAST {dst}, %kc\n"),
            Form::Select => format!("{m} {dst}, %kc, {a_t}, {b_t}\n"),
            Form::SliceR => format!("ISET r7, {}\n{m} %s, {a_t}, 1, r7\n", b as usize % (c - w + 1)),
            Form::Put if b % 2 == 0 => {
                format!("ISET r7, {}\n{m} {dst}, %s, 1, r7\n", a as usize % (c - w + 1))
            }
            Form::Put => format!("ISET r7, {}\n{m} {dst}, %q, 0, r7\n", a as usize % r),
            Form::Scatter => {
                format!(
                    "ISET r7, {}\nISET r8, {}\nTSET %ix, r7, r8\n{m} {dst}, {a_t}, %ix\n",
                    a as usize % r,
                    b as usize % r
                )
            }
            Form::Tset => {
                format!("ISET r7, {}\nISET r8, {}\n{m} %ix, r7, r8\n", b as usize % r, a as usize % r)
            }
            Form::Tget => format!(
                "ISET r7, {}\n{m} r9, %k, r7\nSLICE %s1, {a_t}, 1, r9\nPUT {dst}, %s1, 1, r9\n",
                b as usize % r
            ),
        };
    }
    s + "STORE y, %a\nSTORE z, %r\nSTORE s, %s\nSTORE k, %k\nFREE %ix\nFREE %s1\nFREE %q\nFREE %s\nFREE %k\n\
         FREE %a\nFREE %b\nFREE %r\nFREE %kc\n"
}

#[test]
fn the_differential_generator_covers_every_form_in_the_isa_table() {
    let forms: BTreeSet<String> = isa_ops().iter().map(|(_, f)| format!("{f:?}")).collect();
    assert_eq!(forms.len(), 14, "{forms:?}");
    let names: BTreeSet<&str> = isa_ops().iter().map(|(i, _)| i.name).collect();
    let decoder = ["SILU", "ARGMAX", "SLICE_R", "PUT", "SCATTER", "TSET", "TGET"];
    let masks = ["ERF", "EQ", "LT", "LE", "SELECT"];
    for op in ["ADD", "ADD_S", "EXP", "GELU", "MATMUL", "SOFTMAX", "LAYERNORM", "REDUCE_MAX"]
        .iter()
        .chain(&decoder)
        .chain(&masks)
    {
        assert!(names.contains(op), "{op} is generated: {names:?}");
    }
    // Every generated program verifies, whatever the choices.
    for k in 0..isa_ops().len() as u8 {
        build(&random_program(&[(k, k, k, k), (k, k + 1, k + 2, !k)], 3, 5));
    }
}

/// Strict-tier digests of every output on one executor configuration.
fn digests(
    p: &Arc<VerifiedProgram>,
    inputs: &[(&str, HostTensor)],
    config: VmConfig,
    what: &str,
) -> BTreeMap<String, String> {
    let outs = run_with(p, inputs, config).unwrap_or_else(|e| panic!("{what}: {e}"));
    outs.iter().map(|(n, t)| (n.clone(), adeadvm::format::digest_hex(&t.digest()))).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    /// Issue 9's differential test: random valid programs from the ISA table give the same
    /// strict-tier digests on the scalar reference, the SIMD executor at 1 and 3 threads, and
    /// Vulkan (lavapipe in CI, where a missing device fails instead of skipping).
    #[test]
    fn random_programs_from_the_isa_table_give_the_same_digests_on_every_executor(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()), 1..12),
        r in 1usize..6,
        c in 1usize..300,
        seed in any::<u64>(),
    ) {
        let source = random_program(&ops, r, c);
        let p = build(&source);
        let x = awkward((r * c).max(16), seed, -4.0, 4.0);
        let inputs = [("x", f32s(&[r, c], &x[..r * c]))];
        let want = digests(&p, &inputs, cpu(), "scalar reference");
        let simd = |threads| VmConfig { threads: Some(threads), backend: Backend::Cpu, ..VmConfig::default() };
        prop_assert_eq!(&digests(&p, &inputs, simd(1), "SIMD x1"), &want, "SIMD x1 differs:\n{}", source);
        prop_assert_eq!(&digests(&p, &inputs, simd(3), "SIMD x3"), &want, "SIMD x3 differs:\n{}", source);
        if vulkan() {
            let got = digests(&p, &inputs, gpu(), "Vulkan");
            if got != want {
                // Names the first differing element and both values.
                same_bits("random program", &p, &inputs);
            }
            prop_assert_eq!(&got, &want, "Vulkan differs:\n{}", source);
        }
    }
}

#[test]
fn a_missing_device_or_loader_is_a_clear_error() {
    if !vulkan() {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let run = |var: &str, value: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
            .current_dir(root)
            .args(["run", "programs/mlp.s", "--backend", "vulkan", "--input", "x=programs/data/mlp_x.npy"])
            .env(var, value)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run("ADEADVM_VULKAN_DEVICE", "99");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("error: Vulkan is unavailable: ADEADVM_VULKAN_DEVICE=99: no such device"),
        "{err}"
    );
    let (code, err) = run(adeadvm::exec::vulkan::LIBRARY_ENV, "/nonexistent/libvulkan.so.1");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("error: Vulkan is unavailable: cannot load /nonexistent/libvulkan.so.1"),
        "{err}"
    );
    // auto placement falls back to the CPU quietly.
    let out = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
        .current_dir(root)
        .args(["run", "programs/mlp.s", "--input", "x=programs/data/mlp_x.npy"])
        .env(adeadvm::exec::vulkan::LIBRARY_ENV, "/nonexistent/libvulkan.so.1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The profiler on the device: every instruction that ran on the GPU carries its GPU time
/// (timestamps), the table gains a GPU column, the trace a `gpu` lane; instructions on the CPU
/// carry none.
#[test]
fn profile_has_gpu_times_on_vulkan() {
    if !vulkan() {
        return;
    }
    use adeadvm::profile::Profiler;
    use adeadvm::vm::{Observer, StepEvent, Vm, Wants};
    struct GpuTimes(Vec<(String, bool)>);
    impl Observer for GpuTimes {
        fn wants(&self) -> Wants {
            Wants { timing: true, written: false }
        }
        fn step(&mut self, e: &StepEvent<'_>) -> std::ops::ControlFlow<()> {
            let name = e.instruction.insn.opcode().info().mnemonic.to_string();
            self.0.push((name, e.gpu_elapsed.is_some()));
            std::ops::ControlFlow::Continue(())
        }
    }
    let p = build(
        ".input %x f32[64, 64]\n.output y f32[64, 64]\nALLOC %t: f32[64, 64]\nMATMUL %t, %x, %x\nEXP@cpu %t, %t\nSTORE y, %t\nFREE %t\n",
    );
    let x = f32s(&[64, 64], &Rng(3).vec(64 * 64, -1.0, 1.0));
    let mut vm = Vm::new(p, gpu()).unwrap();
    vm.set_input("x", x).unwrap();
    let mut seen = GpuTimes(Vec::new());
    vm.run_observed(&mut seen).unwrap();
    let timed: Vec<(&str, bool)> = seen.0.iter().map(|(n, g)| (n.as_str(), *g)).collect();
    assert!(timed.contains(&("MATMUL", true)), "{timed:?}");
    assert!(timed.contains(&("EXP", false)), "EXP ran on the CPU: {timed:?}");
    let mut prof = Profiler::new(true);
    vm.run_observed(&mut prof).unwrap();
    let table = prof.table();
    assert!(table.lines().next().unwrap().contains("GPU (ms)"), "{table}");
    let matmul = table.lines().find(|l| l.starts_with("MATMUL")).unwrap();
    assert!(!matmul.split_whitespace().nth(3).unwrap().starts_with('-'), "{table}");
    let trace = prof.chrome_trace();
    assert!(trace.contains("\"args\":{\"name\":\"gpu\"}") && trace.contains("\"cat\":\"gpu\""), "{trace}");
}

/// A fast-tier f16 or bf16 MATMUL runs on the device's cooperative matrices where it has them
/// (from the 16-bit bytes, f32 sums, one rounding to the output type), with RELU and with GELU
/// (applied before that rounding): within one rounding of the CPU's result, and the same bits on
/// a second run.
#[test]
fn fast_16bit_matmul_on_cooperative_matrices() {
    type ToBits = fn(f32) -> u16;
    let kinds: [(DType, ToBits, f32); 2] = [
        (DType::F16, adeadvm::numerics::f32_to_f16_bits, 2e-3),
        (DType::Bf16, adeadvm::numerics::f32_to_bf16_bits, 2f32.powi(-7)),
    ];
    for ((dtype, to_bits, ulp), act) in kinds.into_iter().flat_map(|k| [(k, "relu"), (k, "gelu")]) {
        let t = dtype.name();
        let p = build(&format!(
            ".tier fast\n.input %a {t}[2, 70, 96]\n.input %b {t}[96, 130]\n.input %c {t}[130]\n.output y {t}[2, 70, 130]\n\
             ALLOC %y: {t}[2, 70, 130]\nMATMUL %y, %a, %b, bias=%c, act={act}\nSTORE y, %y\nFREE %y\n"
        ));
        if !vulkan() {
            return;
        }
        let dev = adeadvm::vm::shared_device().unwrap();
        if !dev.device().has_coopmat(dtype) {
            common::skip::skipped(
                &format!("the VM's cooperative-matrix {t} MATMUL"),
                &format!("{} has none", dev.device().info().name),
            );
            continue;
        }
        let input = |shape: Vec<usize>, seed: u64| {
            let n: usize = shape.iter().product();
            let bytes: Vec<u8> =
                Rng(seed).vec(n, -2.0, 2.0).iter().flat_map(|v| to_bits(*v).to_le_bytes()).collect();
            HostTensor::from_bytes(dtype, shape, &bytes).unwrap()
        };
        let inputs =
            [("a", input(vec![2, 70, 96], 1)), ("b", input(vec![96, 130], 2)), ("c", input(vec![130], 3))];
        let want = run_with(&p, &inputs, cpu()).unwrap()["y"].to_f32().unwrap();
        let got = run_with(&p, &inputs, gpu()).unwrap()["y"].clone();
        assert_eq!(
            got.bytes(),
            run_with(&p, &inputs, gpu()).unwrap()["y"].bytes(),
            "{t} {act}: not repeatable"
        );
        for (i, (w, g)) in want.iter().zip(got.to_f32().unwrap()).enumerate() {
            // Sums of 96 products of |x| <= 2 differ by f32 rounding; both round once to `t`.
            assert!((w - g).abs() <= ulp * w.abs().max(1.0), "{t} {act} element {i}: cpu {w}, vulkan {g}");
        }
    }
}

/// A large fast-tier f32 MATMUL runs as three bf16 pieces an operand on the device's cooperative
/// matrices where it has them (`rows::split_sgemm_chosen`; the shape is one it takes): with the
/// bias and RELU, within an f32 dot product's error bound (k·2^-24 Σ|a·b|, plus the bias's and
/// the result's roundings) of the CPU's fast result, not its bits, and the same bits on a second
/// run.
#[test]
fn fast_f32_matmul_on_bf16_pieces() {
    let (m, n, k) = (2048, 2048, 1024);
    let p = build(&format!(
        ".tier fast\n.input %a f32[{m}, {k}]\n.input %b f32[{k}, {n}]\n.input %c f32[{n}]\n.output y f32[{m}, {n}]\n\
         ALLOC %y: f32[{m}, {n}]\nMATMUL %y, %a, %b, bias=%c, act=relu\nSTORE y, %y\nFREE %y\n"
    ));
    if !vulkan() {
        return;
    }
    let dev = adeadvm::vm::shared_device().unwrap();
    let g = adeadvm::exec::cpu::reference::MatmulShape::plain(m, n, k);
    if adeadvm::exec::vulkan::ops::rows::split_sgemm_chosen(dev.kernels(), &g).is_none() {
        common::skip::skipped(
            "the VM's split-bf16 SGEMM",
            &format!("{} does not run this matmul as bf16 pieces", dev.device().info().name),
        );
        return;
    }
    let (va, vb, vc) =
        (Rng(11).vec(m * k, -2.0, 2.0), Rng(12).vec(k * n, -2.0, 2.0), Rng(13).vec(n, -1.0, 1.0));
    let inputs = [
        ("a", HostTensor::from_f32(vec![m, k], &va).unwrap()),
        ("b", HostTensor::from_f32(vec![k, n], &vb).unwrap()),
        ("c", HostTensor::from_f32(vec![n], &vc).unwrap()),
    ];
    let want = run_with(&p, &inputs, cpu()).unwrap()["y"].to_f32().unwrap();
    let got = run_with(&p, &inputs, gpu()).unwrap()["y"].clone();
    assert_eq!(got.bytes(), run_with(&p, &inputs, gpu()).unwrap()["y"].bytes(), "not repeatable");
    let got = got.to_f32().unwrap();
    // Σ|a·b| of every output, row by row.
    let mut scale = vec![0f32; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = va[i * k + kk].abs();
            for (s, y) in scale[i * n..(i + 1) * n].iter_mut().zip(&vb[kk * n..(kk + 1) * n]) {
                *s += x * y.abs();
            }
        }
    }
    let mut differ = 0;
    for i in 0..m {
        for j in 0..n {
            let scale = scale[i * n + j];
            let (w, g) = (want[i * n + j], got[i * n + j]);
            // Both results carry up to k·2^-24 Σ|a·b| each; RELU only clamps.
            let bound = 2.0 * (k + 2) as f32 * 2f32.powi(-24) * scale + 2f32.powi(-23) * w.abs();
            assert!((w - g).abs() <= bound, "element ({i}, {j}): cpu {w}, vulkan {g}, bound {bound}");
            differ += usize::from(w.to_bits() != g.to_bits());
        }
    }
    // The CPU's FMA sums are not the tensor cores': most bits differ.
    assert!(differ > m * n / 4, "only {differ} of {} outputs differ from the CPU's", m * n);
}

/// `CAST` (or `COPY` for f32) of an f32 tensor into `dt`: how the focused tests below make
/// 16-bit and i32 operands from f32 inputs.
fn into_dtype(dt: &str, dst: &str, src: &str) -> String {
    if dt == "f32" {
        format!("COPY {dst}, {src}\n")
    } else {
        format!("CAST {dst}, {src}\n")
    }
}

#[test]
fn scatter_with_repeated_indices_and_odd_rows_gives_the_cpu_bits_in_every_dtype() {
    if !vulkan() {
        return;
    }
    // (destination rows, source rows, row length): single elements, odd and even 16-bit rows,
    // more indices than a workgroup's threads (each workgroup reads them all), long rows.
    for &(rows, count, n) in &[(5, 3, 1), (6, 7, 3), (4, 4, 4), (9, 600, 7), (3, 2, 300), (7, 5, 2)] {
        // Row rows - 1 is never named (it must keep its values); many positions repeat.
        let ix: Vec<i32> = (0..count).map(|k| ((k * 7 + 3) % (rows - 1)) as i32).collect();
        assert!(count < rows || ix.iter().collect::<BTreeSet<_>>().len() < count, "repeats");
        let d = awkward((rows * n).max(16), 31, -100.0, 100.0)[..rows * n].to_vec();
        let x = awkward((count * n).max(16), 32, -100.0, 100.0)[..count * n].to_vec();
        for dt in ["f32", "f16", "bf16", "i32"] {
            let src = format!(
                ".input %d f32[{rows}, {n}]\n.input %x f32[{count}, {n}]\n.input %ix i32[{count}]\n\
                 .output y {dt}[{rows}, {n}]\nALLOC %y: {dt}[{rows}, {n}]\n{}ALLOC %t: {dt}[{count}, {n}]\n{}\
                 SCATTER %y, %t, %ix\nSTORE y, %y\nFREE %t\nFREE %y\n",
                into_dtype(dt, "%y", "%d"),
                into_dtype(dt, "%t", "%x")
            );
            let inputs =
                [("d", f32s(&[rows, n], &d)), ("x", f32s(&[count, n], &x)), ("ix", i32s(&[count], &ix))];
            let what = format!("SCATTER {dt} {count} rows of {n} into {rows}");
            let out = same_bits(&what, &build(&src), &inputs);
            // The untouched last row is the destination's own.
            let size = out["y"].dtype.size();
            let before = run_with(
                &build(&format!(
                    ".input %d f32[{rows}, {n}]\n.output y {dt}[{rows}, {n}]\nALLOC %y: {dt}[{rows}, {n}]\n{}\
                     STORE y, %y\nFREE %y\n",
                    into_dtype(dt, "%y", "%d")
                )),
                &inputs[..1],
                cpu(),
            )
            .unwrap();
            let last = (rows - 1) * n * size..rows * n * size;
            assert_eq!(
                out["y"].bytes()[last.clone()],
                before["y"].bytes()[last],
                "{what}: the last row kept"
            );
        }
    }
}

#[test]
fn put_and_register_slice_on_every_dtype_keep_the_neighbours() {
    if !vulkan() {
        return;
    }
    let shape = [3usize, 7, 5];
    let d = awkward(3 * 7 * 5, 41, -50.0, 50.0);
    // (axis, start, length): odd and even offsets and lengths, one element, the whole axis.
    let windows =
        [(0, 1, 1), (0, 0, 3), (1, 3, 3), (1, 1, 2), (1, 6, 1), (1, 0, 7), (2, 1, 3), (2, 3, 1), (2, 0, 5)];
    for &(ax, start, len) in &windows {
        let mut part = shape;
        part[ax] = len;
        let pn: usize = part.iter().product();
        let p = awkward(pn.max(16), 42 + start as u64, -50.0, 50.0)[..pn].to_vec();
        let ps = format!("{part:?}");
        // SLICE reads back a window one place further when there is room.
        let back = if start + len < shape[ax] { start + 1 } else { start };
        for dt in ["f32", "f16", "bf16", "i32"] {
            let src = format!(
                ".input %d f32[3, 7, 5]\n.input %p f32{ps}\n.output y {dt}[3, 7, 5]\n.output s {dt}{ps}\n\
                 ALLOC %y: {dt}[3, 7, 5]\n{}ALLOC %q: {dt}{ps}\n{}ISET r1, {start}\nPUT %y, %q, {ax}, r1\n\
                 STORE y, %y\nISET r2, {back}\nSLICE %q, %y, {ax}, r2\nSTORE s, %q\nFREE %q\nFREE %y\n",
                into_dtype(dt, "%y", "%d"),
                into_dtype(dt, "%q", "%p")
            );
            let inputs = [("d", f32s(&shape, &d)), ("p", f32s(&part, &p))];
            same_bits(&format!("PUT/SLICE {dt} axis {ax} at {start} len {len}"), &build(&src), &inputs);
        }
    }
}

#[test]
fn argmax_with_nan_ties_denormals_and_long_rows_gives_the_cpu_bits() {
    if !vulkan() {
        return;
    }
    let den = f32::from_bits(1); // the least denormal
    for n in [1usize, 2, 5, 255, 256, 257, 1000, 3000] {
        let mut rows: Vec<Vec<f32>> = Vec::new();
        rows.push(awkward(n.max(16), n as u64, -9.0, 9.0)[..n].to_vec());
        // Ties: the maximum at several positions, the first must win.
        rows.push((0..n).map(|i| if i % 3 == 2 { 7.5 } else { (i % 5) as f32 }).collect());
        // NaN after +inf, then a second NaN: the first NaN wins.
        rows.push((0..n).map(|i| [f32::INFINITY, 1.0][i % 2]).collect());
        if n > 1 {
            rows[2][n / 2] = f32::NAN;
            rows[2][n - 1] = -f32::NAN;
        }
        // Negatives, then zeros of both signs and denormals (all zeros to ARGMAX), and a small
        // normal an f16 holds only as a denormal (exact in f32 after widening: counts).
        rows.push((0..n).map(|i| -1.0 - i as f32).collect());
        if n > 4 {
            rows[3][1] = -0.0;
            rows[3][2] = den;
            rows[3][3] = -den;
            rows[3][4] = 0.0;
        }
        rows.push((0..n).map(|i| if i + 1 == n { 3e-6 } else { -f32::INFINITY }).collect());
        if n > 2 {
            rows[4][1] = -den;
        }
        let x: Vec<f32> = rows.concat();
        let r = rows.len();
        for dt in ["f32", "f16", "bf16"] {
            let src = format!(
                ".input %x f32[{r}, {n}]\n.output k i32[{r}]\nALLOC %h: {dt}[{r}, {n}]\n{}ALLOC %k: i32[{r}]\n\
                 ARGMAX %k, %h\nSTORE k, %k\nFREE %k\nFREE %h\n",
                into_dtype(dt, "%h", "%x")
            );
            let out =
                same_bits(&format!("ARGMAX {dt} rows of {n}"), &build(&src), &[("x", f32s(&[r, n], &x))]);
            let k = out["k"].to_i32().unwrap();
            if n > 4 {
                assert_eq!(k[1], 2, "{dt} {n}: the first of the tied maxima");
                assert_eq!(k[2], n as i32 / 2, "{dt} {n}: the first NaN");
                assert_eq!(k[3], 1, "{dt} {n}: -0, denormals and +0 tie as zeros");
            }
        }
    }
}

#[test]
fn out_of_range_indices_and_offsets_are_the_cpus_errors_on_vulkan() {
    if !vulkan() {
        return;
    }
    // SCATTER: the first bad position is reported, with the GPU prefix GATHER's errors have.
    let src =
        ".input %s f32[4, 3]\n.input %ix i32[4]\n.output y f32[5, 3]\nALLOC %y: f32[5, 3]\nFILL %y, 1.0\n\
               SCATTER %y, %s, %ix\nSTORE y, %y\nFREE %y\n";
    let p = build(src);
    let s = f32s(&[4, 3], &[0.5; 12]);
    for (ix, pos, v) in [([0, 5, -1, 9], 1, 5), ([0, 1, 2, -3], 3, -3)] {
        let inputs = [("s", s.clone()), ("ix", i32s(&[4], &ix))];
        let err = run_with(&p, &inputs, gpu()).unwrap_err();
        let want = format!(
            "instruction 2 (line 6, SCATTER): index {v} at position {pos} of `ix` is outside the destination's 5 rows"
        );
        assert_eq!(err, want.replacen("SCATTER): ", "SCATTER): on the GPU: ", 1));
        assert_eq!(run_with(&p, &inputs, cpu()).unwrap_err(), want);
    }
    // A GATHER and a SCATTER in one batch each report their own indices.
    let src = ".input %t f32[4, 2]\n.input %g i32[2]\n.input %ix i32[2]\n.output y f32[3, 2]\nALLOC %w: f32[2, 2]\n\
               GATHER %w, %t, %g\nALLOC %y: f32[3, 2]\nFILL %y, 0.0\nSCATTER %y, %w, %ix\nSTORE y, %y\nFREE %y\nFREE %w\n";
    let p = build(src);
    let t = f32s(&[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let good = [("t", t.clone()), ("g", i32s(&[2], &[3, 0])), ("ix", i32s(&[2], &[2, 2]))];
    let out = same_bits("GATHER then SCATTER", &p, &good);
    assert_eq!(out["y"].to_f32().unwrap(), [0., 0., 0., 0., 1., 2.], "the second position wins");
    let bad = [("t", t), ("g", i32s(&[2], &[3, 0])), ("ix", i32s(&[2], &[1, 3]))];
    assert_eq!(
        run_with(&p, &bad, gpu()).unwrap_err(),
        "instruction 4 (line 9, SCATTER): on the GPU: index 3 at position 1 of `ix` is outside the destination's 3 rows"
    );
    // Indices computed on the device (TSET in a loop): the kernel reports the value too.
    let p = build(KV_LOOP);
    let x = f32s(&[6, 2, 5], &[0.5; 60]);
    let inputs = [("x", x), ("order", i32s(&[6], &[3, 0, 9, 7, 0, 3]))];
    let want = run_with(&p, &inputs, cpu()).unwrap_err();
    assert!(
        want.ends_with("SCATTER): index 9 at position 0 of `pos` is outside the destination's 8 rows"),
        "{want}"
    );
    assert_eq!(
        run_with(&p, &inputs, gpu()).unwrap_err(),
        want.replacen("SCATTER): ", "SCATTER): on the GPU: ", 1)
    );
    // Register offsets and TSET's index: checked when recorded, the CPU's own messages.
    for (body, what) in [
        ("ISET r1, 5\nPUT %c, %x, 0, r1\n", "PUT"),
        ("ISET r1, -1\nPUT %c, %x, 0, r1\n", "PUT"),
        ("ISET r1, 5\nSLICE %p, %c, 0, r1\n", "SLICE"),
        ("ISET r1, 24\nISET r2, 7\nTSET %i, r1, r2\n", "TSET"),
    ] {
        let src = format!(
            ".input %x f32[2, 4]\n.output y f32[6, 4]\nALLOC %c: f32[6, 4]\nFILL %c, 0.0\nALLOC %i: i32[6, 4]\n\
             FILL %i, 0\nALLOC %p: f32[2, 4]\n{body}STORE y, %c\nFREE %p\nFREE %i\nFREE %c\n"
        );
        let p = build(&src);
        let inputs = [("x", f32s(&[2, 4], &[1.0; 8]))];
        let want = run_with(&p, &inputs, cpu()).unwrap_err();
        assert!(want.contains(what) && want.contains("outside"), "{want}");
        assert_eq!(run_with(&p, &inputs, gpu()).unwrap_err(), want);
    }
}

/// A decoder step loop over two caches (see the test below).
const KV_LOOP: &str = "
.input %x f32[6, 2, 5]
.input %order i32[6]
.output kc f16[2, 7, 5]
.output vc bf16[8, 5]
.output log i32[6]
.output wk i32[2, 2]
    ALLOC %kc: f16[2, 7, 5]
    FILL %kc, 0.0
    ALLOC %vc: bf16[8, 5]
    FILL %vc, -1.0
    ALLOC %log: i32[6]
    FILL %log, -9
    ALLOC %xf: f32[12, 5]
    RESHAPE %xf, %x
    ALLOC %step: f32[1, 2, 5]
    ALLOC %st: f32[2, 1, 5]
    ALLOC %h: f16[2, 1, 5]
    ALLOC %hv: f32[1, 5]
    ALLOC %row: bf16[1, 5]
    ALLOC %pos: i32[1]
    FILL %pos, 0
    ALLOC %am: i32[2, 1]
    ISET r0, 0
    ISET r1, 6
    ISET r6, 0
loop:
    SLICE %step, %x, 0, r0
    RESHAPE %st, %step
    CAST %h, %st
    PUT %kc, %h, 1, r0
    ARGMAX %am, %h
    TGET r3, %am, r6
    TSET %log, r0, r3
    TGET r2, %order, r0
    TSET %pos, r6, r2
    IADD r7, r0, r0
    SLICE %hv, %xf, 0, r7
    CAST %row, %hv
    SCATTER %vc, %row, %pos
    IADDI r0, r0, 1
    ILT r4, r0, r1
    JNZ r4, loop
    STORE kc, %kc
    STORE vc, %vc
    STORE log, %log
    ALLOC %win: f16[2, 2, 5]
    ISET r8, 3
    SLICE %win, %kc, 1, r8
    ALLOC %wk: i32[2, 2]
    ARGMAX %wk, %win
    STORE wk, %wk
    FREE %wk
    FREE %win
    FREE %am
    FREE %pos
    FREE %row
    FREE %hv
    FREE %h
    FREE %st
    FREE %step
    FREE %xf
    FREE %log
    FREE %vc
    FREE %kc
";

/// The key/value-cache pattern of a decoder: each step of a loop PUTs a new position into an
/// f16 cache at a register offset (rows of 5: windows that share words with their
/// neighbours), SCATTERs a row into a bf16 cache at a position TGET read from an input and
/// TSET wrote into an index tensor (positions repeat), and moves an ARGMAX of the step into a
/// log through a register (TGET, then TSET); after the loop a register-offset SLICE reads a
/// window of the cache back. Every output bit for bit the CPU's.
#[test]
fn a_decoder_loop_puts_and_scatters_into_caches_with_the_cpu_bits() {
    if !vulkan() {
        return;
    }
    let p = build(KV_LOOP);
    let x = awkward(60, 51, -8.0, 8.0);
    let order = [3, 0, 3, 7, 0, 3];
    let inputs = [("x", f32s(&[6, 2, 5], &x)), ("order", i32s(&[6], &order))];
    let out = same_bits("KV-cache loop", &p, &inputs);
    // Position 6 of the f16 cache was never PUT: still zeros; rows of the bf16 cache that no
    // step named keep -1 (bf16 0xbf80); row 3 holds the last step that named it (step 5).
    let kc = out["kc"].bytes();
    for head in 0..2 {
        let at = (head * 7 + 6) * 5 * 2;
        assert!(kc[at..at + 10].iter().all(|&b| b == 0), "head {head}: position 6 untouched");
    }
    let vc: Vec<u16> = bytemuck::pod_collect_to_vec(out["vc"].bytes());
    for row in [1, 2, 4, 5, 6] {
        assert!(vc[row * 5..row * 5 + 5].iter().all(|&h| h == 0xbf80), "row {row} kept");
    }
    use adeadvm::numerics as nx;
    let want3: Vec<u16> = x[50..55].iter().map(|&v| nx::f32_to_bf16_bits(nx::canon(v))).collect();
    assert_eq!(vc[15..20], want3[..], "the last step naming row 3 wins");
    assert!(out["log"].to_i32().unwrap().iter().all(|&k| (0..5).contains(&k)), "every step logged");
}

/// With `--backend vulkan` the decoder's instructions run on the device (each has GPU time in
/// an observed run), except TGET, which writes a register and so runs on the host.
#[test]
fn decoder_instructions_run_on_the_device() {
    if !vulkan() {
        return;
    }
    use adeadvm::vm::{Observer, StepEvent, Vm, Wants};
    struct Placed(BTreeMap<&'static str, BTreeSet<bool>>);
    impl Observer for Placed {
        fn wants(&self) -> Wants {
            Wants { timing: true, written: false }
        }
        fn step(&mut self, e: &StepEvent<'_>) -> std::ops::ControlFlow<()> {
            let name = e.instruction.insn.opcode().info().name;
            self.0.entry(name).or_default().insert(e.gpu_elapsed.is_some());
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut vm = Vm::new(build(KV_LOOP), gpu()).unwrap();
    vm.set_input("x", f32s(&[6, 2, 5], &Rng(5).vec(60, -3.0, 3.0))).unwrap();
    vm.set_input("order", i32s(&[6], &[3, 0, 3, 7, 0, 3])).unwrap();
    let mut seen = Placed(BTreeMap::new());
    vm.run_observed(&mut seen).unwrap();
    let on_gpu = BTreeSet::from([true]);
    // MATMUL's own test shows this device reports GPU times; here every decoder instruction.
    for op in ["SLICE_R", "PUT", "SCATTER", "TSET", "ARGMAX"] {
        assert_eq!(seen.0.get(op), Some(&on_gpu), "{op} on the device: {:?}", seen.0);
    }
    assert_eq!(seen.0.get("TGET"), Some(&BTreeSet::from([false])), "{:?}", seen.0);
}

/// Partial writes across placements: a cache written on the device, then PUT and TSET on the
/// CPU (the device's bytes come back first), then SCATTER and PUT on the device again (the
/// host's bytes go up first), in f16 and i32; every bit the CPU's.
#[test]
fn partial_writes_keep_their_destination_across_placements() {
    if !vulkan() {
        return;
    }
    let src = "
.input %x f32[4, 3]
.input %ix i32[2]
.output c f16[4, 3]
.output n i32[4, 3]
.output k i32[4]
    ALLOC %c: f16[4, 3]
    CAST %c, %x
    ALLOC %h: f16[2, 3]
    ISET r1, 1
    SLICE %h, %c, 0, r1
    ALLOC %one: f16[4, 1]
    SLICE %one, %c, 1, r1
    PUT@cpu %c, %one, 1, r1
    SCATTER@gpu %c, %h, %ix
    ISET r2, 2
    PUT@gpu %c, %one, 1, r2
    STORE c, %c
    ALLOC %n: i32[4, 3]
    CAST@gpu %n, %x
    ISET r3, 7
    ISET r4, 11
    TSET@cpu %n, r3, r4
    ISET r3, 2
    TSET@gpu %n, r3, r4
    STORE n, %n
    ALLOC %k: i32[4]
    ARGMAX@gpu %k, %c
    STORE k, %k
    FREE %k
    FREE %n
    FREE %one
    FREE %h
    FREE %c
";
    let x = awkward(16, 61, -9.0, 9.0)[..12].to_vec();
    let inputs = [("x", f32s(&[4, 3], &x)), ("ix", i32s(&[2], &[3, 0]))];
    let out = same_bits("partial writes across placements", &build(src), &inputs);
    let n = out["n"].to_i32().unwrap();
    assert_eq!((n[7], n[2]), (11, 11), "both TSETs landed");
}

/// Issue 34: MATMUL with N = 0 (or M = 0, K = 0) and a bias and an activation, on the VM's
/// Vulkan executor (lavapipe in CI): empty outputs, or the bias and activation alone for K = 0.
#[test]
fn matmul_with_an_empty_side_gives_an_empty_output_on_vulkan() {
    if !vulkan() {
        return;
    }
    check_matmul_with_an_empty_side(&gpu(), "Vulkan");
}

/// The VM's fast-tier MATMUL on the device with k cut into spans (`ADEADVM_VULKAN_SPLIT_K=1`
/// forces rows::matmul_split_k, which otherwise runs only where the output tiles are few on a
/// GPU): within an f32 sum's error of a float64 reference, as the unsplit kernel's.
#[test]
fn split_k_matmul_runs_in_the_vm() {
    if !vulkan() {
        return;
    }
    let (m, k, n) = (32usize, 1024usize, 64usize);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let x = rng.vec(m * k, -1.0, 1.0);
    let w = rng.vec(k * n, -1.0, 1.0);
    let bias = rng.vec(n, -1.0, 1.0);
    let src = format!(
        ".tier fast\n.input %x f32[{m}, {k}]\n.input %w f32[{k}, {n}]\n.input %c f32[{n}]\n.output y f32[{m}, {n}]\n    ALLOC %t: f32[{m}, {n}]\n    MATMUL %t, %x, %w, bias=%c, act=relu\n    STORE y, %t\n    FREE %t\n    HALT\n"
    );
    std::fs::write(dir.path().join("mm.s"), src).unwrap();
    for (name, v, shape) in [("x", &x, vec![m, k]), ("w", &w, vec![k, n]), ("c", &bias, vec![n])] {
        adeadvm::npy::write(&dir.path().join(format!("{name}.npy")), &f32s(&shape, v)).unwrap();
    }
    let run = |split: &str| {
        let out = dir.path().join(format!("y{split}.npy"));
        let status = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
            .current_dir(dir.path())
            .args([
                "run",
                "mm.s",
                "--backend",
                "vulkan",
                "-i",
                "x=x.npy",
                "-i",
                "w=w.npy",
                "-i",
                "c=c.npy",
                "-o",
            ])
            .arg(format!("y={}", out.display()))
            .env("ADEADVM_VULKAN_SPLIT_K", split)
            .output()
            .unwrap();
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
        adeadvm::npy::read(&out, None).unwrap().to_f32().unwrap()
    };
    let (split, unsplit) = (run("1"), run("0"));
    assert!(split != unsplit, "forcing split-k changed nothing: did it run?");
    let bound = (k as f64 + 2.0) * 2f64.powi(-24);
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (f64::from(bias[j]), f64::from(bias[j]).abs());
            for e in 0..k {
                let p = f64::from(x[i * k + e]) * f64::from(w[e * n + j]);
                s += p;
                mag += p.abs();
            }
            let want = s.max(0.0);
            for (what, got) in [("split", split[i * n + j]), ("unsplit", unsplit[i * n + j])] {
                let err = (f64::from(got) - want).abs() / mag;
                assert!(
                    err <= bound,
                    "{what} [{i}, {j}]: {got} against {want}, {err:.3e} of the magnitude sum"
                );
            }
        }
    }
}
