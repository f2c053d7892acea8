//! One problem, every CPU executor configuration: the scalar reference, each SIMD level this CPU
//! has, and 1 to 3 worker threads must give the same bits in the strict tier.

mod common;

use std::ops::ControlFlow;
use std::sync::Arc;

use adeadvm::exec::cpu::SimdLevel;
use adeadvm::verify::VerifiedProgram;
use adeadvm::vm::{HostTensor, Observer, StepEvent, Vm, VmConfig, Wants};
use common::*;

fn configs() -> Vec<VmConfig> {
    let mut levels = vec![SimdLevel::Scalar];
    for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
        if l <= SimdLevel::detect() {
            levels.push(l);
        } else {
            common::skip::skipped(
                &format!("the {} executor configurations", l.name()),
                &format!("this CPU has no {}", l.name()),
            );
        }
    }
    let mut out = Vec::new();
    for simd in levels {
        for threads in [1, 2, 3] {
            out.push(VmConfig { simd: Some(simd), threads: Some(threads), ..VmConfig::default() });
        }
    }
    // 8 (the most a 2-core machine allows): the GEMM shares its packing between threads and
    // runs small batched products side by side from there, as on a many-core host.
    out.push(VmConfig { simd: Some(SimdLevel::detect()), threads: Some(8), ..VmConfig::default() });
    out
}

fn assert_same_everywhere(what: &str, program: &Arc<VerifiedProgram>, inputs: &[(&str, HostTensor)]) {
    let mut runs = configs().into_iter().map(|c| {
        let label = format!("{:?} x{}", c.simd.unwrap(), c.threads.unwrap());
        (label, run_with(program, inputs, c).unwrap_or_else(|e| panic!("{what}: {e}")))
    });
    let (first_label, first) = runs.next().unwrap();
    for (label, outs) in runs {
        for (name, t) in &first {
            let o = &outs[name];
            if o != t {
                let pos = o.bytes().iter().zip(t.bytes()).position(|(a, b)| a != b).unwrap_or(0) / 4;
                panic!("{what}: output {name} differs between {first_label} and {label} (first at element {pos})");
            }
        }
    }
}

#[test]
fn example_programs_give_the_same_bits_on_every_cpu_configuration() {
    assert_same_everywhere("mlp.s", &program_file("mlp.s"), &[("x", data("mlp_x.npy"))]);
    assert_same_everywhere(
        "attention.s",
        &program_file("attention.s"),
        &[("x", data("attention_x.npy")), ("mask", data("attention_mask.npy"))],
    );
    assert_same_everywhere("ffn.s", &program_file("ffn.s"), &[("x", data("ffn_x.npy"))]);
    assert_same_everywhere("loop.s", &program_file("loop.s"), &[("x", data("loop_x.npy"))]);
}

/// Every float opcode with a SIMD path, on awkward sizes (tails, rows longer than 256) and
/// awkward values (denormals, ±0, ±inf, NaN, huge and tiny).
#[test]
fn every_kernel_gives_the_same_bits_on_every_cpu_configuration() {
    let (r, c) = (37, 301);
    let mut rng = Rng(99);
    let mut x = rng.vec(r * c, -30.0, 30.0);
    for (i, v) in SPECIALS.iter().enumerate() {
        x[i * 97 % (r * c)] = *v;
    }
    let w = rng.vec(c * 19, -1.0, 1.0);
    let src = format!(
        ".input %x f32[{r}, {c}]\n.input %w f32[{c}, 19]\n.const %g f32[{c}] = fill(1.5)\n.const %b f32[19] = fill(0.25)\n\
         .output u f32[{r}, {c}]\n.output m f32[{r}, 19]\n.output s f32[{r}, {c}]\n.output l f32[{r}, {c}]\n.output q f32[{r}, {c}]\n\
         .output red f32[{c}]\n.output mx f32[{r}]\n.output bn f32[{r}, {c}]\n\
         ALLOC %t: f32[{r}, {c}]\nALLOC %t2: f32[{r}, {c}]\n\
         EXP %t, %x\nTANH %t2, %t\nGELU %t, %t2\nSIGMOID %t2, %t\nLOG %t, %t2\nRSQRT %t2, %t\nSQRT %t, %t2\nSTORE u, %t\n\
         ALLOC %m: f32[{r}, 19]\nMATMUL %m, %x, %w, bias=%b, act=gelu\nSTORE m, %m\nFREE %m\n\
         SOFTMAX %t, %x, scale=0.7\nSTORE s, %t\n\
         LAYERNORM %t, %x, gamma=%g, eps=1e-6\nSTORE l, %t\n\
         RMSNORM %t, %x, gamma=%g\nSTORE q, %t\n\
         ALLOC %red: f32[{c}]\nREDUCE_SUM %red, %x, 0\nSTORE red, %red\nFREE %red\n\
         ALLOC %mx: f32[{r}]\nREDUCE_MAX %mx, %x, 1\nSTORE mx, %mx\nFREE %mx\n\
         DIV %t2, %x, %g\nMUL %t, %t2, 0.3\nMAX %t2, %t, -1.0\nSUB %t, %t2, %x\nSTORE bn, %t\n\
         FREE %t\nFREE %t2\n"
    );
    let program = build(&src);
    assert_same_everywhere("kernels", &program, &[("x", f32s(&[r, c], &x)), ("w", f32s(&[c, 19], &w))]);
}

/// The steps an observer that asks for nothing sees (so batches may form): index, flops, bytes.
#[derive(Default)]
struct Costs(Vec<(usize, u64, u64)>);

impl Observer for Costs {
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        self.0.push((e.index, e.flops, e.bytes));
        ControlFlow::Continue(())
    }
    fn wants(&self) -> Wants {
        Wants::default()
    }
}

/// Independent instructions run at the same time: several large kernels reading one input, a
/// dependent chain, and a freed temporary whose bytes a later one may reuse while an earlier
/// reader is still in the same stretch of code. Every configuration gives program order's bits,
/// with worker threads the run really did batch instructions, and the observer sees the steps
/// and costs of program order.
#[test]
fn independent_instructions_run_together_with_the_same_bits() {
    let (r, c) = (64, 515);
    let mut rng = Rng(7);
    let mut x = rng.vec(r * c, -4.0, 4.0);
    for (i, v) in SPECIALS.iter().enumerate() {
        x[i * 131 % (r * c)] = *v;
    }
    let w = rng.vec(c * 40, -1.0, 1.0);
    let src = format!(
        ".input %x f32[{r}, {c}]\n.input %w f32[{c}, 40]\n.const %g f32[{c}] = fill(0.5)\n\
         .output a f32[{r}, {c}]\n.output b f32[{r}, {c}]\n.output m f32[{r}, 40]\n.output s f32[{r}, {c}]\n\
         .output t f32[{r}, {c}]\n.output e f32[{r}, {c}]\n.output n f32[{r}, {c}]\n.output red f32[{c}]\n\
         ALLOC %a: f32[{r}, {c}]\nALLOC %b: f32[{r}, {c}]\nALLOC %m: f32[{r}, 40]\nALLOC %s: f32[{r}, {c}]\n\
         EXP %a, %x\nTANH %b, %x\nMATMUL %m, %x, %w, act=gelu\nSOFTMAX %s, %x, scale=0.5\n\
         STORE a, %a\nSTORE b, %b\nSTORE m, %m\nSTORE s, %s\nFREE %m\nFREE %s\n\
         ALLOC %t: f32[{r}, {c}]\nGELU %t, %a\nFREE %a\nALLOC %e: f32[{r}, {c}]\nADD %e, %b, %x\n\
         ALLOC %n: f32[{r}, {c}]\nLAYERNORM %n, %t, gamma=%g\nALLOC %red: f32[{c}]\nREDUCE_SUM %red, %b, 0\n\
         STORE t, %t\nSTORE e, %e\nSTORE n, %n\nSTORE red, %red\nFREE %t\nFREE %b\nFREE %e\nFREE %n\nFREE %red\n"
    );
    let program = build(&src);
    let inputs = [("x", f32s(&[r, c], &x)), ("w", f32s(&[c, 40], &w))];
    assert_same_everywhere("independent", &program, &inputs);
    let mut in_order = Costs::default();
    for threads in [1, 2, 3] {
        let mut vm =
            Vm::new(program.clone(), VmConfig { threads: Some(threads), ..VmConfig::default() }).unwrap();
        for (name, t) in &inputs {
            vm.set_input(name, t.clone()).unwrap();
        }
        let mut costs = Costs::default();
        let stats = vm.run_observed(&mut costs).unwrap();
        if threads == 1 {
            assert_eq!(stats.concurrent, 0, "one thread runs everything in order");
            in_order = costs;
        } else {
            assert_eq!(costs.0, in_order.0, "{threads} threads: the steps and costs of program order");
            // EXP, TANH, MATMUL and SOFTMAX; then GELU with REDUCE_SUM's neighbours at most.
            assert!(
                stats.concurrent >= 4,
                "{threads} threads: {} instructions ran concurrently",
                stats.concurrent
            );
        }
    }
}

/// EQ, LT, LE, SELECT and ERF (tests/common/cmpsel.rs: every dtype, broadcasting, an expand,
/// special values) on tensors of tens of thousands of elements: every configuration gives the
/// same bits, those bits are the model's, and with worker threads the independent comparisons
/// (f32 and i32 sources) and then the independent SELECTs ran as batches.
#[test]
fn comparisons_and_select_give_the_model_bits_on_every_cpu_configuration_and_in_batches() {
    let (r, c) = (96, 515);
    let inputs = cmpsel::inputs(0xc0de, r, c);
    let program = build(&cmpsel::program(r, c, &[""]));
    let ins: Vec<(&str, HostTensor)> = inputs.tensors.iter().map(|(n, t)| (*n, t.clone())).collect();
    assert_same_everywhere("comparisons and SELECT", &program, &ins);
    for config in [configs()[0].clone(), configs().pop().unwrap()] {
        let what = format!("{:?} x{}", config.simd.unwrap(), config.threads.unwrap());
        let outs = run_with(&program, &ins, config).unwrap_or_else(|e| panic!("{what}: {e}"));
        cmpsel::check_model(&inputs, &outs, &what);
    }
    let mut in_order = Costs::default();
    for threads in [1, 2, 3] {
        let mut vm =
            Vm::new(program.clone(), VmConfig { threads: Some(threads), ..VmConfig::default() }).unwrap();
        for (name, t) in &ins {
            vm.set_input(name, t.clone()).unwrap();
        }
        let mut costs = Costs::default();
        let stats = vm.run_observed(&mut costs).unwrap();
        if threads == 1 {
            assert_eq!(stats.concurrent, 0, "one thread runs everything in order");
            in_order = costs;
            continue;
        }
        assert_eq!(costs.0, in_order.0, "{threads} threads: the steps and costs of program order");
        // EQ, LT, LE, EQ, LT and ERF; then the four 32-bit SELECTs.
        assert_eq!(stats.concurrent, 10, "{threads} threads: instructions that ran in batches");
    }
}

/// Issue 34: MATMUL with N = 0 and a bias or an activation divided by zero in the SIMD
/// epilogue. Every configuration (the scalar reference, each SIMD level, 1 to 3 threads) gives
/// empty outputs for N = 0 and M = 0, and the bias and activation alone for K = 0.
#[test]
fn matmul_with_an_empty_side_gives_an_empty_output_on_every_cpu_configuration() {
    for config in configs() {
        let what = format!("{:?} x{}", config.simd.unwrap(), config.threads.unwrap());
        check_matmul_with_an_empty_side(&config, &what);
    }
}
