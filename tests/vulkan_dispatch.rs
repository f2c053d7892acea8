//! Pipelined submission: the work between two flushes of a `Recorder` is submitted in
//! sub-batches while recording goes on. Long chains of dependent dispatches that cross many
//! sub-batch boundaries must give the CPU reference's bits; downloads and timestamps recorded in
//! different sub-batches of one flush must read back correctly; and all of it with and without
//! VK_KHR_push_descriptor (the descriptor-pool fallback). With no Vulkan device these tests
//! skip, unless ADEADVM_REQUIRE_VULKAN=1 (CI), where a missing device fails them.

mod common;

use std::process::Command;
use std::sync::Arc;

use adeadvm::exec::cpu::reference::{self as r, Binary, Unary};
use adeadvm::exec::cpu::SimdLevel;
use adeadvm::exec::vulkan::ops::data;
use adeadvm::exec::vulkan::{Device, Recorder, VulkanExec, PUSH_DESCRIPTORS_ENV};
use adeadvm::isa::Tier;
use adeadvm::vm::{Backend, Vm, VmConfig};
use common::vk::{exec, required};
use common::*;

/// The shared executor (push descriptors where the device has them) and one on a device opened
/// without them; None (skipped) without Vulkan.
fn executors() -> Option<Vec<(&'static str, Arc<VulkanExec>)>> {
    let shared = exec()?;
    let dev = match Device::open_without_push_descriptors() {
        Ok(d) => Arc::new(d),
        Err(e) if required() => panic!("ADEADVM_REQUIRE_VULKAN=1 but the device does not open again: {e}"),
        Err(e) => {
            common::skip::skipped(
                "the dispatch cache against a device without push descriptors",
                &format!("the device does not open again ({e})"),
            );
            return None;
        }
    };
    assert!(!dev.uses_push_descriptors());
    println!("{}: push descriptors {}", dev.info().name, shared.device().uses_push_descriptors());
    let fallback = Arc::new(VulkanExec::with_device(dev).unwrap());
    let shared = Arc::new(VulkanExec::with_device(shared.device().clone()).unwrap());
    Some(vec![("default", shared), ("descriptor sets", fallback)])
}

/// One step of the chain on the host: x = tanh(x * 1.7 + 0.1), in the recorded order.
fn step_cpu(x: &mut Vec<f32>) {
    let mut t = vec![0f32; x.len()];
    r::binary_scalar(Binary::Mul, x, 1.7, &mut t);
    r::binary_scalar(Binary::Add, &t, 0.1, x);
    r::unary(Unary::Tanh, x, &mut t);
    *x = t;
}

#[test]
fn a_long_chain_crosses_sub_batches_with_downloads_and_timestamps() {
    let Some(executors) = executors() else { return };
    const N: usize = 1000;
    const STEPS: usize = 1500; // three dependent dispatches each
    const EVERY: usize = 100;
    let x0 = Rng(11).vec(N, -1.0, 1.0);
    for (what, ex) in &executors {
        let k = ex.kernels();
        let mut rec = Recorder::new(ex.device()).unwrap();
        let x = ex.upload(&mut rec, bytemuck::cast_slice(&x0)).unwrap();
        let t = ex.alloc(N as u64 * 4).unwrap();
        let mut want = x0.clone();
        let mut downloads = Vec::new();
        let mut stamps = Vec::new();
        let start = rec.submissions();
        for s in 0..STEPS {
            data::binary_scalar(k, &mut rec, Binary::Mul, &t, &x, 1.7, N).unwrap();
            data::binary_scalar(k, &mut rec, Binary::Add, &x, &t, 0.1, N).unwrap();
            data::unary(k, &mut rec, Unary::Tanh, Tier::Strict, &t, &x, N).unwrap();
            rec.copy(&t, &x).unwrap();
            step_cpu(&mut want);
            if s % EVERY == EVERY - 1 {
                downloads.push((want.clone(), rec.download(&x).unwrap()));
                stamps.extend(rec.timestamp().unwrap());
            }
        }
        assert!(rec.has_work());
        rec.flush().unwrap();
        assert!(!rec.has_work());
        let subs = rec.submissions() - start;
        assert!(subs >= 10, "{what}: {} commands went in {subs} submissions", STEPS * 4);
        for (i, (w, d)) in downloads.iter().enumerate() {
            let mut bytes = vec![0u8; N * 4];
            rec.read(d, &mut bytes).unwrap();
            let got: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
            let w: Vec<u32> = w.iter().map(|v| v.to_bits()).collect();
            let pos = got.iter().zip(&w).position(|(a, b)| a != b);
            assert!(pos.is_none(), "{what}: download {i} differs at element {pos:?}");
        }
        // Timestamps spread over every sub-batch of the flush measure growing spans.
        if let (Some(&first), Some(&last)) = (stamps.first(), stamps.last()) {
            let mut prev = std::time::Duration::ZERO;
            for &s in &stamps[1..] {
                let e = rec.elapsed(first, s).unwrap_or_else(|| panic!("{what}: no elapsed time"));
                assert!(e >= prev, "{what}: timestamps out of order");
                prev = e;
            }
            assert!(rec.elapsed(first, last).unwrap() > std::time::Duration::ZERO, "{what}");
        } else {
            println!("{what}: the device has no timestamps");
        }
        // The recorder goes on after the flush: a second, shorter flush.
        data::binary_scalar(k, &mut rec, Binary::Mul, &t, &x, 2.0, N).unwrap();
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &t).unwrap());
        let w: Vec<f32> = want.iter().map(|v| v * 2.0).collect();
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            w.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{what}: after the flush"
        );
    }
}

#[test]
fn a_recorder_dropped_with_work_in_flight_waits_for_it() {
    let Some(executors) = executors() else { return };
    for (_, ex) in &executors {
        let k = ex.kernels();
        let mut rec = Recorder::new(ex.device()).unwrap();
        let x = ex.alloc(4096).unwrap();
        data::fill(k, &mut rec, &x, 1024, 0).unwrap();
        for _ in 0..700 {
            data::binary_scalar(k, &mut rec, Binary::Add, &x, &x, 1.0, 1024).unwrap();
        }
        assert!(rec.submissions() >= 3);
        drop(x);
        drop(rec); // waits for the fences before freeing the slots (and the held buffer)
    }
}

/// The scalar CPU reference, one thread.
fn cpu_config() -> VmConfig {
    VmConfig { simd: Some(SimdLevel::Scalar), threads: Some(1), backend: Backend::Cpu, ..VmConfig::default() }
}

/// Every instruction on the Vulkan device.
fn gpu_config() -> VmConfig {
    VmConfig { backend: Backend::Vulkan, threads: Some(1), ..VmConfig::default() }
}

/// One step of the chain programs: six dependent instructions on %a, %b and %t.
const CHAIN_STEP: &str =
    "MUL %a, %a, 1.7\nADD %a, %a, %b\nTANH %a, %a\nMUL %b, %b, 0.9\nMUL %t, %a, 0.1\nADD %b, %b, %t\n";

/// The chain as a program: six dependent instructions a step, outputs stored on the way.
fn chain_program(steps: usize) -> String {
    let mut s = String::from(
        ".const %x f32[777] = rand(5)\n.const %y f32[777] = rand(6)\n\
         .output y0 f32[777]\n.output y1 f32[777]\n.output y2 f32[777]\n.output y f32[777]\n\
         ALLOC %a: f32[777]\nALLOC %b: f32[777]\nALLOC %t: f32[777]\nCOPY %a, %x\nCOPY %b, %y\n",
    );
    for i in 0..steps {
        s.push_str(CHAIN_STEP);
        if i % (steps / 3) == steps / 3 - 1 && i / (steps / 3) < 3 {
            s.push_str(&format!("STORE y{}, %a\n", i / (steps / 3)));
        }
    }
    s.push_str("STORE y, %b\nFREE %a\nFREE %b\nFREE %t\n");
    s
}

#[test]
fn a_program_of_thousands_of_dependent_instructions_matches_the_cpu() {
    let Some(_) = exec() else { return };
    let p = build(&chain_program(1000));
    let want = run_with(&p, &[], cpu_config()).unwrap();
    for round in 0..2 {
        let got = run_with(&p, &[], gpu_config()).unwrap();
        for (name, w) in &want {
            assert!(w.bytes() == got[name].bytes(), "round {round}: output {name} differs from the CPU");
        }
    }
}

#[test]
fn the_descriptor_set_fallback_gives_the_same_bits_in_a_run() {
    let Some(_) = exec() else { return };
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("chain.s");
    std::fs::write(&prog, chain_program(300)).unwrap();
    let run = |backend: &str, push: &str, out: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
            .args(["run", prog.to_str().unwrap(), "--backend", backend, "--output", &format!("y={out}")])
            .env(PUSH_DESCRIPTORS_ENV, push)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read(dir.path().join(out)).unwrap()
    };
    let want = run("cpu", "1", "cpu.npy");
    assert_eq!(run("vulkan", "1", "push.npy"), want, "with push descriptors");
    assert_eq!(run("vulkan", "0", "sets.npy"), want, "with descriptor sets");
}

/// The chain with its start as an input, a GATHER through an input table and a MATMUL with a
/// constant: what a model's repeated runs look like.
fn rerun_program(steps: usize) -> String {
    let mut s = String::from(
        ".input %x f32[777]\n.input %ids i32[5]\n.const %y f32[777] = rand(6)\n.const %w f32[777, 9] = rand(7)\n\
         .output y0 f32[777]\n.output y f32[777]\n.output g f32[5, 9]\n\
         ALLOC %a: f32[777]\nALLOC %b: f32[777]\nALLOC %t: f32[777]\nALLOC %g: f32[5, 9]\n\
         COPY %a, %x\nCOPY %b, %y\nGATHER %g, %w, %ids\nSTORE g, %g\n",
    );
    for i in 0..steps {
        s.push_str(CHAIN_STEP);
        if i == steps / 2 {
            s.push_str("STORE y0, %a\n");
        }
    }
    s.push_str("STORE y, %b\nFREE %a\nFREE %b\nFREE %t\nFREE %g\n");
    s
}

/// FREE of a tensor the GPU wrote ends it without bringing it back: a short program that frees
/// its temporaries mid-run gives the CPU's outputs in one submission (the flush at the end),
/// where a download per FREE would flush the batch at each.
#[test]
fn free_of_a_device_tensor_costs_no_download() {
    let Some(_) = exec() else { return };
    let p = build(
        ".input %x f32[4096]\n.output y f32[4096]\n\
         ALLOC %t: f32[4096]\nADD %t, %x, %x\nALLOC %u: f32[4096]\nMUL %u, %t, %t\nFREE %t\n\
         ALLOC %v: f32[4096]\nADD %v, %u, %x\nFREE %u\nEXP %v, %v\nSTORE y, %v\nFREE %v\n",
    );
    let x = f32s(&[4096], &Rng(7).vec(4096, -1.0, 1.0));
    let want = run_with(&p, &[("x", x.clone())], cpu_config()).unwrap();
    let mut vm = Vm::new(p, gpu_config()).unwrap();
    vm.set_input("x", x).unwrap();
    for run in 0..2 {
        let stats = vm.run().unwrap();
        assert!(want["y"].bytes() == vm.output("y").unwrap().bytes(), "run {run}: y differs from the CPU");
        assert_eq!(stats.gpu_submissions, 1, "run {run}: submissions");
    }
}

/// Runs of one VM with new inputs each time: every run gives the CPU's bits, and from the third
/// run on (the first also uploads the constants, which shifts its sub-batches) every sub-batch
/// is submitted from the command buffer the previous run encoded, where the device has push
/// descriptors (with descriptor sets, none is).
#[test]
fn later_runs_reuse_command_buffers_and_keep_the_bits() {
    let Some(ex) = exec() else { return };
    let p = build(&rerun_program(200));
    let mut vm = Vm::new(p.clone(), gpu_config()).unwrap();
    let pushes = ex.device().uses_push_descriptors();
    for run in 0..5u64 {
        let x = f32s(&[777], &Rng(100 + run).vec(777, -1.0, 1.0));
        let ids = i32s(&[5], &[run as i32, 3, 8, 776 - run as i32, 0]);
        let want = run_with(&p, &[("x", x.clone()), ("ids", ids.clone())], cpu_config()).unwrap();
        vm.set_input("x", x).unwrap();
        vm.set_input("ids", ids).unwrap();
        let stats = vm.run().unwrap();
        for (name, w) in &want {
            assert!(
                w.bytes() == vm.output(name).unwrap().bytes(),
                "run {run}: output {name} differs from the CPU"
            );
        }
        println!("run {run}: {} submissions, {} reused", stats.gpu_submissions, stats.gpu_reused);
        assert!(stats.gpu_submissions >= 10, "run {run}: {} submissions", stats.gpu_submissions);
        if run == 0 || !pushes {
            assert_eq!(stats.gpu_reused, 0, "run {run}");
        } else if run >= 2 {
            assert_eq!(stats.gpu_reused, stats.gpu_submissions, "run {run}: every sub-batch reused");
        }
    }
}

/// A sub-batch whose commands differ from the previous run's in one push constant is encoded
/// again (and computes with the new value); the others are reused. After a shorter run, the
/// sub-batches it did not reach are dropped from the cache (they are encoded again).
#[test]
fn a_changed_command_is_encoded_again() {
    let Some(ex) = exec() else { return };
    if !ex.device().uses_push_descriptors() {
        common::skip::skipped(
            "a_changed_command_is_encoded_again",
            &format!("{} has no push descriptors, so nothing is cached", ex.device().info().name),
        );
        return;
    }
    let k = ex.kernels();
    let mut rec = Recorder::new(ex.device()).unwrap();
    let x = ex.alloc(4 * 64).unwrap();
    const ADDS: usize = 300;
    let mut run = |adds: usize, changed: Option<usize>| {
        rec.begin_run();
        let (subs, reused) = (rec.submissions(), rec.reused());
        data::fill(k, &mut rec, &x, 64, 0).unwrap();
        for i in 0..adds {
            let v = if Some(i) == changed { 2.0 } else { 1.0 };
            data::binary_scalar(k, &mut rec, Binary::Add, &x, &x, v, 64).unwrap();
        }
        let d = rec.download(&x).unwrap();
        rec.flush().unwrap();
        let mut out = vec![0u8; 4 * 64];
        rec.read(&d, &mut out).unwrap();
        rec.clear_downloads();
        (bytemuck::pod_collect_to_vec::<u8, f32>(&out), rec.submissions() - subs, rec.reused() - reused)
    };
    let (first, subs, reused) = run(ADDS, None);
    assert!(first.iter().all(|&v| v == ADDS as f32) && subs >= 5 && reused == 0, "{subs} {reused}");
    let (same, subs2, reused) = run(ADDS, None);
    assert!(same == first && subs2 == subs && reused == subs, "{subs2} submissions, {reused} reused");
    let (changed, subs3, reused) = run(ADDS, Some(250));
    assert!(changed.iter().all(|&v| v == ADDS as f32 + 1.0), "the changed constant was not used");
    assert_eq!((subs3, reused), (subs, subs - 1), "only the changed sub-batch is encoded again");
    let (back, _, reused) = run(ADDS, None);
    assert!(back == first && reused == subs - 1, "{reused}");
    // A third of the work: its first sub-batches are the long run's, its last one is not.
    let (short, _, prefix) = run(ADDS / 3, None);
    assert!(short.iter().all(|&v| v == (ADDS / 3) as f32) && prefix >= 1 && prefix < subs - 1, "{prefix}");
    let (again, _, reused) = run(ADDS, None);
    assert!(again == first && reused == prefix, "{reused} reused after a short run that reused {prefix}");
}

/// Nanoseconds this thread has run on a CPU, or None.
fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    ok.then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The host's cost of recording one small dispatch (what `adeadvm bench dispatch` spends per
/// instruction in the recorder), in thread CPU time so that waiting for the device is left out:
/// `cargo test --release --test vulkan_dispatch -- --ignored --nocapture`.
#[test]
#[ignore]
fn recording_cost_per_dispatch() {
    let Some(executors) = executors() else { return };
    const COUNT: usize = 2000;
    for (what, ex) in &executors {
        let k = ex.kernels();
        let mut rec = Recorder::new(ex.device()).unwrap();
        let x = ex.alloc(4).unwrap();
        data::fill(k, &mut rec, &x, 1, 0).unwrap();
        rec.flush().unwrap();
        let mut best = u64::MAX;
        for _ in 0..8 {
            let (c0, w0) = (thread_cpu_ns(), std::time::Instant::now());
            for _ in 0..COUNT {
                data::binary_scalar(k, &mut rec, Binary::Add, &x, &x, 1.0, 1).unwrap();
            }
            let (c1, wall) = (thread_cpu_ns(), w0.elapsed());
            rec.flush().unwrap();
            let cpu = c0.zip(c1).map(|(a, b)| (b - a) / COUNT as u64);
            println!(
                "{what}: recording {} ns of thread CPU per dispatch ({} ns wall), {} submissions so far",
                cpu.map_or("?".into(), |c| c.to_string()),
                wall.as_nanos() / COUNT as u128,
                rec.submissions()
            );
            best = best.min(cpu.unwrap_or(u64::MAX));
        }
        println!("{what}: best {best} ns per dispatch");
    }
}
